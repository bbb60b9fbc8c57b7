"""The plan of `kit run` / `kit ab`: arms, seeds, clocks and run directories, decided up front.

A plan is validated before anything starts (kit, specs, overlays, GPU sets, seeds, output
directory, what every arm needs to start (`stallkit.kits.arm.prerequisites`), and what each image arm's
docker host offers: a GPU runtime for its GPUs, a bridge network for its published port), so
`kit ab --dry-run` refuses what the run would. A simulator arm runs on the virtual clock (in process, on engine time) or on the
wall clock (served over HTTP at the kit's time scale); every other engine runs on the wall
clock. Over several seeds each arm gets one `seed-N` directory per seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stallkit.contract.files import seed_dir_name
from stallkit.contract.meta import Clock
from stallkit.engine import (
    DaemonProblem,
    EngineSpec,
    Overlay,
    daemon_problems,
    needs_bridge,
    probe_daemon,
)
from stallkit.kits.arm.kinds import arm_specs, check_arm_kinds, kind_of
from stallkit.kits.arm.launchers import time_scale
from stallkit.kits.arm.prerequisites import check_arms_start
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit, load_kit

#: seeds an A/B of simulator arms on the virtual clock runs when neither --seeds nor --seed is
#: given (engines on the wall clock run the kit's one seed unless told otherwise)
DEFAULT_VIRTUAL_SEEDS = 10
#: the most seeds one plan may run
MAX_SEEDS = 10_000


def parse_seeds(text: str, first: int) -> list[int]:
    """`N` (N seeds from `first`), `A-B` (inclusive range) or `A,B,C` (a list); KitError if bad."""
    hint = "use --seeds N (N >= 1 seeds), --seeds A-B or --seeds A,B,C (whole numbers, A <= B)"
    raw = text.strip()
    too_many = KitError(f"--seeds {text!r} must name 1 to {MAX_SEEDS} distinct seeds", hint)
    try:
        if "," in raw:
            seeds = [int(part) for part in raw.split(",")]  # `1,,2` is a typo, not seeds 1 and 2
        elif "-" in raw.lstrip("-"):
            low, high = raw.split("-", 1) if not raw.startswith("-") else ("", raw)
            a, b = int(low), int(high)
            if a > b:
                raise ValueError
            if b - a >= MAX_SEEDS:  # before the list: a huge range is refused, not built
                raise too_many
            seeds = list(range(a, b + 1))
        else:
            count = int(raw)
            if count < 1:  # a count, but of no seed: say what a count must be
                raise KitError(f"--seeds {text!r}: a seed count must be N >= 1", hint)
            if count > MAX_SEEDS:
                raise too_many
            seeds = list(range(first, first + count))
    except ValueError:
        raise KitError(f"--seeds {text!r} is not a seed count, range or list", hint) from None
    if not seeds or len(seeds) > MAX_SEEDS or len(set(seeds)) != len(seeds):
        raise too_many
    return seeds


DEFAULT_RUNS_DIR = Path("kit-runs")


@dataclass(frozen=True)
class Arm:
    """One engine under test and its run directory."""

    name: str
    spec: EngineSpec
    dir: Path


@dataclass
class Plan:
    """Everything decided before the first engine starts."""

    kit: Kit
    arms: list[Arm]
    out_dir: Path
    parallel: bool = False
    overlays: list[Overlay] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    clock: Clock = "wall"

    @classmethod
    def build(
        cls,
        kit_name: str,
        specs: dict[str, str],
        out: Path | None,
        overrides: dict[str, Any],
        overlays: list[str],
        parallel: bool = False,
        *,
        seeds: str | None = None,
        clock: Clock = "wall",
    ) -> Plan:
        kit = load_kit(kit_name, overrides)
        parsed = arm_specs(kit, specs)  # the capabilities the kit gives each arm, once
        overlay_objs: list[Overlay] = []
        if any(kind_of(s).image for s in parsed.values()):
            overlay_objs = [Overlay.parse(text) for text in overlays]
        elif any(kind_of(s).vllm_in_process for s in parsed.values()):
            kit = _twin_overlays(kit, overlays, parsed)
        elif overlays:
            raise KitError(
                "--overlay applies to docker image arms and twin: arms only",
                "drop --overlay, or use an image or twin: spec",
            )
        check_arm_kinds(kit, parsed)
        _check_step_cost(kit, parsed)
        if parallel:
            _check_disjoint_gpus(kit, parsed)
        out_dir = (
            out
            if out is not None
            else DEFAULT_RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{kit.name}"
        )
        if out_dir.exists() and not out_dir.is_dir():
            raise KitError(f"{out_dir} is not a directory", "pass a new directory as --out")
        blocked = next((p for p in out_dir.parents if p.exists() and not p.is_dir()), None)
        if blocked is not None:  # found now, not when the first arm makes its directory
            raise KitError(f"{out_dir}: {blocked} is a file", "pass a new directory as --out")
        if out_dir.exists() and any(out_dir.iterdir()):
            raise KitError(
                f"{out_dir} already holds files",
                "choose a new --out; nothing recorded is overwritten",
            )
        single = len(parsed) == 1
        arms = [
            Arm(name, spec, out_dir if single else out_dir / name) for name, spec in parsed.items()
        ]
        if seeds is not None:
            seed_list = parse_seeds(seeds, kit.load.seed)
        elif (
            clock == "virtual"
            and "load.seed" not in overrides
            and len(parsed) > 1
            and all("virtual" in kind_of(spec).clocks for spec in parsed.values())
        ):
            seed_list = list(range(kit.load.seed, kit.load.seed + DEFAULT_VIRTUAL_SEEDS))
        else:
            seed_list = [kit.load.seed]
        # last, as they ask docker and engines: every arm can start, or none does
        check_arms_start(kit, parsed)
        _check_docker_hosts(kit, parsed)
        return cls(kit, arms, out_dir, parallel, overlay_objs, seeds=seed_list, clock=clock)

    def virtual(self, arm: Arm) -> bool:
        """Whether an arm runs in process on the engine's clock (twin arms always do)."""
        return kind_of(arm.spec).runs_virtual(self.clock)

    def seed_dir(self, arm: Arm, seed: int) -> Path:
        """An arm's directory for one seed (the arm's own directory when one seed runs)."""
        return arm.dir if len(self.seeds) == 1 else arm.dir / seed_dir_name(seed)

    def kit_for(self, seed: int) -> Kit:
        """The kit with its load's seed set to `seed`."""
        return self.kit.model_copy(update={"load": self.kit.load.model_copy(update={"seed": seed})})

    def _overlays_of(self, arm: Arm) -> list[str]:
        """The source overlays an arm runs with: a twin's tree, or an image's SRC:DEST mounts."""
        kind = kind_of(arm.spec)
        if kind.image:
            return [f"{o.source}:{o.dest}" for o in self.overlays]
        tree = self.kit.twin.overlay_for(arm.name) if kind.vllm_in_process else None
        return [tree] if tree else []

    def describe(self) -> str:
        lines = [
            f"kit {self.kit.name}: {self.kit.description}".rstrip(": "),
            f"out: {self.out_dir}",
        ]
        for arm in self.arms:
            kind = kind_of(arm.spec)
            gpus = self.kit.engine.gpus_for(arm.name) if kind.image else []
            scale = time_scale(arm.spec, self.kit)
            clock = "virtual clock" if self.virtual(arm) else f"wall clock, time scale {scale:g}"
            if kind.attaches:
                clock = "wall clock, time scale as the engine states (a real engine: 1)"
            host = self.kit.engine.host_for(arm.name).docker_host
            if kind.image and host:
                clock += f"; docker host {host}"
            factor = self.kit.sim.step_cost_scale.get(arm.name)
            if factor is not None:
                clock += f"; step cost x{factor:g}"
            clock += "".join(f"; overlay {tree}" for tree in self._overlays_of(arm))
            lines.append(
                f"  {arm.name}: {arm.spec.raw} ({arm.spec.kind}; gpus {gpus or '-'}; {clock})"
            )
        load = self.kit.load
        stop_s = self.kit.monitor.stop_after_s
        stop = "never" if stop_s is None else f"after {stop_s:g} s"
        lines.append(
            f"load: {load.agents} agents, contexts {load.min_context}-{load.max_context} tokens, "
            f"{load.duration_s:g} engine s, {_seeds_text(self.seeds)}; "
            f"stall after {self.kit.monitor.stall_after_s:g} s, stop {stop}"
        )
        wall = "parallel" if self.parallel else "sequential"
        if any(self.virtual(arm) for arm in self.arms):
            wall = f"virtual arms in parallel processes, wall arms {wall}"
        lines.append("mode: " + wall)
        return "\n".join(lines)


def _twin_overlays(kit: Kit, overlays: list[str], specs: dict[str, EngineSpec]) -> Kit:
    """The kit with `--overlay TREE` (every twin arm) or `--overlay ARM=TREE` (one arm) set."""
    if not overlays:
        return kit
    shared = kit.twin.overlay
    per_arm = dict(kit.twin.arm_overlay)
    for text in overlays:
        arm, eq, tree = text.partition("=")
        if not eq:
            arm, tree = "", text
        if not tree.strip() or (eq and not arm.strip()):
            raise KitError(f"--overlay {text!r} names no tree or no arm", "write TREE or ARM=TREE")
        spec = specs.get(arm)
        if arm and (spec is None or not kind_of(spec).vllm_in_process):
            twins = ", ".join(n for n, s in specs.items() if kind_of(s).vllm_in_process)
            raise KitError(
                f"--overlay {text}: {arm!r} is not a twin arm", f"twin arms here: {twins}"
            )
        path = Path(tree).expanduser()
        if not path.is_dir():
            raise KitError(
                f"--overlay {text}: {tree} is not a directory",
                "pass a source tree holding vllm/ (a fork's checkout, or only its changed files)",
            )
        if arm:
            per_arm[arm] = str(path.resolve())
        else:
            shared = str(path.resolve())
    twin = kit.twin.model_copy(update={"overlay": shared, "arm_overlay": per_arm})
    return kit.model_copy(update={"twin": twin})


def _check_step_cost(kit: Kit, specs: dict[str, EngineSpec]) -> None:
    """Refuse a step cost factor for an arm that does not run the kit's simulator (it would be
    silently ignored there)."""
    for arm in kit.sim.step_cost_scale:
        spec = specs.get(arm)
        if spec is not None and not kind_of(spec).plays_faults:  # runs [sim.engine]: sim: arms
            raise KitError(
                f"sim.step_cost_scale.{arm}: {spec.raw} is not a simulator arm",
                "a step cost factor applies to sim: arms only; drop it for this arm",
            )


def _check_disjoint_gpus(kit: Kit, specs: dict[str, EngineSpec]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for name, spec in specs.items():
        if not kind_of(spec).image:
            continue
        host = kit.engine.host_for(name).docker_host  # GPUs of different hosts never clash
        for gpu in kit.engine.gpus_for(name):
            if (host, gpu) in seen:
                raise KitError(
                    f"--parallel refused: arms {seen[host, gpu]} and {name} both use GPU {gpu}",
                    "give the arms disjoint sets with [engine.arm_gpus] in the kit, or run sequentially",
                )
            seen[host, gpu] = name


def _check_docker_hosts(kit: Kit, specs: dict[str, EngineSpec]) -> None:
    """Refuse a kit that asks a docker host for what its daemon lacks, naming the kit key."""
    by_host: dict[str, list[str]] = {}
    for name, spec in specs.items():
        if kind_of(spec).image:
            by_host.setdefault(kit.engine.host_for(name).docker_host, []).append(name)
    network = kit.engine.network
    for host, arms in by_host.items():
        with_gpus = [arm for arm in arms if kit.engine.gpus_for(arm)]
        facts = probe_daemon(host, runtimes=bool(with_gpus), networks=needs_bridge(network))
        problems = daemon_problems(facts, gpus=bool(with_gpus), network=network)
        if problems:
            where = f"docker on {host}" if host else "the local docker"
            said = [_daemon_text(kit, p, with_gpus, len(by_host) > 1) for p in problems]
            raise KitError(
                "; ".join(f"{where} {text}" for text, _ in said), "; ".join(h for _, h in said)
            )


def _daemon_text(
    kit: Kit, problem: DaemonProblem, with_gpus: list[str], several_hosts: bool
) -> tuple[str, str]:
    """The message and the hint (the kit keys to change) for one thing a daemon lacks."""
    if problem == "no_gpu_runtime":
        asks = ", ".join(f"{arm} GPUs {kit.engine.gpus_for(arm)}" for arm in with_gpus)
        # the kit-wide list, unless the arm has its own or an arm on another host needs it
        keys = " and ".join(
            dict.fromkeys(
                f"engine.arm_gpus.{arm} = []"
                if several_hosts or arm in kit.engine.arm_gpus
                else "engine.gpus = []"
                for arm in with_gpus
            )
        )
        return (
            f"has no GPU runtime (no nvidia runtime in `docker info`), but the kit gives {asks}",
            f"for a CPU run set {keys} in the kit (a copy of it: --kit PATH.toml), "
            "or install the NVIDIA container toolkit on that host",
        )
    return (
        "has no bridge network, which the kit's published port needs",
        'set engine.network = "host" in the kit (a copy of it: --kit PATH.toml); the engine '
        "then listens on a free loopback port",
    )


def _seeds_text(seeds: list[int]) -> str:
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{len(seeds)} seeds ({seeds[0]}-{seeds[-1]})"
    return f"{len(seeds)} seeds ({', '.join(map(str, seeds))})"
