"""Collectives as operators of a step: which implementation times each, on which curve.

A step's collectives are operators of class ``collective`` (no FLOPs, no HBM bytes): a time,
its fixed part (``latency_s``) and the :class:`~rackmath.specs.efficiency.Kernel` it ran on.
Which model times them follows the rates' efficiency table, as every other operator's curve:

* the pure table (``--efficiency pure``): the link model above, unchanged (``Kernel("link model")``);
* a kernel-grounded table: the chip's fitted curves (:attr:`EfficiencyTable.collectives`,
  ``"<collective>:<implementation>"``) on the work of :mod:`rackmath.core.work`, each
  implementation where an engine runs it:

  - all-reduce: the faster of TensorRT-LLM's custom kernel (one-shot bytes, within the
    message sizes its table shows it running, as the AUTO strategy picks it) and NCCL's ring;
  - all-gather, reduce-scatter: NCCL;
  - expert dispatch and combine: DeepEP low-latency for decode-sized calls (a rank's message
    within its table's range; ``k`` copies a token, fp8 out and bf16 back), DeepEP normal
    beyond (one copy per destination rank), NCCL's all-to-all where the chip has neither;
  - a pipeline send: the link model (no send/receive table).

  A group larger than the table's (GB200's tables stop at 4 GPUs) runs on the same curve with
  its fitted hop latency and link fraction, and the kernel says so (``fallback``). A group
  spanning ``R > 1`` scale-up domains times its in-domain leg on the fitted curve and the
  cross-domain leg on the link model (scale-out), added as the link model adds them.

:func:`step_collectives` lists a serving step's collectives; training builds its own from the
same operator functions (:mod:`rackmath.core.training_comm`). The legs they choose among, the
operator a collective becomes and the expert exchange (:func:`expert_operators`) live in
:mod:`rackmath.core.collective_legs`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collectives as coll
from rackmath.core import operators as ops
from rackmath.core import work as wk
from rackmath.core.collective_legs import (
    LINK_MODEL,
    Leg,
    choose,
    collective_operator,
    describe,
    expert_operators,
    fitted,
    group_extent,
    kernel_of,
)
from rackmath.core.loads import StepLoad, rank_share
from rackmath.core.network import (
    DEFAULT_ACTIVATION_BYTES,
    Group,
    Topology,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    place,
)
from rackmath.core.numeric import maximum, minimum, num
from rackmath.core.operators import Operator
from rackmath.core.sharding import ShardableModel
from rackmath.specs import efficiency as seff
from rackmath.specs.efficiency import EfficiencyTable, Kernel

FloatArray = NDArray[np.float64]


def all_reduce_operator(
    name: str, group: Group, message_bytes: ArrayLike, calls: ArrayLike, table: EfficiencyTable
) -> Operator:
    """``calls`` all-reduces of an ``S``-byte buffer over ``group``.

    Link model: :func:`all_reduce_s`. Fitted: in each domain the faster of the custom kernel
    (``all_reduce:custom``, one-shot bytes ``(k-1) S``, only up to the largest message its table
    shows it running) and NCCL's ring (``all_reduce:nccl``, ``2 (k-1)/k S``) on ``k`` ranks;
    across ``R`` domains the link model's ring of the ``S/k`` shard, twice
    (:func:`rackmath.core.collectives.hierarchical_all_reduce_s`'s outer leg).
    """
    topo, s, c = group.topology, num(message_bytes), num(calls)
    on = group.size > 1
    nccl, custom = table.collective("all_reduce:nccl"), table.collective("all_reduce:custom")
    if nccl is None and custom is None:
        time = all_reduce_s(group, s)
        latency = all_reduce_s(group, 0.0 * s)
        kernel = describe(table, "all_reduce", "", None, 0.0, 0.0)
        return collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s)
    k, r = group.chips_per_domain, group.domains
    outer = 2.0 * coll.all_gather_s(s / k, r, topo.scale_out_bytes_per_s, topo.scale_out_latency_s)
    outer_latency = 2.0 * maximum(r - 1.0, 0.0) * topo.scale_out_latency_s
    if nccl is not None:
        t, a = fitted(nccl, wk.all_reduce(s, k), topo)
        primary = Leg(t, a, True, "nccl", nccl)
    else:
        t = coll.all_reduce_s(s, k, topo.scale_up_bytes_per_s, topo.scale_up_latency_s)
        primary = Leg(t, 2.0 * maximum(k - 1.0, 0.0) * topo.scale_up_latency_s, True, LINK_MODEL, None)
    alternatives = []
    if custom is not None:
        t, a = fitted(custom, wk.one_shot_all_reduce(s, k), topo)
        alternatives.append(Leg(t, a, s <= custom.max_message_bytes, "custom", custom))
    time, latency, label, leg = choose(primary, alternatives, fastest=True)
    kernel = kernel_of(table, "all_reduce", label, leg, group_extent(group))
    return collective_operator(
        name, (time + outer) * on * c, (latency + outer_latency) * on * c, kernel, topo.scale_up_bytes_per_s
    )


def gather_operator(
    name: str,
    collective: str,
    group: Group,
    message_bytes: ArrayLike,
    calls: ArrayLike,
    table: EfficiencyTable,
) -> Operator:
    """``calls`` all-gathers (``collective = "all_gather"``) or reduce-scatters of an ``S``-byte
    buffer over ``group``: :func:`all_gather_s` on the link model; fitted, NCCL's curve on
    the ``k`` in-domain ranks plus the link model's ring of the ``S/k`` shard across domains."""
    topo, s, c = group.topology, num(message_bytes), num(calls)
    curve = table.collective(f"{collective}:nccl")
    if curve is None:
        time, latency = all_gather_s(group, s), all_gather_s(group, 0.0 * s)
        kernel = describe(table, collective, "", None, 0.0, 0.0)
        return collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s)
    k, r = group.chips_per_domain, group.domains
    work = wk.all_gather(s, k) if collective == "all_gather" else wk.reduce_scatter(s, k)
    t, a = fitted(curve, work, topo)
    outer = coll.all_gather_s(s / k, r, topo.scale_out_bytes_per_s, topo.scale_out_latency_s)
    outer_latency = maximum(r - 1.0, 0.0) * topo.scale_out_latency_s
    on = group.size > 1
    kernel = kernel_of(table, collective, "nccl", Leg(t, a, True, "nccl", curve), group_extent(group))
    return collective_operator(
        name, (t + outer) * on * c, (a + outer_latency) * on * c, kernel, topo.scale_up_bytes_per_s
    )


def all_to_all_operator(
    name: str, group: Group, bytes_per_chip: ArrayLike, calls: ArrayLike, table: EfficiencyTable
) -> Operator:
    """``calls`` all-to-alls in which each chip spreads ``M`` bytes evenly over ``group``: the
    link model's :func:`all_to_all_s`; fitted, NCCL's all-to-all curve (``all_to_all:nccl``) on
    the ``n/R`` ranks of a domain with ``M/R`` of the bytes (:func:`rackmath.core.work.all_to_all`)
    plus the link model's crossing leg ``(R-1)/R M / B_out + a_out``, as
    :func:`rackmath.core.collectives.hierarchical_all_to_all_s` adds them."""
    topo, m, c = group.topology, num(bytes_per_chip), num(calls)
    curve = table.collective("all_to_all:nccl")
    if curve is None:
        time, latency = all_to_all_s(group, m), all_to_all_s(group, 0.0 * m)
        kernel = describe(table, "all_to_all", "", None, 0.0, 0.0)
        return collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s)
    n, r = group.size, maximum(group.domains, 1.0)
    t, a = fitted(curve, wk.all_to_all(m / r, n / r), topo)
    across = coll.cross_domain_fraction(r) * m / topo.scale_out_bytes_per_s + topo.scale_out_latency_s * (
        r > 1
    )
    across_latency = topo.scale_out_latency_s * (r > 1)
    on = group.size > 1
    kernel = kernel_of(table, "all_to_all", "nccl", Leg(t, a, True, "nccl", curve), group_extent(group))
    return collective_operator(
        name, (t + across) * on * c, (a + across_latency) * on * c, kernel, topo.scale_up_bytes_per_s
    )


def send_operator(
    name: str, time_s: ArrayLike, latency_s: ArrayLike, topo: Topology, table: EfficiencyTable
) -> Operator:
    """Pipeline sends of a step (``time_s`` all together, :func:`pipeline_hop_s`) as an operator:
    the link model in every mode (no send/receive table is fitted)."""
    why = "" if table.is_pure else "no send/receive table: link model"
    kernel = Kernel(LINK_MODEL, "", "send", table.chip, table.transferred, why)
    return collective_operator(name, time_s, latency_s, kernel, topo.scale_up_bytes_per_s)


TP_COLLECTIVES = ("tp_all_reduce", "moe_tp_all_reduce")
EP_COLLECTIVES = ("ep_dispatch", "ep_combine")
#: A serving CP group's collectives (:func:`cp_collectives`).
CP_COLLECTIVES = (
    "cp_kv_all_gather",
    "cp_kv_ring",
    "cp_q_all_gather",
    "cp_lse_all_gather",
    "cp_out_reduce_scatter",
    "cp_merge_all_to_all",
)
#: Bytes of one log-sum-exp value: fp32 (vLLM's and SGLang's merge kernels carry the LSE in fp32).
LSE_BYTES = 4.0
#: Collectives whose time is the whole cycle's, not one pass's (the pipeline sends).
PER_CYCLE_COLLECTIVES = ("pp_send",)


def step_collectives(
    m: ShardableModel,
    tokens: FloatArray,
    table: seff.EfficiencyTable,
    topo: Topology,
    tp: FloatArray,
    dp: FloatArray,
    ep: FloatArray,
    pp: FloatArray,
    moe_tp: ArrayLike,
    skew: ArrayLike,
    destination_ranks: FloatArray,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    cp: ArrayLike = 1.0,
) -> tuple[ops.Operator, ...]:
    """The collectives of one micro-batch of ``tokens`` tokens through one stage, per chip
    (``cp`` CP ranks split a DP rank's tokens as ``dp`` splits the stage's: ``dp`` below reads
    ``dp x cp``):

    * ``tp_all_reduce``: two all-reduces per layer of ``tokens/dp x h x b`` over the ``tp``
      chips (Megatron: after attention, after the MLP), ``2 L / P`` calls;
    * ``moe_tp_all_reduce``: the experts' own TP reduction where ``moe_tp`` differs from ``tp``
      (:func:`rackmath.core.network.moe_tp_all_reduce_s`), ``L_moe / P`` calls;
    * ``ep_dispatch``, ``ep_combine``: one each per MoE layer over the ``ep`` ranks spaced
      ``moe_tp`` apart, ``tokens / (dp tp) x skew`` tokens a chip, ``L_moe / P`` calls each.

    Attention without data parallelism (``dp x cp = 1``) leaves every token on every chip of
    the stage after attention's all-reduce, so each rank runs its experts on the tokens routed
    to them where they already are and the MLP's TP all-reduce sums the ranks' partial outputs
    (the experts' own TP pieces among them): such a plan has no dispatch, no combine and no
    expert all-reduce. That is how the engines run it: vLLM turns its all-to-all kernels on
    only when ``dp_size > 1`` (``FusedMoEParallelConfig.use_all2all_kernels``,
    vllm/model_executor/layers/fused_moe/config.py), and TensorRT-LLM's TP8 DeepSeek-R1 fuses
    the experts' local reduction into the one-shot all-reduce (tech blog 1, "Pushing Latency
    Boundaries", module 13). E.g. ``tp=8,ep=4,moe_tp=2``: two TP all-reduces per layer, nothing
    else; ``dp=2,tp=4,ep=8``: dispatch and combine as above.

    Each is timed by :func:`all_reduce_operator` or
    :func:`expert_operators` on the table's fitted curves (the link model
    on the pure table: then the sums are :func:`tp_all_reduce_s`, :func:`moe_tp_all_reduce_s`
    and :func:`ep_all_to_all_s`, to the bit). Plans without a dimension (``tp = 1``, ``ep =
    1``) get no operator for it.
    """
    out: list[ops.Operator] = []
    c = num(cp)
    if type(c) is np.ndarray or c != 1.0:
        dp = dp * c
    if type(tp) is np.ndarray or tp > 1:
        message = tokens / dp * m.hidden * activation_bytes
        group = place(topo, tp)
        out.append(all_reduce_operator("tp_all_reduce", group, message, 2.0 * (m.num_layers / pp), table))
    moe_layers = m.num_moe_layers / pp
    chip_tokens = tokens / (dp * tp) * num(skew)
    mt = num(moe_tp)
    moving = dp > 1  # tokens move to their experts only beside attention DP (docstring)
    on = (mt > 1) & (mt != tp) & moving
    if on.any() if type(on) is np.ndarray else on:
        message = chip_tokens * destination_ranks * mt * m.hidden * activation_bytes
        group = place(topo, maximum(mt, 1.0))
        out.append(_masked(all_reduce_operator("moe_tp_all_reduce", group, message, moe_layers, table), on))
    ep_on = (ep > 1) & moving
    if ep_on.any() if type(ep_on) is np.ndarray else ep_on:
        group = place(topo, ep, maximum(mt, 1.0))
        dispatch, combine = expert_operators(
            group, chip_tokens, destination_ranks, m.experts_per_token, m.hidden, moe_layers, table,
            activation_bytes, experts=m.experts,
        )  # fmt: skip
        out += (_masked(dispatch, ep_on), _masked(combine, ep_on))
    return tuple(out)


def _masked(op: Operator, on: ArrayLike) -> Operator:
    """``op`` where ``on`` holds, no time where it does not (plan arrays mix both); a scalar
    ``True`` returns it as it is."""
    if type(on) is not np.ndarray:
        return op
    return op._replace(time_s=op.time_s * on, latency_s=op.latency_s * on)


def comm_pass_s(collectives: tuple[ops.Operator, ...], zero: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(TP, EP) communication of one pass: the sums of the TP and the EP collectives' times."""
    tp, ep = zero, zero
    for op in collectives:
        if op.name in TP_COLLECTIVES:
            tp = tp + op.time_s
        elif op.name in EP_COLLECTIVES:
            ep = ep + op.time_s
    return tp, ep


def cp_collectives(
    m: ShardableModel,
    load: StepLoad,
    table: seff.EfficiencyTable,
    topo: Topology,
    tp: FloatArray,
    pp: FloatArray,
    dp: FloatArray,
    cp: FloatArray,
    cp_comm: str = "ag",
) -> tuple[ops.Operator, ...]:
    """A serving CP group's traffic for one micro-batch through one stage, per chip: the ``c``
    CP ranks of a DP rank sit ``tp`` chips apart (Megatron's rank order: tp, cp, dp, pp), one
    call per layer (``L/P`` calls). Per layer, with ``n`` the DP rank's decode query rows,
    ``h = H/tp`` query heads on the chip, ``d_qk, d_v`` the decode query and output widths
    (MLA absorbed: 576 and 512), ``b = 2`` (bf16) and LSEs in fp32 (:data:`LSE_BYTES`):

    * decode, ``ag`` (vLLM's default ``ag_rs``): ``cp_q_all_gather`` of the ``n h d_qk b``
      queries, ``cp_lse_all_gather`` of every rank's ``n h`` LSEs (``c n h 4`` gathered) and
      ``cp_out_reduce_scatter`` of the ``n h d_v b`` partial outputs, each rank keeping its own
      rows' merged outputs; on the wire ``(c-1) n h [(d_qk + d_v) b / c + 4]`` a chip;
    * decode, ``a2a`` (SGLang's DCP, vLLM's ``a2a``, Helix): every CP rank has computed every
      row's queries (:func:`rackmath.core.operators.pass_operators` with
      ``cp_queries_everywhere``), so one ``cp_merge_all_to_all`` of ``n h (d_v b + 4)`` partial
      outputs and LSEs, ``(c-1)/c`` of it on the wire;
    * prefill (``ag``, ``a2a``): ``cp_kv_all_gather`` of the DP rank's prompts' keys and values
      on this TP rank, the cache bytes one layer of them holds (written, plus a cached prefix
      read), ``S_kv = prompts x KV bytes / (L min(tp, H_kv))``, before attention; ``ring``:
      ``cp_kv_ring``, the same ``c - 1`` steps of ``S_kv / c`` (timed on the same all-gather
      curve), passed around the ring while the attention blocks run
      (:func:`rackmath.core.parallel.plan_step` hides it under the prefill attention).

    Llama 3.1 70B, one 131,072-token prompt, ``tp=8,cp=4``, bf16 KV: ``S_kv = 131,072 x 2 x 128
    x 2 B = 67.1 MB`` a layer (one KV head a chip), ``3/4`` of it on each chip's wire: 50.3 MB.
    None where ``cp = 1``.
    """
    c = num(cp)
    if not (bool((c > 1.0).any()) if type(c) is np.ndarray else c > 1.0):
        return ()
    share = rank_share(load, pp, dp)
    layers = m.num_layers / pp
    om = m.operators
    heads = om.heads / tp
    qk, v = om.decode_dims
    group = place(topo, c, tp)
    b = wk.OUTPUT_BYTES
    out: list[ops.Operator] = []
    if bool(np.any(load.decode_sequences > 0)):
        n = share.decode_rows
        if cp_comm == "a2a":
            out.append(
                all_to_all_operator(
                    "cp_merge_all_to_all", group, n * heads * (v * b + LSE_BYTES), layers, table
                )
            )
        else:
            out += [
                gather_operator("cp_q_all_gather", "all_gather", group, n * heads * qk * b, layers, table),
                gather_operator(
                    "cp_lse_all_gather", "all_gather", group, c * n * heads * LSE_BYTES, layers, table
                ),
                gather_operator(
                    "cp_out_reduce_scatter", "reduce_scatter", group, n * heads * v * b, layers, table
                ),
            ]
    if bool(np.any(load.prefill_sequences > 0)):
        kv_split = minimum(tp, float(m.kv_heads))
        per_prompt = load.prefill_kv_write_bytes + load.prefill_kv_read_bytes
        gathered = share.prompts * per_prompt / (m.num_layers * kv_split)
        name = "cp_kv_ring" if cp_comm == "ring" else "cp_kv_all_gather"
        out.append(gather_operator(name, "all_gather", group, gathered, layers, table))
    on = c > 1.0
    if type(on) is np.ndarray and not on.all():  # a grid over cp: nothing where cp = 1
        out = [op._replace(time_s=op.time_s * on, latency_s=op.latency_s * on) for op in out]
    return tuple(out)


def cp_pass_s(collectives: tuple[ops.Operator, ...], zero: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(all CP traffic of one pass, the part of it a ring passes under the attention blocks)."""
    total, ring = zero, zero
    for op in collectives:
        if op.name in CP_COLLECTIVES:
            total = total + op.time_s
            if op.name == "cp_kv_ring":
                ring = ring + op.time_s
    return total, ring


@lru_cache(maxsize=1024)
def _cached_ranks(ep: float, experts: int, per_token: int) -> FloatArray:
    return num(coll.expected_destination_ranks(ep, experts, per_token))


def destination_ranks(ep: FloatArray, experts: int, per_token: int) -> FloatArray:
    """:func:`~rackmath.core.collectives.expected_destination_ranks`, cached for one EP degree
    (a float there: a 0-d array costs ~1 us an operation)."""
    if isinstance(ep, float) or np.ndim(ep) == 0:
        return _cached_ranks(float(ep), experts, per_token)
    return coll.expected_destination_ranks(ep, experts, per_token)
