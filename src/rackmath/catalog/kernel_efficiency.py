"""Per-chip operator efficiencies fitted on measured kernel tables (catalog/data/kernel_efficiency.yaml).

``efficiency_table(chip_id, precision)`` returns the :class:`EfficiencyTable` the per-operator
cost model uses: for each operator class the fit of the dtype that computes at ``precision``
(bf16 when the chip has no fit at that precision), NCCL all-reduce as the scale-up tier, and
the source it came from. Chips without measured tables take the curves of the chip named in
the file's ``transferred`` map and are marked ``transferred=True``. Refit with
``rackmath calibrate kernels`` (see docs/calibration.md).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from rackmath.core.efficiency import CollectiveEfficiency, EfficiencyTable, OpClass, OpEfficiency
from rackmath.errors import UnknownIdError

DATA_PATH = Path(__file__).parent / "data" / "kernel_efficiency.yaml"
_PREFERRED_DTYPE = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "nvfp4": "nvfp4"}


@lru_cache(maxsize=4)
def _doc(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return dict(yaml.safe_load(fh))


def document(path: Path | None = None) -> dict[str, Any]:
    return _doc(str(path or DATA_PATH))


def known_chips(path: Path | None = None) -> list[str]:
    d = document(path)
    return sorted([*d["chips"], *d.get("transferred", {})])


def _op(entry: dict[str, Any]) -> OpEfficiency:
    return OpEfficiency(
        compute_frac=entry["compute_frac"], compute_half_rows=entry["compute_half_rows"],
        bandwidth_frac=entry["bandwidth_frac"], bandwidth_half_rows=entry["bandwidth_half_rows"],
        floor_s=entry["floor_s"], compute_half_cols=entry.get("compute_half_cols", 0.0),
        compute_half_depth=entry.get("compute_half_depth", 0.0),
        bandwidth_tile_depth=entry.get("bandwidth_tile_depth", 0.0),
        compute_tile_rows=entry.get("compute_tile_rows", 0.0),
    )


def op_entries(chip_id: str, path: Path | None = None) -> list[dict[str, Any]]:
    """The fitted rows of a measured chip (or of the chip it transfers from)."""
    d = document(path)
    donor = d.get("transferred", {}).get(chip_id, chip_id)
    if donor not in d["chips"]:
        raise UnknownIdError("chip with kernel efficiencies", chip_id, known_chips(path))
    return list(d["chips"][donor]["ops"])


def efficiency_table(chip_id: str, precision: str = "bf16", path: Path | None = None) -> EfficiencyTable:
    """The chip's fitted :class:`EfficiencyTable` for operators computing at ``precision``."""
    d = document(path)
    transfers = d.get("transferred", {})
    donor = transfers.get(chip_id, chip_id)
    if donor not in d["chips"]:
        raise UnknownIdError("chip with kernel efficiencies", chip_id, known_chips(path))
    entry = d["chips"][donor]
    want = _PREFERRED_DTYPE.get(precision, "bfloat16")
    by_class: list[tuple[OpClass, OpEfficiency]] = []
    for cls in OpClass:
        rows = [o for o in entry["ops"] if o["op_class"] == cls.value]
        pick = next((o for o in rows if o["dtype"] == want), None) or next(
            (o for o in rows if o["dtype"] == "bfloat16"), None)
        if pick is not None:
            by_class.append((cls, _op(pick)))
    ar = entry.get("collectives", {}).get("all_reduce")
    scale_up = (
        CollectiveEfficiency(ar["latency_s"], ar["bandwidth_frac"], ar.get("hop_latency_s", 0.0))
        if ar else CollectiveEfficiency()
    )
    meta = d.get("meta", {})
    origin = f"{meta.get('package', '?')}=={meta.get('package_version', '?')} fit ({entry.get('date', '?')})"
    transferred = chip_id in transfers
    return EfficiencyTable(
        by_class=tuple(by_class), scale_up=scale_up,
        source=f"transferred from {donor}: {origin}" if transferred else origin,
        transferred=transferred,
    )


def all_to_all(chip_id: str, path: Path | None = None) -> dict[str, CollectiveEfficiency]:
    """DeepEP low-latency dispatch / combine as fitted (one NVLink domain of 8 GPUs)."""
    d = document(path)
    donor = d.get("transferred", {}).get(chip_id, chip_id)
    if donor not in d["chips"]:
        raise UnknownIdError("chip with kernel efficiencies", chip_id, known_chips(path))
    comm = d["chips"][donor].get("collectives", {})
    return {n: CollectiveEfficiency(comm[n]["latency_s"], comm[n]["bandwidth_frac"])
            for n in ("dispatch", "combine") if n in comm}
