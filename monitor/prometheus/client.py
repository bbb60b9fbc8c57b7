"""A small async client of Prometheus's HTTP API (`/api/v1/query`, `/api/v1/query_range`).

The transport edge of the fleet monitor: httpx errors, bad status codes, timeouts and
Prometheus's own `{"status": "error"}` answers become one `PrometheusError` (a
`MonitorError`) with a one-line message; callers decide whether that is a failed cycle or a
user error. Any server that answers Prometheus's API (Thanos, Mimir, VictoriaMetrics) works.
Written on httpx, which the tool already uses, rather than a client library: the three calls
it needs are a few lines each, and the libraries on offer are synchronous and bring pandas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from stallkit.monitor.errors import MonitorError


class PrometheusError(MonitorError):
    """A Prometheus query failed (unreachable, HTTP error, or an error answer).

    `error_type`: Prometheus's own `errorType` when it answered with one (`bad_data`: the
    query does not parse or is not valid PromQL)."""

    def __init__(self, message: str, hint: str = "", error_type: str | None = None) -> None:
        super().__init__(message, hint)
        self.error_type = error_type


def _fmt(t: float) -> str:
    return f"{t:.3f}"


class PrometheusClient:
    """Queries one Prometheus; owns its HTTP client unless one is passed in."""

    def __init__(
        self, url: str, *, timeout_s: float = 10.0, client: httpx.AsyncClient | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._own = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._timeout_s = timeout_s

    async def _get(self, path: str, params: Mapping[str, str]) -> Any:
        try:
            # POST with a form, as Prometheus allows: a long selector never meets a URL limit
            response = await self._client.post(
                f"{self.url}{path}", data=dict(params), timeout=self._timeout_s
            )
        except httpx.TimeoutException:
            raise PrometheusError(f"{self.url}: timed out after {self._timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise PrometheusError(f"{self.url}: {type(exc).__name__}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            raise PrometheusError(
                f"{self.url}{path}: HTTP {response.status_code}, not JSON"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "") if isinstance(body, dict) else ""
            kind = body.get("errorType") if isinstance(body, dict) else None
            raise PrometheusError(
                f"{self.url}{path}: HTTP {response.status_code}: {error}",
                error_type=kind if isinstance(kind, str) else None,
            )
        return body.get("data")

    async def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result (vector or matrix), at `at` (Unix seconds; None: now)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = _fmt(at)
        data = await self._get("/api/v1/query", params)
        result = data.get("result", []) if isinstance(data, dict) else []
        return result if isinstance(result, list) else []

    async def query_range(
        self, expr: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        """A range query's matrix (the caller keeps it within 11,000 points per series)."""
        params = {"query": expr, "start": _fmt(start), "end": _fmt(end), "step": f"{step_s:g}"}
        data = await self._get("/api/v1/query_range", params)
        result = data.get("result", []) if isinstance(data, dict) else []
        return result if isinstance(result, list) else []

    async def label_values(
        self, label: str, match: str, start: float | None = None, end: float | None = None
    ) -> list[str]:
        """The values `label` takes on the series `match` selects (over [start, end])."""
        params = {"match[]": match}
        if start is not None and end is not None:
            params |= {"start": _fmt(start), "end": _fmt(end)}
        try:
            response = await self._client.get(
                f"{self.url}/api/v1/label/{label}/values", params=params, timeout=self._timeout_s
            )
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise PrometheusError(f"{self.url}: label values: {exc}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{self.url}: label values: {body.get('error', '')}")
        return [str(v) for v in body.get("data", [])]

    async def check(self) -> None:
        """Raise a one-line error with a hint when the server does not answer queries."""
        try:
            await self.query("1")
        except PrometheusError as exc:
            raise PrometheusError(
                f"cannot query Prometheus: {exc}", hint="is --prometheus the server's base URL?"
            ) from None

    async def aclose(self) -> None:
        """Close the HTTP client if this one made it."""
        if self._own:
            await self._client.aclose()
