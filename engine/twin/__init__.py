"""The twin: vLLM's own v1 scheduler class driven in process with no model, on engine time.

`engine.twin.config` (settings, no vLLM import) and `engine.twin.tokens` (the word to token-id
map) are pure; `engine.twin.overlay` puts a source tree's modules ahead of the installed ones;
`engine.twin.build` makes vLLM's configs and the scheduler; `engine.twin.core.TwinEngine` is
the engine core the virtual clock and the HTTP front drive. Only `build` and `core` import vLLM.
"""
