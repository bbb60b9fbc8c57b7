"""Prometheus, both ways: a client of its HTTP API and the queries the fleet monitor asks; the
stall rule as recording and alerting rules, a timeline as promtool input series, and when
the alerts would have fired over a history.
"""
