"""Predict published measurements with the cost model users get, and score the predictions.

Every scenario goes through one function, :func:`predict`, and every serving row through the
one :class:`~rackmath.analyses.serving.deployment.Deployment` a user builds: under its parallel
plan (:func:`~rackmath.analyses.serving.planned.plan_deployment`: TP all-reduce, EP all-to-all,
PP hops), or as the pooled ideal chip where its layout has no plan (``plan: null``,
:func:`~rackmath.analyses.serving.pooled.make_deployment`). Training rows go through
:mod:`rackmath.analyses.training.estimate`. What each metric means:

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

The efficiencies come from a :class:`Calibration` (per chip family; the kernel-grounded model
by default), see :mod:`rackmath.analyses.reality.calibration`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.catalog import loader as catalog
from rackmath.core import architecture as arch
from rackmath.core import loads, reality
from rackmath.core import roofline as rl
from rackmath.core.step import PlanStep
from rackmath.errors import RackmathError
from rackmath.frames import Record
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.precision import Precision
from rackmath.specs.scenario import KvMemoryOf, Metric, Phase, Scenario

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
    Defaults: no scalar (communication fully hidden where overlap is stated) on the kernel
    curves; :data:`PURE` is the pure roofline.
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
    #: the operators' efficiencies these scalars multiply: the fitted kernel curves or the roofline
    mode: EfficiencyMode = EfficiencyMode.KERNEL
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
            flops_frac=self.flops_frac_decode,
            bandwidth_frac=self.bandwidth_frac,
            overhead_s=overhead,
            weight_bandwidth_frac=weight_bandwidth_frac,
            kv_bandwidth_frac=self.kv_bandwidth_frac,
            mode=self.mode,
            overhead_s_per_sequence=self.overhead_decode_s_per_sequence,
        )

    def prefill_efficiency(self, layers: int, weight_bandwidth_frac: float = 1.0) -> rl.Efficiency:
        overhead = float(reality.per_layer_overhead_s(self.overhead_prefill_s_per_layer, layers))
        overhead += self.overhead_prefill_s_per_pass
        return rl.Efficiency(
            flops_frac=self.flops_frac_prefill,
            bandwidth_frac=self.bandwidth_frac,
            overhead_s=overhead,
            weight_bandwidth_frac=weight_bandwidth_frac,
            kv_bandwidth_frac=self.kv_bandwidth_frac,
            mode=self.mode,
        )


PURE = FamilyParams(mode=EfficiencyMode.PURE)


@dataclass(frozen=True)
class Calibration:
    """Parameters per chip family, and the pooled ones for families it has no data for."""

    pooled: FamilyParams = FamilyParams()
    families: tuple[tuple[str, FamilyParams], ...] = ()
    fitted_on: tuple[int, ...] = ()  # row ids
    note: str = "kernel-grounded, no end-to-end fit"

    def for_family(self, family: str) -> FamilyParams:
        return dict(self.families).get(family, self.pooled)

    def to_dict(self) -> dict[str, Any]:
        return {
            "note": self.note,
            "fitted_on_rows": list(self.fitted_on),
            "pooled": self.pooled.to_dict(),
            "families": {name: p.to_dict() for name, p in self.families},
        }


#: The lecture's roofline for every family (the ``roofline`` column of ``rackmath validate``).
PURE_ROOFLINE = Calibration(pooled=PURE, note="pure roofline")


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


@lru_cache(maxsize=4096)
def _deployment(s: Scenario, hop_latency_s: float | None) -> Deployment:
    """The scenario's deployment as a user builds it: its plan on the system's topology, or the
    pooled ideal chip where the row states no plan; the memory reserve leaves the KV cache the
    share of HBM the row states. Each prediction sets its own efficiency on it."""
    model = _model(s.model_id)
    system = _system(catalog.system(s.system_id), FamilyParams(hop_latency_s=hop_latency_s))
    # the weights as the scenario stores them (per class where it says so)
    classes = dict(s.weight_classes) or None
    if s.plan is None:
        d = make_deployment(
            model,
            system,
            chips=s.chips,
            weights=s.weights,
            kv=s.kv,
            compute=s.compute,
            weight_classes=classes,
        )
    else:
        d = plan_deployment(
            model, system, s.plan, weights=s.weights, kv=s.kv, compute=s.compute, weight_classes=classes
        )
    reserve = reality.reserve_frac_for_kv_fraction(
        system.chip.hbm_capacity_bytes,
        d.weight_bytes_per_chip,
        s.kv_memory_frac,
        of_free=s.kv_memory_of is KvMemoryOf.FREE,
    )
    return replace(d, memory_reserve_frac=float(reserve))


@lru_cache(maxsize=4096)
def _max_concurrency(s: Scenario, hop_latency_s: float | None, context: float) -> float:
    """Sequences of ``context`` tokens that fit (independent of efficiency: cached)."""
    return float(_deployment(s, hop_latency_s).max_concurrency([context])[0])


#: The edges of a prediction's band (:func:`predict`'s ``edge``): every step at its p10 or p90.
EDGES = ("p10", "p90")


def _step_at(step_or_grid: Any, edge: str) -> np.ndarray:
    """A step's seconds (``edge`` ""), or its p10 or p90
    (:attr:`rackmath.core.step.PlanStep.step_band_s`) of a plan step or a grid holding one."""
    step = step_or_grid if isinstance(step_or_grid, PlanStep) else step_or_grid.step
    if not edge:
        return np.asarray(step.step_s)
    lo, hi = step.step_band_s
    return np.asarray(lo if edge == "p10" else hi)


def _decode_step_s(d: Deployment, batch: float, contexts: np.ndarray, edge: str) -> np.ndarray:
    return np.asarray(_step_at(d.decode([batch], contexts), edge)[0])


def _prefill(d: Deployment, batch: float, length: float, edge: str) -> tuple[float, float]:
    """(step seconds, FLOPs) of one prefill."""
    flops = float(batch) * float(arch.prefill_flops_per_sequence(d.model, float(length)))
    return float(_step_at(d.prefill([batch], [length]), edge)[0, 0]), flops


def _predict_serving(s: Scenario, p: FamilyParams, edge: str = "") -> Prediction:
    structure = _deployment(s, p.hop_latency_s)
    path = "ideal-chip" if structure.pooled else "planned"
    layers = structure.model.num_layers
    weights, compute = structure.precisions.weights, structure.precisions.compute
    wbw = p.weight_bandwidth_frac(weights.bytes_per_element, is_weight_only(weights, compute))
    if s.kv_read_per_query_head:  # every query head re-reads its KV head: KV reads x the GQA group
        a = structure.model.attention
        p_dec = replace(p, kv_bandwidth_frac=p.kv_bandwidth_frac * a.num_kv_heads / a.num_heads)
    else:
        p_dec = p
    # communication is added to the step unless the source states a two-batch overlap
    overlap = p.two_batch_overlap_frac if s.two_batch_overlap else 0.0
    dec = replace(p_dec.decode_efficiency(layers, wbw), all_reduce=s.all_reduce)
    pre = replace(p.prefill_efficiency(layers, wbw), all_reduce=s.all_reduce)
    decoding = replace(structure, efficiency=dec, comm_overlap_frac=overlap)
    detail: dict[str, Any] = {"memory_reserve_frac": structure.memory_reserve_frac}
    if not structure.weights_fit:
        return Prediction(s.row_id, float("nan"), path, error="the weights do not fit in HBM")
    m = s.metric
    if m in (Metric.DECODE_TOKENS_PER_S_PER_USER, Metric.DECODE_STEP_S):
        assert s.batch is not None
        contexts = np.arange(s.input_tokens, s.input_tokens + s.output_tokens, dtype=float)
        step = float(np.mean(_decode_step_s(decoding, s.batch, contexts, edge)))
        value = 1.0 / step if m is Metric.DECODE_TOKENS_PER_S_PER_USER else step
        detail["mean_step_s"] = step
    elif m in (Metric.TTFT_S, Metric.INPUT_TOKENS_PER_S, Metric.PREFILL_MFU):
        assert s.batch is not None
        step, flops = _prefill(replace(decoding, efficiency=pre), s.batch, s.input_tokens, edge)
        if m is Metric.TTFT_S:
            value = step
        elif m is Metric.INPUT_TOKENS_PER_S:
            detail["prefill_s"] = step
            value = s.batch * s.input_tokens / step
        else:
            detail["prefill_s"] = step
            value = float(rl.utilization(flops, step, structure.peak_flops_per_s))
    elif m is Metric.OUTPUT_TOKENS_PER_S and s.phase is Phase.STATIC_BATCH:
        assert s.batch is not None
        prefill_s, _ = _prefill(replace(decoding, efficiency=pre), s.batch, s.input_tokens, edge)
        contexts = reality.decode_contexts(s.input_tokens, s.output_tokens)
        decode_total = (
            float(np.sum(_decode_step_s(decoding, s.batch, contexts, edge))) if contexts.size else 0.0
        )
        value = float(
            reality.static_batch_output_tokens_per_s(s.batch, s.output_tokens, prefill_s, decode_total)
        )
        detail.update(prefill_s=prefill_s, decode_total_s=decode_total)
    elif m is Metric.OUTPUT_TOKENS_PER_S and s.phase is Phase.MAX_THROUGHPUT:
        limit = _max_concurrency(s, p.hop_latency_s, float(s.input_tokens + s.output_tokens))
        batch = limit if s.max_batch is None else min(limit, s.max_batch)
        batch = float(reality.scheduled_concurrency(batch, p.concurrency_frac))
        if batch < 1:
            return Prediction(s.row_id, float("nan"), path, error="no sequence fits beside the weights")
        load = loads.mixed_load(
            structure.model, batch, s.input_tokens, s.output_tokens, structure.kv_bytes_per_element
        )
        step = float(np.asarray(_step_at(decoding.step(load), edge)))
        value = batch / step
        detail.update(concurrency=batch, kv_limited_concurrency=limit, step_s=step)
    else:  # pragma: no cover - the loader admits only the metrics above for serving phases
        return Prediction(s.row_id, float("nan"), path, error=f"metric {m} for phase {s.phase}")
    return Prediction(s.row_id, float(value), path, tuple(detail.items()))


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
        run, rl.Efficiency(flops_frac=p.flops_frac_training, mode=p.mode), _system(run.system, p)
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
            mode=p.mode,
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
        mode=p.mode,
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


def predict(s: Scenario, calibration: Calibration = Calibration(), edge: str = "") -> Prediction:
    """The cost model's prediction of one scenario, with the calibration's parameters for
    the scenario's chip family (by default the kernel-grounded model, no end-to-end fit;
    :data:`PURE_ROOFLINE` for the lecture's roofline). ``edge`` ``"p10"`` / ``"p90"``:
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
