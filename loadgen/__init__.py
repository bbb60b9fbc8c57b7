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

from contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from loadgen.agent import Action as Action
    from loadgen.agent import AgentMachine as AgentMachine
    from loadgen.agent import Done as Done
    from loadgen.agent import Send as Send
    from loadgen.agent import Wait as Wait
    from loadgen.config import LoadConfig as LoadConfig
    from loadgen.config import sizes_for_context as sizes_for_context
    from loadgen.conversation import WordConversation as WordConversation
    from loadgen.errors import LoadError as LoadError
    from loadgen.export import mooncake_lines as mooncake_lines
    from loadgen.export import workload_calls as workload_calls
    from loadgen.preflight import ServerInfo as ServerInfo
    from loadgen.progress import LoadProgress as LoadProgress
    from loadgen.progress import live_progress as live_progress
    from loadgen.progress import summary_table as summary_table
    from loadgen.records import TURNS_FILE as TURNS_FILE
    from loadgen.records import Outcome as Outcome
    from loadgen.records import PromptPart as PromptPart
    from loadgen.records import RecordWriter as RecordWriter
    from loadgen.records import TurnRecord as TurnRecord
    from loadgen.records import read_records as read_records
    from loadgen.replay import Workload as Workload
    from loadgen.replay import load_trace as load_trace
    from loadgen.replay import trace_replay as trace_replay
    from loadgen.replay import workload_for as workload_for
    from loadgen.run import AgentState as AgentState
    from loadgen.run import RunFinished as RunFinished
    from loadgen.run import TurnFinished as TurnFinished
    from loadgen.run import run_agents as run_agents
    from loadgen.summary import LoadSummary as LoadSummary
    from loadgen.summary import summarize as summarize
    from loadgen.tracestats import TraceStats as TraceStats
    from loadgen.tracestats import trace_stats as trace_stats

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
