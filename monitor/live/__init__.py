"""Watching one engine live: the monitor loop over `/metrics` and GPU readings, the session
that feeds the timeline and the view, the dashboard, and the timeline writer.
"""
