"""A training step's communication: which collectives, of which messages, how many.

Every collective comes from :mod:`rackmath.core.collective_ops`, the same functions serving uses:
an operator of class ``collective`` timed on the chip's fitted curves when the step's efficiency
table has them (kernel-grounded), else on the link model (:mod:`rackmath.core.network`). These
helpers only say which collectives a training step runs (data-parallel gradients and FSDP
weights, tensor-parallel all-reduces, context-parallel KV exchange, expert dispatch and combine,
pipeline sends), of which messages and how many times; the ``*_s`` functions are their times.
"""

from __future__ import annotations

from rackmath.core import collective_legs as legs
from rackmath.core import collective_ops as cops
from rackmath.core import network as net
from rackmath.core.operators import Operator
from rackmath.core.training import ZeroStage
from rackmath.specs.efficiency import PURE_TABLE, EfficiencyTable, Kernel


def group_link(
    size: int,
    stride: int,
    domain_chips: int,
    *,
    scale_up_bandwidth_bytes_per_s: float,
    scale_up_latency_s: float,
    scale_out_bandwidth_bytes_per_s: float,
    scale_out_latency_s: float,
) -> net.Group:
    """Place a group of ``size`` ranks spaced ``stride`` chips apart on domains of
    ``domain_chips`` (:func:`rackmath.core.network.place`; Megatron's rank order: tp, cp, dp, pp)."""
    topo = net.Topology(
        chips_per_domain=float(domain_chips),
        scale_up_bytes_per_s=scale_up_bandwidth_bytes_per_s,
        scale_out_bytes_per_s=scale_out_bandwidth_bytes_per_s,
        scale_up_latency_s=scale_up_latency_s,
        scale_out_latency_s=scale_out_latency_s,
    )
    return net.place(topo, size, stride)


def dp_operators(
    grad_bytes: float,
    weight_bytes: float,
    link: net.Group,
    zero: ZeroStage,
    table: EfficiencyTable = PURE_TABLE,
    calls: float = 1.0,
) -> tuple[Operator, ...]:
    """Data-parallel traffic per step per chip as collective operators (ZeRO §7: communication
    volume), each timed by :mod:`rackmath.core.network` (the chip's fitted curves in ``table``,
    else the link model). Stages 0-2: one all-reduce of the gradients (``dp_all_reduce``;
    stages 1-2 do it as a reduce-scatter plus an all-gather of the updated weights, the same
    ``2 (n-1)/n M``). Stage 3 (FSDP): the weights all-gathered for the forward and again for
    the backward (``fsdp_all_gather``, 2 calls) and the gradients reduce-scattered
    (``fsdp_reduce_scatter``): 1.5x the all-reduce volume. ``grad_bytes`` and
    ``weight_bytes`` are the whole (unsharded) buffers of one model-parallel shard; ``calls``
    of each (buckets x micro-batches)."""
    if zero >= ZeroStage.WEIGHTS:
        gathers = cops.gather_operator(
            "fsdp_all_gather", "all_gather", link, weight_bytes, 2.0 * calls, table
        )
        scatter = cops.gather_operator(
            "fsdp_reduce_scatter", "reduce_scatter", link, grad_bytes, calls, table
        )
        return gathers, scatter
    return (cops.all_reduce_operator("dp_all_reduce", link, grad_bytes, calls, table),)


def dp_sync_s(
    grad_bytes: float,
    weight_bytes: float,
    link: net.Group,
    zero: ZeroStage,
    table: EfficiencyTable = PURE_TABLE,
) -> float:
    """Data-parallel traffic per step per chip, seconds: the sum of :func:`dp_operators`."""
    return float(sum(float(op.time_s) for op in dp_operators(grad_bytes, weight_bytes, link, zero, table)))


def tp_operator(
    activation_bytes: float,
    link: net.Group,
    layers: float,
    forward_passes: float,
    table: EfficiencyTable = PURE_TABLE,
) -> Operator:
    """Tensor-parallel traffic of one micro-batch on one stage (Megatron, Shoeybi et al.
    2019, §3): two all-reduces of the ``b s h`` activations per layer per forward, two per
    backward (with sequence parallelism: all-gather + reduce-scatter, the same volume), as one
    operator (``tp_all_reduce``, :func:`rackmath.core.network.all_reduce_operator`).
    ``forward_passes`` is 1 plus any recomputed forward (full: 2)."""
    calls = 2.0 * layers * (forward_passes + 1.0)
    return cops.all_reduce_operator("tp_all_reduce", link, activation_bytes, calls, table)


def tp_comm_s(
    activation_bytes: float,
    link: net.Group,
    layers: float,
    forward_passes: float,
    table: EfficiencyTable = PURE_TABLE,
) -> float:
    """Seconds of :func:`tp_operator`."""
    return float(tp_operator(activation_bytes, link, layers, forward_passes, table).time_s)


def cp_operators(
    kv_bytes: float, link: net.Group, layers: float, table: EfficiencyTable = PURE_TABLE
) -> tuple[Operator, Operator]:
    """Context-parallel traffic of one micro-batch on one stage: all-gather the keys and
    values of the whole sequence in the forward (``cp_all_gather``), reduce-scatter their
    gradients in the backward (``cp_reduce_scatter``), once per layer each (Llama 3 §3.3.2:
    all-gather based CP). ``kv_bytes``: K and V of the full sequence on one tensor-parallel
    rank."""
    return (
        cops.gather_operator("cp_all_gather", "all_gather", link, kv_bytes, layers, table),
        cops.gather_operator("cp_reduce_scatter", "reduce_scatter", link, kv_bytes, layers, table),
    )


def cp_comm_s(kv_bytes: float, link: net.Group, layers: float, table: EfficiencyTable = PURE_TABLE) -> float:
    """Seconds of :func:`cp_operators`."""
    return float(sum(float(op.time_s) for op in cp_operators(kv_bytes, link, layers, table)))


def ep_comm_s(dispatch_bytes: float, link: net.Group, moe_layers: int) -> float:
    """Expert-parallel traffic of one micro-batch on one stage, free routing, all BF16, on the
    link model: ``dispatch_bytes`` (what one chip sends, one copy per destination rank,
    :func:`rackmath.core.network.expert_dispatch_bytes`) in each of the four all-to-alls."""
    return float(4 * moe_layers * net.all_to_all_s(link, dispatch_bytes))


def ep_operators(
    link: net.Group,
    tokens_per_chip: float,
    destination_ranks: float,
    hidden: int,
    moe_layers: float,
    *,
    experts_per_token: float = 1.0,
    dispatch_bytes: float = net.DEFAULT_ACTIVATION_BYTES,
    combine_bytes: float = net.DEFAULT_ACTIVATION_BYTES,
    destination_domains: float | None = None,
    table: EfficiencyTable = PURE_TABLE,
    experts: float | None = None,
) -> tuple[Operator, Operator]:
    """Expert-parallel traffic of one micro-batch on one stage: four all-to-alls per MoE
    layer (:func:`rackmath.core.network.expert_operators`). Two run in the dispatch direction
    (``ep_dispatch``: the forward dispatch, and the backward's gradient into the
    down-projection) at ``dispatch_bytes`` per value, two in the combine direction
    (``ep_combine``: the forward combine, and the backward's gradient of the dispatched input)
    at ``combine_bytes``. DeepSeek-V3 (§3.3.2) sends the first two in FP8
    (:data:`rackmath.core.work.FP8_DISPATCH_BYTES`) and keeps the combines in BF16:
    ``(1.03 + 2) / 4 = 0.76`` of an all-BF16 exchange. ``destination_domains``: node-limited
    routing's domains per token (:func:`rackmath.core.network.expert_destination_domains`);
    None: free routing. ``experts``: the routed experts (DeepEP low-latency's SM per expert).
    Kernel-grounded, training-sized calls run DeepEP's normal kernels (beyond the
    low-latency table's tokens) at these payloads."""
    return legs.expert_operators(
        link,
        tokens_per_chip,
        destination_ranks,
        experts_per_token,
        hidden,
        2.0 * moe_layers,
        table,
        value_bytes=(dispatch_bytes, combine_bytes),
        destination_domains=destination_domains,
        experts=experts,
    )


def ep_traffic_s(
    link: net.Group,
    tokens_per_chip: float,
    destination_ranks: float,
    hidden: int,
    moe_layers: float,
    *,
    dispatch_bytes: float = net.DEFAULT_ACTIVATION_BYTES,
    combine_bytes: float = net.DEFAULT_ACTIVATION_BYTES,
    destination_domains: float | None = None,
    table: EfficiencyTable = PURE_TABLE,
    experts_per_token: float = 1.0,
    experts: float | None = None,
) -> float:
    """Seconds of :func:`ep_operators` (dispatch and combine together)."""
    ops_ = ep_operators(
        link,
        tokens_per_chip,
        destination_ranks,
        hidden,
        moe_layers,
        experts_per_token=experts_per_token,
        dispatch_bytes=dispatch_bytes,
        combine_bytes=combine_bytes,
        destination_domains=destination_domains,
        table=table,
        experts=experts,
    )
    return float(ops_[0].time_s + ops_[1].time_s)


def pp_send_s(activation_bytes: float, link: net.Group) -> float:
    """One stage-to-stage send of a micro-batch's boundary activations (``b s h`` values,
    split over the tensor-parallel ranks): ``M / B + alpha`` over the tier the group spans
    (the link model: no send/receive table is fitted)."""
    return float(net.send_s(link.topology, activation_bytes, link.domains > 1))


def dispatcher_operators(
    tokens_per_chip: float,
    destination_ranks: float,
    hidden: int,
    moe_layers: float,
    dispatch_bytes_per_s: float,
    combine_bytes_per_s: float,
    kernel: Kernel,
    link_bytes_per_s: float,
    *,
    dispatch_value_bytes: float = net.DEFAULT_ACTIVATION_BYTES,
    combine_value_bytes: float = net.DEFAULT_ACTIVATION_BYTES,
) -> tuple[Operator, Operator]:
    """Expert-parallel traffic of one micro-batch on one stage on a dispatcher timed by its
    measured algorithm bandwidth (HybridEP): each of the ``2 x moe_layers`` calls a direction
    moves the rank's ``T D h`` values (``D`` destination ranks per token: a token reaches each
    rank holding one of its experts once) at ``b`` bytes per value,
    ``t = T D h b / B`` (dispatch at ``dispatch_bytes_per_s``, combine at
    ``combine_bytes_per_s``); the rate already holds the call's fixed cost (measured through the
    Torch API), so no latency is added. Worked number: 16,384 tokens of hidden 2,048 to 5.25
    ranks in BF16 at 545.71 GB/s: 352 MB, 0.645 ms a call."""
    moved = tokens_per_chip * destination_ranks * hidden
    calls = 2.0 * moe_layers
    dispatch = calls * moved * dispatch_value_bytes / dispatch_bytes_per_s
    combine = calls * moved * combine_value_bytes / combine_bytes_per_s
    return (
        legs.collective_operator("ep_dispatch", dispatch, 0.0, kernel, link_bytes_per_s),
        legs.collective_operator("ep_combine", combine, 0.0, kernel, link_bytes_per_s),
    )
