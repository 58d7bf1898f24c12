"""Per-chip operator efficiencies fitted on measured kernel tables (catalog/data/kernel_efficiency.yaml).

This module reads the data only (plain dicts, with their source); the typed
:class:`~rackmath.core.efficiency.EfficiencyTable` a cost model uses is built from it by
:func:`rackmath.analyses.kernels.tables.efficiency_table` (catalog/ does not import core/).
Chips without measured tables take the entries of the chip named in the file's
``transferred`` map. Refit with ``rackmath calibrate kernels`` (see docs/calibration.md).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from rackmath.errors import UnknownIdError

DATA_PATH = Path(__file__).parent / "data" / "kernel_efficiency.yaml"


@lru_cache(maxsize=4)
def _doc(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        # libyaml's C parser when present (as rackmath.catalog.loader): ~10x faster on this file
        return dict(yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def document(path: Path | None = None) -> dict[str, Any]:
    """The whole YAML document: ``chips``, ``transferred``, ``meta``."""
    return _doc(str(path or DATA_PATH))


def known_chips(path: Path | None = None) -> list[str]:
    d = document(path)
    return sorted([*d["chips"], *d.get("transferred", {})])


def resolve(chip_id: str, path: Path | None = None) -> tuple[str, bool]:
    """``(chip whose fit applies, transferred?)``; unknown chips raise :class:`UnknownIdError`."""
    d = document(path)
    donor = d.get("transferred", {}).get(chip_id, chip_id)
    if donor not in d["chips"]:
        raise UnknownIdError("chip with kernel efficiencies", chip_id, known_chips(path))
    return donor, donor != chip_id


def op_entries(chip_id: str, path: Path | None = None) -> list[dict[str, Any]]:
    """The fitted operator rows of a measured chip (or of the chip it transfers from)."""
    donor, _ = resolve(chip_id, path)
    return list(document(path)["chips"][donor]["ops"])


def collective_entries(chip_id: str, path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The fitted collectives (``all_reduce``, ``dispatch``, ``combine``) of a chip."""
    donor, _ = resolve(chip_id, path)
    return dict(document(path)["chips"][donor].get("collectives", {}))


def transfer_band(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """How much wider a transferred chip's error bands are, per class: ``{class: {p10, p90,
    how}}`` (factors on the band's edges; ``"*"``: every class pooled), measured on the
    held-out chips by ``rackmath calibrate kernels``; empty in a catalog written before."""
    return dict(document(path).get("transfer_band", {}))


def origin(chip_id: str, path: Path | None = None) -> str:
    """Where a chip's numbers come from, as one line."""
    donor, transferred = resolve(chip_id, path)
    d = document(path)
    meta = d.get("meta", {})
    date = d["chips"][donor].get("date", "?")
    fit = f"{meta.get('package', '?')}=={meta.get('package_version', '?')} fit ({date})"
    return f"transferred from {donor}: {fit}" if transferred else fit
