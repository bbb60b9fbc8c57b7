"""Run a sweep's jobs on the virtual clock: local worker processes, or Ray tasks on a cluster.

Each job runs one arm of one cell with one seed into a scratch directory, reads its figures
back through the reports (`reports.arm_figures`, `stallkit.reports.seed_stats.seed_row`: the A/B table's own
reading of an arm), and returns one `SweepRun`; the scratch directory goes. The driver appends
each run to `sweep-runs.jsonl` as it finishes, in whatever order the runs finish, so Ctrl-C loses
only the runs still computing; `--resume` then runs what is missing. The same jobs go to
local processes (one per core, `stallkit.kits.workers`: a twin arm's runs in fresh workers that import
vLLM) or, with `--ray ADDRESS`, to an existing Ray cluster as Ray tasks whose results come
back to the driver: the files are the same.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stallkit.contract.sweep import SweepPlan, SweepRun, cell_kit_file
from stallkit.engine import EngineSpec, quiet_vllm_logging
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit, set_dotted
from stallkit.kits.sweep.plan import Job, cell_overrides
from stallkit.kits.workers import Pools, cores, worker_kind
from stallkit.loadgen import read_records

__all__ = [
    "RAY_HINT",
    "check_ray_arms",
    "cores",
    "kit_of",
    "local_pools",
    "ray_session",
    "run_job",
    "run_local",
    "run_ray",
    "write_cell_kits",
]

#: what to do when `--ray` is given without Ray installed
RAY_HINT = "install the extra: pip install 'stallkit[ray]'"

#: called with each finished run
OnRun = Callable[[SweepRun], None]


def kit_of(kit_data: dict[str, Any], overrides: dict[str, Any]) -> Kit:
    """The kit of one run: the sweep's kit (as JSON data) with the run's overrides."""
    data = {**kit_data}
    for section in {key.split(".")[0] for key in overrides}:
        if isinstance(data.get(section), dict):
            data[section] = _deep_copy(data[section])
    for key, value in overrides.items():
        set_dotted(data, key, value)
    return Kit.model_validate(data)


def _deep_copy(value: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in value.items()}


def run_job(kit_data: dict[str, Any], plan: SweepPlan, job: Job) -> SweepRun:
    """Run one job in this process and return its row (its directory is scratch)."""
    from stallkit.contract.slo import slo_figures
    from stallkit.kits.arm.virtual import run_virtual_arm
    from stallkit.reports import arm_seed_row, quiet_span_s

    kit = kit_of(kit_data, cell_overrides(plan, job.settings, job.seed))
    with tempfile.TemporaryDirectory(prefix="stallkit-sweep-") as scratch:
        arm_dir = Path(scratch) / job.arm
        done = run_virtual_arm(kit, job.arm, job.spec, arm_dir)
        row = arm_seed_row(arm_dir)
        quiet_s = quiet_span_s(arm_dir)
        lag_p99_s = _lag_p99_s(arm_dir)
        if kit.slo is not None:  # goodput and attainment for the rate map
            records = read_records(arm_dir)
            figures = slo_figures(records, kit.slo, end_s=row.duration_s)
            row = row.model_copy(update={"slo": figures})
    load = kit.load
    open_loop = load.process != "closed"
    return SweepRun(
        **row.model_dump(),
        cell=job.cell,
        settings=job.settings,
        arm=job.arm,
        compute_s=done.wall_s,
        quiet_s=quiet_s,
        offered_rps=load.offered_rps,
        arrival_unit=load.arrival_unit if open_loop else None,
        lag_p99_s=lag_p99_s,
    )


def _lag_p99_s(arm_dir: Path) -> float | None:
    """The 99th percentile of how late the arm's requests started after their arrivals."""
    lags = sorted(r.t_start - r.t_arrival for r in read_records(arm_dir) if r.t_arrival is not None)
    if not lags:
        return None
    return round(max(0.0, lags[min(len(lags) - 1, int(0.99 * len(lags)))]), 3)


def local_pools(kit_data: dict[str, Any], specs: dict[str, EngineSpec], workers: int) -> Pools:
    """The worker pools for the plan's arms (a twin arm's runs in fresh workers that import
    vLLM: `stallkit.kits.workers`), `workers` processes in all; started on first use."""
    kit = Kit.model_validate(kit_data)
    return Pools(workers, (worker_kind(kit, arm, spec) for arm, spec in specs.items()))


def run_local(
    kit_data: dict[str, Any], plan: SweepPlan, todo: list[Job], on_run: OnRun, pools: Pools
) -> None:
    """Every job in the local worker pools (in this process when one worker is asked for and
    no job is a twin's)."""
    kit = Kit.model_validate(kit_data)
    pools.run(
        run_job, [(worker_kind(kit, j.arm, j.spec), (kit_data, plan, j)) for j in todo], on_run
    )


@contextlib.contextmanager
def ray_session(address: str) -> Iterator[Any]:
    """Connected to the Ray cluster at `address` (a session already open here is reused)."""
    try:
        import ray
    except ImportError:
        raise KitError("--ray needs Ray, which is not installed", RAY_HINT) from None
    if ray.is_initialized():
        yield ray
        return
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise KitError(
            f"--ray {address}: no Ray cluster there ({str(exc).splitlines()[0]})",
            "start one with `ray start --head`, or pass its address (auto: the local one)",
        ) from None
    try:
        yield ray
    finally:
        ray.shutdown()


def check_ray_arms(kit: Kit, arms: dict[str, EngineSpec]) -> None:
    """Ray's workers import vLLM from where it is installed: a twin arm with an overlay (a
    fork's tree put first on the import path) is refused before anything runs."""
    for name, spec in arms.items():
        if worker_kind(kit, name, spec).overlay is not None:
            raise KitError(
                f"--ray: twin arm {name} runs vLLM from an overlay, which Ray's workers do not load",
                "run it in local processes (drop --ray), or install the fork's vLLM on the cluster",
            )


def _ray_job(kit_data: dict[str, Any], plan: SweepPlan, job: Job) -> SweepRun:
    if kind_of(job.spec).vllm_in_process:
        quiet_vllm_logging()  # a Ray worker is reused: its vLLM logs go to each arm's log
    return run_job(kit_data, plan, job)


def run_ray(
    kit_data: dict[str, Any], plan: SweepPlan, todo: list[Job], on_run: OnRun, address: str
) -> None:
    """Every job as a Ray task on the cluster at `address`; results come back here."""
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=1, max_retries=1)(_ray_job)
        kit_ref, plan_ref = ray.put(kit_data), ray.put(plan)
        pending = [task.remote(kit_ref, plan_ref, job) for job in todo]
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    on_run(ray.get(ref))
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise


def write_cell_kits(out: Path, kit_data: dict[str, Any], plan: SweepPlan) -> None:
    """One kit file per cell (the cell's settings over the kit), for its replay command."""
    from stallkit.engine import dump_toml

    for index, settings in enumerate(plan.cells()):
        kit = kit_of(kit_data, {**plan.fixed, **settings})
        data = kit.model_dump(mode="json", exclude_none=True)
        where = ", ".join(f"{k} = {v}" for k, v in settings.items())
        header = f"# cell {index} of the sweep of {plan.kit_name}: {where}\n"
        path = out / cell_kit_file(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + dump_toml(data), encoding="utf-8")
