"""The agents: workload model, prompt sizing, streaming client and turn records.

The names below are the package's public face, for the orchestration: the load's settings,
the server's preflight answer, the agents' run and its events, the agent state machine (for
drivers that own the clock), turn records and their summary, and the live progress view.
Each is imported from its module on first use, so `import stallkit.loadgen` itself imports nothing.
The preflight check itself is `stallkit.loadgen.preflight.preflight`: a face cannot carry a name that
is also one of its package's modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stallkit.contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from stallkit.contract.summary import LoadSummary as LoadSummary
    from stallkit.contract.summary import summarize as summarize
    from stallkit.loadgen.agent import Action as Action
    from stallkit.loadgen.agent import AgentMachine as AgentMachine
    from stallkit.loadgen.agent import Done as Done
    from stallkit.loadgen.agent import Send as Send
    from stallkit.loadgen.agent import Wait as Wait
    from stallkit.loadgen.agents import AgentState as AgentState
    from stallkit.loadgen.agents import RunFinished as RunFinished
    from stallkit.loadgen.agents import TurnFinished as TurnFinished
    from stallkit.loadgen.agents import run_agents as run_agents
    from stallkit.loadgen.arrivals import rates_in_wall as rates_in_wall
    from stallkit.loadgen.config import LoadConfig as LoadConfig
    from stallkit.loadgen.config import sizes_for_context as sizes_for_context
    from stallkit.loadgen.config import sizes_for_unset as sizes_for_unset
    from stallkit.loadgen.conversation import WordConversation as WordConversation
    from stallkit.loadgen.errors import LoadError as LoadError
    from stallkit.loadgen.preflight import ServerInfo as ServerInfo
    from stallkit.loadgen.progress import LoadProgress as LoadProgress
    from stallkit.loadgen.progress import live_progress as live_progress
    from stallkit.loadgen.progress import summary_table as summary_table
    from stallkit.loadgen.records import TURNS_FILE as TURNS_FILE
    from stallkit.loadgen.records import Outcome as Outcome
    from stallkit.loadgen.records import PromptPart as PromptPart
    from stallkit.loadgen.records import RecordWriter as RecordWriter
    from stallkit.loadgen.records import TurnRecord as TurnRecord
    from stallkit.loadgen.records import read_records as read_records
    from stallkit.loadgen.traces.export import mooncake_lines as mooncake_lines
    from stallkit.loadgen.traces.export import workload_calls as workload_calls
    from stallkit.loadgen.traces.replay import Workload as Workload
    from stallkit.loadgen.traces.replay import load_trace as load_trace
    from stallkit.loadgen.traces.replay import trace_replay as trace_replay
    from stallkit.loadgen.traces.replay import workload_for as workload_for
    from stallkit.loadgen.traces.stats import TraceStats as TraceStats
    from stallkit.loadgen.traces.stats import trace_stats as trace_stats

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
