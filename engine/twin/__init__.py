"""The twin: vLLM's own v1 scheduler class driven in process with no model, on engine time.

`stallkit.engine.twin.config` (settings, no vLLM import) and `stallkit.engine.twin.tokens` (the word to token-id
map) are pure; `stallkit.engine.twin.overlay` puts a source tree's modules ahead of the installed ones;
`stallkit.engine.twin.build` makes vLLM's configs and the scheduler; `stallkit.engine.twin.core.TwinEngine` is
the engine core the virtual clock and the HTTP front drive. Only `build` and `core` import vLLM.
"""
