"""A step cost model fitted on a real engine: features, the fit, and the calibration file.

The twin charges each scheduler step the engine time `CostModel` gives for what the step
scheduled. That model is linear in its five coefficients, so one step is one feature row
(`step_features`) and a set of measured steps (`CostSample`) fits the coefficients by
non-negative least squares (`fit_cost`). A `Calibration` is what a fit (or a published
figure) leaves: the cost model, what an empty step costs, where the numbers came from and how
well they fit. It is saved as JSON; the package ships a few (`load_calibration("NAME")`,
`shipped_calibrations()`). Pure apart from reading and writing that one file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stallkit.contract.errors import is_invalid_json, validation_message
from stallkit.engine.errors import EngineError
from stallkit.engine.sim.config import CostModel

if TYPE_CHECKING:  # numpy only for a fit: a kit reads the twin's settings without it
    import numpy as np

__all__ = [
    "COEFFICIENTS",
    "Calibration",
    "CostSample",
    "FitReport",
    "fit_cost",
    "load_calibration",
    "shipped_calibrations",
    "step_features",
]

#: the CostModel fields a step's features multiply, in feature order
COEFFICIENTS = (
    "step_overhead_s",
    "prefill_per_token_s",
    "prefill_per_token_context_s",
    "decode_per_seq_s",
    "decode_per_context_token_s",
)
#: the package folder the shipped calibrations live in
SHIPPED_DIR = "calibrations"

#: a feature: a count, or a count times a context, never negative
Feature = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Features = tuple[Feature, Feature, Feature, Feature, Feature]


def step_features(prefills: Sequence[tuple[int, int]], decode_contexts: Sequence[int]) -> Features:
    """The feature row of one step, matching `COEFFICIENTS`: `CostModel.step_s` is its dot
    product with the coefficients.

    `prefills` are the step's prefill chunks as (new tokens, cached context before them),
    `decode_contexts` the context of each sequence it decodes. An empty step is all zeros.
    """
    if not prefills and not decode_contexts:
        return (0.0, 0.0, 0.0, 0.0, 0.0)
    tokens = sum(t for t, _ in prefills)
    token_context = sum(t * (c + t / 2) for t, c in prefills)
    return (
        1.0,
        float(tokens),
        token_context,
        float(len(decode_contexts)),
        float(sum(decode_contexts)),
    )


class CostSample(BaseModel):
    """One measured step: its features and the engine seconds it took."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    features: Features = Field(description="The step's feature row (`step_features`).")
    seconds: float = Field(gt=0, allow_inf_nan=False, description="Measured engine seconds.")
    label: str = Field("", description="What was measured, e.g. `prefill 128` or `decode 2x200`.")

    @classmethod
    def of(
        cls,
        prefills: Sequence[tuple[int, int]],
        decode_contexts: Sequence[int],
        seconds: float,
        label: str = "",
    ) -> CostSample:
        """The sample of a step with these prefill chunks and decode contexts."""
        return cls(features=step_features(prefills, decode_contexts), seconds=seconds, label=label)

    def predicted_s(self, cost: CostModel) -> float:
        """The seconds `cost` predicts for this sample's steps."""
        pairs = zip(self.features, COEFFICIENTS, strict=True)
        return math.fsum(f * getattr(cost, name) for f, name in pairs)

    @classmethod
    def of_steps(
        cls,
        steps: Sequence[tuple[Sequence[tuple[int, int]], Sequence[int]]],
        seconds: float,
        label: str = "",
    ) -> CostSample:
        """The sample of several steps measured together (a prompt prefilled in chunks): the
        cost is linear, so their total time is the sum of their rows times the coefficients."""
        rows = [step_features(prefills, decodes) for prefills, decodes in steps]
        a, b, c, d, e = (math.fsum(column) for column in zip(*rows, strict=True))
        return cls(features=(a, b, c, d, e), seconds=seconds, label=label)


class FitReport(BaseModel):
    """How well a fitted cost model predicts the samples it was fitted on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples: int = Field(gt=0, description="Samples fitted.")
    rmse_s: float = Field(ge=0, description="Root-mean-square error of the predictions, seconds.")
    max_relative_error: float = Field(
        ge=0, description="Largest |predicted - measured| / measured over the samples."
    )
    r_squared: float = Field(description="Coefficient of determination (1 = perfect).")


class Calibration(BaseModel):
    """A step cost model for one engine, with where its numbers came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cost: CostModel = Field(description="Engine seconds of a non-empty step.")
    empty_step_s: float = Field(
        gt=0,
        allow_inf_nan=False,
        description="Engine seconds of a step that schedules nothing (the engine loop's own "
        "cost). Above 0, or a livelock would never let engine time advance.",
    )
    source: str = Field(min_length=1, description="Where the numbers came from.")
    engine: str = Field(min_length=1, description="What was calibrated (model, build, sizes).")
    fit: FitReport | None = Field(
        None, description="The fit's error on its samples; None when not fitted from samples."
    )
    notes: list[str] = Field(default_factory=list, description="Each assumption and its origin.")

    def save(self, path: Path) -> None:
        """Write the calibration as indented JSON (a temporary file, then a rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)


def fit_cost(
    samples: Sequence[CostSample],
    *,
    empty_step_s: float,
    source: str,
    engine: str,
    notes: Sequence[str] = (),
) -> Calibration:
    """Fit the cost model's five coefficients to measured steps; the calibration with its error.

    Non-negative least squares (`scipy.optimize.nnls`): every coefficient is a cost, and an
    unconstrained fit on noisy timings happily trades a negative per-token term against a
    large overhead, which predicts negative or shrinking step times outside the measured
    range (a twin would then run long steps for free). The residuals are relative (each row
    is divided by its measured time), so a 5 ms decode step counts as much as a 500 ms
    prefill; columns are scaled to unit norm before solving, since token-times-context
    features are ~10^8 times the overhead's. `restore_per_block_s` is not fitted (the
    simulator's default is kept). Raises EngineError when the samples cannot determine all
    five coefficients.
    """
    import numpy as np
    from scipy.optimize import nnls  # a second of imports that only a fit needs

    features, seconds = _matrix(samples)
    weighted = features / seconds[:, None]
    scale = np.linalg.norm(weighted, axis=0)
    solution, _ = nnls(weighted / scale, np.ones_like(seconds))
    coefficients = solution / scale
    cost = CostModel(**dict(zip(COEFFICIENTS, map(float, coefficients), strict=True)))
    return Calibration(
        cost=cost,
        empty_step_s=empty_step_s,
        source=source,
        engine=engine,
        fit=_report(features @ coefficients, seconds),
        notes=list(notes),
    )


def _matrix(samples: Sequence[CostSample]) -> tuple[np.ndarray, np.ndarray]:
    if len(samples) < len(COEFFICIENTS):
        raise EngineError(
            f"{len(samples)} samples cannot fit {len(COEFFICIENTS)} coefficients",
            "measure prefills of several lengths and decode batches of several sizes",
        )
    import numpy as np

    features = np.array([s.features for s in samples], dtype=float)
    seconds = np.array([s.seconds for s in samples], dtype=float)
    if np.linalg.matrix_rank(features) < len(COEFFICIENTS):
        raise EngineError(
            "the samples do not determine all five coefficients (their features are dependent)",
            "vary prefill length and context, decode batch size and decode context",
        )
    return features, seconds


def _report(predicted: np.ndarray, seconds: np.ndarray) -> FitReport:
    import numpy as np

    residual = predicted - seconds
    total = float(np.sum((seconds - seconds.mean()) ** 2))
    r_squared = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 1.0
    return FitReport(
        samples=len(seconds),
        rmse_s=math.sqrt(float(np.mean(residual**2))),
        max_relative_error=float(np.max(np.abs(residual) / seconds)),
        r_squared=r_squared,
    )


def shipped_calibrations() -> list[str]:
    """The names of the calibrations shipped in the package, sorted."""
    folder = resources.files("stallkit.engine").joinpath(SHIPPED_DIR)
    if not folder.is_dir():
        return []
    return sorted(
        entry.name.removesuffix(".json")
        for entry in folder.iterdir()
        if entry.is_file() and entry.name.endswith(".json")
    )


def _is_name(name_or_path: str | Path) -> bool:
    text = str(name_or_path)
    return not isinstance(name_or_path, Path) and "/" not in text and not text.endswith(".json")


def load_calibration(name_or_path: str | Path) -> Calibration:
    """A shipped calibration by its bare name (`seed-gpu-tp2`), or the file at a path.

    Raises EngineError naming the shipped calibrations when the file is missing or bad.
    """
    shipped = ", ".join(shipped_calibrations()) or "none"
    hint = (
        f"shipped calibrations: {shipped}; or give the path of a file `kit engine calibrate` wrote"
    )
    entry: Traversable
    if _is_name(name_or_path):
        entry = resources.files("stallkit.engine").joinpath(SHIPPED_DIR, f"{name_or_path}.json")
        where = f"calibration {name_or_path!r}"
    else:
        entry = Path(name_or_path)
        where = str(entry)
    try:
        text = entry.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise EngineError(f"{where} is a directory, not a calibration file", hint) from None
    except (FileNotFoundError, NotADirectoryError):
        raise EngineError(f"no {where}", hint) from None
    except UnicodeDecodeError:
        raise EngineError(f"{where} is not a text (JSON) file", hint) from None
    except OSError as exc:
        raise EngineError(f"cannot read {where}: {exc.strerror or exc}", hint) from None
    try:
        return Calibration.model_validate_json(text)
    except ValidationError as exc:
        if is_invalid_json(exc):
            raise EngineError(f"{where} is not valid JSON", hint) from None
        raise EngineError(f"{where}: {validation_message(exc, default='')}", hint) from None
