"""The validation report: every published row under four columns, scored overall and by
phase, chip generation, dense vs MoE and source.

Columns (:func:`validate`):

* ``roofline``: the pure roofline (no efficiency at all);
* ``kernel``: kernel-grounded, every operator at its chip's fitted kernel curve
  (:mod:`rackmath.analyses.kernels.tables`), no end-to-end fit;
* ``calibrated``: kernel-grounded plus the end-to-end correction
  (:mod:`rackmath.analyses.reality.correction`: per-prefill and per-sequence host time, scheduler
  occupancy; pooled over every chip) fitted on all rows (in-sample);
* ``loso``: the same correction scored leave-one-source-out (each row predicted by a
  correction fitted without its publishing document).

Errors are ``predicted / measured - 1``; aggregates are the median and 90th percentile of
their absolute values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rackmath.analyses.kernels.tables import describe
from rackmath.analyses.reality.validation import (
    PURE_ROOFLINE,
    Calibration,
    Prediction,
    predict,
    scenario_chip,
    scenario_family,
    scenario_is_moe,
)
from rackmath.catalog.measurements import load_measurements, measurements
from rackmath.core import reality
from rackmath.core.roofline import KERNEL_GROUNDED
from rackmath.frames import Col, Layout, Record, Tabular
from rackmath.specs.scenario import Phase, Scenario, UnsupportedRow

#: The report's columns, in order.
COLUMNS = ("roofline", "kernel", "calibrated", "loso")
#: The groups every column is scored by (JSON key -> group key).
GROUPS = {
    "by_phase": "phase",
    "by_generation": "family",
    "by_architecture": "architecture",
    "by_hardware": "chip",
    "by_source": "source_key",
}


@dataclass(frozen=True)
class RowResult:
    scenario: Scenario
    predictions: tuple[tuple[str, Prediction], ...]  # (column, prediction)

    def column(self, name: str) -> Prediction:
        return dict(self.predictions)[name]

    def error(self, name: str) -> float:
        pred = self.column(name)
        if not pred.ok:
            return float("nan")
        return float(reality.relative_error(pred.value, self.scenario.value))

    def _error_or_nan(self, name: str) -> float:
        return self.error(name) if name in dict(self.predictions) else float("nan")

    @property
    def roofline_error_frac(self) -> float:
        return self._error_or_nan("roofline")

    @property
    def kernel_error_frac(self) -> float:
        return self._error_or_nan("kernel")

    @property
    def calibrated_error_frac(self) -> float:
        return self._error_or_nan("calibrated")

    @property
    def loso_error_frac(self) -> float:
        return self._error_or_nan("loso")

    def to_dict(self) -> dict[str, Any]:
        s = self.scenario
        out: dict[str, Any] = {
            "id": s.row_id,
            "source": s.provenance.source,
            "source_key": s.source_key,
            "url": s.provenance.url,
            "quote": s.provenance.quote,
            "confidence": s.provenance.confidence,
            "phase": s.phase.value,
            "metric": s.metric.value,
            "unit": s.unit,
            "measured": s.value,
            "conversion": s.conversion,
            "chip": scenario_chip(s),
            "family": scenario_family(s),
            "architecture": "moe" if scenario_is_moe(s) else "dense",
            "efficiency": describe(scenario_chip(s), KERNEL_GROUNDED),
        }
        if s.phase is not Phase.TRAINING:
            out.update(
                model=s.model_id,
                system=s.system_id,
                chips=s.chips,
                plan=None if s.plan is None else str(s.plan),
                precisions={
                    "weights": str(s.weights),
                    "kv": str(s.kv),
                    "compute": str(s.compute),
                    **({"weight_classes": dict(s.weight_classes)} if s.weight_classes else {}),
                },
                batch=s.batch,
                input_tokens=s.input_tokens,
                output_tokens=s.output_tokens,
            )
        else:
            out["training_run"] = s.training_run
        for name, pred in self.predictions:
            out[name] = {
                "predicted": pred.value if pred.ok else None,
                "error_frac": None if not pred.ok else self.error(name),
                "path": pred.path,
                "detail": {k: v for k, v in pred.detail},
                "failure": pred.error or None,
            }
        return out


@dataclass(frozen=True)
class GroupStats(Record):
    rows: int
    median_abs_error: float
    p90_abs_error: float


def group_stats(errors: Iterable[float]) -> GroupStats:
    e = np.array([x for x in errors if np.isfinite(x)], float)
    med, p90 = reality.abs_error_quantiles(e)
    return GroupStats(int(e.size), med, p90)


@dataclass(frozen=True)
class ValidationReport(Tabular):
    """Predicted vs measured for every expressed row, under several columns (pure roofline,
    calibrated in-sample, leave-one-source-out), with aggregates overall and per group.
    As a table: one row per expressed measurement, errors as signed fractions."""

    frame_layout = Layout(
        columns=(
            Col("rows[].scenario.row_id", "row_id"),
            Col("rows[].scenario.provenance.source", "source"),
            Col("rows[].scenario.phase", "phase"),
            Col("rows[].scenario.metric", "metric"),
            Col("rows[].scenario.value", "measured"),
            Col("rows[].scenario.unit", "measured_unit"),
            Col("rows[].roofline_error_frac", "roofline_error_frac", "1"),
            Col("rows[].kernel_error_frac", "kernel_error_frac", "1"),
            Col("rows[].calibrated_error_frac", "calibrated_error_frac", "1"),
            Col("rows[].loso_error_frac", "loso_error_frac", "1"),
        ),
        dims=("row",),
    )

    rows: tuple[RowResult, ...]
    unsupported: tuple[UnsupportedRow, ...]
    columns: tuple[str, ...]
    calibration: Calibration
    #: the share of rows inside their p10-p90 band per column
    #: (:func:`rackmath.analyses.reality.band_coverage.band_coverage`); None when not computed
    band_coverage: dict[str, Any] | None = None

    def errors(self, column: str, where: Mapping[str, str] | None = None) -> list[float]:
        out = []
        for r in self.rows:
            if where and any(_group_value(r, k) != v for k, v in where.items()):
                continue
            out.append(r.error(column))
        return out

    def stats(self, column: str, where: Mapping[str, str] | None = None) -> GroupStats:
        return group_stats(self.errors(column, where))

    def group_names(self, key: str) -> list[str]:
        return sorted({_group_value(r, key) for r in self.rows})

    def failed(self, column: str) -> list[int]:
        return [r.scenario.row_id for r in self.rows if not r.column(column).ok]

    def to_dict(self) -> dict[str, Any]:
        def block(column: str) -> dict[str, Any]:
            out: dict[str, Any] = {"overall": self.stats(column).to_dict()}
            for name, key in GROUPS.items():
                out[name] = {g: self.stats(column, {key: g}).to_dict() for g in self.group_names(key)}
            out["failed_rows"] = self.failed(column)
            return out

        return {
            "rows_expressed": len(self.rows),
            "rows_unsupported": len(self.unsupported),
            "columns": list(self.columns),
            "aggregates": {c: block(c) for c in self.columns},
            "calibration": self.calibration.to_dict(),
            **({"band_coverage": self.band_coverage} if self.band_coverage is not None else {}),
            "rows": [r.to_dict() for r in self.rows],
            "unsupported": [
                {
                    "id": u.row_id,
                    "source": u.provenance.source,
                    "url": u.provenance.url,
                    "metric": u.metric,
                    "value": u.value,
                    "unit": u.unit,
                    "reason": u.reason,
                }
                for u in self.unsupported
            ],
        }


def _group_value(r: RowResult, key: str) -> str:
    s = r.scenario
    if key == "phase":
        return s.phase.value
    if key == "chip":
        return scenario_chip(s)
    if key == "family":
        return scenario_family(s)
    if key == "source_key":
        return s.source_key
    if key == "architecture":
        return "moe" if scenario_is_moe(s) else "dense"
    raise KeyError(key)


def build_report(
    scenarios: tuple[Scenario, ...],
    unsupported: tuple[UnsupportedRow, ...],
    columns: Mapping[str, Mapping[int, Prediction]],
    calibration: Calibration,
) -> ValidationReport:
    rows = tuple(
        RowResult(s, tuple((name, preds[s.row_id]) for name, preds in columns.items())) for s in scenarios
    )
    return ValidationReport(rows, unsupported, tuple(columns), calibration)


def validate(path: str | Path | None = None) -> ValidationReport:
    """The whole check: every expressed row under the four :data:`COLUMNS` (module docstring).

    ``path``: your own measurements (a YAML file of the catalog's schema, whose scenarios may
    name a ``config.json`` for the model) instead. They are predicted under the pure roofline,
    the kernel-grounded model and the correction fitted on the catalog's rows; since that fit
    never saw them, its column is also their leave-one-source-out column."""
    from rackmath.analyses.reality import correction as co

    data = measurements()
    fitted = co.fit_correction(data.scenarios)
    rows = data if path is None else load_measurements(path)
    columns: dict[str, Mapping[int, Prediction]] = {
        "roofline": {s.row_id: predict(s, PURE_ROOFLINE) for s in rows.scenarios},
        "kernel": {s.row_id: predict(s, co.KERNEL) for s in rows.scenarios},
        "calibrated": {s.row_id: predict(s, fitted) for s in rows.scenarios},
    }
    held_out = co.correction_loso(data.scenarios) if path is None else None
    columns["loso"] = columns["calibrated"] if held_out is None else held_out.predictions
    report = build_report(rows.scenarios, rows.unsupported, columns, fitted)
    from rackmath.analyses.reality.band_coverage import band_coverage

    calibrations: dict[str, Any] = {"kernel": co.KERNEL, "calibrated": fitted}
    calibrations["loso"] = fitted if held_out is None else held_out.fits
    return replace(report, band_coverage=band_coverage(rows.scenarios, calibrations))
