"""The vLLM-shaped HTTP front over any stepped engine core (the simulator or the twin): the
OpenAI wire format, routes, `/metrics` and DCGM pages, the in-loop driver, and
`python -m stallkit.engine.serve`.
"""
