"""The Python API: one call per command, with the command's arguments and defaults.

Each call takes catalog ids (or specs) where the command takes ids, resolves them and calls
the analysis the command calls; every refusal is the analysis's own, so a call refuses what
the command refuses, with the same error and message (``tests/test_rules.py`` drives each
through both). Quantities are SI (seconds, not the CLI's milliseconds). A request that is
valid but has no answer (no deployment meets the SLOs, no rate meets them, a training job
that does not fit) returns its result, which says so; ``require_...=True`` raises the error
the command exits with instead.

========================  ==================================================================
command                   call
========================  ==================================================================
``explain``               ``explain(deployment(model, on, ...), batches, contexts, plan, ...)``
``plan``                  :func:`plan`
``pareto``                :func:`pareto`
``layout``                :func:`layout`
``simulate``              :func:`simulate`
``sweep``                 :func:`sweep`
``train``, ``pipeline``   :func:`train`, :func:`pipeline`
``prices``                :func:`prices`
``fleet``                 :func:`fleet`
``overtrain``             :func:`overtrain`
``sparsity``              :func:`sparsity`
``validate``              :func:`validate` (``--kernels``: :func:`validate_kernels`)
``calibrate``             :func:`calibrate` (``kernels``: :func:`calibrate_kernels`)
``measure``               :func:`measure`
``models``, ``hardware``  ``rackmath.models()`` (the catalog), :func:`hardware`
========================  ==================================================================
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numpy.typing import ArrayLike

from rackmath.analyses.deploy.plan_features import routing
from rackmath.analyses.serving import explain as _explain
from rackmath.analyses.serving import prefix as _prefix
from rackmath.analyses.serving import speculative as _speculative
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment, PrefillGrid, check_context
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.catalog.loader import resolve_model
from rackmath.catalog.loader import system as _system
from rackmath.core.energy import DEFAULT_PUE
from rackmath.core.roofline import KERNEL_GROUNDED, Efficiency
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision
from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_YEAR

if TYPE_CHECKING:  # each command's analysis loads only when asked for (`rackmath explain` stays fast)
    from rackmath.analyses.deploy.frontier import Frontier
    from rackmath.analyses.deploy.layout import LayoutReport
    from rackmath.analyses.deploy.search import SearchResult
    from rackmath.analyses.deploy.simulation_report import SimulationReport
    from rackmath.analyses.deploy.sweep import SweepResult
    from rackmath.analyses.economics.fleet import Fleet
    from rackmath.analyses.economics.overtrain import Overtraining
    from rackmath.analyses.economics.prices import PricesReport
    from rackmath.analyses.economics.sparsity import SparsityStudy
    from rackmath.analyses.reality.calibration import CalibrationReport
    from rackmath.analyses.reality.measure import MeasureResult
    from rackmath.analyses.reality.report import ValidationReport
    from rackmath.analyses.training.estimate import TrainingEstimate
    from rackmath.analyses.training.pipeline import PipelineResult
    from rackmath.specs.workload import LengthDist, Requests

#: Prices are aged to today and cache memory is amortized over three years (``prices``).
DEFAULT_AMORTIZATION_S = 3 * SECONDS_PER_YEAR
#: ``prices --retention``'s default: 1 s, 10 s, 1 min, 5 min, 1 h, 1 d.
DEFAULT_RETENTIONS_S = (1.0, 10.0, 60.0, 300.0, 3600.0, SECONDS_PER_DAY)


def _model(model: str | ModelSpec) -> ModelSpec:
    return resolve_model(model) if isinstance(model, str) else model


def _on(system: str | SystemSpec) -> SystemSpec:
    return _system(system) if isinstance(system, str) else system


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
    weight_classes: str | dict[str, str] | None = None,
) -> Deployment:
    """A model (catalog id, alias, config.json path or spec) on a system (id or spec).

    ``efficiency="kernel"`` (default: the chip's fitted kernel curves; chips without tables
    borrow a measured chip's, marked ``transferred``) or ``"pure"`` (the lecture's roofline).
    ``weight_classes``: weights per tensor class, ``"experts=nvfp4,attention=fp8"`` or
    ``{"experts": "nvfp4", "attention": "fp8"}`` (attention, mlp, experts, shared_experts,
    embeddings, embedding, lm_head, router, norms), the rest in ``weights`` (default: as
    shipped); compute goes down to the narrowest, each operator on its own weights' kernel."""
    return make_deployment(
        _model(model),
        _on(system),
        chips=chips,
        weights=weights,
        kv=kv,
        compute=compute,
        usd_per_chip_hour=usd_per_chip_hour,
        efficiency=efficiency,
        weight_classes=weight_classes,
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
    """``rackmath explain``: the blackboard derivation; with ``plan`` (``"dp=64,ep=64"``) also
    the plan-aware grid. Refuses what the command refuses (:func:`rackmath.analyses.serving.
    explain.check_request`): more chips than one system without a plan, a context beyond the
    model's window, weights that do not fit.

    Speculative decoding: ``spec="draft=llama-3.1-8b,k=3,acceptance=0.7,0.6,0.5"``,
    ``"mtp=1,acceptance=0.85"``, ``"eagle=5,width=4,reach=..."`` or ``"mtp=7,length=3.2"``
    (:func:`rackmath.analyses.serving.speculative.parse_speculation`), or an MTP head with
    ``mtp=1, acceptance=0.8``; with ``plan`` the verify step is the plan's step. Prefix
    caching: ``prefix_hit=0.6, prefix_tier="host-dram"`` (hbm, host-dram/ddr5, cxl,
    ssd/flash, hdd/disk). ``pue``: the
    facility's power usage effectiveness for joules per token."""
    return _explain.explain(
        deployment,
        list(batches),
        list(contexts),
        plan,
        speculation=_speculative.from_options(spec, mtp, acceptance),
        prefix=_prefix.from_options(deployment, prefix_hit, prefix_tier),
        pue=pue,
    )


def _runtime(runtime: str | None) -> Any:
    from rackmath.catalog.runtimes import runtime as catalog_runtime

    return None if runtime is None else catalog_runtime(runtime)


def plan(
    model: str | ModelSpec,
    *,
    traffic: float = 1e6,
    input_len: int = 1024,
    output_len: int = 1024,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    prefix_hit: float = 0.0,
    hardware: Sequence[str | SystemSpec] | None = None,
    slo: str | None = None,
    disaggregated: bool = True,
    runtime: str | None = None,
    max_chips: int | None = None,
    precision: Sequence[str] | None = None,
    max_candidates: int | None = None,
    redundant_experts: int = 0,
    skew: float = 1.0,
    tbo: str | float = "off",
    mtp: int = 0,
    acceptance: float | str | Sequence[float] = 0.8,
    efficiency: str = "kernel",
    require_feasible: bool = False,
    weight_classes: str | dict[str, str] | None = None,
    max_cp: int = 1,
) -> SearchResult:
    """``rackmath plan``: the cheapest deployment serving ``traffic`` output tokens/s within
    the SLOs (``ttft_s``/``tpot_s`` in seconds, or ``slo="ttft_p99=2s,tpot_p99=50ms"``) over
    ``hardware`` (default: the six current systems) and ``precision`` families.
    ``weight_classes`` (``"experts=nvfp4,attention=fp8"``) states the native family's weights
    per tensor class; ``max_cp`` also searches context parallelism up to that degree;
    ``prefix_hit``: the share of each prompt found in the prefix cache."""
    from rackmath.analyses.deploy import candidates as c
    from rackmath.analyses.deploy import search as s
    from rackmath.specs.bounds import MAX_SEARCH_CANDIDATES

    spec = _model(model)
    if weight_classes is not None:
        from rackmath.specs.model import parse_weight_classes

        spec = spec.with_weight_precisions(parse_weight_classes(weight_classes))
    result = s.plan(
        spec,
        [_on(x) for x in (hardware or c.DEFAULT_SYSTEMS)],
        traffic=traffic,
        input_len=input_len,
        output_len=output_len,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        prefix_hit=prefix_hit,
        slo=slo,
        disaggregated=disaggregated,
        runtime=_runtime(runtime),
        max_chips=c.DEFAULT_MAX_CHIPS if max_chips is None else max_chips,
        precisions=tuple(precision or c.DEFAULT_PRECISIONS),
        max_candidates=MAX_SEARCH_CANDIDATES if max_candidates is None else max_candidates,
        routing=routing(redundant_experts, skew, tbo, mtp, acceptance),
        efficiency=efficiency,
        max_cp=max_cp,
    )
    return s.require_feasible(result) if require_feasible else result


def pareto(
    model: str | ModelSpec,
    on: str | SystemSpec,
    *,
    input_len: int = 1024,
    output_len: int = 1024,
    precision: Sequence[str] = ("native",),
    max_chips: int | None = None,
    disaggregated: bool = False,
    runtime: str | None = None,
    redundant_experts: int = 0,
    skew: float = 1.0,
    tbo: str | float = "off",
    mtp: int = 0,
    acceptance: float | str | Sequence[float] = 0.8,
    efficiency: str = "kernel",
) -> Frontier:
    """``rackmath pareto``: tokens/s per chip against tokens/s per user over plans and batches."""
    from rackmath.analyses.deploy.frontier import pareto as frontier

    return frontier(
        _model(model),
        _on(on),
        input_len=input_len,
        output_len=output_len,
        precisions=tuple(precision),
        max_chips=max_chips,
        disaggregated=disaggregated,
        runtime=_runtime(runtime),
        efficiency=efficiency,
        routing=routing(redundant_experts, skew, tbo, mtp, acceptance),
    )


def layout(
    model: str | ModelSpec,
    on: str | SystemSpec,
    *,
    batch: int = 2048,
    context: int = 4096,
    weights: str | None = None,
    efficiency: str = "kernel",
) -> LayoutReport:
    """``rackmath layout``: the lecture's layout arguments (D13-D24) for a model on a system."""
    from rackmath.analyses.deploy.layout import layout as layout_report

    return layout_report(
        _model(model), _on(on), batch=batch, context=context, weights=weights, efficiency=efficiency
    )


def simulate(
    model: str | ModelSpec,
    on: str | SystemSpec,
    *,
    chips: int | None = None,
    plan: str | None = None,
    rate: str | float | None = None,
    requests: float = 1e4,
    input_len: str | int | LengthDist = "lognormal:2000",
    output_len: str | int | LengthDist = "500",
    runtime: str = "vllm",
    max_seqs: int | None = None,
    max_tokens: int | None = None,
    trace: str | Path | Requests | None = None,
    slo: str | None = None,
    attainment: float | None = None,
    prefix_hit: float | None = None,
    host_cache_bytes: float = 0.0,
    host_link_bytes_per_s: float | None = None,
    seed: int = 0,
    disaggregated: str | None = None,
    prefill_plan: str | None = None,
    efficiency: str = "kernel",
    require_slo: bool = False,
    weights: str | None = None,
    kv: str | None = None,
    weight_classes: str | dict[str, str] | None = None,
    mtp: int = 0,
    acceptance: float = 0.8,
    spec: str | None = None,
) -> SimulationReport:
    """``rackmath simulate``: requests through one replica under a runtime's caps (``trace``:
    a CSV file of ``arrival_s,input_tokens,output_tokens`` rows or Mooncake JSON lines, or its
    requests); with ``slo`` and no ``rate``, the highest rate that meets it."""
    from rackmath.analyses.deploy.simulation_report import simulate as run
    from rackmath.specs.workload import read_trace

    report = run(
        _model(model),
        _on(on),
        runtime,
        chips=chips,
        plan=plan,
        rate=rate,
        requests=requests,
        input_len=input_len,
        output_len=output_len,
        max_seqs=max_seqs,
        max_tokens=max_tokens,
        trace=read_trace(trace) if isinstance(trace, str | Path) else trace,
        slo=slo,
        attainment=attainment,
        prefix_hit=prefix_hit,
        host_cache_bytes=host_cache_bytes,
        host_link_bytes_per_s=host_link_bytes_per_s,
        seed=seed,
        disaggregated=disaggregated,
        prefill_plan=prefill_plan,
        efficiency=efficiency,
        weights=weights,
        kv=kv,
        weight_classes=weight_classes,
        mtp=mtp,
        acceptance=acceptance,
        speculation=None if spec is None else _speculative.parse_speculation(spec, resolve_model),
    )
    return report.require_slo() if require_slo else report


def sweep(
    spec: Mapping[str, Any] | str | Path,
    *,
    max_points: int | None = None,
    chunk_points: int | None = None,
    scheduler: Any = None,
) -> SweepResult:
    """``rackmath sweep``: every combination of a spec (a mapping, or a YAML file) as one table."""
    from rackmath.analyses.deploy import sweep as sw
    from rackmath.userfiles import load_yaml

    data = load_yaml(spec, "SPEC") if isinstance(spec, str | Path) else spec
    return sw.sweep(
        data,
        max_points=sw.DEFAULT_MAX_POINTS if max_points is None else max_points,
        chunk_points=sw.DEFAULT_CHUNK_POINTS if chunk_points is None else chunk_points,
        scheduler=scheduler,
    )


def train(
    model: str | ModelSpec,
    system: str | SystemSpec,
    plan: str | ParallelPlan,
    *,
    tokens: float,
    chips: int | None = None,
    require_fit: bool = False,
    ep_dispatch: str | None = None,
    **options: Any,
) -> TrainingEstimate:
    """Step time, MFU, memory per chip and cost of training ``model`` for ``tokens`` tokens.

    ``rm.train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", tokens=15.6e12)``; options
    are those of :func:`rackmath.analyses.training.setup.make_training` (``seq_len``,
    ``global_batch``, ``microbatch``, ``schedule``, ``recompute``, ``zero``, ...), and
    ``ep_dispatch="fp8"`` as ``--ep-dispatch``. A job whose memory per chip does not fit has
    ``memory.fits`` false; ``require_fit=True`` raises :class:`~rackmath.errors.DoesNotFitError`
    for it instead, as ``rackmath train`` exits 1.
    """
    plan_spec = ParallelPlan.parse(plan) if isinstance(plan, str) else plan
    from rackmath.analyses.training.estimate import estimate
    from rackmath.analyses.training.setup import make_training, parse_ep_dispatch

    if ep_dispatch is not None:
        options["ep_dispatch_fp8"] = parse_ep_dispatch(ep_dispatch)
    setup = make_training(_model(model), _on(system), plan_spec, tokens=tokens, chips=chips, **options)
    result = estimate(setup)
    return result.require_fit() if require_fit else result


def pipeline(
    stages: int, microbatches: int, schedule: str = "1f1b", *, virtual_stages: int = 1
) -> PipelineResult:
    """Simulate a pipeline schedule: ``rm.pipeline(4, 4, "gpipe").timeline.bubble_frac == 3/7``."""
    from rackmath.analyses.training.pipeline import pipeline_schedule

    return pipeline_schedule(schedule, stages, microbatches, virtual_stages=virtual_stages)


def prices(
    *,
    provider: str | None = None,
    prices_file: str | Path | None = None,
    as_of: dt.date | str | None = None,
    model: str | ModelSpec = "deepseek-v3",
    on: str | SystemSpec = "gb200-nvl72",
    batch: float = 2000,
    context: float = 8192,
    long_context: str = "gemini-3.1-pro",
    long_batch: float = 64,
    cache_model: str = "claude-opus-4.6",
    retention_s: Sequence[float] = DEFAULT_RETENTIONS_S,
    amortization_s: float = DEFAULT_AMORTIZATION_S,
    prompt_tokens: float = 8192,
    prefix_hit: float | None = None,
    prefix_tier: str = "hbm",
    fast_model: str = "claude-opus-4.6",
    fast_context: float = 4096,
    efficiency: str = "kernel",
) -> PricesReport:
    """``rackmath prices``: what API prices reveal, against ``model`` on ``on``'s roofline
    (``prices_file``: your own prices, YAML in the catalog's schema, added to the catalog's)."""
    from rackmath.analyses.economics.prices import report
    from rackmath.catalog.economics import price_table

    return report(
        price_table(prices_file),
        deployment(model, on, efficiency=efficiency),
        provider=provider,
        as_of=as_of,
        batch=batch,
        context=context,
        long_context_model=long_context,
        long_batch=long_batch,
        cache_model=cache_model,
        retentions_s=list(retention_s),
        amortization_s=amortization_s,
        prompt_tokens=prompt_tokens,
        prefix_hit=prefix_hit,
        prefix_tier=prefix_tier,
        fast_model=fast_model,
        fast_context=fast_context,
    )


def fleet(
    *,
    traffic: float = 500e6,
    batch: int | None = None,
    step_s: float | None = None,
    model: str | ModelSpec | None = None,
    on: str | SystemSpec | None = None,
    context: float = 4096,
    chips_per_replica: int | None = None,
    usd_per_chip_hour: float | None = None,
    output_tokens: int | None = None,
    loads: Sequence[float] = (0.2, 0.5, 0.8, 0.95),
    requests: int = 6000,
    seed: int = 0,
    max_sim_requests: int | None = None,
    max_sim_steps: int | None = None,
    efficiency: str = "kernel",
) -> Fleet:
    """``rackmath fleet``: replicas, chips and dollars for a traffic; with ``model`` and
    ``on`` (both, or neither) the step times come from that deployment's roofline."""
    from rackmath.analyses.economics import fleet as f

    return f.fleet(
        traffic_tokens_per_s=traffic,
        batch=f.LECTURE_BATCH if batch is None else batch,
        step_s=step_s,
        deployment=f.reference_deployment(model, on, efficiency),
        context=context,
        chips_per_replica=chips_per_replica,
        usd_per_chip_hour=usd_per_chip_hour,
        output_tokens=f.DEFAULT_OUTPUT_TOKENS if output_tokens is None else output_tokens,
        loads=list(loads),
        requests=requests,
        seed=seed,
        max_simulated_requests=f.MAX_SIMULATED_REQUESTS if max_sim_requests is None else max_sim_requests,
        max_simulated_steps=f.MAX_SIMULATED_STEPS if max_sim_steps is None else max_sim_steps,
    )


def overtrain(
    *,
    params: float = 100e9,
    tokens_per_s: float = 50e6,
    duration_s: float = 60 * SECONDS_PER_DAY,
    rl_flops: float = 3.0,
    rl_efficiency: float = 1 / 3,
    inference_efficiency: float = 1 / 3,
    tokens_per_param: float | None = None,
) -> Overtraining:
    """``rackmath overtrain``: how far past Chinchilla to pre-train a model serving heavy traffic."""
    from rackmath.analyses.economics import overtrain as ot

    return ot.overtrain(
        params=params,
        tokens_per_s=tokens_per_s,
        duration_s=duration_s,
        coefficients=ot.ComputeCoefficients(
            rl=rl_flops, rl_efficiency=rl_efficiency, inference_efficiency=inference_efficiency
        ),
        tokens_per_param=ot.CHINCHILLA_TOKENS_PER_PARAM if tokens_per_param is None else tokens_per_param,
    )


def sparsity(
    *,
    model: str | ModelSpec = "deepseek-v3",
    on: str | SystemSpec = "gb200-nvl72",
    levels: Sequence[float] = (1, 2, 4, 8, 16, 32, 64),
    params_active: float | None = None,
    context: float = 4096,
    users: float = 2000,
) -> SparsityStudy:
    """``rackmath sparsity``: what a sparser MoE buys (quality) and costs (batch, memory, traffic),
    on the pure roofline at every hypothetical sparsity (:data:`rackmath.analyses.economics.
    sparsity.EFFICIENCY`: no chip's kernels were measured at them)."""
    from rackmath.analyses.economics.sparsity import sparsity_study

    return sparsity_study(
        deployment(model, on, efficiency="pure"),
        sparsities=list(levels),
        context=context,
        users=users,
        params_active=params_active,
    )


def validate(measurements: str | Path | None = None) -> ValidationReport:
    """``rackmath validate``: every published measurement (or your own file's) predicted."""
    from rackmath.analyses.reality.report import validate as run

    return run(measurements)


def validate_kernels(chips: Sequence[str] | None = None) -> dict[str, Any]:
    """``rackmath validate --kernels``: the kernel fit's held-out errors per chip and class."""
    from rackmath.analyses.kernels.validation import validate_kernels as run

    return run(list(chips) if chips else None)


def calibrate(exclude_source: Sequence[str] = ()) -> CalibrationReport:
    """``rackmath calibrate``: the physical parameters per chip family, with their LOSO errors."""
    from rackmath.analyses.reality.calibration import calibrate as run

    return run(tuple(exclude_source))


def calibrate_kernels(
    chips: Sequence[str] | None = None, from_file: Sequence[str | Path] = (), date: str | None = None
) -> dict[str, Any]:
    """``rackmath calibrate kernels``: the fitted efficiency curves, as the catalog's YAML document."""
    from rackmath.analyses.kernels.calibrate import calibrate_kernels as run

    return run(list(chips) if chips else None, [Path(p) for p in from_file] or None, date=date)


def measure(quick: bool = False, repeats: int | None = None) -> MeasureResult:
    """``rackmath measure``: this machine's ceilings and timed decode steps, predicted."""
    from rackmath.analyses.reality.measure import compare
    from rackmath.measure import torch_bench

    cfg = torch_bench.config(quick, repeats)
    return compare(torch_bench.run(cfg))


def hardware() -> dict[str, list[dict[str, Any]]]:
    """``rackmath hardware --json``: every chip and system of the catalog."""
    from rackmath.analyses.catalog_facts import hardware_dict

    return hardware_dict()
