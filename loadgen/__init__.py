"""The agents: workload model, prompt sizing, streaming client and turn records.

The names below are the package's public face, for the orchestration: the load's settings,
the server's preflight answer, the agents' run and its events, the agent state machine (for
drivers that own the clock), turn records and their summary, and the live progress view.
Each is imported from its module on first use, so `import loadgen` itself imports nothing.
The preflight check itself is `loadgen.preflight.preflight`: a face cannot carry a name that
is also one of its package's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import lazy_face

if TYPE_CHECKING:
    from loadgen.agent import Action, AgentMachine, Done, Send, Wait
    from loadgen.config import LoadConfig, sizes_for_context
    from loadgen.errors import LoadError
    from loadgen.preflight import ServerInfo
    from loadgen.progress import LoadProgress, live_progress, summary_table
    from loadgen.records import TURNS_FILE, Outcome, RecordWriter, TurnRecord, read_records
    from loadgen.run import AgentState, RunFinished, TurnFinished, run_agents
    from loadgen.summary import LoadSummary, summarize

#: public name -> the module that defines it
_LAZY = {
    "LoadConfig": "loadgen.config",
    "sizes_for_context": "loadgen.config",
    "LoadError": "loadgen.errors",
    "ServerInfo": "loadgen.preflight",
    "AgentState": "loadgen.run",
    "RunFinished": "loadgen.run",
    "TurnFinished": "loadgen.run",
    "run_agents": "loadgen.run",
    "Action": "loadgen.agent",
    "AgentMachine": "loadgen.agent",
    "Done": "loadgen.agent",
    "Send": "loadgen.agent",
    "Wait": "loadgen.agent",
    "TURNS_FILE": "loadgen.records",
    "Outcome": "loadgen.records",
    "RecordWriter": "loadgen.records",
    "TurnRecord": "loadgen.records",
    "read_records": "loadgen.records",
    "LoadSummary": "loadgen.summary",
    "summarize": "loadgen.summary",
    "LoadProgress": "loadgen.progress",
    "live_progress": "loadgen.progress",
    "summary_table": "loadgen.progress",
}

__all__ = [
    "TURNS_FILE",
    "Action",
    "AgentMachine",
    "AgentState",
    "Done",
    "LoadConfig",
    "LoadError",
    "LoadProgress",
    "LoadSummary",
    "Outcome",
    "RecordWriter",
    "RunFinished",
    "Send",
    "ServerInfo",
    "TurnFinished",
    "TurnRecord",
    "Wait",
    "live_progress",
    "read_records",
    "run_agents",
    "sizes_for_context",
    "summarize",
    "summary_table",
]

if not TYPE_CHECKING:  # mypy reads the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_face(__name__, _LAZY)
