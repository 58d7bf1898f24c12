"""``rackmath calibrate kernels``: fit every chip with tables and write the catalog document.

The fit itself is :mod:`rackmath.analyses.kernel_fit`; this module turns its per-chip fits into
the YAML document of ``catalog/data/kernel_efficiency.yaml`` (parameters, rows used, sources,
date, fit time). Split from ``kernel_fit`` by responsibility (fitting vs writing the catalog).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rackmath.analyses.kernel_fit import (
    COMM_KINDS,
    TRANSFER,
    ChipData,
    ChipFit,
    ChipPeaks,
    fit_chip,
    fit_collectives,
    load_package_chip,
)
from rackmath.catalog import kernel_tables as kt
from rackmath.core.efficiency import OpEfficiency
from rackmath.errors import InputError


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
        **({"split_max": round(e.split_max, 2)} if e.split_max else {}),
        **({"max_tokens": e.max_tokens} if e.max_tokens < float("inf") else {}),
        **({"min_ep": e.min_ep} if e.min_ep > 1.0 else {}),
        **({"alternative": _params(e.alternative)} if e.alternative is not None else {}),
    }


def fit_to_dict(
    fit: ChipFit, date: str, comm_bands: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    ops = [
        {
            "op_class": f.op_class.value,
            "dtype": f.dtype,
            **({"kind": f.kind} if f.kind else {}),
            "precision": f.precision.value,
            **_params(f.efficiency),
            "rows_used": f.rows_used,
            "source": f.source,
        }
        for f in fit.ops
    ]
    comm = collectives_to_dict(fit, comm_bands)
    return {"ops": ops, "collectives": comm, "date": date}


def collectives_to_dict(fit: ChipFit, bands: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
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
            "rows_used": fit.comm_rows[name],
            "max_ranks": ranks,
            "min_message_bytes": low,
            "max_message_bytes": high,
            **({"band": bands[name]} if bands and name in bands else {}),
            "source": fit.sources.get(name, ""),
        }
    return out


def collective_bands(data: ChipData, peaks: ChipPeaks) -> dict[str, dict[str, Any]]:
    """Each collective's error band: fitted on 80% of the shapes, ``measured / predicted`` on the
    20% held out (:data:`rackmath.analyses.kernel_fit.HOLDOUT_MOD`), its 10th and 90th
    percentiles (:class:`rackmath.specs.efficiency.ErrorBand`, widened to contain 1)."""
    from rackmath.analyses.kernel_validation import _split
    from rackmath.core.efficiency import collective_time_s

    comm, _, _ = fit_collectives(data, peaks, _split(data, held_out=False))
    held = _split(data, held_out=True)
    out: dict[str, dict[str, Any]] = {}
    for name, e in comm.items():
        c = data.comm[name].take(held[name])
        if not len(c.latency_s):
            continue
        ratio = c.latency_s / collective_time_s(e, c.wire_bytes, peaks.scale_up_bytes_per_s, chips=c.chips)
        p10, p90 = np.quantile(ratio, [0.1, 0.9])
        out[name] = {
            "p10": round(float(min(p10, 1.0)), 4),
            "p90": round(float(max(p90, 1.0)), 4),
            "rows": len(ratio),
            "how": "held-out shapes (hash % 5 == 0), measured / predicted",
        }
    return out


def calibrate_collectives(chips: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Refit only the collectives of the chips with tables (seconds, not the minute of a full
    fit): ``{chip: collectives}`` for :func:`with_collectives`."""
    from rackmath.catalog import kernel_tables as kt

    refs = kt.discover()
    if not refs:
        raise InputError(
            "aiconfigurator-core",
            "not installed",
            f"pip install {kt.PACKAGE}=={kt.PACKAGE_VERSION} (the `kernels` extra)",
        )
    out: dict[str, dict[str, Any]] = {}
    for chip_id in chips or sorted(set(kt.CHIP_DIRS.values())):
        data = load_package_chip(chip_id, refs, kinds=COMM_KINDS)
        peaks = ChipPeaks.of(chip_id)
        comm, counts, ranges = fit_collectives(data, peaks)
        fit = ChipFit(chip_id, [], comm, counts, dict(data.sources), ranges)
        out[chip_id] = collectives_to_dict(fit, collective_bands(data, peaks))
    return out


def with_collectives(doc: dict[str, Any], collectives: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``doc`` (the catalog document) with each chip's ``collectives`` replaced, ops kept."""
    chips = {c: dict(entry) for c, entry in doc["chips"].items()}
    for chip_id, comm in collectives.items():
        if chip_id in chips:
            entry = {k: v for k, v in chips[chip_id].items() if k != "date"}
            chips[chip_id] = {**entry, "collectives": comm, "date": chips[chip_id].get("date")}
    return {**doc, "chips": chips}


def calibrate_kernels(
    chips: list[str] | None = None, from_files: list[Path] | None = None, date: str | None = None
) -> dict[str, Any]:
    """Fit the chips' efficiency parameters; returns the YAML document (``chips`` + ``meta``).

    Without ``from_files`` the installed package's tables are used; with them, each file's
    rows are fitted for the one chip named in ``chips``. The document is a function of the
    tables and ``date`` alone (default today; the fit is deterministic and its time is not
    written), so a refit with the shipped file's date reproduces it byte for byte.
    """
    from rackmath.catalog.loader import chips as catalog_chips

    date = date or _dt.date.today().isoformat()
    out: dict[str, Any] = {}
    if from_files:
        if not chips or len(chips) != 1:
            raise InputError("--chips", chips, "exactly one catalog chip id for the rows of --from FILE")
        data = ChipData(chips[0])
        for given in from_files:
            paths = (
                sorted([*Path(given).glob("*.csv"), *Path(given).glob("*.parquet")])
                if Path(given).is_dir()
                else [Path(given)]
            )
            for p in paths:
                data.add(kt.read_table(p), p.name)
        _ = catalog_chips()
        peaks = ChipPeaks.of(chips[0])
        out[chips[0]] = fit_to_dict(fit_chip(data, peaks), date, collective_bands(data, peaks))
    else:
        refs = kt.discover()
        if not refs:
            raise InputError(
                "aiconfigurator-core",
                "not installed",
                f"pip install {kt.PACKAGE}=={kt.PACKAGE_VERSION} (the `kernels` extra), or pass --from FILE",
            )
        wanted = chips or sorted(set(kt.CHIP_DIRS.values()))
        unknown = [c for c in wanted if c not in kt.CHIP_DIRS.values()]
        if unknown:
            known = ", ".join(sorted(kt.CHIP_DIRS.values()))
            raise InputError("--chips", unknown, f"chips with tables: {known}")
        for chip_id in wanted:
            data = load_package_chip(chip_id, refs)
            peaks = ChipPeaks.of(chip_id)
            out[chip_id] = fit_to_dict(fit_chip(data, peaks), date, collective_bands(data, peaks))
    return {
        "chips": out,
        "transferred": dict(TRANSFER),
        "meta": {
            "package": kt.PACKAGE,
            "package_version": kt.PACKAGE_VERSION,
            "date": date,
        },
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
