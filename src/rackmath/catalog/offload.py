"""Extra KV-offload tiers (``data/offload_tiers.yaml``: CXL memory) beside the four memory
tiers of the prompt-cache analysis; the prefix-cache analysis offers both."""

from __future__ import annotations

from functools import cache

from pydantic import ValidationError

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
