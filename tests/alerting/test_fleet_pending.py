"""`--pending-query` through a real Prometheus: two simulators with requests in flight, one
wedged with its gauges at 0 (`hidden_freeze`), one healthy, and a scripted gateway page that
says what each has in flight (labelled with the engine it forwards to). Joined to each engine
on the group label, the gateway's count catches the hidden wedge as a frozen stall with its
evidence; the same fleet without the query reads that engine as idle; a query Prometheus
refuses is one line and exit 2."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stallkit.monitor.errors import MonitorError
from stallkit.monitor.fleet.watch import check_pending
from stallkit.monitor.prometheus.client import PrometheusClient
from stallkit.monitor.prometheus.queries import client_pending
from tests.alerting.alerting_support import prometheus, sim_engine_s, sim_process, tool
from tests.alerting.test_fleet_prometheus import SCALE, Engine, Fleet, _load, watch_fleet
from tests.machine import scaled
from tests.serving import threaded_server
from tests.support import kit, one_error_line

pytestmark = pytest.mark.wallclock

#: the gateway's in-flight gauge, its upstream label renamed to the engines' group label
PENDING = (
    'sum by (instance) (label_replace(gateway_inflight_requests, "instance", "$1", '
    '"upstream", "(.*)"))'
)
IN_FLIGHT = Engine(requests=2, max_tokens=50_000)


@contextlib.contextmanager
def _gateway(hosts: dict[str, str]) -> Iterator[str]:
    """A page like a gateway's: two requests in flight to each upstream."""
    lines = [f'gateway_inflight_requests{{upstream="{h}"}} 2' for h in hosts.values()]
    body = ("# TYPE gateway_inflight_requests gauge\n" + "\n".join(lines) + "\n").encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with threaded_server(ThreadingHTTPServer(("127.0.0.1", 0), Page)) as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tool("prometheus")
    tmp = tmp_path_factory.mktemp("pending")
    # the wedge strikes once the load is in flight: the healthy simulator starts after it
    # (1-2 s on the idle reference machine), then the load; 2 s, stretched by this
    # machine's speed and load
    wedge_s = scaled(2.0) * SCALE
    faults = {"hidden": ("--fault", f"hidden_freeze@{wedge_s:g}"), "healthy": ()}
    with contextlib.ExitStack() as stack:
        sims = {n: stack.enter_context(sim_process(tmp, SCALE, n, *a)) for n, a in faults.items()}
        hosts = {name: s.url.removeprefix("http://") for name, s in sims.items()}
        stack.enter_context(_load({n: (sims[n].url, IN_FLIGHT) for n in sims}))
        at_s = sim_engine_s(sims["hidden"].url)
        assert at_s < wedge_s, f"set up too slow: load on at {at_s:g} engine s"
        gateway = stack.enter_context(_gateway(hosts))
        job = f'  - job_name: gateway\n    static_configs: [{{targets: ["{gateway}"]}}]\n'
        yield Fleet(
            stack.enter_context(prometheus(tmp, list(hosts.values()), extra_jobs=job)), hosts
        )


def test_the_join_is_on_the_group_label_alone() -> None:
    answer = [
        {"metric": {"instance": "a:1", "job": "gateway"}, "value": [1.0, "2"]},
        {"metric": {"instance": "a:1", "route": "chat"}, "value": [1.0, "1"]},
        {"metric": {"job": "gateway"}, "value": [1.0, "7"]},  # names no engine
        {"metric": {"instance": "b:1"}, "value": [1.0, "NaN"]},
    ]
    assert client_pending(answer, "instance") == {"a:1": 3}


async def _watch(fleet: Fleet, out: Path, pending: str | None) -> dict[str, set[str]]:
    outcome = await watch_fleet(fleet.prom, out, pending)
    by_host = {host: name for name, host in fleet.hosts.items()}
    assert set(outcome.engines) == set(by_host)
    hidden = [s for e, s in outcome.stalls if by_host[e] == "hidden"]
    if hidden:
        assert hidden[0].evidence is not None and hidden[0].evidence.client_waiting == 2
    return {by_host[e]: kinds for e, kinds in outcome.stalled_engines().items()}


@pytest.mark.slow
async def test_a_gateways_in_flight_count_catches_a_wedge_its_gauges_hide(
    fleet: Fleet, tmp_path: Path
) -> None:
    assert await _watch(fleet, tmp_path / "joined", PENDING) == {"hidden": {"frozen"}}
    assert await _watch(fleet, tmp_path / "alone", None) == {}


@pytest.mark.slow
async def test_a_query_prometheus_refuses_is_one_line_and_exit_2(fleet: Fleet) -> None:
    client = PrometheusClient(fleet.prom)
    try:
        with pytest.raises(MonitorError) as refused:
            await check_pending(client, "sum by (instance (")
        await check_pending(client, PENDING)
    finally:
        await client.aclose()
    assert refused.value.message.startswith("--pending-query 'sum by (instance (' is not a query")
    line = one_error_line(
        kit("monitor", "--prometheus", fleet.prom, "--pending-query", "rate(x[", "--duration", "1")
    )
    assert "--pending-query 'rate(x['" in line and "parse error" in line, line
