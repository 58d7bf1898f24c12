"""Kernel-level validation of the per-operator efficiency fit (``rackmath validate --kernels``).

Three held-out tests of :mod:`rackmath.analyses.kernel_fit`: 20% of the shapes of every table
(a fixed shape hash), whole chips (fit H100 -> test H200, fit GB200 -> test GB300), and one
framework version (fit one TensorRT-LLM release, test the next). Errors are
``predicted / measured - 1`` of operator latency; aggregates are median and 90th percentile
of their absolute values per chip x operator class, and per chip x collective curve
(:data:`COLLECTIVES`, ``"<collective>:<implementation>"``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rackmath.analyses.kernel_fit import (
    HELD_OUT_CHIPS,
    HOLDOUT_MOD,
    ChipData,
    ChipFit,
    ChipPeaks,
    fit_chip,
    load_package_chip,
    predict,
)
from rackmath.analyses.kernel_rows import fit_groups
from rackmath.catalog import kernel_tables as kt
from rackmath.core.efficiency import collective_time_s
from rackmath.errors import InputError
from rackmath.progress import track


def _stats(err: np.ndarray) -> dict[str, Any]:
    a = np.abs(err[np.isfinite(err)])
    if a.size == 0:
        return {"median_abs_error": None, "p90_abs_error": None, "rows": 0}
    return {
        "median_abs_error": float(np.median(a)),
        "p90_abs_error": float(np.quantile(a, 0.9)),
        "rows": int(a.size),
    }


def _errors(
    fit: ChipFit,
    data: ChipData,
    peaks: ChipPeaks,
    mask: dict[str, np.ndarray] | None,
    rejected: bool = False,
) -> dict[str, np.ndarray]:
    """Relative errors (predicted / measured - 1) per class of ``data``'s rows under ``fit``
    (of its rejected rows, and no collectives, with ``rejected``)."""
    out: dict[str, list[np.ndarray]] = {}
    by = {(f.op_class, f.dtype, f.kind): f for f in fit.ops}
    for cls, allr in (data.rejected if rejected else data.ops).items():
        r_all = allr.take(mask[cls.value]) if mask is not None else allr
        for dt, kind, rows in fit_groups(r_all):
            f = by.get((cls, dt, kind))
            if f is None or f.precision not in peaks.peak_flops_per_s:
                continue
            r = r_all.take(rows)
            pred = predict(f.efficiency, r, peaks.peak_flops_per_s[f.precision], peaks.hbm_bytes_per_s)
            out.setdefault(cls.value, []).append(pred / r.latency_s - 1)
    for name, c_all in ({} if rejected else data.comm).items():
        c = c_all.take(mask[name]) if mask is not None else c_all
        eff = fit.comm.get(name)
        if eff is None:
            continue
        pred = collective_time_s(eff, c.wire_bytes, peaks.scale_up_bytes_per_s, chips=c.chips)
        out.setdefault(name, []).append(pred / c.latency_s - 1)
    return {k: np.concatenate(v) for k, v in out.items()}


def _split(data: ChipData, held_out: bool, rejected: bool = False) -> dict[str, np.ndarray]:
    rows = data.rejected if rejected else data.ops
    masks = {cls.value: ((r.key % np.uint64(HOLDOUT_MOD)) == 0) == held_out for cls, r in rows.items()}
    masks.update({n: ((c.key % np.uint64(HOLDOUT_MOD)) == 0) == held_out for n, c in data.comm.items()})
    return masks


#: The collective curves, ``"<collective>:<implementation>"`` (one per measured table kind).
COLLECTIVES = (
    "all_reduce:nccl",
    "all_reduce:custom",
    "all_gather:nccl",
    "reduce_scatter:nccl",
    "all_to_all:nccl",
    "dispatch:deepep_ll",
    "combine:deepep_ll",
    "dispatch:deepep_normal",
    "combine:deepep_normal",
)
CLASSES = ("gemm", "moe", "attention_decode", "attention_prefill", *COLLECTIVES)


def validate_kernels(chips: list[str] | None = None) -> dict[str, Any]:
    """Held-out shapes (20% per table), held-out chips and a held-out framework version."""
    refs = kt.discover()
    if not refs:
        raise InputError(
            "aiconfigurator-core",
            "not installed",
            f"pip install {kt.PACKAGE}=={kt.PACKAGE_VERSION} (the `kernels` extra)",
        )
    wanted = chips or sorted(set(kt.CHIP_DIRS.values()))
    t0 = time.perf_counter()
    all_err: dict[str, list[np.ndarray]] = {}
    with_rejected: dict[str, list[np.ndarray]] = {}
    rejected_rows: dict[str, int] = {}
    by_chip: dict[str, dict[str, Any]] = {}
    datas: dict[str, ChipData] = {}
    full_fits: dict[str, ChipFit] = {}
    for chip_id in track(wanted, "Validating kernels (chips)"):
        data = load_package_chip(chip_id, refs)
        datas[chip_id] = data
        peaks = ChipPeaks.of(chip_id)
        fit = fit_chip(data, peaks, _split(data, held_out=False))
        errs = _errors(fit, data, peaks, _split(data, held_out=True))
        by_chip[chip_id] = {k: _stats(v) for k, v in errs.items()}
        for k, v in errs.items():
            all_err.setdefault(k, []).append(v)
            with_rejected.setdefault(k, []).append(v)
        for k, v in _errors(fit, data, peaks, _split(data, True, rejected=True), rejected=True).items():
            with_rejected.setdefault(k, []).append(v)
        for cls, r in data.rejected.items():
            rejected_rows[cls.value] = rejected_rows.get(cls.value, 0) + len(r.latency_s)
    held: dict[str, Any] = {}
    for target, donor in HELD_OUT_CHIPS.items():
        if target not in wanted:
            continue
        donor_data = datas.get(donor) or load_package_chip(donor, refs)
        donor_fit = full_fits.get(donor) or fit_chip(donor_data, ChipPeaks.of(donor))
        full_fits[donor] = donor_fit
        errs = _errors(donor_fit, datas[target], ChipPeaks.of(target), None)
        held[target] = {"fitted_on": donor, "by_op": {k: _stats(v) for k, v in errs.items()}}
    version = _held_out_version(refs, wanted, datas, full_fits)
    return {
        "kernels": {
            "by_op": {k: _stats(np.concatenate(all_err[k])) for k in CLASSES if k in all_err},
            # the same held-out shapes with the rows the fit rejects as not the operator's timing
            "by_op_with_rejected": {
                k: _stats(np.concatenate(with_rejected[k])) for k in CLASSES if k in with_rejected
            },
            "rejected_rows": rejected_rows,
            "by_chip": by_chip,
            "held_out_chips": held,
            "held_out_version": version,
            "split": f"shape hash % {HOLDOUT_MOD} == 0 held out (20% of shapes per table)",
            "source": f"{kt.PACKAGE}=={kt.PACKAGE_VERSION}",
            "seconds": round(time.perf_counter() - t0, 1),
        }
    }


def _held_out_version(
    refs: list[kt.TableRef], wanted: list[str], datas: dict[str, ChipData], fits: dict[str, ChipFit]
) -> dict[str, Any]:
    """MoE of TensorRT-LLM 1.3.0rc23 predicted by the fit on 1.3.0rc20 (same chip)."""
    out: dict[str, Any] = {}
    for chip_id in wanted:
        newer = [
            r
            for r in refs
            if r.chip_id == chip_id
            and r.kind == "moe"
            and r.framework == "trtllm"
            and r.version == "1.3.0rc23"
        ]
        if not newer:
            continue
        target = ChipData(chip_id)
        target.add(kt.read_table(newer[0].path, "moe"), newer[0].source)
        fit = fits.get(chip_id) or fit_chip(datas[chip_id], ChipPeaks.of(chip_id))
        fits[chip_id] = fit
        errs = _errors(fit, target, ChipPeaks.of(chip_id), None)
        if "moe" in errs and errs["moe"].size:
            out[chip_id] = {
                "fitted_on": "trtllm 1.3.0rc20",
                "tested_on": "trtllm 1.3.0rc23",
                "moe": _stats(errs["moe"]),
            }
    return out
