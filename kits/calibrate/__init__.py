"""`kit engine calibrate`: the probes sent to a real engine, their timings as cost samples, and
the fit of the twin's step cost model.
"""
