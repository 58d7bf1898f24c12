"""Per-chip operator efficiencies fitted on measured kernel tables (catalog/data/kernel_efficiency.yaml).

This module reads the data only (plain dicts, with their source); the typed
:class:`~rackmath.core.efficiency.EfficiencyTable` a cost model uses is built from it by
:func:`rackmath.analyses.kernels.tables.efficiency_table` (catalog/ does not import core/).
Chips without measured tables take the entries of the chip named in the file's
``transferred`` map. A chip both fitted (``chips``) and transferred (``transferred``) has tables
for some curves only (AMD MI300X: the committed ``kernel_tables/mi300x`` GEMM and all-reduce
tables): its own curves come first, the donor's fill every class, format and family it lacks,
and each entry says whose it is (``chip``). Refit with ``rackmath calibrate kernels`` (see
docs/calibration.md).
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


def _curve_id(entry: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a catalog row one curve: class, format, family (and MoE gating)."""
    return (entry["op_class"], entry["dtype"], entry.get("kind"), entry.get("gated", True))


def _own(chip_id: str, donor: str, path: Path | None) -> dict[str, Any]:
    """The entry of a transferred chip's own tables (``{}`` when it has none)."""
    return dict(document(path)["chips"].get(chip_id, {})) if donor != chip_id else {}


def own_curves(chip_id: str, path: Path | None = None) -> bool:
    """Whether a transferred chip has curves fitted on tables of its own (partial grounding)."""
    donor, transferred = resolve(chip_id, path)
    return transferred and bool(_own(chip_id, donor, path))


def op_entries(chip_id: str, path: Path | None = None) -> list[dict[str, Any]]:
    """The fitted operator rows of a chip, each with ``chip``: the chip whose tables it was
    fitted on. A measured chip's own; a transferred chip's own rows (if any) and the donor's
    for every curve it lacks."""
    donor, _ = resolve(chip_id, path)
    own = [{**e, "chip": chip_id} for e in _own(chip_id, donor, path).get("ops", [])]
    have = {_curve_id(e) for e in own}
    rest = [{**e, "chip": donor} for e in document(path)["chips"][donor]["ops"] if _curve_id(e) not in have]
    return own + rest


def collective_entries(chip_id: str, path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The fitted collectives (``all_reduce:nccl``, ``dispatch:deepep_ll``, ...) of a chip, each
    with ``chip`` as :func:`op_entries`: a transferred chip's own replace the donor's."""
    donor, _ = resolve(chip_id, path)
    donors = document(path)["chips"][donor].get("collectives", {})
    out = {n: {**e, "chip": donor} for n, e in donors.items()}
    owns = _own(chip_id, donor, path).get("collectives", {})
    out.update({n: {**e, "chip": chip_id} for n, e in owns.items()})
    return out


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
    fit = (
        f"fit on {meta['tables']} ({date})"
        if "tables" in meta
        else f"{meta.get('package', '?')}=={meta.get('package_version', '?')} fit ({date})"
    )
    if not transferred:
        return fit
    own = _own(chip_id, donor, path)
    if own:
        names = sorted(
            {f"{e['op_class']} {e['dtype']}" for e in own.get("ops", [])} | set(own.get("collectives", {}))
        )
        return f"transferred from {donor}: {fit}; own tables ({own.get('date', '?')}): {', '.join(names)}"
    return f"transferred from {donor}: {fit}"
