"""Held-out errors of the fitted kernel curves: the split by whole shape values, and the band
each curve carries (``band: {p10, p90, rows, how}`` in ``catalog/data/kernel_efficiency.yaml``).

**The held-out-value split.** A random 20% of the shapes of a dense grid is interpolation: every
held-out point has measured neighbours on each side in every dimension. This split holds out
*whole values* of the dimensions a serving step varies
(:data:`rackmath.analyses.kernels.op_rows.HELD_OUT_DIMS`): a GEMM's token count ``m``, a MoE
call's token count and EP degree, decode attention's context and batch, a prompt's length; for
collectives the message size. Per chip and class, the distinct
values of each dimension are sorted and every fourth interior one is held out
(indices ``2, 6, 10, ...``, never the smallest or the largest: the split measures
generalization between measured values, not extrapolation beyond them); a row is held out when
any of its dimensions takes a held-out value. A module table's rows (DSA's: a whole attention
module per row) are split on their own values, apart from the class's operator tables. The fit
sees none of those values; its error on them is the curve's error where a deployment's shape
falls between the measured grid's values.

**The band.** A curve's band is the 10th and 90th percentile of ``measured / predicted`` over its
held-out rows under the fit that did not see them (at least :data:`MIN_BAND_ROWS` rows; fewer,
and the band is the chip x class's pooled one, and ``how`` says so). The shipped curve is then
fitted on every row. So an operator time ``t`` of that curve lies in ``[p10 t, p90 t]`` for 80% of
kernel calls at held-out shape values. The band always contains 1 (``p10 <= 1 <= p90``): a curve
whose held-out rows all run slower than predicted still has the prediction inside its band.

**Transferred chips.** A chip that takes another chip's curves (``transferred``) has a wider
band: per class, the ratio of the held-out-chip spread (H200's rows under the H100's fit,
GB300's under GB200's, every row) to the held-out-value spread of the same chip's own fit
(:func:`transfer_widening`); the lower edge takes the smaller of the two pairs' ratios, the
upper the larger (never narrower than 1). Within a vendor generation this is measured; across
vendors (AMD, TPUs on the H100's curves) nothing is, and the widening is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rackmath.analyses.kernels import tables as et
from rackmath.analyses.kernels.fit import (
    ChipData,
    ChipFit,
    ChipPeaks,
    OpFit,
    fit_chip,
    predict,
    with_companions,
)
from rackmath.analyses.kernels.op_rows import HELD_OUT_DIMS, MODULE_KINDS
from rackmath.analyses.kernels.rows import CommRows, fit_groups
from rackmath.core.efficiency import collective_time_s
from rackmath.frames import Record
from rackmath.specs.curve_rank import head_curve
from rackmath.specs.efficiency import CurveKey, OpClass

#: Every HOLD_OUT_EVERY-th distinct value of a dimension is held out ...
HOLD_OUT_EVERY = 4
#: ... starting at this index in sorted order (the third value; never the first or the last).
HOLD_OUT_FIRST = 2
#: Fewest held-out rows a curve's own band is measured on; below, the chip x class band.
MIN_BAND_ROWS = 30
#: The quantiles of ``measured / predicted`` a band reports.
BAND_QUANTILES = (0.1, 0.9)
#: A module row's own measured time is counted as at least this share of its measured time
#: (:func:`curve_ratios` with ``own``: where the companions' curves already exceed the
#: measurement, the operator's own time is taken as 1% of it rather than negative).
OWN_FLOOR = 0.01


def held_out_values(values: np.ndarray) -> np.ndarray:
    """Which rows take a held-out value of one dimension: the distinct values in sorted order,
    every :data:`HOLD_OUT_EVERY`-th from :data:`HOLD_OUT_FIRST`, never the first or last.
    Worked example: values 1, 2, 4, 8, 16, 32, 64 hold out 4 (index 2); 64 (index 6) is the
    largest and stays in."""
    distinct = np.unique(np.asarray(values, float))
    i = np.arange(distinct.size)
    chosen = distinct[
        (i % HOLD_OUT_EVERY == HOLD_OUT_FIRST % HOLD_OUT_EVERY) & (i > 0) & (i < distinct.size - 1)
    ]
    return np.isin(values, chosen)


def comm_dimension(c: CommRows) -> np.ndarray:
    """The value a collective's rows are held out by: the message each rank contributes
    (``message_bytes`` where the rows carry it), else the bytes on the wire."""
    message = getattr(c, "message_bytes", None)
    return np.asarray(c.wire_bytes if message is None else message, float)


def value_split(data: ChipData) -> dict[str, np.ndarray]:
    """``{class or collective name: held-out mask}`` of the held-out-value split (module doc)."""
    masks: dict[str, np.ndarray] = {}
    for cls, r in data.ops.items():
        held = np.zeros(len(r.latency_s), bool)
        # a module table's rows are split on their own values (their grid is the module's);
        # the operator tables' rows of a class share theirs
        module = np.isin(r.kind, MODULE_KINDS)
        for group in (~module, *(r.kind == k for k in MODULE_KINDS)):
            if not group.any():
                continue
            for dim in HELD_OUT_DIMS.get(cls, ()):
                if dim in r.dims:
                    held[group] |= held_out_values(r.dims[dim][group])
        masks[cls.value] = held
    for name, c in data.comm.items():
        masks[name] = held_out_values(comm_dimension(c))
    return masks


def invert(masks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: ~v for k, v in masks.items()}


def class_key(cls: OpClass, kind: str) -> str:
    """The class a report scores a curve under: its operator class, with the kernel family
    where attention has several (``attention_decode/mla``); MoE's gated and non-gated curves
    are one class (:func:`rackmath.analyses.kernels.tables.class_key`)."""
    return et.class_key(CurveKey(cls, "", kind))


def is_module_class(key: str) -> bool:
    """Whether a report class is a module table's (``attention_decode/dsa``): its rows time
    several operators (:data:`rackmath.analyses.kernels.op_rows.MODULE_KINDS`)."""
    return key.split("/")[-1] in MODULE_KINDS


def comm_key(name: str) -> str:
    """The class a collective is scored under: ``collective/<name>``."""
    return f"collective/{name}"


CurveId = tuple[OpClass, str, str, int]  # (class, format, family, head size: 0 for every size)


def curve_ratios(
    fit: ChipFit,
    data: ChipData,
    peaks: ChipPeaks,
    mask: dict[str, np.ndarray] | None,
    own: bool = False,
) -> tuple[dict[CurveId, np.ndarray], dict[str, np.ndarray]]:
    """``measured / predicted`` of ``data``'s rows under ``fit`` (``mask``: which rows), per curve
    (class, format, family, head size) and per collective name. Rows of a curve the fit lacks are skipped.

    A module table's row (DSA's) times its operator with companions (the projections, on
    ``fit``'s GEMM curves): its ratio is the module's, ``measured / (predicted + companions)``;
    with ``own``, the operator's own, ``(measured - companions) / predicted`` (what the curve's
    band is measured on: the band scales the operator's time alone; a row whose measured time
    the companions already exceed gives a ratio near 0)."""
    by = {f.curve_id: f for f in fit.ops}
    ops: dict[CurveId, np.ndarray] = {}
    for cls, allr in data.ops.items():
        r_all = allr.take(mask[cls.value]) if mask is not None else allr
        r_all = with_companions(r_all, fit.ops, peaks)
        for dt, kind, head, rows in fit_groups(r_all):
            f = _curve_for(by, (cls, dt, kind, head))
            if f is None or f.precision not in peaks.peak_flops_per_s:
                continue
            r = r_all.take(rows)
            pred = predict(f.efficiency, r, peaks.peak_flops_per_s[f.precision], peaks.hbm_bytes_per_s)
            if own and r.fixed_s is not None:
                fixed = r.fixed_s
                ops[(cls, dt, kind, head)] = np.maximum(r.latency_s - fixed, OWN_FLOOR * r.latency_s) / (
                    pred - fixed
                )
            else:
                ops[(cls, dt, kind, head)] = r.latency_s / pred
    comm: dict[str, np.ndarray] = {}
    for name, c_all in data.comm.items():
        c = c_all.take(mask[name]) if mask is not None else c_all
        eff = fit.comm.get(name)
        if eff is None or not len(c.latency_s):
            continue
        pred = collective_time_s(
            eff, c.wire_bytes, peaks.scale_up_bytes_per_s, chips=c.chips, sm_tokens=c.sm_tokens
        )
        comm[name] = c.latency_s / pred
    return ops, comm


def _curve_for(by: dict[CurveId, OpFit], curve: CurveId) -> OpFit | None:
    """The fit's curve for rows of ``curve``, as a step picks it
    (:meth:`rackmath.specs.efficiency.EfficiencyTable.curve`): that head size's own, else the
    nearest head size's among the family's, else the family's curve of every size."""
    cls, dt, kind, head = curve
    sizes = tuple(sorted(h for (c, d, k, h) in by if (c, d, k) == (cls, dt, kind) and h))
    return by.get((cls, dt, kind, head_curve(sizes, head)))


def by_class(ops: dict[CurveId, np.ndarray], comm: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ratios pooled per report class (:func:`class_key`, :func:`comm_key`)."""
    out: dict[str, list[np.ndarray]] = {}
    for (cls, _, kind, _), v in sorted(ops.items(), key=lambda kv: (kv[0][0].value, *kv[0][1:])):
        out.setdefault(class_key(cls, kind), []).append(v)
    for name, v in sorted(comm.items()):
        out.setdefault(comm_key(name), []).append(v)
    return {k: np.concatenate(v) for k, v in out.items()}


@dataclass(frozen=True)
class Band(Record):
    """``p10`` and ``p90`` of measured / predicted over ``rows`` held-out calls, and how."""

    p10: float
    p90: float
    rows: int
    how: str


def band_of(ratios: np.ndarray, how: str) -> Band:
    """The band of a set of ``measured / predicted`` ratios, widened to contain 1, rounded to
    4 digits (the catalog's precision; the band always rounds outwards)."""
    r = np.asarray(ratios, float)
    r = r[np.isfinite(r) & (r > 0)]
    lo, hi = (float(np.quantile(r, q)) for q in BAND_QUANTILES)
    lo, hi = min(lo, 1.0), max(hi, 1.0)
    return Band(float(np.floor(lo * 1e4) / 1e4), float(np.ceil(hi * 1e4) / 1e4), int(r.size), how)


def _how(dims: str) -> str:
    return f"held-out values of {dims}"


@dataclass(frozen=True)
class HeldOutValues:
    """One chip's held-out-value test: the fit that did not see the held-out values, the
    ``measured / predicted`` ratios of the held-out rows per curve and per collective, and the
    bands they give."""

    fit: ChipFit
    ops: dict[CurveId, np.ndarray]
    comm: dict[str, np.ndarray]
    bands: dict[CurveId, Band]
    comm_bands: dict[str, Band]

    def by_class(self) -> dict[str, np.ndarray]:
        return by_class(self.ops, self.comm)


def held_out_value_bands(data: ChipData, peaks: ChipPeaks) -> HeldOutValues:
    """Each curve's band (and each collective's) from the held-out-value split of one chip
    (module docstring). A curve with fewer than :data:`MIN_BAND_ROWS` held-out rows takes its
    chip x class's pooled band, else every class of the chip pooled; ``how`` says which."""
    split = value_split(data)
    fit = fit_chip(data, peaks, invert(split))
    ops, comm = curve_ratios(fit, data, peaks, split)
    # a band scales its operator's own time: a module row's ratio without its companions
    mine = curve_ratios(fit, data, peaks, split, own=True)[0] if _has_modules(data) else ops
    pooled = by_class(mine, comm)
    everything = np.concatenate(list(mine.values())) if mine else np.zeros(0)
    bands: dict[CurveId, Band] = {}
    for cls, r in data.ops.items():
        how = _how(", ".join(d for d in HELD_OUT_DIMS.get(cls, ()) if d in r.dims) or "no dimension")
        for dt, kind, head, _ in fit_groups(r):
            curve = (cls, dt, kind, head)
            own = mine.get(curve)
            if own is not None and own.size >= MIN_BAND_ROWS:
                bands[curve] = band_of(own, how)
                continue
            n = 0 if own is None else own.size
            shared = pooled.get(class_key(cls, kind), np.zeros(0))
            if shared.size >= MIN_BAND_ROWS:
                bands[curve] = band_of(
                    shared, f"{how} ({n} own rows: the chip's {class_key(cls, kind)} pooled)"
                )
            elif everything.size >= MIN_BAND_ROWS:
                bands[curve] = band_of(everything, f"{how} ({n} own rows: every class of the chip pooled)")
    comm_bands = {
        name: band_of(v, _how("the message size")) for name, v in comm.items() if v.size >= MIN_BAND_ROWS
    }
    return HeldOutValues(fit, ops, comm, bands, comm_bands)


def _has_modules(data: ChipData) -> bool:
    return any(r.companions for r in data.ops.values())


def transfer_widening(
    own: dict[str, dict[str, np.ndarray]], transferred: dict[str, dict[str, np.ndarray]]
) -> dict[str, dict[str, Any]]:
    """Per class, how much wider a transferred chip's band is than a chip's own:
    ``own[target][class]`` are the target's held-out-value ratios under its own fit,
    ``transferred[target][class]`` its rows under the donor's fit. Returns
    ``{class: {p10, p90, how}}``, the factors that multiply a transferred curve's band edges
    (``p10 <= 1 <= p90``), and ``"*"``: every class pooled, for a class without its pair."""
    lows: dict[str, list[float]] = {}
    highs: dict[str, list[float]] = {}
    pairs: list[str] = []
    for target in sorted(transferred):
        pairs.append(target)
        mine, theirs = own.get(target, {}), transferred[target]
        # "*" pools the operator tables' classes (a module table's class has its own pair)
        everything_own = [v for k, v in mine.items() if not is_module_class(k)]
        everything_theirs = [v for k, v in theirs.items() if not is_module_class(k)]
        if everything_own and everything_theirs:
            mine = {**mine, "*": np.concatenate(everything_own)}
            theirs = {**theirs, "*": np.concatenate(everything_theirs)}
        for k in sorted(set(mine) & set(theirs)):
            if mine[k].size < MIN_BAND_ROWS or theirs[k].size < MIN_BAND_ROWS:
                continue
            o10, o90 = (float(np.quantile(mine[k], q)) for q in BAND_QUANTILES)
            t10, t90 = (float(np.quantile(theirs[k], q)) for q in BAND_QUANTILES)
            lows.setdefault(k, []).append(min(1.0, t10 / o10))
            highs.setdefault(k, []).append(max(1.0, t90 / o90))
    how = (
        "held-out chips ("
        + ", ".join(pairs)
        + " under their donors' fits, every row) against their own held-out-value spread"
    )
    return {
        k: {
            "p10": float(np.floor(min(lows[k]) * 1e4) / 1e4),
            "p90": float(np.ceil(max(highs[k]) * 1e4) / 1e4),
            "how": how,
        }
        for k in sorted(lows)
    }
