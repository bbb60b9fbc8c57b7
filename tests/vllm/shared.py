"""The real-vLLM tier's shared server: one start-up serves every test module that asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stallkit.engine.launch.vllm import VllmLauncher
from stallkit.engine.spec import parse_spec
from tests.leaks import kept_beyond_the_test


class SharedServer:
    """The tier's one real vLLM server, started on first use.

    A start-up is 30-70 s on two cores, so test_real_vllm.py, test_real_vllm_agents.py and
    test_real_vllm_stop.py share one: their names run them one after another, after the tests
    that start engines of their own, so the server is idle beside none of those. The stop test
    `take`s it (and stops it); a test asking after that, in another order, gets a fresh one.
    Every test that stops the engine core (SIGSTOP) continues it in a `finally`.
    """

    def __init__(
        self,
        model_dir: Path,
        factory: pytest.TempPathFactory,
        engine_args: tuple[str, ...],
        startup_timeout_s: float,
    ) -> None:
        self._model_dir, self._factory = model_dir, factory
        self._engine_args, self._startup_timeout_s = engine_args, startup_timeout_s
        self._launcher: VllmLauncher | None = None
        self._failed: str | None = None

    def get(self) -> VllmLauncher:
        """The running server, started on first use. A start-up that failed (or ran past the
        test's time limit) is not tried again by every later test: they fail at once with
        its reason."""
        if self._failed is not None:
            pytest.fail(f"the shared vLLM server did not start earlier: {self._failed}")
        if self._launcher is None:
            launcher = VllmLauncher(
                parse_spec(f"vllm:{self._model_dir}"),
                self._factory.mktemp("vllm-run"),
                self._engine_args,
            )
            try:
                with kept_beyond_the_test():  # the tier's server, not the first test's
                    launcher.start()
                    launcher.wait_healthy(self._startup_timeout_s)
            except BaseException as e:
                self._failed = f"{type(e).__name__}: {e}"[:500]
                launcher.stop()
                raise
            self._launcher = launcher
        return self._launcher

    def take(self) -> VllmLauncher:
        """The running server, for a test that stops it; later users get a new one."""
        launcher, self._launcher = self.get(), None
        return launcher

    def close(self) -> None:
        if self._launcher is not None:
            self._launcher.stop()
            self._launcher = None
