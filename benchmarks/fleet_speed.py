"""What watching a fleet through Prometheus costs, and how fast a backtest replays history.
Prints the figures; not a test.

Fleet watch: a stand-in for Prometheus's HTTP API, in a separate process, answers the fleet
monitor's three instant queries for N engines (each engine's vLLM series with counters that
move, one engine in ten frozen, two GPUs each, a new scrape every second); `watch_fleet`
runs against it for a while at a 1 s interval, and this process's CPU time is measured:
engines read per cycle, the cycle's wall time, and CPU seconds per engine per minute.

Backtest: the same stand-in answers `query_range` with a day of history per engine at a
15 s step (5,760 points), and `backtest_prometheus` replays it: engine-days per wall second
(the stand-in's own time to build answers included, since a real Prometheus takes its own).

Run: `python benchmarks/fleet_speed.py [--engines 10 100 1000] [--watch-s 20] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from typing import Any

import orjson

from stallkit.contract import names
from stallkit.monitor.backtest.sources import backtest_prometheus
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.events import StallStarted
from stallkit.monitor.fleet.bank import EngineEvent
from stallkit.monitor.fleet.watch import watch_fleet
from stallkit.monitor.prometheus.client import PrometheusClient
from stallkit.monitor.prometheus.queries import FleetQuery

SCRAPE_S = 1.0
STEP_S = 15.0
DAY_S = 86_400.0


def _engine_values(i: int, t: float) -> dict[str, float]:
    frozen = i % 10 == 0 and t % 3600 > 600  # one in ten stops after ten minutes of each hour
    moving = t % 3600 if not frozen else 600.0
    return {
        names.NUM_REQUESTS_RUNNING: 4,
        names.NUM_REQUESTS_WAITING: 2,
        names.KV_CACHE_USAGE: 0.9,
        names.GENERATION_TOKENS: 40 * moving,
        names.PROMPT_TOKENS: 900 * moving,
        names.NUM_PREEMPTIONS: moving // 60,
        names.PREFIX_CACHE_QUERIES: 900 * moving,
        names.PREFIX_CACHE_HITS: 500 * moving,
        names.sample(names.ITERATION_TOKENS, "count"): 30 * moving,
        "up": 1,
    }


def _answer(query: str, n: int, times: list[float], origin: float = 0.0) -> list[dict[str, Any]]:
    """The stand-in's answer (a matrix, or a vector for one time) to one of the three queries."""
    vector = len(times) == 1
    out: list[dict[str, Any]] = []

    def add(metric: dict[str, str], values: list[list[Any]]) -> None:
        out.append(
            {"metric": metric, "value": values[0]}
            if vector
            else {"metric": metric, "values": values}
        )

    for i in range(n):
        instance = f"10.0.{i // 250}.{i % 250}:8000"
        scraped = [(t, t - t % SCRAPE_S) for t in times]
        if query.startswith("max by"):
            add({"instance": instance}, [[t, str(s)] for t, s in scraped])
        elif query.startswith(names.DCGM_GPU_UTIL):
            for gpu in ("0", "1"):
                vals = [[t, "0" if i % 10 == 0 else "90"] for t, _s in scraped]
                add({"__name__": names.DCGM_GPU_UTIL, "instance": instance, "gpu": gpu}, vals)
        else:
            rows = [_engine_values(i, s - origin) for _t, s in scraped]
            for name in rows[0]:
                metric = {"__name__": name, "instance": instance, "job": "vllm", "engine": "0"}
                add(
                    metric,
                    [[t, f"{row[name]:g}"] for (t, _s), row in zip(scraped, rows, strict=True)],
                )
    return out


def _serve(n: int, port_queue: multiprocessing.Queue[int]) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    # a watch starts 590 s into the hour: the frozen engines stop ten seconds in
    origin = time.time() - 590

    async def query(request: Request) -> Response:
        from urllib.parse import parse_qs

        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        expr = form["query"]
        if request.url.path.endswith("query_range"):
            start, end, step = (float(form[k]) for k in ("start", "end", "step"))
            times = [start + k * step for k in range(int((end - start) / step + 1e-9) + 1)]
            kind = "matrix"
        else:
            times = [float(form.get("time", time.time()))]
            kind = "vector"
            if expr != "1":
                data = {"resultType": kind, "result": _answer(expr, n, times, origin)}
                return Response(
                    orjson.dumps({"status": "success", "data": data}), media_type="application/json"
                )
        if expr == "1":
            data = {"resultType": "scalar", "result": [times[0], "1"]}
        else:
            data = {"resultType": kind, "result": _answer(expr, n, times)}
        return Response(
            orjson.dumps({"status": "success", "data": data}), media_type="application/json"
        )

    async def labels(request: Request) -> Response:
        values = [f"10.0.{i // 250}.{i % 250}:8000" for i in range(n)]
        return Response(
            orjson.dumps({"status": "success", "data": values}), media_type="application/json"
        )

    app = Starlette(routes=[
        Route("/api/v1/query", query, methods=["POST"]),
        Route("/api/v1/query_range", query, methods=["POST"]),
        Route("/api/v1/label/instance/values", labels),
    ])  # fmt: skip
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_queue.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False)).run(sockets=[sock])


async def _watch(url: str, n: int, seconds: float) -> dict[str, float]:
    config = MonitorConfig(interval_s=1.0, stall_after_s=5.0, stop_after_s=None, gpu_window_s=0)
    client = PrometheusClient(url, timeout_s=60)
    cycles: list[float] = []
    engines_per_cycle: list[int] = []
    stalled: set[str] = set()
    seen: set[str] = set()
    cpu0, wall0 = time.process_time(), time.monotonic()
    last = wall0
    try:
        async for event in watch_fleet(client, FleetQuery(), config, duration_s=seconds):
            if isinstance(event, EngineEvent):
                seen.add(event.engine)
                if isinstance(event.event, StallStarted):
                    stalled.add(event.engine)
                if type(event.event).__name__ == "Verdict":
                    engines_per_cycle[-1:] = (
                        [engines_per_cycle[-1] + 1] if engines_per_cycle else [1]
                    )
            now = time.monotonic()
            if now - last > 0.5:  # a new cycle (cycles are 1 s apart)
                cycles.append(now - last)
                engines_per_cycle.append(0)
            last = now
    finally:
        await client.aclose()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return {
        "engines_seen": len(seen),
        "stalled": len(stalled),
        "engines_per_cycle": statistics.median(engines_per_cycle[1:-1] or [0]),
        "cpu_s_per_engine_min": cpu / n / (wall / 60),
        "cpu_share": cpu / wall,
    }


async def _backtest(url: str, n: int, days: float) -> dict[str, float]:
    config = MonitorConfig(interval_s=STEP_S, stall_after_s=60, stop_after_s=None, gpu_window_s=0)
    client = PrometheusClient(url, timeout_s=300)
    start = 1_700_000_000.0
    began = time.monotonic()
    try:
        tally = await backtest_prometheus(
            client, FleetQuery(), config, start, start + days * DAY_S, STEP_S
        )
    finally:
        await client.aclose()
    wall = time.monotonic() - began
    stalls = sum(e.stalls for e in tally.engines(start + days * DAY_S))
    return {"engine_days_per_s": n * days / wall, "wall_s": wall, "stalls": stalls}


def _openmetrics(n: int, start: float, days: float) -> str:
    """N engines' history at the scrape interval STEP_S, as OpenMetrics with timestamps."""
    rows: dict[str, list[str]] = {}
    count = int(days * DAY_S / STEP_S)
    for i in range(n):
        instance = f"10.0.{i // 250}.{i % 250}:8000"
        for k in range(count):
            t = start + k * STEP_S
            for name, value in _engine_values(i, t - start).items():
                job = "" if name == "up" else ',engine="0"'
                rows.setdefault(name, []).append(
                    f'{name}{{instance="{instance}",job="vllm"{job}}} {value:g} {t:.3f}'
                )
            for gpu in ("0", "1"):
                util = "0" if i % 10 == 0 else "90"
                rows.setdefault(names.DCGM_GPU_UTIL, []).append(
                    f'{names.DCGM_GPU_UTIL}{{instance="{instance}",gpu="{gpu}"}} {util} {t:.3f}'
                )
    lines = []
    for name, samples in rows.items():
        lines.append(f"# TYPE {name} unknown")
        lines.extend(samples)  # one series' samples together, in time order
    return "\n".join([*lines, "# EOF", ""])


async def _real_backtest(n: int, days: float, tmp: str) -> dict[str, float]:
    """The same history backfilled with promtool into a real Prometheus, then replayed."""
    import contextlib
    import shutil
    import socket
    import subprocess
    from pathlib import Path

    import httpx

    start = (time.time() - 3 * DAY_S) // STEP_S * STEP_S
    path = Path(tmp) / "history.om.txt"
    path.write_text(_openmetrics(n, start, days))
    data = Path(tmp) / f"data-{n}"
    if not data.exists():
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(path), str(data)],
                       check=True, capture_output=True)  # fmt: skip
    (Path(tmp) / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={tmp}/prometheus.yml",
         f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
         "--storage.tsdb.retention.time=30d"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        config = MonitorConfig(
            interval_s=STEP_S, stall_after_s=60, stop_after_s=None, gpu_window_s=0
        )
        client = PrometheusClient(url, timeout_s=300)
        cpu0, began = time.process_time(), time.monotonic()
        try:
            tally = await backtest_prometheus(
                client,
                FleetQuery(selector='job="vllm"'),
                config,
                start,
                start + days * DAY_S,
                STEP_S,
            )
        finally:
            await client.aclose()
        wall, cpu = time.monotonic() - began, time.process_time() - cpu0
    finally:
        proc.terminate()
        proc.wait()
    stalls = sum(e.stalls for e in tally.engines(start + days * DAY_S))
    return {"engine_days_per_s": n * days / wall, "client_cpu_s_per_engine_day": cpu / (n * days),
            "wall_s": wall, "stalls": stalls}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, nargs="*", default=[10, 100, 1000])
    parser.add_argument("--watch-s", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backtest-engines", type=int, default=20)
    parser.add_argument(
        "--real-engines", type=int, default=10,
        help="engines of a backfilled real Prometheus to backtest (0: skip; needs promtool)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.real_engines:
        import shutil
        import tempfile

        if shutil.which("promtool") and shutil.which("prometheus"):
            with tempfile.TemporaryDirectory() as tmp:
                runs = [
                    asyncio.run(_real_backtest(args.real_engines, 1.0, tmp))
                    for _ in range(args.repeat)
                ]
            _print(f"backtest {args.real_engines} engines x 1 day, real Prometheus", runs)
        else:
            print("backtest on a real Prometheus: skipped (no promtool/prometheus on PATH)")
    ctx = multiprocessing.get_context("spawn")
    for n in [*args.engines, *([None] if args.backtest_engines else [])]:
        size = args.backtest_engines if n is None else n
        ports: multiprocessing.Queue[int] = ctx.Queue()
        proc = ctx.Process(target=_serve, args=(size, ports), daemon=True)
        proc.start()
        url = f"http://127.0.0.1:{ports.get(timeout=30)}"
        time.sleep(0.5)
        try:
            runs = []
            for _ in range(args.repeat):
                if n is None:
                    runs.append(asyncio.run(_backtest(url, size, days=1.0)))
                else:
                    runs.append(asyncio.run(_watch(url, size, args.watch_s)))
        finally:
            proc.terminate()
            proc.join()
        label = (
            f"backtest {size} engines x 1 day, stand-in" if n is None else f"watch {n:5d} engines"
        )
        _print(label, runs)


def _print(label: str, runs: list[dict[str, float]]) -> None:
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"{label}: {key:28s} median {statistics.median(values):10.4g}  "
              f"min {min(values):10.4g}  max {max(values):10.4g}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
