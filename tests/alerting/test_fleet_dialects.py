"""A mixed fleet through a real Prometheus: simulators speaking vLLM's, SGLang's and
llama.cpp's metric dialects (`--dialect`), under load, one llama.cpp server frozen
(`--freeze-at`). The fleet monitor reads each engine in its own dialect through Prometheus's
API and names the frozen one alone; the rules of every dialect in one file (`kit rules
--dialect all`), evaluated by the same Prometheus, fire for it alone. About 12 s of CPU (four
simulators under load and a Prometheus for the module, as in the vLLM fleet's test): marked
slow."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stallkit.contract.names import DIALECT_NAMES
from stallkit.monitor.prometheus.rules import RulesSettings, rules_yaml
from tests.alerting.alerting_support import prometheus, sim_engine_s, sim_process, tool
from tests.alerting.test_fleet_prometheus import (
    FREEZE_AFTER_S,
    HEALTHY,
    SCALE,
    SCRAPE_S,
    STALLED,
    Engine,
    _load,
    watch_fleet,
)
from tests.machine import scaled

pytestmark = pytest.mark.wallclock

#: name -> (dialect, how it runs); the frozen one last, so its load starts right before it
ENGINES: dict[str, tuple[str, Engine]] = {
    "vllm": ("vllm", HEALTHY),
    "sglang": ("sglang", HEALTHY),
    "llamacpp": ("llamacpp", HEALTHY),
    "llamacpp-frozen": ("llamacpp", STALLED["frozen"]),
}
RULES = RulesSettings(
    stall_after_s=1.0,
    down_after_s=5.0,
    scrape_interval_s=SCRAPE_S,
    evaluation_interval_s=SCRAPE_S,
    gpu=False,
    dialects=DIALECT_NAMES,
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    tool("prometheus")
    tmp = tmp_path_factory.mktemp("mixed")
    rules = tmp / "rules.yml"
    rules.write_text(rules_yaml(RULES))
    with contextlib.ExitStack() as stack:
        sims = {
            name: stack.enter_context(
                sim_process(tmp, SCALE, name, "--dialect", dialect, *engine.args)
            )
            for name, (dialect, engine) in ENGINES.items()
        }
        hosts = {name: s.url.removeprefix("http://") for name, s in sims.items()}
        stack.enter_context(_load({n: (sims[n].url, e) for n, (_d, e) in ENGINES.items()}))
        at_s = sim_engine_s(sims["llamacpp-frozen"].url)
        assert at_s < FREEZE_AFTER_S * SCALE, f"set up too slow: load on at {at_s:g} engine s"
        prom = stack.enter_context(prometheus(tmp, list(hosts.values()), rules, SCRAPE_S))
        yield prom, hosts


@pytest.mark.slow
async def test_a_mixed_fleet_names_the_frozen_engine_alone(
    fleet: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    prom, hosts = fleet
    outcome = await watch_fleet(prom, tmp_path)
    by_host = {host: name for name, host in hosts.items()}
    assert outcome.engines == set(by_host)
    stalled = {by_host[e]: kinds for e, kinds in outcome.stalled_engines().items()}
    assert stalled == {"llamacpp-frozen": {"frozen"}}, stalled


@pytest.mark.slow
async def test_every_dialects_rules_in_one_file_fire_for_the_frozen_engine_alone(
    fleet: tuple[str, dict[str, str]],
) -> None:
    prom, hosts = fleet
    query = 'ALERTS{alertname="EngineStalled", alertstate="firing"}'
    # the freeze is seconds behind by now and its alert fires stall_after (1 s) and an
    # evaluation after it (idle reference machine): 20 s, stretched by this machine's speed
    # and load; a query over loopback takes milliseconds (5 s likewise)
    deadline = time.monotonic() + scaled(20.0)
    firing: list[dict[str, str]] = []
    async with httpx.AsyncClient(timeout=scaled(5.0)) as client:
        while time.monotonic() < deadline:
            answer = await client.get(f"{prom}/api/v1/query", params={"query": query})
            firing = [r["metric"] for r in answer.json()["data"]["result"]]
            if firing:
                break
            await asyncio.sleep(0.5)
        # a healthy engine's alert would have fired by now too: stall_after (1 s) and a few
        # 0.2 s evaluations on the idle reference machine; a slower one evaluates later
        await asyncio.sleep(scaled(2.0))
        answer = await client.get(f"{prom}/api/v1/query", params={"query": query})
        firing = [r["metric"] for r in answer.json()["data"]["result"]]
    assert [(a["instance"], a["kind"], a.get("dialect")) for a in firing] == [
        (hosts["llamacpp-frozen"], "frozen", "llamacpp")
    ]
