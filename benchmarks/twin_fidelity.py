"""How close the twin comes to the real engine it was calibrated on, on a workload it never saw.

The same kit and seed twice: once on the real engine over HTTP (default `patched:fix`: vLLM on
CPU running the fork's scheduler plugin, the tiny model; wall clock) and once on the twin of
it (`twin:patched:fix`, vLLM's own scheduler class in process, its step cost from a
calibration of that engine: `kit engine calibrate`, default the shipped `tiny-vllm-cpu`). The
calibration drives single prefills and decode batches; this workload is the kit's agents
(multi-turn, prefix-cache hits, preemptions), so it is held out. Prints, side by side, with
the ratio twin/real: output throughput, TTFT p50 and p90, inter-token latency p50 (each
request's mean gap between tokens after the first, TPOT as vLLM counts it), preemptions and
the prefix-cache hit share of prompt tokens; against the targets (throughput within 10 %,
TTFT p50 within 20 %, ITL p50 within 10 %). Needs vLLM and the tiny model
(STALLKIT_TINY_MODEL).

    python benchmarks/twin_fidelity.py [--kit cpu-patched] [--seed 101] [--duration 60]
        [--calibration tiny-vllm-cpu|FILE] [--real patched:fix] [--twin twin:patched:fix]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from stallkit.kits.ab.execute import execute
from stallkit.kits.ab.plan import Plan

TARGETS = {"throughput tok/s": 0.10, "TTFT p50 s": 0.20, "ITL p50 s": 0.10}


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _figures(arm_dir: Path) -> dict[str, float]:
    turns = [t for t in _rows(arm_dir / "turns.jsonl") if t["outcome"] == "ok"]
    samples = [r for r in _rows(arm_dir / "timeline.jsonl") if r["type"] == "sample"]
    meta = json.loads((arm_dir / "meta.json").read_text(encoding="utf-8"))
    length = float(meta.get("engine_s") or meta["wall_s"])
    ttft = [t["ttft_s"] for t in turns if t["ttft_s"] is not None]
    itl = [
        (t["t_end"] - t["t_start"] - t["ttft_s"]) / (t["completion_tokens"] - 1)
        for t in turns
        if t["ttft_s"] is not None and (t["completion_tokens"] or 0) > 1
    ]
    prompt = sum(t["prompt_tokens"] or 0 for t in turns)
    cached = sum(t["cached_tokens"] or 0 for t in turns)
    return {
        "turns": float(len(turns)),
        "prompt tokens per turn": prompt / len(turns) if turns else 0.0,
        "throughput tok/s": sum(t["completion_tokens"] or 0 for t in turns) / length,
        "TTFT p50 s": statistics.median(ttft) if ttft else float("nan"),
        "TTFT p90 s": _quantile(ttft, 0.9),
        "ITL p50 s": statistics.median(itl) if itl else float("nan"),
        "preemptions": float(samples[-1].get("preemptions") or 0) if samples else 0.0,
        "prefix-cache hit share": cached / prompt if prompt else 0.0,
    }


def _run(kit: str, spec: str, out: Path, overrides: dict[str, Any]) -> Path:
    plan = Plan.build(kit, {"arm": spec}, out, overrides, [], clock="virtual")
    execute(plan, dashboard=False)
    return plan.arms[0].dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", default="cpu-patched")
    parser.add_argument("--seed", type=int, default=101)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--calibration", default="tiny-vllm-cpu")
    parser.add_argument("--real", default="patched:fix")
    parser.add_argument("--twin", default="twin:patched:fix")
    parser.add_argument("--keep", type=Path, default=None, help="keep both runs under DIR")
    args = parser.parse_args()
    overrides: dict[str, Any] = {"load.seed": args.seed, "load.duration_s": args.duration}
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        real = _figures(_run(args.kit, args.real, root / "real", overrides))
        twin_overrides = overrides | {"twin.calibration": args.calibration}
        twin = _figures(_run(args.kit, args.twin, root / "twin", twin_overrides))
    print(f"{args.kit}, seed {args.seed}, {args.duration:g} s: {args.real} vs {args.twin}")
    print(f"{'figure':<24}{'real':>12}{'twin':>12}{'twin/real':>11}  target")
    for name, value in real.items():
        ratio = twin[name] / value if value else float("nan")
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"within {target:.0%}: " + ("yes" if abs(ratio - 1) <= target else "no")
        print(f"{name:<24}{value:>12.4g}{twin[name]:>12.4g}{ratio:>11.3f}  {verdict}")


if __name__ == "__main__":
    main()
