"""The load generator's configuration: one frozen, validated model for a whole load run.

Every duration here is in the agents' own seconds (wall seconds over HTTP). Each duration field
declares in its schema (`json_schema_extra["unit"]`) whether a kit gives it in engine seconds
(converted with the arm's time base before the agents see it) or in wall seconds (a TCP
timeout means the same on any engine). The API key itself never appears here, only the name
of the environment variable that holds it, so the resolved config can be saved next to the
records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stallkit.contract.flags import Flag
from stallkit.loadgen.arrivals import Process, Segment, Stage, Unit, expected_count, segments

#: the most agents one load may run (each is a task holding a conversation in memory)
MAX_AGENTS = 100_000


class LoadConfig(BaseModel):
    """How many agents, how large their contexts grow, how they pace and retry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agents: Annotated[int, Flag("--agents")] = Field(
        12,
        ge=1,
        le=MAX_AGENTS,
        description="Concurrent agents (the load's concurrency; each is a task holding a "
        "conversation, so at most 100,000).",
    )
    min_context: Annotated[int, Flag("--min-context")] = Field(
        40_000, ge=16, description="Lower context bound in tokens; sessions (re)start near it."
    )
    max_context: Annotated[int, Flag("--max-context")] = Field(
        100_000,
        ge=32,
        description="Upper bound in tokens on prompt plus reply; a session that would pass it "
        "restarts as a new conversation near min_context.",
    )
    restart_spread: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="A new session's first prompt is drawn from min_context up to this fraction "
        "of the (max_context - min_context) range above it.",
    )
    system_prompt_tokens: int = Field(
        1000, ge=1, description="Approximate size in words of each session's system prompt."
    )
    shared_system_prompt: bool = Field(
        False,
        description="All agents use the same system prompt (a prefix shared across agents); "
        "otherwise every session's prompt is distinct.",
    )
    new_tokens_min: int = Field(
        500, ge=1, description="Smallest new content (tool output or user message) per turn."
    )
    new_tokens_max: int = Field(4000, ge=1, description="Largest new content per turn.")
    reply_tokens_min: int = Field(100, ge=1, description="Smallest reply (max_tokens) per turn.")
    reply_tokens_max: int = Field(1000, ge=1, description="Largest reply (max_tokens) per turn.")
    think_min_s: float = Field(
        1.0,
        ge=0.0,
        description="Shortest pause between turns (s).",
        json_schema_extra={"unit": "engine"},
    )
    think_max_s: float = Field(
        10.0,
        ge=0.0,
        description="Longest pause between turns (s).",
        json_schema_extra={"unit": "engine"},
    )
    stagger_s: float = Field(
        2.0,
        ge=0.0,
        description="Agent i starts at about i * stagger_s seconds.",
        json_schema_extra={"unit": "engine"},
    )
    read_timeout_s: float = Field(
        600.0,
        gt=0.0,
        description="Abort a request when no byte arrives for this long (engine s), counted "
        "from the last byte received.",
        json_schema_extra={"unit": "engine"},
    )
    connect_timeout_s: float = Field(
        10.0,
        gt=0.0,
        description="TCP connect timeout (wall s).",
        json_schema_extra={"unit": "wall"},
    )
    duration_s: Annotated[float | None, Flag("--duration")] = Field(
        None,
        gt=0.0,
        description=(
            "Stop after this many seconds (engine seconds in a kit; `kit load` counts wall "
            "seconds); unset: run until stopped."
        ),
        json_schema_extra={"unit": "engine"},
    )
    max_turns: int | None = Field(
        None, ge=1, description="Turns per agent (attempts excluded), then the agent is done."
    )
    seed: Annotated[int, Flag("--seed")] = Field(
        0, description="Seed of every size, pause and text in the workload."
    )
    max_retries: int = Field(
        1,
        ge=0,
        description="Retries of a failed turn (after its pause) before the agent drops it and "
        "moves on; 0 moves on at once.",
    )
    request_rate: float | None = Field(
        None, gt=0.0, description="Cap on requests started per second across all agents."
    )
    arrivals: Process | None = Field(
        None,
        description="When turns start: `closed` (each agent sends after its pause), or open "
        "loop at `rate`: `constant`, `poisson` or `bursty` (gamma gaps, see burstiness); "
        "unset: `poisson` when a rate or stages are given, else `closed`.",
    )
    arrival_unit: Unit = Field(
        "requests",
        description="What an arrival starts: `requests` (the next turn of a free agent; with "
        "every agent busy it waits for one, and the turn records its lag) or `sessions` (a "
        "new agent session, which then plays its turns with pauses; `agents` is then unused).",
    )
    rate: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="Open-loop arrivals per second (engine seconds in a kit).",
        json_schema_extra={"unit": "per_engine_s"},
    )
    rate_end: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="Ramp the rate linearly from `rate` to this over duration_s.",
        json_schema_extra={"unit": "per_engine_s"},
    )
    burstiness: float = Field(
        1.0,
        gt=0.0,
        allow_inf_nan=False,
        description="Shape of the gamma gaps of `bursty` arrivals: 1 is Poisson, lower is "
        "burstier (coefficient of variation 1/sqrt(burstiness)), at the same mean rate.",
    )
    stages: tuple[Stage, ...] | None = Field(
        None,
        min_length=1,
        description="Open-loop rate in stages, e.g. [{rate = 1, duration_s = 60}, {rate = 4, "
        "duration_s = 60, rate_end = 8}] (a stage with rate_end ramps); arrivals end after "
        "the last.",
    )
    model: str | None = Field(
        None, description="Model name to request; unset: the server's only model."
    )
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding an API key, sent as a bearer "
        "token (the key itself is never stored).",
    )
    ignore_eos: bool = Field(
        True,
        description="Send vLLM's ignore_eos so every reply is exactly max_tokens long; turn off "
        "for servers that reject unknown parameters.",
    )
    tokenizer: str | None = Field(
        None,
        description="Hugging Face tokenizer name or path used to size prompts when the server "
        "has no /tokenize.",
    )
    trace: Annotated[str | None, Flag("--trace", metavar="PATH")] = Field(
        None,
        description="Replay this trace (mooncake_trace or sessions JSONL) instead of the "
        "synthetic workload: one agent per session; in a kit, relative to the kit's file.",
    )
    trace_block_tokens: int = Field(
        512, ge=1, description="Tokens per hash_ids block of the trace (AIPerf's isl block size)."
    )
    trace_second_s: float = Field(
        1.0,
        gt=0.0,
        description="Seconds one second of the trace's time lasts (0.5 replays it twice as "
        "fast: `--trace-speed 2`).",
        json_schema_extra={"unit": "engine"},
    )
    trace_auto_offset: Annotated[
        bool, Flag("--fixed-schedule-auto-offset/--no-fixed-schedule-auto-offset")
    ] = Field(
        False,
        description="Shift the trace so that its first request (in the window) starts the run, "
        "as AIPerf's --fixed-schedule-auto-offset; off: a timestamp counts from the start "
        "offset, or from 0 without one.",
    )
    trace_start_offset_ms: Annotated[int | None, Flag("--fixed-schedule-start-offset")] = Field(
        None,
        ge=0,
        description="Replay only requests whose arrival is at or after this trace millisecond, "
        "as AIPerf's --fixed-schedule-start-offset (a turn timed by a delay goes with the turn "
        "before it).",
    )
    trace_end_offset_ms: Annotated[int | None, Flag("--fixed-schedule-end-offset")] = Field(
        None,
        ge=0,
        description="Replay only requests whose arrival is at or before this trace "
        "millisecond, as AIPerf's --fixed-schedule-end-offset.",
    )
    trace_salt: Annotated[str | None, Flag("--trace-salt")] = Field(
        None,
        description="Salt of the trace's text. Unset: drawn from the trace file's digest and "
        "the seed, so two traces, or two seeds, never share a prefix-cache block while both "
        "arms of an A/B (and a rerun) get the same text. A text: that salt, to share blocks "
        "on purpose across runs or traces; empty: no salt (equal hash_ids give equal text in "
        "every trace).",
    )

    @model_validator(mode="after")
    def _check_arrivals(self) -> Self:
        problem = self._arrival_problem()
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def process(self) -> Process:
        """The arrival law: the one set, else Poisson for a rate or stages (the usual
        benchmark's open loop), else closed-loop agents."""
        if self.arrivals is not None:
            return self.arrivals
        return "poisson" if self.rate is not None or self.stages is not None else "closed"

    def _arrival_problem(self) -> str | None:
        given = [n for n in ("rate", "rate_end", "stages") if getattr(self, n) is not None]
        if self.arrival_unit == "sessions":
            given.append("arrival_unit = sessions")
        if self.process == "closed":
            if given:
                return f"{given[0]} applies to open-loop arrivals: set arrivals (e.g. poisson)"
            if self.burstiness != 1.0:
                return "burstiness applies to arrivals = bursty: set arrivals and rate"
            return None
        if self.burstiness != 1.0 and self.process != "bursty":
            return f"burstiness applies to arrivals = bursty, not {self.process}"
        if self.rate is not None and self.stages is not None:
            return "rate and stages are exclusive: give one of the two"
        if self.rate is None and self.stages is None:
            return f"arrivals = {self.process} needs a rate or stages (one of the two)"
        if self.rate_end is not None and (self.stages is not None or self.duration_s is None):
            return "rate_end ramps over duration_s: give rate and duration_s (or use stages)"
        if self.trace is not None:
            return "a trace replays its own arrival times: drop the rate or the trace"
        if self.arrival_unit == "sessions":
            end = self.arrival_end_s
            if end is None:
                return "sessions arriving open loop need an end: give duration_s or stages"
            mass = expected_count(self.rate_segments(), end)
            if mass > MAX_AGENTS:
                return f"about {mass:,.0f} sessions would arrive, over {MAX_AGENTS:,}"
        return None

    @property
    def arrival_end_s(self) -> float | None:
        """When arrivals end (seconds since the start): the run's end or the last stage's."""
        ends = [self.duration_s] if self.duration_s is not None else []
        if self.stages is not None:
            ends.append(sum(s.duration_s for s in self.stages))
        return min(ends) if ends else None

    @property
    def offered_rps(self) -> float | None:
        """The open-loop arrivals' mean rate over the run (None: closed loop, or no end)."""
        end = self.arrival_end_s
        if self.process == "closed" or end is None or self.duration_s is None:
            return None
        return expected_count(self.rate_segments(), end) / self.duration_s

    def rate_segments(self) -> list[Segment]:
        """The open-loop rate over the run (arrivals end after the last segment)."""
        return segments(self.rate, self.rate_end, self.duration_s, self.stages or ())

    @model_validator(mode="after")
    def _check_trace_window(self) -> Self:
        start, end = self.trace_start_offset_ms, self.trace_end_offset_ms
        if start is not None and end is not None and end < start:
            raise ValueError(
                f"trace_end_offset_ms ({end}) must not be below trace_start_offset_ms ({start})"
            )
        return self

    @model_validator(mode="after")
    def _check_ranges(self) -> Self:
        pairs = [
            ("min_context", self.min_context, "max_context", self.max_context),
            ("new_tokens_min", self.new_tokens_min, "new_tokens_max", self.new_tokens_max),
            ("reply_tokens_min", self.reply_tokens_min, "reply_tokens_max", self.reply_tokens_max),
            ("think_min_s", self.think_min_s, "think_max_s", self.think_max_s),
        ]
        for low_name, low, high_name, high in pairs:
            if low > high:
                raise ValueError(f"{low_name} ({low}) must not exceed {high_name} ({high})")
        if self.min_context >= self.max_context:
            raise ValueError(
                f"min_context ({self.min_context}) must be below max_context ({self.max_context})"
            )
        if self.system_prompt_tokens >= self.min_context:
            raise ValueError(
                f"system_prompt_tokens ({self.system_prompt_tokens}) must be below "
                f"min_context ({self.min_context})"
            )
        headroom = self.max_context - self.min_context
        turn = self.reply_tokens_max + self.new_tokens_max
        if headroom < turn:
            raise ValueError(
                f"max_context - min_context ({headroom}) must leave room for one more turn: "
                f"new_tokens_max + reply_tokens_max ({turn}); raise max_context to at least "
                f"{self.min_context + turn} or lower the turn sizes"
            )
        return self


def sizes_for_context(min_context: int, max_context: int) -> dict[str, int]:
    """Turn and system-prompt sizes that fit the context bounds, for fields left unset.

    The defaults suit contexts of tens of thousands of tokens. For smaller bounds, the system
    prompt shrinks to half of `min_context` and a turn's new content and reply shrink in
    proportion until one turn fits between the bounds; the defaults are kept where they fit.
    Bounds that are themselves invalid are returned unchanged for the model to report.
    """
    fields = LoadConfig.model_fields
    system = int(fields["system_prompt_tokens"].default)
    sizes = {
        name: int(fields[name].default)
        for name in ("new_tokens_min", "new_tokens_max", "reply_tokens_min", "reply_tokens_max")
    }
    out: dict[str, int] = {}
    if max_context <= min_context or min_context < 2:
        return out
    if system >= min_context:
        out["system_prompt_tokens"] = max(1, min_context // 2)
    headroom = max_context - min_context
    turn = sizes["new_tokens_max"] + sizes["reply_tokens_max"]
    if headroom < turn:
        new_max = max(1, headroom * sizes["new_tokens_max"] // turn)
        reply_max = max(1, headroom - new_max)
        out["new_tokens_max"] = new_max
        out["reply_tokens_max"] = reply_max
        out["new_tokens_min"] = min(sizes["new_tokens_min"], new_max)
        out["reply_tokens_min"] = min(sizes["reply_tokens_min"], reply_max)
    return out


#: a turn's two largest sizes, and the smallest size each bounds
_TURN_SIZES = {"new_tokens_max": "new_tokens_min", "reply_tokens_max": "reply_tokens_min"}


def sizes_for_unset(given: Mapping[str, Any]) -> dict[str, int]:
    """Sizes for the fields a kit's `[load]` table (`given`, as written) leaves unset, where
    their defaults would not fit the context bounds it sets.

    A default the kit never set must not refuse it: a system prompt of 1,000 tokens against a
    `min_context` of 1,000 shrinks to half of it, and turns that do not fit between the bounds
    shrink to fit, as `sizes_for_context` does for `kit load` (one turn size set: the other
    takes the room left). A value the kit set is kept as written, so a clash between two
    values it set is still the model's to report. Bounds that are not whole numbers are left
    to the model too.
    """
    fields = LoadConfig.model_fields

    def value(name: str) -> int | None:
        found = given.get(name, fields[name].default)
        return found if isinstance(found, int) and not isinstance(found, bool) else None

    low, high = value("min_context"), value("max_context")
    if low is None or high is None:
        return {}
    fitted = {k: v for k, v in sizes_for_context(low, high).items() if k not in given}
    set_turns = [name for name in _TURN_SIZES if name in given]
    if not set_turns:
        return fitted
    for name in (*_TURN_SIZES, *_TURN_SIZES.values()):  # fitted to the defaults: not these
        fitted.pop(name, None)
    if len(set_turns) == 2:
        return fitted
    kept = value(set_turns[0])
    other = next(name for name in _TURN_SIZES if name != set_turns[0])
    room = high - low - (kept or 0)
    default = value(other)
    if kept is not None and default is not None and room < default and room >= 1:
        fitted[other] = room
        low_name = _TURN_SIZES[other]
        low_default = value(low_name)
        if low_name not in given and low_default is not None and low_default > room:
            fitted[low_name] = room
    return fitted
