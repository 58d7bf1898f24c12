"""Load the YAML catalogs shipped in ``rackmath/catalog/data`` into frozen specs.

Each file is read and validated once per process (``functools.cache``); a malformed entry
fails loudly at load time with the file, the entry and the field.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rackmath.errors import RackmathError, UnknownIdError
from rackmath.specs.hardware import ChipSpec, SystemSpec
from rackmath.specs.hf_config import load_config_file, model_from_config
from rackmath.specs.model import ActiveCountRule, ModelSpec, PublishedCounts

# libyaml's C parser when present (about 10x faster on these files), else the pure-Python one
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CatalogError(RackmathError):
    """A catalog file that does not validate: a bug in the shipped data, not user input."""


def read_data(name: str) -> dict[str, Any]:
    text = resources.files("rackmath.catalog").joinpath("data", name).read_text()
    data = yaml.load(text, Loader=_SafeLoader)
    if not isinstance(data, dict):
        raise CatalogError(f"{name}: expected a mapping at the top level")
    return data


def catalog_entries(name: str, key: str) -> list[dict[str, Any]]:
    entries = read_data(name).get(key)
    if not isinstance(entries, list):
        raise CatalogError(f"{name}: expected a list under {key!r}")
    return entries


_Spec = TypeVar("_Spec", bound=BaseModel)


def _validated(spec: type[_Spec], raw: dict[str, Any], origin: str) -> _Spec:
    """One catalog entry validated as ``spec``; a bad one is a CatalogError naming its file and id."""
    try:
        return spec.model_validate(raw)
    except ValidationError as exc:
        raise CatalogError(f"{origin} entry {raw.get('id')!r}: {exc}") from exc


def by_id(name: str, key: str, spec: type[_Spec]) -> dict[str, _Spec]:
    """Every entry under ``key`` in the catalog file ``name``, validated as ``spec``, by id."""
    out: dict[str, _Spec] = {}
    for raw in catalog_entries(name, key):
        entry = _validated(spec, raw, name)
        out[entry.id] = entry  # type: ignore[attr-defined]
    return out


@cache
def chips() -> dict[str, ChipSpec]:
    return by_id("chips.yaml", "chips", ChipSpec)


@cache
def systems() -> dict[str, SystemSpec]:
    known_chips = chips()
    out: dict[str, SystemSpec] = {}
    for raw in catalog_entries("systems.yaml", "systems"):
        chip_id = raw.get("chip")
        if chip_id not in known_chips:
            raise CatalogError(f"systems.yaml entry {raw.get('id')!r}: unknown chip {chip_id!r}")
        spec = _validated(SystemSpec, {**raw, "chip": known_chips[chip_id]}, "systems.yaml")
        out[spec.id] = spec
    return out


def _model_entry(raw: dict[str, Any]) -> ModelSpec:
    published = raw.get("published")
    return model_from_config(
        raw["config"],
        model_id=raw["id"],
        name=raw.get("name"),
        aliases=tuple(raw.get("aliases") or ()),
        published=(
            PublishedCounts(
                params_total=float(published["params_total"]),
                params_active=float(published["params_active"]),
                active_counts=ActiveCountRule(
                    published.get("active_counts", ActiveCountRule.EMBEDDING_AND_HEAD)
                ),
                note=str(published.get("note", "")),
                source=str(published.get("source", "")),
                tolerance_frac=float(published.get("tolerance_frac", 0.02)),
            )
            if published
            else None
        ),
        source=tuple(raw.get("source") or ()),
        date=str(raw.get("date", "")),
        confidence=str(raw.get("confidence", "")),
        notes=tuple([raw["note"]] if raw.get("note") else ()),
    )


@cache
def models() -> dict[str, ModelSpec]:
    out: dict[str, ModelSpec] = {}
    for raw in catalog_entries("models.yaml", "models"):
        try:
            spec = _model_entry(raw)
        except (RackmathError, KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"models.yaml entry {raw.get('id')!r}: {exc}") from exc
        out[spec.id] = spec
    return out


@cache
def _model_aliases() -> dict[str, str]:
    return {alias: m.id for m in models().values() for alias in (m.id, *m.aliases)}


def lookup(kind: str, given: str, table: dict[str, Any]) -> Any:
    key = given.strip().lower()
    if key in table:
        return table[key]
    raise UnknownIdError(kind, given, table)


def chip(chip_id: str) -> ChipSpec:
    return lookup("chip", chip_id, chips())


def system(system_id: str) -> SystemSpec:
    """A catalog system by id; a chip id is refused with the systems built from that chip."""
    try:
        return lookup("system", system_id, systems())
    except UnknownIdError:
        key = str(system_id).strip().lower()
        if key not in chips():
            raise
        holders = [s.id for s in systems().values() if s.chip.id == key]
        error = UnknownIdError("system", system_id, systems())
        error.args = (
            f"unknown system {system_id!r}: {key} is a chip, not a system; "
            f"systems built from it: {', '.join(holders)}",
        )
        raise error from None


def model(model_id: str) -> ModelSpec:
    """A catalog model by id or alias (``deepseek-r1`` is ``deepseek-v3``)."""
    canonical = lookup("model", model_id, _model_aliases())
    return models()[canonical]


def resolve_model(reference: str) -> ModelSpec:
    """A catalog id, a path to a local ``config.json``, or ``hf:owner/name`` on the Hub."""
    if reference.startswith("hf:"):
        from rackmath.specs.hf_config import load_config_from_hub

        return load_config_from_hub(reference[3:])
    path = Path(reference)
    if reference.endswith(".json") or path.is_file():
        return load_config_file(path)
    return model(reference)
