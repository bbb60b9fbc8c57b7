"""The stall detector and the monitor's pure step: timed samples in, typed events out. No clock,
no I/O.
"""
