"""The patched engine: the fork's compute-share scheduler as a vLLM scheduler plugin.

`stallkit.engine.vllm_plugin.scheduler.PatchedScheduler` (sync) and `AsyncPatchedScheduler` (async) load
into a real vLLM with `--scheduler-cls`; `stallkit.engine.vllm_plugin.config` reads their settings from
`--additional-config`; `stallkit.engine.launch.patched` starts a local vLLM with the plugin. This
package imports nothing on its own, so importing it does not import vLLM; it names the
classes' paths once, for every launcher and the twin.
"""

#: the module holding the plugin's scheduler classes (not imported here: it imports vLLM)
SCHEDULER_MODULE = f"{__name__}.scheduler"
#: `--scheduler-cls` for vLLM's synchronous engine loop
PATCHED_SCHEDULER = f"{SCHEDULER_MODULE}.PatchedScheduler"
#: `--scheduler-cls` with `--async-scheduling`
ASYNC_PATCHED_SCHEDULER = f"{SCHEDULER_MODULE}.AsyncPatchedScheduler"
#: the module the plugin's classes lived in before the project took one import name
OLD_SCHEDULER_MODULE = "engine.patched.scheduler"


def renamed_plugin_path(text: str) -> str | None:
    """A one-line note when `text` (an engine argument, a class path) names the plugin by its
    old module path, with the path that replaced it; None otherwise."""
    for old_class in ("PatchedScheduler", "AsyncPatchedScheduler"):
        old = f"{OLD_SCHEDULER_MODULE}.{old_class}"
        at = text.find(old)
        if at >= 0 and not text[:at].endswith("stallkit."):
            return f"{old} is now {SCHEDULER_MODULE}.{old_class}"
    return None
