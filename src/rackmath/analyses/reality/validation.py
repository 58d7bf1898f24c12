"""Predict published measurements with the cost model users get, and score the predictions.

Every scenario goes through one function, :func:`predict`. Serving rows with a parallel plan
use the plan-aware deployment (:mod:`rackmath.analyses.serving.planned`: TP all-reduce, EP
all-to-all, PP hops); rows whose layout has no plan (``plan: null``), or a checkout without
that module, use the foundation's ideal-chip :mod:`rackmath.analyses.serving.pooled`. Training rows
go through :mod:`rackmath.analyses.training.estimate`. What each metric means:

* ``decode_tokens_per_s_per_user`` / ``decode_step_s``: the mean decode step over the
  generation, contexts ``I .. I+O-1`` (:func:`rackmath.core.reality.decode_contexts`);
* ``ttft_s``: one prefill of ``batch`` prompts of ``I`` tokens;
* ``output_tokens_per_s``, static batch: prefill plus every decode step
  (:func:`rackmath.core.reality.static_batch_output_tokens_per_s`);
* ``output_tokens_per_s``, maximum throughput: a continuously batched steady state
  (:func:`rackmath.core.loads.mixed_load`) at the concurrency the KV memory
  allows for full-length sequences (TensorRT-LLM's default GUARANTEED_NO_EVICT scheduler
  reserves every sequence's full length) and the scheduler's cap;
* ``input_tokens_per_s`` and ``prefill_mfu``: one prefill;
* training metrics: the training estimate of the run in ``training_runs.yaml``.

Communication under a plan is added to each pass, except where the row states a two-batch
overlap (``Scenario.two_batch_overlap``): then the calibrated share of it is hidden
(:func:`rackmath.core.parallel.combine_comm_s`).

The efficiencies come from a :class:`Calibration` (per chip family; the pure roofline by
default), see :mod:`rackmath.analyses.reality.calibration`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from rackmath.analyses.serving import pooled
from rackmath.catalog import loader as catalog
from rackmath.core import architecture as arch
from rackmath.core import loads, reality
from rackmath.core import roofline as rl
from rackmath.core.step import PlanStep
from rackmath.errors import RackmathError
from rackmath.frames import Record
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.precision import Precision
from rackmath.specs.scenario import KvMemoryOf, Metric, Phase, Scenario

try:  # the plan-aware deployment (issue 3); the ideal-chip model stands in without it
    from rackmath.analyses.serving import planned
    from rackmath.core import parallel as par
except ImportError:  # pragma: no cover - depends on the checkout
    planned = None  # type: ignore[assignment]
    par = None  # type: ignore[assignment]

#: Chip -> family: the unit calibration shares parameters over (same memory system and
#: tensor-core generation). From the vendors' architecture names (Ampere, Hopper,
#: Blackwell, CDNA 3/4) and Google's TPU generations.
CHIP_FAMILY: dict[str, str] = {
    "a100-80gb": "nvidia-ampere",
    "h100-sxm": "nvidia-hopper",
    "h800": "nvidia-hopper",
    "h200": "nvidia-hopper",
    "b200": "nvidia-blackwell",
    "b300": "nvidia-blackwell",
    "gb200": "nvidia-blackwell",
    "gb300": "nvidia-blackwell",
    "rubin": "nvidia-rubin",
    "mi300x": "amd-cdna3",
    "mi325x": "amd-cdna3",
    "mi355x": "amd-cdna4",
    "tpu-v4": "google-tpu-v4",
    "tpu-v5e": "google-tpu-v5e",
    "tpu-v5p": "google-tpu-v5p",
    "tpu-v6e": "google-tpu-v6e",
    "tpu7x": "google-tpu7x",
}

#: Log error charged to a row the model cannot predict (does not fit, invalid plan) while
#: fitting: ln(100), a factor of 100, so the search steers away without NaNs.
INFEASIBLE_LOG_ERROR = float(np.log(100.0))


def is_weight_only(weights: Precision, compute: Precision) -> bool:
    """Weight-only quantization: weights stored in a narrower format than the matmul runs
    in (int8/int4 weights, bf16 compute), so the kernel converts every weight it reads."""
    return weights.compute_class != compute.compute_class and weights.bytes_per_element < (
        compute.bytes_per_element
    )


def chip_family(chip_id: str) -> str:
    return CHIP_FAMILY.get(chip_id, chip_id)


@dataclass(frozen=True)
class FamilyParams(Record):
    """The physical gap between roofline and reality for one chip family.

    Fractions of peak FLOP/s per phase and of HBM bandwidth; a fixed time per layer of a
    decode step and of a prefill (kernel launches, synchronisation, scheduling: the work a
    step does per layer regardless of its size, so a 126-layer model pays four times a
    32-layer one); the latency of one scale-up hop (``None``: the system catalog's
    value); the bandwidth of KV-cache reads relative to weight reads (attention kernels);
    the cost of converting weight-only formats (int8/int4 weights, bf16 compute) in
    byte-equivalents per weight (:func:`rackmath.core.reality.dequant_weight_bandwidth_frac`);
    and the share of communication hidden where a row states a two-batch overlap.
    Defaults: the pure roofline (communication fully hidden where overlap is stated).
    """

    bandwidth_frac: float = 1.0
    flops_frac_decode: float = 1.0
    flops_frac_prefill: float = 1.0
    flops_frac_training: float = 1.0
    overhead_decode_s_per_layer: float = 0.0
    overhead_prefill_s_per_layer: float = 0.0
    hop_latency_s: float | None = None
    kv_bandwidth_frac: float = 1.0
    dequant_bytes_per_weight: float = 0.0
    two_batch_overlap_frac: float = 1.0
    kernel_grounded: bool = False  # operators at the fitted kernel curves (these scalars multiply them)
    overhead_decode_s_per_step: float = 0.0  # fixed host time per decode step (any model size)
    overhead_prefill_s_per_pass: float = 0.0  # fixed host time per prefill pass (request admission)
    overhead_decode_s_per_sequence: float = 0.0  # host time per running sequence per decode step
    concurrency_frac: float = 1.0  # share of the KV-limited concurrency the scheduler keeps running

    def weight_bandwidth_frac(self, weight_bytes_per_element: float, weight_only: bool) -> float:
        """Bandwidth fraction of weight reads relative to ``bandwidth_frac``: for weight-only
        formats :func:`rackmath.core.reality.dequant_weight_bandwidth_frac`, else 1."""
        if not weight_only:
            return 1.0
        kappa = self.dequant_bytes_per_weight
        return float(reality.dequant_weight_bandwidth_frac(weight_bytes_per_element, kappa))

    def decode_efficiency(self, layers: int, weight_bandwidth_frac: float = 1.0) -> rl.Efficiency:
        """The decode step's efficiency; the per-sequence host time is charged by the step to
        the busiest engine's sequences (:func:`rackmath.core.parallel.host_overhead_s`)."""
        overhead = float(reality.per_layer_overhead_s(self.overhead_decode_s_per_layer, layers))
        overhead += self.overhead_decode_s_per_step
        return rl.Efficiency(
            self.flops_frac_decode,
            self.bandwidth_frac,
            overhead,
            weight_bandwidth_frac,
            self.kv_bandwidth_frac,
            self.kernel_grounded,
            overhead_s_per_sequence=self.overhead_decode_s_per_sequence,
        )

    def prefill_efficiency(self, layers: int, weight_bandwidth_frac: float = 1.0) -> rl.Efficiency:
        overhead = float(reality.per_layer_overhead_s(self.overhead_prefill_s_per_layer, layers))
        overhead += self.overhead_prefill_s_per_pass
        return rl.Efficiency(
            self.flops_frac_prefill,
            self.bandwidth_frac,
            overhead,
            weight_bandwidth_frac,
            self.kv_bandwidth_frac,
            self.kernel_grounded,
        )


PURE = FamilyParams()


@dataclass(frozen=True)
class Calibration:
    """Parameters per chip family, and the pooled ones for families it has no data for."""

    pooled: FamilyParams = PURE
    families: tuple[tuple[str, FamilyParams], ...] = ()
    fitted_on: tuple[int, ...] = ()  # row ids
    note: str = "pure roofline"

    def for_family(self, family: str) -> FamilyParams:
        return dict(self.families).get(family, self.pooled)

    def to_dict(self) -> dict[str, Any]:
        return {
            "note": self.note,
            "fitted_on_rows": list(self.fitted_on),
            "pooled": self.pooled.to_dict(),
            "families": {name: p.to_dict() for name, p in self.families},
        }


PURE_ROOFLINE = Calibration()


@dataclass(frozen=True)
class Prediction:
    row_id: int
    value: float  # NaN when the model cannot predict the row
    path: str  # 'planned', 'ideal-chip' or 'training'
    detail: tuple[tuple[str, Any], ...] = field(default=())
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.value) and self.value > 0)


# ----------------------------------------------------------------------------- serving


def _system(system: SystemSpec, p: FamilyParams) -> SystemSpec:
    if p.hop_latency_s is None:
        return system
    return system.model_copy(update={"scale_up_latency_s": p.hop_latency_s})


@lru_cache(maxsize=256)
def _model(reference: str) -> ModelSpec:
    """A scenario's model: a catalog id, ``hf:owner/name`` or a ``config.json`` path
    (:func:`rackmath.catalog.loader.resolve_model`, as ``explain`` reads it), read once."""
    return catalog.resolve_model(reference)


class _Engine:
    """The plan-aware deployment, or the ideal chip, behind one interface (decode, prefill,
    steady-state mixed step, max concurrency); both answer through the core."""

    def __init__(self, s: Scenario, p: FamilyParams, efficiency: rl.Efficiency) -> None:
        model = _model(s.model_id)
        system = _system(catalog.system(s.system_id), p)
        probe = pooled.make_deployment(
            model,
            system,
            chips=s.chips,
            weights=s.weights,
            kv=s.kv,
            compute=s.compute,
            weight_classes=dict(s.weight_classes) or None,
        )
        model = probe.model  # as the scenario stores its weights (per class where it says so)
        self.use_plan = planned is not None and s.plan is not None
        self.path = "planned" if self.use_plan else "ideal-chip"
        self.model = model
        self.chips = s.chips
        self.weight_bytes_per_element = probe.precisions.weights.bytes_per_element
        self.weight_only = is_weight_only(probe.precisions.weights, probe.precisions.compute)
        capacity = system.chip.hbm_capacity_bytes
        weights_per_chip = self._weights_per_chip(s, model, system, probe)
        reserve = float(
            reality.reserve_frac_for_kv_fraction(
                capacity, weights_per_chip, s.kv_memory_frac, of_free=s.kv_memory_of is KvMemoryOf.FREE
            )
        )
        self.reserve = reserve
        if self.use_plan:
            assert planned is not None and s.plan is not None
            self.planned = planned.plan_deployment(
                model,
                system,
                s.plan,
                weights=probe.precisions.weights,
                kv=s.kv,
                compute=s.compute,
                efficiency=efficiency,
                memory_reserve_frac=reserve,
            )
            self.base = self.planned.base
        else:
            self.base = replace(probe, efficiency=efficiency, memory_reserve_frac=reserve)
        self._concurrency: dict[float, float] = {}
        self.fits = self._weights_fit()

    @staticmethod
    def _weights_per_chip(s: Scenario, model: Any, system: SystemSpec, probe: pooled.Deployment) -> float:
        if planned is not None and s.plan is not None:
            d = planned.plan_deployment(
                model, system, s.plan, weights=probe.precisions.weights, kv=s.kv, compute=s.compute
            )
            return float(d.memory(0.0, 1.0).weights.total)
        return probe.weight_bytes_per_chip

    def with_efficiency(self, efficiency: rl.Efficiency, comm_overlap_frac: float | None = None) -> _Engine:
        """The same deployment at another efficiency (and, for a plan, another fraction of
        communication hidden behind computation): new frozen deployments, nothing mutated;
        the per-model constants are cached by the core (:func:`rackmath.core.sharding.shardable`)."""
        clone = copy.copy(self)
        clone.base = replace(self.base, efficiency=efficiency)
        if self.use_plan:
            overlap = self.planned.comm_overlap_frac
            if comm_overlap_frac is not None:
                overlap = float(comm_overlap_frac)
            clone.planned = replace(self.planned, base=clone.base, comm_overlap_frac=overlap)
        return clone

    def decode_step_s(self, batch: float, contexts: np.ndarray, edge: str = "") -> np.ndarray:
        if self.use_plan:
            return np.asarray(_step_at(self.planned.decode([batch], contexts), edge)[0])
        return np.asarray(_step_at(pooled.decode(self.base, [batch], contexts), edge)[0])

    def prefill(self, batch: float, length: float, edge: str = "") -> tuple[float, float]:
        """(step seconds, FLOPs) of one prefill."""
        grid = (
            self.planned.prefill([batch], [length])
            if self.use_plan
            else pooled.prefill(self.base, [batch], [length])
        )
        flops = float(batch) * float(arch.prefill_flops_per_sequence(self.model, float(length)))
        return float(_step_at(grid, edge)[0, 0]), flops

    def peak_flops_per_s(self) -> float:
        return self.chips * self.base.system.chip.peak_flops(self.base.precisions.compute)

    def _weights_fit(self) -> bool:
        if self.use_plan:
            return bool(np.all(self.planned.memory(0.0, 1.0).fits))
        return self.base.weights_fit

    def max_concurrency(self, context: float) -> float:
        """Sequences of ``context`` tokens that fit (independent of efficiency: cached)."""
        if context not in self._concurrency:
            if self.use_plan:
                n = float(self.planned.max_concurrency([context])[0])
            else:
                n = float(pooled.max_batch(self.base, [context])[0])
            self._concurrency[context] = n
        return self._concurrency[context]

    def mixed_step_s(self, batch: float, input_len: int, output_len: int, edge: str = "") -> float:
        """One steady-state step of continuous batching with chunked prefill."""
        kv_el = self.base.precisions.kv.bytes_per_element
        load = loads.mixed_load(self.model, float(batch), input_len, output_len, kv_el)
        step = self.planned.step(load, decode=True) if self.use_plan else self.base.ideal_step(load)
        return float(np.asarray(_step_at(step, edge)))


#: The edges of a prediction's band (:func:`predict`'s ``edge``): every step at its p10 or p90.
EDGES = ("p10", "p90")


def _step_at(step_or_grid: Any, edge: str) -> np.ndarray:
    """A step's seconds (``edge`` ""), or its p10 or p90
    (:attr:`rackmath.core.step.PlanStep.step_band_s`) of a plan step or a grid holding one."""
    step = step_or_grid
    if par is not None and not isinstance(step, PlanStep):
        step = getattr(step_or_grid, "times", None) or step_or_grid.step
    if not edge:
        return np.asarray(step.step_s)
    lo, hi = step.step_band_s
    return np.asarray(lo if edge == "p10" else hi)


@lru_cache(maxsize=4096)
def _engine(s: Scenario, hop_latency_s: float | None) -> _Engine:
    return _Engine(s, FamilyParams(hop_latency_s=hop_latency_s), rl.PURE_ROOFLINE)


def _predict_serving(s: Scenario, p: FamilyParams, edge: str = "") -> Prediction:
    structure = _engine(s, p.hop_latency_s)
    layers = structure.model.num_layers
    wbw = p.weight_bandwidth_frac(structure.weight_bytes_per_element, structure.weight_only)
    if s.kv_read_per_query_head:  # every query head re-reads its KV head: KV reads x the GQA group
        a = structure.model.attention
        p_dec = replace(p, kv_bandwidth_frac=p.kv_bandwidth_frac * a.num_kv_heads / a.num_heads)
    else:
        p_dec = p
    dec = replace(p_dec.decode_efficiency(layers, wbw), all_reduce=s.all_reduce)
    pre = replace(p.prefill_efficiency(layers, wbw), all_reduce=s.all_reduce)
    # communication is added to the step unless the source states a two-batch overlap
    overlap = p.two_batch_overlap_frac if s.two_batch_overlap else 0.0
    engine = structure.with_efficiency(dec, overlap)
    detail: dict[str, Any] = {"memory_reserve_frac": engine.reserve}
    if not engine.fits:
        return Prediction(s.row_id, float("nan"), engine.path, error="the weights do not fit in HBM")
    m = s.metric
    if m in (Metric.DECODE_TOKENS_PER_S_PER_USER, Metric.DECODE_STEP_S):
        assert s.batch is not None
        contexts = np.arange(s.input_tokens, s.input_tokens + s.output_tokens, dtype=float)
        step = float(np.mean(engine.decode_step_s(s.batch, contexts, edge)))
        value = 1.0 / step if m is Metric.DECODE_TOKENS_PER_S_PER_USER else step
        detail["mean_step_s"] = step
    elif m is Metric.TTFT_S:
        assert s.batch is not None
        value, _ = engine.with_efficiency(pre, overlap).prefill(s.batch, s.input_tokens, edge)
    elif m in (Metric.INPUT_TOKENS_PER_S, Metric.PREFILL_MFU):
        assert s.batch is not None
        step, flops = engine.with_efficiency(pre, overlap).prefill(s.batch, s.input_tokens, edge)
        detail["prefill_s"] = step
        if m is Metric.INPUT_TOKENS_PER_S:
            value = s.batch * s.input_tokens / step
        else:
            value = float(rl.utilization(flops, step, engine.peak_flops_per_s()))
    elif m is Metric.OUTPUT_TOKENS_PER_S and s.phase is Phase.STATIC_BATCH:
        assert s.batch is not None
        prefill_s, _ = engine.with_efficiency(pre, overlap).prefill(s.batch, s.input_tokens, edge)
        contexts = reality.decode_contexts(s.input_tokens, s.output_tokens)
        decode_total = float(np.sum(engine.decode_step_s(s.batch, contexts, edge))) if contexts.size else 0.0
        value = float(
            reality.static_batch_output_tokens_per_s(s.batch, s.output_tokens, prefill_s, decode_total)
        )
        detail.update(prefill_s=prefill_s, decode_total_s=decode_total)
    elif m is Metric.OUTPUT_TOKENS_PER_S and s.phase is Phase.MAX_THROUGHPUT:
        if par is None:
            return Prediction(s.row_id, float("nan"), engine.path, error="needs rackmath.core.parallel")
        limit = engine.max_concurrency(s.input_tokens + s.output_tokens)
        batch = limit if s.max_batch is None else min(limit, s.max_batch)
        batch = float(reality.scheduled_concurrency(batch, p.concurrency_frac))
        if batch < 1:
            return Prediction(
                s.row_id, float("nan"), engine.path, error="no sequence fits beside the weights"
            )
        step = engine.mixed_step_s(batch, s.input_tokens, s.output_tokens, edge)
        value = batch / step
        detail.update(concurrency=batch, kv_limited_concurrency=limit, step_s=step)
    else:  # pragma: no cover - the loader admits only the metrics above for serving phases
        return Prediction(s.row_id, float("nan"), engine.path, error=f"metric {m} for phase {s.phase}")
    return Prediction(s.row_id, float(value), engine.path, tuple(detail.items()))


# ----------------------------------------------------------------------------- training


def _predict_training(s: Scenario, p: FamilyParams) -> Prediction:
    try:
        from rackmath.analyses.training import estimate
        from rackmath.catalog.training_runs import training_runs
    except ImportError:  # pragma: no cover - depends on the checkout
        return Prediction(s.row_id, float("nan"), "training", error="training analysis not available")
    runs = {r.id: r for r in training_runs()}
    run = runs.get(s.training_run)
    if run is None:
        return Prediction(
            s.row_id, float("nan"), "training", error=f"unknown training run {s.training_run!r}"
        )
    # One copy of the training metric: the training analysis's estimate, read under the
    # convention the run states (analyses.training.runs.predicted_metric). Kernel-grounded:
    # the per-operator training step on the chip's fitted kernel tables (fitted on kernels,
    # never on these rows); otherwise the flat table of the family's training fraction.
    from rackmath.analyses.training.runs import predicted_metric, run_setup
    from rackmath.catalog.training_runs import RunMetric

    run_metric = {
        Metric.TRAINING_MFU: RunMetric.MFU,
        Metric.TRAINING_STEP_S: RunMetric.STEP_S,
    }.get(s.metric, RunMetric.HFU_FLOPS_PER_CHIP)
    if run.metric is not run_metric:
        return Prediction(
            s.row_id, float("nan"), "training", error=f"row metric {s.metric} but run metric {run.metric}"
        )
    setup = run_setup(
        run,
        rl.Efficiency(flops_frac=p.flops_frac_training),
        _system(run.system, p),
        efficiency_table="kernel" if p.kernel_grounded else None,
    )
    e = estimate.estimate(setup)
    value = predicted_metric(run, e)
    step, mfu = e.step, float(e.mfu)
    return Prediction(s.row_id, float(value), "training", (("step_s", step.step_s), ("mfu", mfu)))


# ----------------------------------------------------------------------------- one entry point


def _relevant(s: Scenario, p: FamilyParams) -> FamilyParams:
    """Only the parameters the scenario depends on (so predictions cache well while fitting)."""
    if s.phase is Phase.TRAINING:
        return FamilyParams(
            flops_frac_training=p.flops_frac_training,
            hop_latency_s=p.hop_latency_s,
            kernel_grounded=p.kernel_grounded,
        )
    keep_prefill = s.metric in (Metric.TTFT_S, Metric.INPUT_TOKENS_PER_S, Metric.PREFILL_MFU) or (
        s.phase is Phase.STATIC_BATCH
    )
    keep_decode = s.metric not in (Metric.TTFT_S, Metric.INPUT_TOKENS_PER_S, Metric.PREFILL_MFU)
    weight_only = s.weights is not None and s.compute is not None and is_weight_only(s.weights, s.compute)
    return FamilyParams(
        bandwidth_frac=p.bandwidth_frac,
        kv_bandwidth_frac=p.kv_bandwidth_frac,
        dequant_bytes_per_weight=p.dequant_bytes_per_weight if weight_only else 0.0,
        two_batch_overlap_frac=p.two_batch_overlap_frac if s.two_batch_overlap else 1.0,
        flops_frac_decode=p.flops_frac_decode if keep_decode else 1.0,
        overhead_decode_s_per_layer=p.overhead_decode_s_per_layer if keep_decode else 0.0,
        flops_frac_prefill=p.flops_frac_prefill if keep_prefill else 1.0,
        overhead_prefill_s_per_layer=p.overhead_prefill_s_per_layer if keep_prefill else 0.0,
        overhead_decode_s_per_step=p.overhead_decode_s_per_step if keep_decode else 0.0,
        overhead_decode_s_per_sequence=p.overhead_decode_s_per_sequence if keep_decode else 0.0,
        overhead_prefill_s_per_pass=p.overhead_prefill_s_per_pass if keep_prefill else 0.0,
        hop_latency_s=p.hop_latency_s,
        kernel_grounded=p.kernel_grounded,
        concurrency_frac=p.concurrency_frac if s.phase is Phase.MAX_THROUGHPUT else 1.0,
    )


@lru_cache(maxsize=200_000)
def _predict_cached(s: Scenario, p: FamilyParams, edge: str = "") -> Prediction:
    try:
        if s.phase is Phase.TRAINING:
            # the training step is not a plan step and carries no band yet: its edges are NaN
            return _predict_training(s, p) if not edge else Prediction(s.row_id, float("nan"), "training")
        return _predict_serving(s, p, edge)
    except RackmathError as exc:
        return Prediction(s.row_id, float("nan"), "failed", error=str(exc))


def scenario_family(s: Scenario) -> str:
    """The chip family a scenario runs on (training rows: their run's system)."""
    if s.phase is Phase.TRAINING:
        try:
            from rackmath.catalog.training_runs import training_runs
        except ImportError:  # pragma: no cover
            return "unknown"
        runs = {r.id: r for r in training_runs()}
        run = runs.get(s.training_run)
        return chip_family(run.system.chip.id) if run else "unknown"
    return chip_family(catalog.system(s.system_id).chip.id)


def scenario_chip(s: Scenario) -> str:
    if s.phase is Phase.TRAINING:
        from rackmath.catalog.training_runs import training_runs

        runs = {r.id: r for r in training_runs()}
        run = runs.get(s.training_run)
        return run.system.chip.id if run else "unknown"
    return catalog.system(s.system_id).chip.id


def scenario_is_moe(s: Scenario) -> bool:
    """Whether the scenario's model routes tokens to experts (training rows: their run's)."""
    if s.phase is Phase.TRAINING:
        from rackmath.catalog.training_runs import training_runs

        run = {r.id: r for r in training_runs()}.get(s.training_run)
        return bool(run and run.model.is_moe)
    return bool(_model(s.model_id).is_moe)


def predict(s: Scenario, calibration: Calibration = PURE_ROOFLINE, edge: str = "") -> Prediction:
    """The cost model's prediction of one scenario, with the calibration's parameters for
    the scenario's chip family (pure roofline by default). ``edge`` ``"p10"`` / ``"p90"``:
    the same prediction with every step at that edge of its band (every operator at the
    10th / 90th percentile of its curve's held-out error, :data:`EDGES`); a throughput's low
    edge is then the step's p90 prediction."""
    p = calibration.for_family(scenario_family(s))
    return _predict_cached(s, _relevant(s, p), edge)


def squared_log_errors(rows: Iterable[Scenario], calibration: Calibration) -> float:
    """Sum over ``rows`` of the squared log error of ``calibration``'s prediction (an
    infeasible prediction counts INFEASIBLE_LOG_ERROR): the objective every fit minimizes."""
    total = 0.0
    for s in rows:
        pred = predict(s, calibration)
        e = float(reality.log_error(pred.value, s.value)) if pred.ok else INFEASIBLE_LOG_ERROR
        total += e * e
    return total
