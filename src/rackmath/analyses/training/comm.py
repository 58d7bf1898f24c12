"""A training step's communication as its framework runs it: what each collective costs on the
busiest chip and how much of it the framework hides.

Every collective is an operator of :mod:`rackmath.core.training_comm` (times on the chip's
fitted curves when kernel-grounded, on the link model otherwise); the exposure rules are
:mod:`rackmath.core.training_step` and :mod:`rackmath.core.training_kernels`'s, chosen by the
framework profile's settings (:class:`rackmath.specs.training_framework.TrainingFramework`):

* **TP** (two all-reduces of ``b s h`` per layer per forward and per backward, or their
  all-gather + reduce-scatter under sequence parallelism): on the critical path, or with
  ``tp_comm_overlap`` (Transformer Engine's userbuffers, torchtitan's async TP) split into
  ``tp`` chunks, each under its GEMM's chunk: ``fsdp_exposed_s`` of each collective's chunks,
  so every collective exposes its first chunk (consecutive GEMMs depend on each other's
  reduced output, so no pipeline spans two collectives). Worked number: TP=8 traffic of
  1 ms per collective under 4 ms of GEMM exposes 0.125 ms of it.
* **CP** by ``cp_comm``: ``all_gather`` (K and V gathered per layer in the forward, their
  gradients reduce-scattered in the backward, exposed: Llama 3 §3.3.2); ``p2p`` (the ring:
  ``cp - 1`` sends of a ``1/cp`` K,V chunk per layer in the forward and of K,V and their
  gradients in the backward, each under the attention block it unlocks:
  :func:`~rackmath.core.training_kernels.ring_exposed_s`); ``a2a`` (Ulysses: Q, K, V and the
  output exchanged over heads, four all-to-alls per layer each way, exposed).
* **PP**: two sends of the boundary activations per micro-batch per virtual stage; a framework
  that overlaps them (Megatron with virtual stages) hides their transfer under the adjacent
  chunk's compute, never their latency (the launch and synchronisation of each send).
* **DP** by bucket (``bucket_params`` or one block): ZeRO-0 all-reduces the gradients, ZeRO 1-2
  reduce-scatter them and all-gather the updated parameters (the distributed optimizer),
  ZeRO-3 gathers each bucket's parameters in the forward and the backward and
  reduce-scatters its gradients every micro-batch; each overlapped bucket by bucket
  (``fsdp_exposed_s``) where the framework overlaps it (``dp_grad_overlap``,
  ``dp_param_gather_overlap``), exposed whole where it does not.

Kernel-grounded on a GPU, the compute beside the hidden part of the CP, PP, EP and DP traffic
runs slower while the transfers hold some of its SMs (:func:`overlap_slowdown`,
:func:`rackmath.core.training_kernels.overlap_interference_s`); overlapped TP collectives state
their SM margins instead (:func:`rackmath.core.training_kernels.sm_margin_slowdown`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from rackmath.analyses.training.setup import TrainingSetup
from rackmath.catalog import training_frameworks as tf
from rackmath.core import collective_legs as legs
from rackmath.core import collective_ops as cops
from rackmath.core import network as net
from rackmath.core import operators as ops
from rackmath.core import training as tr
from rackmath.core import training_comm as tcomm
from rackmath.core import training_kernels as tk
from rackmath.core import training_step as ts
from rackmath.specs.efficiency import EfficiencyMode, Kernel


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


def seconds(collectives: tuple[ops.Operator, ...] | list[ops.Operator]) -> float:
    return float(sum(float(o.time_s) for o in collectives))


def scaled_collective(o: ops.Operator, k: float) -> ops.Operator:
    """A collective's operator ``k`` times over (micro-batches, buckets, routing skew)."""
    return o._replace(time_s=o.time_s * k, latency_s=o.latency_s * k)


class Traffic(NamedTuple):
    """One kind of traffic per micro-batch: its collectives (one micro-batch's), all their
    seconds, the seconds left on the critical path, and the compute lost beside the hidden
    rest (:func:`hidden_under`)."""

    collectives: tuple[ops.Operator, ...]
    total_s: float
    exposed_s: float
    interference_s: float = 0.0


def hidden_under(
    s: TrainingSetup, collectives: tuple[ops.Operator, ...], total: float, exposed: float
) -> Traffic:
    """Traffic of which ``total - exposed`` seconds hide under compute (:func:`interference_s`)."""
    return Traffic(collectives, total, exposed, interference_s(s, total - exposed))


def interference_s(s: TrainingSetup, hidden_s: float) -> float:
    """Compute lost beside ``hidden_s`` seconds of traffic hidden under it, slowed by the SMs the
    transfers hold (:func:`overlap_slowdown`,
    :func:`rackmath.core.training_kernels.overlap_interference_s`)."""
    return float(tk.overlap_interference_s(max(hidden_s, 0.0), overlap_slowdown(s)))


def tp_traffic(
    s: TrainingSetup, mode: tr.Recompute, gemm_s: float, forward_passes: float | None = None
) -> Traffic:
    """Tensor-parallel traffic of one micro-batch on the busiest stage (``gemm_s``: the GEMMs'
    time it can hide under, forward and backward)."""
    plan = s.plan
    if plan.tp == 1:
        return Traffic((), 0.0, 0.0)
    act = tr.boundary_activation_bytes(s.microbatch, s.seq_len / plan.cp, s.model.hidden_size)
    passes = tr.recompute_forward_passes(mode) if forward_passes is None else forward_passes
    op = tcomm.tp_operator(act, links(s)["tp"], s.layers_per_stage, passes, s.table)
    total = float(op.time_s)
    if not s.profile.tp_comm_overlap:
        return Traffic((op,), total, total)
    # Each collective pipelines its own tp pieces under its own GEMM; the next GEMM needs the
    # previous one's reduced output, so no pipeline runs across collectives: each exposes its
    # first piece (1/tp of it when the GEMM's pieces are the longer stage).
    collectives = 2.0 * s.layers_per_stage * (passes + 1.0)
    piece_s, gemm_piece_s = total / collectives / plan.tp, gemm_s / collectives / plan.tp
    exposed = collectives * ts.fsdp_exposed_s(piece_s, gemm_piece_s, plan.tp)
    return Traffic((op,), total, exposed)


def cp_traffic(s: TrainingSetup, attention_fwd_s: float, attention_bwd_s: float) -> Traffic:
    """Context-parallel traffic of one micro-batch on the busiest stage, by the framework's
    ``cp_comm`` (``attention_*_s``: the stage's attention core, forward and backward)."""
    plan, model = s.plan, s.model
    if plan.cp == 1:
        return Traffic((), 0.0, 0.0)
    group = links(s)["cp"]
    layers = s.layers_per_stage
    shape = tr.layer_shape(model)
    kv = tr.context_parallel_kv_bytes(s.microbatch, s.seq_len, shape.kv_width, plan.tp)
    kind = s.profile.cp_comm
    if kind == "all_gather":
        cp_ops = tcomm.cp_operators(kv, group, layers, s.table)
        total = seconds(cp_ops)
        return Traffic(cp_ops, total, total)
    if kind == "p2p":
        steps = plan.cp - 1
        fwd_send = tcomm.pp_send_s(kv / plan.cp, group)  # one K,V chunk to the next rank
        bwd_send = tcomm.pp_send_s(2.0 * kv / plan.cp, group)  # K,V and their gradients
        per_layer_f = attention_fwd_s / layers / plan.cp  # one block of the ring
        per_layer_b = attention_bwd_s / layers / plan.cp
        exposed = layers * (
            tk.ring_exposed_s(fwd_send, per_layer_f, steps) + tk.ring_exposed_s(bwd_send, per_layer_b, steps)
        )
        total = layers * steps * (fwd_send + bwd_send)
        latency = layers * steps * 2 * tcomm.pp_send_s(0.0, group)
        op = cops.send_operator("cp_ring_send", total, latency, group.topology, s.table)
        return hidden_under(s, (op,), total, exposed)
    # a2a (Ulysses): Q, K, V in and O out over the heads, forward and backward
    q_width = model.attention.num_heads * model.attention.head_dim
    values = s.microbatch * s.seq_len / plan.cp * (2 * q_width + 2 * shape.kv_width) / plan.tp
    one = float(net.all_to_all_s(group, values * tr.ACTIVATION_BYTES))
    total = 2.0 * layers * one
    latency = 2.0 * layers * float(net.all_to_all_s(group, 0.0))
    op = legs.collective_operator("cp_all_to_all", total, latency, Kernel(legs.LINK_MODEL, ""), 0.0)
    return Traffic((op,), total, total)


def pp_traffic(s: TrainingSetup, busy_s: float) -> Traffic:
    """Stage-to-stage sends of one micro-batch: two per virtual stage (forward activations,
    backward gradients), hidden under the adjacent chunk's compute where the framework
    overlaps them, their latency always exposed."""
    plan = s.plan
    if plan.pp == 1:
        return Traffic((), 0.0, 0.0)
    group = links(s)["pp"]
    chunks = s.virtual_stages if s.virtual_stages > 1 else 1
    sends = 2 * chunks
    act = tr.boundary_activation_bytes(s.microbatch, s.seq_len / plan.cp, s.model.hidden_size)
    one = tcomm.pp_send_s(act / plan.tp, group)
    latency = tcomm.pp_send_s(0.0, group)
    total = sends * one
    op = cops.send_operator("pp_send", total, sends * latency, group.topology, s.table)
    mode = s.profile.p2p_overlap
    overlapped = mode == "always" or (mode == "with_virtual_stages" and chunks > 1)
    if not overlapped:
        return Traffic((op,), total, total)
    exposed = sends * latency + tk.ring_exposed_s(one - latency, busy_s / sends, sends)
    return hidden_under(s, (op,), total, exposed)


class DataParallel(NamedTuple):
    collectives: tuple[ops.Operator, ...]
    dp_s: float  # every byte of the step's DP traffic, seconds
    exposed_s: float  # exposed once per step (ZeRO 0-2)
    exposed_mb_s: float  # exposed per micro-batch (ZeRO-3)
    buckets: int
    #: compute lost to the SMs the hidden traffic holds (``overlap_interference_s``), once per
    #: step (ZeRO 0-2) and per micro-batch (ZeRO-3)
    interference_s: float = 0.0
    interference_mb_s: float = 0.0


def overlap_ratio(s: TrainingSetup) -> tf.BackwardRatio | None:
    """How much slower compute runs beside a collective the framework hides, with its source:
    the catalog's measured figure (:func:`rackmath.catalog.training_frameworks.
    overlap_compute_slowdown`) on a GPU, kernel-grounded; None on the pure roofline and where
    collectives have their own engines."""
    if s.efficiency.mode is not EfficiencyMode.KERNEL:
        return None
    return tf.overlap_compute_slowdown(s.system.chip.id, s.system.chip.vendor)


def overlap_slowdown(s: TrainingSetup) -> float:
    """:func:`overlap_ratio`'s value, 1 where there is none."""
    ratio = overlap_ratio(s)
    return 1.0 if ratio is None else ratio.value


def dp_traffic(
    s: TrainingSetup, held_params: float, dense_share: float, bucket_bytes: float, t_f: float, t_bw: float
) -> DataParallel:
    """Data-parallel traffic of the step by bucket (see the module docstring). ``held_params``:
    the chip's parameters before sharding; ``dense_share`` of them reduce over the whole
    ``dp cp`` group, the rest (routed experts) over their expert-DP group; ``bucket_bytes`` of
    16-bit parameters per bucket; ``t_f`` and ``t_bw``: one micro-batch's forward and backward
    compute."""
    group = links(s)
    profile = s.profile
    opt = tr.OPTIMIZER_BYTES[s.optimizer]
    m = s.microbatches
    held = held_params * opt.weights
    buckets = max(1, math.ceil(held / bucket_bytes))
    per = held / buckets
    grads = per * opt.grads / opt.weights

    def exposed(one: float, compute: float, overlapped: bool) -> tuple[float, float]:
        """(exposed, interference) of ``buckets`` collectives of ``one`` second each."""
        if not overlapped:
            return buckets * one, 0.0
        shown = ts.fsdp_exposed_s(one, compute / buckets, buckets)
        return shown, interference_s(s, buckets * one - shown)

    if s.zero >= tr.ZeroStage.WEIGHTS:
        gather, scatter = tcomm.dp_operators(grads, per, group["dp"], s.zero, s.table)
        g = float(gather.time_s) / 2.0  # one bucket's all-gather (the operator holds two)
        r = float(scatter.time_s)
        forward = exposed(g, t_f, profile.dp_param_gather_overlap)
        backward = exposed(g + r, t_bw, profile.dp_grad_overlap)
        collectives = tuple(scaled_collective(o, m * buckets) for o in (gather, scatter))
        return DataParallel(
            collectives,
            m * buckets * (2 * g + r),
            0.0,
            forward[0] + backward[0],
            buckets,
            interference_mb_s=forward[1] + backward[1],
        )
    dense, expert = grads * dense_share, grads * (1.0 - dense_share)
    if s.zero == tr.ZeroStage.NONE:
        ars = (
            *tcomm.dp_operators(dense, dense, group["dp"], s.zero, s.table),
            *(
                o._replace(name="expert_dp_all_reduce")
                for o in tcomm.dp_operators(expert, expert, group["expert_dp"], s.zero, s.table)
            ),
        )
        r = seconds(ars)
        shown, slowed = exposed(r, t_bw, profile.dp_grad_overlap)
        return DataParallel(
            tuple(scaled_collective(o, buckets) for o in ars), buckets * r, shown, 0.0, buckets, slowed
        )
    # the distributed optimizer: reduce-scatter the gradients, all-gather the updated weights
    weights_dense, weights_expert = per * dense_share, per * (1.0 - dense_share)
    pairs = (
        (group["dp"], dense, weights_dense, ""),
        (group["expert_dp"], expert, weights_expert, "expert_"),
    )
    scatters, gathers = [], []
    for link, g_bytes, w_bytes, prefix in pairs:
        scatters.append(
            cops.gather_operator(f"{prefix}dp_reduce_scatter", "reduce_scatter", link, g_bytes, 1.0, s.table)
        )
        gathers.append(
            cops.gather_operator(f"{prefix}dp_all_gather", "all_gather", link, w_bytes, 1.0, s.table)
        )
    rs, ag = seconds(scatters), seconds(gathers)
    grads_part = exposed(rs, t_bw, profile.dp_grad_overlap)
    params_part = exposed(ag, t_f, profile.dp_param_gather_overlap)
    collectives = tuple(scaled_collective(o, buckets) for o in (*scatters, *gathers))
    return DataParallel(
        collectives,
        buckets * (rs + ag),
        grads_part[0] + params_part[0],
        0.0,
        buckets,
        grads_part[1] + params_part[1],
    )
