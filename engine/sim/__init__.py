"""The simulated engine: a discrete-step model of the fork's compute-share scheduler (pure core
in `core`, `scheduler`, `blocks`, `controller`, `config`), its regression trace, a sustained-load
driver, and an HTTP front that serves the core like vLLM."""
