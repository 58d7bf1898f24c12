"""A training step on the busiest chip, operator by operator, and the memory it holds.

The step (every formula lives in :mod:`rackmath.core.training_step` (operators),
:mod:`rackmath.core.training` (memory, collectives per step), :mod:`rackmath.core.pipeline`
(bubbles) and :mod:`rackmath.core.network` (every collective)):

    ops       = pass_operators(one micro-batch, prefill-shaped: b sequences of s/cp tokens)
    t_f, t_b, t_w = sums over the operators of forward, input gradient (+ recompute) and
                weight gradient, on the slowest stage (:func:`busiest_stage`: the fullest
                stage, or the last one with the whole LM head)
    t_mb      = t_f + t_b + t_w + TP + CP traffic + exposed EP all-to-all + PP sends
                (+ ZeRO-3's exposed parameter gathers and gradient reduce-scatters)
    t_pipe    = m t_mb / (1 - bubble(schedule, P, m, v, t_f, t_b, t_w))
    t_step    = t_pipe + exposed gradient all-reduce (ZeRO 0-2) + t_optimizer

Assumptions: work splits evenly over the chips of a stage (layers over stages rounded up);
TP and CP traffic sit on the critical path; the EP all-to-all hides under compute by the
run's ``ep_overlap_frac`` (DualPipe 1); data-parallel traffic is bucketed and each bucket
overlaps the next bucket's compute (:func:`rackmath.core.training_step.fsdp_exposed_s`): ZeRO
0-2 reduce the gradients once per step during the last micro-batch's backward; ZeRO-3
(FSDP) gathers each bucket's parameters in the forward and again in the backward and
reduce-scatters its gradients, every micro-batch. The optimizer streams its states once
through HBM (read and write).

Every collective (TP all-reduce, CP all-gather and reduce-scatter, EP dispatch and combine,
PP sends, DP all-reduce or FSDP all-gather and reduce-scatter) is an operator of
:mod:`rackmath.core.network` (:attr:`StepBreakdown.collectives`, with its kernel): on the
chip's fitted curves when the setup's efficiency table has them (kernel-grounded), on the
link model otherwise (the pure and flat tables).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rackmath.analyses.serving.parts import MemoryPerChip
from rackmath.analyses.training.setup import TrainingSetup
from rackmath.core import collective_ops as cops
from rackmath.core import collectives as coll
from rackmath.core import loads
from rackmath.core import memory as memory_account
from rackmath.core import network as net
from rackmath.core import operators as ops
from rackmath.core import pipeline as pl
from rackmath.core import sharding as shard
from rackmath.core import training as tr
from rackmath.core import training_comm as tcomm
from rackmath.core import training_step as ts
from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates
from rackmath.specs.model import WEIGHT_CLASSES


# ---------------------------------------------------------------------------- memory
def params_per_chip(s: TrainingSetup) -> tuple[float, float]:
    """(dense parameters, routed-expert parameters) one chip of the heaviest stage holds
    before ZeRO sharding: the serving sharding rule (:func:`rackmath.core.parallel.
    weight_bytes_per_chip` at one byte per parameter), so both count the same weights."""
    plan = s.plan
    held = memory_account.weight_bytes_per_chip(
        shard.shardable(s.model, 1.0), tp=plan.tp, pp=plan.pp, ep=plan.ep
    )
    dense = float(held.tp_sharded + held.replicated + held.vocab)
    return dense, float(held.routed_experts)


def bucket_bytes(s: TrainingSetup) -> float:
    """The data-parallel bucket in bytes: the run's, else one layer of the chip's 16-bit
    parameters (FSDP wraps each transformer block)."""
    if s.bucket_bytes is not None:
        return float(s.bucket_bytes)
    dense, experts = params_per_chip(s)
    return 2.0 * (dense + experts) / s.layers_per_stage


def memory_per_chip(s: TrainingSetup, recompute: tr.Recompute | None = None) -> MemoryPerChip:
    """Model states (ZeRO over the data-parallel ranks) plus the activations of the
    micro-batches the busiest stage holds under the schedule: ``n b s_local stored +
    b s_local rebuild`` (:func:`rackmath.core.training.stage_activations`; the buffer a
    recomputing backward rebuilds counts once, since a stage runs one backward at a time).
    DualPipe holds two copies of the stage's weights (DeepSeek-V3 Table 2); ZeRO-3 holds two
    gathered buckets (the one computing and the one prefetched)."""
    plan = s.plan
    opt = tr.OPTIMIZER_BYTES[s.optimizer]
    dense, experts = params_per_chip(s)
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
    activations = s.microbatch * local_seq * float(stage.peak_bytes_per_token(in_flight))
    copies = 2.0 if s.schedule is pl.Schedule.DUALPIPE else 1.0
    gathered = 2.0 * bucket_bytes(s) if s.zero >= tr.ZeroStage.WEIGHTS else 0.0
    return MemoryPerChip(
        weights_bytes=float(d_w + e_w) * copies,
        kv_bytes=0.0,
        activation_bytes=activations,
        capacity_bytes=s.system.chip.hbm_capacity_bytes,
        usable_bytes=s.deployment.usable_bytes_per_chip,
        grads_bytes=float(d_g + e_g),
        optimizer_bytes=float(d_o + e_o),
        gathered_bytes=gathered,
        in_flight_microbatches=in_flight,
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
    ep_exposed_mb_s: float = 0.0
    fsdp_exposed_mb_s: float = 0.0
    dp_buckets: int = 1
    t_f_s: float = 0.0
    t_b_s: float = 0.0
    t_w_s: float = 0.0
    operators: tuple[ts.TrainingOperator, ...] = ()
    #: the step's collectives on the busiest chip, each over the whole step (every micro-batch
    #: and bucket), hidden or not: TP, CP, EP, PP and DP/FSDP traffic, each with its kernel
    collectives: tuple[ops.Operator, ...] = ()

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
    def dp_hidden_s(self) -> float:
        """Data-parallel traffic that prefetch and bucketing hide under compute:
        all of it less what stays exposed (ZeRO 0-2 once per step, ZeRO-3 per micro-batch)."""
        return max(0.0, self.dp_s - self.dp_exposed_s - self.microbatches * self.fsdp_exposed_mb_s)

    @property
    def lower_bound_s(self) -> float:
        """Everything overlapped, no bubble: ``max(compute, communication)``."""
        return max(self.compute_s, self.communication_s)

    @property
    def upper_bound_s(self) -> float:
        """Nothing overlapped: compute and all traffic, bubbled, plus the optimizer."""
        return (self.compute_s + self.communication_s) / (1.0 - self.bubble_frac) + self.optimizer_s

    def operator_rows(self) -> list[dict[str, Any]]:
        """Per operator, seconds per step on the busiest chip (``m`` micro-batches)."""
        m = self.microbatches
        return [
            {
                "name": o.name,
                "op_class": o.op_class.value,
                "precision": o.precision,
                "bound": o.bound,
                "forward_s": m * float(o.forward_s),
                "input_grad_s": m * float(o.input_grad_s),
                "weight_grad_s": m * float(o.weight_grad_s),
                "recompute_s": m * float(o.recompute_s),
                "time_s": m * float(o.time_s),
            }
            for o in self.operators
        ]

    def collective_rows(self) -> list[dict[str, Any]]:
        """Per collective, seconds per step on the busiest chip (hidden or not), its fixed part
        and the kernel it ran on (the fitted curve, or the link model and why)."""
        return [
            {
                "name": o.name,
                "op_class": o.op_class.value,
                "time_s": float(o.time_s),
                "latency_s": float(o.latency_s),
                "kernel": o.kernel.to_dict(),
            }
            for o in self.collectives
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_s": self.step_s,
            "compute_s": self.compute_s,
            "bubble_frac": self.bubble_frac,
            "pipeline_s": self.pipeline_s,
            "forward_per_microbatch_s": self.t_f_s,
            "input_grad_per_microbatch_s": self.t_b_s,
            "weight_grad_per_microbatch_s": self.t_w_s,
            "tp_per_microbatch_s": self.tp_mb_s,
            "cp_per_microbatch_s": self.cp_mb_s,
            "ep_per_microbatch_s": self.ep_mb_s,
            "ep_exposed_per_microbatch_s": self.ep_exposed_mb_s,
            "pp_per_microbatch_s": self.pp_mb_s,
            "fsdp_exposed_per_microbatch_s": self.fsdp_exposed_mb_s,
            "dp_buckets": self.dp_buckets,
            "dp_s": self.dp_s,
            "dp_exposed_s": self.dp_exposed_s,
            "dp_hidden_s": self.dp_hidden_s,
            "optimizer_s": self.optimizer_s,
            "lower_bound_s": self.lower_bound_s,
            "upper_bound_s": self.upper_bound_s,
            "collectives": self.collective_rows(),
        }


def links(s: TrainingSetup) -> dict[str, net.Group]:
    """The groups of the plan placed on the system (Megatron's rank order: tp, cp, dp, pp)."""
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
    expert_dp = max(plan.dp * plan.tp * plan.cp // plan.ep, 1)
    return {
        "tp": tcomm.group_link(plan.tp, 1, domain, **kw),
        "cp": tcomm.group_link(plan.cp, plan.tp, domain, **kw),
        "dp": tcomm.group_link(plan.dp * plan.cp, plan.tp, domain, **kw),
        "expert_dp": tcomm.group_link(expert_dp, plan.ep, domain, **kw),
        "ep": tcomm.group_link(plan.ep, 1, domain, **kw),
        "pp": tcomm.group_link(plan.pp, plan.tp * plan.cp * plan.dp, domain, **kw),
    }


def chip_rates(s: TrainingSetup) -> ChipRates:
    """The chip's peaks, the setup's efficiency table, GEMMs computing in the recipe's format
    and attention in 16 bits (:attr:`TrainingSetup.attention_precision`)."""
    chip = s.system.chip
    return ChipRates(
        peak_flops_per_s={p.value: f for p, f in chip.peak_flops_per_s.items()},
        bandwidth_bytes_per_s=chip.hbm_bandwidth_bytes_per_s,
        efficiency=s.table,
        compute=s.recipe.precision,
        kv=s.attention_precision,
    )


def microbatch_operators(
    s: TrainingSetup, recompute: tr.Recompute | None = None
) -> tuple[ts.TrainingOperator, ...]:
    """The training operators of one micro-batch on the busiest chip (seconds, stretched
    to the fullest stage). Serving's operators on a prefill-shaped load: ``b P dp``
    sequences of ``s`` tokens over ``dp cp`` replicas give each chip ``b s / cp`` tokens and
    ``1/(P cp tp)`` of the attention."""
    plan, model = s.plan, s.model
    mode = s.recompute if recompute is None else recompute
    # GEMM weights are read in the recipe's format (the quantised copy); norms, router, the
    # output head and the embedding table stay 16-bit, so their GEMMs run in 16 bits
    low = s.recipe.precision if not s.recipe.precision.is_wide else s.attention_precision
    gemm_classes = ("attention", "dense_mlp", "routed_experts", "shared_experts")
    m_ops = ops.operator_model(
        model, {c: (low if c in gemm_classes else s.attention_precision) for c in WEIGHT_CLASSES}
    )
    load = loads.prefill_load(model, s.microbatch * plan.pp * plan.dp, s.seq_len, 0.0)
    rates = chip_rates(s)
    split = {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp * plan.cp, "ep": plan.ep}
    forward = ops.pass_operators(m_ops, load, rates, **split)
    train_ops = ts.training_operators(
        forward,
        rates,
        recompute=mode.value,
        recipe=s.recipe,
        hidden=model.hidden_size,
        routing_skew=s.routing_skew,
        tokens=s.microbatch * s.seq_len / plan.cp,
        layers=model.num_layers / plan.pp,
    )
    return busiest_stage(train_ops, model.num_layers, plan.pp)


#: Operators that sit on one pipeline stage, not on every layer's: the input embedding (first
#: stage) and the LM head (last stage).
END_OPERATORS = ("embedding", "lm_head")


def _scaled(o: ts.TrainingOperator, k: float) -> ts.TrainingOperator:
    return replace(
        o,
        forward_s=np.asarray(float(o.forward_s) * k),
        input_grad_s=np.asarray(float(o.input_grad_s) * k),
        weight_grad_s=np.asarray(float(o.weight_grad_s) * k),
        recompute_s=np.asarray(float(o.recompute_s) * k),
    )


def busiest_stage(
    ops_avg: tuple[ts.TrainingOperator, ...], layers: int, pp: int
) -> tuple[ts.TrainingOperator, ...]:
    """The operators of the slowest stage, from the stage-average ones (``1/P`` of everything).

    The pace is set by the slower of (a) a middle stage with ``ceil(L/P)`` layers and (b) the
    end stage that also runs the whole LM head (and the embedding), with ``floor(L/P)``
    layers (an uneven split puts the spare layers elsewhere, as Llama 3 trims a layer from
    its first and last stages, §3.3.2). ``P = 1``: everything. Per-layer operators scale by
    ``n P / L`` for ``n`` layers; end operators by ``P`` on (b), 0 on (a). Megatron GPT 462B
    (112 layers, P = 16, vocabulary 131,072, h 18,432): 7 layers + a head of 0.59 layers'
    FLOPs on the last stage, 8 % above a middle stage.
    """
    if pp == 1:
        return ops_avg

    def stage(n_layers: int, ends: bool) -> tuple[ts.TrainingOperator, ...]:
        return tuple(
            _scaled(o, (pp if ends else 0.0) if o.name in END_OPERATORS else n_layers * pp / layers)
            for o in ops_avg
        )

    middle = stage(math.ceil(layers / pp), ends=False)
    end = stage(layers // pp, ends=True)
    return max((end, middle), key=lambda st: sum(float(o.time_s) for o in st))


def _seconds(collectives: tuple[ops.Operator, ...] | list[ops.Operator]) -> float:
    return float(sum(float(o.time_s) for o in collectives))


def _scaled_collective(o: ops.Operator, k: float) -> ops.Operator:
    """A collective's operator ``k`` times over (micro-batches, buckets, routing skew)."""
    return o._replace(time_s=o.time_s * k, latency_s=o.latency_s * k)


def step_breakdown(s: TrainingSetup, recompute: tr.Recompute | None = None) -> StepBreakdown:
    plan, model = s.plan, s.model
    mode = s.recompute if recompute is None else recompute
    m = s.microbatches
    train_ops = microbatch_operators(s, mode)
    t_f = sum(float(o.forward_s) for o in train_ops)
    t_b = sum(float(o.input_grad_s + o.recompute_s) for o in train_ops)  # recompute runs just before
    t_w = sum(float(o.weight_grad_s) for o in train_ops)
    busy = t_f + t_b + t_w
    group = links(s)
    table = s.table
    act = tr.boundary_activation_bytes(s.microbatch, s.seq_len / plan.cp, model.hidden_size)
    layers = s.layers_per_stage
    per_mb: list[ops.Operator] = []  # the collectives of one micro-batch
    if plan.tp > 1:
        per_mb.append(tcomm.tp_operator(act, group["tp"], layers, tr.recompute_forward_passes(mode), table))
    tp_s = _seconds(per_mb)
    kv = tr.context_parallel_kv_bytes(s.microbatch, s.seq_len, tr.layer_shape(model).kv_width, plan.tp)
    cp_ops = tcomm.cp_operators(kv, group["cp"], layers, table) if plan.cp > 1 else ()
    cp_s = _seconds(cp_ops)
    ep_ops: tuple[ops.Operator, ...] = ()
    if model.is_moe and model.moe is not None and plan.ep > 1:
        moe_layers = math.ceil(model.num_moe_layers / plan.pp)
        e, k = model.moe.num_experts, model.moe.experts_per_token
        link = group["ep"]
        domains = (
            None
            if s.ep_max_domains is None
            else float(net.expert_destination_domains(link.domains, e, k, s.ep_max_domains))
        )
        ep_ops = tuple(
            _scaled_collective(o, s.routing_skew)  # the busiest rank's exchange
            for o in tcomm.ep_operators(
                link,
                s.microbatch * s.seq_len / (plan.cp * plan.tp),
                float(coll.expected_destination_ranks(plan.ep, e, k)),
                model.hidden_size,
                moe_layers,
                experts_per_token=k,
                dispatch_bytes=wk.FP8_DISPATCH_BYTES if s.ep_dispatch_fp8 else net.DEFAULT_ACTIVATION_BYTES,
                destination_domains=domains,
                table=table,
            )
        )
    ep_s = _seconds(ep_ops)
    ep_exposed = ts.exposed_overlap_s(ep_s, busy, s.ep_overlap_frac)
    pp_s = 0.0
    pp_ops: tuple[ops.Operator, ...] = ()
    if plan.pp > 1:
        sends = 2 * (s.virtual_stages if s.schedule is pl.Schedule.INTERLEAVED else 1)
        pp_s = sends * tcomm.pp_send_s(act / plan.tp, group["pp"])
        one_latency = tcomm.pp_send_s(0.0, group["pp"])
        pp_ops = (cops.send_operator("pp_send", pp_s, sends * one_latency, group["pp"].topology, table),)
    # data parallel, by bucket
    dense, experts = params_per_chip(s)
    opt = tr.OPTIMIZER_BYTES[s.optimizer]
    bucket = bucket_bytes(s)
    held = (dense + experts) * opt.weights
    buckets = max(1, math.ceil(held / bucket))
    per = held / buckets
    dp_link = group["dp"]
    fsdp_mb = 0.0
    if s.zero >= tr.ZeroStage.WEIGHTS:
        gather, scatter = tcomm.dp_operators(per * opt.grads / opt.weights, per, dp_link, s.zero, table)
        g = float(gather.time_s) / 2.0  # one bucket's all-gather (the operator holds two)
        r = float(scatter.time_s)
        fsdp_mb = ts.fsdp_exposed_s(g, t_f / buckets, buckets) + ts.fsdp_exposed_s(
            g + r, (t_b + t_w) / buckets, buckets
        )
        dp_s = m * buckets * (2 * g + r)
        dp_exposed = 0.0
        dp_ops = tuple(_scaled_collective(o, m * buckets) for o in (gather, scatter))
    else:
        dense_share = dense / (dense + experts) if dense + experts else 1.0
        grads = per * opt.grads / opt.weights
        dp_ops = tcomm.dp_operators(grads * dense_share, grads * dense_share, dp_link, s.zero, table)
        expert_share = grads * (1 - dense_share)  # the routed experts' gradients, over expert-DP
        expert_ops = tcomm.dp_operators(expert_share, expert_share, group["expert_dp"], s.zero, table)
        dp_ops = (*dp_ops, *(o._replace(name="expert_dp_all_reduce") for o in expert_ops))
        r = _seconds(dp_ops)
        dp_s = buckets * r
        dp_exposed = ts.fsdp_exposed_s(r, (t_b + t_w) / buckets, buckets)
        dp_ops = tuple(_scaled_collective(o, buckets) for o in dp_ops)
    collectives = (
        *(_scaled_collective(o, m) for o in (*per_mb, *cp_ops, *ep_ops, *pp_ops)),
        *dp_ops,
    )
    comm = tp_s + cp_s + ep_exposed + pp_s + fsdp_mb
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
        dp_exposed_s=dp_exposed,
        optimizer_s=optimizer_s,
        ep_exposed_mb_s=ep_exposed,
        fsdp_exposed_mb_s=fsdp_mb,
        dp_buckets=buckets,
        t_f_s=t_f,
        t_b_s=t_b,
        t_w_s=t_w,
        operators=train_ops,
        collectives=collectives,
    )
