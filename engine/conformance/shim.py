"""A pytest plugin for `kit engine conformance`: vLLM's `tests/v1/core` with a scheduler swapped.

Loaded with `-p stallkit.engine.conformance.shim` into a pytest run inside a vLLM source tree. vLLM's
`tests/v1/core/utils.create_scheduler` builds `scheduler_cls or (AsyncScheduler if
async_scheduling else Scheduler)`, looking both names up in its module when called. Once the
tests are collected the plugin rebinds the one the class under test stands in for
(`AsyncScheduler` for a class derived from it, `Scheduler` for any other) and wraps the
module's `VllmConfig` so that the given JSON object is merged into `additional_config`. Tests
that build a scheduler themselves, or pass `scheduler_cls`, keep theirs. With or without a
class, the plugin records which scheduler classes each test built (vLLM's `Scheduler.__init__`
runs for every one), so that the report can tell the swapped tests from the others.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from stallkit.engine.errors import EngineError
from stallkit.engine.twin.config import PATCHED_SCHEDULER, STOCK_SCHEDULER

if TYPE_CHECKING:
    import pytest

OPTION_CLASS = "--conformance-class"
OPTION_CONFIG = "--conformance-additional-config"
OPTION_RECORD = "--conformance-record"
_UTILS = ("tests", "v1", "core", "utils.py")


class ShimRecord(BaseModel):
    """What the plugin saw in one run: the file it writes, the runner reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    built: dict[str, list[str]] = Field(
        description="test id -> the scheduler classes it built, in order, each once"
    )
    swapped: list[str] = Field(
        description="the names rebound in tests/v1/core/utils (empty on the stock run)"
    )
    utils: str | None = Field(description="the tests/v1/core/utils.py module patched, if any")


def class_name(cls: type) -> str:
    """A class's dotted path, as `load_class` takes it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def load_class(path: str) -> type:
    """The class named `package.module.Class` (or `package.module:Class`); a user error, not a
    traceback, if it cannot be imported or is not derived from vLLM's `Scheduler` (the tests
    drive its internals, and both the swap and the record go through it)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from stallkit.engine.twin.build import scheduler_class

    if "." not in path.replace(":", "."):
        raise EngineError(f"{path!r} is not a class path", f"e.g. {PATCHED_SCHEDULER}")
    cls = scheduler_class(path, allow_async=True)
    if not issubclass(cls, Scheduler):
        raise EngineError(
            f"{path} is not derived from vLLM's Scheduler",
            f"vLLM's tests/v1/core drive the scheduler's internals: derive it from {STOCK_SCHEDULER}",
        )
    return cls


def _utils_module() -> ModuleType | None:
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if (
            path
            and Path(path).parts[-len(_UTILS) :] == _UTILS
            and hasattr(module, "create_scheduler")
        ):
            return module
    return None


class _Plugin:
    """The hooks of one run: the swap after collection, the record of every test."""

    def __init__(self, cls: type | None, extra: dict[str, Any], record: Path) -> None:
        self.cls, self.extra, self.record = cls, extra, record
        self.current = "(collection)"
        self.built: dict[str, list[str]] = {}
        self.swapped: list[str] = []
        self.utils: str | None = None
        from vllm.v1.core.sched.scheduler import Scheduler

        self._scheduler = Scheduler
        self._init = Scheduler.__init__
        original, plugin = Scheduler.__init__, self

        @functools.wraps(original)
        def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
            names = plugin.built.setdefault(plugin.current, [])
            if class_name(type(self)) not in names:
                names.append(class_name(type(self)))
            original(self, *args, **kwargs)

        setattr(Scheduler, "__init__", recording_init)  # noqa: B010 (vLLM's, typed or not)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        utils = _utils_module()
        self.utils = getattr(utils, "__file__", None)
        if self.cls is None or utils is None:
            return
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        stock = AsyncScheduler if issubclass(self.cls, AsyncScheduler) else self._scheduler
        self.swapped = sorted(name for name, value in vars(utils).items() if value is stock)
        if not self.swapped:
            import pytest

            raise pytest.UsageError(f"{utils.__file__} names no {stock.__name__} to swap")
        for name in self.swapped:
            setattr(utils, name, self.cls)
        if self.extra:
            original, extra = getattr(utils, "VllmConfig"), self.extra  # noqa: B009

            def with_additional_config(*args: Any, **kwargs: Any) -> Any:
                kwargs["additional_config"] = {**(kwargs.get("additional_config") or {}), **extra}
                return original(*args, **kwargs)

            setattr(utils, "VllmConfig", with_additional_config)  # noqa: B010
            self.swapped.append("VllmConfig")

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.current = nodeid

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        setattr(self._scheduler, "__init__", self._init)  # noqa: B010
        done = ShimRecord(built=self.built, swapped=self.swapped, utils=self.utils)
        self.record.write_text(done.model_dump_json(indent=1), encoding="utf-8")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stallkit conformance")
    group.addoption(
        OPTION_CLASS, default=None, help="the scheduler class that create_scheduler builds"
    )
    group.addoption(OPTION_CONFIG, default="{}", help="JSON merged into additional_config")
    group.addoption(OPTION_RECORD, default=None, help="where to write what the tests built")


def pytest_configure(config: pytest.Config) -> None:
    record = config.getoption(OPTION_RECORD)
    if record is None:
        return
    import pytest

    path = config.getoption(OPTION_CLASS)
    try:
        cls = load_class(path) if path else None
        extra = json.loads(config.getoption(OPTION_CONFIG))
    except (EngineError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(_Plugin(cls, extra, Path(record)), "stallkit-conformance")
