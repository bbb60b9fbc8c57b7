"""backtest.html: a fleet backtest's report as one self-contained page, from its run directory.

Reads `backtest.json`, `stalls.jsonl` and `alerts.jsonl` when there (the contract's models)
only: the fleet's stall rate
per engine-hour and its stalls by kind, each engine's row (exposure, stalls, rate), every
stall (engine, kind, onset, duration, what the engine showed at the onset) with a bar on the
range's time axis, and, when `kit rules --backtest` ran, when each alert fired beside them.
No script, no stylesheet or font from the network.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from pathlib import Path

from stallkit.contract.fleet import (
    ALERTS_FILE,
    BACKTEST_FILE,
    STALLS_FILE,
    AlertFiring,
    BacktestFile,
    BacktestStall,
)
from stallkit.contract.jsonl import read_json, read_jsonl

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.bar { position: relative; width: 320px; height: 10px; background: #eee; }
.bar span { position: absolute; top: 0; height: 10px; background: #c33; min-width: 2px; }
p.note { color: #555; font-size: 0.9em; }
"""


def _when(t: float, unix: bool) -> str:
    if not unix:
        return f"{t:.1f} s"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _num(value: float | int | None, fmt: str = "{:.3g}") -> str:
    return "-" if value is None else fmt.format(value)


def _bar(stall: BacktestStall, start: float, end: float) -> str:
    span = max(end - start, 1e-9)
    left = (stall.onset - start) / span * 100
    width = stall.duration_s / span * 100
    return f'<div class="bar"><span style="left:{left:.2f}%;width:{width:.2f}%"></span></div>'


def _alerts(alerts: list[AlertFiring], stalls: list[BacktestStall], unix: bool) -> list[str]:
    """The generated alerts' section: each alert's life beside the engine's stall onsets."""
    onsets: dict[str, list[str]] = {}
    for stall in stalls:
        onsets.setdefault(stall.engine, []).append(_when(stall.onset, unix))
    rows = [
        "<h2>Alerts of the generated rules</h2><table><tr><th>alert</th><th>engine</th>"
        "<th>pending</th><th>fired</th><th>resolved</th><th>detector onsets</th></tr>"
    ]
    for a in alerts:
        fired = "never" if a.fired is None else _when(a.fired, unix)
        resolved = "-" if a.resolved is None else _when(a.resolved, unix)
        rows.append(
            f"<tr><td>{escape(a.alert)}</td><td>{escape(a.engine)}</td>"
            f"<td>{_when(a.active, unix)}</td><td>{fired}</td><td>{resolved}</td>"
            f"<td>{escape(', '.join(onsets.get(a.engine, [])) or '-')}</td></tr>"
        )
    rows.append("</table>")
    return rows


def backtest_html(
    report: BacktestFile, stalls: list[BacktestStall], alerts: list[AlertFiring] | None = None
) -> str:
    """The page's text (with the alerts' section when `kit rules --backtest` ran)."""
    unix = report.start > 1e9  # Unix seconds (a Prometheus range), else a timeline's seconds
    rate = _num(report.stalls_per_engine_hour, "{:.4g}")
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.stalls_by_kind.items())) or "none"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>stallkit backtest</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Backtest: {escape(report.source)}</h1>",
        f"<p>{escape(report.selector or '(all engines)')} by {escape(report.group_by)}, "
        f"{_when(report.start, unix)} to {_when(report.end, unix)}"
        + (f", step {report.step_s:g} s" if report.step_s else ", every sample")
        + f"; stall after {report.stall_after_s:g} s.</p>",
        f"<p><b>{report.stalls} stall(s)</b> over {report.engine_hours:.4g} engine-hours: "
        f"<b>{rate}</b> per engine-hour ({escape(kinds)}).</p>",
        "<h2>Engines</h2><table><tr><th>engine</th><th>hours observed</th><th>stalls</th>"
        "<th>per engine-hour</th><th>stalled (s)</th><th>down points</th></tr>",
    ]
    for e in report.engines:
        parts.append(
            f"<tr><td>{escape(e.engine)}</td><td>{e.exposure_s / 3600:.4g}</td>"
            f"<td>{e.stalls}</td><td>{_num(e.stalls_per_engine_hour, '{:.4g}')}</td>"
            f"<td>{e.stalled_s:.1f}</td><td>{e.downs}</td></tr>"
        )
    parts.append(
        "</table><h2>Stalls</h2><table><tr><th>engine</th><th>kind</th><th>onset</th>"
        "<th>duration (s)</th><th>running</th><th>waiting</th><th>KV</th><th>GPU max %</th>"
        "<th>when</th></tr>"
    )
    for s in stalls:
        kv = "-" if s.kv_usage is None else f"{s.kv_usage:.0%}"
        open_mark = "" if s.end is not None else " (still stalled at the end)"
        parts.append(
            f"<tr><td>{escape(s.engine)}</td><td>{escape(s.kind)}</td>"
            f"<td>{_when(s.onset, unix)}</td><td>{s.duration_s:.1f}{open_mark}</td>"
            f"<td>{_num(s.running, '{}')}</td><td>{_num(s.waiting, '{}')}</td><td>{kv}</td>"
            f"<td>{_num(s.gpu_util_max, '{:.0f}')}</td>"
            f"<td>{_bar(s, report.start, report.end)}</td></tr>"
        )
    parts.append("</table>")
    if alerts is not None:
        parts.extend(_alerts(alerts, stalls, unix))
    parts.append(
        "<p class='note'>Exposure counts the seconds between consecutive successful "
        "scrapes; a stall still holding at the end of the range is counted to its end.</p>"
        "</body></html>"
    )
    return "\n".join(parts)


def write_backtest_html(run_dir: Path) -> Path:
    """Write backtest.html from the run directory's backtest.json and stalls.jsonl."""
    from stallkit.contract.fleet import BACKTEST_HTML

    report = read_json(run_dir / BACKTEST_FILE, BacktestFile)
    stalls = read_jsonl(run_dir / STALLS_FILE, BacktestStall)
    alerts = None
    if (run_dir / ALERTS_FILE).exists():
        alerts = read_jsonl(run_dir / ALERTS_FILE, AlertFiring)
    path = run_dir / BACKTEST_HTML
    path.write_text(backtest_html(report, stalls, alerts), encoding="utf-8")
    return path
