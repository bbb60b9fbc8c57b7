"""How long one monitor tick costs: scrape a real-size vLLM /metrics page over loopback HTTP,
parse it and run the detector on it. Goal: median <= 5 ms. Prints the figures; not a test.

The page is the recorded two-engine vLLM 0.32 page (every golden family, histograms with
their buckets, process metrics, the fork's scheduler families), served by a tiny HTTP
server in a separate process so that serving it does not share this process's time.
Run: `python benchmarks/monitor_speed.py [--rounds 300]`.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import multiprocessing
import statistics
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.signals.parse import parse_metrics
from stallkit.monitor.signals.scrape import MetricsScraper

PAGE = Path(__file__).parents[1] / "tests" / "monitor" / "data" / "vllm-0.32-two-engines.txt"


def _serve(body: bytes, port_queue: multiprocessing.Queue[int]) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_queue.put(server.server_address[1])
    server.serve_forever()


def _ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:6.3f} ms  p90 " + (
        f"{statistics.quantiles(values, n=10)[-1] * 1e3:6.3f} ms"
    )


async def _bench(url: str, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"scrape+parse": [], "detector": [], "tick": []}
    detector = StallDetector(MonitorConfig(), gpu_checked=False)
    async with httpx.AsyncClient() as client:
        scraper = MetricsScraper(url, timeout_s=5.0, client=client)
        await scraper.scrape()  # connect once, as the loop's kept-alive client does
        for i in range(rounds):
            t0 = time.perf_counter()
            result = await scraper.scrape()
            t1 = time.perf_counter()
            assert result.snapshot is not None, result.error
            detector.observe(float(i), result.snapshot, None)
            t2 = time.perf_counter()
            times["scrape+parse"].append(t1 - t0)
            times["detector"].append(t2 - t1)
            times["tick"].append(t2 - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    text = PAGE.read_text()
    body = text.encode()
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(body, ports), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=10)}"
        times = asyncio.run(_bench(url, args.rounds))
    finally:
        server.terminate()
        server.join()
    parse_only = []
    full_parse = []
    for _ in range(50):
        t0 = time.perf_counter()
        parse_metrics(text)
        t1 = time.perf_counter()
        for _family in text_string_to_metric_families(text):
            pass
        full_parse.append(time.perf_counter() - t1)
        parse_only.append(t1 - t0)
    print(f"page: {len(body) / 1024:.0f} KiB, {text.count(chr(10))} lines, 2 engines")
    print(f"parse only           {_ms(parse_only)}")
    print(f"  (whole-page prometheus_client parse, for comparison: {_ms(full_parse)})")
    for name, values in times.items():
        print(f"{name:<20} {_ms(values)}")
    median_ms = statistics.median(times["tick"]) * 1e3
    verdict = "meets" if median_ms <= 5.0 else "MISSES"
    print(f"one tick (scrape + parse + detect): median {median_ms:.3f} ms, {verdict} the 5 ms goal")


if __name__ == "__main__":
    main()
