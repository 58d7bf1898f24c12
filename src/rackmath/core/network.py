"""One network for serving and training: two tiers, groups placed on them, collectives.

Chips sit in scale-up domains of ``S`` chips (NVLink, ICI); domains are joined by a
scale-out network (InfiniBand, Ethernet, DCN). Bandwidths are per chip and per
direction (bytes/s), latencies per hop (s). A communication group of ``n`` ranks spaced
``stride`` chips apart (Megatron's rank order: tensor-parallel innermost, then context,
data/expert, pipeline outermost) shares a domain ``k = clamp(S // stride, 1, n)`` at a
time and spans ``R = ceil(n / k)`` domains (:func:`place`).

Every collective is written once here, on the alpha-beta model of
:mod:`rackmath.core.collectives`, and serving (:mod:`rackmath.core.parallel`) and training
(:mod:`rackmath.core.training`) both call it:

* all-reduce: hierarchical reduce-scatter + all-gather, ``2 [ring(M, k, up) + ring(M/k, R, out)]``;
* all-gather / reduce-scatter: ``ring(M, k, up) + ring(M/k, R, out)``;
* all-to-all: each chip's ``M`` bytes spread evenly over the group, ``M/R`` inside its
  domain and ``(R-1)/R M`` across, the two legs added;
* send/receive: ``M / B + alpha`` over the tier the hop crosses.

Expert dispatch sends each token once to each rank holding one of its experts
(:func:`rackmath.core.collectives.expected_destination_ranks`), not ``k`` copies.
Overlap with computation is an explicit parameter (:func:`combine_comm_s`).
Sources: Thakur, Rabenseifner & Gropp 2005; Jia et al. 2018 §3.2 (hierarchical rings);
Shoeybi et al. 2019 (two all-reduces per layer under TP); DeepEP (dispatch/combine).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collectives as coll
from rackmath.core.numeric import maximum, minimum, num
from rackmath.errors import InputError
from rackmath.specs import checks

FloatArray = NDArray[np.float64]

#: Bytes per activation value sent in TP all-reduces, EP dispatch/combine and PP hops:
#: bf16, the default of Megatron-LM and vLLM (DeepEP can dispatch in fp8: pass 1).
DEFAULT_ACTIVATION_BYTES = 2.0


class CommOverlap(float, Enum):
    """How communication combines with the roofline time of a pass (``comm_overlap_frac``).

    ``ADDED`` (0): communication runs after compute and memory traffic (an upper bound);
    ``OVERLAPPED`` (1): it hides fully behind them (a lower bound, as with DeepSeek's
    two-micro-batch overlap). Any fraction in [0, 1] is allowed.
    """

    ADDED = 0.0
    OVERLAPPED = 1.0


@dataclass(frozen=True)
class Topology:
    """Two levels of network: ``S`` chips per scale-up domain, domains over scale-out.

    Bandwidths are per chip and per direction (bytes/s); latencies per hop (s).
    ``chips_per_domain`` is how many of the deployment's chips sit in each domain (at
    most the domain's size; fewer to spread a deployment over more racks).
    """

    chips_per_domain: float
    scale_up_bytes_per_s: float
    scale_out_bytes_per_s: float
    scale_up_latency_s: float
    scale_out_latency_s: float

    def __post_init__(self) -> None:
        for name in ("chips_per_domain", "scale_up_bytes_per_s", "scale_out_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise InputError(f"topology {name}", getattr(self, name), "a positive number")
        for name in ("scale_up_latency_s", "scale_out_latency_s"):
            if not getattr(self, name) >= 0:
                raise InputError(f"topology {name}", getattr(self, name), "seconds >= 0")

    @property
    def bandwidth_ratio(self) -> float:
        """Scale-up over scale-out bandwidth (the lecture's "~8x"; GB200 NVL72: 900/50 = 18)."""
        return self.scale_up_bytes_per_s / self.scale_out_bytes_per_s


@dataclass(frozen=True)
class Group:
    """A communication group placed on a topology: ``size`` ranks, ``chips_per_domain`` of
    them per scale-up domain, over ``domains`` domains (arrays broadcast)."""

    size: FloatArray
    chips_per_domain: FloatArray
    domains: FloatArray
    topology: Topology


def place(topo: Topology, size: ArrayLike, stride: ArrayLike = 1) -> Group:
    """Place ``size`` ranks spaced ``stride`` chips apart: ``k = clamp(S // stride, 1, n)``
    ranks per domain, ``R = ceil(n / k)`` domains. TP of 8 on an 8-GPU HGX: k = 8, R = 1;
    DP of 64 at stride 8 (TP fills each box): k = 1, R = 64."""
    n, s = num(size), stride if type(stride) is float else num(stride)
    if isinstance(n, float) and isinstance(s, float):  # one group for every point: placed once
        placed: dict[tuple[float, float], Group] | None = topo.__dict__.get("_groups")
        if placed is None:  # kept on the topology (immutable): no hash of it per call
            placed = topo.__dict__["_groups"] = {}
        group = placed.get((n, s))
        if group is None:
            group = placed[(n, s)] = _place(topo, n, s)
        return group
    return _place(topo, size, stride)


def _place(topo: Topology, size: ArrayLike, stride: ArrayLike) -> Group:
    n = num(size)
    per = np.floor(topo.chips_per_domain / maximum(num(stride), 1.0))
    k = minimum(maximum(per, 1.0), maximum(n, 1.0))
    return Group(size=n, chips_per_domain=k, domains=np.ceil(n / k), topology=topo)


def all_gather_s(group: Group, bytes_per_chip: ArrayLike) -> FloatArray:
    """All-gather (or reduce-scatter) of an ``M``-byte buffer: hierarchical rings; 0 for one rank."""
    t = group.topology
    time = coll.hierarchical_all_gather_s(
        bytes_per_chip,
        group.chips_per_domain,
        group.domains,
        t.scale_up_bytes_per_s,
        t.scale_up_latency_s,
        t.scale_out_bytes_per_s,
        t.scale_out_latency_s,
    )
    return time * (group.size > 1)  # one rank: nothing to send


reduce_scatter_s = all_gather_s


def all_reduce_s(group: Group, bytes_per_chip: ArrayLike) -> FloatArray:
    """All-reduce = reduce-scatter + all-gather: ``2 x`` :func:`all_gather_s`."""
    return np.asarray(2.0 * all_gather_s(group, bytes_per_chip), dtype=float)


def all_to_all_s(group: Group, bytes_per_chip: ArrayLike) -> FloatArray:
    """Each chip's ``M`` bytes spread evenly over the group (inside + across legs, added)."""
    t = group.topology
    time = coll.hierarchical_all_to_all_s(
        bytes_per_chip,
        group.size,
        group.domains,
        t.scale_up_bytes_per_s,
        t.scale_out_bytes_per_s,
        t.scale_up_latency_s,
        t.scale_out_latency_s,
    )
    return time * (group.size > 1)  # one rank: nothing to send


def send_s(
    topo: Topology, message_bytes: ArrayLike, crosses: ArrayLike, extra_latency_s: ArrayLike = 0.0
) -> FloatArray:
    """One point-to-point send: ``M / B + alpha`` over the tier it crosses, plus any software latency."""
    if isinstance(crosses, bool):  # one tier for every point
        bw = topo.scale_out_bytes_per_s if crosses else topo.scale_up_bytes_per_s
        lat = topo.scale_out_latency_s if crosses else topo.scale_up_latency_s
    else:
        cross = np.asarray(crosses, bool)
        bw = np.where(cross, topo.scale_out_bytes_per_s, topo.scale_up_bytes_per_s)
        lat = np.where(cross, topo.scale_out_latency_s, topo.scale_up_latency_s)
    return np.asarray(
        coll.point_to_point_s(message_bytes, bw, lat) + np.asarray(extra_latency_s, float), dtype=float
    )


def expert_dispatch_bytes(
    tokens_per_chip: ArrayLike,
    ep: ArrayLike,
    experts: int,
    experts_per_token: int,
    hidden: int,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
) -> FloatArray:
    """Bytes one chip's dispatch all-to-all carries (:func:`dispatch_bytes`), ``D`` the
    expected ranks its tokens' experts live on."""
    ranks = coll.expected_destination_ranks(ep, experts, experts_per_token)
    return dispatch_bytes(tokens_per_chip, ranks, hidden, activation_bytes)


def dispatch_bytes(
    tokens_per_chip: ArrayLike,
    destination_ranks: ArrayLike,
    hidden: int,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
) -> FloatArray:
    """``tokens x D x d x bytes``: each token's hidden state once to each of the ``D`` ranks
    holding one of its experts (DeepEP's one copy per destination rank); combine returns the
    same bytes. Serving (:func:`ep_all_to_all_s`) and training price this one count."""
    return num(tokens_per_chip) * num(destination_ranks) * hidden * activation_bytes


def expert_destination_domains(
    domains: ArrayLike, experts: int, experts_per_token: int, max_domains: ArrayLike | None = None
) -> FloatArray:
    """Scale-up domains (nodes) a token's ``k`` experts land on, experts spread evenly over
    the ``R`` domains the EP group spans.

    Free routing: :func:`~rackmath.core.collectives.expected_destination_ranks` over ``R``
    domains of ``E/R`` experts. Node-limited routing (DeepSeek-V3 report §2.1.2: each token
    to at most ``M = 4`` nodes, picked by the sum of its top affinities per node): the
    ``k`` experts are drawn from the ``M`` chosen domains' ``M E / R`` experts, so the same
    count over ``min(M, R)`` domains. DeepSeek-V3 (EP 64 over 8 nodes, 256 experts,
    ``k = 8``): 5.28 nodes free, 3.64 with ``M = 4``.
    """
    r = np.maximum(np.asarray(domains, float), 1.0)
    chosen = r if max_domains is None else np.minimum(r, np.asarray(max_domains, float))
    return coll.expected_destination_ranks(chosen, experts * chosen / r, experts_per_token)


def expert_all_to_all_s(
    group: Group,
    tokens_per_chip: ArrayLike,
    destination_ranks: ArrayLike,
    hidden: int,
    activation_bytes: ArrayLike = DEFAULT_ACTIVATION_BYTES,
    destination_domains: ArrayLike | None = None,
) -> FloatArray:
    """One expert all-to-all (a dispatch or a combine) of ``tokens x d`` values per chip.

    Without ``destination_domains``: :func:`all_to_all_s` of ``tokens x D x d x bytes``,
    ``(R-1)/R`` of it across domains (every destination rank's copy crosses on its own).
    With it (DeepEP's node-deduplicated path, as DeepSeek-V3 ran it, §3.2.2): a token
    crosses the scale-out network once per remote destination domain,
    ``N (R-1)/R`` copies, and is forwarded inside the domain over the scale-up fabric to
    each of its ``D`` destination ranks: ``t = (k-1)/k tokens D d bytes / B_up + a_up +
    tokens N (R-1)/R d bytes / B_out + a_out`` (two legs added, as :func:`all_to_all_s`).
    ``activation_bytes``: 1 for an FP8 dispatch (plus its scales), 2 for BF16.
    """
    copies = num(tokens_per_chip) * num(destination_ranks) * hidden * num(activation_bytes)
    if destination_domains is None:
        return all_to_all_s(group, copies)
    t = group.topology
    inside = coll.all_to_all_s(copies, group.chips_per_domain, t.scale_up_bytes_per_s, t.scale_up_latency_s)
    crossing = (
        num(tokens_per_chip)
        * num(destination_domains)
        * coll.cross_domain_fraction(group.domains)
        * hidden
        * num(activation_bytes)
    )
    across = crossing / t.scale_out_bytes_per_s + t.scale_out_latency_s * (group.domains > 1)
    return np.asarray((inside + across) * (group.size > 1), dtype=float)


def tp_all_reduce_s(
    tokens_per_replica: ArrayLike,
    hidden: int,
    layers: ArrayLike,
    tp: ArrayLike,
    topo: Topology,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
) -> FloatArray:
    """Two all-reduces per layer (after attention, after the MLP) of ``tokens x d x bytes``.

    Over ``tp`` chips; hierarchical when ``tp`` exceeds the domain
    (:func:`~rackmath.core.collectives.hierarchical_all_reduce_s`).
    """
    message = num(tokens_per_replica) * hidden * activation_bytes
    t = num(tp)
    if isinstance(t, float) and t <= 1:  # no TP group: nothing to reduce
        return 0.0 * message * num(layers)
    one = all_reduce_s(place(topo, t), message)
    return 2.0 * num(layers) * one


def moe_tp_all_reduce_s(
    tokens_per_chip: ArrayLike,
    destination_ranks: ArrayLike,
    hidden: int,
    moe_layers: ArrayLike,
    moe_tp: ArrayLike,
    tp: ArrayLike,
    topo: Topology,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
) -> FloatArray:
    """The experts' own TP reduction when the plan's ``moe_tp`` differs from the attention ``tp``.

    An EP rank is ``m = moe_tp`` adjacent chips, each holding ``1/m`` of every expert of the
    rank. A stage's ``C`` chips form ``C/m`` such groups and each token reaches ``D`` ranks,
    so one group serves ``n D m`` token copies (``n`` tokens per chip); its chips gather those
    inputs and reduce-scatter the partial outputs, the bytes of one all-reduce of
    ``n D m x d x bytes`` over the ``m`` chips, once per MoE layer:

        t = L_moe x all_reduce(m chips, n D m d b)

    0 where ``moe_tp <= 1`` or ``moe_tp == tp`` (there the attention's TP all-reduces,
    :func:`tp_all_reduce_s`, already reduce the MLP over the same chips; they are kept as they
    were for the other layers, an upper bound where the MoE MLP's reduction moves to ``m``).
    Worked number: ``n = 64``, ``D = 6``, ``m = 4``, ``d = 7168``, 2 B: 11.0 MB; ring
    ``2 x 3/4 x 11.0 MB / 900 GB/s = 18.4 us`` (+ hop latencies) a layer.
    """
    m, t = num(moe_tp), num(tp)
    on = (m > 1) & (m != t)
    if (not on) if type(on) is not np.ndarray else not np.any(on):
        return 0.0 * num(tokens_per_chip) * num(moe_layers)
    group = place(topo, maximum(m, 1.0))
    message = num(tokens_per_chip) * num(destination_ranks) * m * hidden * activation_bytes
    return np.asarray(np.where(on, num(moe_layers) * all_reduce_s(group, message), 0.0), dtype=float)


def ep_all_to_all_s(
    tokens_per_chip: ArrayLike,
    destination_ranks: ArrayLike,
    hidden: int,
    moe_layers: ArrayLike,
    ep: ArrayLike,
    topo: Topology,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    stride: ArrayLike = 1,
) -> FloatArray:
    """Dispatch and combine per MoE layer: ``2 x all-to-all(tokens x D x d x bytes)`` over ``ep``.

    Each token goes once to each of the ``D`` ranks that hold one of its experts
    (:func:`~rackmath.core.collectives.expected_destination_ranks`), as DeepEP sends it, not
    ``k`` copies. The group spans ``R = ceil(ep / S)`` domains; ``(R-1)/R`` of the bytes cross
    the scale-out network (D14). ``ep = 1`` (experts local or tensor-split) costs nothing.
    EP ranks sit ``stride`` chips apart (the experts' TP degree), so wide EP spans
    ``ceil(ep / (S // stride))`` domains: EP = 72 on an NVL72 stays on NVLink, EP = 144 puts
    half its bytes on scale-out.
    """
    message = dispatch_bytes(tokens_per_chip, destination_ranks, hidden, activation_bytes)
    e = num(ep)
    if isinstance(e, float) and e <= 1:  # experts local: no all-to-all
        return 0.0 * message * num(moe_layers)
    one = all_to_all_s(place(topo, e, stride), message)
    return 2.0 * num(moe_layers) * one


def pipeline_hops(pp: ArrayLike, *, decode: bool) -> FloatArray:
    """Hops on a token's path: ``P - 1`` activation hops, plus the sampled token's return
    to the first stage in decode (``P`` in all); none with one stage."""
    p = num(pp)  # one plan stays a float (a 0-d array costs ~1 us an operation)
    return (p > 1) * (p if decode else p - 1.0)


def crossing_hops(
    pp: ArrayLike, chips_per_stage: ArrayLike, chips_per_domain: float, hops: ArrayLike
) -> FloatArray:
    """How many of ``hops`` pipeline hops leave a domain.

    Stages of ``C >= S`` chips each sit in their own domains: every hop crosses. Smaller
    stages pack ``S/C`` per domain, so ``D = ceil(P C / S)`` domains hold the pipeline and
    ``D - 1`` boundaries are crossed (``D`` on the decode ring, which wraps around).
    """
    p = np.asarray(pp, float)
    c = np.asarray(chips_per_stage, float)
    h = np.asarray(hops, float)
    domains = np.ceil(p * c / chips_per_domain)
    ring = h >= p  # decode: the path wraps from the last stage to the first
    packed = np.where(domains > 1, domains - 1 + ring, 0.0)
    return np.asarray(np.where(c >= chips_per_domain, h, np.minimum(h, packed)), dtype=float)


def pipeline_hop_s(
    message_bytes_per_chip: ArrayLike,
    crosses: ArrayLike,
    topo: Topology,
    extra_latency_s: ArrayLike = 0.0,
) -> FloatArray:
    """One pipeline hop: ``M / B + alpha`` over the level it crosses, plus any software latency."""
    return send_s(topo, message_bytes_per_chip, crosses, extra_latency_s)


def combine_comm_s(roofline_s: ArrayLike, comm_s: ArrayLike, comm_overlap_frac: float) -> FloatArray:
    """``max(t_roofline, f t_comm) + (1 - f) t_comm``: added at ``f = 0``, hidden at ``f = 1``.

    Always between ``max(t, c)`` and ``t + c``; never below the roofline.
    """
    f = checks.fraction("comm_overlap_frac", comm_overlap_frac)
    c = num(comm_s)
    return maximum(num(roofline_s), f * c) + (1.0 - f) * c


def two_batch_overlap_s(comm_s: ArrayLike, pass_s: ArrayLike, overlap_frac: ArrayLike) -> FloatArray:
    """Exposed all-to-all under two-batch overlap: ``max(0, comm - o x pass)``.

    The step's tokens run as two micro-batches; one's dispatch/combine runs while the other
    computes (DeepSeek-V3 report §3.4, inference: attention and MoE of one micro-batch
    overlap the other's all-to-all; SGLang's "two-batch overlap"). ``o`` in [0, 1] is the
    share of the pass's operator time that can hide the communication (1: all of it; 0: off,
    the communication fully exposed). Worked number: 3 ms of all-to-all beside a 2 ms pass
    at ``o = 1`` leaves 1 ms exposed; at ``o = 0.5``, 2 ms.
    """
    o = num(overlap_frac)
    if (not 0 <= o <= 1) if isinstance(o, float) else np.any((o < 0) | (o > 1)):
        raise InputError("two-batch overlap fraction", overlap_frac, "a fraction in [0, 1]")
    return maximum(num(comm_s) - o * num(pass_s), 0.0)


def kv_transfer_s(kv_bytes: ArrayLike, links: ArrayLike, topo: Topology) -> FloatArray:
    """Moving a prompt's KV cache between pools: ``kv / (links x B_out) + alpha_out``.

    ``links`` chips send their shards in parallel, each over its own scale-out NIC.
    """
    return coll.point_to_point_s(
        np.asarray(kv_bytes, float) / np.asarray(links, float),
        topo.scale_out_bytes_per_s,
        topo.scale_out_latency_s,
    )
