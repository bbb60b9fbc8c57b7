"""The patched engine: the fork's compute-share scheduler as a vLLM scheduler plugin.

`engine.patched.scheduler.PatchedScheduler` (sync) and `AsyncPatchedScheduler` (async) load
into a real vLLM with `--scheduler-cls`; `engine.patched.config` reads their settings from
`--additional-config`; `engine.patched.launch` starts a local vLLM with the plugin. This
package imports nothing on its own, so importing it does not import vLLM.
"""
