"""ab.html's latency distributions: per arm, TTFT over its completed turns and inter-token
latency over its tokens, all seeds together, each as shares of the arm's own total so arms of
different sizes compare (a fix that served twice the turns of a base stopped early is not
twice as slow). Log-scaled x axes span the data: a stall's gap of minutes sits beside the
milliseconds of normal decoding. Reads saved run directories only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from stallkit.contract.files import META_FILE, TURNS_FILE
from stallkit.reports.rundir import arm_dirs, effective_scale, read_meta, read_turns, seed_dirs
from stallkit.reports.timeline_plot import HTML_FONT_PT

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["latency_figures", "legend_below", "log_bins", "shares"]

#: one figure's size (inches): two fit side by side on a laptop, one scales to a phone
FIGSIZE = (5.6, 4.0)


def _arm_turn_dirs(run_dir: Path) -> dict[str, list[Path]]:
    """Per arm, the directories holding its turns (one per seed)."""
    out: dict[str, list[Path]] = {}
    dirs = arm_dirs(run_dir) or [p for p in sorted(run_dir.iterdir()) if p.is_dir()]
    for d in dirs:
        per_seed = [d] if (d / META_FILE).exists() else seed_dirs(d)
        if per_seed:
            name = read_meta(per_seed[0]).arm
            out[name] = per_seed
    return out


def _latencies(dirs: list[Path]) -> tuple[list[float], list[float], list[int]]:
    """TTFT of completed turns, and inter-token gaps with their token counts (engine s)."""
    ttft: list[float] = []
    gaps: list[float] = []
    weights: list[int] = []
    for d in dirs:
        if not (d / TURNS_FILE).exists():
            continue
        scale = effective_scale(read_meta(d))
        for r in read_turns(d / TURNS_FILE):  # parsed once for all the reports
            if r.outcome != "ok":
                continue
            if r.ttft_s is not None:
                ttft.append(r.ttft_s * scale)
            for (t0, _), (t1, n) in zip(r.chunks, r.chunks[1:], strict=False):
                if n > 0:
                    gaps.append((t1 - t0) * scale / n)
                    weights.append(n)
    return ttft, gaps, weights


def log_bins(values: list[float], count: int = 50) -> list[float]:
    """`count` log-spaced bin edges from the smallest positive value to the largest (a value
    of 0 or less has no place on a log axis); [] without a positive value."""
    import numpy as np

    positive = [v for v in values if v > 0]
    if not positive:
        return []
    low, high = min(positive), max(positive)
    if high <= low * 1.01:  # one value: a bin around it
        low, high = low / 1.5, high * 1.5
    return [float(e) for e in np.geomspace(low, high * 1.0001, count + 1)]


def shares(values: list[float], bins: list[float], weights: list[int] | None = None) -> list[float]:
    """Per bin, its share of the total weight of the values inside the bins (each value
    weighs 1 without `weights`): they sum to 1 when any value falls in a bin, else all 0."""
    import numpy as np

    counts, _ = np.histogram(values, bins=bins, weights=weights)
    total = float(counts.sum())
    return [float(c) / total if total > 0 else 0.0 for c in counts]


def latency_figures(
    run_dir: Path, arms: dict[str, list[Path]] | None = None
) -> tuple[Figure, Figure]:
    """The TTFT figure (share of each arm's turns per bin, engine s) and the inter-token
    latency figure (share of each arm's tokens per bin, engine ms, log-scaled shares so a
    stall's few slow tokens show). `arms`: each arm's seed directories, else those found
    under `run_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context({"font.size": HTML_FONT_PT}):
        fig_ttft, ax_ttft = plt.subplots(figsize=FIGSIZE, layout="constrained")
        fig_itl, ax_itl = plt.subplots(figsize=FIGSIZE, layout="constrained")
        _draw(ax_ttft, ax_itl, arms or _arm_turn_dirs(run_dir))
    return fig_ttft, fig_itl


def _draw(ax_ttft: Axes, ax_itl: Axes, arms: dict[str, list[Path]]) -> None:
    from matplotlib.ticker import PercentFormatter

    latencies = {name: _latencies(d) for name, d in arms.items()}
    ttft_bins = log_bins([t for ttft, _, _ in latencies.values() for t in ttft])
    itl_bins = log_bins([1000 * g for _, gaps, _ in latencies.values() for g in gaps])
    for name, (ttft, gaps, weights) in latencies.items():
        if ttft and ttft_bins:
            label = f"{name} ({len(ttft)} turns)"
            ax_ttft.stairs(shares(ttft, ttft_bins), ttft_bins, lw=1.5, label=label)
        if gaps and itl_bins:
            label = f"{name} ({sum(weights)} tokens)"
            itl = shares([1000 * g for g in gaps], itl_bins, weights)
            ax_itl.stairs(itl, itl_bins, lw=1.5, label=label)
    _log_axis(ax_ttft, ttft_bins, "time to first token (engine s, log scale)", "share of turns")
    ax_ttft.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    _log_axis(
        ax_itl,
        itl_bins,
        "inter-token latency (engine ms, log scale)",
        "share of tokens (log scale)",
    )
    ax_itl.set_yscale("log")


def _log_axis(ax: Axes, bins: list[float], xlabel: str, ylabel: str) -> None:
    """A log-scaled x axis over the bins, plain-number ticks, the legend below the axes."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if bins:
        ax.set_xscale("log")
        ax.set_xlim(bins[0], bins[-1])
        few_decades = bins[-1] / bins[0] < 100  # then 2s and 5s are labelled between powers
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _plain(x)))
        ax.xaxis.set_minor_formatter(
            FuncFormatter(lambda x, _: _plain(x) if few_decades and _lead(x) in (2, 5) else "")
        )
    if ax.get_legend_handles_labels()[0]:
        legend_below(ax)


def legend_below(ax: Axes) -> None:
    """The legend below the axes, two columns: inside, it would cover the curves' ends."""
    ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize="small", frameon=False
    )


def _plain(x: float) -> str:
    """A tick label without exponents: `0.5`, `20`, `10,000`."""
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def _lead(x: float) -> int:
    """The leading digit of a positive number (2 for 0.02, 200 and 2000)."""
    return round(x / 10 ** math.floor(math.log10(x))) if x > 0 else 0
