"""The catalog's fitted kernel efficiencies as the typed tables the operator model uses.

:func:`efficiency_table` turns one chip's entries of ``catalog/data/kernel_efficiency.yaml``
(written by ``rackmath calibrate kernels``) into an
:class:`~rackmath.core.efficiency.EfficiencyTable` holding every curve the chip has (each
class x kernel format x kernel family, with the precision its compute fraction is a fraction
of, its source and its held-out error band) and every fitted collective. The operators pick
their curve from it (:meth:`rackmath.core.operators.ChipRates.curve`); :func:`grounded_table`
is what a deployment runs on: the pure roofline, or the fitted curves with any end-to-end
scalars multiplied in.

Transfer rule (chips without measured tables: Rubin, AMD, TPUs, ...): a chip takes the
curves of the chip the catalog's ``transferred`` map names (its generation's nearest measured
part; H100 for non-NVIDIA parts), and since every curve is a *fraction* of peak, the fractions
apply to the chip's own peaks and bandwidth: a transferred chip is scaled by its own peaks.
Only the absolute launch floors (``floor_s``) and collective latencies carry over as seconds.
A chip the catalog does not know at all (a user's own spec) transfers from
:data:`DEFAULT_DONOR`. Every table says where it came from (``source``, ``chip``,
``transferred``), and every operator's kernel says so again.

Worked number (a test): on a transferred chip, an operator's compute time is
``flops / (own_peak * compute_frac(rows))`` with the donor's fitted ``compute_frac``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from rackmath.catalog import kernel_tables as kt
from rackmath.core.efficiency import achieved_compute_frac
from rackmath.core.roofline import Efficiency
from rackmath.errors import UnknownIdError
from rackmath.specs.efficiency import (
    CollectiveCurve,
    CollectiveEfficiency,
    Curve,
    CurveKey,
    EfficiencyMode,
    EfficiencyTable,
    ErrorBand,
    OpClass,
    OpEfficiency,
)

#: The chip whose curves a chip unknown to the kernel catalog takes (the best-characterised
#: mature HBM3 part, as for non-NVIDIA chips in the catalog's ``transferred`` map).
DEFAULT_DONOR = "h100-sxm"
#: Collective names of catalogs written before collectives named their implementation.
_LEGACY_COLLECTIVES = {
    "all_reduce": "all_reduce:nccl",
    "dispatch": "dispatch:deepep_ll",
    "combine": "combine:deepep_ll",
}


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
        only_cols=entry.get("only_cols", 0.0),
        split_tokens=entry.get("split_tokens", 0.0),
        split_max=entry.get("split_max", 0.0),
        split_fill=entry.get("split_fill", 0.0),
        compute_tile_cols=entry.get("compute_tile_cols", 0.0),
        block_bytes=entry.get("block_bytes", 0.0),
        block_tile_rows=entry.get("block_tile_rows", 0.0),
        unaligned_slowdown=entry.get("unaligned_slowdown", 0.0),
        chain_frac=entry.get("chain_frac", 0.0),
        spill_bytes=entry.get("spill_bytes", 0.0),
        spill_passes=entry.get("spill_passes", 0.0),
        warm_speedup=entry.get("warm_speedup", 0.0),
        alternative=op_from_entry(entry["alternative"]) if "alternative" in entry else None,
    )


def curve_key(entry: dict[str, Any]) -> CurveKey:
    """The curve a catalog row fits: class, format, family (attention ``gqa`` and grouped
    experts ``gated`` where a row names none) and head size (0, every size, where it names none)."""
    cls = OpClass(entry["op_class"])
    kind = entry.get("kind")
    if kind is None:
        if cls is OpClass.MOE:
            kind = "gated" if entry.get("gated", True) else "nongated"
        elif cls in (OpClass.ATTENTION_DECODE, OpClass.ATTENTION_PREFILL):
            kind = "gqa"
        else:
            kind = ""
    return CurveKey(cls, entry["dtype"], kind, int(entry.get("head_dim", 0)))


def band_from_entry(entry: dict[str, Any] | None) -> ErrorBand:
    if not entry:
        return ErrorBand()
    return ErrorBand(entry["p10"], entry["p90"], int(entry.get("rows", 0)), entry.get("how", ""))


def class_key(key: CurveKey) -> str:
    """The class a curve's held-out error is reported under (``attention_decode/mla``; MoE's
    families together): :func:`rackmath.analyses.kernels.bands.class_key`."""
    attention = (OpClass.ATTENTION_DECODE, OpClass.ATTENTION_PREFILL)
    if key.op_class in attention and key.kind not in ("", "gqa"):
        return f"{key.op_class.value}/{key.kind}"
    return key.op_class.value


def widened(band: ErrorBand, widening: dict[str, dict[str, Any]], cls: str) -> ErrorBand:
    """A transferred curve's band: its own edges times the class's transfer widening (the
    catalog's ``transfer_band``; ``"*"`` where the class has none). Worked number: a band of
    0.9-1.2 widened by 0.95 / 1.10 is 0.855-1.32."""
    w = widening.get(cls) or widening.get("*")
    if w is None or band.rows == 0:
        return band
    how = f"{band.how}; widened x{w['p10']:g} / x{w['p90']:g} for transfer ({w.get('how', '')})"
    return ErrorBand(band.p10 * float(w["p10"]), band.p90 * float(w["p90"]), band.rows, how)


def collective_from_entry(entry: dict[str, Any]) -> CollectiveEfficiency:
    return CollectiveEfficiency(
        entry["latency_s"],
        entry["bandwidth_frac"],
        entry.get("hop_latency_s", 0.0),
        entry.get("pipeline_latency_s", 0.0),
        entry.get("group_bandwidth_power", 0.0),
        entry.get("sm_token_s", 0.0),
    )


def collective_curve(entry: dict[str, Any], donor: str = "") -> CollectiveCurve:
    """One catalog collective; ``chip`` set when the entry is a transferred chip's own
    (its ``chip`` is not ``donor``, the chip the rest of the table comes from)."""
    own = entry.get("chip", donor) != donor
    return CollectiveCurve(
        collective_from_entry(entry),
        entry.get("source", ""),
        max_ranks=float(entry.get("max_ranks", float("inf"))),
        min_message_bytes=float(entry.get("min_message_bytes", 0.0)),
        max_message_bytes=float(entry.get("max_message_bytes", float("inf"))),
        band=band_from_entry(entry.get("band")),
        chip=entry["chip"] if own else "",
    )


def _known(chip_id: str) -> tuple[str, bool]:
    """``(chip id the catalog resolves, transferred by the default rule?)``."""
    from rackmath.catalog import kernel_efficiency as ke

    try:
        ke.resolve(chip_id)
        return chip_id, False
    except UnknownIdError:
        return DEFAULT_DONOR, True


@lru_cache(maxsize=64)
def efficiency_table(chip_id: str) -> EfficiencyTable:
    """Every fitted curve and collective of ``chip_id`` (or of the chip it transfers from).

    Chips without tables carry ``transferred=True``, ``chip`` = the donor and
    ``source="transferred from <chip>: ..."``.
    """
    from rackmath.catalog import kernel_efficiency as ke

    looked_up, by_default = _known(chip_id)
    donor, transferred = ke.resolve(looked_up)
    widen = ke.transfer_band() if (transferred or by_default) else {}
    curves: dict[CurveKey, Curve] = {}
    for entry in ke.op_entries(looked_up):
        key = curve_key(entry)
        if key not in curves:  # the first row of a key is the fit (rows are unique per key)
            band = band_from_entry(entry.get("band"))
            own = entry.get("chip", donor) != donor  # a transferred chip's own table
            curves[key] = Curve(
                op_from_entry(entry),
                entry["precision"],
                entry.get("source", ""),
                widened(band, widen, class_key(key)) if widen and not own else band,
                chip=entry["chip"] if own else "",
            )
    collectives = {
        _LEGACY_COLLECTIVES.get(name, name): collective_curve(entry, donor)
        for name, entry in sorted(ke.collective_entries(looked_up).items())
    }
    source = ke.origin(looked_up)
    if by_default:
        source = f"transferred from {donor} (default for chips the kernel catalog lacks): {source}"
    return EfficiencyTable(
        curves=tuple(curves.items()),
        collectives=tuple(collectives.items()),
        source=source,
        chip=donor,
        transferred=transferred or by_default,
        dsa_prefill_gathers_top_k=donor in kt.DSA_PREFILL_GATHERS_TOP_K,
    )


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


def grounded_table(chip_id: str, scalars: Efficiency) -> EfficiencyTable:
    """The table a deployment runs on. ``scalars.mode`` pure: the scalars on the pure roofline
    (``Efficiency.table``). Kernel: the chip's fitted kernel curves with the scalars multiplied
    in (compute fractions by ``flops_frac``, GEMM/MoE bandwidth by
    ``bandwidth_frac * weight_bandwidth_frac``, attention bandwidth by
    ``bandwidth_frac * kv_bandwidth_frac``) and ``overhead_s`` added once per step; an engine
    that runs NCCL only (``scalars.all_reduce == "nccl"``) loses the custom all-reduce curve."""
    if scalars.mode is EfficiencyMode.PURE:
        return scalars.table()
    table = efficiency_table(chip_id)
    if scalars.all_reduce == "nccl":  # an engine without the custom all-reduce kernel
        table = replace(table, collectives=tuple(c for c in table.collectives if c[0] != "all_reduce:custom"))
        scalars = replace(scalars, all_reduce="auto")
    if not scalars.scaled:
        return table
    weight_bw = scalars.bandwidth_frac * scalars.weight_bandwidth_frac
    kv_bw = scalars.bandwidth_frac * scalars.kv_bandwidth_frac
    attention = (OpClass.ATTENTION_DECODE, OpClass.ATTENTION_PREFILL)
    curves = tuple(
        (
            k,
            replace(
                c,
                efficiency=_scaled(
                    c.efficiency, scalars.flops_frac, kv_bw if k.op_class in attention else weight_bw
                ),
            ),
        )
        for k, c in table.curves
    )
    return replace(
        table,
        curves=curves,
        overhead_s=table.overhead_s + scalars.overhead_s,
        overhead_s_per_sequence=table.overhead_s_per_sequence + scalars.overhead_s_per_sequence,
    )


def efficiency_label(chip_id: str, efficiency: Efficiency) -> str:
    """The one line every result states about its efficiency: ``pure roofline`` or
    ``kernel-grounded (measured; <the kernel fit>)`` (``transferred from <chip>, scaled by
    <chip>'s own peaks`` for a chip without tables), with any scalars after ``x``."""
    scalars = f" x {efficiency.scalars_text()}" if efficiency.scaled else ""
    if efficiency.mode is EfficiencyMode.PURE:
        return "pure roofline" + scalars
    donor = donor_of(chip_id)
    where = f"transferred from {donor}, scaled by {chip_id}'s own peaks" if donor else "measured"
    fit = efficiency_table(chip_id).source.rsplit(": ", 1)[-1]  # the package fit, without the transfer prefix
    return f"kernel-grounded ({where}; {fit}){scalars}"


def describe(chip_id: str, efficiency: Efficiency) -> dict[str, Any]:
    """What a result's JSON says about the efficiency it used on a chip: ``mode`` (``kernel``
    / ``pure``), ``label`` (:func:`efficiency_label`), ``transferred_from`` (the donor chip, or
    None) and ``source``."""
    kernel = efficiency.mode is EfficiencyMode.KERNEL
    return {
        "mode": efficiency.mode.value,
        "label": efficiency_label(chip_id, efficiency),
        "transferred_from": donor_of(chip_id) if kernel else None,
        "source": grounded_table(chip_id, efficiency).source,
    }


def gemm_compute_frac(chip_id: str, fmt: str, rows: float, cols: float, depth: float) -> float:
    """The fitted GEMM curve's fraction of peak at one shape (``rows x depth`` times
    ``depth x cols``) in kernel format ``fmt`` (``"bfloat16"``, ``"fp8"``, ...): what a training
    step's large GEMMs reach on the chip (:func:`rackmath.core.efficiency.achieved_compute_frac`).
    Worked number: the pure roofline's curve gives 1 at every shape."""
    e, _, _ = efficiency_table(chip_id).curve(OpClass.GEMM, (fmt,))
    return float(achieved_compute_frac(e, rows, cols, depth))
