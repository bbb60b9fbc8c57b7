"""Start, watch and stop inference engines: docker images, local vLLM, the embedded simulator.

The names below are the package's public face, for the orchestration: engine specs, the
launchers and their options, the simulator's and the patched scheduler's settings. Each is
imported from its module on first use, so `import engine` itself imports nothing (vLLM's
engine core imports this package on its way to `engine.patched.scheduler`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import lazy_face

if TYPE_CHECKING:
    from engine.attach import AttachLauncher
    from engine.daemon import (
        DaemonFacts,
        DaemonProblem,
        daemon_problems,
        needs_bridge,
        probe_daemon,
    )
    from engine.docker import DockerLauncher, DockerOptions, Overlay
    from engine.errors import EngineError
    from engine.launcher import Launcher, free_port, tail_lines
    from engine.local import VllmLauncher
    from engine.patched.config import PatchedConfig
    from engine.patched.launch import PatchedLauncher, PatchedOptions, resolve_model
    from engine.sim.config import SimConfig
    from engine.simproc import SimLauncher
    from engine.spec import EngineSpec, parse_spec
    from engine.tinymodel import build_tiny_model

#: public name -> the module that defines it
_LAZY = {
    "AttachLauncher": "engine.attach",
    "DaemonFacts": "engine.daemon",
    "DaemonProblem": "engine.daemon",
    "daemon_problems": "engine.daemon",
    "needs_bridge": "engine.daemon",
    "probe_daemon": "engine.daemon",
    "DockerLauncher": "engine.docker",
    "DockerOptions": "engine.docker",
    "Overlay": "engine.docker",
    "EngineError": "engine.errors",
    "Launcher": "engine.launcher",
    "free_port": "engine.launcher",
    "tail_lines": "engine.launcher",
    "VllmLauncher": "engine.local",
    "PatchedConfig": "engine.patched.config",
    "PatchedLauncher": "engine.patched.launch",
    "PatchedOptions": "engine.patched.launch",
    "resolve_model": "engine.patched.launch",
    "SimConfig": "engine.sim.config",
    "SimLauncher": "engine.simproc",
    "EngineSpec": "engine.spec",
    "parse_spec": "engine.spec",
    "build_tiny_model": "engine.tinymodel",
}

__all__ = [
    "AttachLauncher",
    "DaemonFacts",
    "DaemonProblem",
    "DockerLauncher",
    "DockerOptions",
    "EngineError",
    "EngineSpec",
    "Launcher",
    "Overlay",
    "PatchedConfig",
    "PatchedLauncher",
    "PatchedOptions",
    "SimConfig",
    "SimLauncher",
    "VllmLauncher",
    "build_tiny_model",
    "daemon_problems",
    "free_port",
    "needs_bridge",
    "parse_spec",
    "probe_daemon",
    "resolve_model",
    "tail_lines",
]

if not TYPE_CHECKING:  # mypy reads the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_face(__name__, _LAZY)
