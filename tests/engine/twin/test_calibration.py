"""The calibration model: step features, the non-negative fit and its error, the JSON file."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from stallkit.engine.errors import EngineError
from stallkit.engine.sim.config import CostModel
from stallkit.engine.twin.calibration import (
    COEFFICIENTS,
    Calibration,
    CostSample,
    fit_cost,
    load_calibration,
    shipped_calibrations,
    step_features,
)

TRUE = CostModel(
    step_overhead_s=0.003,
    prefill_per_token_s=1.5e-4,
    prefill_per_token_context_s=4e-9,
    decode_per_seq_s=9e-4,
    decode_per_context_token_s=2e-8,
)
STEPS: list[tuple[list[tuple[int, int]], list[int]]] = [
    *(([(tokens, 0)], []) for tokens in (16, 64, 256, 1024, 4096)),
    *(([(tokens, context)], []) for tokens, context in ((512, 2048), (1024, 8192), (2048, 30000))),
    *(([], [context] * n) for n in (1, 2, 4, 8) for context in (100, 4000, 50000)),
    ([(256, 1000)], [3000, 3000]),  # a mixed step
]


def _dot(features: tuple[float, ...], cost: CostModel) -> float:
    return sum(f * getattr(cost, name) for f, name in zip(features, COEFFICIENTS, strict=True))


def _fit(samples: list[CostSample]) -> Calibration:
    return fit_cost(samples, empty_step_s=0.002, source="synthetic", engine="test")


def _samples(noise: float = 0.0, seed: int = 0) -> list[CostSample]:
    rng = random.Random(seed)
    return [
        CostSample.of(prefills, decodes, TRUE.step_s(prefills, decodes) * (1 + rng.gauss(0, noise)))
        for prefills, decodes in STEPS
    ]


@pytest.mark.parametrize(
    ("prefills", "decodes"),
    [([], [7]), ([(100, 0)], []), ([(100, 50), (30, 900)], [10, 20, 30]), ([], [])],
)
def test_step_s_is_the_dot_product_of_features_and_coefficients(prefills, decodes) -> None:
    features = step_features(prefills, decodes)
    assert TRUE.step_s(prefills, decodes) == pytest.approx(_dot(features, TRUE), rel=1e-12)
    if prefills:  # and it is the cost model's own prefill and decode terms
        expected = TRUE.step_overhead_s + TRUE.decode_s(len(decodes), sum(decodes))
        expected += sum(TRUE.prefill_s(t, c) for t, c in prefills)
        assert TRUE.step_s(prefills, decodes) == pytest.approx(expected, rel=1e-12)


def test_an_empty_step_has_no_features_and_costs_nothing_here() -> None:
    assert step_features([], []) == (0.0, 0.0, 0.0, 0.0, 0.0)
    assert TRUE.step_s([], []) == 0.0


def test_the_fit_recovers_exact_coefficients() -> None:
    calibration = _fit(_samples())
    for name in COEFFICIENTS:
        assert getattr(calibration.cost, name) == pytest.approx(getattr(TRUE, name), rel=1e-6)
    fit = calibration.fit
    assert fit is not None
    assert fit.samples == len(STEPS)
    assert fit.rmse_s < 1e-9 and fit.max_relative_error < 1e-6
    assert fit.r_squared == pytest.approx(1.0, abs=1e-9)


def test_the_fit_recovers_coefficients_from_noisy_samples() -> None:
    calibration = _fit([s for seed in (3, 4, 5) for s in _samples(noise=0.02, seed=seed)])
    for name in COEFFICIENTS:
        assert getattr(calibration.cost, name) == pytest.approx(getattr(TRUE, name), rel=0.2), name
    for prefills, decodes in [([(3000, 5000)], []), ([], [20000] * 6), ([(128, 0)], [900])]:
        predicted = calibration.cost.step_s(prefills, decodes)
        assert predicted == pytest.approx(TRUE.step_s(prefills, decodes), rel=0.03)
    assert calibration.fit is not None and calibration.fit.r_squared > 0.99


def test_the_fit_report_is_the_error_of_the_fitted_model_on_its_samples() -> None:
    samples = _samples(noise=0.05, seed=1)
    calibration = _fit(samples)
    predicted = [_dot(s.features, calibration.cost) for s in samples]
    assert [s.predicted_s(calibration.cost) for s in samples] == pytest.approx(predicted)
    errors = [p - s.seconds for p, s in zip(predicted, samples, strict=True)]
    mean = statistics.fmean(s.seconds for s in samples)
    total = sum((s.seconds - mean) ** 2 for s in samples)
    fit = calibration.fit
    assert fit is not None
    assert fit.samples == len(samples)
    assert fit.rmse_s == pytest.approx(math.sqrt(statistics.fmean(e * e for e in errors)))
    worst = max(abs(e) / s.seconds for e, s in zip(errors, samples, strict=True))
    assert fit.max_relative_error == pytest.approx(worst)
    assert fit.r_squared == pytest.approx(1 - sum(e * e for e in errors) / total)
    assert 0.02 < fit.max_relative_error < 0.3


def test_no_coefficient_is_negative_even_when_the_data_would_like_one() -> None:
    # decode steps that get faster with context: least squares would make the context term < 0
    samples = _samples()[:8] + [
        CostSample.of([], [context] * n, 0.004 + n * 1e-3 - context * 1e-9)
        for n in (1, 2, 4)
        for context in (100, 20000, 60000)
    ]
    cost = _fit(samples).cost
    assert all(getattr(cost, name) >= 0 for name in COEFFICIENTS)
    assert cost.decode_per_context_token_s == 0.0


def test_too_few_or_dependent_samples_are_refused() -> None:
    with pytest.raises(EngineError, match="4 samples cannot fit 5"):
        _fit(_samples()[:4])
    only_decode = [CostSample.of([], [c] * n, 0.01 * n) for n in (1, 2, 4) for c in (10, 900)]
    with pytest.raises(EngineError, match="do not determine") as info:
        _fit(only_decode)
    assert "prefill" in info.value.hint


def test_a_sample_takes_no_negative_or_non_finite_numbers() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        CostSample(features=(1, -5, 0, 0, 0), seconds=0.1)
    with pytest.raises(ValueError, match="finite"):
        CostSample(features=(1, 5, math.nan, 0, 0), seconds=0.1)
    with pytest.raises(ValueError, match="greater than 0"):
        CostSample.of([(5, 0)], [], 0.0)


def test_a_calibration_round_trips_through_its_file(tmp_path: Path) -> None:
    calibration = _fit(_samples(noise=0.01))
    calibration = calibration.model_copy(update={"notes": ["from a test"]})
    path = tmp_path / "deep" / "model.json"
    calibration.save(path)
    assert load_calibration(path) == calibration
    assert load_calibration(str(path)) == calibration
    assert not list(path.parent.glob("*.tmp"))


def test_an_empty_step_must_cost_something() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        Calibration(cost=TRUE, empty_step_s=0, source="s", engine="e")


def test_the_shipped_calibrations_load_and_validate() -> None:
    names = shipped_calibrations()
    assert {"seed-gpu-tp2", "tiny-vllm-cpu"} <= set(names)
    for name in names:
        calibration = load_calibration(name)
        assert calibration.empty_step_s > 0
        assert calibration.source and calibration.notes
    seed = load_calibration("seed-gpu-tp2").cost
    # the published figures: 4 sequences at 421 tok/s at 40K context, 313 tok/s at 100K
    assert 4 / seed.step_s([], [40_000] * 4) == pytest.approx(421, abs=0.01)
    assert 4 / seed.step_s([], [100_000] * 4) == pytest.approx(313, abs=0.01)


def test_the_tiny_cpu_calibration_is_a_fit_on_the_cpu_patched_sizes() -> None:
    tiny = load_calibration("tiny-vllm-cpu")
    assert tiny.fit is not None and tiny.fit.samples >= 10
    assert "--max-model-len 256" in tiny.engine and "--max-num-seqs 2" in tiny.engine
    # a step of the tiny model on CPU takes milliseconds, a 200-token prefill a few more
    assert 0.5e-3 < tiny.cost.step_s([], [100, 100]) < 20e-3
    assert tiny.cost.step_s([(200, 0)], []) > tiny.cost.step_s([], [100, 100])


def test_a_missing_calibration_names_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no calibration 'nope'") as info:
        load_calibration("nope")
    assert "seed-gpu-tp2" in info.value.hint
    with pytest.raises(EngineError, match=r"no .*absent\.json"):
        load_calibration(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", "not valid JSON"),
        ('{"empty_step_s": 0.1, "source": "s", "engine": "e"}', "cost: Field required"),
        (
            '{"cost": {}, "empty_step_s": 0.1, "source": "s", "engine": "e", "extra": 1}',
            "extra: unknown key",
        ),
        ('{"cost": {}, "empty_step_s": -1, "source": "s", "engine": "e"}', "empty_step_s"),
    ],
)
def test_a_bad_calibration_file_is_one_line(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(EngineError, match=words) as info:
        load_calibration(path)
    assert "seed-gpu-tp2" in info.value.hint
