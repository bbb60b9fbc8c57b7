"""Exact prompt sizing: count chat tokens as the server does and fit new content to a target.

Counting goes to the server's ``POST /tokenize`` with the chat messages (vLLM and the simulator
serve it, so the count includes the chat template exactly as the engine renders it), or to a
local Hugging Face tokenizer when the server has none and one is named.

Growing conversations are not re-tokenized whole. A chat template renders a conversation as the
concatenation of its messages plus a generation prompt, and role markers are special tokens, so
the count of a conversation extended by messages ``M`` is ``count(C) + count([s] + M) -
count([s])`` for any first message ``s``: only the new messages (and the short system prompt) go
to the tokenizer. :func:`check_additivity` tests that identity once per run on sample messages;
when it fails (a template that rewrites earlier messages) the sizer tokenizes the whole
conversation instead, slower but still exact. The agent also compares every planned count with
the ``prompt_tokens`` the server reports and falls back the same way on a mismatch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from stallkit.loadgen import text
from stallkit.loadgen.errors import LoadError
from stallkit.loadgen.records import Outcome

Message = dict[str, str]


class TokenizeFailed(Exception):
    """A /tokenize call failed during a run; the agent records it as the turn's outcome."""

    def __init__(self, outcome: Outcome, error: str, status: int | None = None) -> None:
        super().__init__(error)
        self.outcome = outcome
        self.error = error
        self.status = status


class TokenCounter(Protocol):
    """Counts the prompt tokens of chat messages, generation prompt included."""

    async def count(self, messages: Sequence[Message]) -> int: ...


class ServerTokenCounter:
    """Counts tokens with the server's ``POST /tokenize``."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + "/tokenize"
        self._model = model

    async def count(self, messages: Sequence[Message]) -> int:
        body = {"model": self._model, "messages": list(messages), "add_generation_prompt": True}
        return _count_from(await _post(self._client, self._url, "/tokenize", body))


class TemplateTokenCounter:
    """Counts tokens with a server that renders its chat template at ``POST /apply-template``
    and tokenizes text at ``POST /tokenize`` (llama.cpp's server: its ``/tokenize`` takes text,
    not messages, and answers a messages body with no tokens)."""

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self._client = client
        self._base = base_url.rstrip("/")

    async def count(self, messages: Sequence[Message]) -> int:
        rendered = await self._post("/apply-template", {"messages": list(messages)})
        prompt = rendered.get("prompt") if isinstance(rendered, Mapping) else None
        if not isinstance(prompt, str):
            raise TokenizeFailed("http_error", "/apply-template answered without a prompt")
        body = {"content": prompt, "add_special": True, "parse_special": True}
        return _count_from(await self._post("/tokenize", body))

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        return await _post(self._client, self._base + path, path, body)


async def _post(client: httpx.AsyncClient, url: str, path: str, body: dict[str, Any]) -> Any:
    """The JSON answer of `POST url` (`path` names it in messages); a failure is
    `TokenizeFailed` with its type."""
    try:
        response = await client.post(url, json=body)
    except httpx.TimeoutException as exc:
        raise TokenizeFailed("timeout", f"{path} timed out: {exc!r}") from None
    except httpx.TransportError as exc:
        raise TokenizeFailed("connect_error", f"{path} failed: {exc!r}") from None
    if response.status_code != 200:
        excerpt = response.text[:300]
        raise TokenizeFailed(
            "http_error", f"{path} answered {response.status_code}: {excerpt}", response.status_code
        )
    return response.json()


def _count_from(payload: Any) -> int:
    if isinstance(payload, Mapping):
        if isinstance(payload.get("count"), int):
            return int(payload["count"])
        if isinstance(payload.get("tokens"), list):
            return len(payload["tokens"])
    raise TokenizeFailed("http_error", "/tokenize answered without a token count")


class LocalTokenCounter:
    """Counts tokens with a local Hugging Face tokenizer and its chat template."""

    def __init__(self, name: str) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise LoadError(
                "the server has no /tokenize and transformers is not installed",
                hint="pip install transformers, or use a server that serves /tokenize",
            ) from None
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(name)
        except Exception as exc:  # any loading failure is the user's tokenizer name
            raise LoadError(
                f"cannot load tokenizer {name!r}: {type(exc).__name__}",
                hint="name a local tokenizer directory or a cached hub name",
            ) from None

    async def count(self, messages: Sequence[Message]) -> int:
        return await asyncio.to_thread(self._count, list(messages))

    def _count(self, messages: list[Message]) -> int:
        ids = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # newer transformers return an encoding
            ids = ids["input_ids"]
        return len(ids)


async def check_additivity(counter: TokenCounter) -> bool:
    """Whether extending a conversation adds exactly what the new messages add to a probe."""
    s = {"role": "system", "content": text.text(1, 40)}
    u1 = {"role": "user", "content": text.text(2, 60)}
    a1 = {"role": "assistant", "content": " " + text.text(3, 30)}
    u2 = {"role": "user", "content": text.text(4, 50)}
    whole = await counter.count([s, u1, a1, u2])
    head = await counter.count([s, u1])
    tail = await counter.count([s, a1, u2])
    base = await counter.count([s])
    return whole == head + tail - base


@dataclass
class PromptSizer:
    """Fits each turn's new content to an exact total prompt size for one agent.

    It learns tokens per word and the fixed overhead as it goes, so with a word-level tokenizer
    a turn usually needs one /tokenize call and otherwise a few.
    """

    counter: TokenCounter
    additive: bool
    max_iterations: int = 12
    _tokens_per_word: float = 1.0
    _offset: float = 0.0
    _system_counts: dict[str, int] = field(default_factory=dict)

    async def fit(
        self,
        history: Sequence[Message],
        history_tokens: int | None,
        extra: Sequence[Message],
        text_seed: int,
        target: int,
    ) -> tuple[Message, int]:
        """A user message that brings ``history + extra + [it]`` closest to ``target`` tokens.

        ``history_tokens`` is the exact count of ``history`` (None when unknown). Returns the
        message and the exact count of the whole prompt; the count equals ``target`` unless the
        tokenizer has no word count that lands on it (then the nearest count below it).
        """
        use_delta = self.additive and history_tokens is not None and len(history) > 1
        system_tokens = await self._system_count(history[0]) if use_delta else 0

        async def total(n_words: int) -> tuple[Message, int]:
            msg = {"role": "user", "content": text.text(text_seed, n_words)}
            if use_delta:
                assert history_tokens is not None
                part = await self.counter.count([history[0], *extra, msg])
                return msg, history_tokens + part - system_tokens
            return msg, await self.counter.count([*history, *extra, msg])

        known = history_tokens if history_tokens is not None else 0
        extra_words = sum(len(m["content"].split()) for m in extra)
        guess = (target - known - self._offset) / self._tokens_per_word - extra_words
        return await self._search(total, max(1, round(guess)), target, known, extra_words)

    async def _search(
        self, total: Any, n: int, target: int, known: int, extra_words: int
    ) -> tuple[Message, int]:
        tried: dict[int, tuple[Message, int]] = {}
        for _ in range(self.max_iterations):
            tried[n] = await total(n)
            count = tried[n][1]
            if count == target:
                break
            below = [k for k, (_, c) in tried.items() if c < target]
            above = [k for k, (_, c) in tried.items() if c > target]
            if below and above and min(above) - max(below) <= 1:
                break  # no word count lands exactly on the target
            step = round((target - count) / self._tokens_per_word)
            nxt = max(1, n + (step or (1 if count < target else -1)))
            if below and above:  # bisect inside the bracket when the slope guess overshoots
                low, high = max(below), min(above)
                if not low < nxt < high:
                    nxt = (low + high) // 2
            if nxt in tried or (count > target and n == 1):
                break
            self._learn(n, count, nxt, tried)
            n = nxt
        best_n = _closest(tried, target)
        msg, count = tried[best_n]
        self._offset = count - known - self._tokens_per_word * (best_n + extra_words)
        return msg, count

    def _learn(self, n: int, count: int, nxt: int, tried: dict[int, tuple[Message, int]]) -> None:
        others = [(k, c) for k, (_, c) in tried.items() if k != n]
        if others:
            k, c = min(others, key=lambda kc: abs(kc[0] - n))
            if k != n and (count - c) / (n - k) > 0:
                self._tokens_per_word = (count - c) / (n - k)

    async def _system_count(self, system: Message) -> int:
        key = system["content"]
        if key not in self._system_counts:
            self._system_counts.clear()  # one session's prompt at a time per agent
            self._system_counts[key] = await self.counter.count([system])
        return self._system_counts[key]


def _closest(tried: Mapping[int, tuple[Message, int]], target: int) -> int:
    exact_or_below = [k for k, (_, c) in tried.items() if c <= target]
    if exact_or_below:
        return max(exact_or_below, key=lambda k: tried[k][1])
    return min(tried, key=lambda k: tried[k][1])
