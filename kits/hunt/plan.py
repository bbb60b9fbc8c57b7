"""`kit hunt`: search a space of kit settings for one where an arm stalls, then shrink it.

The space (a TOML file) gives each setting an ordered list of values (`[values]` lists, or
`{min, max, step}` ranges) and the seeds to draw from. The search is reproducible from its
seed: batches of points (a value per setting plus a seed) drawn at random, and, once some runs
came close (work pending and no token for a while, short of the stall rule: `quiet_s`), half
of each batch drawn next to those near misses (one or two settings moved a step or two, a new
seed). A point is found when the named arm stalls (or, `--differ`, when the arms disagree).
The shrinker then moves each setting toward the kit's value (agents and duration toward
their smallest) by bisection, keeping a move only when the point is still found, and last
tries the smallest seeds. Runs go to the sweep's runner (local processes or Ray), one batch
at a time; the budget counts runs, shrinking included.
"""

from __future__ import annotations

import random
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from stallkit.contract.errors import read_text
from stallkit.contract.sweep import Setting, SweepAxis, SweepRun
from stallkit.engine import EngineSpec
from stallkit.kits.arm.kinds import arm_specs
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit
from stallkit.kits.sweep.plan import parse_arms, parse_vary

__all__ = [
    "SMALLEST_FIRST",
    "Point",
    "Search",
    "Space",
    "ab_pair",
    "hunt_arms",
    "load_space",
    "shrink",
]

#: settings shrunk toward their smallest value rather than the kit's
SMALLEST_FIRST = ("load.agents", "load.duration_s")
_HINT = "see `kit hunt --help` for the space file's form"


def hunt_arms(kit: Kit, arms_text: str | None, arm: str, differ: bool) -> dict[str, EngineSpec]:
    """The arms a hunt runs (`--arms`, `--arm`, `--differ`): every one of --arms when looking
    for a disagreement, else the --arm one; each spec as its runs get it (with what `kit`
    gives the arm, as `kit ab` plans it)."""
    arms = parse_arms(arms_text)
    if differ:
        if len(arms) < 2:
            raise KitError("--differ needs two arms or more", "e.g. --arms base,fix")
        return arm_specs(kit, arms)
    if arm not in arms:
        raise KitError(
            f"--arm {arm} is none of the arms ({', '.join(arms)})",
            "name one of --arms, e.g. --arm fix",
        )
    return arm_specs(kit, {arm: arms[arm]})


def ab_pair(arms: dict[str, str], stalled: dict[str, bool]) -> tuple[str, str]:
    """The specs a reproducer's `kit ab` runs as base and fix: the arms named so when both
    are among `arms`; else an arm that stalled as base and one that did not (or, when only
    stalled arms ran, another of `arms`) as fix."""
    if "base" in arms and "fix" in arms:
        return arms["base"], arms["fix"]
    hit = next(name for name, s in stalled.items() if s)
    calm = [name for name, s in stalled.items() if not s]
    other = calm or [name for name in arms if name != hit] or [hit]
    return arms[hit], arms[other[0]]


@dataclass(frozen=True)
class Point:
    """A value index per setting, and a seed."""

    index: tuple[int, ...]
    seed: int


@dataclass(frozen=True)
class Space:
    """The settings searched (ordered values each), where each shrinks to, and the seeds."""

    axes: tuple[SweepAxis, ...]
    targets: tuple[int, ...]
    seeds: tuple[int, int]

    def settings(self, point: Point) -> dict[str, Setting]:
        return {a.key: a.values[i] for a, i in zip(self.axes, point.index, strict=True)}

    def size(self) -> int:
        """Points in the space (settings x seeds)."""
        total = self.seeds[1] - self.seeds[0] + 1
        for axis in self.axes:
            total *= len(axis.values)
        return total


def _nearest(values: Sequence[Setting], kit_value: object) -> int:
    """The index of the kit's value among `values`, or of the nearest number to it."""
    for i, value in enumerate(values):
        if value == kit_value:
            return i
    if isinstance(kit_value, int | float):
        numbers = [
            (abs(float(v) - kit_value), i)
            for i, v in enumerate(values)
            if isinstance(v, int | float)
        ]
        if numbers:
            return min(numbers)[1]
    return 0


#: the spaces shipped in the package (`--space NAME`)
SPACES_DIR = Path(__file__).parents[1] / "spaces"


def load_space(path: Path, kit_value: Callable[[str], object]) -> Space:
    """Read a space file: `[settings]` KEY = [values] or {min, max, step}; `[seeds]` min, max.

    A name that is not a file is looked up among the shipped spaces.
    """
    if not path.exists() and (SPACES_DIR / f"{path}.toml").is_file():
        path = SPACES_DIR / f"{path}.toml"
    try:
        data = tomllib.loads(read_text(path, KitError))
    except FileNotFoundError:
        shipped = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.toml")))
        raise KitError(
            f"--space {path}: no such file, nor a shipped space", f"shipped spaces: {shipped}"
        ) from None
    except OSError as exc:
        raise KitError(f"--space {path}: {exc.strerror or exc}", _HINT) from None
    except tomllib.TOMLDecodeError as exc:
        raise KitError(f"--space {path}: {exc}", _HINT) from None
    settings = data.get("settings")
    if not isinstance(settings, dict) or not settings:
        raise KitError(f"--space {path}: no [settings] table", _HINT)
    axes, targets = [], []
    for key, spec in settings.items():
        if isinstance(spec, list):
            text = ",".join(str(v) for v in spec)
        elif isinstance(spec, dict) and {"min", "max"} <= spec.keys():
            text = f"{spec['min']}:{spec['max']}:{spec.get('step', 1)}"
        else:
            raise KitError(f"--space {path}: {key} is neither a list nor {{min, max}}", _HINT)
        axis = parse_vary(f"{key}={text}")
        axes.append(axis)
        smallest = key in SMALLEST_FIRST
        targets.append(0 if smallest else _nearest(axis.values, kit_value(key)))
    seeds = data.get("seeds", {"min": 1, "max": 1_000_000})
    low, high = int(seeds.get("min", 1)), int(seeds.get("max", 1_000_000))
    if not 0 <= low <= high:
        raise KitError(f"--space {path}: [seeds] needs 0 <= min <= max", _HINT)
    return Space(tuple(axes), tuple(targets), (low, high))


#: runs the points of one batch; returns each point's runs (one per arm)
Evaluate = Callable[[list[Point]], list[list[SweepRun]]]
#: whether a point's runs are what the hunt looks for
Found = Callable[[list[SweepRun]], bool]


@dataclass
class Search:
    """The random-then-local search over a space, within a budget of runs."""

    space: Space
    evaluate: Evaluate
    found: Found
    runs_per_point: int
    rng: random.Random
    batch: int = 8
    #: whether a point's settings make a valid kit together (each value alone is checked)
    valid: Callable[[Point], bool] = lambda point: True
    runs: int = 0
    seen: set[Point] = field(default_factory=set)
    near: list[tuple[float, Point]] = field(default_factory=list)

    def _random(self) -> Point:
        index = tuple(self.rng.randrange(len(a.values)) for a in self.space.axes)
        return Point(index, self.rng.randint(*self.space.seeds))

    def _neighbour(self, point: Point) -> Point:
        index = list(point.index)
        for d in self.rng.sample(range(len(index)), k=min(len(index), self.rng.choice((1, 2)))):
            step = self.rng.choice((-2, -1, 1, 2))
            index[d] = max(0, min(len(self.space.axes[d].values) - 1, index[d] + step))
        return Point(tuple(index), self.rng.randint(*self.space.seeds))

    def _draw(self, count: int) -> list[Point]:
        points: list[Point] = []
        for _ in range(count * 20):  # a small space runs out of new points: stop trying
            if len(points) == count:
                break
            near = self.near and self.rng.random() < 0.5
            point = self._neighbour(self.rng.choice(self.near)[1]) if near else self._random()
            if point not in self.seen:
                self.seen.add(point)
                if self.valid(point):
                    points.append(point)
        return points

    def run(self, budget: int) -> Point | None:
        """Search until a point is found (returned) or the budget is spent (None)."""
        while self.runs + self.runs_per_point <= budget:
            count = min(self.batch, (budget - self.runs) // self.runs_per_point)
            points = self._draw(count)
            if not points:
                return None
            results = self.evaluate(points)
            self.runs += len(points) * self.runs_per_point
            for point, runs in zip(points, results, strict=True):
                if self.found(runs):
                    return point
                self.near.append((max(r.quiet_s for r in runs), point))
            self.near = sorted(self.near, key=lambda n: -n[0])[:8]
        return None


def shrink(
    space: Space, point: Point, still: Callable[[Point], bool], budget: int, smallest_seeds: int
) -> tuple[Point, int]:
    """Move each setting toward its target and the seed toward the smallest while the point
    is still found, within `budget` runs; (the shrunk point, runs spent)."""
    spent = 0

    def check(candidate: Point) -> bool:
        nonlocal spent
        spent += 1
        return still(candidate)

    changed = True
    while changed and spent < budget:
        changed = False
        for d, target in enumerate(space.targets):
            at = point.index[d]
            near, far = target, at  # the answer lies in [near, far]: far is known to stall
            while near != far and spent < budget:
                mid = near if abs(far - near) == 1 else (near + far) // 2
                moved = Point((*point.index[:d], mid, *point.index[d + 1 :]), point.seed)
                if check(moved):
                    far, point, changed = mid, moved, True
                else:
                    near = mid + (1 if far > mid else -1)
    low = space.seeds[0]
    for seed in range(low, min(point.seed, low + smallest_seeds)):
        if spent >= budget:
            break
        if check(replace(point, seed=seed)):
            point = replace(point, seed=seed)
            break
    return point, spent
