"""Convenience entry points that accept catalog ids or specs alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from numpy.typing import ArrayLike

from rackmath.analyses.serving import explain as _explain
from rackmath.analyses.serving import prefix as _prefix
from rackmath.analyses.serving import speculative as _speculative
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment, PrefillGrid, check_context
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.catalog.economics import memory_tiers
from rackmath.catalog.loader import resolve_model
from rackmath.catalog.loader import system as _system
from rackmath.core.energy import DEFAULT_PUE
from rackmath.core.roofline import KERNEL_GROUNDED, Efficiency
from rackmath.errors import InputError
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision

if TYPE_CHECKING:  # training loads only when asked for (a fresh `rackmath explain` stays fast)
    from rackmath.analyses.training.estimate import TrainingEstimate
    from rackmath.analyses.training.pipeline import PipelineResult


def deployment(
    model: str | ModelSpec,
    system: str | SystemSpec,
    *,
    chips: int | None = None,
    weights: str | Precision | None = None,
    kv: str | Precision | None = None,
    compute: str | Precision | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: Efficiency | EfficiencyMode | str = KERNEL_GROUNDED,
) -> Deployment:
    """A model (catalog id, alias, config.json path or spec) on a system (id or spec).

    ``efficiency="kernel"`` (default: the chip's fitted kernel curves; chips without tables
    borrow a measured chip's, marked ``transferred``) or ``"pure"`` (the lecture's roofline)."""
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


def decode(deployment: Deployment, batch: ArrayLike, context: ArrayLike) -> DecodeGrid:
    """:meth:`~rackmath.analyses.serving.deployment.Deployment.decode` over ``batch x context``,
    refusing a context beyond the model's window as ``rackmath explain --context`` does."""
    check_context(deployment.model, context, "context")
    return deployment.decode(batch, context)


def prefill(deployment: Deployment, batch: ArrayLike, length: ArrayLike) -> PrefillGrid:
    """:meth:`~rackmath.analyses.serving.deployment.Deployment.prefill`, refusing a prompt beyond
    the model's window."""
    check_context(deployment.model, length, "length")
    return deployment.prefill(batch, length)


def explain(
    deployment: Deployment,
    batches: Sequence[float] = _explain.DEFAULT_BATCHES,
    contexts: Sequence[float] = _explain.DEFAULT_CONTEXTS,
    plan: str | ParallelPlan | None = None,
    *,
    spec: str | None = None,
    mtp: int | None = None,
    acceptance: float | Sequence[float] | None = None,
    prefix_hit: float | None = None,
    prefix_tier: str = "hbm",
    pue: float = DEFAULT_PUE,
) -> _explain.Explanation:
    """The blackboard derivation; with ``plan`` (``"dp=64,ep=64"``) also the plan-aware grid.

    Speculative decoding: ``spec="draft=llama-3.1-8b,k=3,acceptance=0.7,0.6,0.5"``, or an
    MTP head with ``mtp=1, acceptance=0.8``. Prefix caching: ``prefix_hit=0.6,
    prefix_tier="host-dram"`` (hbm, host-dram/ddr5, cxl, ssd/flash, hdd/disk). ``pue``: the
    facility's power usage effectiveness for joules per token."""
    check_context(deployment.model, list(contexts), "contexts")
    speculation = None
    if spec is not None:
        speculation = _speculative.parse_speculation(spec, resolve_model)
    elif mtp is not None or acceptance is not None:
        if mtp is None or acceptance is None:
            raise InputError(
                "--mtp/--acceptance",
                f"mtp={mtp}, acceptance={acceptance}",
                "both, e.g. --mtp 1 --acceptance 0.8",
            )
        speculation = _speculative.speculation(mtp, acceptance, field="--mtp")
    prefix = None
    if prefix_hit is not None:
        tiers = _prefix.default_cache_tiers(deployment, memory_tiers())
        prefix = _prefix.prefix_cache(prefix_hit, prefix_tier, tiers)
    return _explain.explain(
        deployment, list(batches), list(contexts), plan, speculation=speculation, prefix=prefix, pue=pue
    )


def train(
    model: str | ModelSpec,
    system: str | SystemSpec,
    plan: str | ParallelPlan,
    *,
    tokens: float,
    chips: int | None = None,
    require_fit: bool = False,
    **options: Any,
) -> TrainingEstimate:
    """Step time, MFU, memory per chip and cost of training ``model`` for ``tokens`` tokens.

    ``rm.train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", tokens=15.6e12)``; options
    are those of :func:`rackmath.analyses.training.setup.make_training` (``seq_len``,
    ``global_batch``, ``microbatch``, ``schedule``, ``recompute``, ``zero``, ...). A job whose
    memory per chip does not fit has ``memory.fits`` false; ``require_fit=True`` raises
    :class:`~rackmath.errors.DoesNotFitError` for it instead, as ``rackmath train`` exits 1.
    """
    model_spec = resolve_model(model) if isinstance(model, str) else model
    system_spec = _system(system) if isinstance(system, str) else system
    plan_spec = ParallelPlan.parse(plan) if isinstance(plan, str) else plan
    from rackmath.analyses.training.estimate import estimate
    from rackmath.analyses.training.setup import make_training

    setup = make_training(model_spec, system_spec, plan_spec, tokens=tokens, chips=chips, **options)
    result = estimate(setup)
    return result.require_fit() if require_fit else result


def pipeline(
    stages: int, microbatches: int, schedule: str = "1f1b", *, virtual_stages: int = 1
) -> PipelineResult:
    """Simulate a pipeline schedule: ``rm.pipeline(4, 4, "gpipe").timeline.bubble_frac == 3/7``."""
    from rackmath.analyses.training.pipeline import pipeline_schedule

    return pipeline_schedule(schedule, stages, microbatches, virtual_stages=virtual_stages)
