"""Kit definitions, orchestration of runs and A/B runs, and the `kit` command line."""

if not __name__.startswith("stallkit."):  # one module object per file (see contract.faces)
    raise ImportError(f"stallkit's {__name__!r} package imports as 'stallkit.{__name__}'")
