"""``rackmath calibrate kernels``: fit every chip with tables and write the catalog document.

The fit itself is :mod:`rackmath.analyses.kernels.fit`; this module turns its per-chip fits into
the YAML document of ``catalog/data/kernel_efficiency.yaml`` (parameters, rows used, sources,
date, fit time). Split from ``kernel_fit`` by responsibility (fitting vs writing the catalog).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rackmath.analyses.kernels import bands as kb
from rackmath.analyses.kernels.fit import (
    HELD_OUT_CHIPS,
    TRANSFER,
    ChipData,
    ChipFit,
    ChipPeaks,
    deterministic_threads,
    fit_chip,
    load_package_chip,
)
from rackmath.catalog import kernel_tables as kt
from rackmath.errors import InputError
from rackmath.progress import track
from rackmath.specs.efficiency import OpEfficiency


def _params(e: OpEfficiency) -> dict[str, Any]:
    """One fitted curve's parameters as catalog data; a second kernel's curve nests under
    ``alternative`` with its ``kernel`` name."""
    return {
        **({"kernel": e.kernel} if e.kernel else {}),
        "compute_frac": round(e.compute_frac, 4),
        "compute_half_rows": round(e.compute_half_rows, 3),
        "compute_half_cols": round(e.compute_half_cols, 3),
        "compute_half_depth": round(e.compute_half_depth, 3),
        "bandwidth_frac": round(e.bandwidth_frac, 4),
        "bandwidth_half_rows": round(e.bandwidth_half_rows, 3),
        "bandwidth_tile_depth": e.bandwidth_tile_depth,
        "compute_tile_rows": e.compute_tile_rows,
        "bandwidth_tile": e.bandwidth_tile,
        "overlap_power": round(e.overlap_power, 3),
        "routing_bytes_per_element": round(e.routing_bytes_per_element, 4),
        "floor_s": float(f"{e.floor_s:.4g}"),
        **({"split_tokens": round(e.split_tokens, 1)} if e.split_tokens else {}),
        **({"split_max": float(f"{e.split_max:.4g}")} if e.split_max else {}),
        **({"split_fill": round(e.split_fill, 1)} if e.split_fill else {}),
        **({"compute_tile_cols": e.compute_tile_cols} if e.compute_tile_cols else {}),
        **({"block_bytes": round(e.block_bytes, 1)} if e.block_bytes else {}),
        **({"block_tile_rows": e.block_tile_rows} if e.block_tile_rows else {}),
        **({"unaligned_slowdown": round(e.unaligned_slowdown, 4)} if e.unaligned_slowdown else {}),
        **({"chain_frac": float(f"{e.chain_frac:.4g}")} if e.chain_frac else {}),
        **(
            {"spill_bytes": e.spill_bytes, "spill_passes": round(e.spill_passes, 4)} if e.spill_passes else {}
        ),
        **({"warm_speedup": round(e.warm_speedup, 3)} if e.warm_speedup else {}),
        **({"max_tokens": e.max_tokens} if e.max_tokens < float("inf") else {}),
        **({"min_ep": e.min_ep} if e.min_ep > 1.0 else {}),
        **({"only_cols": e.only_cols} if e.only_cols else {}),
        **({"alternative": _params(e.alternative)} if e.alternative is not None else {}),
    }


def fit_to_dict(fit: ChipFit, date: str, held: kb.HeldOutValues | None = None) -> dict[str, Any]:
    """One chip's catalog entry; with ``held``, every curve (and collective) carries its
    held-out band (:mod:`rackmath.analyses.kernels.bands`)."""
    bands = held.bands if held is not None else {}
    comm_bands = held.comm_bands if held is not None else {}
    ops = [
        {
            "op_class": f.op_class.value,
            "dtype": f.dtype,
            **({"kind": f.kind} if f.kind else {}),
            **({"head_dim": f.head_dim} if f.head_dim else {}),
            "precision": f.precision.value,
            **_params(f.efficiency),
            "rows_used": f.rows_used,
            "source": f.source,
            **({"band": bands[f.curve_id].to_dict()} if f.curve_id in bands else {}),
        }
        for f in fit.ops
    ]
    comm = collectives_to_dict(fit, comm_bands)
    return {"ops": ops, "collectives": comm, "date": date}


def collectives_to_dict(fit: ChipFit, bands: dict[str, kb.Band] | None = None) -> dict[str, Any]:
    """The fitted collectives of a chip as catalog data: the curve, the rows it used, the largest
    group and the message range they measured (outside them a step says it extrapolated), the
    table, and (``bands``) the held-out error band."""
    out: dict[str, Any] = {}
    for name, c in fit.comm.items():
        ranks, low, high = fit.comm_range.get(name, (float("inf"), 0.0, float("inf")))
        out[name] = {
            "latency_s": float(f"{c.latency_s:.4g}"),
            "hop_latency_s": float(f"{c.hop_latency_s:.4g}"),
            "pipeline_latency_s": float(f"{c.pipeline_latency_s:.4g}"),
            "bandwidth_frac": round(c.bandwidth_frac, 4),
            # only where fitted (PCIe hosts): every other entry stays as it was
            **(
                {"group_bandwidth_power": round(c.group_bandwidth_power, 3)}
                if c.group_bandwidth_power
                else {}
            ),
            # only where fitted (DeepEP low-latency): every other entry stays as it was
            **({"sm_token_s": float(f"{c.sm_token_s:.4g}")} if c.sm_token_s else {}),
            "rows_used": fit.comm_rows[name],
            "max_ranks": ranks,
            "min_message_bytes": low,
            "max_message_bytes": high,
            "source": fit.sources.get(name, ""),
            **({"band": bands[name].to_dict()} if bands and name in bands else {}),
        }
    return out


def fit_package_chip(
    chip_id: str, refs: list[kt.TableRef], committed: tuple[str, ...] | list[str] = ()
) -> tuple[ChipData, kb.HeldOutValues, ChipFit]:
    """One chip's tables (the package's, or the catalog's own where ``chip_id`` is in
    ``committed``), its held-out-value bands and its fit on every row (on one BLAS thread:
    :func:`~rackmath.analyses.kernels.fit.deterministic_threads`). A committed table too small
    to hold values out gets in-sample bands (:func:`in_sample_bands`)."""
    with deterministic_threads():
        own = chip_id in committed
        data = load_committed_chip(chip_id) if own else load_package_chip(chip_id, refs)
        peaks = ChipPeaks.of(chip_id)
        held = kb.held_out_value_bands(data, peaks)
        fit = fit_chip(data, peaks)
        if own:
            in_sample_bands(held, fit, data, peaks)
    return data, held, fit


@dataclass(frozen=True)
class MeasuredFit:
    """A machine's own tables fitted for one catalog chip (``calibrate kernels --from``)."""

    data: ChipData
    fit: ChipFit
    peaks: ChipPeaks
    #: the curves' held-out-value bands (None when not asked for: :func:`fit_measured`)
    held: kb.HeldOutValues | None


def measured_rows(chip_id: str, from_files: list[Path]) -> ChipData:
    """The rows of ``from_files`` (tables, or folders of ``*.csv`` / ``*.parquet``, each
    folder's files in name order) as catalog chip ``chip_id``'s operator rows, unfitted."""
    from rackmath.catalog.loader import chips as catalog_chips

    data = ChipData(chip_id)
    for given in from_files:
        paths = (
            sorted([*Path(given).glob("*.csv"), *Path(given).glob("*.parquet")])
            if Path(given).is_dir()
            else [Path(given)]
        )
        for p in paths:
            data.add(kt.read_table(p), p.name)
    _ = catalog_chips()
    return data


def fit_measured(chip_id: str, from_files: list[Path], bands: bool = True) -> MeasuredFit:
    """Fit the rows of ``from_files`` (tables, or folders of ``*.csv`` / ``*.parquet``) as
    catalog chip ``chip_id``'s, with their held-out-value bands unless ``bands`` is False (a
    comparison with the shipped curves needs the fit alone; the bands refit each curve once
    per held-out value, about as long again)."""
    data = measured_rows(chip_id, from_files)
    peaks = ChipPeaks.of(chip_id)
    with deterministic_threads():
        held = kb.held_out_value_bands(data, peaks) if bands else None
        fit = fit_chip(data, peaks)
    return MeasuredFit(data, fit, peaks, held)


def document(
    chips: dict[str, Any], date: str, widening: dict[str, Any] | None = None, tables: list[str] | None = None
) -> dict[str, Any]:
    """The catalog's YAML document around the chips' entries (:func:`fit_to_dict` each); its
    ``meta`` names the package's tables, or the measured ``tables`` a ``--from`` fit read."""
    where = {"tables": ", ".join(tables)} if tables else {
        "package": kt.PACKAGE,
        "package_version": kt.PACKAGE_VERSION,
    }  # fmt: skip
    return {
        "chips": chips,
        "transferred": dict(TRANSFER),
        **({"transfer_band": widening} if widening else {}),
        "meta": {**where, "date": date},
    }


def measured_document(m: MeasuredFit, chip_id: str, date: str | None = None) -> dict[str, Any]:
    """The YAML document of a ``--from`` fit (with its bands): the chip's entry, ``meta.tables``
    its tables; ``date`` default today."""
    date = date or _dt.date.today().isoformat()
    if m.held is None:
        raise ValueError("a --from document carries its curves' bands: fit_measured(..., bands=True)")
    tables = sorted(set(m.data.sources.values()))
    return document({chip_id: fit_to_dict(m.fit, date, m.held)}, date, tables=tables)


def calibrate_kernels(
    chips: list[str] | None = None, from_files: list[Path] | None = None, date: str | None = None
) -> dict[str, Any]:
    """Fit the chips' efficiency parameters; returns the YAML document (``chips`` + ``meta``).

    Without ``from_files`` the installed package's tables are used; with them, each file's
    rows are fitted for the one chip named in ``chips`` (:func:`fit_measured`). The document is
    a function of the tables and ``date`` alone (default today; the fit is deterministic and
    its time is not written), so a refit with the shipped file's date reproduces it byte for
    byte.
    """
    date = date or _dt.date.today().isoformat()
    if from_files:
        if not chips or len(chips) != 1:
            raise InputError("--chips", chips, "exactly one catalog chip id for the rows of --from FILE")
        return measured_document(fit_measured(chips[0], from_files), chips[0], date)
    out: dict[str, Any] = {}
    refs = kt.discover()
    committed = kt.committed_chips()
    with_tables = sorted({*kt.CHIP_DIRS.values(), *committed})
    wanted = chips or with_tables
    unknown = [c for c in wanted if c not in with_tables]
    if unknown:
        raise InputError("--chips", unknown, f"chips with tables: {', '.join(with_tables)}")
    if not refs and any(c not in committed for c in wanted):
        raise InputError(
            "aiconfigurator-core",
            "not installed",
            f"pip install {kt.PACKAGE}=={kt.PACKAGE_VERSION} (the `kernels` extra), or pass --from FILE",
        )
    # held-out chips: the targets' rows and own held-out ratios, the donors' fits
    targets: dict[str, tuple[ChipData, dict[str, Any]]] = {}
    donors: dict[str, ChipFit] = {}
    for chip_id in track(wanted, "Fitting kernel efficiencies (chips)"):
        data, held, fit = fit_package_chip(chip_id, refs, committed)
        out[chip_id] = fit_to_dict(fit, date, held)
        if chip_id in HELD_OUT_CHIPS:
            targets[chip_id] = (data, held.by_class())
        if chip_id in HELD_OUT_CHIPS.values():
            donors[chip_id] = fit
    pairs = {t: d for t, d in HELD_OUT_CHIPS.items() if t in targets and d in donors}
    widening: dict[str, Any] = {}
    if pairs:
        across = {}
        for target, donor in sorted(pairs.items()):
            ops, comm = kb.curve_ratios(donors[donor], targets[target][0], ChipPeaks.of(target), None)
            across[target] = kb.by_class(ops, comm)
        widening = kb.transfer_widening({t: targets[t][1] for t in pairs}, across)
    return document(out, date, widening)


def load_committed_chip(chip_id: str) -> ChipData:
    """The tables committed with the catalog for ``chip_id`` (``catalog/data/kernel_tables``):
    a chip the package does not cover, fitted the same way (its other classes transfer)."""
    data = ChipData(chip_id)
    for path in kt.committed_tables(chip_id):
        data.add(kt.read_table(path), kt.committed_source(path))
    return data


def in_sample_bands(held: kb.HeldOutValues, fit: ChipFit, data: ChipData, peaks: ChipPeaks) -> None:
    """Give a curve of a committed table too small to hold rows out (fewer than
    :data:`~rackmath.analyses.kernel_bands.MIN_BAND_ROWS` held-out calls and no pool) the band of
    its own rows under the fit that saw them, and say so (``how``: in-sample). Narrower than a
    held-out band would be: a lower bound of the curve's error."""
    ops, comm = kb.curve_ratios(fit, data, peaks, None)
    for key, ratios in ops.items():
        if key not in held.bands:
            held.bands[key] = kb.band_of(ratios, f"in-sample: {ratios.size} rows, too few to hold values out")
    for name, ratios in comm.items():
        if name not in held.comm_bands:
            held.comm_bands[name] = kb.band_of(
                ratios, f"in-sample: {ratios.size} rows, too few to hold values out"
            )


def holds_every_held_out_pair(chips: Any) -> bool:
    """Whether a (partial) refit of ``chips`` holds both ends of every held-out chip pair
    (:data:`~rackmath.analyses.kernels.fit.HELD_OUT_CHIPS`): only then is its transfer widening
    a full refit's."""
    return all(t in chips and d in chips for t, d in HELD_OUT_CHIPS.items())


def with_chips(shipped: dict[str, Any], partial: dict[str, Any]) -> dict[str, Any]:
    """The shipped catalog document with a partial refit's chips put in (the others kept), in
    the chip order a full refit writes (sorted), so a full refit of the result reproduces it
    byte for byte; the transfer widening is the shipped one unless the refit holds both chips
    of every held-out pair it is measured on (then it is the full refit's)."""
    chips = {**shipped.get("chips", {}), **partial["chips"]}
    band = partial.get("transfer_band") if holds_every_held_out_pair(partial["chips"]) else None
    return {
        **shipped,
        "chips": dict(sorted(chips.items())),
        "transferred": partial["transferred"],
        "meta": partial["meta"],
        **({"transfer_band": band} if band is not None else {}),
    }


#: The shipped catalog's header (``catalog/data/kernel_efficiency.yaml``).
HEADER = (
    "# kernel_efficiency.yaml -- per-operator efficiencies fitted by `rackmath calibrate kernels`\n"
    "# on measured kernel latency tables (see docs/calibration.md). Data, not code: refit, do not edit.\n"
)


def catalog_text(doc: dict[str, Any]) -> str:
    """The catalog file's text for a fitted document (the one serialization: a refit compares
    byte for byte)."""
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=200)
