"""Load ``data/measurements.yaml``: published measurements as frozen scenarios.

Every row of the reference table is either a :class:`~rackmath.specs.scenario.Scenario` or
an :class:`~rackmath.specs.scenario.UnsupportedRow` with its reason. Read once per process;
a malformed entry fails loudly with its id.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from rackmath.catalog.loader import CatalogError
from rackmath.errors import RackmathError
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision
from rackmath.specs.scenario import (
    DEFAULT_KV_MEMORY_FRAC,
    KvMemoryOf,
    Metric,
    Phase,
    Provenance,
    Scenario,
    UnsupportedRow,
)


@dataclass(frozen=True)
class MeasurementSet:
    scenarios: tuple[Scenario, ...]
    unsupported: tuple[UnsupportedRow, ...]

    @property
    def total(self) -> int:
        return len(self.scenarios) + len(self.unsupported)


def _provenance(raw: dict[str, Any]) -> Provenance:
    return Provenance(
        row_id=int(raw["id"]),
        source=str(raw["source"]),
        source_key=str(raw["source_key"]),
        source_section=str(raw.get("source_section", "")),
        url=str(raw["url"]),
        quote=str(raw["quote"]),
        confidence=str(raw["confidence"]),
        notes=str(raw.get("notes", "")),
    )


def _precision(value: Any) -> Precision | None:
    return None if value is None else Precision.parse(str(value))


def _scenario(prov: Provenance, s: dict[str, Any]) -> Scenario:
    plan = s.get("plan")
    batch = s.get("batch")
    cap = s.get("max_batch")
    return Scenario(
        provenance=prov,
        phase=Phase(s["phase"]),
        metric=Metric(s["metric"]),
        value=float(s["value"]),
        unit=str(s["unit"]),
        conversion=str(s.get("conversion", "")),
        model_id=str(s.get("model", "")),
        system_id=str(s.get("system", "")),
        chips=int(s.get("chips", 0)),
        plan=None if plan is None else ParallelPlan.parse(str(plan)),
        plan_note=str(s.get("plan_note", "")),
        weights=_precision(s.get("weights")),
        kv=_precision(s.get("kv")),
        compute=_precision(s.get("compute")),
        batch=None if batch is None else int(batch),
        max_batch=None if cap is None else int(cap),
        input_tokens=int(s.get("input_tokens", 0)),
        output_tokens=int(s.get("output_tokens", 0)),
        kv_memory_frac=float(s.get("kv_memory_frac", DEFAULT_KV_MEMORY_FRAC)),
        kv_memory_of=KvMemoryOf(s.get("kv_memory_of", KvMemoryOf.FREE)),
        two_batch_overlap=bool(s.get("two_batch_overlap", False)),
        training_run=str(s.get("training_run", "")),
    )


@cache
def measurements() -> MeasurementSet:
    text = resources.files("rackmath.catalog").joinpath("data", "measurements.yaml").read_text()
    entries = (yaml.safe_load(text) or {}).get("measurements")
    if not isinstance(entries, list):
        raise CatalogError("measurements.yaml: expected a list under 'measurements'")
    scenarios: list[Scenario] = []
    unsupported: list[UnsupportedRow] = []
    for raw in entries:
        try:
            prov = _provenance(raw)
            if ("scenario" in raw) == ("unsupported" in raw):
                raise CatalogError("needs exactly one of 'scenario' or 'unsupported'")
            if "scenario" in raw:
                scenarios.append(_scenario(prov, raw["scenario"]))
            else:
                pub = raw.get("published") or {}
                unsupported.append(
                    UnsupportedRow(
                        provenance=prov,
                        metric=str(pub.get("metric", "")),
                        value=str(pub.get("value", "")),
                        unit=str(pub.get("unit", "")),
                        reason=str(raw["unsupported"]),
                    )
                )
        except (RackmathError, KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"measurements.yaml entry {raw.get('id')!r}: {exc}") from exc
    return MeasurementSet(tuple(scenarios), tuple(unsupported))
