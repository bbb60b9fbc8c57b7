"""The agents: run the planned workload against a server and emit typed events as it goes.

:func:`run_agents` is an async generator of :data:`LoadEvent`: an agent changing state, a turn
finishing (its record already appended to ``turns.jsonl``), and finally the run ending. The
progress display, the CLI and the kit's A/B runner all consume the same stream. Stopping is
structured, never a global flag: the run ends at ``duration_s``, when every agent has played
``max_turns``, or when the consumer stops iterating (``aclose``, cancellation, Ctrl-C). Then
every agent task is cancelled, in-flight streams are closed and recorded as ``aborted``.
Use it inside ``contextlib.aclosing`` so breaking out of the loop stops the agents at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from asyncio_throttle.throttler import Throttler

from stallkit.loadgen import text
from stallkit.loadgen.agent import Done, Send, Wait
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.conversation import ChatConversation, new_parts, replay_parts
from stallkit.loadgen.http.client import StreamingClient, StreamResult, make_client, stream_chat
from stallkit.loadgen.preflight import ServerInfo, auth_headers, make_counter
from stallkit.loadgen.records import TURNS_FILE, PromptPart, RecordWriter, TurnRecord
from stallkit.loadgen.tokens import Message, PromptSizer, TokenCounter, TokenizeFailed
from stallkit.loadgen.traces.replay import Workload, workload_for
from stallkit.loadgen.workload import TurnPlan

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

#: "queued": a request was sent and no token has come back yet; "streaming": tokens are arriving
State = Literal["waiting", "queued", "streaming", "thinking", "failed", "done"]


@dataclass(frozen=True, slots=True)
class AgentState:
    """An agent entered a state (waiting to start, queued, streaming, thinking, failed, done)."""

    agent: int
    state: State
    t: float


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A request ended, whatever its outcome; the record is already on disk."""

    record: TurnRecord


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended: its duration passed, all agents finished, or it was stopped."""

    reason: Literal["duration", "done"]
    t: float


LoadEvent = AgentState | TurnFinished | RunFinished


@dataclass(frozen=True, slots=True)
class _Sized:
    """A turn's messages, their token count, and what the turn added to its session's prompt."""

    messages: list[Message]
    expected: int
    parts: list[PromptPart]


@dataclass(frozen=True, slots=True)
class _AgentExit:
    task: str
    error: BaseException | None


class _Run:
    """Shared state of the agents of one run."""

    def __init__(
        self,
        info: ServerInfo,
        cfg: LoadConfig,
        client: StreamingClient,
        writer: RecordWriter | None,
        workload: Workload,
    ) -> None:
        self.info, self.cfg, self.client, self.writer = info, cfg, client, writer
        self.workload = workload
        self.url = info.base_url + "/v1/chat/completions"
        self.queue: asyncio.Queue[LoadEvent | _AgentExit] = asyncio.Queue()
        self.t0 = time.perf_counter()
        self.counter = make_counter(info, cfg, client)
        #: the server's tokens per word of replayed content (measured before a replay starts)
        self.tokens_per_word = 1.0
        rate = cfg.request_rate
        self.throttler = Throttler(rate_limit=1, period=1.0 / rate) if rate else None

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def over(self) -> bool:
        """Whether the run's duration has passed (its agents are about to be stopped)."""
        return self.cfg.duration_s is not None and self.now() >= self.cfg.duration_s

    def state(self, agent: int, state: State) -> None:
        self.queue.put_nowait(AgentState(agent, state, self.now()))

    def exited(self, task: asyncio.Task[None]) -> None:
        error = None if task.cancelled() else task.exception()
        self.queue.put_nowait(_AgentExit(task.get_name(), error))

    def finish(self, record: TurnRecord) -> None:
        if self.writer is not None:
            self.writer.write(record)
        self.queue.put_nowait(TurnFinished(record))


async def run_agents(
    info: ServerInfo,
    cfg: LoadConfig,
    out_dir: Path | None = None,
    *,
    records: RecordWriter | None = None,
) -> AsyncGenerator[LoadEvent, None]:
    """Drive ``cfg.agents`` agents against the server ``info`` describes, yielding events.

    Records are appended to ``records`` (the caller's writer, e.g. an arm recorder's) or to
    ``out_dir/turns.jsonl`` when ``out_dir`` is given; the writer is closed at the end.
    """
    headers = auth_headers(cfg)
    workload = workload_for(cfg)  # a trace that does not parse stops the run before it starts
    writer = records
    if writer is None and out_dir is not None:
        writer = RecordWriter(out_dir / TURNS_FILE)
    client = make_client(cfg.read_timeout_s, cfg.connect_timeout_s, headers)
    tasks: list[asyncio.Task[None]] = []
    try:
        run = _Run(info, cfg, client, writer, workload)
        if workload.sessions is not None:
            run.tokens_per_word = await _tokens_per_word(run.counter)
        for i in range(workload.agents):
            tasks.append(asyncio.create_task(_agent(run, i), name=f"agent-{i}"))
            tasks[-1].add_done_callback(run.exited)
        reason: Literal["duration", "done"] = "done"
        running = len(tasks)
        while running:
            left = None if cfg.duration_s is None else cfg.duration_s - run.now()
            try:
                item = await next_item(run.queue, left)
            except TimeoutError:
                reason = "duration"
                break
            if isinstance(item, _AgentExit):
                running -= 1
                if item.error is not None:
                    raise item.error
                continue
            yield item
        if run.over():  # the agents stopped themselves because the duration passed
            reason = "duration"
        await _stop(tasks)
        while not run.queue.empty():
            item = run.queue.get_nowait()
            if not isinstance(item, _AgentExit):
                yield item
        yield RunFinished(reason, run.now())
    finally:
        await _stop(tasks)
        await client.aclose()
        if writer is not None:
            writer.close()


async def next_item(queue: asyncio.Queue[_T], left_s: float | None) -> _T:
    """The next queued item; TimeoutError once `left_s` seconds pass (None: no limit).

    Not `asyncio.wait_for`: on Python 3.11 it returns the item when a cancel arrives in the
    same loop turn as the item, swallowing the cancel, so a Ctrl-C was ignored until the run's
    end. `asyncio.timeout` lets the cancel through.
    """
    async with asyncio.timeout(left_s):
        return await queue.get()


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _agent(run: _Run, agent: int) -> None:
    """Play the agent's state machine over HTTP: its waits are wall-clock sleeps."""
    cfg = run.cfg
    sizer = PromptSizer(run.counter, additive=run.info.additive)
    machine = run.workload.machine(agent)
    run.state(agent, "waiting")
    conversation = ChatConversation()
    sent: _Sized | None = None
    action = machine.start()
    while not isinstance(action, Done):
        if isinstance(action, Wait):
            await asyncio.sleep(max(0.0, action.due_s(run.now()) - run.now()))
            action = machine.waited()
            continue
        if run.over():
            # the run is ending: a request begun now would only be cut off (or meet an engine
            # already stopping) and be counted as a failure of the engine
            break
        plan = action.plan
        if action.attempt == 0:
            if plan.content is not None:
                if plan.turn == 0:
                    conversation = ChatConversation()
                sent = await _replayed(run, conversation, plan)
            else:
                if plan.turn == 0:
                    conversation = ChatConversation.start(cfg, plan)
                sent = await _fit(run, sizer, conversation, plan)
        ok = sent is not None and await _send(run, sizer, conversation, action, sent)
        action = machine.answered(ok)
    run.state(agent, "done")


async def _fit(
    run: _Run, sizer: PromptSizer, conversation: ChatConversation, plan: TurnPlan
) -> _Sized | None:
    """The turn's messages and their token count, or None (recorded) when sizing failed."""
    extra = [conversation.pending_reply] if conversation.pending_reply else []
    try:
        message, expected = await sizer.fit(
            conversation.history,
            conversation.history_tokens,
            extra,
            plan.text_seed,
            plan.target_prompt_tokens,
        )
    except TokenizeFailed as exc:
        run.finish(_failed_record(plan, run.now(), exc))
        run.state(plan.agent, "failed")
        return None
    system = len(conversation.history[0]["content"].split()) if plan.turn == 0 else 0
    parts = new_parts(plan, system, len(message["content"].split()))
    return _Sized([*conversation.history, *extra, message], expected, parts)


async def _tokens_per_word(counter: TokenCounter) -> float:
    """What the server's tokenizer spends on a word of replayed content (1 on the simulator),
    so that a trace's block of N tokens is about N of its tokens (a block's word count is
    fixed for the run, so blocks shared in the trace stay shared)."""
    probe = " ".join(text.words(7, 1000))
    try:
        empty = await counter.count([{"role": "user", "content": ""}])
        full = await counter.count([{"role": "user", "content": probe}])
    except TokenizeFailed as exc:  # the turns' own counts will record what fails
        logger.warning("cannot measure tokens per word (%s): one token a word", exc.error)
        return 1.0
    return max(0.05, (full - empty) / 1000)


async def _replayed(run: _Run, conversation: ChatConversation, plan: TurnPlan) -> _Sized | None:
    """A replayed turn's messages: the conversation so far (all of it, unless the turn keeps
    nothing) and a user message of its parts' words, counted by the server."""
    history = conversation.history if plan.keep_tokens != 0 else []
    extra = [conversation.pending_reply] if conversation.pending_reply and history else []
    words = [w for part in plan.content or () for w in part.words(run.tokens_per_word)]
    messages = [*history, *extra, {"role": "user", "content": " ".join(words)}]
    if plan.messages is not None:  # a whole chat, sent as the trace gave it
        messages = [{"role": role, "content": text} for role, text in plan.messages]
    try:
        expected = await run.counter.count(messages)
    except TokenizeFailed as exc:
        run.finish(_failed_record(plan, run.now(), exc))
        run.state(plan.agent, "failed")
        return None
    return _Sized(messages, expected, replay_parts(plan))


async def _send(
    run: _Run,
    sizer: PromptSizer,
    conversation: ChatConversation,
    send: Send,
    sent: _Sized,
) -> bool:
    """One attempt of a sized turn; on success the conversation grows by it and its reply."""
    messages, expected, plan = sent.messages, sent.expected, send.plan
    body = _request_body(run, messages, plan.max_tokens)
    result = await _attempt(run, send, body, sent)
    if result.outcome != "ok":
        run.state(plan.agent, "failed")
        return False
    if plan.content is None:
        _check_prompt_size(sizer, plan, expected, result.prompt_tokens)
    conversation.history = messages
    conversation.history_tokens = result.prompt_tokens or expected
    conversation.pending_reply = {"role": "assistant", "content": result.text}
    run.state(plan.agent, "thinking")
    return True


async def _attempt(run: _Run, send: Send, body: dict[str, Any], sent: _Sized) -> StreamResult:
    plan = send.plan
    if run.throttler is not None:
        async with run.throttler:
            pass
    # queued once sent, not while the rate cap holds it back: a run's own clients count
    # their queued requests as pending work the engine owes them
    run.state(plan.agent, "queued")
    result = StreamResult()
    try:
        await _stream(run, plan.agent, body, result)
    except asyncio.CancelledError:
        if result.started:
            result.fail("aborted", "the run stopped while the request was in flight")
            result.elapsed_s = time.perf_counter() - result.started
            run.finish(_record(run, send, sent, result))
        raise
    run.finish(_record(run, send, sent, result))
    return result


async def _stream(run: _Run, agent: int, body: dict[str, Any], result: StreamResult) -> None:
    """Stream one request; the agent shows `streaming` once its first token has arrived.

    The SSE decoder resolves ``first_token`` when it records the first token, so the agent
    sleeps until that or the request's end, whichever comes first: it wakes once, never polls
    (a thousand queued requests would otherwise cost CPU while nothing happens). A reply whose
    first token and end arrive in the same read ends without a `streaming` state.
    """
    first_token: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    result.on_first_token = functools.partial(_resolve, first_token)
    task = asyncio.ensure_future(stream_chat(run.client, run.url, body, result))
    try:
        await asyncio.wait((task, first_token), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            run.state(agent, "streaming")
        await task
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _request_body(run: _Run, messages: list[Message], max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": run.info.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if run.cfg.ignore_eos:
        body["ignore_eos"] = True
    return body


def _check_prompt_size(
    sizer: PromptSizer, plan: TurnPlan, expected: int, reported: int | None
) -> None:
    if reported is None or reported == expected:
        return
    logger.warning(
        "agent %d session %d turn %d: server counted %d prompt tokens, planned %d%s",
        plan.agent,
        plan.session,
        plan.turn,
        reported,
        expected,
        "; counting whole conversations from now on" if sizer.additive else "",
    )
    sizer.additive = False


def _record(run: _Run, send: Send, sent: _Sized, result: StreamResult) -> TurnRecord:
    plan, attempt = send.plan, send.attempt
    t_start = result.started - run.t0
    assert result.outcome is not None
    return TurnRecord(
        agent=plan.agent,
        session=plan.session,
        turn=plan.turn,
        attempt=attempt,
        t_start=t_start,
        t_end=t_start + result.elapsed_s,
        ttft_s=result.ttft_s,
        chunks=result.chunks,
        expected_prompt_tokens=sent.expected,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        cached_tokens=result.cached_tokens,
        max_tokens=plan.max_tokens,
        outcome=result.outcome,
        error=result.error,
        status=result.status,
        t_arrival=send.arrival_s,
        prompt_parts=sent.parts,
    )


def _failed_record(plan: TurnPlan, now: float, exc: TokenizeFailed) -> TurnRecord:
    return TurnRecord(
        agent=plan.agent,
        session=plan.session,
        turn=plan.turn,
        attempt=0,
        t_start=now,
        t_end=now,
        ttft_s=None,
        chunks=[],
        expected_prompt_tokens=plan.target_prompt_tokens,
        prompt_tokens=None,
        completion_tokens=None,
        cached_tokens=None,
        max_tokens=plan.max_tokens,
        outcome=exc.outcome,
        error=exc.error,
        status=exc.status,
    )
