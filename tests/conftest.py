"""Shared fixtures: `sim_server`, a live simulated engine on 127.0.0.1 (port 0) in the test's loop.

    async with sim_server(policy="base", time_scale=50.0, block_size=16) as url:
        ...

Keyword arguments other than the serve options are `SimConfig` fields.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

#: the autouse check that fails a test which leaves a listening socket or a child behind
pytest_plugins = ["tests.leaks"]


def pytest_configure(config: pytest.Config) -> None:
    """Children the tests start must take Ctrl-C the way they would from a terminal.

    A shell without job control (a CI script's `cmd &`, `nohup`) starts its background jobs
    with SIGINT ignored, and an ignored signal survives exec: every `kit` a test starts, and
    then interrupts to check that nothing recorded is lost, would ignore the interrupt and run
    on. A handled signal is reset to the default on exec, so handling it here is enough.
    """
    del config
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: set to 1 to run the tests marked `nightly` (the nightly CPU job does; CI leaves them out)
NIGHTLY_ENV = "STALLKIT_NIGHTLY"


#: the xdist group of every test that starts a real engine process (a docker container or a
#: real vLLM server): two of them at once would share two cores with a third of the suite
#: beside them. The twin (vLLM's scheduler in process, no model) is not a server: its tests
#: spread over the workers like any other.
ENGINE_GROUP = "real-engines"
#: test modules whose tests serve real vLLM (besides those asking for the tiny model)
ENGINE_MODULES = re.compile(
    r"tests/vllm/test_(real_vllm|patched_|local_launcher|kit_ab_vllm|tinymodel)"
)
#: fixtures that mean a real vLLM server or its model
ENGINE_FIXTURES = frozenset({"tiny_model_dir", "shared_vllm"})


def xdist_group_of(item: pytest.Item) -> str | None:
    """The worker group `item` must share under `pytest -n N --dist loadgroup`, or None.

    Tests that start real engines run on one worker, one at a time. Tests that share a fixture
    set up once per module, package or session (a Prometheus, a Ray cluster, recorded
    timelines) run on one worker too, so the fixture is set up once, not once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    names = set(info.names_closure) if info is not None else set()
    if (
        item.get_closest_marker("docker")
        or ENGINE_MODULES.match(item.nodeid)
        or names & ENGINE_FIXTURES
    ):
        return ENGINE_GROUP
    shared = [
        fixturedef
        for defs in (info.name2fixturedefs.values() if info is not None else ())
        for fixturedef in defs
        if fixturedef.scope in ("module", "package", "session")
        and fixturedef.baseid.startswith("tests")
    ]
    if not shared:
        return None
    widest = max(shared, key=lambda d: ("module", "package", "session").index(d.scope))
    return widest.baseid if widest.scope != "module" else item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `nightly` (long runs whose behaviour CI covers more cheaply elsewhere) skip
    with the reason unless `STALLKIT_NIGHTLY=1`; tests that must share a worker get their
    xdist group (`xdist_group_of`)."""
    del config
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get(NIGHTLY_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"nightly: set {NIGHTLY_ENV}=1 to run it")
    for item in items:
        if item.get_closest_marker("nightly") is not None:
            item.add_marker(skip)


SimServerFactory = Callable[..., AbstractAsyncContextManager[str]]


@pytest.fixture
def sim_server() -> SimServerFactory:
    """Factory of running simulators: `async with sim_server(**options) as url`."""
    from stallkit.engine.serve.server import ServeOptions, running
    from stallkit.engine.sim.config import SimConfig

    def factory(
        policy: str = "base",
        time_scale: float = 1.0,
        freeze_at_s: float | None = None,
        fail_metrics_at_s: float | None = None,
        log_level: str = "info",
        **config_overrides: Any,
    ) -> AbstractAsyncContextManager[str]:
        config = SimConfig.model_validate({"policy": policy, **config_overrides})
        opts = ServeOptions(
            config=config,
            time_scale=time_scale,
            freeze_at_s=freeze_at_s,
            fail_metrics_at_s=fail_metrics_at_s,
            log_level=log_level,
        )
        return running(opts)

    return factory
