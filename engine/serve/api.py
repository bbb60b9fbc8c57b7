"""The OpenAI-compatible wire format of the simulated engine, as vLLM speaks it.

Parses and validates request bodies into `GenRequest`s (tokens are whitespace-separated
words; chat messages render through the shared template), and builds the response bodies:
SSE chunks, non-streaming completions, usage blocks and OpenAI-style error bodies. Nothing
here touches the engine or the network, so the HTTP routes stay thin.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from stallkit.engine.errors import EngineError

JsonObj = dict[str, Any]
Kind = Literal["chat", "completion"]

# Word -> token id cache for /tokenize; bounded so a hostile client cannot grow it forever.
_TOKEN_IDS: dict[str, int] = {}
_TOKEN_IDS_MAX = 200_000
TOKEN_ID_RANGE = 50_000


class ApiError(EngineError):
    """A request the server refuses: becomes an OpenAI-style JSON error with `status`."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    @property
    def error_type(self) -> str:
        return {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError"}.get(
            self.status, "InternalServerError" if self.status >= 500 else "BadRequestError"
        )


@dataclass(frozen=True)
class GenRequest:
    """A validated generation request: the prompt as tokens and what the client asked for."""

    kind: Kind
    model: str
    prompt: list[str]
    max_tokens: int
    stream: bool
    include_usage: bool


def error_body(status: int, message: str, error_type: str, param: str | None = None) -> JsonObj:
    """The error body vLLM's OpenAI server returns."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": status}}


def api_error_body(exc: ApiError) -> JsonObj:
    return error_body(exc.status, str(exc), exc.error_type, exc.param)


def parse_json_object(raw: bytes) -> JsonObj:
    """Decode a request body that must be a JSON object."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(f"Request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError("Request body must be a JSON object")
    return body


def _content_text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError(f"messages[{index}].content: only text parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError(f"messages[{index}].content: a text part needs a string `text`")
            texts.append(text)
        return "\n".join(texts)
    raise ApiError(
        f"messages[{index}].content must be a string or a list of parts", param="messages"
    )


def render_chat(messages: Any, add_generation_prompt: bool = True) -> list[str]:
    """Render chat messages to tokens with the shared template: `<|role|>` then the words."""
    if not isinstance(messages, list) or not messages:
        raise ApiError("`messages` must be a non-empty list", param="messages")
    tokens: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(f"messages[{index}] must be an object", param="messages")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ApiError(f"messages[{index}].role must be a non-empty string", param="messages")
        tokens.append(f"<|{role}|>")
        tokens.extend(_content_text(message.get("content"), index).split())
    if add_generation_prompt:
        tokens.append("<|assistant|>")
    return tokens


def completion_prompt(prompt: Any) -> list[str]:
    """Tokens of a /v1/completions prompt (a string, or a list holding one string)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(
            "`prompt` must be a string (batched prompts are not supported)", param="prompt"
        )
    return prompt.split()


def check_model(body: JsonObj, model_name: str) -> str:
    model = body.get("model")
    if model is None:
        return model_name
    if model != model_name:
        raise ApiError(f"The model `{model}` does not exist.", param="model")
    return model_name


def _optional_int(body: JsonObj, key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(f"`{key}` must be an integer >= {minimum}", param=key)
    return value


def _max_tokens(body: JsonObj, prompt_len: int, max_model_len: int) -> int:
    requested = _optional_int(body, "max_completion_tokens", 1)
    if requested is None:
        requested = _optional_int(body, "max_tokens", 1)
    if prompt_len >= max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_len} input tokens. Please reduce the length of the input.",
            param="messages" if "messages" in body else "prompt",
        )
    room = max_model_len - prompt_len
    if requested is None:
        return room
    if requested > room:
        raise ApiError(
            f"'max_tokens' is too large: {requested}. This model's maximum context length is "
            f"{max_model_len} tokens and your request has {prompt_len} input tokens "
            f"({requested} > {max_model_len} - {prompt_len}).",
            param="max_tokens",
        )
    return requested


def parse_generation(body: JsonObj, kind: Kind, model_name: str, max_model_len: int) -> GenRequest:
    """Validate a chat or completions body; sampling knobs are accepted and ignored."""
    model = check_model(body, model_name)
    if kind == "chat":
        prompt = render_chat(body.get("messages"), bool(body.get("add_generation_prompt", True)))
    else:
        prompt = completion_prompt(body.get("prompt"))
    n = _optional_int(body, "n", 1)
    if n is not None and n != 1:
        raise ApiError("only `n` = 1 is supported", param="n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError("`stream` must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError("`stream_options` must be an object", param="stream_options")
    max_tokens = _max_tokens(body, len(prompt), max_model_len)
    return GenRequest(
        kind=kind,
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=stream and bool(options.get("include_usage", False)),
    )


def parse_tokenize(body: JsonObj, model_name: str) -> list[str]:
    """Tokens of a /tokenize body: `{"prompt"}` or `{"messages", "add_generation_prompt"}`."""
    check_model(body, model_name)
    if "messages" in body:
        return render_chat(body["messages"], bool(body.get("add_generation_prompt", True)))
    return completion_prompt(body.get("prompt"))


def token_ids(tokens: list[str]) -> list[int]:
    """Small, deterministic ids for words (the simulator has no real vocabulary)."""
    cache = _TOKEN_IDS
    ids: list[int] = []
    append = ids.append
    for word in tokens:
        tid = cache.get(word)
        if tid is None:
            tid = zlib.crc32(word.encode()) % TOKEN_ID_RANGE
            if len(cache) < _TOKEN_IDS_MAX:
                cache[word] = tid
        append(tid)
    return ids


def words_text(words: list[str]) -> str:
    """Reply text of new output words: each preceded by one space (shared contract)."""
    return "".join(" " + word for word in words)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> JsonObj:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def sse(obj: JsonObj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class ResponseHead:
    """What every body of one response repeats."""

    kind: Kind
    response_id: str
    created: int
    model: str

    def _base(self, object_name: str) -> JsonObj:
        return {
            "id": self.response_id,
            "object": object_name,
            "created": self.created,
            "model": self.model,
        }

    def chunk(self, text: str | None, finish_reason: str | None, role: bool = False) -> bytes:
        """One streamed SSE chunk with new text (and the finish reason on the last one)."""
        if self.kind == "chat":
            delta: JsonObj = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice: JsonObj = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            body = self._base("chat.completion.chunk")
        else:
            choice = {
                "index": 0,
                "text": text or "",
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            body = self._base("text_completion")
        body["choices"] = [choice]
        return sse(body)

    def usage_chunk(self, usage_obj: JsonObj) -> bytes:
        name = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        body = self._base(name)
        body["choices"] = []
        body["usage"] = usage_obj
        return sse(body)

    def full(self, text: str, finish_reason: str | None, usage_obj: JsonObj) -> JsonObj:
        """The non-streaming response body."""
        if self.kind == "chat":
            body = self._base("chat.completion")
            message = {"role": "assistant", "content": text, "tool_calls": []}
            choice: JsonObj = {"index": 0, "message": message, "logprobs": None}
        else:
            body = self._base("text_completion")
            choice = {"index": 0, "text": text, "logprobs": None, "prompt_logprobs": None}
        choice["finish_reason"] = finish_reason
        choice["stop_reason"] = None
        body["choices"] = [choice]
        body["usage"] = usage_obj
        return body
