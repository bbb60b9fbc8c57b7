"""The twin's front door: what vLLM's engine refuses before its scheduler sees a request.

A prompt is checked by the running release's own input validation (`InputProcessor.
_validate_model_inputs` of `vllm.v1.engine.input_processor`, the code the engine runs on every
request): an empty prompt, and one of `max_model_len` tokens or more, are refused with the
release's message. The KV pool is not checked: vLLM takes a prompt larger than its pool, and
(under FCFS, whole prompts reserved) that request heads the queue and is never scheduled. The
output length is what vLLM's OpenAI front lets through (`get_max_tokens`: at most what fits in
`max_model_len`), and `SamplingParams` itself refuses `max_tokens` below 1. Imports vLLM:
built where a twin runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stallkit.engine.core.records import SimRequestError

__all__ = ["FrontDoor"]


class FrontDoor:
    """vLLM's own request checks over the twin scheduler's `vllm_config`."""

    def __init__(self, vllm_config: Any) -> None:
        from vllm.sampling_params import SamplingParams

        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self._params_cls = SamplingParams
        self._errors: tuple[type[Exception], ...] = (ValueError,)
        try:  # vLLM 0.2x before its validation error class: a ValueError
            from vllm.exceptions import VLLMValidationError

            self._errors += (VLLMValidationError,)
        except ImportError:
            pass
        self._processor = _input_processor(vllm_config)

    def check_prompt(self, ids: Sequence[int]) -> None:
        """SimRequestError, with vLLM's message, for a prompt its engine refuses."""
        try:
            if self._processor is not None:
                from vllm.inputs import tokens_input

                self._processor._validate_model_inputs(None, tokens_input(list(ids)))
            else:
                _mirrored_prompt_check(len(ids), self.max_model_len)
        except self._errors as exc:
            raise SimRequestError(str(exc), self._hint()) from None

    def sampling_params(self, prompt_tokens: int, max_tokens: int) -> Any:
        """The request's SamplingParams: `max_tokens` cut to what fits in max_model_len (vLLM's
        OpenAI front does the same), EOS ignored; SimRequestError where vLLM refuses them."""
        fits = min(max_tokens, self.max_model_len - prompt_tokens)
        try:
            return self._params_cls(max_tokens=fits, ignore_eos=True)
        except self._errors as exc:
            raise SimRequestError(str(exc)) from None

    def _hint(self) -> str:
        return f"vLLM's own check: a prompt below max_model_len ({self.max_model_len}) tokens"


def _input_processor(vllm_config: Any) -> Any:
    """The release's InputProcessor over the twin's config, or None where the release has no
    such class with this call (0.2x's `Processor` took a tokenizer group and other inputs)."""
    try:
        from vllm.inputs import tokens_input
        from vllm.v1.engine.input_processor import InputProcessor

        processor = InputProcessor(vllm_config)
        processor._validate_model_inputs(None, tokens_input([2]))
    except Exception:  # another release's API: its condition is mirrored below
        return None
    return processor


def _mirrored_prompt_check(prompt_tokens: int, max_model_len: int) -> None:
    """vLLM 0.32's `InputProcessor._validate_prompt_len` for a decoder-only text model, its
    condition and messages, for a release whose InputProcessor cannot be called as 0.32's."""
    if prompt_tokens == 0:
        raise ValueError("The decoder prompt cannot be empty")
    if prompt_tokens > max_model_len:
        raise ValueError(
            f"The decoder prompt (length {prompt_tokens}) is longer than the maximum model "
            f"length of {max_model_len}. Make sure that `max_model_len` is no smaller than the "
            "number of text tokens."
        )
    if prompt_tokens == max_model_len:
        raise ValueError(
            f"The decoder prompt (length {prompt_tokens}) plus the number of requested output "
            f"tokens (at least 1) is longer than the maximum model length of {max_model_len}. "
            "Make sure that `max_model_len` is no smaller than the number of text tokens "
            "(prompt + requested output tokens)."
        )
