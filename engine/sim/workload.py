"""Sustained multi-turn load fed straight into the core on engine time (no HTTP, no clock).

Twelve agents hold long conversations: each turn's prompt is the previous prompt, the reply and
new content (tool output); prompts grow from ~40K to ~100K tokens and restart as a new session
near 40K. Agents pause between turns, and abort a request after a client read timeout with no
token (as the production clients did). The driver watches for the stall of DESIGN.md: work
pending, no token generated and no busy step for `stall_after_s`. Used by tests and benchmarks.
"""

from __future__ import annotations

import heapq
import logging
import random
from dataclasses import dataclass, field, replace
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from engine.sim.config import SimConfig
from engine.sim.core import SimEngine, output_words

#: Longest engine time one `advance` call covers, so stalls are seen promptly.
_SLICE_S = 5.0


class WorkloadShape(BaseModel):
    """The agents' behaviour."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversations: int = Field(12, gt=0, description="Concurrent agents (conversations).")
    start_tokens: tuple[int, int] = Field(
        (40_000, 44_000), description="Prompt size of a new session's first turn (range)."
    )
    first_session_tokens: tuple[int, int] = Field(
        (40_000, 100_000), description="Prompt size of each agent's very first turn (range)."
    )
    restart_above_tokens: int = Field(
        100_000, gt=0, description="A session whose next prompt passes this starts over."
    )
    new_tokens: tuple[int, int] = Field(
        (1_000, 4_000), description="New content (tool output, user text) per turn (range)."
    )
    reply_tokens: tuple[int, int] = Field((300, 900), description="max_tokens per turn (range).")
    think_s: tuple[float, float] = Field((1.0, 8.0), description="Pause between turns (range).")
    first_start_s: float = Field(20.0, ge=0, description="Agents start within this window.")
    read_timeout_s: float | None = Field(
        600.0, gt=0, description="Client aborts its request after this long without a token."
    )
    stall_after_s: float = Field(
        60.0, gt=0, description="No token and no busy step for this long, with work: a stall."
    )


@dataclass(frozen=True)
class Stall:
    """One stall: generation frozen with work pending and the GPU idle."""

    onset_s: float
    detected_s: float
    #: None while it lasts at the end of the run
    ended_s: float | None
    running: int
    waiting: int
    kv_usage: float
    #: empty steps and prefix-cache query tokens between onset and detection: still spinning
    empty_steps: int
    prefix_queries: int


@dataclass
class SustainedResult:
    """What a sustained run did (engine seconds throughout)."""

    seed: int
    policy: str
    engine_s: float = 0.0
    steps: int = 0
    empty_steps: int = 0
    turns_done: int = 0
    turns_aborted: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    restores_done: int = 0
    restores_recomputed: int = 0
    max_kv_usage: float = 0.0
    stalls: list[Stall] = field(default_factory=list)

    @property
    def first_stall_s(self) -> float | None:
        """Onset of the first stall, if any."""
        return self.stalls[0].onset_s if self.stalls else None


@lru_cache(maxsize=1)
def _content_words() -> tuple[str, ...]:
    # distinct words; conversations differ from their first block on (the header), so reusing
    # slices of this pool never makes two conversations share cache blocks
    return tuple(f"w{i}" for i in range(400_000))


class _Agent:
    __slots__ = ("attempt", "index", "prompt", "session", "turn")

    def __init__(self, index: int) -> None:
        self.index = index
        self.session = 0
        self.turn = 0
        self.attempt = 0
        self.prompt: tuple[str, ...] = ()


class _Driver:
    def __init__(self, config: SimConfig, seed: int, shape: WorkloadShape) -> None:
        self.rng = random.Random(seed)
        self.shape = shape
        self.engine = SimEngine(config, logging.getLogger("engine.sim.workload"))
        self.result = SustainedResult(seed=seed, policy=config.policy)
        self.starts: list[tuple[float, int]] = []
        self.agents = [_Agent(i) for i in range(shape.conversations)]
        self.inflight: dict[str, tuple[_Agent, float]] = {}
        for agent in self.agents:
            self._new_session(agent, shape.first_session_tokens)
            heapq.heappush(self.starts, (self.rng.uniform(0, shape.first_start_s), agent.index))

    def _content(self, count: int) -> tuple[str, ...]:
        words = _content_words()
        start = self.rng.randrange(0, len(words) - count)
        return words[start : start + count]

    def _new_session(self, agent: _Agent, size: tuple[int, int]) -> None:
        agent.session += 1
        agent.turn = 0
        header = ("<|system|>", f"agent{agent.index}", f"session{agent.session}")
        agent.prompt = header + self._content(self.rng.randint(*size))

    def start_turn(self, agent: _Agent, now_s: float) -> None:
        agent.turn += 1
        request_id = f"a{agent.index}-s{agent.session}-t{agent.turn}-{agent.attempt}"
        self.engine.add_request(
            request_id, agent.prompt, self.rng.randint(*self.shape.reply_tokens), now_s
        )
        self.inflight[request_id] = (agent, now_s)

    def turn_finished(self, request_id: str, reason: str, now_s: float) -> None:
        agent, _ = self.inflight.pop(request_id)
        if reason == "abort":
            self.result.turns_aborted += 1
            agent.turn -= 1
            agent.attempt += 1
        else:
            self.result.turns_done += 1
            info = self.engine.request_info(request_id)
            replied = info.output_tokens if info is not None else 0
            reply = tuple(output_words(request_id, 0, replied))
            grown = len(agent.prompt) + replied + self.shape.new_tokens[1]
            if grown > self.shape.restart_above_tokens:
                self._new_session(agent, self.shape.start_tokens)
            else:
                new = self._content(self.rng.randint(*self.shape.new_tokens))
                agent.prompt = agent.prompt + reply + new
        pause = self.rng.uniform(*self.shape.think_s)
        heapq.heappush(self.starts, (now_s + pause, agent.index))

    def run(self, end_s: float, stop_on_stall: bool) -> SustainedResult:
        engine, shape, result = self.engine, self.shape, self.result
        now = progress = last_token = 0.0
        baseline = engine.stats
        open_stall: Stall | None = None
        while now < end_s:
            while self.starts and self.starts[0][0] <= now:
                _, index = heapq.heappop(self.starts)
                self.start_turn(self.agents[index], now)
            if not engine.has_work():
                now = min(self.starts[0][0], end_s) if self.starts else end_s
                progress = last_token = now
                self._close(open_stall, now)
                open_stall = None
                continue
            until = min(end_s, now + _SLICE_S, self.starts[0][0] if self.starts else end_s)
            step = engine.advance(now, until)
            now = step.now_s
            if step.last_token_s is not None:
                last_token = step.last_token_s
            moved = max(step.last_token_s or -1.0, step.last_busy_s or -1.0)
            if moved >= 0:
                progress = moved
                self._close(open_stall, moved)
                open_stall = None
                baseline = engine.stats
            for request_id, reason in step.finished.items():
                if request_id in self.inflight:
                    self.turn_finished(request_id, reason, now)
            self._timeouts(now, last_token)
            if open_stall is None and engine.has_work() and now - progress >= shape.stall_after_s:
                stats = engine.stats
                open_stall = Stall(
                    onset_s=progress,
                    detected_s=now,
                    ended_s=None,
                    running=stats.num_running,
                    waiting=stats.num_waiting,
                    kv_usage=stats.kv_usage,
                    empty_steps=stats.empty_steps - baseline.empty_steps,
                    prefix_queries=stats.prefix_cache_queries - baseline.prefix_cache_queries,
                )
                result.stalls.append(open_stall)
                if stop_on_stall:
                    break
        return self._finish(now)

    def _close(self, stall: Stall | None, now_s: float) -> None:
        """Record the end of an open stall (generation or the GPU moved again)."""
        if stall is not None:
            index = self.result.stalls.index(stall)
            self.result.stalls[index] = replace(stall, ended_s=now_s)

    def _timeouts(self, now_s: float, last_token_s: float) -> None:
        timeout = self.shape.read_timeout_s
        if timeout is None or now_s - last_token_s < timeout:
            return
        for request_id, (_, started_s) in list(self.inflight.items()):
            if now_s - started_s >= timeout:
                self.engine.abort(request_id, now_s)
                self.turn_finished(request_id, "abort", now_s)

    def _finish(self, now_s: float) -> SustainedResult:
        stats, result = self.engine.stats, self.result
        result.engine_s = now_s
        result.steps = stats.steps
        result.empty_steps = stats.empty_steps
        result.generation_tokens = stats.generation_tokens
        result.preemptions = stats.num_preemptions
        result.restores_done = stats.restores_done
        result.restores_recomputed = stats.restores_recomputed
        return result


def run_sustained(
    config: SimConfig,
    seed: int,
    engine_seconds: float,
    shape: WorkloadShape | None = None,
    *,
    stop_on_stall: bool = False,
) -> SustainedResult:
    """Drive `config`'s engine with the agents for `engine_seconds` (seeded, deterministic).

    With `stop_on_stall` the run ends at the first stall's detection.
    """
    driver = _Driver(config, seed, shape or WorkloadShape())
    return driver.run(engine_seconds, stop_on_stall)
