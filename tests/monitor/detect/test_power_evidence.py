"""Power draw and SM activity as a stall's evidence, on scripted readings with fake times:
a GPU whose utilisation gauge reads busy with its SMs active is a busy hang, one that reads
busy with its SMs idle is frozen; both stalls carry the readings. The DCGM page parses them,
and the simulator's page serves them beside its utilisation."""

from __future__ import annotations

from stallkit.contract.timeline import StallEvidence
from stallkit.engine.serve.metrics import DCGM_BUSY_W, DCGM_IDLE_W, SimMetrics
from stallkit.engine.sim.config import SimConfig
from stallkit.monitor.config import MonitorConfig
from stallkit.monitor.detect.detector import StallDetector
from stallkit.monitor.detect.events import DetectorEvent, StallStarted
from stallkit.monitor.signals.activity import GpuActivity, parse_dcgm_activity
from stallkit.monitor.signals.gpu import parse_dcgm
from tests.monitor.detect.test_detector import busy_then_stuck

CFG = MonitorConfig(stall_after_s=10, stop_after_s=30, gpu_window_s=1)
BUSY = {"0": 100.0, "1": 100.0}


def _started(activity: GpuActivity | None) -> StallStarted:
    det = StallDetector(CFG, gpu_checked=True)
    events: list[DetectorEvent] = []
    for t, snapshot in busy_then_stuck(stop_at=5, until=20):
        events += det.observe(t, snapshot, BUSY, activity=activity)
    [started] = [e for e in events if isinstance(e, StallStarted)]
    return started


def test_busy_gauge_with_active_sms_at_full_power_is_a_busy_hang() -> None:
    spinning = GpuActivity({"0": 310.0, "1": 305.0}, {"0": 0.92, "1": 0.9})
    started = _started(spinning)
    assert started.kind == "busy_hang"
    assert started.evidence == StallEvidence(
        power_w={"0": 310.0, "1": 305.0}, sm_active={"0": 0.92, "1": 0.9}
    )
    assert started.evidence.words() == "power 0:310 W 1:305 W; SM active 0:92% 1:90%"


def test_busy_gauge_with_idle_sms_at_idle_power_is_frozen() -> None:
    idle = GpuActivity({"0": 61.0, "1": 60.0}, {"0": 0.0, "1": 0.01})
    started = _started(idle)
    assert started.kind == "frozen"
    assert started.evidence is not None and started.evidence.power_w == {"0": 61.0, "1": 60.0}


def test_one_gpu_with_active_sms_keeps_it_a_busy_hang_and_power_alone_decides_nothing() -> None:
    assert _started(GpuActivity({}, {"0": 0.0, "1": 0.6})).kind == "busy_hang"
    power_only = _started(GpuActivity({"0": 60.0, "1": 60.0}, {}))
    assert power_only.kind == "busy_hang"  # idle power differs by GPU model: evidence only
    assert power_only.evidence == StallEvidence(power_w={"0": 60.0, "1": 60.0})
    # without the readings, the gauge alone decides, as before, with no evidence
    plain = _started(None)
    assert plain.kind == "busy_hang" and plain.evidence is None


DCGM_PAGE = """\
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="NVIDIA H100"} 100
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",modelName="NVIDIA H100"} 100
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100"} 71.254
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",modelName="NVIDIA H100"} 70.5
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100"} 0.000
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-b",modelName="NVIDIA H100"} 0.002
"""


def test_a_dcgm_page_gives_power_and_sm_activity_beside_utilisation() -> None:
    activity = parse_dcgm_activity(DCGM_PAGE)
    assert activity.power_w == {"0": 71.254, "1": 70.5}
    assert activity.sm_active == {"0": 0.0, "1": 0.002} and activity.sms_idle
    assert parse_dcgm(DCGM_PAGE) == BUSY
    # an exporter without them (profiling metrics off): no activity, not zeros
    only_util = "\n".join(DCGM_PAGE.splitlines()[:3]) + "\n"
    assert not parse_dcgm_activity(only_util)


def test_the_simulators_dcgm_page_serves_power_and_sm_activity() -> None:
    """Busy for the last engine second: full power, SMs active; then idle: idle power."""
    metrics = SimMetrics(SimConfig(num_gpus=2), time_scale=1.0)
    metrics.busy.add(9.0, 10.0)
    busy = metrics.render_dcgm(10.0).decode()
    assert parse_dcgm(busy) == BUSY
    assert parse_dcgm_activity(busy) == GpuActivity(
        {"0": DCGM_BUSY_W, "1": DCGM_BUSY_W}, {"0": 1.0, "1": 1.0}
    )
    idle = parse_dcgm_activity(metrics.render_dcgm(20.0).decode())
    assert idle.power_w == {"0": DCGM_IDLE_W, "1": DCGM_IDLE_W} and idle.sms_idle
