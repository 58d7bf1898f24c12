"""The deployment search's refusals before any work: precision families no searched system
has, and a search larger than its budget of deployments (plans x batches x families).
``plan`` (:mod:`rackmath.analyses.deploy.search`) and ``pareto``
(:mod:`rackmath.analyses.deploy.frontier`) raise them, so the API refuses what the CLI does."""

from __future__ import annotations

from rackmath.analyses.deploy.candidates import (
    BATCH_GRID,
    DEFAULT_MAX_CP,
    PRECISION_CHOICES,
    enumerate_plans,
    precision_family,
)
from rackmath.errors import InputError
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec


def check_precisions(
    model: ModelSpec, systems: list[SystemSpec], precisions: tuple[str, ...] | list[str]
) -> None:
    """Refuse a precision family name not in :data:`PRECISION_CHOICES`, and families no
    searched system has a peak for (nothing to search)."""
    for name in precisions:
        if name not in PRECISION_CHOICES:
            raise InputError("--precision", name, ", ".join(PRECISION_CHOICES))
    if any(precision_family(p, model, s) is not None for s in systems for p in precisions):
        return
    have = "; ".join(
        f"{s.id} has {', '.join(p for p in PRECISION_CHOICES if precision_family(p, model, s))}"
        for s in systems
    )
    raise InputError("--precision", ",".join(precisions), f"a precision the systems support ({have})")


def check_search_size(
    model: ModelSpec,
    systems: list[SystemSpec],
    precisions: tuple[str, ...] | list[str],
    max_chips: int,
    budget: int,
    redundant_experts: int = 0,
    max_cp: int = DEFAULT_MAX_CP,
) -> None:
    """Refuse a search whose candidates (plans x batches x families) exceed ``budget`` before doing it."""
    plans = sum(
        len(
            enumerate_plans(model, s, max_chips=max_chips, redundant_experts=redundant_experts, max_cp=max_cp)
        )
        for s in systems
    )
    total = plans * len(BATCH_GRID) * len(precisions)
    if total > budget:
        raise InputError(
            "--max-chips",
            max_chips,
            f"a search within the budget of {budget:,} deployments (this one has {total:,}): lower "
            "--max-chips, name fewer --hardware or --precision, or raise --max-candidates",
        )
