"""timeline.png: per arm, generation tok/s, running and waiting, KV usage and GPU utilisation
over engine time, with stall intervals shaded. Reads saved timelines only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.rundir import arm_dirs, effective_scale, load_json, read_jsonl, stalls_from_timeline


def _series(
    events: list[dict[str, Any]], key: str, scale: float
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for ev in events:
        if ev.get("type") == "sample" and ev.get(key) is not None:
            xs.append(float(ev["t"]) * scale)
            ys.append(float(ev[key]))
    return xs, ys


def plot_timelines(run_dir: Path, out_path: Path) -> None:
    """Draw one column per arm, four rows of panels, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = arm_dirs(run_dir)
    fig, axes = plt.subplots(
        4, max(1, len(arms)), figsize=(6.5 * max(1, len(arms)), 9), sharex="col", squeeze=False
    )
    for col, arm_dir in enumerate(arms):
        meta = load_json(arm_dir / "meta.json")
        scale = effective_scale(meta)
        events = list(read_jsonl(arm_dir / "timeline.jsonl"))
        ax_tok, ax_req, ax_kv, ax_gpu = (axes[r][col] for r in range(4))
        ax_tok.set_title(f"{meta.get('arm', arm_dir.name)}: {meta.get('spec', '')}")
        x, y = _series(events, "gen_tok_s", scale)
        # rates were measured per wall second; per engine second they are divided by the scale
        ax_tok.plot(x, [v / scale for v in y], color="tab:blue", lw=1)
        ax_tok.set_ylabel("gen tok/s")
        for key, color in (("running", "tab:green"), ("waiting", "tab:orange")):
            x, y = _series(events, key, scale)
            ax_req.step(x, y, where="post", label=key, color=color, lw=1)
        ax_req.set_ylabel("requests")
        ax_req.legend(loc="upper left", fontsize=7)
        x, y = _series(events, "kv_usage", scale)
        ax_kv.plot(x, [100 * v for v in y], color="tab:purple", lw=1)
        ax_kv.set_ylabel("KV %")
        ax_kv.set_ylim(0, 105)
        gpu: dict[str, tuple[list[float], list[float]]] = {}
        for ev in events:
            if ev.get("type") == "gpu":
                for idx, util in (ev.get("util") or {}).items():
                    xs, ys = gpu.setdefault(str(idx), ([], []))
                    xs.append(float(ev["t"]) * scale)
                    ys.append(float(util))
        for idx, (xs, ys) in sorted(gpu.items()):
            ax_gpu.plot(xs, ys, lw=1, label=f"GPU {idx}")
        if gpu:
            ax_gpu.legend(loc="upper left", fontsize=7)
        ax_gpu.set_ylabel("GPU util %")
        ax_gpu.set_ylim(0, 105)
        ax_gpu.set_xlabel("engine seconds")
        for stall in stalls_from_timeline(events, scale):
            for ax in (ax_tok, ax_req, ax_kv, ax_gpu):
                ax.axvspan(stall.start_s, stall.start_s + stall.duration_s, color="red", alpha=0.15)
    fig.tight_layout()
    fig.savefig(out_path, dpi=90)
    plt.close(fig)
