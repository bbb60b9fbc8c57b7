"""Start, watch and stop inference engines: docker images, local vLLM, the embedded simulator.

The names below are the package's public face, for the orchestration: engine specs, the
launchers and their options, the simulator's and the patched scheduler's settings, the step
cost model and its calibrations. Each is imported from its module on first use, so `import
stallkit.engine` itself imports nothing (vLLM's engine core imports this package on its way to
`stallkit.engine.vllm_plugin.scheduler`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stallkit.contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from stallkit.engine.cache import cache_root as cache_root
    from stallkit.engine.conformance.run import ConformanceReport as ConformanceReport
    from stallkit.engine.conformance.run import ConformanceRequest as ConformanceRequest
    from stallkit.engine.conformance.run import default_out_dir as default_out_dir
    from stallkit.engine.conformance.run import parse_additional_config as parse_additional_config
    from stallkit.engine.conformance.run import run_conformance as run_conformance
    from stallkit.engine.conformance.table import conformance_lines as conformance_lines
    from stallkit.engine.core.protocol import EngineCore as EngineCore
    from stallkit.engine.core.protocol import EngineStats as EngineStats
    from stallkit.engine.errors import EngineError as EngineError
    from stallkit.engine.install import VLLM_MISSING as VLLM_MISSING
    from stallkit.engine.launch.attach import AttachLauncher as AttachLauncher
    from stallkit.engine.launch.base import Launcher as Launcher
    from stallkit.engine.launch.base import check_listening as check_listening
    from stallkit.engine.launch.base import free_port as free_port
    from stallkit.engine.launch.base import reset_prefix_cache as reset_prefix_cache
    from stallkit.engine.launch.base import tail_lines as tail_lines
    from stallkit.engine.launch.daemon import DaemonFacts as DaemonFacts
    from stallkit.engine.launch.daemon import DaemonProblem as DaemonProblem
    from stallkit.engine.launch.daemon import daemon_down as daemon_down
    from stallkit.engine.launch.daemon import daemon_error as daemon_error
    from stallkit.engine.launch.daemon import daemon_problems as daemon_problems
    from stallkit.engine.launch.daemon import needs_bridge as needs_bridge
    from stallkit.engine.launch.daemon import probe_daemon as probe_daemon
    from stallkit.engine.launch.docker import DockerLauncher as DockerLauncher
    from stallkit.engine.launch.docker import DockerOptions as DockerOptions
    from stallkit.engine.launch.docker import Overlay as Overlay
    from stallkit.engine.launch.llamacpp.build import LLAMACPP_VERSION as LLAMACPP_VERSION
    from stallkit.engine.launch.llamacpp.build import build_server as build_server
    from stallkit.engine.launch.llamacpp.launcher import LlamacppLauncher as LlamacppLauncher
    from stallkit.engine.launch.llamacpp.launcher import check_llamacpp as check_llamacpp
    from stallkit.engine.launch.llamacpp.model import write_tiny_gguf as write_tiny_gguf
    from stallkit.engine.launch.patched import PatchedLauncher as PatchedLauncher
    from stallkit.engine.launch.patched import PatchedOptions as PatchedOptions
    from stallkit.engine.launch.patched import resolve_model as resolve_model
    from stallkit.engine.launch.sim import SimLauncher as SimLauncher
    from stallkit.engine.launch.sim import dump_toml as dump_toml
    from stallkit.engine.launch.tinymodel import build_tiny_model as build_tiny_model
    from stallkit.engine.launch.vllm import VllmLauncher as VllmLauncher
    from stallkit.engine.launch.vllm import check_local_vllm as check_local_vllm
    from stallkit.engine.policy.controller import POLICIES as POLICIES
    from stallkit.engine.serve.metrics import FINISH_REASONS as FINISH_REASONS
    from stallkit.engine.sim.config import CostModel as CostModel
    from stallkit.engine.sim.config import Fault as Fault
    from stallkit.engine.sim.config import SimConfig as SimConfig
    from stallkit.engine.sim.core import SimEngine as SimEngine
    from stallkit.engine.sim.faults import FaultyCore as FaultyCore
    from stallkit.engine.sim.faults import parse_fault as parse_fault
    from stallkit.engine.sim.faults import with_fault as with_fault
    from stallkit.engine.sim.trace import TraceStep as TraceStep
    from stallkit.engine.sim.trace import trace_steps as trace_steps
    from stallkit.engine.spec import BaseSpec as BaseSpec
    from stallkit.engine.spec import DockerSpec as DockerSpec
    from stallkit.engine.spec import EngineSpec as EngineSpec
    from stallkit.engine.spec import LlamacppSpec as LlamacppSpec
    from stallkit.engine.spec import PatchedSpec as PatchedSpec
    from stallkit.engine.spec import SimSpec as SimSpec
    from stallkit.engine.spec import TwinSpec as TwinSpec
    from stallkit.engine.spec import UrlSpec as UrlSpec
    from stallkit.engine.spec import VllmSpec as VllmSpec
    from stallkit.engine.spec import is_release as is_release
    from stallkit.engine.spec import parse_spec as parse_spec
    from stallkit.engine.spec import register_spec as register_spec
    from stallkit.engine.spec import spec_cases as spec_cases
    from stallkit.engine.spec import spec_forms as spec_forms
    from stallkit.engine.spec import spec_usage as spec_usage
    from stallkit.engine.twin.build import quiet_vllm_logging as quiet_vllm_logging
    from stallkit.engine.twin.build import vllm_importable as vllm_importable
    from stallkit.engine.twin.calibration import Calibration as Calibration
    from stallkit.engine.twin.calibration import CostSample as CostSample
    from stallkit.engine.twin.calibration import FitReport as FitReport
    from stallkit.engine.twin.calibration import fit_cost as fit_cost
    from stallkit.engine.twin.calibration import load_calibration as load_calibration
    from stallkit.engine.twin.calibration import shipped_calibrations as shipped_calibrations
    from stallkit.engine.twin.calibration import step_features as step_features
    from stallkit.engine.twin.config import TwinConfig as TwinConfig
    from stallkit.engine.twin.config import check_no_fault as check_no_fault
    from stallkit.engine.twin.config import twin_config_for as twin_config_for
    from stallkit.engine.twin.config import vllm_sizes as vllm_sizes
    from stallkit.engine.twin.core import TwinEngine as TwinEngine
    from stallkit.engine.twin.emptystep import time_empty_step as time_empty_step
    from stallkit.engine.twin.kv.settings import LMCACHE_INSTALL as LMCACHE_INSTALL
    from stallkit.engine.twin.kv.settings import kv_transfer_from_args as kv_transfer_from_args
    from stallkit.engine.twin.overlay import OVERLAY_PACKAGES as OVERLAY_PACKAGES
    from stallkit.engine.twin.overlay import install_overlay as install_overlay
    from stallkit.engine.twin.release import ENV_SIZE as ENV_SIZE
    from stallkit.engine.twin.release.build import check_release as check_release
    from stallkit.engine.twin.release.build import ensure_env as ensure_env
    from stallkit.engine.twin.release.build import index_releases as index_releases
    from stallkit.engine.twin.release.client import ReleasePool as ReleasePool
    from stallkit.engine.twin.release.env import EnvMarker as EnvMarker
    from stallkit.engine.twin.release.env import ReleaseEnv as ReleaseEnv
    from stallkit.engine.twin.release.env import built_releases as built_releases
    from stallkit.engine.twin.release.env import check_release_here as check_release_here
    from stallkit.engine.vllm_plugin import renamed_plugin_path as renamed_plugin_path
    from stallkit.engine.vllm_plugin.config import PatchedConfig as PatchedConfig

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
