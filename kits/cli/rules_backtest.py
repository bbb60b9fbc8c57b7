"""`kit rules --backtest`: when the generated alerts would have fired over a history.

Thin: the rules the flags describe, each alert's expression evaluated by the Prometheus over
[--from, --to] at the evaluation interval (`monitor.replay_alerts`), or by a Prometheus of
its own over a recorded file (`--from-file`: backfilled with promtool, `stallkit.kits.rules.tsdb`),
`alerts.jsonl` written
into --out; when --out holds a `kit backtest` report, its page is made again with the alerts
beside the detector's stalls, and each stalled engine's first alert is printed next to its
stall onsets.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stallkit.kits.cli.common import ctrl_c, fail, interrupted

if TYPE_CHECKING:
    from stallkit.contract.fleet import AlertFiring
    from stallkit.monitor import RulesSettings


def rules_backtest(
    settings: RulesSettings,
    prometheus: str | None,
    from_file: Path | None,
    start: str | None,
    end: str,
    group_by: str,
    out: Path | None,
) -> None:
    """Evaluate, write, print. From a file: its history served by a Prometheus of its own."""
    import tempfile

    from stallkit.contract.fleet import ALERTS_FILE
    from stallkit.contract.jsonl import jsonl_text
    from stallkit.monitor import label_name

    if (prometheus is None) == (from_file is None) or out is None:
        raise fail(
            "--backtest needs --out and either --prometheus URL (with --from) or --from-file",
            "see `kit rules --help`",
        )
    label = label_name(group_by)
    if prometheus is not None:
        t_start, t_end = _range(start, end)
        alerts = _evaluate(prometheus.strip(), settings, t_start, t_end, label)
    else:
        from stallkit.kits.rules.tsdb import serving_history
        from stallkit.monitor import history_text

        assert from_file is not None
        text = history_text(from_file)
        first, last = _file_range(text)
        with tempfile.TemporaryDirectory() as tmp, serving_history(text, Path(tmp)) as url:
            alerts = _evaluate(url, settings, first, last, label)
    out.mkdir(parents=True, exist_ok=True)
    (out / ALERTS_FILE).write_text(jsonl_text(alerts), encoding="utf-8")
    _report(out, alerts)


def _range(start: str | None, end: str) -> tuple[float, float]:
    import time

    from stallkit.monitor import parse_time

    if start is None:
        raise fail("--prometheus needs --from", "e.g. --from now-24h, or RFC 3339")
    now = time.time()
    t_start, t_end = parse_time(start, now), parse_time(end, now, "--to")
    if t_end <= t_start:
        raise fail("--to is not after --from", "give a range that moves forward")
    return t_start, t_end


def _file_range(text: str) -> tuple[float, float]:
    """The first and last sample times of OpenMetrics text (its last field on each line)."""
    stamps = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#") and line.count(" ") >= 2
    ]
    if not stamps:
        raise fail("no timestamped samples in the file", "see `kit backtest --help`")
    return min(stamps), max(stamps)


def _evaluate(
    url: str, settings: RulesSettings, start: float, end: float, label: str
) -> list[AlertFiring]:
    import asyncio

    from stallkit.monitor import PrometheusClient, replay_alerts, rules_document

    async def main() -> list[AlertFiring]:
        client = PrometheusClient(url, timeout_s=60.0)
        try:
            doc = rules_document(settings)
            return await replay_alerts(
                client, doc, start, end, settings.evaluation_interval_s, label
            )
        finally:
            await client.aclose()

    with ctrl_c():
        return asyncio.run(main())
    raise interrupted("interrupted")


def _report(out: Path, alerts: list[AlertFiring]) -> None:
    """Each engine's alerts, beside the detector's stall onsets when a backtest is there."""
    from stallkit.contract.fleet import ALERTS_FILE, BACKTEST_FILE, STALLS_FILE, BacktestStall
    from stallkit.contract.jsonl import read_jsonl
    from stallkit.reports import write_backtest_html

    onsets: dict[str, list[float]] = {}
    if (out / STALLS_FILE).exists():
        for stall in read_jsonl(out / STALLS_FILE, BacktestStall):
            onsets.setdefault(stall.engine, []).append(stall.onset)
    for alert in alerts:
        fired = "never fired" if alert.fired is None else f"fired {alert.fired:.3f}"
        near = onsets.get(alert.engine)
        beside = "" if not near else "; detector onsets " + ", ".join(f"{t:.3f}" for t in near)
        print(f"{alert.alert} {alert.engine}: pending {alert.active:.3f}, {fired}{beside}")
    fired_n = sum(1 for a in alerts if a.fired is not None)
    print(f"rules backtest: {fired_n} alert(s) fired, {len(alerts)} pending; {out / ALERTS_FILE}")
    if (out / BACKTEST_FILE).exists():
        print(f"report with the alerts: {write_backtest_html(out)}")
