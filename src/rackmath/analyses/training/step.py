"""A training step on the busiest chip, operator by operator, and the memory it holds.

The step (every formula lives in :mod:`rackmath.core.training_step` (operators),
:mod:`rackmath.core.training` (memory, collectives per step), :mod:`rackmath.core.pipeline`
(bubbles) and :mod:`rackmath.core.network` (every collective)):

    ops       = pass_operators(one micro-batch, prefill-shaped: b sequences of s/cp tokens)
    t_f, t_b, t_w = sums over the operators of forward, input gradient (+ recompute) and
                weight gradient, on the slowest stage (:func:`busiest_stage`: the fullest
                stage, or the last one with the LM head, the loss and any MTP modules)
    t_mb      = t_f + t_b + t_w + TP + CP traffic + exposed EP all-to-all + PP sends
                (+ ZeRO-3's exposed parameter gathers and gradient reduce-scatters)
                + interference of the hidden EP, CP, PP (and ZeRO-3) traffic
    t_pipe    = m t_mb / (1 - bubble(schedule, P, m, v, t_f, t_b, t_w))
    t_step    = t_pipe + exposed gradient all-reduce (ZeRO 0-2) + its interference + t_optimizer

where the interference of ``h`` hidden seconds is ``h (1 - 1/1.189)``, kernel-grounded on a GPU
(:func:`rackmath.core.training_kernels.overlap_interference_s`: compute beside it has fewer SMs).

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

from rackmath.analyses.serving.parts import MemoryPerChip
from rackmath.analyses.training import attention as attn
from rackmath.analyses.training import comm
from rackmath.analyses.training import stages as stg
from rackmath.analyses.training.setup import TrainingSetup
from rackmath.catalog import training_frameworks as tf
from rackmath.core import collectives as coll
from rackmath.core import loads
from rackmath.core import memory as memory_account
from rackmath.core import network as net
from rackmath.core import operator_model as opm
from rackmath.core import operators as ops
from rackmath.core import pipeline as pl
from rackmath.core import sharding as shard
from rackmath.core import training as tr
from rackmath.core import training_comm as tcomm
from rackmath.core import training_kernels as tk
from rackmath.core import training_step as ts
from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates
from rackmath.specs.efficiency import EfficiencyMode, Kernel
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
    per = s.profile.bucket_params_for(s.plan.dp * s.plan.cp)
    if per is not None:
        return 2.0 * per
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
    #: TP, CP and PP traffic left on the critical path per micro-batch (the framework's overlap)
    tp_exposed_mb_s: float = 0.0
    cp_exposed_mb_s: float = 0.0
    pp_exposed_mb_s: float = 0.0
    #: compute slowed beside hidden traffic (``overlap_interference_s``): DP's once per step
    #: (ZeRO 0-2); FSDP's, EP's, CP's and PP's per micro-batch, inside the pipeline
    dp_interference_s: float = 0.0
    fsdp_interference_mb_s: float = 0.0
    ep_interference_mb_s: float = 0.0
    cp_interference_mb_s: float = 0.0
    pp_interference_mb_s: float = 0.0

    @property
    def interference_mb_s(self) -> float:
        """Compute lost per micro-batch beside hidden EP, CP, PP and (ZeRO-3) DP traffic."""
        hidden = (self.ep_interference_mb_s, self.cp_interference_mb_s, self.pp_interference_mb_s)
        return sum(hidden) + self.fsdp_interference_mb_s

    @property
    def step_s(self) -> float:
        return self.pipeline_s + self.dp_exposed_s + self.dp_interference_s + self.optimizer_s

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
        """Per operator, seconds per step on the busiest chip (``m`` micro-batches), the kernel
        its forward ran on (None for the training-only passes) and how its backward was timed."""
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
                "kernel": o.kernel.to_dict() if o.kernel is not None else None,
                "backward": o.backward or None,
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
            "tp_exposed_per_microbatch_s": self.tp_exposed_mb_s,
            "cp_exposed_per_microbatch_s": self.cp_exposed_mb_s,
            "pp_exposed_per_microbatch_s": self.pp_exposed_mb_s,
            "fsdp_exposed_per_microbatch_s": self.fsdp_exposed_mb_s,
            "dp_buckets": self.dp_buckets,
            "dp_s": self.dp_s,
            "dp_exposed_s": self.dp_exposed_s,
            "dp_hidden_s": self.dp_hidden_s,
            "dp_interference_s": self.dp_interference_s,
            "fsdp_interference_per_microbatch_s": self.fsdp_interference_mb_s,
            "ep_interference_per_microbatch_s": self.ep_interference_mb_s,
            "cp_interference_per_microbatch_s": self.cp_interference_mb_s,
            "pp_interference_per_microbatch_s": self.pp_interference_mb_s,
            "optimizer_s": self.optimizer_s,
            "lower_bound_s": self.lower_bound_s,
            "upper_bound_s": self.upper_bound_s,
            "collectives": self.collective_rows(),
        }


def chip_rates(s: TrainingSetup) -> ChipRates:
    """The chip's peaks, the setup's efficiency table, GEMMs computing in the recipe's format
    and the attention core in 16 bits, or in FP8 under the framework's FP8 dot-product
    attention (:attr:`TrainingSetup.attention_core_precision`)."""
    chip = s.system.chip
    return ChipRates(
        peak_flops_per_s={p.value: f for p, f in chip.peak_flops_per_s.items()},
        bandwidth_bytes_per_s=chip.hbm_bandwidth_bytes_per_s,
        efficiency=s.table,
        compute=s.recipe.precision,
        kv=s.attention_core_precision,
    )


def recompute_shares(s: TrainingSetup, mode: tr.Recompute) -> ts.RecomputeShares:
    """The shares of each forward the step re-runs: the framework policy's when the mode is
    the setup's own, rackmath's mode otherwise (the recompute options compare modes)."""
    p = s.recompute_policy
    if p is not None and mode is s.recompute:
        return ts.RecomputeShares(p.attention, p.gemm, p.elementwise)
    return ts.RECOMPUTE_SHARES[mode.value]


def backward_model(s: TrainingSetup, m_ops: opm.OperatorModel) -> ts.BackwardModel:
    """How this chip's backward kernels are timed (:mod:`rackmath.core.training_kernels`): the
    attention core's backward FLOPs always (the algorithm's), the measured backward rates
    (attention, k-grouped wgrad, split accumulation) only on a measured efficiency table
    (kernel-grounded; the pure roofline and the flat tables run every kernel at one
    fraction)."""
    qk, v, _ = m_ops.prefill_dims
    ratio = s.attention_backward
    measured = s.efficiency.mode is EfficiencyMode.KERNEL
    fused = s.profile.fused_cross_entropy
    loss_fwd, loss_bwd = tk.LOSS_BYTES_PER_LOGIT[fused]
    return ts.BackwardModel(
        attention_flop_ratio=float(tk.attention_backward_flop_ratio(qk, v)),
        attention_efficiency_ratio=ratio.value if (measured and ratio is not None) else 1.0,
        grouped_wgrad_ratio=tk.GROUPED_WGRAD_THROUGHPUT_RATIO if measured else 1.0,
        elementwise_backward=(("loss", loss_bwd / loss_fwd),),
        gemm_backward_slowdown=s.split_accumulation.value if (measured and s.split_accumulation) else 1.0,
    )


def training_passes(
    s: TrainingSetup, m_ops: opm.OperatorModel, rates: ChipRates, forward: tuple[ops.Operator, ...]
) -> tuple[ops.Operator, ...]:
    """The forward operators as training runs them: serving's, with the norms on the
    sequence-parallel share of the tokens, plus the passes only training has (the
    element-wise activations, the expert permute and unpermute, the loss); stage averages
    (``1/P`` of the layers, as :func:`rackmath.core.operators.pass_operators`). Under the
    framework's fused grouped MLP (:attr:`TrainingSetup.fused_grouped_mlp`) the routed
    experts' activation is no pass of its own."""
    plan, model = s.plan, s.model
    tokens = s.microbatch * s.seq_len / plan.cp  # one micro-batch's tokens on a chip
    sp = plan.tp if (s.sequence_parallel and plan.tp > 1) else 1
    layers = model.num_layers / plan.pp
    out: list[ops.Operator] = []
    for op in forward:
        if op.name == "norms" and sp > 1 and op.work is not None:
            w = op.work
            formats, kind = op.curve_key
            sp_work = w._replace(activation_bytes=w.activation_bytes / sp, rows=w.rows / sp)
            op = ops.timed(op.name, op.op_class, rates, sp_work, formats, kind)
        out.append(op)
    a = model.attention
    rope = (
        a.num_heads * (a.qk_rope_head_dim or a.head_dim) + a.num_kv_heads * (a.qk_rope_head_dim or a.head_dim)
    ) / plan.tp
    fused = s.profile.fused_elementwise
    h_sp = model.hidden_size / sp
    dense_i, shared_i, expert_i = m_ops.mlp_widths
    per_token = 0.0  # values per token over the stage-average layers
    if m_ops.num_dense_layers:
        per_token += (
            m_ops.num_dense_layers
            / plan.pp
            * tk.activation_values(h_sp, rope, dense_i / plan.tp, m_ops.dense_matrices == 3.0, fused=fused)
        )
    moe_layers = m_ops.num_moe_layers / plan.pp
    if moe_layers:
        expert_tp = max(plan.tp / plan.ep, 1.0)
        # the fused grouped MLP runs the routed experts' GLU in its FC1 GEMM's epilogue: no pass
        routed_i = 0.0 if s.fused_grouped_mlp else m_ops.experts_per_token * expert_i / expert_tp
        routed = routed_i + shared_i / plan.tp
        per_token += moe_layers * tk.activation_values(
            h_sp, rope, routed, m_ops.expert_matrices == 3.0, fused=fused
        )
        out.extend(
            tk.permute_operators(tokens / sp, model.hidden_size, m_ops.experts_per_token, moe_layers, rates)
        )
    out.append(tk.elementwise("activations", tokens * per_token * tk.VALUE_BYTES, tokens, layers, rates))
    vocab = m_ops.params["lm_head"] / model.hidden_size / plan.tp
    loss, _ = tk.loss_operator(tokens / plan.pp, vocab, s.profile.fused_cross_entropy, rates)
    out.append(loss)
    if s.mtp_layers:  # the MTP modules' projections (their layers and heads: stages.stage_operators)
        qkv = m_ops.weight_precision["attention_qkv"], m_ops.bytes_per_param["attention_qkv"]
        out.append(tk.mtp_projection(tokens, model.hidden_size, plan.tp, s.mtp_layers / plan.pp, rates, *qkv))
    return tuple(out)


def microbatch_operators(
    s: TrainingSetup, recompute: tr.Recompute | None = None
) -> tuple[ts.TrainingOperator, ...]:
    """The training operators of one micro-batch on the busiest chip (seconds, stretched
    to the slowest stage). Serving's operators on a prefill-shaped load: ``b P dp``
    sequences of ``s`` tokens over ``dp cp`` replicas give each chip ``b s / cp`` tokens and
    ``1/(P cp tp)`` of the attention; the training passes of :func:`training_passes`."""
    plan, model = s.plan, s.model
    mode = s.recompute if recompute is None else recompute
    # GEMM weights are read in the recipe's format (the quantised copy); norms, router, the
    # output head and the embedding table stay 16-bit, so their GEMMs run in 16 bits
    low = s.recipe.precision if not s.recipe.precision.is_wide else s.attention_precision
    gemm_classes = ("attention", "dense_mlp", "routed_experts", "shared_experts")
    m_ops = opm.operator_model(
        model, {c: (low if c in gemm_classes else s.attention_precision) for c in WEIGHT_CLASSES}
    )
    load = loads.prefill_load(model, s.microbatch * plan.pp * plan.dp, s.seq_len, 0.0)
    rates = chip_rates(s)
    passes = ops.pass_operators(m_ops, load, rates, tp=plan.tp, pp=plan.pp, dp=plan.dp * plan.cp, ep=plan.ep)
    forward = training_passes(s, m_ops, rates, passes)
    train_ops = ts.training_operators(
        forward,
        rates,
        recompute=recompute_shares(s, mode),
        recipe=s.recipe,
        hidden=model.hidden_size,
        routing_skew=s.routing_skew,
        tokens=s.microbatch * s.seq_len / plan.cp,
        layers=model.num_layers / plan.pp,
        backward=backward_model(s, m_ops),
        columnwise_copy=s.columnwise_copy,
        producer_quantised_values=ts.producer_quantised_values(
            forward, s.profile.fused_norm_quantize, s.fused_grouped_mlp, gqa=m_ops.attention_kind == "gqa"
        ),
    )
    train_ops = tp_overlap_margins(s, train_ops, m_ops.dense_matrices)
    train_ops = attn.attention_kernel(s, train_ops, m_ops.prefill_dims[:2])
    mtp = {"mtp": s.mtp_layers, "moe_layers": model.num_moe_layers}
    return stg.busiest_stage(train_ops, model.num_layers, plan.pp, s.stage_layers, **mtp)


def tp_overlap_margins(
    s: TrainingSetup, train_ops: tuple[ts.TrainingOperator, ...], matrices: float
) -> tuple[ts.TrainingOperator, ...]:
    """The GEMMs a TP collective overlaps with, slowed by the SMs the collective keeps
    (:func:`rackmath.core.training_kernels.sm_margin_slowdown` on the profile's
    ``tp_overlap_margin_sms``, by Transformer Engine's GEMM name,
    :func:`~rackmath.core.training_kernels.tp_overlap_shares`): only under ``tp_comm_overlap``
    with TP, on a chip whose SM count the catalog states. A recompute re-runs the forward with
    its overlap, so it slows as the forward."""
    sms = s.system.chip.streaming_multiprocessors
    margins = s.profile.tp_overlap_margin_sms
    if not (s.profile.tp_comm_overlap and s.plan.tp > 1 and sms and any(margins.values())):
        return train_ops
    shares = tk.tp_overlap_shares(matrices)

    def factor(name: str, gemms: tuple[str, ...]) -> float:
        return tk.tp_overlap_slowdown(shares.get(name, {}), dict(margins), sms, gemms)

    def slowed(o: ts.TrainingOperator) -> ts.TrainingOperator:
        fwd = factor(o.name, ("proj_fprop", "fc2_fprop"))
        return replace(
            o,
            forward_s=o.forward_s * fwd,
            recompute_s=o.recompute_s * fwd,
            input_grad_s=o.input_grad_s * factor(o.name, ("qkv_dgrad", "fc1_dgrad")),
            weight_grad_s=o.weight_grad_s * factor(o.name, ("qkv_wgrad", "fc1_wgrad")),
        )

    return tuple(slowed(o) if o.name in shares else o for o in train_ops)


def dispatcher_operators(
    s: TrainingSetup,
    link: net.Group,
    tokens: float,
    destinations: float,
    moe_layers: float,
    dispatch_bytes: float,
) -> tuple[ops.Operator, ...]:
    """The expert all-to-alls on the framework's measured dispatcher
    (:func:`rackmath.core.training_comm.dispatcher_operators`): kernel-grounded, with the
    profile's ``ep_dispatcher`` measured on this chip at this EP size inside one NVLink domain
    (:func:`rackmath.catalog.training_frameworks.ep_dispatcher_rate`); empty otherwise, and the
    fitted DeepEP / NCCL curves run."""
    name = s.profile.ep_dispatcher
    if name == "fitted" or s.efficiency.mode is not EfficiencyMode.KERNEL or link.domains > 1:
        return ()
    rate = tf.ep_dispatcher_rate(s.system.chip.id, name, s.plan.ep)
    if rate is None:
        return ()
    fp8 = dispatch_bytes != net.DEFAULT_ACTIVATION_BYTES
    kernel = Kernel(rate.source, "fp8" if fp8 else "bfloat16", name, s.system.chip.id, rate.transferred)
    return tcomm.dispatcher_operators(
        tokens,
        destinations,
        s.model.hidden_size,
        moe_layers,
        rate.dispatch_fp8_bytes_per_s if fp8 else rate.dispatch_bf16_bytes_per_s,
        rate.combine_bytes_per_s,
        kernel,
        link.topology.scale_up_bytes_per_s,
        dispatch_value_bytes=dispatch_bytes,
    )


def step_breakdown(s: TrainingSetup, recompute: tr.Recompute | None = None) -> StepBreakdown:
    plan, model = s.plan, s.model
    mode = s.recompute if recompute is None else recompute
    m = s.microbatches
    train_ops = microbatch_operators(s, mode)
    t_f = sum(float(o.forward_s) for o in train_ops)
    t_b = sum(float(o.input_grad_s + o.recompute_s) for o in train_ops)  # recompute runs just before
    t_w = sum(float(o.weight_grad_s) for o in train_ops)
    busy = t_f + t_b + t_w
    group = comm.links(s)
    table = s.table
    gemm_s = sum(
        float(o.forward_s + o.input_grad_s) for o in train_ops if o.op_class.value in ("gemm", "moe")
    )
    tp = comm.tp_traffic(s, mode, gemm_s)
    attention = [o for o in train_ops if o.op_class.value.startswith("attention")]
    cp = comm.cp_traffic(
        s, sum(float(o.forward_s) for o in attention), sum(float(o.input_grad_s) for o in attention)
    )
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
        tokens = s.microbatch * s.seq_len / (plan.cp * plan.tp)
        destinations = float(coll.expected_destination_ranks(plan.ep, e, k))
        dispatch_bytes = wk.FP8_DISPATCH_BYTES if s.ep_dispatch_fp8 else net.DEFAULT_ACTIVATION_BYTES
        measured = dispatcher_operators(s, link, tokens, destinations, moe_layers, dispatch_bytes)
        ep_ops = tuple(
            comm.scaled_collective(o, s.routing_skew)  # the busiest rank's exchange
            for o in measured
            or tcomm.ep_operators(
                link,
                tokens,
                destinations,
                model.hidden_size,
                moe_layers,
                experts_per_token=k,
                dispatch_bytes=dispatch_bytes,
                destination_domains=domains,
                table=table,
                experts=e,
            )
        )
    ep_s = comm.seconds(ep_ops)
    ep_exposed = ts.exposed_overlap_s(ep_s, busy, s.ep_overlap_frac)
    if s.ep_overlap_paired and ep_ops:  # Megatron's combined 1F1B: one block under each all-to-all
        by_kind = {k: sum(float(o.time_s) for o in ep_ops if k in o.name) for k in ("dispatch", "combine")}
        u = ts.combined_1f1b_unpaired_frac(plan.pp, m, s.virtual_stages)
        ep_exposed = ts.combined_1f1b_exposed_s(
            train_ops, by_kind["dispatch"], by_kind["combine"], moe_layers, u
        )
    ep_interference = comm.interference_s(s, ep_s - ep_exposed)
    pp = comm.pp_traffic(s, busy)
    dense, experts = params_per_chip(s)
    dp = comm.dp_traffic(
        s,
        dense + experts,
        dense / (dense + experts) if dense + experts else 1.0,
        bucket_bytes(s),
        t_f,
        t_b + t_w,
    )
    collectives = (
        *(comm.scaled_collective(o, m) for o in (*tp.collectives, *cp.collectives, *ep_ops, *pp.collectives)),
        *dp.collectives,
    )
    exposed = (
        tp.exposed_s + cp.exposed_s + ep_exposed + pp.exposed_s + dp.exposed_mb_s
        + dp.interference_mb_s + ep_interference + cp.interference_s + pp.interference_s
    )  # fmt: skip
    scale = (busy + exposed) / busy
    bubble = pl.bubble_fraction(
        s.schedule,
        plan.pp,
        m,
        virtual_stages=s.virtual_stages,
        t_f=t_f * scale,
        t_b=t_b * scale,
        t_w=t_w * scale,
    )
    pipeline_s = m * (busy + exposed) / (1.0 - bubble)
    mem = memory_per_chip(s, mode)
    states = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes
    optimizer = tk.optimizer_operator(states, (dense + experts) / model.hidden_size, chip_rates(s))
    return StepBreakdown(
        microbatches=m,
        compute_mb_s=busy,
        tp_mb_s=tp.total_s,
        cp_mb_s=cp.total_s,
        ep_mb_s=ep_s,
        pp_mb_s=pp.total_s,
        bubble_frac=bubble,
        pipeline_s=pipeline_s,
        dp_s=dp.dp_s,
        dp_exposed_s=dp.exposed_s,
        optimizer_s=float(optimizer.time_s),
        ep_exposed_mb_s=ep_exposed,
        fsdp_exposed_mb_s=dp.exposed_mb_s,
        dp_buckets=dp.buckets,
        t_f_s=t_f,
        t_b_s=t_b,
        t_w_s=t_w,
        operators=train_ops,
        collectives=collectives,
        tp_exposed_mb_s=tp.exposed_s,
        cp_exposed_mb_s=cp.exposed_s,
        pp_exposed_mb_s=pp.exposed_s,
        dp_interference_s=dp.interference_s,
        fsdp_interference_mb_s=dp.interference_mb_s,
        ep_interference_mb_s=ep_interference,
        cp_interference_mb_s=cp.interference_s,
        pp_interference_mb_s=pp.interference_s,
    )
