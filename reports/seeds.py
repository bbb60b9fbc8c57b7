"""Statistics over seeds: the per-seed rows, stall onset spread, and the A/B verdict's odds.

Pure functions over figures already read from saved arm directories. The verdict's test is the
one-sided Fisher exact test of "the fix arm stalls less often than the base arm": given how many
seeds stalled in both arms together, the probability that the fix arm would show as few stalled
seeds as it did (or fewer) if both arms stalled equally often.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from math import comb

from contract.ab import ArmFigures, SeedRow, Verdict

__all__ = ["SeedRow", "Verdict", "fisher_less", "onset_spread", "seed_row", "verdict"]


def seed_row(arm: ArmFigures) -> SeedRow:
    """The per-seed row of one arm directory's figures."""
    first = arm.stalls[0] if arm.stalls else None
    return SeedRow(
        seed=arm.seed,
        stalled=first is not None,
        kind=None if first is None else first.kind,
        onset_s=None if first is None else first.start_s,
        stopped_run=arm.stopped_by_monitor,
        turns=arm.turns,
        preemptions=arm.preemptions,
        restores_recomputed=arm.log_counts.get("restores_recomputed"),
        decode_tok_s=arm.decode_tok_s,
        duration_s=arm.duration_s,
        clock=arm.clock,
        like_for_like=arm.like_for_like,
    )


def fisher_less(base_hits: int, base_n: int, fix_hits: int, fix_n: int) -> float:
    """P(fix shows <= `fix_hits` stalled seeds) under equal odds, margins fixed (hypergeometric)."""
    if not (0 <= base_hits <= base_n and 0 <= fix_hits <= fix_n):
        raise ValueError("stalled seeds must lie between 0 and the seeds run")
    total, hits = base_n + fix_n, base_hits + fix_hits
    denominator = comb(total, fix_n)
    low = max(0, hits - base_n)
    numerator = sum(comb(hits, x) * comb(total - hits, fix_n - x) for x in range(low, fix_hits + 1))
    return min(1.0, numerator / denominator)


def verdict(base: Sequence[SeedRow], fix: Sequence[SeedRow]) -> Verdict:
    """The verdict of a base and a fix arm over their seeds."""
    b = sum(r.stalled for r in base)
    f = sum(r.stalled for r in fix)
    p = fisher_less(b, len(base), f, len(fix))
    return Verdict(seeds=max(len(base), len(fix)), base_stalled=b, fix_stalled=f, p_value=p)


def onset_spread(rows: Sequence[SeedRow]) -> tuple[float, float, float] | None:
    """(median, min, max) of the first stall's onset over the seeds that stalled."""
    onsets = [r.onset_s for r in rows if r.onset_s is not None]
    if not onsets:
        return None
    return statistics.median(onsets), min(onsets), max(onsets)
