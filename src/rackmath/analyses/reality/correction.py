"""The end-to-end correction on top of the kernel-grounded model: a few framework and
scheduler parameters, pooled over every chip, fitted on published rows and scored
leave-one-source-out.

The kernel-grounded operator times (:mod:`rackmath.analyses.kernels.tables`) come from
kernel latency tables that exclude what a serving framework adds around the kernels. The
correction names those costs, and nothing else (no per-chip or per-row scalar):

* ``overhead_prefill_s_per_pass``: fixed host time per prefill pass (request admission,
  scheduling, the hand-off before the first kernel), seconds; it is what a batch-1 TTFT of a
  few hundred tokens shows beside its few milliseconds of kernels;
* ``overhead_decode_s_per_sequence``: host time per running sequence per decode step
  (sampling, stop checks, detokenization, KV block bookkeeping), seconds; it vanishes at
  batch 1 (where graph-captured decoders match the kernels) and grows with the batch;
* ``concurrency_frac``: the share of the KV-limited concurrency a continuous-batching
  scheduler keeps running in a maximum-throughput run
  (:func:`rackmath.core.reality.scheduled_concurrency`).

Every parameter is shared by all chips and models: the correction may not learn a chip.
Procedure (:func:`fit_correction`): coordinate search with diagonal moves
(:func:`rackmath.core.reality.coordinate_search`) over the fixed grids :data:`GRIDS` from the
uncorrected kernel-grounded model, minimizing ``sum_rows ln(predicted / measured)^2`` (an
unpredictable row costs :data:`~rackmath.analyses.reality.validation.INFEASIBLE_LOG_ERROR`
squared).
:func:`correction_loso` refits once per publishing document without its rows and predicts
only those rows, so no source is scored by a fit that saw it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rackmath.analyses.reality.validation import (
    Calibration,
    FamilyParams,
    Prediction,
    predict,
    squared_log_errors,
)
from rackmath.core import reality
from rackmath.progress import progress
from rackmath.specs.scenario import Scenario

#: The uncorrected kernel-grounded model: fitted kernel curves, nothing end-to-end.
KERNEL = Calibration()
#: Search grids, in the order the search visits them; each starts at "no correction".
GRIDS: dict[str, tuple[float, ...]] = {
    "overhead_prefill_s_per_pass": (0.0, *np.round(np.geomspace(1e-4, 1e-1, 10), 6)),
    "overhead_decode_s_per_sequence": (0.0, *np.round(np.geomspace(1e-6, 1e-3, 10), 8)),
    "concurrency_frac": tuple(np.round(np.linspace(0.4, 1.0, 13), 3)),
}
#: Where the search starts: no correction (the kernel-grounded model as it stands).
START: dict[str, float] = {
    "overhead_prefill_s_per_pass": 0.0,
    "overhead_decode_s_per_sequence": 0.0,
    "concurrency_frac": 1.0,
}
SWEEPS = 2


def corrected(
    point: Mapping[str, float], note: str = "kernel-grounded + end-to-end correction"
) -> Calibration:
    """The kernel-grounded model with the correction ``point`` (pooled over every chip)."""
    return Calibration(pooled=FamilyParams(**dict[str, Any](point)), note=note)


def fit_correction(scenarios: Sequence[Scenario], note: str = "fitted on all expressed rows") -> Calibration:
    """The correction fitted on exactly ``scenarios`` (procedure in the module docstring)."""
    rows = list(scenarios)

    def objective(point: dict[str, float]) -> float:
        return squared_log_errors(rows, corrected(point))

    point = reality.coordinate_search(objective, START, GRIDS, sweeps=SWEEPS, diagonal=True)
    c = corrected(point, f"kernel-grounded + end-to-end correction, {note}")
    return Calibration(pooled=c.pooled, fitted_on=tuple(sorted(s.row_id for s in rows)), note=c.note)


@dataclass(frozen=True)
class CorrectionLoso:
    """Per source, the correction fitted without it, and its rows predicted by that fit."""

    predictions: dict[int, Prediction]
    fits: dict[str, Calibration]


def correction_loso(scenarios: Sequence[Scenario]) -> CorrectionLoso:
    rows = list(scenarios)
    keys = sorted({s.source_key for s in rows})
    predictions: dict[int, Prediction] = {}
    fits: dict[str, Calibration] = {}
    with progress("Correction, leave-one-source-out", total=len(keys)) as advance:
        for key in keys:
            fit = fit_correction([s for s in rows if s.source_key != key], f"without source {key}")
            fits[key] = fit
            for s in rows:
                if s.source_key == key:
                    predictions[s.row_id] = predict(s, fit)
            advance(1)
    return CorrectionLoso(predictions, fits)


def correction_parameters(c: Calibration) -> dict[str, float]:
    """The fitted correction's parameters (what docs/calibration.md reports)."""
    return {k: float(getattr(c.pooled, k)) for k in GRIDS}
