"""Load the serving-runtime profiles (``data/runtimes.yaml``)."""

from __future__ import annotations

from functools import cache

from pydantic import ValidationError

from rackmath.catalog.loader import CatalogError, catalog_entries, lookup
from rackmath.specs.runtime import RuntimeProfile


@cache
def runtimes() -> dict[str, RuntimeProfile]:
    out: dict[str, RuntimeProfile] = {}
    for raw in catalog_entries("runtimes.yaml", "runtimes"):
        try:
            profile = RuntimeProfile(**raw)
        except ValidationError as exc:
            raise CatalogError(f"runtimes.yaml entry {raw.get('id')!r}: {exc}") from exc
        out[profile.id] = profile
    return out


def runtime(runtime_id: str) -> RuntimeProfile:
    """A runtime profile by id (``vllm``, ``sglang``, ``trtllm``, ``ideal``)."""
    result: RuntimeProfile = lookup("runtime", runtime_id.lower(), runtimes())
    return result
