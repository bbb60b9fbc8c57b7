"""The files of a sweep directory (`kit sweep`, `kit hunt`): its plan, its runs, its cells.

`sweep-plan.json` is written first: the kit, the settings varied (one axis per `--vary`), the
arms, the seeds and the virtual duration, so that `--resume` and the reports know what was
meant to run. `sweep-runs.jsonl` gets one line per finished run (a cell's settings on one arm with
one seed), appended as each finishes, so an interrupted sweep loses nothing. `sweep.json` is
made from those two by the reports: per cell and arm, the stalls, exposure and stall rate with
its exact interval, and the cell's verdict, with the statistics of the A/B table (one
definition, in `stallkit.reports.seed_stats`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stallkit.contract.ab import SeedRow, StallRate, Verdict

__all__ = [
    "HUNT_FILE",
    "SWEEP_FILE",
    "SWEEP_HTML",
    "SWEEP_PLAN_FILE",
    "SWEEP_RUNS_FILE",
    "SWEEP_SCHEMA_VERSION",
    "HuntFile",
    "HuntPoint",
    "RateMap",
    "RatePoint",
    "RateSeries",
    "Setting",
    "SweepAxis",
    "SweepCell",
    "SweepFile",
    "SweepPlan",
    "SweepRun",
    "cell_kit_file",
]

SWEEP_PLAN_FILE = "sweep-plan.json"
SWEEP_RUNS_FILE = "sweep-runs.jsonl"
SWEEP_FILE = "sweep.json"
SWEEP_HTML = "sweep.html"
#: the layout version of sweep-plan.json and sweep.json
SWEEP_SCHEMA_VERSION = 1

_FROZEN = ConfigDict(frozen=True, extra="forbid")

#: one kit value a sweep sets (TOML's scalars)
Setting = bool | int | float | str


class SweepAxis(BaseModel):
    """One setting varied over a sweep: a kit key and its values, in order."""

    model_config = _FROZEN
    key: str = Field(description="The kit's dotted key, e.g. sim.engine.max_num_seqs.")
    values: list[Setting] = Field(description="The values the sweep runs, in order.")


class SweepPlan(BaseModel):
    """sweep-plan.json: what a sweep runs (every cell of the axes' product, on every arm and
    seed), written before the first run."""

    model_config = _FROZEN
    schema_version: int = Field(SWEEP_SCHEMA_VERSION, description="Layout version.")
    kit: str = Field(description="The kit's name or path, as given.")
    kit_name: str = Field(description="The kit's own name.")
    axes: list[SweepAxis] = Field(description="The settings varied, one axis each.")
    fixed: dict[str, Setting] = Field(
        default_factory=dict, description="Kit values set for every cell (e.g. the duration)."
    )
    arms: dict[str, str] = Field(description="Arm name -> engine spec (virtual-clock arms).")
    seeds: list[int] = Field(description="The load seeds every cell and arm runs.")
    duration_s: float = Field(description="Engine seconds each run lasts at most.")

    def cells(self) -> list[dict[str, Setting]]:
        """Every cell of the axes' product, in order (the last axis varying fastest)."""
        out: list[dict[str, Setting]] = [{}]
        for axis in self.axes:
            out = [{**cell, axis.key: value} for cell in out for value in axis.values]
        return out


class SweepRun(SeedRow):
    """One line of sweep-runs.jsonl: one cell's settings on one arm with one seed."""

    seed: int = Field(description="The load's seed.")
    cell: int = Field(description="The cell's index in the plan's product of axes.")
    settings: dict[str, Setting] = Field(description="The cell's value of each axis.")
    arm: str = Field(description="The arm's name.")
    compute_s: float = Field(description="Wall seconds the run took to compute.")
    quiet_s: float = Field(
        0.0,
        description="Longest span of engine seconds with work pending and no token generated "
        "(the stall rule's condition; short of the kit's stall_after_s, a near miss).",
    )
    offered_rps: float | None = Field(
        None,
        description="Open-loop arrivals the load planned per engine second over the run's "
        "length, the process's mean (null: closed-loop agents).",
        exclude_if=lambda value: value is None,
    )
    arrival_unit: Literal["requests", "sessions"] | None = Field(
        None,
        description="What an arrival started: a request or a whole session (null: closed loop).",
        exclude_if=lambda value: value is None,
    )
    lag_p99_s: float | None = Field(
        None,
        description="99th percentile of how late requests started after their arrival, "
        "engine seconds (null: closed loop or no request).",
        exclude_if=lambda value: value is None,
    )


class SweepCell(BaseModel):
    """One cell on one arm in sweep.json: its seeds' stalls, exposure, rate and verdict."""

    model_config = _FROZEN
    cell: int = Field(description="The cell's index in the plan's product of axes.")
    settings: dict[str, Setting] = Field(description="The cell's value of each axis.")
    arm: str = Field(description="The arm's name.")
    seeds: list[int] = Field(
        description="The seeds whose runs were distinct observations (missing ones are not "
        "counted; a seed repeating an earlier seed's run exactly is in `repeated`)."
    )
    stalled_seeds: list[int] = Field(description="The distinct runs' seeds that stalled.")
    kinds: dict[str, int] = Field(description="First stalls per kind, over the distinct runs.")
    repeated: list[int] = Field(
        default_factory=list,
        description="Seeds whose runs repeated an earlier seed's exactly (a seed-free workload): "
        "one observation, counted once.",
    )
    rate: StallRate = Field(description="Stalls per engine hour of exposure, exact interval.")
    verdict: Verdict | None = Field(
        None, description="The cell's verdict, base against fix (null: not both arms ran)."
    )
    replay: str = Field(description="The command that replays the cell as an A/B.")


class RatePoint(BaseModel):
    """One cell on one arm of a rate map: its offered rate and what the arm made of it."""

    model_config = _FROZEN
    cell: int = Field(description="The cell's index in the plan's product of axes.")
    offered_rps: float = Field(description="Arrivals offered per engine second.")
    achieved_rps: float | None = Field(
        description="Requests completed per engine second (after the warm-up when the kit "
        "sets [slo]), mean over the distinct seeds."
    )
    goodput_rps: float | None = Field(
        description="Requests meeting every SLO per engine second, mean over the seeds (null: "
        "the kit sets no [slo])."
    )
    attainment_pct: float | None = Field(
        description="Requests meeting every SLO, in %, mean over the seeds (null: no [slo])."
    )
    lag_p99_s: float | None = Field(
        description="The worst seed's 99th percentile start lag behind the arrivals, engine s."
    )
    seeds: int = Field(description="Distinct seeds that ran.")
    stalled_seeds: int = Field(description="Of those, seeds that stalled.")


class RateSeries(BaseModel):
    """One arm's rate map at one value of the other axes: points by offered rate, and where
    the arm stops keeping up, starts stalling and last meets its SLOs."""

    model_config = _FROZEN
    arm: str = Field(description="The arm's name.")
    fixed: dict[str, Setting] = Field(description="The other varied settings' values.")
    unit: Literal["requests", "sessions"] = Field(description="What an arrival started.")
    points: list[RatePoint] = Field(description="By offered rate, lowest first.")
    keeps_up_rps: float | None = Field(
        description="The highest offered rate up to which the arm completed at least the "
        "map's keep-up share of the offered requests (null: not even the lowest; sessions: "
        "not defined)."
    )
    stalls_from_rps: float | None = Field(
        description="The lowest offered rate at which a seed stalled (null: none stalled)."
    )
    slo_max_rps: float | None = Field(
        description="The highest offered rate up to which no seed stalled and SLO attainment "
        "was at least the map's target (null: no [slo], or not even the lowest)."
    )


class RateMap(BaseModel):
    """Per arm, what the arm achieved against the offered arrival rate (a load sweep)."""

    model_config = _FROZEN
    keep_up_pct: float = Field(
        description="Share of the offered rate an arm must complete to keep up, in %."
    )
    slo_target_pct: float = Field(
        description="SLO attainment a rate must reach to meet the SLOs, in %."
    )
    series: list[RateSeries] = Field(description="Per arm and value of the other axes.")


class SweepFile(BaseModel):
    """sweep.json: the plan, how much of it ran, and every cell on every arm."""

    model_config = _FROZEN
    schema_version: int = Field(SWEEP_SCHEMA_VERSION, description="Layout version.")
    plan: SweepPlan = Field(description="What the sweep was to run.")
    runs: int = Field(description="Runs recorded.")
    missing: int = Field(description="Runs of the plan not recorded (an interrupted sweep).")
    cells: list[SweepCell] = Field(description="Per cell and arm, in the plan's order.")
    rate_map: RateMap | None = Field(
        None,
        description="Achieved rate, goodput and stalls against the offered arrival rate (only "
        "when the runs had open-loop arrivals).",
        exclude_if=lambda value: value is None,
    )


def cell_kit_file(cell: int) -> str:
    """The kit file of a cell inside its sweep directory (what its replay command runs)."""
    return f"kits/cell-{cell}.toml"


HUNT_FILE = "hunt.json"


class HuntPoint(BaseModel):
    """A point of a hunt's space: a value per setting and a seed, with what its runs showed."""

    model_config = _FROZEN
    settings: dict[str, Setting] = Field(description="The point's value of each setting.")
    seed: int = Field(description="The load's seed.")
    stalled: dict[str, bool] = Field(description="Per arm: whether it stalled.")
    quiet_s: float = Field(description="Longest span with work pending and no token, engine s.")


class HuntFile(BaseModel):
    """hunt.json: what a hunt searched, how much of the space it covered, what it found."""

    model_config = _FROZEN
    schema_version: int = Field(SWEEP_SCHEMA_VERSION, description="Layout version.")
    kit: str = Field(description="The kit's name or path, as given.")
    arms: dict[str, str] = Field(description="Arm name -> engine spec.")
    looking_for: str = Field(description="What counts as found, in words.")
    seed: int = Field(description="The search's own seed (the same seed, the same search).")
    budget: int = Field(description="Runs the search could spend.")
    search_runs: int = Field(description="Runs the search spent.")
    points: int = Field(description="Distinct points run.")
    space_points: int = Field(description="Points in the space (settings x seeds).")
    values_covered: dict[str, str] = Field(
        description="Per setting: how many of its values some point used, of how many."
    )
    nearest_miss: HuntPoint | None = Field(
        description="The point whose runs came closest (longest quiet span), if none was found."
    )
    found: HuntPoint | None = Field(description="The point found, before shrinking.")
    shrunk: HuntPoint | None = Field(description="The point found, shrunk.")
    shrink_runs: int = Field(description="Runs the shrinking spent.")
    reproducer: str | None = Field(description="The shrunk point's kit file.")
    command: str | None = Field(description="The `kit ab` that reproduces it.")
