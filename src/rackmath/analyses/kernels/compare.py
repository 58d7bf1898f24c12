"""A machine's own kernel fit beside the shipped curves of the same chip.

``rackmath calibrate kernels --from DIR --chips CHIP`` fits the tables a machine measured
(``rackmath measure --kernels``); :func:`against_shipped` then times the same rows on both
curves of each class x format x family: the new fit's (in-sample: it saw these rows) and the
catalog's for ``CHIP`` (fitted on the package's tables, another software stack on the same
silicon). Per curve: rows, median and p90 of ``|measured / predicted - 1|`` under each, the
shipped curve's signed median (``predicted / measured - 1``: positive where the shipped curve
is slower than this machine), and both asymptotes (compute fraction of the format's peak,
bandwidth fraction of HBM, floor). A class the catalog has no curve for on ``CHIP`` is listed
with its own fit alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rackmath.analyses.kernels import bands as kb
from rackmath.analyses.kernels.fit import ChipData, ChipFit, ChipPeaks, OpFit
from rackmath.analyses.kernels.tables import curve_key, op_from_entry
from rackmath.catalog import kernel_efficiency as ke
from rackmath.specs.precision import Precision


def shipped_fit(chip_id: str) -> ChipFit:
    """The catalog's curves for ``chip_id`` as a fit (its own curves, or its donor's where it
    has none: each ``OpFit.source`` names the chip whose tables it was fitted on)."""
    ops = []
    for entry in ke.op_entries(chip_id):
        key = curve_key(entry)
        ops.append(
            OpFit(
                key.op_class,
                key.fmt,
                key.kind,
                Precision(entry["precision"]),
                op_from_entry(entry),
                int(entry.get("rows_used", 0)),
                str(entry["chip"]),
                key.head_dim,
            )
        )
    return ChipFit(chip_id, ops, {}, {}, {})


def _errors(ratios: np.ndarray) -> tuple[float, float, float]:
    """median and p90 of ``|measured / predicted - 1|``, median of ``predicted / measured - 1``."""
    err = np.abs(ratios - 1.0)
    return float(np.median(err)), float(np.percentile(err, 90)), float(np.median(1.0 / ratios - 1.0))


def against_shipped(data: ChipData, fit: ChipFit, peaks: ChipPeaks) -> list[dict[str, Any]]:
    """Each curve of ``fit`` (fitted on ``data``) beside the shipped curve of the same chip,
    scored on ``data``'s rows (module docstring)."""
    shipped = shipped_fit(data.chip_id)
    own_ratios, _ = kb.curve_ratios(fit, data, peaks, None)
    shipped_ratios, _ = kb.curve_ratios(shipped, data, peaks, None)
    by_shipped = {f.curve_id: f for f in shipped.ops}
    out = []
    for f in fit.ops:
        key = f.curve_id
        own_med, own_p90, _ = _errors(own_ratios[key])
        row: dict[str, Any] = {
            "op_class": f.op_class.value,
            "format": f.dtype,
            "kind": f.kind,
            **({"head_dim": f.head_dim} if f.head_dim else {}),
            "rows": int(own_ratios[key].size),
            "own": {
                "median_abs_error": own_med,
                "p90_abs_error": own_p90,
                "compute_frac": f.efficiency.compute_frac,
                "bandwidth_frac": f.efficiency.bandwidth_frac,
                "floor_s": f.efficiency.floor_s,
            },
            "shipped": None,
        }
        s = by_shipped.get(key)
        if s is not None and key in shipped_ratios:
            med, p90, bias = _errors(shipped_ratios[key])
            row["shipped"] = {
                "fitted_on": s.source,
                "median_abs_error": med,
                "p90_abs_error": p90,
                "median_error": bias,
                "compute_frac": s.efficiency.compute_frac,
                "bandwidth_frac": s.efficiency.bandwidth_frac,
                "floor_s": s.efficiency.floor_s,
            }
        out.append(row)
    return out
