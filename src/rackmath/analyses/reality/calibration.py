"""Honest calibration: a few physical parameters per chip family, fitted by a stated
procedure, scored on sources the fit never saw.

The parameters (:class:`~rackmath.analyses.reality.validation.FamilyParams`, per chip family):
achievable fraction of HBM bandwidth; achievable fraction of peak FLOP/s in decode, prefill
and training; a fixed time per decode step and per prefill; the latency of one scale-up
hop; the bandwidth of attention's KV-cache reads relative to the weight reads; the
dequantization cost of weight-only formats in byte-equivalents per weight; the share of
communication a stated two-batch overlap hides. No per-row factor exists, and nothing
reads a row's answer except through the error the fit minimizes.

Procedure (:func:`fit`):

1. **Pooled fit.** One parameter set shared by every family, chosen by coordinate search
   (:func:`rackmath.core.reality.coordinate_search`, fixed grids :data:`GRIDS`, up to
   :data:`SWEEPS` sweeps) to minimize ``sum_rows ln(predicted / measured)^2``. A row the
   model cannot predict (weights do not fit) costs :data:`INFEASIBLE_LOG_ERROR` squared.
2. **Per-family fit.** For each family with rows, the same search starting from the pooled
   set, minimizing its rows' squared log errors plus a shrinkage penalty
   ``SHRINKAGE * sum_k (g(theta_k) - g(pooled_k))^2`` (``g = ln`` for fractions and
   latencies, ``ln(x + t0)`` for overheads) that keeps a family with few rows near the
   pool. Only the chip's own parameters (:data:`FAMILY_PARAMS`) move per family; the
   overheads, hop latency, KV-read bandwidth, dequantization cost and overlap stay pooled
   (few rows show each). A family with no rows uses the pooled set.

:func:`leave_one_source_out` repeats the fit once per publishing document (``source_key``)
with that document's rows removed and predicts only those rows with it, so a number fitted
on a source is never scored on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from rackmath.analyses.reality.report import ValidationReport, build_report
from rackmath.analyses.reality.validation import (
    PURE,
    PURE_ROOFLINE,
    Calibration,
    FamilyParams,
    Prediction,
    predict,
    scenario_family,
    squared_log_errors,
)
from rackmath.catalog.measurements import measurements
from rackmath.core import reality
from rackmath.progress import progress
from rackmath.specs.scenario import Scenario

#: Search grids, one per parameter, in the order the coordinate search visits them. The
#: three last ones start at the pure roofline (1, 0, 1) and move only if rows ask for it.
GRIDS: dict[str, tuple[float, ...]] = {
    "bandwidth_frac": tuple(np.round(np.geomspace(0.35, 1.0, 11), 4)),
    "flops_frac_decode": tuple(np.round(np.geomspace(0.1, 1.0, 11), 4)),
    "flops_frac_prefill": tuple(np.round(np.geomspace(0.1, 1.0, 11), 4)),
    "flops_frac_training": tuple(np.round(np.geomspace(0.25, 1.0, 11), 4)),
    "overhead_decode_s_per_layer": (0.0, *np.round(np.geomspace(1e-6, 1e-4, 9), 9)),
    "overhead_prefill_s_per_layer": (0.0, *np.round(np.geomspace(1e-5, 1e-3, 9), 8)),
    "hop_latency_s": tuple(np.round(np.geomspace(1e-6, 3e-5, 7), 9)),
    "kv_bandwidth_frac": tuple(np.round(np.geomspace(0.25, 1.0, 9), 4)),
    "dequant_bytes_per_weight": (0.0, *np.round(np.geomspace(0.03, 1.0, 10), 4)),
    "two_batch_overlap_frac": tuple(np.round(np.linspace(0.0, 1.0, 11), 2)),
}
#: The parameters a chip family may move away from the pool: the chip's own (memory
#: system and tensor cores). The others stay pooled (few rows show them).
FAMILY_PARAMS = ("bandwidth_frac", "flops_frac_decode", "flops_frac_prefill", "flops_frac_training")
#: Where the search starts: the pure roofline, with NCCL's ~2 us NVLink step latency
#: (the systems catalog's scale-up value for NVIDIA HGX).
START = replace(PURE, hop_latency_s=2.0e-6)
SWEEPS = 2
#: Weight of the pull toward the pooled parameters, in squared log units per parameter:
#: moving a family's parameter a factor e from the pool costs as much as one row missed by
#: a factor e. Fixed in advance, not tuned on the held-out scores.
SHRINKAGE = 1.0
#: Offsets inside the log of the overhead penalty (seconds): below these, overheads are "about zero".
_OVERHEAD_SCALE_S = {"overhead_decode_s_per_layer": 1e-6, "overhead_prefill_s_per_layer": 1e-5}


def _g(name: str, value: float) -> float:
    return float(np.log(value + _OVERHEAD_SCALE_S.get(name, 0.0)))


def _params(point: Mapping[str, float]) -> FamilyParams:
    return replace(PURE, **dict[str, Any](point))


def _point(p: FamilyParams) -> dict[str, float]:
    """The fitted numbers of ``p``; its ``mode`` (the roofline these scalars multiply) stays
    :data:`PURE`'s."""
    return {f.name: float(getattr(p, f.name)) for f in fields(p) if f.name != "mode"}


def fit(
    scenarios: Sequence[Scenario], *, shrinkage: float = SHRINKAGE, note: str = "fitted on all expressed rows"
) -> Calibration:
    """The two-stage fit above, on exactly ``scenarios``."""
    rows = list(scenarios)

    def pooled_objective(point: dict[str, float]) -> float:
        return squared_log_errors(rows, Calibration(pooled=_params(point)))

    by_family: dict[str, list[Scenario]] = defaultdict(list)
    for s in rows:
        by_family[scenario_family(s)].append(s)
    families = []
    with progress("Calibrating", total=1 + len(by_family)) as advance:
        pooled = _params(reality.coordinate_search(pooled_objective, _point(START), GRIDS, sweeps=SWEEPS))
        advance(1)
        base = _point(pooled)
        for family in sorted(by_family):
            members = by_family[family]

            def objective(point: dict[str, float], members: list[Scenario] = members) -> float:
                penalty = sum((_g(k, point[k]) - _g(k, base[k])) ** 2 for k in FAMILY_PARAMS)
                return squared_log_errors(members, Calibration(pooled=_params(point))) + shrinkage * penalty

            grids = {k: GRIDS[k] for k in FAMILY_PARAMS}
            families.append(
                (family, _params(reality.coordinate_search(objective, base, grids, sweeps=SWEEPS)))
            )
            advance(1)
    return Calibration(
        pooled=pooled,
        families=tuple(families),
        fitted_on=tuple(sorted(s.row_id for s in rows)),
        note=note,
    )


@dataclass(frozen=True)
class LosoResult:
    """Leave-one-source-out: per source, the calibration fitted without it and its rows'
    predictions by that calibration."""

    predictions: dict[int, Prediction]
    fits: dict[str, Calibration]
    held_out: dict[str, tuple[int, ...]]  # source_key -> row ids predicted by fits[source_key]


def leave_one_source_out(scenarios: Sequence[Scenario], *, shrinkage: float = SHRINKAGE) -> LosoResult:
    rows = list(scenarios)
    keys = sorted({s.source_key for s in rows})
    predictions: dict[int, Prediction] = {}
    fits: dict[str, Calibration] = {}
    held: dict[str, tuple[int, ...]] = {}
    with progress("Leave-one-source-out", total=len(keys)) as advance:
        for key in keys:
            train = [s for s in rows if s.source_key != key]
            test = [s for s in rows if s.source_key == key]
            calibration = fit(train, shrinkage=shrinkage, note=f"fitted without source {key}")
            fits[key] = calibration
            held[key] = tuple(s.row_id for s in test)
            for s in test:
                predictions[s.row_id] = predict(s, calibration)
            advance(1)
    return LosoResult(predictions, fits, held)


@dataclass(frozen=True)
class CalibrationReport:
    """The fitted parameters, and the errors they give in-sample and out of source."""

    calibration: Calibration
    loso: LosoResult
    report: ValidationReport
    excluded_sources: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        r = self.report
        return {
            "procedure": "two-stage coordinate search on squared log error (pooled, then per chip family "
            f"with shrinkage {SHRINKAGE}); leave-one-source-out by source_key",
            "excluded_sources": list(self.excluded_sources),
            "calibration": self.calibration.to_dict(),
            "grids": {k: list(v) for k, v in GRIDS.items()},
            "roofline": r.stats("roofline").to_dict(),
            "calibrated_in_sample": r.stats("calibrated").to_dict(),
            "leave_one_source_out": r.stats("loso").to_dict(),
            "loso_by_source": {
                key: {
                    "row_ids": list(ids),
                    **r.stats("loso", {"source_key": key}).to_dict(),
                }
                for key, ids in self.loso.held_out.items()
            },
            "loso_by_phase": {g: r.stats("loso", {"phase": g}).to_dict() for g in r.group_names("phase")},
        }


def calibrate(exclude_sources: Sequence[str] = ()) -> CalibrationReport:
    """Fit on every expressed row except the excluded sources' and report in-sample and
    leave-one-source-out errors on that subset."""
    data = measurements()
    known = {s.source_key for s in data.scenarios}
    from rackmath.errors import UnknownIdError

    for key in exclude_sources:
        if key not in known:
            raise UnknownIdError("source", key, known)
    rows = tuple(s for s in data.scenarios if s.source_key not in set(exclude_sources))
    fitted = fit(
        rows,
        note="fitted on all expressed rows"
        + (f" except {', '.join(exclude_sources)}" if exclude_sources else ""),
    )
    loso = leave_one_source_out(rows)
    columns = {
        "roofline": {s.row_id: predict(s, PURE_ROOFLINE) for s in rows},
        "calibrated": {s.row_id: predict(s, fitted) for s in rows},
        "loso": loso.predictions,
    }
    report = build_report(rows, data.unsupported, columns, fitted)
    return CalibrationReport(fitted, loso, report, tuple(exclude_sources))
