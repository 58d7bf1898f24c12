"""Convenience entry points that accept catalog ids or specs alike."""

from __future__ import annotations

from collections.abc import Sequence

from rackmath.analyses import explain as _explain
from rackmath.analyses.serving import Deployment, make_deployment
from rackmath.catalog import resolve_model
from rackmath.catalog import system as _system
from rackmath.core.roofline import PURE_ROOFLINE, Efficiency
from rackmath.specs import ModelSpec, Precision, SystemSpec


def deployment(
    model: str | ModelSpec,
    system: str | SystemSpec,
    *,
    chips: int | None = None,
    weights: str | Precision | None = None,
    kv: str | Precision | None = None,
    compute: str | Precision | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: Efficiency = PURE_ROOFLINE,
) -> Deployment:
    """A model (catalog id, alias, config.json path or spec) on a system (id or spec)."""
    model_spec = resolve_model(model) if isinstance(model, str) else model
    system_spec = _system(system) if isinstance(system, str) else system
    return make_deployment(
        model_spec,
        system_spec,
        chips=chips,
        weights=weights,
        kv=kv,
        compute=compute,
        usd_per_chip_hour=usd_per_chip_hour,
        efficiency=efficiency,
    )


def explain(
    deployment: Deployment,
    batches: Sequence[float] = _explain.DEFAULT_BATCHES,
    contexts: Sequence[float] = _explain.DEFAULT_CONTEXTS,
) -> _explain.Explanation:
    return _explain.explain(deployment, list(batches), list(contexts))
