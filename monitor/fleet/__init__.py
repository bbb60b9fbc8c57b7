"""Fleet watch through Prometheus: the detector bank (one step per engine), the query loop,
the session, its sinks and its live view.
"""
