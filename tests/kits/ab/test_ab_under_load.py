"""`kit ab` on a trace that ends long before the run does: only time under load counts.

A real A/B on the virtual clock (the simulator, the agents replaying a mooncake trace, the
monitor), read back from its run directory: the exposure is no larger than the time work was
pending (plus one scrape), and seeds that replay the same trace identically are one run.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from typer.testing import CliRunner

from stallkit.contract.jsonl import read_jsonl
from stallkit.contract.records import read_records
from stallkit.contract.timeline import SampleLine, timeline_adapter
from stallkit.kits.cli import app


def _trace(path: Path) -> None:
    """24 single-turn requests over about 120 s, then nothing."""
    lines = [
        {"timestamp": 5000 * i, "input_length": 2048 + 512 * (i % 5), "output_length": 40,
         "hash_ids": [i % 3, 100 + i, 200 + i, 300 + i]}
        for i in range(24)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_trace_ab_counts_only_the_time_work_was_pending(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    _trace(trace)
    out = tmp_path / "ab"
    args = ["ab", "--trace", str(trace), "--seeds", "3", "--duration", "1800", "--out", str(out)]
    done = CliRunner().invoke(app, [*args, "--no-dashboard"])
    assert done.exit_code == 0, done.output
    data = json.loads((out / "ab.json").read_text())
    for arm in ("base", "fix"):
        seed_dir = out / arm / "seed-8"
        records = read_records(seed_dir / "turns.jsonl")
        last_end = max(r.t_end for r in records)
        samples = [
            e
            for e in read_jsonl(seed_dir / "timeline.jsonl", timeline_adapter)
            if isinstance(e, SampleLine)
        ]
        scrape_s = max(b.t - a.t for a, b in itertools.pairwise(samples))
        rows = data["arms"][arm]["seeds"]
        # the trace's work ends at `last_end`; the run goes on idle to 1800 s
        assert last_end < 300 < 1800 == rows[0]["duration_s"]
        assert rows[0]["exposure_s"] <= last_end + scrape_s
        # same trace, same times: the three seeds are one run, counted once
        assert [r["same_as"] for r in rows] == [None, 8, 8]
        assert data["arms"][arm]["rate"]["runs"] == 1
        assert data["arms"][arm]["rate"]["exposure_s"] == rows[0]["exposure_s"]
        # decode tok/s is over the time under load, not over the idle tail
        tokens = sum(r.completion_tokens or 0 for r in records)
        assert rows[0]["decode_tok_s"] > tokens / 1800 * 5
    md = (out / "ab.md").read_text()
    assert "0 of 1 distinct (3 seeds)" in md and "base: 3 seeds, 1 distinct run" in md
    assert "under load" in md
