"""Corpus overlay: vLLM's own scheduler module, with one fix applied on top.

The module's source is the installed vLLM's, executed here unchanged; then `Scheduler.schedule`
is wrapped so that, before each pass, a request in `kv_holding_waiting` that holds no KV
blocks any more (an async load that failed under `kv_load_failure_policy = "recompute"` and
was rewound to its first token, its blocks freed) moves to the front of `waiting` and drops
its in-flight prefill reservation. Without the move, the pass (which drains
`kv_holding_waiting` first and stops at the first request it cannot allocate) stops at that
block-less request ahead of finished loads holding the blocks it needs; without the drop, its
whole sequence stays reserved against every later async load, its own retry included.
"""

from pathlib import Path

import vllm.v1.core.sched as _package

_HERE = Path(__file__).resolve()
_INSTALLED = next(
    path
    for path in (Path(location) / "scheduler.py" for location in _package.__path__)
    if path.is_file() and path.resolve() != _HERE
)
exec(compile(_INSTALLED.read_text(encoding="utf-8"), str(_INSTALLED), "exec"), globals())

_schedule = Scheduler.schedule  # type: ignore[name-defined]  # noqa: F821


def _schedule_without_stranding(self):  # type: ignore[no-untyped-def]
    stranded = [r for r in self.kv_holding_waiting if not self._holds_kv_blocks(r)]
    if stranded:
        self.kv_holding_waiting.remove_requests(stranded)
        self.waiting.prepend_requests(stranded)
        self._inflight_prefills.difference_update(stranded)
    return _schedule(self)


Scheduler.schedule = _schedule_without_stranding  # type: ignore[name-defined]  # noqa: F821
