"""The A/B table from saved arm directories: markdown, JSON and a rich table.

Rows, one column per arm: stalls; turns / errors / timeouts; max KV; preemptions; one row
per named log pattern (restores recomputed, tracebacks, ...); decode tok/s; prompt tokens
served from cache; run length. Figures of an arm that stopped before its planned duration
are not like for like and are flagged with a dagger and a footnote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from reports.errors import ReportError
from reports.rundir import ArmFigures, arm_dirs, arm_figures, load_json

FLAG = "\u2020"  # dagger
#: rows whose values depend on how long the arm ran
RUN_LENGTH_ROWS = {"turns", "preemptions", "log", "decode", "cached"}


class ABReport(BaseModel):
    """The figures of an A/B directory."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kit: str
    arms: dict[str, ArmFigures]

    @property
    def stem(self) -> str:
        """The report files' name: `ab` for an A/B, `run` for a one-arm run (nothing to compare)."""
        return "ab" if len(self.arms) > 1 else "run"

    @property
    def title(self) -> str:
        """`A/B: KIT`, or `run: KIT` for a one-arm run."""
        return f"{'A/B' if len(self.arms) > 1 else 'run'}: {self.kit}"


def load_ab(ab_dir: Path) -> ABReport:
    """Read every arm below an A/B directory (or a single-arm run directory)."""
    if not ab_dir.is_dir():
        raise ReportError(
            f"{ab_dir} is not a directory", "pass a directory written by `kit ab` or `kit run`"
        )
    kit = load_json(ab_dir / "kit.json")
    dirs = arm_dirs(ab_dir)
    if not dirs:
        raise ReportError(f"no arm directories under {ab_dir}", "each arm needs a meta.json")
    arms = {}
    for d in dirs:
        name = str(load_json(d / "meta.json").get("arm", d.name))
        arms[name] = arm_figures(d)
    return ABReport(kit=str(kit.get("name", "kit")), arms=arms)


def _fmt_s(value: float) -> str:
    return f"{value:.0f} s" if value < 600 else f"{value / 60:.1f} min"


def _stall_cell(arm: ArmFigures) -> str:
    if not arm.stalls:
        return "none"
    longest = max(arm.stalls, key=lambda s: s.duration_s)
    kinds = sorted({s.kind for s in arm.stalls})
    cell = f"{len(arm.stalls)} ({'/'.join(kinds)}), longest {_fmt_s(longest.duration_s)}"
    if arm.stopped_by_monitor:
        cell += ", run stopped by monitor"
    return cell


def _log_cell(arm: ArmFigures, name: str) -> str:
    # the patched scheduler plugin has no restore admission (and on CPU no host tier)
    if name.startswith("restores") and arm.spec.startswith("patched:"):
        return "n/a"
    return str(arm.log_counts.get(name, 0))


def stopped_early(arm: ArmFigures) -> bool:
    """An arm that did not run its planned duration: its totals are not like for like."""
    return arm.end_reason != "duration"


def table_rows(report: ABReport) -> list[tuple[str, str, list[str]]]:
    """(row key, label, one cell per arm) in table order, flags applied."""
    arms = list(report.arms.values())
    log_names = sorted({name for a in arms for name in a.log_counts})

    def opt(v: float | None, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    rows: list[tuple[str, str, list[str]]] = [
        ("stalls", "stalls (count, longest, stopped)", [_stall_cell(a) for a in arms]),
        (
            "turns",
            "turns / errors / timeouts",
            [f"{a.turns} / {a.errors} / {a.timeouts}" for a in arms],
        ),
        (
            "kv",
            "max KV usage",
            [opt(a.max_kv_perc, ".1f") + (" %" if a.max_kv_perc is not None else "") for a in arms],
        ),
        ("preemptions", "preemptions", [opt(a.preemptions, ".0f") for a in arms]),
    ]
    for name in log_names:
        rows.append(
            (
                "log",
                name.replace("_", " ") + " (log)",
                [_log_cell(a, name) for a in arms],
            )
        )
    rows += [
        ("decode", "decode tok/s", [opt(a.decode_tok_s, ".1f") for a in arms]),
        (
            "cached",
            "prompt tokens from cache",
            [opt(a.cached_perc, ".1f") + (" %" if a.cached_perc is not None else "") for a in arms],
        ),
        (
            "length",
            "run length",
            [
                _fmt_s(a.duration_s)
                + (
                    f" of {_fmt_s(a.planned_duration_s)}"
                    if a.planned_duration_s and stopped_early(a)
                    else ""
                )
                for a in arms
            ],
        ),
    ]
    flagged: list[tuple[str, str, list[str]]] = []
    for key, label, cells in rows:
        if key in RUN_LENGTH_ROWS:
            cells = [c + FLAG if stopped_early(a) else c for c, a in zip(cells, arms, strict=True)]
        flagged.append((key, label, cells))
    return flagged


def footnotes(report: ABReport) -> list[str]:
    notes = []
    for name, arm in report.arms.items():
        if stopped_early(arm):
            why = {
                "stall_stop": "stopped by the monitor during a stall",
                "interrupted": "interrupted",
                "error": "ended by an error",
                "engine_died": "ended when its engine died",
            }.get(arm.end_reason, arm.end_reason)
            note = f"{FLAG} {name} ({arm.spec}) {why} after {_fmt_s(arm.duration_s)}"
            # with one arm there is nothing its totals could be compared with
            notes.append(
                note + (": its totals are not like for like." if len(report.arms) > 1 else ".")
            )
    return notes


def to_markdown(report: ABReport) -> str:
    names = list(report.arms)
    lines = [
        f"# {report.title}",
        "",
        "| | " + " | ".join(f"{n} (`{report.arms[n].spec}`)" for n in names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for _key, label, cells in table_rows(report):
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    notes = footnotes(report)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def to_json(report: ABReport) -> dict[str, Any]:
    return {
        "kit": report.kit,
        "arms": {name: arm.model_dump() for name, arm in report.arms.items()},
    }


def write_reports(ab_dir: Path) -> ABReport:
    """(Re)make ab.md and ab.json (run.md, run.json for one arm) and timeline.png in a directory."""
    from reports.plot import plot_timelines

    report = load_ab(ab_dir)
    (ab_dir / f"{report.stem}.md").write_text(to_markdown(report), encoding="utf-8")
    (ab_dir / f"{report.stem}.json").write_text(
        json.dumps(to_json(report), indent=2) + "\n", encoding="utf-8"
    )
    plot_timelines(ab_dir, ab_dir / "timeline.png")
    return report
