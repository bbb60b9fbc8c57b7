"""Fetch and parse an engine's `/metrics` page; a failure is a result, not an exception.

The transport edge: httpx errors, bad status codes, timeouts and unparseable pages all
become a `ScrapeResult` with an `error` string, which the loop records as `down`. A scrape
whose connection was accepted and whose page then timed out is marked `unanswered`: a
process frozen whole (SIGSTOP, a hung single-process server) still has its connections
accepted by the kernel's listen backlog but never answers, while a dead one refuses them, so
the detector can tell a frozen engine from a gone one without the run's clients. Only the
first scrape of a run (`check_engine`) turns a failure into a `MonitorError`, so an
unreachable URL is a one-line error at start. That first page also fixes the engine's metric
dialect, unless one was given: told apart once, so a later page without the engine's series
(a core dead behind a live server) is that engine's blank page, not another dialect's.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from stallkit.contract.errors import failure_words
from stallkit.monitor.errors import MonitorError
from stallkit.monitor.signals.dialects import DIALECTS, Dialect, detect_dialect
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
    #: the connection was accepted and the page timed out (a frozen engine, not a gone one)
    unanswered: bool = False


@dataclass(frozen=True, slots=True)
class Fetched:
    """One GET of the page: its text, or why not (`unanswered`: see `ScrapeResult`)."""

    text: str | None
    error: str | None = None
    unanswered: bool = False


class MetricsScraper:
    """Scrapes one engine; owns its HTTP client unless one is passed in."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float,
        client: httpx.AsyncClient | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self.url = metrics_url(url)
        self.dialect = dialect  # None until the first page tells it apart
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._timeout_s = timeout_s

    async def get(self) -> Fetched:
        """The page's text, or why not; a read that timed out on an accepted connection is
        `unanswered` (a connect that timed out is not: nothing was seen to listen)."""
        timeout_s = self._timeout_s
        try:
            response = await self._client.get(self.url, timeout=timeout_s)
        except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            said = f"connection accepted, page unanswered after {timeout_s:g} s"
            return Fetched(None, f"{said} ({type(exc).__name__})", unanswered=True)
        except httpx.TimeoutException as exc:  # no connection (or none free) in time
            return Fetched(None, f"timed out after {timeout_s:g} s ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return Fetched(None, failure_words(f"GET {self.url}", exc))
        if response.status_code != 200:
            return Fetched(None, f"HTTP {response.status_code}")
        return Fetched(response.text)

    async def fetch(self) -> tuple[str | None, str | None]:
        """The page's text, or None and why."""
        got = await self.get()
        return got.text, got.error

    def _parse(self, text: str) -> ScrapeResult:
        try:
            snapshot = parse_metrics(text, self.dialect)
        except MonitorError as exc:
            return ScrapeResult(None, str(exc))
        # a page without the engine's series is an answer (a core dead behind a live API,
        # which the detector judges), not a failure
        return ScrapeResult(snapshot)

    async def scrape(self) -> ScrapeResult:
        """GET and parse the page, never raising for engine-side failures."""
        got = await self.get()
        if got.text is None:
            return ScrapeResult(None, got.error, got.unanswered)
        return self._parse(got.text)

    async def check_engine(self) -> MetricsSnapshot:
        """The first scrape: return the snapshot or raise a one-line `MonitorError`; fixes
        the dialect (the page's own, unless one was given)."""
        text, error = await self.fetch()
        if text is not None and self.dialect is None:
            self.dialect = detect_dialect(text)
            if self.dialect is None:
                raise _no_dialect(self.url)
        result = ScrapeResult(None, error) if text is None else self._parse(text)
        if result.snapshot is not None and not result.snapshot.has_engine_series:
            engine = "engine" if self.dialect is None else self.dialect.engine
            result = ScrapeResult(None, f"no {engine} metrics on the page")
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


async def resolve_dialect(url: str, name: str | None, *, timeout_s: float) -> Dialect:
    """The dialect `name` names, else the one the engine's page speaks (one GET); a
    `MonitorError` (one line with a hint) for an unknown name, a page that matches none, or
    a named dialect the page shows none of while it speaks another, or an engine that does
    not answer when a dialect is named. Unnamed, an engine that does not answer gets vLLM's:
    the monitor's first scrape says why."""
    from stallkit.monitor.signals.dialects import VLLM, dialect_named

    named = None if name is None else dialect_named(name)
    scraper = MetricsScraper(url, timeout_s=timeout_s)
    try:
        text, error = await scraper.fetch()
    finally:
        await scraper.aclose()
    if named is not None:
        if text is None:  # said now, before the kinds it cannot show
            raise MonitorError(
                f"cannot read engine metrics at {scraper.url}: {error}",
                hint="is the engine running and the URL right?",
            )
        spoken = None if named.recognises(text) else detect_dialect(text)
        if spoken is not None:
            raise MonitorError(
                f"{scraper.url} speaks {spoken.engine}'s metrics ({spoken.name}), not "
                f"{named.engine}'s",
                hint=f"drop --dialect, or give --dialect {spoken.name}",
            )
        return named
    if text is None:
        return VLLM
    found = detect_dialect(text)
    if found is None:
        raise _no_dialect(scraper.url)
    return found


def _no_dialect(url: str) -> MonitorError:
    known = ", ".join(d.name for d in DIALECTS)
    return MonitorError(
        f"{url} serves no engine metrics this monitor reads (no {known} family)",
        hint="is it the engine's /metrics (llama.cpp: --metrics)? "
        "--dialect NAME reads a page in one dialect",
    )
