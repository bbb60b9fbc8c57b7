"""Backtest: the stall detector replayed over a fleet's history (pure), and the history's
sources (Prometheus `query_range`, or a file).
"""
