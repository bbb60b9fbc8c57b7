"""Traces as a workload: replay (a trace's sessions become agents), a trace's window, what a
trace asks of an engine, and a run or a kit's workload exported as a trace.
"""
