"""Chip power for the energy model: the ceiling (TDP, chips.yaml) and the hot-idle floor
(``data/chip_power.yaml``; a fraction of TDP, marked as an estimate, where none is sourced)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from rackmath.catalog.loader import CatalogError, read_data
from rackmath.specs.hardware import ChipSpec


@dataclass(frozen=True)
class ChipPower:
    """Per-chip power envelope (W) with where the floor comes from."""

    chip_id: str
    idle_w: float
    max_w: float
    idle_source: str
    idle_estimate: bool

    @property
    def label(self) -> str:
        return f"{self.idle_w:,.0f}-{self.max_w:,.0f} W per chip" + (
            " (idle floor estimated)" if self.idle_estimate else ""
        )


@cache
def _table() -> tuple[float, str, dict[str, dict[str, object]]]:
    raw = read_data("chip_power.yaml")
    frac = raw.get("default_idle_frac_of_tdp")
    if not isinstance(frac, int | float) or not 0 < frac < 1:
        raise CatalogError("chip_power.yaml: default_idle_frac_of_tdp must be a fraction in (0, 1)")
    entries = {str(e["id"]): e for e in raw.get("chips", [])}
    return float(frac), str(raw.get("default_source", "")), entries


def chip_power(chip: ChipSpec) -> ChipPower | None:
    """The chip's floor and ceiling, or None when no TDP is published (no energy then)."""
    if chip.tdp_w is None:
        return None
    frac, default_source, entries = _table()
    entry = entries.get(chip.id)
    if entry is None:
        return ChipPower(chip.id, frac * chip.tdp_w, chip.tdp_w, default_source, True)
    idle = float(entry["idle_w"])  # type: ignore[arg-type]
    if not 0 < idle < chip.tdp_w:
        raise CatalogError(f"chip_power.yaml entry {chip.id!r}: idle_w must be in (0, tdp_w)")
    return ChipPower(chip.id, idle, chip.tdp_w, str(entry["source"]), bool(entry.get("estimate", False)))
