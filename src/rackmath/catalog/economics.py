"""Load the price and memory-tier catalogs (``data/prices.yaml``, ``data/memory_tiers.yaml``).

Users add or override prices with their own YAML file in the same schema
(:func:`load_prices_file`, ``--prices FILE`` on the command line); a user entry with the id
of a shipped one replaces it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rackmath.catalog.loader import CatalogError, by_id, catalog_entries, lookup
from rackmath.errors import InputError
from rackmath.specs.economics import MemoryTierSpec, ModelPrice
from rackmath.userfiles import load_yaml


def _price_entries(raw_entries: list[dict[str, Any]], origin: str, *, user: bool) -> dict[str, ModelPrice]:
    out: dict[str, ModelPrice] = {}
    for raw in raw_entries:
        if not isinstance(raw, dict):
            raise InputError(origin, raw, "a list of price entries (mappings)")
        try:
            spec = ModelPrice.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = f"{origin} entry {raw.get('id')!r}: {where}: {first['msg']}"
            if user:
                raise InputError("--prices", message, "entries in the prices.yaml schema") from None
            raise CatalogError(message) from exc
        out[spec.id] = spec
    return out


@cache
def prices() -> dict[str, ModelPrice]:
    """The shipped price catalog, by id."""
    return _price_entries(catalog_entries("prices.yaml", "prices"), "prices.yaml", user=False)


def load_prices_file(path: str | Path) -> dict[str, ModelPrice]:
    """Prices from a user's YAML file (a top-level ``prices:`` list, same schema as shipped)."""
    file = Path(path)
    if not file.is_file():
        raise InputError("--prices", str(path), "an existing YAML file")
    data = load_yaml(file, "--prices")
    if not isinstance(data, dict) or not isinstance(data.get("prices"), list):
        raise InputError("--prices", str(path), "a YAML mapping with a 'prices:' list")
    return _price_entries(data["prices"], str(path), user=True)


def price_table(extra_file: str | Path | None = None) -> dict[str, ModelPrice]:
    """The shipped prices, with a user's file (if any) added on top."""
    table = dict(prices())
    if extra_file is not None:
        table.update(load_prices_file(extra_file))
    return table


def price(model_id: str, table: dict[str, ModelPrice] | None = None) -> ModelPrice:
    """One model's prices by id (``claude-opus-4.6``); unknown ids suggest near misses."""
    result: ModelPrice = lookup("priced model", model_id, table if table is not None else prices())
    return result


def providers(table: dict[str, ModelPrice] | None = None) -> tuple[str, ...]:
    return tuple(sorted({p.provider for p in (table if table is not None else prices()).values()}))


@cache
def memory_tiers() -> dict[str, MemoryTierSpec]:
    """The shipped memory tiers by id, fastest first."""
    tiers = by_id("memory_tiers.yaml", "tiers", MemoryTierSpec)
    return dict(sorted(tiers.items(), key=lambda item: item[1].level))


def memory_tier(tier_id: str) -> MemoryTierSpec:
    result: MemoryTierSpec = lookup("memory tier", tier_id, memory_tiers())
    return result
