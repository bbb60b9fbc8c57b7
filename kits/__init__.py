"""Kit definitions, orchestration of runs and A/B runs, and the `kit` command line."""
