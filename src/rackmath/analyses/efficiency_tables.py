"""The catalog's fitted kernel efficiencies as the typed tables the operator model uses.

:func:`efficiency_table` turns ``catalog/data/kernel_efficiency.yaml`` (written by
``rackmath calibrate kernels``) into an :class:`~rackmath.core.efficiency.EfficiencyTable`
for one chip and precision; :func:`grounded_table` is what a deployment runs on: the pure
roofline, or the fitted kernel curves with any end-to-end scalars multiplied in.

Transfer rule (chips without measured tables: Rubin, AMD, TPUs, ...): a chip takes the
curves of the chip the catalog's ``transferred`` map names (its generation's nearest measured
part; H100 for non-NVIDIA parts), and since every curve is a *fraction* of peak, the fractions
apply to the chip's own peaks and bandwidth: a transferred chip is scaled by its own peaks.
Only the absolute launch floors (``floor_s``) and collective latencies carry over as seconds.
A chip the catalog does not know at all (a user's own spec) transfers from
:data:`DEFAULT_DONOR`. Every table says where it came from (``source``, ``transferred``).

Worked number (a test): on a transferred chip, an operator's compute time is
``flops / (own_peak * compute_frac(rows))`` with the donor's fitted ``compute_frac``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from rackmath.core.efficiency import (
    CollectiveEfficiency,
    EfficiencyTable,
    OpClass,
    OpEfficiency,
    achieved_compute_frac,
)
from rackmath.core.roofline import Efficiency
from rackmath.errors import InputError, UnknownIdError

#: The chip whose curves a chip unknown to the kernel catalog takes (the best-characterised
#: mature HBM3 part, as for non-NVIDIA chips in the catalog's ``transferred`` map).
DEFAULT_DONOR = "h100-sxm"
#: Precision name -> the dtype key of the fitted rows that compute at it.
PREFERRED_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "nvfp4": "nvfp4"}
#: Weight-only formats (weights narrower than a bf16/fp16 matmul) -> the fitted rows of the
#: dequantizing kernels that run them (GEMM and grouped MoE GEMM).
WEIGHT_ONLY_DTYPE = {"int8": "int8_wo", "int4": "int4_wo", "mxfp4": "w4a16_mxfp4"}
#: What the user may ask for: the fitted kernel curves, or the pure roofline.
MODES = ("kernel", "pure")


def op_from_entry(entry: dict[str, Any]) -> OpEfficiency:
    """One catalog row (catalog/data/kernel_efficiency.yaml) as an :class:`OpEfficiency`."""
    return OpEfficiency(
        compute_frac=entry["compute_frac"],
        compute_half_rows=entry["compute_half_rows"],
        bandwidth_frac=entry["bandwidth_frac"],
        bandwidth_half_rows=entry["bandwidth_half_rows"],
        floor_s=entry["floor_s"],
        compute_half_cols=entry.get("compute_half_cols", 0.0),
        compute_half_depth=entry.get("compute_half_depth", 0.0),
        bandwidth_tile_depth=entry.get("bandwidth_tile_depth", 0.0),
        compute_tile_rows=entry.get("compute_tile_rows", 0.0),
        bandwidth_tile=entry.get("bandwidth_tile", 0.0),
        overlap_power=entry.get("overlap_power", 0.0),
        routing_bytes_per_element=entry.get("routing_bytes_per_element", 0.0),
        kernel=entry.get("kernel", ""),
        max_tokens=entry.get("max_tokens", float("inf")),
        min_ep=entry.get("min_ep", 1.0),
        alternative=op_from_entry(entry["alternative"]) if "alternative" in entry else None,
    )


def collective_from_entry(entry: dict[str, Any]) -> CollectiveEfficiency:
    return CollectiveEfficiency(entry["latency_s"], entry["bandwidth_frac"], entry.get("hop_latency_s", 0.0))


def _known(chip_id: str) -> tuple[str, bool]:
    """``(chip id the catalog resolves, transferred by the default rule?)``."""
    from rackmath.catalog import kernel_efficiency as ke

    try:
        ke.resolve(chip_id)
        return chip_id, False
    except UnknownIdError:
        return DEFAULT_DONOR, True


@lru_cache(maxsize=256)
def efficiency_table(
    chip_id: str,
    precision: str = "bf16",
    kv_precision: str | None = None,
    weights: str | None = None,
    moe_gated: bool = True,
) -> EfficiencyTable:
    """The chip's fitted :class:`EfficiencyTable` for operators computing at ``precision``.

    Each class takes the fit of the dtype that computes at ``precision`` (bf16 -> bfloat16,
    fp8 -> fp8, fp4 -> nvfp4), else the bfloat16 fit; decode attention picks by the KV-cache
    precision (``kv_precision``, default ``precision``); weight-only formats (``weights`` int8,
    int4 or mxfp4 under a bf16/fp16 matmul) take the dequantizing kernels' GEMM and MoE fits
    where measured (:data:`WEIGHT_ONLY_DTYPE`); NCCL all-reduce is the scale-up tier. The
    grouped expert GEMM takes the non-gated kernel's curve when ``moe_gated`` is False and the
    chip has one for the dtype (the gated curve otherwise).
    Chips without tables carry ``transferred=True`` and ``source="transferred from <chip>: ..."``.
    """
    from rackmath.catalog import kernel_efficiency as ke

    looked_up, by_default = _known(chip_id)
    donor, transferred = ke.resolve(looked_up)
    entries = ke.op_entries(looked_up)
    by_class: list[tuple[OpClass, OpEfficiency]] = []
    for cls in OpClass:
        key = kv_precision if cls is OpClass.ATTENTION_DECODE and kv_precision else precision
        want = PREFERRED_DTYPE.get(key, "bfloat16")
        if cls in (OpClass.GEMM, OpClass.MOE) and precision in ("bf16", "fp16") and weights:
            want = WEIGHT_ONLY_DTYPE.get(weights, want)
        rows = [o for o in entries if o["op_class"] == cls.value]
        variant = [o for o in rows if o.get("gated", True) == moe_gated]
        pick = next((o for o in [*variant, *rows] if o["dtype"] == want), None) or next(
            (o for o in [*variant, *rows] if o["dtype"] == "bfloat16"), None
        )
        if pick is not None:
            by_class.append((cls, op_from_entry(pick)))
    ar = ke.collective_entries(looked_up).get("all_reduce")
    source = ke.origin(looked_up)
    if by_default:
        source = f"transferred from {donor} (default for chips the kernel catalog lacks): {source}"
    return EfficiencyTable(
        by_class=tuple(by_class),
        scale_up=collective_from_entry(ar) if ar else CollectiveEfficiency(),
        source=source,
        transferred=transferred or by_default,
    )


def all_to_all(chip_id: str) -> dict[str, CollectiveEfficiency]:
    """DeepEP low-latency dispatch / combine as fitted (one NVLink domain of 8 GPUs)."""
    from rackmath.catalog import kernel_efficiency as ke

    comm = ke.collective_entries(_known(chip_id)[0])
    return {n: collective_from_entry(comm[n]) for n in ("dispatch", "combine") if n in comm}


def donor_of(chip_id: str) -> str | None:
    """The measured chip whose curves ``chip_id`` runs on, ``None`` when it has its own."""
    from rackmath.catalog import kernel_efficiency as ke

    looked_up, by_default = _known(chip_id)
    donor, transferred = ke.resolve(looked_up)
    return donor if (transferred or by_default) else None


def _scaled(e: OpEfficiency, compute: float, bandwidth: float) -> OpEfficiency:
    alternative = None if e.alternative is None else _scaled(e.alternative, compute, bandwidth)
    return replace(
        e,
        compute_frac=e.compute_frac * compute,
        bandwidth_frac=e.bandwidth_frac * bandwidth,
        alternative=alternative,
    )


def grounded_table(
    chip_id: str,
    precision: str,
    kv_precision: str | None,
    scalars: Efficiency,
    weights: str | None = None,
    moe_gated: bool = True,
) -> EfficiencyTable:
    """The table a deployment runs on. ``scalars.kernel_grounded`` False: the scalars on the
    pure roofline (``Efficiency.table``). True: the chip's fitted kernel curves with the
    scalars multiplied in (compute fractions by ``flops_frac``, GEMM/MoE bandwidth by
    ``bandwidth_frac * weight_bandwidth_frac``, attention bandwidth by
    ``bandwidth_frac * kv_bandwidth_frac``) and ``overhead_s`` added once per step."""
    if not scalars.kernel_grounded:
        return scalars.table()
    table = efficiency_table(chip_id, precision, kv_precision, weights, moe_gated)
    if scalars == Efficiency(kernel_grounded=True):
        return table
    weight_bw = scalars.bandwidth_frac * scalars.weight_bandwidth_frac
    kv_bw = scalars.bandwidth_frac * scalars.kv_bandwidth_frac
    attention = (OpClass.ATTENTION_DECODE, OpClass.ATTENTION_PREFILL)
    by_class = tuple(
        (c, _scaled(e, scalars.flops_frac, kv_bw if c in attention else weight_bw)) for c, e in table.by_class
    )
    return replace(table, by_class=by_class, overhead_s=table.overhead_s + scalars.overhead_s)


def parse_mode(value: object) -> Efficiency:
    """``"kernel"`` -> :data:`~rackmath.core.roofline.KERNEL_GROUNDED`, ``"pure"`` -> the pure
    roofline; an :class:`Efficiency` passes through."""
    from rackmath.core.roofline import KERNEL_GROUNDED, PURE_ROOFLINE

    if isinstance(value, Efficiency):
        return value
    if value is None or value == "kernel":
        return KERNEL_GROUNDED
    if value == "pure":
        return PURE_ROOFLINE
    raise InputError(
        "efficiency", value, "'kernel' (fitted kernel curves, the default) or 'pure' (the roofline)"
    )


def describe(chip_id: str, mode: str) -> dict[str, Any]:
    """What a report says about the efficiency it used on a chip: ``mode`` (``kernel`` /
    ``pure``), ``transferred_from`` (the donor chip, or None) and ``source``."""
    if mode == "pure":
        return {"mode": "pure", "transferred_from": None, "source": "pure roofline"}
    return {
        "mode": "kernel",
        "transferred_from": donor_of(chip_id),
        "source": efficiency_table(chip_id, "bf16").source,
    }


def gemm_compute_frac(chip_id: str, precision: str, rows: float, cols: float, depth: float) -> float:
    """The fitted GEMM curve's fraction of peak at one shape (``rows x depth`` times
    ``depth x cols``): what a training step's large GEMMs reach on the chip
    (:func:`rackmath.core.efficiency.achieved_compute_frac`). Worked number: the pure
    roofline's curve gives 1 at every shape."""
    e = efficiency_table(chip_id, precision).of(OpClass.GEMM)
    return float(achieved_compute_frac(e, rows, cols, depth))
