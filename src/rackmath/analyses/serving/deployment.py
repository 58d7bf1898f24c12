"""One :class:`Deployment`: a model on a system's chips under a plan, with its precisions, price,
efficiency and (optionally) the runtime that serves it; its step, memory, fit and concurrency,
and the decode and prefill grids.

Every answer that costs a model on chips composes this class: the blackboard derivation, the
planned grids, the deployment search (with array plan dimensions,
:class:`~rackmath.analyses.serving.parts.PlanDims`), the validation against published
measurements, the request simulator, and training (which adds its optimizer and schedule). It
calls :func:`rackmath.core.parallel.plan_step` in one place, :meth:`Deployment.step`, and sizes
memory with the one serving account (:func:`rackmath.core.memory.serving_memory_per_chip`) under
the one convention of :mod:`rackmath.analyses.serving.parts`.

The lecture's ideal chip is a pooled plan (``pooled=True``, :func:`~.pooled.make_deployment`):
``tp = N`` over one chip with ``N`` times one chip's FLOP/s, bandwidth and capacity, communication
off. A real layout (:func:`~.planned.plan_deployment`) pays its communication on the topology.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.kernels import tables as et
from rackmath.analyses.serving.parts import (
    DEFAULT_MEMORY_RESERVE_FRAC,
    GRID_LABELS,
    POOLED_DIMS,
    FloatArray,
    MemoryPerChip,
    PlanDims,
    Precisions,
    at_shape,
    broadcast_to_step,
    check_context_parallel,
    one_point,
)
from rackmath.analyses.serving.throughput import DecodeThroughput, batch_context_grid
from rackmath.core import architecture as arch
from rackmath.core import loads, numeric
from rackmath.core import memory as mem
from rackmath.core import parallel as par
from rackmath.core import roofline as rl
from rackmath.core import sharding as shard
from rackmath.core.chip_rates import ChipRates
from rackmath.core.lazy import cached_property
from rackmath.core.memory import ChipWeightBytes
from rackmath.core.network import DEFAULT_ACTIVATION_BYTES, CommOverlap, Topology
from rackmath.core.sharding import ShardableModel, StageSplit
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.frames import Col, Layout, Tabular, grid_layout
from rackmath.specs.efficiency import EfficiencyMode, EfficiencyTable
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import WEIGHT_CLASSES, ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision
from rackmath.specs.runtime import RuntimeProfile

#: A plan's fields every description states (``cp`` and ``cp_comm`` where it has CP).
PLAN_FIELDS = ("tp", "pp", "dp", "ep", "moe_tp", "redundant_experts", "skew", "tbo")
#: The plan word of the pooled ideal chip (``rackmath sweep``'s ``plans: [ideal]``).
IDEAL_PLAN = "ideal"


def check_context(model: ModelSpec, tokens: ArrayLike, field: str = "context") -> None:
    """Refuse a context longer than the model's own window (``max_position_embeddings``).

    The one rule behind ``--context`` (and ``--input-len + --output-len``) of every command,
    ``rm.decode`` / ``rm.prefill`` / ``rm.explain``, and the contexts a sweep skips."""
    window = model.max_context
    longest = float(np.max(tokens)) if np.size(tokens) else 0.0
    if window and longest > window:
        raise InputError(
            field, f"{longest:,.0f} tokens", f"at most {window:,} tokens ({model.id}'s context window)"
        )


@dataclass(frozen=True)
class Deployment:
    """A model on a system's chips under a plan: precisions, price, efficiency, runtime.

    ``pooled``: the lecture's ideal chip (``plan.chips`` chips as one, communication off).
    Otherwise ``topology`` carries communication (``communication`` False turns it off), the
    plan's stages split the layers, and each rank is one chip."""

    model: ModelSpec
    system: SystemSpec
    plan: ParallelPlan
    precisions: Precisions
    usd_per_chip_hour: float
    efficiency: rl.Efficiency = rl.KERNEL_GROUNDED
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC
    pooled: bool = False
    topology: Topology | None = None
    comm_overlap_frac: float = CommOverlap.ADDED
    communication: bool = True
    extra_hop_latency_s: float = 0.0
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES
    allow_uneven_stages: bool = True
    #: the engine that serves it (caps per data-parallel engine, its memory flag); None: the reserve
    runtime: RuntimeProfile | None = None
    notes: tuple[str, ...] = field(default=())

    # ------------------------------------------------------------------ what it is
    @property
    def chips(self) -> int:
        return self.plan.chips

    @property
    def rank_chips(self) -> int:
        """Chips one rank of the step stands for: all of them pooled, else one."""
        return self.plan.chips if self.pooled else 1

    @property
    def plan_text(self) -> str:
        """The plan as a report names it (``ideal`` for the pooled chip)."""
        return IDEAL_PLAN if self.pooled else str(self.plan)

    def labels(self) -> dict[str, Any]:
        """What a result is of, for its ``to_dict``: model, system and chip count."""
        return {"model": self.model.id, "system": self.system.id, "chips": self.chips}

    @cached_property
    def params(self) -> arch.ParamCounts:
        return arch.param_counts(self.model)

    @cached_property
    def shardable(self) -> ShardableModel:
        return shard.shardable(self.model, self.precisions.weights)

    @cached_property
    def moe_split(self) -> tuple[float, float, int, int]:
        return arch.moe_weight_bytes(self.model, self.precisions.weights)

    @property
    def peak_flops_per_s(self) -> float:
        """All chips' peak at the compute precision."""
        return self.chips * self.system.chip.peak_flops(self.precisions.compute)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.chips * self.system.chip.hbm_bandwidth_bytes_per_s

    @property
    def capacity_bytes(self) -> float:
        return self.chips * self.system.chip.hbm_capacity_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights held in HBM, each tensor class at its own storage precision
        (:func:`rackmath.core.architecture.weight_bytes_total`)."""
        return arch.weight_bytes_total(self.model, self.precisions.weights)

    @property
    def weight_formats(self) -> dict[str, str]:
        """Each weight class's storage format in this deployment (:data:`WEIGHT_CLASSES`)."""
        return {c: self.model.weight_precision(c, self.precisions.weights).value for c in WEIGHT_CLASSES}

    @cached_property
    def kv_bytes_per_element(self) -> float:
        return self.precisions.kv.bytes_per_element

    def kv_bytes_per_sequence(self, context: ArrayLike) -> FloatArray:
        return arch.kv_bytes_per_sequence(self.model, context, self.kv_bytes_per_element)

    def weight_bytes_read(self, tokens: ArrayLike) -> FloatArray:
        always, expert, experts, per_token = self.moe_split
        return rl.weight_bytes_read(
            tokens,
            always_read_bytes=always,
            expert_bytes=expert,
            experts=experts,
            experts_per_token=per_token,
        )

    @property
    def attention_precision(self) -> Precision:
        """The precision the attention core computes in: the KV cache's where the chip has
        that peak (FP8 attention over an FP8 cache), else bf16, else the GEMMs' precision
        (a chip listed with low-precision peaks only)."""
        peaks = self.system.chip.peak_flops_per_s
        for candidate in (self.precisions.kv.compute_class, Precision.BF16):
            if candidate in peaks:
                return candidate
        return self.precisions.compute

    # ------------------------------------------------------------------ efficiency
    @cached_property
    def efficiency_table(self) -> EfficiencyTable:
        """The per-operator efficiencies the step runs on
        (:func:`rackmath.analyses.kernels.tables.grounded_table`)."""
        return et.grounded_table(self.system.chip.id, self.efficiency)

    @property
    def transferred_from(self) -> str | None:
        """The measured chip whose kernel curves this chip borrows (None: its own, or pure)."""
        return et.donor_of(self.system.chip.id) if self.efficiency.mode is EfficiencyMode.KERNEL else None

    @property
    def efficiency_label(self) -> str:
        """One line for reports: which efficiency the numbers use and where it comes from."""
        return et.efficiency_label(self.system.chip.id, self.efficiency)

    @property
    def efficiency_described(self) -> dict[str, Any]:
        """The efficiency as a result's JSON states it (:func:`rackmath.analyses.kernels.tables.describe`)."""
        return et.describe(self.system.chip.id, self.efficiency)

    def pure(self) -> Deployment:
        """The same deployment on the pure roofline (the lecture's numbers)."""
        return replace(self, efficiency=rl.PURE_ROOFLINE)

    def chip_rates(self, chips: float = 1.0) -> ChipRates:
        """What ``chips`` chips pooled offer the operators: peaks, bandwidth, curves, precisions."""
        chip = self.system.chip
        return ChipRates(
            peak_flops_per_s={p.value: chips * f for p, f in chip.peak_flops_per_s.items()},
            bandwidth_bytes_per_s=chips * chip.hbm_bandwidth_bytes_per_s,
            efficiency=self.efficiency_table,
            compute=self.precisions.compute,
            kv=self.precisions.kv,
            chips=chips,  # a pool's chips' L2s (curve spill thresholds)
        )

    @cached_property
    def rates(self) -> ChipRates:
        """What one rank offers: the pool, or one chip."""
        return self.chip_rates(self.rank_chips)

    # ------------------------------------------------------------------ the plan
    @cached_property
    def dims(self) -> PlanDims:
        """The plan's dimensions, stage shares included (one rank for the pool), as
        floats (every point converts them to those: :meth:`PlanDims.as_numbers`)."""
        return (POOLED_DIMS if self.pooled else self.with_stages(PlanDims.of(self.plan))).as_numbers()

    def with_stages(self, dims: PlanDims) -> PlanDims:
        """``dims`` with the slowest stage's share of a pass (LM head on the last stage), the
        heaviest stage's share of the weights and of the layers, under the plan's ``stages`` or
        the balanced split (:func:`rackmath.core.sharding.pipeline_fractions`), arrays for arrays."""
        time, weights, layers = shard.pipeline_fractions(self.shardable, dims.pp, self.plan.stages)
        if np.ndim(time) == 0:  # one plan: plain numbers
            return replace(dims, stage_frac=float(time), weight_frac=float(weights), layer_frac=float(layers))
        return replace(dims, stage_frac=time, weight_frac=weights, layer_frac=layers)

    @cached_property
    def stage_split(self) -> StageSplit:
        """The pipeline stages: the plan's ``stages`` or the tool's balanced split, the LM head
        charged to the last stage (:func:`rackmath.core.sharding.pipeline_split`)."""
        if self.pooled:
            return shard.pipeline_split(self.shardable, 1)
        return shard.pipeline_split(self.shardable, self.plan.pp, self.plan.stages)

    def _dims(self, dims: PlanDims | None) -> PlanDims:
        if dims is None:
            return self.dims
        return dims if dims.stage_frac is not None or dims is POOLED_DIMS else self.with_stages(dims)

    def weights_per_chip(self, dims: PlanDims | None = None) -> ChipWeightBytes:
        """Weight bytes one chip of the heaviest stage holds under ``dims`` (default: its own)."""
        if dims is None:
            return self._own_weights
        d = self._dims(dims)
        return mem.weight_bytes_per_chip(
            self.shardable,
            tp=d.tp,
            pp=d.pp,
            ep=d.ep,
            stage_frac=d.weight_frac,
            moe_tp=d.moe_tp,
            redundant_experts=d.redundant_experts,
        )

    @cached_property
    def _own_weights(self) -> ChipWeightBytes:
        return self.weights_per_chip(self.dims)

    # ------------------------------------------------------------------ memory and fit
    @cached_property
    def usable_bytes_per_chip(self) -> float:
        """HBM one chip may fill under the reserve: ``capacity x (1 - reserve)``."""
        return float(rl.usable_bytes(self.system.chip.hbm_capacity_bytes, self.memory_reserve_frac))

    @property
    def usable_bytes(self) -> float:
        """HBM one rank may fill under the reserve (the pool: ``chips x`` one chip's)."""
        return self.rank_chips * self.usable_bytes_per_chip

    @property
    def weight_bytes_per_chip(self) -> float:
        """Weights one chip holds (the heaviest stage's; the pool's spread evenly)."""
        return float(np.asarray(self._own_weights.total)) / self.rank_chips

    @property
    def weights_fit(self) -> bool:
        return bool(np.all(self.memory(0.0, 1.0).fits))

    def usable_for(self, held_without_kv: Any, dims: PlanDims | None = None) -> Any:
        """What a rank may fill: the reserve's share of HBM, or the runtime's memory flag
        (``basis = total``: ``f x HBM``; ``free``: ``rest + f x (HBM - rest)`` where ``rest`` is
        what the chip holds besides its KV cache), ``f`` by the chips of one engine."""
        r = self.runtime
        if r is None:
            return self.usable_bytes
        hbm = self.rank_chips * self.system.chip.hbm_capacity_bytes
        fracs = r.memory_frac(self._dims(dims).engine_chips)
        frac: Any = float(fracs) if np.ndim(fracs) == 0 else fracs
        if r.kv_memory_basis == "total":
            return frac * hbm
        return held_without_kv + frac * (hbm - held_without_kv)

    def memory(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        tokens_in_flight: ArrayLike | None = None,
        *,
        dims: PlanDims | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> MemoryPerChip:
        """HBM per chip holding ``batch`` sequences of ``context`` tokens; ``tokens_in_flight``
        (default: one per sequence, decode) sizes the activation workspace. ``dims``: other plan
        dimensions (arrays) than the deployment's; ``shape``: the grid's shape when one point is
        given as single values (computed on floats)."""
        d = self._dims(dims)
        b = numeric.num(batch)
        held = mem.serving_memory_per_chip(
            self.shardable,
            batch=b,
            kv_bytes_per_sequence=self.kv_bytes_per_sequence(context),
            tokens_in_flight=b if tokens_in_flight is None else numeric.num(tokens_in_flight),
            tp=d.tp,
            pp=d.pp,
            dp=d.dp,
            ep=d.ep,
            stage_frac=d.weight_frac,
            layer_frac=d.layer_frac,
            activation_bytes=self.activation_bytes,
            moe_tp=d.moe_tp,
            redundant_experts=d.redundant_experts,
            weights=self.weights_per_chip(None if dims is None else d),
            cp=d.cp,
        )
        kv, activations = held.kv_bytes, held.activation_bytes
        if shape is not None:  # one point (shape all 1s): two views of one small array
            kv, activations = np.array((kv, activations), dtype=float).reshape(2, *shape)
        capacity = self.rank_chips * self.system.chip.hbm_capacity_bytes
        # what the chip holds besides its cache is added only where a runtime's flag reads it
        rest = None if self.runtime is None else held.weights.total + activations
        return MemoryPerChip.serving(held.weights, kv, activations, capacity, self.usable_for(rest, d))

    def max_concurrency(self, context: ArrayLike, tokens_per_sequence: float = 1.0) -> FloatArray:
        """Most sequences of ``context`` tokens whose KV and activations fit beside the weights
        (0 when the weights alone do not); ``tokens_per_sequence`` in flight per step (1 in
        decode, ``1 + I/O`` when mixed)."""
        one = self.memory(1.0, context, tokens_in_flight=tokens_per_sequence)
        empty = self.memory(0.0, context)
        return mem.max_concurrency(empty.usable_bytes, empty.total_bytes, one.total_bytes - empty.total_bytes)

    def runtime_admits(self, load: loads.StepLoad, dims: PlanDims | None = None) -> Any:
        """Whether the runtime's engines run the step (True without a runtime): each of the
        ``dp`` engines holds at most ``max_seqs`` sequences and ``max_tokens`` tokens a step;
        without chunked prefill a prompt runs whole in one engine's step."""
        r = self.runtime
        if r is None:
            return True
        dp = numeric.num(self._dims(dims).dp)
        seqs = load.decode_sequences + load.prefill_sequences * (load.decode_sequences == 0)
        ok = (seqs <= dp * r.max_seqs) & (load.tokens <= dp * r.max_tokens)
        if not r.chunked_prefill:
            ok = ok & (load.prefill_length <= r.max_tokens)
        return ok

    # ------------------------------------------------------------------ the step
    def step(
        self,
        load: loads.StepLoad,
        *,
        decode: bool = True,
        dims: PlanDims | None = None,
        shape: tuple[int, ...] | None = None,
    ) -> PlanStep:
        """One cycle processing ``load`` (see :mod:`rackmath.core.operators`) under the plan, or
        under ``dims`` (arrays: many plans in one call); ``shape`` broadcasts a one-point load's
        answer to the grid's shape. The one call of :func:`rackmath.core.parallel.plan_step`."""
        d = self._dims(dims)
        communication = self.communication and not self.pooled
        return par.plan_step(
            self.shardable,
            tp=d.tp,
            pp=d.pp,
            dp=d.dp,
            ep=d.ep,
            load=load,
            rates=self.rates,
            topo=self.topology if communication else None,
            stage_frac=d.stage_frac,
            comm_overlap_frac=self.comm_overlap_frac,
            communication=communication,
            decode=decode,
            extra_hop_latency_s=self.extra_hop_latency_s,
            activation_bytes=self.activation_bytes,
            moe_tp=d.moe_tp,
            redundant_experts=d.redundant_experts,
            skew=d.skew,
            tbo_overlap_frac=d.tbo,
            shape=shape,
            cp=d.cp,
            cp_comm=d.cp_comm,
        )

    def decode(self, batch: ArrayLike, context: ArrayLike) -> DecodeGrid:
        """One decode cycle for each (batch, context): every sequence makes one token."""
        check_context_parallel(self.plan.cp, context, "context")
        b, c = batch_context_grid(batch, context)
        bs, cs, shape = one_point(b, c)
        step = self.step(loads.decode_load(self.model, bs, cs, self.kv_bytes_per_element), shape=shape)
        b, c = broadcast_to_step(b, c, step)
        memory = self.memory(bs, cs, shape=shape)
        return numeric.frozen_record(
            DecodeGrid, deployment=self, batch=b, context=c, step=step, memory=memory
        )

    def prefill(self, batch: ArrayLike, length: ArrayLike) -> PrefillGrid:
        """One prefill pass of ``batch`` prompts of ``length`` tokens (KV written, not read); on a
        plan each pipeline micro-batch holds whole prompts, so fewer prompts than stages leave
        stages idle."""
        check_context_parallel(self.plan.cp, length, "prompt")
        b, n = batch_context_grid(batch, length)
        bs, ns, shape = one_point(b, n)
        load = loads.prefill_load(self.model, bs, ns, self.kv_bytes_per_element, whole=not self.pooled)
        step = self.step(load, decode=False, shape=shape)
        memory = self.memory(bs, ns, tokens_in_flight=bs * ns, shape=shape)
        return PrefillGrid(self, *broadcast_to_step(b, n, step), step=step, memory=memory)

    def describe(self) -> dict[str, Any]:
        """What the deployment is, as JSON: model, system, plan, precisions, price, efficiency."""
        p, t = self.plan, self.topology
        return {
            "model": self.model.id,
            "system": self.system.id,
            "chip": self.system.chip.id,
            "chips": self.chips,
            "plan": {
                **{k: getattr(p, k) for k in PLAN_FIELDS},
                **({"cp": p.cp, "cp_comm": p.cp_comm} if p.cp > 1 else {}),
            },
            "plan_text": self.plan_text,
            "precision": {
                **{k: getattr(self.precisions, k).value for k in ("weights", "kv", "compute")},
                **({"weight_classes": self.weight_formats} if self.model.stated_weight_classes else {}),
            },
            "efficiency": self.efficiency_described,
            "chips_per_domain": None if t is None else t.chips_per_domain,
            "scale_up_bytes_per_s": None if t is None else t.scale_up_bytes_per_s,
            "scale_out_bytes_per_s": None if t is None else t.scale_out_bytes_per_s,
            "comm_overlap_frac": float(self.comm_overlap_frac),
            "communication": self.communication and not self.pooled,
            "usd_per_chip_hour": self.usd_per_chip_hour,
            "stage_layers": list(self.stage_split.stage_layers),
            "stage_imbalance": self.stage_split.imbalance,
            **({"lm_head_stage": p.pp, "embedding_stage": 1} if p.pp > 1 and not self.pooled else {}),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class DecodeGrid(DecodeThroughput, Tabular):
    """One decode step for every (batch, context) pair; arrays are ``len(batch) x len(context)``.

    ``batch`` sequences each hold ``context`` tokens of cache and produce one token."""

    frame_layout = grid_layout(
        Col("step.compute_s", "compute_s", "s"),
        Col("step.weight_fetch_s", "weight_fetch_s", "s"),
        Col("step.kv_fetch_s", "kv_fetch_s", "s"),
        Col("step.comm_s", "communication_s", "s"),
        Col("step.bottleneck", "bottleneck"),
        Col("mfu", "mfu_frac", "1"),
        Col("mbu", "mbu_frac", "1"),
        Col("kv_bytes_per_chip", "kv_bytes_per_chip", "bytes"),
        Col("memory_bytes_per_chip", "memory_bytes_per_chip", "bytes"),
        labels=GRID_LABELS,
    )

    deployment: Deployment
    batch: FloatArray
    context: FloatArray
    step: PlanStep
    memory: MemoryPerChip

    @property
    def step_s(self) -> FloatArray:
        """Sum over operators of max(compute, memory), communication and hops: the step."""
        return self.step.step_s

    @property
    def blackboard_step_s(self) -> FloatArray:
        """The lecture's max(total compute, total memory): the lower bound."""
        return self.step.blackboard_s

    @cached_property
    def flops(self) -> FloatArray:
        """Model FLOPs of the step (every chip's)."""
        return np.asarray(self.batch * arch.decode_flops_per_token(self.deployment.model, self.context))

    @cached_property
    def kv_bytes_per_sequence(self) -> FloatArray:
        return np.broadcast_to(self.deployment.kv_bytes_per_sequence(self.context), self.step_s.shape)

    @property
    def kv_bytes_per_chip(self) -> FloatArray:
        """The batch's KV cache one chip holds (the pool's spread evenly over its chips)."""
        return at_shape(np.asarray(self.memory.kv_bytes) / self.deployment.rank_chips, self.step_s.shape)

    @property
    def weight_bytes_per_chip(self) -> float:
        """Weights one chip holds (the pool's spread evenly over its chips)."""
        return self.deployment.weight_bytes_per_chip

    @property
    def memory_bytes_per_chip(self) -> FloatArray:
        """What one chip holds: weights, KV and activations (the pool's spread evenly)."""
        d = self.deployment
        return np.broadcast_to(np.asarray(self.memory.total_bytes) / d.rank_chips, self.step_s.shape)

    @property
    def mfu(self) -> FloatArray:
        return rl.utilization(self.flops, self.step_s, self.deployment.peak_flops_per_s)

    @property
    def mbu(self) -> FloatArray:
        """Bytes a rank moves in the step (weights, KV, activations) over what its peak
        bandwidth moves in it."""
        d = self.deployment
        return rl.utilization(
            self.step.bytes_moved, self.step_s, d.rank_chips * d.system.chip.hbm_bandwidth_bytes_per_s
        )

    @property
    def fits(self) -> NDArray[np.bool_]:
        """Weights, KV and activations fit (:meth:`Deployment.memory`)."""
        return at_shape(self.memory.fits, self.step_s.shape)


@dataclass(frozen=True)
class PrefillGrid(Tabular):
    """One prefill pass of ``batch`` prompts of ``length`` tokens each (KV written, not read)."""

    frame_layout = Layout(
        columns=(
            *GRID_LABELS,
            Col("batch", "batch", "prompts"),
            Col("length", "prompt_tokens", "tokens"),
            Col("step.step_s", "step_s", "s"),
            Col("step.bottleneck", "bottleneck"),
            Col("tokens", "tokens", "tokens"),
            Col("usd_per_million_input_tokens", "usd_per_million_input_tokens", "USD per 1e6 tokens"),
            Col("mfu", "mfu_frac", "1"),
            Col("fits", "fits"),
        ),
        dims=("batch", "prompt"),
        coords=("batch", "prompt_tokens"),
    )

    deployment: Deployment
    batch: FloatArray
    length: FloatArray
    step: PlanStep
    memory: MemoryPerChip

    @property
    def tokens(self) -> FloatArray:
        return self.batch * self.length

    @property
    def step_s(self) -> FloatArray:
        return self.step.step_s

    @cached_property
    def flops(self) -> FloatArray:
        return np.asarray(self.batch * arch.prefill_flops_per_sequence(self.deployment.model, self.length))

    @property
    def usd_per_million_input_tokens(self) -> FloatArray:
        d = self.deployment
        return rl.usd_per_million_tokens(self.step_s, self.tokens, d.chips, d.usd_per_chip_hour)

    @property
    def mfu(self) -> FloatArray:
        return rl.utilization(self.flops, self.step_s, self.deployment.peak_flops_per_s)

    @property
    def fits(self) -> NDArray[np.bool_]:
        return at_shape(self.memory.fits, self.step_s.shape)
