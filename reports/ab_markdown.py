"""The A/B table's cells, rows and footnotes, and `ab.md`, from an `ABReport`.

Rows, one column per arm: stalls; turns / errors / timeouts; max KV; preemptions; one row
per named log pattern (restores recomputed, tracebacks, ...); decode tok/s; prompt tokens
served from cache; run length. Figures of an arm that stopped before its planned duration,
or fell behind its clock, are not like for like and are flagged with a dagger and a footnote.
Over several seeds the stalled seeds (k of N distinct runs, with the censored ones), the first
stall's onset, each arm's stall rate and the verdict come first, and a per-seed table follows.
The rich table (`stallkit.reports.ab_rich`) and `ab.html` (`stallkit.reports.ab_html`) show the same rows.
"""

from __future__ import annotations

from collections import Counter

from stallkit.contract.ab import ArmFigures, SeedRow, StallRate, Verdict
from stallkit.contract.meta import END_WORDS, EndReason
from stallkit.reports.ab_figures import END_ORDER, ABReport
from stallkit.reports.ab_slo import slo_rows
from stallkit.reports.forensics_frames import markdown_lines
from stallkit.reports.partial_run import partial_note, partial_words
from stallkit.reports.seed_stats import distinct, onset_spread

__all__ = [
    "FLAG",
    "RUN_LENGTH_ROWS",
    "footnotes",
    "not_like_for_like",
    "rate_cell",
    "seed_cells",
    "stall_cell",
    "stopped_early",
    "table_rows",
    "to_markdown",
    "verdict_cell",
]

FLAG = "\u2020"  # dagger
#: rows whose values depend on how long the arm ran
RUN_LENGTH_ROWS = {"turns", "preemptions", "log", "decode", "cached"}


def _fmt_s(value: float) -> str:
    """Engine seconds, the one unit of time in every report."""
    return f"{value:.0f} s"


def stall_cell(arm: ArmFigures, short: bool = False) -> str:
    """`10 (10 spinning), longest 241 s, run stopped by monitor`; `short` (narrow terminals):
    `10 spinning, 241 s` (a stopped run has its footnote)."""
    if not arm.stalls:
        return "none"
    longest = _fmt_s(max(s.duration_s for s in arm.stalls))
    counts = Counter(s.kind for s in arm.stalls)
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    if short:
        named = kinds if len(counts) == 1 else f"{len(arm.stalls)} ({kinds})"
        return f"{named}, {longest}"
    cell = f"{len(arm.stalls)} ({kinds}), longest {longest}"
    if arm.stopped_by_monitor:
        cell += ", run stopped by monitor"
    # a stall the engine's gauges hid says so (the first such, with how many clients waited)
    hidden = next(
        (s.evidence for s in arm.stalls if s.evidence and s.evidence.client_waiting), None
    )
    if hidden is not None:
        cell += f"; {hidden.words()}"
    return cell


def _log_cell(arm: ArmFigures, name: str) -> str:
    # an engine without restore admission (the patched scheduler plugin, locally or inside an
    # image) recomputes no restores: a count of 0 would claim it had some to expire
    if name.startswith("restores") and not arm.capabilities.restore_admission:
        return "n/a"
    count = arm.log_counts.get(name)
    return "n/a" if count is None else str(count)  # no log was read


def stopped_early(arm: ArmFigures) -> bool:
    """An arm that did not run its planned duration: its totals are not like for like."""
    return arm.end_reason != "duration"


def not_like_for_like(arm: ArmFigures) -> bool:
    """An arm whose totals are not like for like: it stopped early or fell behind its clock
    (the per-seed rows use the same rule, `ArmFigures.comparable`)."""
    return not arm.comparable


def _stalled_cell(rows: list[SeedRow]) -> str:
    runs = distinct(rows)
    cell = f"{sum(r.stalled for r in runs)} of {len(runs)}"
    if len(runs) < len(rows):
        cell += f" distinct ({len(rows)} seeds)"
    censored = [r.censored for r in runs if r.censored is not None]
    if censored:
        why = ", ".join(f"{censored.count(c)} {_CENSOR_WHY[c]}" for c in sorted(set(censored)))
        cell += f" ({len(censored)} censored: {why})"
    return cell


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def rate_cell(rate: StallRate, short: bool = False) -> str:
    """`2 in 3.1 h: 0.65 per hour (0.078 - 2.3, 95 %)`, or `0 in 15.0 h (at most 0.20 ...)`;
    `short` (narrow terminals): `2 in 3.1 h: 0.65/h (0.078-2.3)`, `0 in 15.0 h: ≤ 0.2/h`."""
    head = f"{rate.stalls} in {_hours(rate.exposure_s)}"
    if rate.ci95 is None or rate.stall_rate_per_h is None:
        return f"{head} (never {'' if short else 'observed '}under load)"
    low, high = rate.ci95
    if short:
        if rate.stalls == 0:
            return f"{head}: \u2264 {high:.2g}/h"
        return f"{head}: {rate.stall_rate_per_h:.2g}/h ({low:.2g}-{high:.2g})"
    if rate.stalls == 0:
        return f"{head} (at most {high:.2g} per hour, 95 %)"
    return f"{head}: {rate.stall_rate_per_h:.2g} per hour ({low:.2g} - {high:.2g}, 95 %)"


def _seed_rows(report: ABReport) -> list[tuple[str, str, list[str]]]:
    """Stalled seeds, onset spread, stall rates and the verdict (rows shown when seeds ran)."""
    names = list(report.arms)
    rows = report.seeds
    onsets = []
    for n in names:
        spread = onset_spread(rows[n])
        onsets.append(
            "-"
            if spread is None
            else f"{_fmt_s(spread[0])} ({_fmt_s(spread[1])} - {_fmt_s(spread[2])})"
        )
    out = [
        ("seeds", "stalled seeds", [_stalled_cell(rows[n]) for n in names]),
        ("onset", "first stall onset, median (min - max)", onsets),
        (
            "rate",
            "stalls per engine hour of exposure",
            [rate_cell(report.rates[n]) if n in report.rates else "-" for n in names],
        ),
    ]
    v, cut = report.verdict, report.partial_run
    if v is not None:
        out.append(("verdict", "verdict", [verdict_cell(v) if n == "fix" else "" for n in names]))
    elif cut is not None and {"base", "fix"} <= set(names):  # in place of the verdict
        words = partial_words(cut)
        out.append(("verdict", "verdict", [words if n == "fix" else "" for n in names]))
    return out


def verdict_cell(v: Verdict) -> str:
    """The conclusion, the test's p-value and, when no seed was censored, Fisher's beside it."""
    if v.conclusion == "inconclusive" and v.base_stalled == 0:
        return v.reason
    text = f"{v.reason}: p = {v.p_value:.2g} (exact Poisson rate test, one-sided"
    if v.rate_ratio is not None and v.fix_stalled:  # with no fix stall, the bound says more
        text += f"; rate ratio {v.rate_ratio:.2g}"
    text += ")"
    if v.fisher_p is not None:
        text += f"; Fisher k of N: p = {v.fisher_p:.2g}"
    return text


def table_rows(report: ABReport) -> list[tuple[str, str, list[str]]]:
    """(row key, label, one cell per arm) in table order, flags applied."""
    arms = list(report.arms.values())
    log_names = sorted({name for a in arms for name in a.log_counts})

    def opt(v: float | None, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    rows: list[tuple[str, str, list[str]]] = [
        *_seed_rows(report),
        *slo_rows(report),  # only when the kit sets [slo]
        ("stalls", "stalls (count, longest, stopped)", [stall_cell(a) for a in arms]),
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
            [_length_cell(a) for a in arms],
        ),
    ]
    flagged: list[tuple[str, str, list[str]]] = []
    for key, label, cells in rows:
        if key in RUN_LENGTH_ROWS:
            cells = [
                c + FLAG if not_like_for_like(a) else c for c, a in zip(cells, arms, strict=True)
            ]
        flagged.append((key, label, cells))
    return flagged


def _length_cell(arm: ArmFigures) -> str:
    """`5400 s`, `2568 s of 5400 s`, and the time under load when idle time was a share of it."""
    cell = _fmt_s(arm.duration_s)
    if arm.planned_duration_s and stopped_early(arm):
        cell += f" of {_fmt_s(arm.planned_duration_s)}"
    if arm.loaded_s is not None and arm.loaded_s < 0.99 * arm.duration_s:
        cell += f", {_fmt_s(arm.loaded_s)} under load"
    return cell


#: a censored seed's reason, after its count
_CENSOR_WHY = {
    "engine_died": "engine died",
    "error": "error",
    "interrupted": "interrupted",
    "stall_stop": "stopped",
    "starting": "unfinished",
    "metrics_down": "metrics down at the end",
}


def footnotes(report: ABReport) -> list[str]:
    """Why flagged figures are not like for like, and which time scale the figures use."""
    notes = []
    for name, arm in report.arms.items():
        rows = report.seeds.get(name, [])
        if stopped_early(arm) and len(rows) > 1:
            notes.append(_seeds_note(name, arm, [r.end_reason for r in rows]))
        elif stopped_early(arm):
            why = END_WORDS[arm.end_reason]
            note = f"{FLAG} {name} ({arm.spec}) {why} after {_fmt_s(arm.duration_s)}"
            # with one arm there is nothing its totals could be compared with
            notes.append(
                note + (": its totals are not like for like." if len(report.arms) > 1 else ".")
            )
        if arm.lag:
            notes.append(
                f"{FLAG} {name} ({arm.spec}) fell behind its clock ({arm.lag}): its figures are "
                "not like for like."
            )
    notes += _repeat_notes(report) + _damage_notes(report)
    if report.partial_run is not None:
        notes.append(partial_note(report.partial_run))
    clocks = sorted({a.clock for a in report.arms.values()})
    if "wall" in clocks and any(a.time_scale != 1.0 for a in report.arms.values()):
        notes.append(_scale_note(report))
    return notes


def _repeat_notes(report: ABReport) -> list[str]:
    """Which arms' seeds repeated one another's runs, so counted once."""
    notes = []
    for name, rows in report.seeds.items():
        runs = len(distinct(rows))
        if runs < len(rows):
            notes.append(
                f"{name}: {len(rows)} seeds, {runs} distinct run{'s' if runs > 1 else ''}: seeds "
                "whose runs are identical are one observation and count once in the stalled "
                "runs, the exposure, the rate and the test."
            )
    return notes


def _damage_notes(report: ABReport) -> list[str]:
    """The seeds left out because a file could not be read (`--partial`)."""
    if not report.damaged:
        return []
    listed = "; ".join(f"{d.file}: {d.problem}" for d in report.damaged)
    return [
        f"Left out, could not be read ({len(report.damaged)}): {listed}. The figures and the "
        "verdict cover the readable seeds only."
    ]


def _seeds_note(name: str, arm: ArmFigures, seeds: list[EndReason]) -> str:
    """Why an arm over several seeds is flagged: how many seeds ended early, and how."""
    early = [r for r in seeds if r != "duration"]
    why = "; ".join(
        f"{END_WORDS[r]} in {early.count(r)}" for r in sorted(set(early), key=END_ORDER.index)
    )
    return (
        f"{FLAG} {name} ({arm.spec}) ended early in {len(early)} of {len(seeds)} seeds ({why}; "
        f"{_fmt_s(arm.duration_s)} run in all): its totals are not like for like."
    )


def _scale_note(report: ABReport) -> str:
    """Which time scale converted the wall-clock arms' times (`stallkit.contract.time.report_scale`)."""
    note = (
        "Times are engine seconds: wall-clock simulator arms convert with the time scale "
        "they measured (engine seconds covered per wall second)."
    )
    nominal = [
        n for n, a in report.arms.items() if a.clock == "wall" and a.scale_basis == "nominal"
    ]
    if nominal:
        note += (
            f" {', '.join(nominal)}: its engine clock could not be read; the nominal scale is used."
        )
    return note


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def seed_cells(r: SeedRow) -> list[str]:
    """A per-seed row's cells after the arm's name, as the markdown and HTML tables show them."""
    # a counter scraped from Prometheus text is a float; it counts whole preemptions
    preemptions = None if r.preemptions is None else round(r.preemptions)
    values: list[object] = [r.seed, r.stalled, r.kind, r.onset_s, r.stopped_run, r.turns]
    values.append(preemptions)
    values += [r.restores_recomputed, r.decode_tok_s, r.clock, r.like_for_like]
    values.append(None if r.same_as is None else f"seed {r.same_as}")
    return [_cell(v) for v in values]


def _seed_table(report: ABReport) -> list[str]:
    lines = [
        "## Per seed",
        "",
        "| arm | seed | stalled | kind | onset | stopped | turns | preemptions "
        "| restores recomputed | decode tok/s | clock | like for like | same run as |",
        "| --- |" + " --- |" * 12,
    ]

    for name, rows in report.seeds.items():
        for r in rows:
            lines.append(f"| {name} | " + " | ".join(seed_cells(r)) + " |")
    return lines


def to_markdown(report: ABReport) -> str:
    """ab.md: the table, its footnotes and (over several seeds) the per-seed table."""
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
    if report.seed_count > 1:
        notes.insert(0, "Counts are summed over the seeds; decode tok/s and cache share are means.")
    if notes:
        lines += ["", *notes]
    if report.seed_count > 1 or len(names) > 1:  # a one-arm, one-seed run is its table
        lines += ["", *_seed_table(report)]
    bundles = {name: arm.forensics for name, arm in report.arms.items()}
    lines += markdown_lines(bundles, prefix_arm=len(names) > 1)
    return "\n".join(lines) + "\n"
