"""Start, watch and stop inference engines: docker images, local vLLM, the embedded simulator.

The names below are the package's public face, for the orchestration: engine specs, the
launchers and their options, the simulator's and the patched scheduler's settings, the step
cost model and its calibrations. Each is imported from its module on first use, so `import
engine` itself imports nothing (vLLM's engine core imports this package on its way to
`engine.patched.scheduler`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from engine.attach import AttachLauncher as AttachLauncher
    from engine.calibration import Calibration as Calibration
    from engine.calibration import CostSample as CostSample
    from engine.calibration import FitReport as FitReport
    from engine.calibration import fit_cost as fit_cost
    from engine.calibration import load_calibration as load_calibration
    from engine.calibration import shipped_calibrations as shipped_calibrations
    from engine.calibration import step_features as step_features
    from engine.conformance import ConformanceReport as ConformanceReport
    from engine.conformance import ConformanceRequest as ConformanceRequest
    from engine.conformance import default_out_dir as default_out_dir
    from engine.conformance import parse_additional_config as parse_additional_config
    from engine.conformance import run_conformance as run_conformance
    from engine.conformance_view import conformance_lines as conformance_lines
    from engine.core import EngineCore as EngineCore
    from engine.core import EngineStats as EngineStats
    from engine.daemon import DaemonFacts as DaemonFacts
    from engine.daemon import DaemonProblem as DaemonProblem
    from engine.daemon import daemon_error as daemon_error
    from engine.daemon import daemon_problems as daemon_problems
    from engine.daemon import needs_bridge as needs_bridge
    from engine.daemon import probe_daemon as probe_daemon
    from engine.docker import DockerLauncher as DockerLauncher
    from engine.docker import DockerOptions as DockerOptions
    from engine.docker import Overlay as Overlay
    from engine.emptystep import time_empty_step as time_empty_step
    from engine.errors import EngineError as EngineError
    from engine.launcher import Launcher as Launcher
    from engine.launcher import check_listening as check_listening
    from engine.launcher import free_port as free_port
    from engine.launcher import tail_lines as tail_lines
    from engine.local import VllmLauncher as VllmLauncher
    from engine.local import check_local_vllm as check_local_vllm
    from engine.patched.config import PatchedConfig as PatchedConfig
    from engine.patched.launch import PatchedLauncher as PatchedLauncher
    from engine.patched.launch import PatchedOptions as PatchedOptions
    from engine.patched.launch import resolve_model as resolve_model
    from engine.sim.config import CostModel as CostModel
    from engine.sim.config import Fault as Fault
    from engine.sim.config import SimConfig as SimConfig
    from engine.sim.core import SimEngine as SimEngine
    from engine.sim.faults import FaultyCore as FaultyCore
    from engine.sim.faults import parse_fault as parse_fault
    from engine.sim.faults import with_fault as with_fault
    from engine.sim.metrics import FINISH_REASONS as FINISH_REASONS
    from engine.sim.trace import TraceStep as TraceStep
    from engine.sim.trace import trace_steps as trace_steps
    from engine.simproc import SimLauncher as SimLauncher
    from engine.simproc import dump_toml as dump_toml
    from engine.spec import DockerSpec as DockerSpec
    from engine.spec import EngineSpec as EngineSpec
    from engine.spec import PatchedSpec as PatchedSpec
    from engine.spec import SimSpec as SimSpec
    from engine.spec import TwinSpec as TwinSpec
    from engine.spec import UrlSpec as UrlSpec
    from engine.spec import VllmSpec as VllmSpec
    from engine.spec import parse_spec as parse_spec
    from engine.tinymodel import build_tiny_model as build_tiny_model
    from engine.twin.build import VLLM_MISSING as VLLM_MISSING
    from engine.twin.build import quiet_vllm_logging as quiet_vllm_logging
    from engine.twin.build import vllm_importable as vllm_importable
    from engine.twin.config import TwinConfig as TwinConfig
    from engine.twin.config import twin_config_for as twin_config_for
    from engine.twin.config import vllm_sizes as vllm_sizes
    from engine.twin.core import TwinEngine as TwinEngine
    from engine.twin.overlay import install_overlay as install_overlay

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
