"""Extra KV-offload tiers (``data/offload_tiers.yaml``: CXL memory) beside the four memory
tiers of the prompt-cache analysis; the prefix-cache analysis offers both. And each chip's link
to its host's memory (``data/host_links.yaml``), what offloaded KV comes back over."""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rackmath.catalog.loader import CatalogError, catalog_entries
from rackmath.specs.economics import MemoryTierSpec


@cache
def offload_tiers() -> dict[str, MemoryTierSpec]:
    out: dict[str, MemoryTierSpec] = {}
    for raw in catalog_entries("offload_tiers.yaml", "tiers"):
        try:
            spec = MemoryTierSpec.model_validate(raw)
        except ValidationError as exc:
            raise CatalogError(f"offload_tiers.yaml entry {raw.get('id')!r}: {exc}") from exc
        out[spec.id] = spec
    return out


class HostLink(BaseModel):
    """A chip's link to host memory: its name and nominal bytes/s per direction, per chip."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chip: str
    link: str
    bandwidth_bytes_per_s_per_direction: float = Field(gt=0)
    confidence: Literal["vendor", "derived"] = "vendor"
    date: str
    source: list[str] = Field(min_length=1)
    notes: str = ""


@cache
def host_links() -> dict[str, HostLink]:
    out: dict[str, HostLink] = {}
    for raw in catalog_entries("host_links.yaml", "links"):
        try:
            link = HostLink.model_validate(raw)
        except ValidationError as exc:
            raise CatalogError(f"host_links.yaml entry {raw.get('chip')!r}: {exc}") from exc
        out[link.chip] = link
    return out


def host_link(chip_id: str) -> HostLink | None:
    """The host link of ``chip_id``, or None where the catalog states none."""
    return host_links().get(chip_id)
