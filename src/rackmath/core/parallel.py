"""The step of a planned deployment under TP/EP/PP/DP, with its communication.

Pure and vectorized: plan dimensions (``tp, pp, dp, ep``), batch and context are
NumPy-broadcast arrays, so a search over thousands of plans x batches is one call. The
model enters as a :class:`~rackmath.core.sharding.ShardableModel` (bytes by how they
shard, :mod:`rackmath.core.sharding`); what a chip holds is the one memory account of
:mod:`rackmath.core.memory`.

Layout (Megatron-Core's rank order; the lecture's "layout mirrors the model"):
chips are numbered tensor-parallel innermost, then data/expert parallel, then pipeline
stages outermost. A stage is ``C = dp * tp * cp`` consecutive chips; a TP group is ``tp``
consecutive chips; an EP group is ``ep`` ranks of a stage spaced by the expert-TP degree.
A group of ``n`` chips with ``S`` chips per scale-up domain spans ``ceil(n/S)`` domains
(:func:`rackmath.core.network.place`), so wide EP beyond a domain pays scale-out.

The step (one "cycle": every sequence in the batch advances by its tokens) with ``P``
pipeline stages and ``P`` micro-batches in flight (no bubble in inference, D18):

    pass_s  = roofline(one micro-batch through one stage, per chip)   [core.roofline]
    stage_s = max(pass_s, f * comm_s) + (1 - f) * comm_s               f = comm_overlap_frac
    step_s  = P * stage_s * imbalance + hops * hop_s

``imbalance`` = slowest stage / mean stage (1 for ``P = 1``; :func:`balanced_stages`).
Each chip reads its weight shard once per micro-batch pass, so over a cycle the weight
time is ``P * W_stage / (C * BW)``: stages cannot fetch weights in parallel (D23).
With ``P = 1``, ``dp = 1``, ``tp = N`` and communication off, the step is the foundation's
ideal N-chip roofline, up to the replicated norm and router bytes (tested).

Sources: Shoeybi et al. 2019 (Megatron-LM: two all-reduces per layer under TP);
Narayanan et al. 2021 (Megatron PTD-P rank layout); DeepSeek-V3 report §3.4 and DeepEP
(attention-DP beside EP; dispatch/combine all-to-all of ``d_model`` per token and
destination rank); Korthikanti et al. 2022, eq. 1 (activations per layer); the lecture D13-D24.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collective_ops as cops
from rackmath.core import numeric
from rackmath.core import operators as ops
from rackmath.core.chip_rates import ChipRates
from rackmath.core.loads import StepLoad, microbatch_tokens, whole
from rackmath.core.network import (
    DEFAULT_ACTIVATION_BYTES,
    CommOverlap,
    Topology,
    combine_comm_s,
    crossing_hops,
    pipeline_hop_s,
    pipeline_hops,
    two_batch_overlap_s,
)
from rackmath.core.numeric import frozen_record
from rackmath.core.sharding import (
    ShardableModel,
)
from rackmath.core.step import PlanStep, sum_over
from rackmath.errors import InputError
from rackmath.specs import efficiency as seff

FloatArray = NDArray[np.float64]

#: The lecture's per-hop pipeline latency, D22: "a few milliseconds per hop (give or take
#: 10x)"; 4 stages take a 20 ms token to 30 ms, i.e. 2.5 ms for each of 4 hops (three
#: activation hops and the sampled token's return to the first stage).
LECTURE_HOP_LATENCY_S = 2.5e-3

_TIME_S = attrgetter("time_s")  # an operator's time, read in C (sum_over calls it for each)


def plan_step(
    m: ShardableModel,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    load: StepLoad,
    rates: ChipRates,
    topo: Topology | None,
    stage_frac: ArrayLike | None = None,
    comm_overlap_frac: float = CommOverlap.ADDED,
    communication: bool = True,
    decode: bool = True,
    extra_hop_latency_s: float = 0.0,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
    skew: ArrayLike = 1.0,
    tbo_overlap_frac: ArrayLike = 0.0,
    shape: tuple[int, ...] | None = None,
    cp: ArrayLike = 1.0,
    cp_comm: str = "ag",
) -> PlanStep:
    """Operators plus communication of one cycle in which the deployment processes ``load``.

    Per chip and micro-batch pass (``C = dp tp`` chips per stage, ``P = pp``): the operators
    of :func:`rackmath.core.operators.pass_operators`; TP all-reduces over ``L/P`` layers;
    EP dispatch + combine over ``L_moe/P`` MoE layers, over the tiers the EP group spans
    (ranks spaced ``moe_tp`` apart; wide EP beyond a domain crosses scale-out). ``stage_frac``
    (the heaviest stage's share of the layer cost) sets ``imbalance = P * stage_frac``.

    The plan's MoE fields (:class:`rackmath.specs.plan.ParallelPlan`): ``moe_tp`` and
    ``redundant_experts`` set the experts' shards and slots; ``skew`` multiplies the busiest
    rank's expert GEMM and its dispatch/combine bytes; ``tbo_overlap_frac`` ``o`` overlaps
    the all-to-all with the other micro-batch (:func:`rackmath.core.network.two_batch_overlap_s`).
    The step then runs as two micro-batches of half the tokens, each through every operator
    (weights read twice, GEMMs at half the rows) and its own collectives:

        stage_s = min(combine(pass, tp + ep), tbo)
        tbo = combine(2 pass_half, 2 tp_half) + max(0, 2 ep_half - o 2 pass_half)

    the runtime splitting the step only where that is faster (a memory-bound decode step whose
    all-to-all is small pays more to read its weights twice than the overlap saves); where it
    does, the operators reported are the two halves'. ``shape`` (default: the inputs' broadcast shape) is the
    shape of the answer's arrays: a one-point load given as scalars is computed on scalars.

    Micro-batches hold whole sequences (:func:`rackmath.core.loads.microbatch_tokens`): a
    batch smaller than ``P`` runs as that many micro-batches and leaves stages idle, so one
    prompt on ``P`` stages takes ``P`` stage passes of the whole prompt. ``stage_frac`` is the
    heaviest stage's share of a pass with the LM head on the last stage
    (:func:`rackmath.core.sharding.pipeline_fractions`).

    Context parallelism (``cp``, ``cp_comm``; :class:`rackmath.specs.plan.ParallelPlan`): a stage
    is ``dp x cp x tp`` chips; the operators split as
    :func:`rackmath.core.operators.pass_operators` says, the CP group's collectives
    (:func:`rackmath.core.collective_ops.cp_collectives`) add to the TP and EP ones, except a
    prefill ring's, which passes under the prefill attention: ``max(0, ring - attention)`` of it
    is exposed. With ``cp = 1`` nothing changes, to the bit.
    """
    num = numeric.num
    t, p, d, e, c = num(tp), num(pp), num(dp), num(ep), num(cp)
    on_cp = bool((c > 1.0).any()) if type(c) is np.ndarray else bool(c > 1.0)
    split: ArrayLike = False
    chips_per_stage = d * t * c if on_cp else d * t
    mb_tokens = microbatch_tokens(load, p)
    imbalance = p / p if stage_frac is None else p * numeric.num(stage_frac)

    def operators_of(step_load: StepLoad) -> tuple[ops.Operator, ...]:
        return ops.pass_operators(
            m.operators,
            step_load,
            rates,
            tp=t,
            pp=p,
            dp=d,
            ep=e,
            moe_tp=moe_tp,
            redundant_experts=redundant_experts,
            skew=skew,
            cp=c,
            cp_queries_everywhere=cp_comm == "a2a",
        )

    operators = operators_of(load)
    pass_s = sum_over(operators, _TIME_S)
    summed = operators  # the operators pass_s adds up (two-batch overlap may replace them)
    collectives: tuple[ops.Operator, ...] = ()
    if communication:
        zero = 0.0 * pass_s  # broadcasts every term to the pass's shape
        if topo is None:
            raise InputError("topology", None, "a topology when communication is on")
        ranks = cops.destination_ranks(e, m.experts, m.experts_per_token)

        def comms(tokens: FloatArray, step_load: StepLoad) -> tuple[ops.Operator, ...]:
            """The TP, EP and CP collectives of one micro-batch of ``tokens`` tokens."""
            out = cops.step_collectives(
                m, tokens, rates.efficiency, topo, t, d, e, p, moe_tp, skew, ranks, activation_bytes, c
            )
            if on_cp:
                out += cops.cp_collectives(m, step_load, rates.efficiency, topo, t, p, d, c, cp_comm)
            return out

        def cp_exposed(
            collectives: tuple[ops.Operator, ...], operators: tuple[ops.Operator, ...]
        ) -> FloatArray:
            """The CP traffic a pass waits for: all of it, less what a ring hides under the
            prefill attention it feeds."""
            total, ring = cops.cp_pass_s(collectives, zero)
            if not ring_comm:
                return total
            attention = sum_over(
                tuple(op for op in operators if op.op_class is seff.OpClass.ATTENTION_PREFILL),
                _TIME_S,
            )
            return total - ring + np.maximum(ring - attention, 0.0)

        ring_comm = on_cp and cp_comm == "ring"
        collectives = comms(mb_tokens, load)
        tp_comm, ep_comm = cops.comm_pass_s(collectives, zero)
        cp_comm_s, cp_wait = (
            (cops.cp_pass_s(collectives, zero)[0], cp_exposed(collectives, operators))
            if on_cp
            else (zero, zero)
        )
        if type(p) is not np.ndarray and p == 1:  # one stage: no hop (pipeline_hops' 0), none to time
            hops = hops_s = zero
        else:
            hops = pipeline_hops(p, decode=decode) + zero
            crossing = crossing_hops(p, chips_per_stage, topo.chips_per_domain, hops)
            message = mb_tokens * m.hidden * activation_bytes / chips_per_stage
            hop_out = pipeline_hop_s(message, True, topo, extra_hop_latency_s)
            hop_up = pipeline_hop_s(message, False, topo, extra_hop_latency_s)
            hops_s = crossing * hop_out + (hops - crossing) * hop_up + zero
        stage = combine_comm_s(
            pass_s, tp_comm + ep_comm + cp_wait if on_cp else tp_comm + ep_comm, comm_overlap_frac
        )
        o = numeric.num(tbo_overlap_frac)
        if (o > 0) if type(o) is not np.ndarray else np.any(o > 0):
            # two micro-batches of half the tokens: each runs every operator (weights read twice,
            # GEMMs at half the rows) and its own collectives; one's all-to-all hides under the
            # other's operators
            half_load = load.halved()
            halves = operators_of(half_load)
            tbo_pass = 2.0 * sum_over(halves, _TIME_S)
            half_collectives = comms(mb_tokens / 2.0, half_load)
            tp_half, ep_half = cops.comm_pass_s(half_collectives, zero)
            cp_half, cp_half_wait = (
                (cops.cp_pass_s(half_collectives, zero)[0], cp_exposed(half_collectives, halves))
                if on_cp
                else (zero, zero)
            )
            with_tbo = combine_comm_s(
                tbo_pass, 2.0 * (tp_half + cp_half_wait) if on_cp else 2.0 * tp_half, comm_overlap_frac
            ) + two_batch_overlap_s(2.0 * ep_half, tbo_pass, o)
            use = (with_tbo < stage) & (o > 0)
            split = use
            operators = _either(use, halves, operators)
            collectives = _either(use, half_collectives, collectives)
            if np.ndim(use) == 0:
                if use:
                    tp_comm, ep_comm, stage = 2.0 * tp_half, 2.0 * ep_half, with_tbo
                    cp_comm_s = 2.0 * cp_half
            else:
                tp_comm = np.where(use, 2.0 * tp_half, tp_comm)
                ep_comm = np.where(use, 2.0 * ep_half, ep_comm)
                cp_comm_s = np.where(use, 2.0 * cp_half, cp_comm_s)
                stage = np.where(use, with_tbo, stage)
        if type(p) is np.ndarray or p != 1:
            latency = crossing * topo.scale_out_latency_s + (hops - crossing) * topo.scale_up_latency_s
            latency = latency + hops * extra_hop_latency_s
            send = cops.send_operator("pp_send", hops_s, latency, topo, rates.efficiency)
            collectives = (*collectives, send)
    else:  # nothing to combine: the stage is the pass (the fields broadcast below, as views)
        combine_comm_s(0.0, 0.0, comm_overlap_frac)  # the overlap fraction is checked all the same
        tp_comm = ep_comm = cp_comm_s = 0.0 * p
        hops = pipeline_hops(p, decode=decode)
        hops_s = hops * extra_hop_latency_s
        stage = pass_s
    if shape is None:
        shape = np.shape(stage)
    elif type(stage) is np.ndarray and stage.ndim and stage.shape != shape:  # a point: the grid's shape
        shape = np.broadcast_shapes(stage.shape, shape)

    fields = (tp_comm, ep_comm, stage, hops, hops_s, p, imbalance)
    # one point (no array among them, one set of types: cheaper than seven checks): seven views of one array
    scalar = np.ndarray not in set(map(type, fields))
    if scalar or all(type(x) is not np.ndarray or not x.ndim for x in fields):
        tp_comm, ep_comm, stage, hops, hops_s, p, imbalance = np.array(fields).reshape(7, *shape)
    else:
        tp_comm, ep_comm, stage, hops, hops_s, p, imbalance = (
            x if isinstance(x, np.ndarray) and x.shape == shape else np.broadcast_to(x, shape) for x in fields
        )
    if on_cp:
        cp_comm_s = np.broadcast_to(cp_comm_s, shape)
    return frozen_record(
        PlanStep,
        operators=operators,
        tp_comm_pass_s=tp_comm,
        ep_comm_pass_s=ep_comm,
        cp_comm_pass_s=cp_comm_s if on_cp else 0.0,
        stage_s=stage,
        hops=hops,
        hops_s=hops_s,
        pp=p,
        imbalance=imbalance,
        overhead_s=host_overhead_s(rates.efficiency, load, d),
        two_batch_split=split,
        collectives=collectives,
        operator_sum_s=pass_s if operators is summed else None,
    )


def host_overhead_s(table: seff.EfficiencyTable, load: StepLoad, dp: ArrayLike) -> FloatArray | float:
    """Host time of one cycle: ``overhead_s`` per step plus ``overhead_s_per_sequence`` for
    each sequence the busiest engine runs, ``ceil(B / dp)`` of a batch of ``B`` (each
    attention-DP rank or replica schedules its own: 64 ranks running 8,192 sequences pay for
    128 at 10 us, 1.28 ms, not 82 ms)."""
    if not table.overhead_s_per_sequence:
        return table.overhead_s
    sequences = whole(load.decode_sequences / load.decode_queries, numeric.num(dp))
    return np.asarray(table.overhead_s + table.overhead_s_per_sequence * sequences)


def _either(
    use: ArrayLike, halves: tuple[ops.Operator, ...], whole: tuple[ops.Operator, ...]
) -> tuple[ops.Operator, ...]:
    """Per point, the two half micro-batches' operators (each quantity twice one half's) where
    ``use``, else the whole micro-batch's; the bandwidth is the half's where used."""
    if np.ndim(use) == 0:  # one point: one tuple or the other, floats kept
        if not use:
            return whole
        return tuple(h._replace(**{f: 2.0 * getattr(h, f) for f in _OPERATOR_TOTALS}) for h in halves)
    out = []
    for h, w in zip(halves, whole, strict=True):
        numbers = {f: np.where(use, 2.0 * getattr(h, f), getattr(w, f)) for f in _OPERATOR_TOTALS}
        bandwidth = np.where(use, h.bandwidth_bytes_per_s, w.bandwidth_bytes_per_s)
        out.append(w._replace(bandwidth_bytes_per_s=bandwidth, **numbers))
    return tuple(out)


_OPERATOR_TOTALS = (
    "flops",
    "weight_bytes",
    "activation_bytes",
    "kv_read_bytes",
    "kv_write_bytes",
    "compute_s",
    "memory_s",
    "time_s",
    "latency_s",
    "input_values",
)


#: The step's collectives that are tensor-parallel traffic, and those that are the experts'.
