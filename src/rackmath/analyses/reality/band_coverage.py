"""Is the band honest? The share of the project's published measurements inside their p10-p90.

A prediction's band (:func:`rackmath.analyses.reality.validation.predict` with ``edge``) is the same
prediction with every operator at the 10th, then the 90th percentile of its kernel curve's
held-out error (comonotonic, :attr:`rackmath.core.step.PlanStep.step_band_s`). If the bands
were exactly calibrated and the kernel error the only error, 80% of the measurements would fall
inside theirs. Scored per column of ``rackmath validate`` (``kernel``: kernel-grounded alone;
``calibrated``: with the end-to-end host-time correction fitted on every row; ``loso``: the
correction fitted without the row's source), serving rows only (the training step is not a plan
step and carries no band yet).

The kernel band is a kernel-level error; a serving framework adds host work no kernel table
sees, and the kernel-grounded column is biased by it (its median error is several times the
kernels'). The **end-to-end residual band** is that model-level term, measured
leave-one-source-out: for a row of source S, the 10th and 90th percentile of the step-time
ratio (:func:`step_ratio`: ``measured / predicted`` of a time, ``predicted / measured`` of a
rate, so a step predicted too short counts the same way in both) over every *other* source's
rows of the same column, applied to the row's prediction, its edges the wider of that and the
kernel band's. It never sees the row's own source, so its coverage is an out-of-sample figure:
``kernel_with_residual`` for the kernel-grounded model, ``loso_with_residual`` for the
corrected one. Pooled over every source, the kernel column's ratios are the **end-to-end band**
a kernel-grounded result shows beside its kernel band (:func:`end_to_end_band`, shipped in
``catalog/data/end_to_end_band.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rackmath.analyses.reality.validation import EDGES, Calibration, predict
from rackmath.specs.efficiency import ErrorBand
from rackmath.specs.scenario import Metric, Phase, Scenario

#: What a band is meant to cover: the 10th to the 90th percentile.
NOMINAL_COVERAGE = 0.8

#: Metrics that fall as the step grows (throughputs, MFU): their low edge is the step's p90.
_RATES = {
    Metric.DECODE_TOKENS_PER_S_PER_USER,
    Metric.OUTPUT_TOKENS_PER_S,
    Metric.INPUT_TOKENS_PER_S,
    Metric.PREFILL_MFU,
}


@dataclass(frozen=True)
class RowBand:
    row_id: int
    source_key: str
    measured: float
    predicted: float
    low: float
    high: float
    #: the metric falls as the step grows (a throughput, an MFU): its low edge is the slow step's
    rate: bool = False

    @property
    def inside(self) -> bool:
        return bool(self.low <= self.measured <= self.high)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.row_id,
            "source_key": self.source_key,
            "measured": self.measured,
            "predicted": self.predicted,
            "p10": self.low,
            "p90": self.high,
            "inside": self.inside,
        }


def row_band(s: Scenario, calibration: Calibration) -> RowBand | None:
    """One serving row's prediction and its band under ``calibration`` (None: not predicted)."""
    if s.phase is Phase.TRAINING:
        return None
    centre, *edges = (predict(s, calibration, e) for e in ("", *EDGES))
    if not (centre.ok and all(e.ok for e in edges)):
        return None
    lo, hi = sorted(e.value for e in edges)
    return RowBand(
        s.row_id,
        s.source_key,
        s.value,
        centre.value,
        min(lo, centre.value),
        max(hi, centre.value),
        s.metric in _RATES,
    )


def coverage(bands: Sequence[RowBand]) -> dict[str, Any]:
    """Share of rows inside their band, and the band's median relative width."""
    if not bands:
        return {"rows": 0, "inside_frac": None, "median_width_frac": None}
    inside = np.array([b.inside for b in bands])
    width = np.array([(b.high - b.low) / b.predicted for b in bands])
    return {
        "rows": len(bands),
        "inside_frac": float(inside.mean()),
        "median_width_frac": float(np.median(width)),
        "below": int(sum(b.measured < b.low for b in bands)),
        "above": int(sum(b.measured > b.high for b in bands)),
    }


def step_ratio(b: RowBand) -> float:
    """How long the measured step was against the predicted one: ``measured / predicted`` of a
    time, ``predicted / measured`` of a rate (a throughput 20% under its prediction is a step
    25% longer: 1.25)."""
    return b.predicted / b.measured if b.rate else b.measured / b.predicted


def widened(b: RowBand, band: ErrorBand) -> RowBand:
    """``b`` with its edges the wider of its own and the step ratios ``band.p10``, ``band.p90``
    (a rate's low edge from the slow step: ``predicted / p90``)."""
    if b.rate:
        low, high = b.predicted / band.p90, b.predicted / band.p10
    else:
        low, high = b.predicted * band.p10, b.predicted * band.p90
    return replace(b, low=min(b.low, low), high=max(b.high, high))


def end_to_end_band(bands: Sequence[RowBand], how: str = "") -> ErrorBand:
    """The 10th and 90th percentile of the rows' step ratios (:func:`step_ratio`), each edge
    kept on its side of 1 (a band always holds its prediction)."""
    ratios = np.array([step_ratio(b) for b in bands])
    r10, r90 = np.quantile(ratios, [0.1, 0.9])
    return ErrorBand(min(float(r10), 1.0), max(float(r90), 1.0), len(bands), how)


def residual_bands(bands: Sequence[RowBand]) -> list[RowBand]:
    """The end-to-end residual band of each row (module docstring): its band widened by the
    step ratios of every other source's rows of the same column."""
    out = []
    for b in bands:
        others = [o for o in bands if o.source_key != b.source_key]
        if others:
            out.append(widened(b, end_to_end_band(others)))
    return out


def band_coverage(
    scenarios: Sequence[Scenario], columns: Mapping[str, Calibration | Mapping[str, Calibration]]
) -> dict[str, Any]:
    """Coverage per column: ``columns`` maps a column to its calibration, or to one calibration
    per source key (leave-one-source-out). Adds ``kernel_with_residual`` and
    ``loso_with_residual`` where ``kernel`` and ``loso`` are given."""
    per: dict[str, list[RowBand]] = {}
    for name, cal in columns.items():
        bands = []
        for s in scenarios:
            c = cal.get(s.source_key) if isinstance(cal, Mapping) else cal
            if c is None:
                continue
            b = row_band(s, c)
            if b is not None:
                bands.append(b)
        per[name] = bands
    for name in ("kernel", "loso"):
        if name in per:
            per[f"{name}_with_residual"] = residual_bands(per[name])
    return {
        "nominal": NOMINAL_COVERAGE,
        "columns": {name: coverage(b) for name, b in per.items()},
        "rows": {name: [b.to_dict() for b in bands] for name, bands in per.items()},
        "how": "serving rows; band = every operator at its curve's held-out p10 / p90 together",
    }


def published_band_coverage() -> dict[str, Any]:
    """:func:`band_coverage` of the catalog's published rows under ``rackmath validate``'s
    kernel, calibrated and leave-one-source-out columns."""
    from rackmath.analyses.reality import correction as co
    from rackmath.catalog.measurements import measurements

    rows = measurements().scenarios
    loso = co.correction_loso(rows)
    return band_coverage(
        rows, {"kernel": co.KERNEL, "calibrated": co.fit_correction(rows), "loso": loso.fits}
    )


#: What the shipped end-to-end band was measured on (its ``how``).
END_TO_END_HOW = (
    "10th-90th percentile of measured / predicted step time of the kernel-grounded model "
    "(no end-to-end fit) over the published serving rows of rackmath validate"
)


def published_end_to_end_band() -> ErrorBand:
    """:func:`end_to_end_band` of the kernel column over the catalog's published serving rows:
    what ``catalog/data/end_to_end_band.yaml`` ships (``benchmarks/kernel_validation_report.py``
    writes it; ``tests/test_band_coverage.py`` recomputes it)."""
    from rackmath.analyses.reality import correction as co
    from rackmath.catalog.measurements import measurements

    bands = [b for b in (row_band(s, co.KERNEL) for s in measurements().scenarios) if b is not None]
    return end_to_end_band(bands, END_TO_END_HOW)
