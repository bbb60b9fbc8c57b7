"""The patched engine: the fork's compute-share scheduler as a vLLM scheduler plugin.

`stallkit.engine.vllm_plugin.scheduler.PatchedScheduler` (sync) and `AsyncPatchedScheduler` (async) load
into a real vLLM with `--scheduler-cls`; `stallkit.engine.vllm_plugin.config` reads their settings from
`--additional-config`; `stallkit.engine.launch.patched` starts a local vLLM with the plugin. This
package imports nothing on its own, so importing it does not import vLLM.
"""
