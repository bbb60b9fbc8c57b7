"""Fetch and parse an engine's `/metrics` page; a failure is a result, not an exception.

The transport edge: httpx errors, bad status codes, timeouts and unparseable pages all
become a `ScrapeResult` with an `error` string, which the loop records as `down`. Only the
first scrape of a run (`check_engine`) turns a failure into a `MonitorError`, so an
unreachable URL is a one-line error at start.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.parse import MetricsSnapshot, parse_metrics


def metrics_url(url: str) -> str:
    """The `/metrics` URL of an engine given by its base URL (or by the metrics URL itself)."""
    url = url.rstrip("/")
    return url if url.endswith("/metrics") else f"{url}/metrics"


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    """One scrape: a snapshot, or the error that stood in its way."""

    snapshot: MetricsSnapshot | None
    error: str | None = None


class MetricsScraper:
    """Scrapes one engine; owns its HTTP client unless one is passed in."""

    def __init__(
        self, url: str, *, timeout_s: float, client: httpx.AsyncClient | None = None
    ) -> None:
        self.url = metrics_url(url)
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._timeout_s = timeout_s

    async def scrape(self) -> ScrapeResult:
        """GET and parse the page, never raising for engine-side failures."""
        try:
            response = await self._client.get(self.url, timeout=self._timeout_s)
        except httpx.TimeoutException:
            return ScrapeResult(None, f"timed out after {self._timeout_s:g} s")
        except httpx.HTTPError as exc:
            return ScrapeResult(None, f"{type(exc).__name__}: {exc}".rstrip(": "))
        if response.status_code != 200:
            return ScrapeResult(None, f"HTTP {response.status_code}")
        try:
            snapshot = parse_metrics(response.text)
        except MonitorError as exc:
            return ScrapeResult(None, str(exc))
        # a page without the engine's series is an answer (a core dead behind a live API,
        # which the detector judges), not a failure
        return ScrapeResult(snapshot)

    async def check_engine(self) -> MetricsSnapshot:
        """The first scrape: return the snapshot or raise a one-line `MonitorError`."""
        result = await self.scrape()
        if result.snapshot is not None and not result.snapshot.is_vllm:
            result = ScrapeResult(None, "no vLLM metrics on the page")
        if result.snapshot is None:
            raise MonitorError(
                f"cannot read engine metrics at {self.url}: {result.error}",
                hint="is the engine running and the URL right?",
            )
        return result.snapshot

    async def aclose(self) -> None:
        """Close the HTTP client if this scraper made it."""
        if self._own_client:
            await self._client.aclose()
