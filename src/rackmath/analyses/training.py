"""Training analysis: a model, a system and a parallel plan -> step time, memory, cost.

The step model (every formula lives in :mod:`rackmath.core.training`,
:mod:`rackmath.core.pipeline` and :mod:`rackmath.core.collectives`):

    t_mb      = (model + recompute FLOPs of one micro-batch on one chip) / (peak * flops_frac)
              + tensor-, context- and expert-parallel traffic of that micro-batch
              + its two stage-to-stage sends (forward activations, backward gradients)
    t_pipe    = m * t_mb / (1 - bubble(schedule, P, m, v))
    t_dp      = gradient (ZeRO 0-2) or weight+gradient (ZeRO 3) traffic per step
    t_step    = t_pipe + max(0, t_dp - t_pipe) + t_optimizer

Assumptions: work splits evenly over the chips (layers over stages rounded up: the
slowest stage sets the pace); tensor, context and expert traffic sits on the critical path
(no overlap); data-parallel traffic overlaps the compute of the step (bucketed
all-reduce, Li et al. 2020, PyTorch DDP §3.2.3; FSDP prefetching) and only its excess is
exposed; the optimizer step streams its states once through HBM (read and write).
``efficiency.flops_frac`` is the achievable-matmul hook: 1.0 is the pure roofline;
:data:`CALIBRATED_TRAINING` is one value for all rows (see :func:`calibrated_flops_frac`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from rackmath.analyses.serving import DEFAULT_MEMORY_RESERVE_FRAC
from rackmath.core import architecture as arch
from rackmath.core import network as net
from rackmath.core import parallel as par
from rackmath.core import pipeline as pl
from rackmath.core import roofline as rl
from rackmath.core import training as tr
from rackmath.errors import DoesNotFitError, InputError
from rackmath.frames import Col, Layout, Tabular
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision
from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_HOUR

#: Default global batch: 4M tokens (Llama 2, Touvron et al. 2023, §2.2: "4M tokens").
DEFAULT_GLOBAL_BATCH_TOKENS = 4 * 2**20
#: Default sequence length when the model's own is longer (Llama 3 pre-trains at 8K).
DEFAULT_SEQ_LEN = 8192

#: One achievable-matmul fraction for every training row, fitted once (geometric mean of
#: measured / pure-roofline throughput over the seven training rows of
#: shared/reference/measurements.csv plus DeepSeek-V3; see docs/training.md). Never per row.
#: No efficiency derating (the faces name it without importing the core).
PURE_ROOFLINE = rl.PURE_ROOFLINE
CALIBRATED_TRAINING = rl.Efficiency(flops_frac=0.77)  # 0.774 (0.75 before row 67 ran with full recompute)


@dataclass(frozen=True)
class TrainingSetup:
    """A validated training job: what to train, on what, how split, for how many tokens."""

    model: ModelSpec
    system: SystemSpec
    plan: ParallelPlan
    tokens: float
    seq_len: int
    global_batch: int  # sequences per step
    microbatch: int  # sequences per micro-batch
    schedule: pl.Schedule
    virtual_stages: int
    recompute: tr.Recompute
    optimizer: tr.Optimizer
    zero: tr.ZeroStage
    sequence_parallel: bool
    compute: Precision
    usd_per_chip_hour: float
    efficiency: rl.Efficiency = rl.PURE_ROOFLINE
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC
    notes: tuple[str, ...] = field(default=())

    @property
    def chips(self) -> int:
        return self.plan.chips

    @property
    def microbatches(self) -> int:
        """Micro-batches per step per pipeline: ``global_batch / (dp * microbatch)``."""
        return self.global_batch // (self.plan.dp * self.microbatch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def layers_per_stage(self) -> int:
        return math.ceil(self.model.num_layers / self.plan.pp)

    @property
    def peak_flops_per_s(self) -> float:
        return self.system.chip.peak_flops(self.compute)

    @cached_property
    def params(self) -> arch.ParamCounts:
        return arch.param_counts(self.model)


def _whole(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InputError(name, value, f"a whole number >= {minimum}")
    return int(value)


def make_training(
    model: ModelSpec,
    system: SystemSpec,
    plan: ParallelPlan,
    *,
    tokens: float,
    chips: int | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    microbatch: int = 1,
    schedule: pl.Schedule | str = pl.Schedule.ONE_F_ONE_B,
    virtual_stages: int = 1,
    recompute: tr.Recompute | str = tr.Recompute.SELECTIVE,
    optimizer: tr.Optimizer | str = tr.Optimizer.ADAM_MIXED,
    zero: int = 1,
    sequence_parallel: bool = True,
    compute: Precision | str | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: rl.Efficiency = rl.PURE_ROOFLINE,
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC,
) -> TrainingSetup:
    """Check the plan against the model and system once; fill defaults; explain refusals."""
    if chips is not None and _whole("chips", chips) != plan.chips:
        raise InputError(
            "--chips", chips, f"the plan's tp x pp x dp x cp = {plan.chips} chips ({plan}); change one"
        )
    if not (isinstance(tokens, int | float) and math.isfinite(tokens) and tokens > 0):
        raise InputError("tokens", tokens, "a positive token budget, e.g. 15e12")
    a = model.attention
    if a.num_heads % plan.tp:
        raise InputError("plan tp", plan.tp, f"a divisor of the {a.num_heads} attention heads")
    if plan.pp > model.num_layers:
        raise InputError("plan pp", plan.pp, f"at most the {model.num_layers} layers")
    if plan.ep > 1:
        if not model.is_moe or model.moe is None:
            raise InputError("plan ep", plan.ep, "1 for a dense model (it has no experts to shard)")
        if model.moe.num_experts % plan.ep:
            raise InputError("plan ep", plan.ep, f"a divisor of the {model.moe.num_experts} experts")
    seq = min(DEFAULT_SEQ_LEN, model.max_context or DEFAULT_SEQ_LEN) if seq_len is None else seq_len
    seq = _whole("seq-len", seq)
    if seq % plan.cp:
        raise InputError("seq-len", seq, f"a multiple of cp = {plan.cp}")
    micro = _whole("microbatch", microbatch)
    unit = plan.dp * micro
    if global_batch is None:
        global_batch = max(1, round(DEFAULT_GLOBAL_BATCH_TOKENS / seq / unit)) * unit
    batch = _whole("batch", global_batch)
    if batch % unit:
        raise InputError("batch", batch, f"a multiple of dp x microbatch = {unit} sequences")
    sched = pl.Schedule.parse(schedule)
    v = _whole("virtual stages", virtual_stages)
    m = batch // unit
    defaulted_v = False
    if sched is pl.Schedule.INTERLEAVED:
        if v < 2:
            v, defaulted_v = 2, True
        if m % plan.pp:
            raise InputError("batch", batch, f"{plan.pp} x dp x microbatch multiples for interleaving")
        if math.ceil(model.num_layers / plan.pp) < v:
            raise InputError("virtual stages", v, "at most the layers per stage")
    elif v != 1:
        raise InputError("virtual stages", v, "1 unless --schedule interleaved")
    if batch * seq > tokens:
        raise InputError(
            "tokens", tokens, f"at least one step's {batch * seq:,} tokens ({batch} x {seq}); raise --tokens"
        )
    try:
        zero_stage = tr.ZeroStage(zero)
    except ValueError:
        raise InputError("zero", zero, "0, 1, 2 or 3") from None
    precision = (
        Precision.parse(compute, "compute precision")
        if compute
        else (
            Precision.BF16
            if Precision.BF16 in system.chip.peak_flops_per_s
            else model.native_weight_precision
        )
    )
    system.chip.peak_flops(precision)
    price = system.chip.price_usd_per_chip_hour.value_usd if usd_per_chip_hour is None else usd_per_chip_hour
    if not (math.isfinite(price) and price > 0):
        raise InputError("price per chip-hour", price, "a positive number")
    if not 0.0 <= memory_reserve_frac < 1.0:
        raise InputError("memory reserve", memory_reserve_frac, "a fraction in [0, 1)")
    notes = []
    if defaulted_v:
        notes.append("interleaved with no --virtual-stages: 2 model chunks per stage assumed.")
    if model.num_layers % plan.pp:
        notes.append(
            f"{model.num_layers} layers over {plan.pp} stages: the fullest stage has "
            f"{math.ceil(model.num_layers / plan.pp)} and sets the pace."
        )
    return TrainingSetup(
        model=model,
        system=system,
        plan=plan,
        tokens=float(tokens),
        seq_len=seq,
        global_batch=batch,
        microbatch=micro,
        schedule=sched,
        virtual_stages=v,
        recompute=tr.Recompute.parse(recompute),
        optimizer=tr.Optimizer.parse(optimizer),
        zero=zero_stage,
        sequence_parallel=sequence_parallel,
        compute=precision,
        usd_per_chip_hour=float(price),
        efficiency=efficiency,
        memory_reserve_frac=memory_reserve_frac,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class MemoryPerChip:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    in_flight_microbatches: float
    capacity_bytes: float
    usable_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes

    @property
    def short_by_bytes(self) -> float:
        return max(0.0, self.total_bytes - self.usable_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights_bytes": self.weights_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "total_bytes": self.total_bytes,
            "in_flight_microbatches": self.in_flight_microbatches,
            "capacity_bytes": self.capacity_bytes,
            "usable_bytes": self.usable_bytes,
            "fits": self.fits,
            "short_by_bytes": self.short_by_bytes,
        }


def _params_per_chip(s: TrainingSetup) -> tuple[float, float]:
    """(dense parameters, routed-expert parameters) one chip of the heaviest stage holds
    before ZeRO sharding: the serving sharding rule (:func:`rackmath.core.parallel.
    weight_bytes_per_chip` at one byte per parameter), so both count the same weights."""
    plan = s.plan
    held = par.weight_bytes_per_chip(par.shardable(s.model, 1.0), tp=plan.tp, pp=plan.pp, ep=plan.ep)
    dense = float(held.tp_sharded + held.replicated + held.vocab)
    return dense, float(held.routed_experts)


def memory_per_chip(s: TrainingSetup, recompute: tr.Recompute | None = None) -> MemoryPerChip:
    """Model states (ZeRO over the data-parallel ranks) plus the activations of the
    micro-batches the busiest stage holds under the schedule: ``n b s_local stored +
    b s_local rebuild`` (:func:`rackmath.core.training.stage_activations`; the buffer a
    recomputing backward rebuilds counts once, since a stage runs one backward at a time)."""
    plan = s.plan
    opt = tr.OPTIMIZER_BYTES[s.optimizer]
    dense, experts = _params_per_chip(s)
    d_w, d_g, d_o = tr.model_state_bytes(dense, opt, s.zero, plan.dp * plan.cp)
    expert_dp = plan.dp * plan.tp * plan.cp // plan.ep
    e_w, e_g, e_o = tr.model_state_bytes(experts, opt, s.zero, expert_dp)
    mode = s.recompute if recompute is None else recompute
    shape = tr.layer_shape(s.model)
    local_seq = s.seq_len // plan.cp
    stage = tr.stage_activations(
        shape,
        s.layers_per_stage,
        local_seq,
        tp=plan.tp,
        sequence_parallel=s.sequence_parallel,
        recompute=mode,
    )
    in_flight = pl.in_flight_microbatches(
        s.schedule, plan.pp, s.microbatches, virtual_stages=s.virtual_stages
    )
    # stored activations per micro-batch in flight; the rebuild buffer once (one backward at a time)
    activations = s.microbatch * local_seq * float(stage.peak_bytes_per_token(in_flight))
    capacity = s.system.chip.hbm_capacity_bytes
    return MemoryPerChip(
        weights_bytes=float(d_w + e_w),
        grads_bytes=float(d_g + e_g),
        optimizer_bytes=float(d_o + e_o),
        activations_bytes=activations,
        in_flight_microbatches=in_flight,
        capacity_bytes=capacity,
        usable_bytes=float(rl.usable_bytes(capacity, s.memory_reserve_frac)),
    )


# ---------------------------------------------------------------------------- time
@dataclass(frozen=True)
class StepBreakdown:
    """Seconds per step on the busiest chip; ``*_mb_s`` are per micro-batch."""

    microbatches: int
    compute_mb_s: float
    tp_mb_s: float
    cp_mb_s: float
    ep_mb_s: float
    pp_mb_s: float
    bubble_frac: float
    pipeline_s: float
    dp_s: float
    dp_exposed_s: float
    optimizer_s: float

    @property
    def step_s(self) -> float:
        return self.pipeline_s + self.dp_exposed_s + self.optimizer_s

    @property
    def compute_s(self) -> float:
        """Busy compute per step, no bubble, no communication."""
        return self.compute_mb_s * self.microbatches

    @property
    def communication_s(self) -> float:
        return (self.tp_mb_s + self.cp_mb_s + self.ep_mb_s + self.pp_mb_s) * self.microbatches + self.dp_s

    @property
    def lower_bound_s(self) -> float:
        """Everything overlapped, no bubble: ``max(compute, communication)``."""
        return max(self.compute_s, self.communication_s)

    @property
    def upper_bound_s(self) -> float:
        """Nothing overlapped: the bubbled pipeline plus all data-parallel traffic."""
        return self.pipeline_s + self.dp_s + self.optimizer_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_s": self.step_s,
            "compute_s": self.compute_s,
            "bubble_frac": self.bubble_frac,
            "pipeline_s": self.pipeline_s,
            "tp_per_microbatch_s": self.tp_mb_s,
            "cp_per_microbatch_s": self.cp_mb_s,
            "ep_per_microbatch_s": self.ep_mb_s,
            "pp_per_microbatch_s": self.pp_mb_s,
            "dp_s": self.dp_s,
            "dp_exposed_s": self.dp_exposed_s,
            "optimizer_s": self.optimizer_s,
            "lower_bound_s": self.lower_bound_s,
            "upper_bound_s": self.upper_bound_s,
        }


def _links(s: TrainingSetup) -> dict[str, net.Group]:
    sysm, chip, plan = s.system, s.system.chip, s.plan
    up = chip.scale_up_bandwidth_bytes_per_s_per_direction or chip.hbm_bandwidth_bytes_per_s
    out = chip.scale_out_bandwidth_bytes_per_s_per_direction or up
    kw = {
        "scale_up_bandwidth_bytes_per_s": up,
        "scale_up_latency_s": sysm.scale_up_latency_s,
        "scale_out_bandwidth_bytes_per_s": out,
        "scale_out_latency_s": sysm.scale_out_latency_s,
    }
    domain = sysm.scale_up_domain_chips
    return {
        "tp": tr.group_link(plan.tp, 1, domain, **kw),
        "cp": tr.group_link(plan.cp, plan.tp, domain, **kw),
        "dp": tr.group_link(plan.dp * plan.cp, plan.tp, domain, **kw),
        "ep": tr.group_link(plan.ep, 1, domain, **kw),
        "pp": tr.group_link(plan.pp, plan.tp * plan.cp * plan.dp, domain, **kw),
    }


def step_breakdown(s: TrainingSetup, recompute: tr.Recompute | None = None) -> StepBreakdown:
    plan, model = s.plan, s.model
    mode = s.recompute if recompute is None else recompute
    m = s.microbatches
    tokens_mb = s.microbatch * s.seq_len
    fwd = float(tr.model_flops_per_token(model, s.seq_len)) / tr.FORWARD_BACKWARD_PASSES
    extra = float(tr.recompute_flops_per_token(model, s.seq_len, mode))
    # Even split over tp x cp x pp; the fullest stage carries ceil(L/pp) of L layers.
    stage_share = s.layers_per_stage / model.num_layers
    rate = s.peak_flops_per_s * s.efficiency.flops_frac
    per_chip = tokens_mb * stage_share / (plan.tp * plan.cp)
    t_f = per_chip * fwd / rate
    t_b = per_chip * (fwd + extra) / rate  # input gradient, with any recomputed forward
    t_w = per_chip * fwd / rate  # weight gradient
    links = _links(s)
    act = tr.boundary_activation_bytes(s.microbatch, s.seq_len / plan.cp, model.hidden_size)
    layers = s.layers_per_stage
    tp_s = tr.tp_comm_s(act, links["tp"], layers, tr.recompute_forward_passes(mode))
    kv = tr.context_parallel_kv_bytes(s.microbatch, s.seq_len, tr.layer_shape(model).kv_width, plan.tp)
    cp_s = tr.cp_comm_s(kv, links["cp"], layers)
    ep_s = 0.0
    if model.is_moe and model.moe is not None:
        moe_layers = math.ceil(model.num_moe_layers / plan.pp)
        dispatch = net.expert_dispatch_bytes(
            s.microbatch * s.seq_len / (plan.cp * plan.tp),
            plan.ep,
            model.moe.num_experts,
            model.moe.experts_per_token,
            model.hidden_size,
        )
        ep_s = tr.ep_comm_s(float(dispatch), links["ep"], moe_layers)
    pp_s = 0.0
    if plan.pp > 1:
        sends = 2 * (s.virtual_stages if s.schedule is pl.Schedule.INTERLEAVED else 1)
        pp_s = sends * tr.pp_send_s(act / plan.tp, links["pp"])
    comm = tp_s + cp_s + ep_s + pp_s
    # Communication stretches each op in proportion to its compute.
    busy = t_f + t_b + t_w
    scale = (busy + comm) / busy
    bubble = pl.bubble_fraction(
        s.schedule,
        plan.pp,
        m,
        virtual_stages=s.virtual_stages,
        t_f=t_f * scale,
        t_b=t_b * scale,
        t_w=t_w * scale,
    )
    pipeline_s = m * (busy + comm) / (1.0 - bubble)
    dense, _ = _params_per_chip(s)
    opt = tr.OPTIMIZER_BYTES[s.optimizer]
    dp_s = tr.dp_sync_s(dense * opt.grads, dense * opt.weights, links["dp"], s.zero)
    mem = memory_per_chip(s, mode)
    states = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes
    optimizer_s = tr.optimizer_step_s(states, s.system.chip.hbm_bandwidth_bytes_per_s)
    return StepBreakdown(
        microbatches=m,
        compute_mb_s=busy,
        tp_mb_s=tp_s,
        cp_mb_s=cp_s,
        ep_mb_s=ep_s,
        pp_mb_s=pp_s,
        bubble_frac=bubble,
        pipeline_s=pipeline_s,
        dp_s=dp_s,
        dp_exposed_s=max(0.0, dp_s - pipeline_s),
        optimizer_s=optimizer_s,
    )


# ---------------------------------------------------------------------------- recompute choice
@dataclass(frozen=True)
class RecomputeOption:
    mode: tr.Recompute
    activations_bytes: float
    total_bytes: float
    extra_flops_frac: float  # recomputed FLOPs over model FLOPs
    step_s: float
    fits: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "activations_bytes": self.activations_bytes,
            "total_bytes": self.total_bytes,
            "extra_flops_frac": self.extra_flops_frac,
            "step_s": self.step_s,
            "fits": self.fits,
        }


def recompute_options(s: TrainingSetup, budget_bytes: float | None = None) -> list[RecomputeOption]:
    """Every recomputation mode for this job: memory per chip, extra FLOPs, step time."""
    budget = memory_per_chip(s).usable_bytes if budget_bytes is None else budget_bytes
    model_flops = float(tr.model_flops_per_token(s.model, s.seq_len))
    out = []
    for mode in tr.Recompute:
        mem = memory_per_chip(s, mode)
        out.append(
            RecomputeOption(
                mode=mode,
                activations_bytes=mem.activations_bytes,
                total_bytes=mem.total_bytes,
                extra_flops_frac=float(tr.recompute_flops_per_token(s.model, s.seq_len, mode)) / model_flops,
                step_s=step_breakdown(s, mode).step_s,
                fits=mem.total_bytes <= budget,
            )
        )
    return out


def choose_recompute(s: TrainingSetup, budget_bytes: float | None = None) -> RecomputeOption:
    """The fastest mode whose memory fits ``budget_bytes`` per chip (default: usable HBM).

    Raises :class:`DoesNotFitError` naming the leanest mode when none fits.
    """
    options = recompute_options(s, budget_bytes)
    fitting = [o for o in options if o.fits]
    if fitting:
        return min(fitting, key=lambda o: (o.step_s, o.total_bytes))
    leanest = min(options, key=lambda o: o.total_bytes)
    budget = memory_per_chip(s).usable_bytes if budget_bytes is None else budget_bytes
    raise DoesNotFitError(
        f"{s.model.id} with plan {s.plan} under any recomputation (leanest: {leanest.mode.value})",
        leanest.total_bytes,
        budget,
    )


# ---------------------------------------------------------------------------- the estimate
@dataclass(frozen=True)
class TrainingEstimate(Tabular):
    frame_layout = Layout(
        columns=(
            Col("setup.model.id", "model"),
            Col("setup.system.id", "system"),
            Col("setup.chips", "chips", "chips"),
            Col("setup.plan", "plan"),
            Col("setup.schedule", "schedule"),
            Col("setup.recompute", "recompute"),
            Col("setup.compute", "compute_precision"),
            Col("setup.seq_len", "seq_len_tokens", "tokens"),
            Col("setup.global_batch", "global_batch_sequences", "sequences"),
            Col("setup.tokens", "tokens", "tokens"),
            Col("step.step_s", "step_s", "s"),
            Col("step.bubble_frac", "bubble_frac", "1"),
            Col("tokens_per_s", "tokens_per_s", "tokens/s"),
            Col("mfu", "mfu_frac", "1"),
            Col("hfu", "hfu_frac", "1"),
            Col("memory.total_bytes", "memory_bytes_per_chip", "bytes"),
            Col("memory.fits", "fits"),
            Col("total_days", "total_days", "days"),
            Col("chip_hours", "chip_hours", "chip-hours"),
            Col("cost_usd", "cost_usd", "USD"),
        )
    )

    setup: TrainingSetup
    step: StepBreakdown
    memory: MemoryPerChip
    model_flops_per_token: float
    recompute_flops_per_token: float
    options: tuple[RecomputeOption, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.setup.tokens_per_step / self.step.step_s

    @property
    def steps(self) -> float:
        return self.setup.tokens / self.setup.tokens_per_step

    @property
    def total_s(self) -> float:
        return self.steps * self.step.step_s

    @property
    def total_days(self) -> float:
        return self.total_s / SECONDS_PER_DAY

    @property
    def chip_hours(self) -> float:
        return self.total_s * self.setup.chips / SECONDS_PER_HOUR

    @property
    def cost_usd(self) -> float:
        return self.chip_hours * self.setup.usd_per_chip_hour

    @property
    def mfu(self) -> float:
        s = self.setup
        work = s.tokens_per_step * self.model_flops_per_token
        return float(rl.utilization(work, self.step.step_s, s.chips * s.peak_flops_per_s))

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: recomputed FLOPs count too."""
        s = self.setup
        work = s.tokens_per_step * (self.model_flops_per_token + self.recompute_flops_per_token)
        return float(rl.utilization(work, self.step.step_s, s.chips * s.peak_flops_per_s))

    @property
    def total_flops(self) -> float:
        return self.setup.tokens * self.model_flops_per_token

    def to_dict(self) -> dict[str, Any]:
        s = self.setup
        return {
            "model": s.model.id,
            "system": s.system.id,
            "chip": s.system.chip.id,
            "chips": s.chips,
            "plan": {"tp": s.plan.tp, "pp": s.plan.pp, "dp": s.plan.dp, "ep": s.plan.ep, "cp": s.plan.cp},
            "schedule": s.schedule.value,
            "virtual_stages": s.virtual_stages,
            "recompute": s.recompute.value,
            "optimizer": s.optimizer.value,
            "zero_stage": int(s.zero),
            "compute_precision": s.compute.value,
            "seq_len_tokens": s.seq_len,
            "global_batch_sequences": s.global_batch,
            "microbatch_sequences": s.microbatch,
            "microbatches": s.microbatches,
            "tokens_per_step": s.tokens_per_step,
            "tokens": s.tokens,
            "flops_frac": s.efficiency.flops_frac,
            "model_flops_per_token": self.model_flops_per_token,
            "recompute_flops_per_token": self.recompute_flops_per_token,
            "total_model_flops": self.total_flops,
            "step": self.step.to_dict(),
            "step_s": self.step.step_s,
            "bubble_fraction": self.step.bubble_frac,
            "tokens_per_s": self.tokens_per_s,
            "mfu_frac": self.mfu,
            "hfu_frac": self.hfu,
            "steps": self.steps,
            "total_s": self.total_s,
            "total_days": self.total_days,
            "chip_hours": self.chip_hours,
            "usd_per_chip_hour": s.usd_per_chip_hour,
            "cost_usd": self.cost_usd,
            "memory_per_chip": self.memory.to_dict(),
            "recompute_options": [o.to_dict() for o in self.options],
            "notes": list(s.notes),
        }


def estimate(s: TrainingSetup) -> TrainingEstimate:
    """Step time, MFU, memory per chip and the cost of the token budget."""
    return TrainingEstimate(
        setup=s,
        step=step_breakdown(s),
        memory=memory_per_chip(s),
        model_flops_per_token=float(tr.model_flops_per_token(s.model, s.seq_len)),
        recompute_flops_per_token=float(tr.recompute_flops_per_token(s.model, s.seq_len, s.recompute)),
        options=tuple(recompute_options(s)),
    )


def with_efficiency(s: TrainingSetup, efficiency: rl.Efficiency) -> TrainingSetup:
    return replace(s, efficiency=efficiency)


# ---------------------------------------------------------------------------- validation
@dataclass(frozen=True)
class RunPrediction:
    """One published training run against the model's prediction of the same metric."""

    run_id: str
    measurement_id: int | None
    metric: str
    measured: float
    predicted: float
    predicted_mfu_frac: float
    flops_frac: float

    @property
    def error_frac(self) -> float:
        """``predicted / measured - 1``: positive when the model is optimistic for
        throughput metrics (mfu, flops) and pessimistic for time metrics."""
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "measurement_id": self.measurement_id,
            "metric": self.metric,
            "measured": self.measured,
            "predicted": self.predicted,
            "error_frac": self.error_frac,
            "predicted_mfu_frac": self.predicted_mfu_frac,
            "flops_frac": self.flops_frac,
        }


def run_setup(
    run: Any, efficiency: rl.Efficiency = rl.PURE_ROOFLINE, system: SystemSpec | None = None
) -> TrainingSetup:
    """The :class:`TrainingSetup` of a :class:`rackmath.catalog.training_runs.TrainingRun`
    (on ``system`` instead of the run's own, e.g. with a calibrated link latency)."""
    tokens = run.tokens if run.tokens else float(run.global_batch * run.seq_len)
    return make_training(
        run.model,
        run.system if system is None else system,
        run.plan,
        tokens=tokens,
        seq_len=run.seq_len,
        global_batch=run.global_batch,
        microbatch=run.microbatch,
        schedule=run.schedule,
        virtual_stages=run.virtual_stages,
        recompute=run.recompute,
        zero=run.zero,
        compute=run.compute,
        efficiency=efficiency,
    )


def predict_run(run: Any, efficiency: rl.Efficiency = rl.PURE_ROOFLINE) -> RunPrediction:
    """Predict the run's published metric (MFU, FLOP/s per chip, step time or chip-hours)."""
    from rackmath.catalog.training_runs import RunMetric

    e = estimate(run_setup(run, efficiency))
    s = e.setup
    predicted = {
        RunMetric.MFU: e.mfu,
        RunMetric.HFU_FLOPS_PER_CHIP: e.hfu * s.peak_flops_per_s,
        RunMetric.STEP_S: e.step.step_s,
        RunMetric.CHIP_HOURS: e.chip_hours,
    }[run.metric]
    return RunPrediction(
        run_id=run.id,
        measurement_id=run.measurement_id,
        metric=run.metric.value,
        measured=run.value,
        predicted=predicted,
        predicted_mfu_frac=e.mfu,
        flops_frac=efficiency.flops_frac,
    )


def throughput_ratio(p: RunPrediction) -> float:
    """Measured over predicted throughput (time metrics inverted): below 1, the model is
    optimistic."""
    from rackmath.catalog.training_runs import RunMetric

    if p.metric in (RunMetric.STEP_S, RunMetric.CHIP_HOURS):
        return p.predicted / p.measured
    return p.measured / p.predicted


def calibrated_flops_frac(predictions: list[RunPrediction]) -> float:
    """One achievable-matmul fraction for all runs: the geometric mean of measured over
    pure-roofline throughput. Compute time scales as ``1 / flops_frac`` while communication
    does not, so this slightly under-corrects; :data:`CALIBRATED_TRAINING` holds the value
    for the shipped runs and a test recomputes it."""
    ratios = [throughput_ratio(p) for p in predictions]
    return float(np.exp(np.mean(np.log(ratios))))


# ---------------------------------------------------------------------------- a schedule alone
@dataclass(frozen=True)
class PipelineResult(Tabular):
    """A schedule laid out by the simulator beside its closed form; as a table, one row per op
    (times in the unit of the forward time ``t_f``)."""

    frame_layout = Layout(
        columns=(
            Col("timeline.schedule", "schedule"),
            Col("timeline.stages", "stages", "stages"),
            Col("timeline.microbatches", "microbatches", "microbatches"),
            Col("timeline.bubble_frac", "bubble_frac", "1"),
            Col("closed_form_bubble_frac", "closed_form_bubble_frac", "1"),
            Col("timeline.ops[].stage", "stage"),
            Col("timeline.ops[].op.kind", "kind"),
            Col("timeline.ops[].op.microbatch", "microbatch"),
            Col("timeline.ops[].op.chunk", "chunk"),
            Col("timeline.ops[].start", "start_time", "t_f"),
            Col("timeline.ops[].end", "end_time", "t_f"),
        ),
        dims=("op",),
        coords=(None,),
    )

    timeline: pl.Timeline
    closed_form_bubble_frac: float
    closed_form_in_flight: float

    def to_dict(self) -> dict[str, Any]:
        t = self.timeline
        return {
            "schedule": t.schedule.value,
            "stages": t.stages,
            "microbatches": t.microbatches,
            "virtual_stages": t.virtual_stages,
            "bubble_fraction": t.bubble_frac,
            "closed_form_bubble_fraction": self.closed_form_bubble_frac,
            "makespan": t.makespan,
            "peak_in_flight_microbatches": [t.peak_in_flight(s) for s in range(t.stages)],
            "closed_form_in_flight_microbatches": self.closed_form_in_flight,
            "ops": [
                {
                    "stage": o.stage,
                    "kind": o.op.kind.value,
                    "microbatch": o.op.microbatch,
                    "chunk": o.op.chunk,
                    "start": o.start,
                    "end": o.end,
                }
                for o in t.ops
            ],
        }


#: Operations (forward, backward, weight-gradient per stage, micro-batch and chunk) one
#: simulation lays out at most: about two seconds of Python on the 2-core CI machine.
MAX_SIMULATED_OPS = 30_000


def pipeline_schedule(
    schedule: pl.Schedule | str,
    stages: int,
    microbatches: int,
    *,
    virtual_stages: int = 1,
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
) -> PipelineResult:
    """Simulate a schedule (unit forward time by default) and give its closed forms."""
    sched = pl.Schedule.parse(schedule)
    if isinstance(virtual_stages, bool) or not isinstance(virtual_stages, int) or virtual_stages < 1:
        raise InputError("virtual stages", virtual_stages, "a whole number >= 1")
    if sched is pl.Schedule.INTERLEAVED and virtual_stages < 2:
        virtual_stages = 2  # the default of 1 means "the fewest chunks interleaving needs"
    elif sched is not pl.Schedule.INTERLEAVED and virtual_stages != 1:
        raise InputError("virtual stages", virtual_stages, "1 unless the schedule is interleaved")
    ops = (
        3 * stages * microbatches * virtual_stages
        if isinstance(stages, int) and isinstance(microbatches, int)
        else 0
    )
    if ops > MAX_SIMULATED_OPS:
        raise InputError(
            "stages x microbatches x virtual stages",
            f"{stages} x {microbatches} x {virtual_stages}",
            f"at most {MAX_SIMULATED_OPS // 3:,} (the simulator lays out every operation; "
            "the closed forms in rackmath.core.pipeline.bubble_fraction have no limit)",
        )
    timeline = pl.simulate(
        sched, stages, microbatches, virtual_stages=virtual_stages, t_f=t_f, t_b=t_b, t_w=t_w
    )
    return PipelineResult(
        timeline=timeline,
        closed_form_bubble_frac=pl.bubble_fraction(
            sched, stages, microbatches, virtual_stages=virtual_stages, t_f=t_f, t_b=t_b, t_w=t_w
        ),
        closed_form_in_flight=pl.in_flight_microbatches(
            sched, stages, microbatches, virtual_stages=virtual_stages
        ),
    )
