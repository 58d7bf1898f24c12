"""Load ``data/measurements.yaml``: published measurements as frozen scenarios.

Every row of the reference table is either a :class:`~rackmath.specs.scenario.Scenario` or
an :class:`~rackmath.specs.scenario.UnsupportedRow` with its reason. Read once per process;
a malformed entry fails loudly with its id.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rackmath.catalog.loader import CatalogError
from rackmath.errors import InputError, RackmathError
from rackmath.specs.efficiency import ErrorBand
from rackmath.specs.model import parse_weight_classes
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
from rackmath.userfiles import load_yaml

#: Most entries a user's measurements file may hold: each is predicted four ways and the
#: correction is refitted once per source (the shipped file has 50 rows, read in ~1 s).
MAX_USER_MEASUREMENTS = 1_000


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


def _model_reference(value: Any, base_dir: Path | None) -> str:
    """A scenario's ``model``: a catalog id, ``hf:owner/name``, or a ``config.json`` path
    (relative to the measurements file's folder; ``catalog.resolve_model`` reads it)."""
    ref = str(value or "")
    if ref.endswith(".json") and not ref.startswith("hf:"):
        path = Path(ref)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise InputError("model", ref, "a catalog id, hf:owner/name or an existing config.json path")
        return str(path)
    return ref


def _scenario(prov: Provenance, s: dict[str, Any], base_dir: Path | None = None) -> Scenario:
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
        model_id=_model_reference(s.get("model", ""), base_dir),
        system_id=str(s.get("system", "")),
        chips=int(s.get("chips", 0)),
        plan=None if plan is None else ParallelPlan.parse(str(plan)),
        plan_note=str(s.get("plan_note", "")),
        weights=_precision(s.get("weights")),
        kv=_precision(s.get("kv")),
        compute=_precision(s.get("compute")),
        weight_classes=()
        if s.get("weight_classes") is None
        else parse_weight_classes(s["weight_classes"], f"row {prov.row_id} weight_classes"),
        batch=None if batch is None else int(batch),
        max_batch=None if cap is None else int(cap),
        input_tokens=int(s.get("input_tokens", 0)),
        output_tokens=int(s.get("output_tokens", 0)),
        kv_memory_frac=float(s.get("kv_memory_frac", DEFAULT_KV_MEMORY_FRAC)),
        kv_memory_of=KvMemoryOf(s.get("kv_memory_of", KvMemoryOf.FREE)),
        two_batch_overlap=bool(s.get("two_batch_overlap", False)),
        kv_read_per_query_head=bool(s.get("kv_read_per_query_head", False)),
        all_reduce=str(s.get("all_reduce", "auto")),
        training_run=str(s.get("training_run", "")),
    )


@cache
def measurements() -> MeasurementSet:
    data = resources.files("rackmath.catalog").joinpath("data")
    text = data.joinpath("measurements.yaml").read_text()
    return _parse(yaml.safe_load(text), "measurements.yaml", Path(str(data)), CatalogError)


def load_measurements(path: str | Path) -> MeasurementSet:
    """Measurements from a YAML file of the catalog's schema (your own rows). A scenario's
    ``model`` may name a catalog id, ``hf:owner/name`` or a ``config.json`` path relative to
    the file. Bad files raise :class:`InputError`, one line naming the entry."""
    path = Path(path)
    loaded = load_yaml(path, "--measurements")
    entries = loaded.get("measurements") if isinstance(loaded, dict) else None
    if isinstance(entries, list) and len(entries) > MAX_USER_MEASUREMENTS:
        allowed = (
            f"at most {MAX_USER_MEASUREMENTS:,} measurements (each is predicted and fitted; split the file)"
        )
        raise InputError("--measurements", f"{path} ({len(entries):,} entries)", allowed)
    return _parse(loaded, path.name, path.parent, InputError)


def _parse(loaded: Any, name: str, base_dir: Path, error: type[RackmathError]) -> MeasurementSet:
    def fail(message: str) -> RackmathError:
        if error is InputError:
            return InputError(name, message, "entries of the catalog's measurements.yaml schema")
        return error(f"{name}: {message}")

    loaded = loaded or {}
    entries = loaded.get("measurements") if isinstance(loaded, dict) else None
    if not isinstance(entries, list):
        raise fail("expected a list under 'measurements'")
    scenarios: list[Scenario] = []
    unsupported: list[UnsupportedRow] = []
    for raw in entries:
        try:
            prov = _provenance(raw)
            if ("scenario" in raw) == ("unsupported" in raw):
                raise CatalogError("needs exactly one of 'scenario' or 'unsupported'")
            if "scenario" in raw:
                scenarios.append(_scenario(prov, raw["scenario"], base_dir))
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
        except (RackmathError, KeyError, TypeError, ValueError, AttributeError) as exc:
            entry = raw.get("id") if isinstance(raw, dict) else raw
            raise fail(f"entry {entry!r}: {exc}") from exc
    return MeasurementSet(tuple(scenarios), tuple(unsupported))


#: The end-to-end band's file (generated; ``benchmarks/kernel_validation_report.py`` writes it).
END_TO_END_BAND_FILE = "end_to_end_band.yaml"


@cache
def end_to_end_band() -> ErrorBand:
    """The kernel-grounded model's end-to-end band as shipped: the 10th and 90th percentile of
    measured over predicted step time on the published serving rows
    (:func:`rackmath.analyses.reality.band_coverage.published_end_to_end_band`)."""
    raw = yaml.safe_load(
        resources.files("rackmath.catalog").joinpath("data", END_TO_END_BAND_FILE).read_text(encoding="utf-8")
    )
    return ErrorBand(float(raw["p10"]), float(raw["p90"]), int(raw["rows"]), str(raw["how"]))
