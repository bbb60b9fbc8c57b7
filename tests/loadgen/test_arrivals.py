"""Arrival processes: their laws (fit tests on seeded draws), rates that change, the agents'
claims on a shared gate, `kit load` flags and their errors, and a real wall-clock run."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest
from scipy import stats
from typer.testing import CliRunner

from stallkit.kits.cli import app
from stallkit.loadgen.agent import AgentMachine, Done, Send, Wait
from stallkit.loadgen.arrivals import ArrivalGate, planned_arrivals, segments
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.traces.replay import workload_for
from stallkit.loadgen.workload import plan_agent
from tests.support import kit, served_sim

SMALL = {"min_context": 200, "max_context": 1200, "system_prompt_tokens": 50}
SMALL |= {"new_tokens_min": 20, "new_tokens_max": 200, "reply_tokens_min": 5}
SMALL |= {"reply_tokens_max": 30}


def _gaps(process: str, rate: float, n: int, seed: int = 3, burstiness: float = 1.0) -> list[float]:
    times = planned_arrivals(process, burstiness, seed, segments(rate))  # type: ignore[arg-type]
    first = list(itertools.islice(times, n + 1))
    return [b - a for a, b in itertools.pairwise(first)]


def test_poisson_gaps_fit_the_exponential_and_a_wrong_rate_does_not() -> None:
    gaps = _gaps("poisson", 4.0, 2000)
    assert stats.kstest(gaps, "expon", args=(0, 1 / 4.0)).pvalue > 0.01
    # the test has the power to see a rate 20 % off
    assert stats.kstest(gaps, "expon", args=(0, 1 / 5.0)).pvalue < 0.01


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_bursty_gaps_keep_the_mean_rate_with_the_gammas_variation(burstiness: float) -> None:
    gaps = _gaps("bursty", 2.0, 4000, burstiness=burstiness)
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean
    assert mean == pytest.approx(0.5, rel=0.08)
    assert cv == pytest.approx(1 / burstiness**0.5, rel=0.1)


def test_constant_gaps_are_equal_and_the_first_arrival_is_at_zero() -> None:
    times = list(planned_arrivals("constant", 1.0, 0, segments(4.0), end_s=1.0))
    assert times == [0.0, 0.25, 0.5, 0.75]


def test_stages_and_a_ramp_place_arrivals_by_their_rate() -> None:
    cfg = LoadConfig(
        arrivals="constant", stages=[{"rate": 1, "duration_s": 3}, {"rate": 2, "duration_s": 2}]
    )
    times = list(planned_arrivals("constant", 1.0, 0, cfg.rate_segments()))
    assert times == [0.0, 1.0, 2.0, 3.0, 3.5, 4.0, 4.5]  # the arrivals end with the last stage
    ramp = LoadConfig(arrivals="constant", rate=1, rate_end=3, duration_s=10)
    # the cumulative rate t + t^2/10 reaches k at each arrival, then 3/s held after 10 s
    times = list(planned_arrivals("constant", 1.0, 0, ramp.rate_segments(), end_s=12))
    assert len(times) == 20 + 6
    for k, t in enumerate(times[:21]):
        assert t + t * t / 10 == pytest.approx(k)


def test_poisson_under_a_ramp_has_the_ramps_mean_count() -> None:
    counts = []
    for seed in range(40):
        cfg = LoadConfig(rate=1, rate_end=9, duration_s=10, seed=seed)
        counts.append(len(list(planned_arrivals("poisson", 1.0, seed, cfg.rate_segments(), 10))))
    assert statistics.fmean(counts) == pytest.approx(50, rel=0.1)


def test_arrivals_depend_on_the_seed_only_and_leave_the_workload_alone() -> None:
    closed = LoadConfig(seed=5, **SMALL)
    open_loop = LoadConfig(seed=5, rate=3, **SMALL)
    plans = list(itertools.islice(plan_agent(closed, 2), 6))
    assert list(itertools.islice(plan_agent(open_loop, 2), 6)) == plans
    first = list(itertools.islice(workload_for(open_loop).gate._times, 50))  # type: ignore[union-attr]
    again = list(itertools.islice(workload_for(open_loop).gate._times, 50))  # type: ignore[union-attr]
    assert first == again and first != list(_gaps("poisson", 3.0, 49, seed=6))


def test_free_agents_claim_arrivals_in_turn_and_the_send_carries_its_arrival() -> None:
    cfg = LoadConfig(arrivals="constant", rate=2, max_turns=2, **SMALL)
    gate = ArrivalGate(planned_arrivals("constant", 1.0, 0, cfg.rate_segments()))
    a, b = AgentMachine(cfg, 0, gate=gate), AgentMachine(cfg, 1, gate=gate)
    assert a.start() == Wait(0.0, "start", 0.0) and b.start() == Wait(0.0, "start", 0.5)
    send = b.waited()
    assert isinstance(send, Send) and send.arrival_s == 0.5
    # b is free first: it takes the next arrival, whatever its pause would have been
    assert b.answered(True) == Wait(0.0, "arrival", 1.0)
    first = a.waited()
    assert isinstance(first, Send) and first.arrival_s == 0.0
    assert a.answered(False) == Wait(0.0, "retry", 1.5)  # a retry is a request: it waits too
    assert b.waited().arrival_s == 1.0 and b.answered(True) == Done()  # type: ignore[union-attr]


def test_stages_that_end_leave_the_agents_done() -> None:
    cfg = LoadConfig(arrivals="constant", stages=[{"rate": 1, "duration_s": 1.5}], **SMALL)
    gate = ArrivalGate(planned_arrivals("constant", 1.0, 0, cfg.rate_segments()))
    machines = [AgentMachine(cfg, i, gate=gate) for i in range(3)]
    assert [m.start() for m in machines] == [
        Wait(0.0, "start", 0.0),
        Wait(0.0, "start", 1.0),
        Done(),
    ]


def test_arriving_sessions_are_one_agent_each_playing_one_session() -> None:
    cfg = LoadConfig(arrival_unit="sessions", arrivals="constant", rate=0.5, duration_s=10, **SMALL)
    workload = workload_for(cfg)
    assert workload.agents == 5 and workload.session_arrivals == [0.0, 2.0, 4.0, 6.0, 8.0]
    machine = workload.machine(3)
    assert machine.start() == Wait(0.0, "start", 6.0)
    sends = [machine.waited()]
    while isinstance(sends[-1], Send):
        wait = machine.answered(True)
        sends.append(machine.waited() if isinstance(wait, Wait) else wait)
    assert isinstance(sends[-1], Done) and len(sends) > 2
    played = [s for s in sends if isinstance(s, Send)]
    assert {s.plan.session for s in played} == {0} and {s.plan.agent for s in played} == {3}
    assert [s.arrival_s for s in played] == [6.0] + [None] * (len(played) - 1)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--rate", "-1"], "--rate: Input should be greater than 0"),
        (["--rate", "0"], "--rate: Input should be greater than 0"),
        (["--arrivals", "bursty", "--rate", "1", "--burstiness", "0"], "--burstiness"),
        (["--stages", "1:x"], "is not RATE:SECONDS"),
        (["--stages", "1:-3"], "duration_s: Input should be greater than 0"),
        (["--arrivals", "poisson"], "needs a --rate or stages"),
        (["--rate", "1", "--arrival-unit", "sessions"], "need an end"),
        (["--rate", "1", "--burstiness", "0.5"], "--burstiness applies to --arrivals = bursty"),
        (["--burstiness", "0.5"], "--burstiness applies to --arrivals = bursty"),
        (["--arrival-unit", "sessions"], "--arrival-unit = sessions applies to open-loop"),
        (["--rate", "1", "--stages", "1:60"], "--rate and stages are exclusive"),
        (["--rate", "inf"], "--rate: Input should be a finite number"),
        (["--stages", "nan:60"], "Input should be a finite number"),
    ],
)
def test_bad_arrival_flags_are_one_line_and_exit_2(flags: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["load", "http://127.0.0.1:9", *flags])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "hint" in lines[0]


@pytest.mark.wallclock
def test_a_constant_rate_starts_turns_at_their_planned_wall_times(tmp_path: Path) -> None:
    out = tmp_path / "run"
    sizes = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items() if "context" in k]
    with served_sim("--policy", "fix", "--time-scale", "200") as url:
        done = kit(
            "load", url, "--arrivals", "constant", "--rate", "5", "--duration", "3",
            "--agents", "4", *sizes, "--out", str(out), "--seed", "2",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    arrivals = sorted(r["t_arrival"] for r in rows)
    # 15 planned in 3 s; the last ones may be cut off by the run's end
    assert arrivals[:12] == pytest.approx([k / 5 for k in range(12)])
    lags = sorted(r["t_start"] - r["t_arrival"] for r in rows)
    assert lags[0] >= 0.0  # never before its arrival
    assert statistics.median(lags) < 0.1 and lags[-1] < 0.5  # sized (a /tokenize), then sent
    config = json.loads((out / "load.json").read_text())["config"]
    assert config["arrivals"] == "constant" and config["rate"] == 5
