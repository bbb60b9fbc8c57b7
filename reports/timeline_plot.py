"""timeline.png and ab.html's timelines: per arm, generation tok/s, running and waiting, KV
usage and GPU utilisation over engine time, stall intervals shaded (named in the legend), the
run's end marked when the monitor stopped it or it was interrupted, x ranges aligned across
arms. The tok/s line is the rate over equal bins of engine time (at most `MAX_RATE_POINTS`
of them): per monitor sample it swings between idle and full speed many times a minute and
drew a solid block. timeline.png holds every arm in one figure; the HTML draws one figure per
arm so that each scales to a narrow page. Reads saved timelines only; over several seeds each
arm's first seed is drawn."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stallkit.contract.meta import ArmMeta
from stallkit.contract.timeline import GpuLine, SampleLine, TimelineLine
from stallkit.reports.rundir import (
    effective_scale,
    read_meta,
    read_timeline,
    shown_arm_dirs,
    stalls_from_timeline,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "HTML_FONT_PT",
    "MAX_RATE_POINTS",
    "arm_timeline_figures",
    "binned_levels",
    "binned_rates",
    "rate_bin_s",
    "save_timelines",
    "timeline_figure",
]

_END_MARKS = {"stall_stop": "stopped by monitor", "interrupted": "interrupted", "error": "error"}
_GPU_STYLES = ("-", "--", ":", "-.")
#: legends sit outside the axes (inside, they covered the start of a run or a stall band)
_LEGEND: dict[str, Any] = {"fontsize": "small", "frameon": False, "borderaxespad": 0.2}
#: the most bins of the tok/s line (about 3 px each across one arm's panel)
MAX_RATE_POINTS = 200
#: one arm's figure in the HTML (inches): two side by side on a laptop, one on a phone
ARM_FIGSIZE = (5.6, 8.6)
#: the HTML's figures' text: larger than matplotlib's 10 pt, so that a figure scaled down to
#: a phone's width (by about two thirds) keeps its labels legible
HTML_FONT_PT = 13.0


def _series(
    events: Sequence[TimelineLine], key: str, scale: float
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for ev in events:
        value = getattr(ev, key) if isinstance(ev, SampleLine) else None
        if value is not None:
            xs.append(ev.t * scale)
            ys.append(float(value))
    return xs, ys


def _gpu_series(
    events: Sequence[TimelineLine], scale: float
) -> dict[str, tuple[list[float], list[float]]]:
    gpu: dict[str, tuple[list[float], list[float]]] = {}
    for ev in events:
        if isinstance(ev, GpuLine):
            for idx, util in ev.util.items():
                xs, ys = gpu.setdefault(idx, ([], []))
                xs.append(ev.t * scale)
                ys.append(util)
    return gpu


def rate_bin_s(x_max: float, max_points: int = MAX_RATE_POINTS) -> float:
    """The width of the tok/s bins: the smallest of 1, 2 and 5 times a power of ten (engine
    seconds) that covers `x_max` in at most `max_points` bins."""
    least = max(x_max, 1e-9) / max_points
    power = 10.0 ** math.floor(math.log10(least))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= least * (1 - 1e-9))


def binned_rates(
    ts: list[float], rates: list[float], bin_s: float
) -> tuple[list[float], list[float]]:
    """Rates over bins of `bin_s` from 0 (bin centres, rates): each sample's rate holds over
    the interval since the sample before, so a bin's rate is what its intervals' time covers
    of them, weighted by that time (an interval across bins is shared among them). A bin that
    no interval covers is NaN, a gap in the line."""
    if len(ts) < 2 or bin_s <= 0:
        return [], []
    count = max(1, math.ceil(ts[-1] / bin_s))
    amount = [0.0] * count
    covered = [0.0] * count
    for t0, t1, rate in zip(ts, ts[1:], rates[1:], strict=False):
        b = int(t0 // bin_s)
        while t1 > t0 and b < count and b * bin_s < t1:
            span = min(t1, (b + 1) * bin_s) - max(t0, b * bin_s)
            if span > 0:
                amount[b] += rate * span
                covered[b] += span
            b += 1
    values = [a / c if c > 0 else math.nan for a, c in zip(amount, covered, strict=True)]
    return [(b + 0.5) * bin_s for b in range(count)], values


def binned_levels(
    ts: list[float], levels: list[float], bin_s: float
) -> tuple[list[float], list[float]]:
    """Gauges (requests, KV usage) averaged over bins of `bin_s` as `binned_rates` does, each
    sample's level holding until the next sample."""
    return binned_rates(ts, levels[:1] + levels[:-1], bin_s)


@dataclass(frozen=True)
class _Arm:
    """One arm's saved timeline, ready to draw."""

    meta: ArmMeta
    scale: float
    events: list[TimelineLine]
    end: float  # engine seconds at which the run ended

    @classmethod
    def read(cls, arm_dir: Path) -> _Arm:
        meta = read_meta(arm_dir)
        scale = effective_scale(meta)
        end = meta.engine_s or meta.wall_s * scale
        return cls(meta, scale, read_timeline(arm_dir), end)


def _x_max(arms: list[_Arm]) -> float:
    return max([a.end for a in arms] + [a.meta.planned_duration_s or 0.0 for a in arms] + [0.0])


def _draw_arm(axes: Sequence[Axes], arm: _Arm, bin_s: float) -> None:
    """One arm's four panels (tok/s, requests, KV, GPU) down `axes`."""
    from matplotlib.ticker import MaxNLocator

    meta, scale, events = arm.meta, arm.scale, arm.events
    ax_tok, ax_req, ax_kv, ax_gpu = axes
    seed = f", seed {meta.seed}" if meta.seed is not None else ""
    ax_tok.set_title(f"{meta.arm}: {meta.spec}{seed}")
    x, y = _series(events, "gen_tok_s", scale)
    # rates were measured per file second; per engine second they are divided by the scale
    centres, rates = binned_rates(x, [v / scale for v in y], bin_s)
    ax_tok.plot(centres, rates, color="tab:blue", lw=1.2)
    ax_tok.set_ylabel(f"gen tok/s\n(engine s, {bin_s:g} s bins)")
    for key, color in (
        ("running", "tab:green"),
        ("waiting_capacity", "tab:orange"),
        ("waiting_deferred", "tab:brown"),
    ):
        x, y = _series(events, key, scale)
        centres, means = binned_levels(x, y, bin_s)
        ax_req.plot(centres, means, label=key.replace("_", ": "), color=color, lw=1.2)
    ax_req.set_ylabel("requests\n(mean per bin)")
    ax_req.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    if ax_req.get_legend_handles_labels()[0]:  # above the panel, off the data
        ax_req.legend(
            loc="lower left",
            bbox_to_anchor=(0, 1),
            ncols=3,
            handlelength=1.2,
            columnspacing=0.8,
            **_LEGEND,
        )
    x, y = _series(events, "kv_usage", scale)
    centres, means = binned_levels(x, [100 * v for v in y], bin_s)
    ax_kv.plot(centres, means, color="tab:purple", lw=1.2)
    ax_kv.set_ylabel("KV %\n(mean per bin)")
    ax_kv.set_ylim(0, 105)
    for n, (idx, (xs, ys)) in enumerate(sorted(_gpu_series(events, scale).items())):
        ax_gpu.plot(xs, ys, lw=1.2, ls=_GPU_STYLES[n % len(_GPU_STYLES)], label=f"GPU {idx}")
    ax_gpu.set_ylabel("GPU util %")
    ax_gpu.set_ylim(0, 105)
    ax_gpu.set_xlabel("engine seconds")
    _mark_stalls_and_end(axes, arm)
    if ax_gpu.get_legend_handles_labels()[0]:  # below the axis, off the stall bands
        ax_gpu.legend(loc="upper left", bbox_to_anchor=(0, -0.3), ncols=2, **_LEGEND)


def _mark_stalls_and_end(axes: Sequence[Axes], arm: _Arm) -> None:
    """Shade each stall on every panel and mark the run's end (named in the GPU legend)."""
    ax_gpu = axes[-1]
    for n, stall in enumerate(stalls_from_timeline(arm.events, arm.scale)):
        for ax in axes:
            label = f"stall ({stall.kind})" if n == 0 and ax is ax_gpu else None
            end = stall.start_s + stall.duration_s
            ax.axvspan(stall.start_s, end, color="red", alpha=0.15, label=label)
    mark = _END_MARKS.get(arm.meta.end_reason)
    if mark:
        for ax in axes:
            label = mark if ax is ax_gpu else None
            ax.axvline(arm.end, color="black", ls="--", lw=1, label=label)


def _arms(run_dir: Path, arm_dirs: list[Path] | None) -> list[_Arm]:
    return [_Arm.read(d) for d in (arm_dirs if arm_dirs is not None else shown_arm_dirs(run_dir))]


def timeline_figure(
    run_dir: Path, title: str | None = None, arm_dirs: list[Path] | None = None
) -> Figure:
    """The timeline figure (one column per arm, four rows of panels); the caller closes it.

    `arm_dirs`: the directory drawn per arm, else each arm's first seed under `run_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = _arms(run_dir, arm_dirs)
    columns = max(1, len(arms))
    fig, axes = plt.subplots(
        4, columns, figsize=(6.5 * columns, 10), sharex="all", squeeze=False, layout="constrained"
    )
    x_max = _x_max(arms)
    for col, arm in enumerate(arms):
        _draw_arm([axes[r][col] for r in range(4)], arm, rate_bin_s(x_max))
    if x_max > 0:
        axes[0][0].set_xlim(0, x_max)
    if title:
        fig.suptitle(title)
    return fig


def arm_timeline_figures(run_dir: Path, arm_dirs: list[Path] | None = None) -> list[Figure]:
    """One timeline figure per arm (four rows of panels), x ranges and tok/s bins alike across
    arms; the caller closes them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = _arms(run_dir, arm_dirs)
    x_max = _x_max(arms)
    figures = []
    for arm in arms:
        with plt.rc_context({"font.size": HTML_FONT_PT}):
            fig, axes = plt.subplots(4, 1, figsize=ARM_FIGSIZE, sharex="all", layout="constrained")
            _draw_arm(list(axes), arm, rate_bin_s(x_max))
        if x_max > 0:
            axes[0].set_xlim(0, x_max)
        figures.append(fig)
    return figures


def svg_text(fig: Figure) -> str:
    """The figure as inline SVG (no date: a re-made report is the same bytes); closes it."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    try:
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    finally:
        plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def save_timelines(
    run_dir: Path, png_path: Path, title: str | None = None, arms: list[Path] | None = None
) -> list[str]:
    """Write timeline.png (every arm in one figure) and return one inline SVG per arm for the
    HTML (`arms`: the directory drawn per arm, else each arm's first seed under `run_dir`)."""
    import matplotlib.pyplot as plt

    fig = timeline_figure(run_dir, title, arms)
    try:
        fig.savefig(png_path, dpi=90)
    finally:
        plt.close(fig)
    return [svg_text(f) for f in arm_timeline_figures(run_dir, arms)]
