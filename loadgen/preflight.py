"""Checks made before any agent starts: the server answers, speaks OpenAI, and fits the load.

A URL that does not answer, a server whose ``/v1/models`` is not OpenAI-shaped, an ambiguous or
unknown model, a context bound above the model's ``max_model_len``, or no way to count tokens
is a :class:`~stallkit.loadgen.errors.LoadError` with a hint, raised before the first request is sent.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.errors import LoadError
from stallkit.loadgen.http.client import make_client
from stallkit.loadgen.tokens import (
    LocalTokenCounter,
    ServerTokenCounter,
    TemplateTokenCounter,
    TokenCounter,
    TokenizeFailed,
    check_additivity,
)

PREFLIGHT_READ_TIMEOUT_S = 30.0
_HELLO = [{"role": "user", "content": "hello"}]


class ServerInfo(BaseModel):
    """What preflight learned about the server; the agents run against it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(description="Server root, without a trailing /v1.")
    model: str = Field(description="Model the agents request.")
    max_model_len: int | None = Field(description="The model's context length, if reported.")
    tokenize: Literal["server", "template", "local"] = Field(
        description="Where prompts are counted: the server's /tokenize of messages, its "
        "/apply-template then /tokenize of text (llama.cpp), or a local tokenizer."
    )
    additive: bool = Field(description="Whether conversations can be counted incrementally.")


def normalize_url(url: str) -> str:
    """The server root: no trailing slash, no trailing /v1."""
    root = url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def auth_headers(cfg: LoadConfig) -> dict[str, str]:
    """The Authorization header from the named environment variable (nothing if unnamed)."""
    if cfg.api_key_env is None:
        return {}
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise LoadError(
            f"environment variable {cfg.api_key_env} is not set",
            hint="export the API key in that variable, or drop --api-key-env",
        )
    return {"Authorization": f"Bearer {key}"}


def make_counter(info: ServerInfo, cfg: LoadConfig, client: httpx.AsyncClient) -> TokenCounter:
    """The token counter preflight chose."""
    if info.tokenize == "local":
        assert cfg.tokenizer is not None
        return LocalTokenCounter(cfg.tokenizer)
    if info.tokenize == "template":
        return TemplateTokenCounter(client, info.base_url)
    return ServerTokenCounter(client, info.base_url, info.model)


async def preflight(url: str, cfg: LoadConfig) -> ServerInfo:
    """Check the server and pick the model and token counter; LoadError on any problem."""
    base = normalize_url(url)
    async with make_client(
        min(cfg.read_timeout_s, PREFLIGHT_READ_TIMEOUT_S), cfg.connect_timeout_s, auth_headers(cfg)
    ) as client:
        models = await _list_models(client, base)
        model, max_len = _pick_model(models, cfg.model)
        if max_len is not None and cfg.max_context > max_len:
            raise LoadError(
                f"max context {cfg.max_context} is above the model's max_model_len {max_len}",
                hint=f"use --max-context {max_len} or less",
            )
        tokenize: Literal["server", "template", "local"] = "server"
        counter: TokenCounter = ServerTokenCounter(client, base, model)
        try:
            if await counter.count(_HELLO) == 0:  # /tokenize ignored the messages (llama.cpp)
                tokenize, counter = "template", TemplateTokenCounter(client, base)
                await counter.count(_HELLO)
        except TokenizeFailed as exc:
            if exc.outcome != "http_error":  # unreachable, not missing
                raise LoadError(f"/tokenize failed: {exc.error}") from None
            if cfg.tokenizer is None:
                raise LoadError(
                    f"the server cannot count tokens ({exc.error})",
                    hint="name a local Hugging Face tokenizer with --tokenizer",
                ) from None
            tokenize, counter = "local", LocalTokenCounter(cfg.tokenizer)
        additive = await _additive(counter)
    return ServerInfo(
        base_url=base, model=model, max_model_len=max_len, tokenize=tokenize, additive=additive
    )


async def _additive(counter: TokenCounter) -> bool:
    try:
        return await check_additivity(counter)
    except TokenizeFailed as exc:
        raise LoadError(f"/tokenize failed: {exc.error}") from None


async def _list_models(client: httpx.AsyncClient, base: str) -> list[dict[str, Any]]:
    try:
        response = await client.get(base + "/v1/models")
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        raise LoadError(f"bad URL {base!r}: {exc}", hint="e.g. http://127.0.0.1:8000") from None
    except httpx.TransportError as exc:
        raise LoadError(
            f"cannot reach {base}: {type(exc).__name__}",
            hint="is the engine running and listening on that address?",
        ) from None
    if response.status_code != 200:
        hint = (
            "set --api-key-env"
            if response.status_code in (401, 403)
            else ("is this an OpenAI-compatible server?")
        )
        raise LoadError(f"{base}/v1/models answered HTTP {response.status_code}", hint=hint)
    try:
        payload = response.json()
    except ValueError:
        payload = None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(
        isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
    ):
        raise LoadError(
            f"{base} is not an OpenAI-compatible server (/v1/models has no model list)",
            hint="point at the engine's HTTP root, e.g. http://127.0.0.1:8000",
        )
    return data


def _pick_model(models: list[dict[str, Any]], wanted: str | None) -> tuple[str, int | None]:
    names = [m["id"] for m in models]
    if wanted is None:
        if len(models) != 1:
            raise LoadError(
                f"the server serves {len(models)} models ({', '.join(names) or 'none'})",
                hint="choose one with --model",
            )
        chosen = models[0]
    else:
        found = [m for m in models if m["id"] == wanted]
        if not found:
            raise LoadError(
                f"the server does not serve model {wanted!r}", hint=f"serves: {', '.join(names)}"
            )
        chosen = found[0]
    max_len = chosen.get("max_model_len")
    return chosen["id"], max_len if isinstance(max_len, int) else None
