"""`kit run` / `kit ab`: the plan (arms, seeds, clocks, run directories, decided up front) and
its execution over every arm and seed, then the reports.
"""
