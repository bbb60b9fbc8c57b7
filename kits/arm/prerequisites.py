"""What each arm needs before any arm starts, checked once for a run and its --dry-run alike.

An A/B whose base arm cannot start must not run its fix arm first and then fail, leaving a
run directory the error does not mention. So before the first engine starts: a local vLLM
arm (`vllm:`, `patched:`) needs vLLM here and its model directory, an image arm a docker
daemon that answers, an attached arm (`url:`) something listening at its URL. Twin arms are
checked by their kind (`check_arm_kinds`); what each docker host offers (a GPU runtime, a
bridge network) by the plan.
"""

from __future__ import annotations

from stallkit.engine import EngineError, EngineSpec, daemon_down, daemon_error
from stallkit.kits.arm.kinds import kind_of
from stallkit.kits.errors import KitError
from stallkit.kits.kit import Kit

__all__ = ["check_arms_start"]


def check_arms_start(kit: Kit, specs: dict[str, EngineSpec]) -> None:
    """Refuse, naming the arm, a plan one of whose arms could not start; start nothing."""
    hosts: dict[str, list[str]] = {}
    for name, spec in specs.items():
        try:
            kind_of(spec).check_start(kit, spec)
        except EngineError as exc:
            arm = f"{name} arm: " if len(specs) > 1 else ""  # `kit run` has the one arm
            raise KitError(f"{arm}{exc.message}", exc.hint) from None
        if kind_of(spec).image:
            hosts.setdefault(kit.engine.host_for(name).docker_host, []).append(name)
    for host, arms in hosts.items():
        problem = daemon_error(host)
        if problem is not None:
            named = f"{', '.join(arms)} arm{'s' * (len(arms) > 1)}: " if len(specs) > 1 else ""
            message, hint = daemon_down(host, problem)
            raise KitError(f"{named}{message}", hint)
