"""timeline.png: per arm, generation tok/s, running and waiting, KV usage and GPU utilisation
over engine time, stall intervals shaded (named in the legend), the run's end marked when the
monitor stopped it or it was interrupted, x ranges aligned across arms. Reads saved timelines
only; over several seeds each arm's first seed is drawn."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stallkit.contract.timeline import GpuLine, SampleLine, TimelineLine
from stallkit.reports.rundir import (
    effective_scale,
    read_meta,
    read_timeline,
    shown_arm_dirs,
    stalls_from_timeline,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_END_MARKS = {"stall_stop": "stopped by monitor", "interrupted": "interrupted", "error": "error"}
_GPU_STYLES = ("-", "--", ":", "-.")
#: legends sit outside the axes (inside, they covered the start of a run or a stall band)
_LEGEND: dict[str, Any] = {"fontsize": 8, "frameon": False, "borderaxespad": 0.2}


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


def save_timelines(
    run_dir: Path, png_path: Path, title: str | None = None, arms: list[Path] | None = None
) -> str:
    """Draw the timeline figure once: write it as a PNG and return it as inline SVG (`arms`:
    the directory drawn per arm, else each arm's first seed found under `run_dir`)."""
    import io

    import matplotlib.pyplot as plt

    fig = timeline_figure(run_dir, title, arms)
    try:
        fig.savefig(png_path, dpi=90)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    finally:
        plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def timeline_figure(
    run_dir: Path, title: str | None = None, arm_dirs: list[Path] | None = None
) -> Figure:
    """The timeline figure (one column per arm, four rows of panels); the caller closes it.

    `arm_dirs`: the directory drawn per arm, else each arm's first seed under `run_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    arms = arm_dirs if arm_dirs is not None else shown_arm_dirs(run_dir)
    fig, axes = plt.subplots(
        4,
        max(1, len(arms)),
        figsize=(6.5 * max(1, len(arms)), 10),
        sharex="all",
        squeeze=False,
        layout="constrained",
    )
    x_max = 0.0
    for col, arm_dir in enumerate(arms):
        meta = read_meta(arm_dir)
        scale = effective_scale(meta)
        events = read_timeline(arm_dir)
        ax_tok, ax_req, ax_kv, ax_gpu = (axes[r][col] for r in range(4))
        seed = f", seed {meta.seed}" if meta.seed is not None else ""
        ax_tok.set_title(f"{meta.arm}: {meta.spec}{seed}")
        x, y = _series(events, "gen_tok_s", scale)
        # rates were measured per file second; per engine second they are divided by the scale
        ax_tok.plot(x, [v / scale for v in y], color="tab:blue", lw=1)
        ax_tok.set_ylabel("gen tok/s (per engine s)")
        for key, color in (
            ("running", "tab:green"),
            ("waiting_capacity", "tab:orange"),
            ("waiting_deferred", "tab:brown"),
        ):
            x, y = _series(events, key, scale)
            ax_req.step(x, y, where="post", label=key.replace("_", ": "), color=color, lw=1)
        ax_req.set_ylabel("requests")
        ax_req.yaxis.set_major_locator(MaxNLocator(integer=True))
        if ax_req.get_legend_handles_labels()[0]:  # above the panel, off the data
            ax_req.legend(loc="lower left", bbox_to_anchor=(0, 1), ncols=3, **_LEGEND)
        x, y = _series(events, "kv_usage", scale)
        ax_kv.plot(x, [100 * v for v in y], color="tab:purple", lw=1)
        ax_kv.set_ylabel("KV %")
        ax_kv.set_ylim(0, 105)
        for n, (idx, (xs, ys)) in enumerate(sorted(_gpu_series(events, scale).items())):
            ax_gpu.plot(xs, ys, lw=1.2, ls=_GPU_STYLES[n % len(_GPU_STYLES)], label=f"GPU {idx}")
        ax_gpu.set_ylabel("GPU util %")
        ax_gpu.set_ylim(0, 105)
        ax_gpu.set_xlabel("engine seconds")
        for n, stall in enumerate(stalls_from_timeline(events, scale)):
            for ax in (ax_tok, ax_req, ax_kv, ax_gpu):
                label = f"stall ({stall.kind})" if n == 0 and ax is ax_gpu else None
                ax.axvspan(
                    stall.start_s,
                    stall.start_s + stall.duration_s,
                    color="red",
                    alpha=0.15,
                    label=label,
                )
        end = meta.engine_s or meta.wall_s * scale
        mark = _END_MARKS.get(meta.end_reason)
        if mark:
            for ax in (ax_tok, ax_req, ax_kv, ax_gpu):
                ax.axvline(end, color="black", ls="--", lw=1, label=mark if ax is ax_gpu else None)
        if ax_gpu.get_legend_handles_labels()[0]:  # below the axis, off the stall bands
            ax_gpu.legend(loc="upper left", bbox_to_anchor=(0, -0.3), ncols=4, **_LEGEND)
        x_max = max(x_max, end, meta.planned_duration_s or 0.0)
    if x_max > 0:
        axes[0][0].set_xlim(0, x_max)
    if title:
        fig.suptitle(title)
    return fig
