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
from functools import lru_cache
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collectives as coll
from rackmath.core import work as wk
from rackmath.core.efficiency import collective_timing
from rackmath.core.numeric import maximum, minimum, num
from rackmath.core.operators import Operator
from rackmath.errors import InputError
from rackmath.specs.efficiency import CollectiveCurve, EfficiencyTable, Kernel, OpClass

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
    n, s = num(size), num(stride)
    if isinstance(n, float) and isinstance(s, float):  # one group for every point: placed once
        return _place_one(topo, float(n), float(s))
    return _place(topo, size, stride)


@lru_cache(maxsize=1024)
def _place_one(topo: Topology, size: float, stride: float) -> Group:
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
    if (not on) if on.ndim == 0 else not np.any(on):
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
    p = np.asarray(pp, float)
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
    f = float(comm_overlap_frac)
    if not 0.0 <= f <= 1.0:
        raise InputError("comm_overlap_frac", comm_overlap_frac, "a fraction in [0, 1]")
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


# ----------------------------------------------------------------------------- collectives as operators
#
# A step's collectives are operators of class ``collective`` (no FLOPs, no HBM bytes): a time,
# its fixed part (``latency_s``) and the :class:`~rackmath.specs.efficiency.Kernel` it ran on.
# Which model times them follows the rates' efficiency table, as every other operator's curve:
#
# * the pure table (``--pure``): the link model above, unchanged (``Kernel("link model")``);
# * a kernel-grounded table: the chip's fitted curves (:attr:`EfficiencyTable.collectives`,
#   ``"<collective>:<implementation>"``) on the work of :mod:`rackmath.core.work`, each
#   implementation where an engine runs it:
#
#   - all-reduce: the faster of TensorRT-LLM's custom kernel (one-shot bytes, within the
#     message sizes its table shows it running, as the AUTO strategy picks it) and NCCL's ring;
#   - all-gather, reduce-scatter: NCCL;
#   - expert dispatch and combine: DeepEP low-latency for decode-sized calls (a rank's message
#     within its table's range; ``k`` copies a token, fp8 out and bf16 back), DeepEP normal
#     beyond (one copy per destination rank), NCCL's all-to-all where the chip has neither;
#   - a pipeline send: the link model (no send/receive table).
#
#   A group larger than the table's (GB200's tables stop at 4 GPUs) runs on the same curve with
#   its fitted hop latency and link fraction, and the kernel says so (``fallback``). A group
#   spanning ``R > 1`` scale-up domains times its in-domain leg on the fitted curve and the
#   cross-domain leg on the link model (scale-out), added as the link model adds them.

LINK_MODEL = "link model"
#: Bytes a value DeepEP sends: an fp8 dispatch (plus its scales) and a bf16 combine
#: (DeepEP's defaults in SGLang and TensorRT-LLM; its tables time these payloads).
DEEPEP_VALUE_BYTES: dict[str, float] = {"dispatch": wk.FP8_DISPATCH_BYTES, "combine": 2.0}
_ZERO = cast(FloatArray, np.float64(0.0))  # a term a collective lacks; broadcasts anywhere


class _Leg(NamedTuple):
    """One implementation's time per call (and fixed part) for a collective, the points it may
    run at (``usable``: True, or a bool per point), its label and curve (None: link model)."""

    time: FloatArray
    latency: FloatArray
    usable: Any
    label: str
    curve: CollectiveCurve | None


def collective_operator(
    name: str, time_s: ArrayLike, latency_s: ArrayLike, kernel: Kernel, link_bytes_per_s: float
) -> Operator:
    """A collective as an operator of the step: ``time_s`` and its fixed part ``latency_s``
    (seconds, every call together), no FLOPs and no HBM bytes, and the kernel it ran on."""
    z = _ZERO
    bandwidth = num(link_bytes_per_s)
    return Operator(
        name, OpClass.COLLECTIVE, z, z, z, z, z, z, z, num(time_s), bandwidth, num(latency_s), 0.0, kernel
    )


def _fitted(curve: CollectiveCurve, work: wk.CommWork, topo: Topology) -> tuple[FloatArray, FloatArray]:
    """``(time, latency)`` of one in-domain call on a fitted curve over the scale-up link."""
    return collective_timing(
        curve.efficiency, work.wire_bytes, topo.scale_up_bytes_per_s, topo.scale_up_latency_s, work.ranks
    )


def _choose(
    primary: _Leg, alternatives: list[_Leg], fastest: bool
) -> tuple[FloatArray, FloatArray, str, _Leg]:
    """Per point, ``primary`` or an alternative where it is usable (and, with ``fastest``,
    faster): ``(time, latency, label, the leg most points ran on)``."""
    time, latency, labels, main = primary.time, primary.latency, [primary.label], primary
    for alt in alternatives:
        take = alt.usable & (alt.time < time) if fastest else alt.usable
        if type(take) is not np.ndarray:  # one point: a branch, no np.where on scalars
            if take:
                time, latency, labels, main = alt.time, alt.latency, [alt.label], alt
            continue
        if take.any():
            time, latency = np.where(take, alt.time, time), np.where(take, alt.latency, latency)
            labels = [*labels, alt.label] if not take.all() else [alt.label]
            main = alt if take.mean() >= 0.5 else main
    return time, latency, "/".join(labels), main


def _kernel(table: EfficiencyTable, collective: str, label: str, leg: _Leg, group: Group) -> Kernel:
    """The kernel a collective ran on, with how it was extrapolated (cached per table)."""
    k, r = _largest(group.chips_per_domain), _largest(group.domains)
    key = (collective, label, leg.label, k, r)
    cache: dict[tuple[str, str, str, float, float], Kernel] = table.__dict__.setdefault(
        "_collective_kernels", {}
    )
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _describe(table, collective, label, leg.curve, k, r)
    return hit


def _largest(x: FloatArray) -> float:
    return float(x.max(initial=0.0)) if type(x) is np.ndarray else float(x)


def _describe(
    table: EfficiencyTable, collective: str, label: str, curve: CollectiveCurve | None, k: float, r: float
) -> Kernel:
    chip = table.chip or "this chip"
    if curve is None:
        why = "" if table.is_pure else f"no fitted {collective} on {chip}: link model"
        return Kernel(LINK_MODEL, "", collective, table.chip, table.transferred, why)
    notes = []
    if k > curve.max_ranks:
        how = (
            "the fitted hop latency and link fraction"
            if curve.efficiency.hop_latency_s
            else "the fitted latency and link fraction (one group size measured, no hop term)"
        )
        notes.append(f"fitted on up to {curve.max_ranks:g} GPUs; {k:g} ranks extrapolated with {how}")
    if r > 1:
        notes.append(
            f"spans {r:g} scale-up domains: the {k:g}-rank in-domain leg on the fitted curve, "
            "the cross-domain leg on the link model (scale-out)"
        )
    why = "; ".join(notes)
    return Kernel(curve.source, label, collective, table.chip, table.transferred, why, curve.band)


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
        kernel = _describe(table, "all_reduce", "", None, 0.0, 0.0)
        return collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s)
    k, r = group.chips_per_domain, group.domains
    outer = 2.0 * coll.all_gather_s(s / k, r, topo.scale_out_bytes_per_s, topo.scale_out_latency_s)
    outer_latency = 2.0 * maximum(r - 1.0, 0.0) * topo.scale_out_latency_s
    if nccl is not None:
        t, a = _fitted(nccl, wk.all_reduce(s, k), topo)
        primary = _Leg(t, a, True, "nccl", nccl)
    else:
        t = coll.all_reduce_s(s, k, topo.scale_up_bytes_per_s, topo.scale_up_latency_s)
        primary = _Leg(t, 2.0 * maximum(k - 1.0, 0.0) * topo.scale_up_latency_s, True, LINK_MODEL, None)
    alternatives = []
    if custom is not None:
        t, a = _fitted(custom, wk.one_shot_all_reduce(s, k), topo)
        alternatives.append(_Leg(t, a, s <= custom.max_message_bytes, "custom", custom))
    time, latency, label, leg = _choose(primary, alternatives, fastest=True)
    kernel = _kernel(table, "all_reduce", label, leg, group)
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
        kernel = _describe(table, collective, "", None, 0.0, 0.0)
        return collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s)
    k, r = group.chips_per_domain, group.domains
    work = wk.all_gather(s, k) if collective == "all_gather" else wk.reduce_scatter(s, k)
    t, a = _fitted(curve, work, topo)
    outer = coll.all_gather_s(s / k, r, topo.scale_out_bytes_per_s, topo.scale_out_latency_s)
    outer_latency = maximum(r - 1.0, 0.0) * topo.scale_out_latency_s
    on = group.size > 1
    kernel = _kernel(table, collective, "nccl", _Leg(t, a, True, "nccl", curve), group)
    return collective_operator(
        name, (t + outer) * on * c, (a + outer_latency) * on * c, kernel, topo.scale_up_bytes_per_s
    )


def expert_operators(
    group: Group,
    tokens_per_chip: ArrayLike,
    destination_ranks: ArrayLike,
    experts_per_token: float,
    hidden: float,
    calls: ArrayLike,
    table: EfficiencyTable,
    activation_bytes: ArrayLike = DEFAULT_ACTIVATION_BYTES,
    names: tuple[str, str] = ("ep_dispatch", "ep_combine"),
    value_bytes: tuple[ArrayLike, ArrayLike] | None = None,
    destination_domains: ArrayLike | None = None,
) -> tuple[Operator, Operator]:
    """``calls`` expert dispatches and as many combines of ``tokens_per_chip`` tokens of
    ``hidden`` values over the EP ``group``: two operators (``names``).

    Link model: :func:`expert_all_to_all_s` each, at ``value_bytes`` (dispatch, combine;
    default ``activation_bytes`` both), one copy per destination rank (the pair is
    :func:`ep_all_to_all_s`; with ``destination_domains``, node-limited routing's crossing
    leg). Fitted, by what engines run: DeepEP low-latency (``<phase>:deepep_ll``: ``k`` copies
    a token) where a rank's message lies within its table's; else DeepEP normal (``D`` copies);
    else NCCL's all-to-all (``D`` copies); DeepEP at ``value_bytes``, by default its own
    payload (:data:`DEEPEP_VALUE_BYTES`: fp8 out, bf16 back), NCCL at ``activation_bytes``.
    Each runs on the ``n/R`` ranks of a domain with ``M/R`` of the rank's ``M`` bytes
    (:func:`rackmath.core.work.expert_exchange`), plus the link model's crossing leg
    ``(R-1)/R M / B_out + a_out`` (:func:`rackmath.core.collectives.hierarchical_all_to_all_s`);
    with ``destination_domains`` ``N`` (DeepEP's node-deduplicated path) the whole ``M`` is
    forwarded inside the domain and ``N (R-1)/R`` copies a token cross
    (:func:`expert_all_to_all_s`).
    """
    topo, c = group.topology, num(calls)
    tokens, d = num(tokens_per_chip), num(destination_ranks)
    curves = _expert_curves(table)
    phases = ("dispatch", "combine")
    if not any(c for phase in curves for c in phase):
        payload = value_bytes or (activation_bytes, activation_bytes)
        out = []
        for name, phase, b in zip(names, phases, payload, strict=True):
            time = expert_all_to_all_s(group, tokens, d, hidden, b, destination_domains)  # type: ignore[arg-type]
            latency = expert_all_to_all_s(group, 0.0 * tokens, d, hidden, b, destination_domains)  # type: ignore[arg-type]
            kernel = _describe(table, phase, "", None, 0.0, 0.0)
            out.append(collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s))
        return out[0], out[1]
    n, r = group.size, maximum(group.domains, 1.0)
    limited = destination_domains is not None
    inside = group.chips_per_domain if limited else n / r
    one_domain = type(r) is not np.ndarray and r == 1.0
    # the in-domain share: M/R over n/R ranks (node-limited: every copy, forwarded in the domain)
    share = tokens if (one_domain or limited) else tokens / r
    across = 0.0 if one_domain else coll.cross_domain_fraction(r) / topo.scale_out_bytes_per_s
    across_latency = 0.0 if one_domain else topo.scale_out_latency_s * (r > 1)
    crossing_copies = num(destination_domains) if destination_domains is not None else 0.0
    on = True if type(n) is not np.ndarray and n > 1 else n > 1

    def leg(curve: CollectiveCurve | None, label: str, copies: ArrayLike, b: ArrayLike) -> _Leg:
        w = wk.expert_exchange(share, copies, hidden, b, inside)
        if curve is None:
            t = coll.all_to_all_s(w.message_bytes, inside, topo.scale_up_bytes_per_s, topo.scale_up_latency_s)
            a = num(topo.scale_up_latency_s * (inside > 1))
        else:
            t, a = _fitted(curve, w, topo)
        m = w.message_bytes if (one_domain or limited) else w.message_bytes * r  # the rank's whole message
        usable = True if curve is None or label != "deepep_ll" else m <= curve.max_message_bytes
        if one_domain:
            return _Leg(t, a, usable, label, curve)
        crossing = m if not limited else tokens * crossing_copies * hidden * num(b)
        return _Leg(t + across * crossing + across_latency, a + across_latency, usable, label, curve)

    out = []
    for i, (name, phase, (ll, normal, nccl)) in enumerate(zip(names, phases, curves, strict=True)):
        deepep = DEEPEP_VALUE_BYTES[phase] if value_bytes is None else value_bytes[i]
        plain = activation_bytes if value_bytes is None else value_bytes[i]
        low = leg(ll, "deepep_ll", experts_per_token, deepep) if ll is not None else None
        if low is not None and type(low.usable) is not np.ndarray and low.usable:  # one decode-sized point
            time, latency, label, chosen = low.time, low.latency, low.label, low
        else:
            if normal is not None:
                primary = leg(normal, "deepep_normal", d, deepep)
            elif nccl is not None:
                primary = leg(nccl, "nccl", d, plain)
            else:
                primary = leg(None, LINK_MODEL, d, plain)
            time, latency, label, chosen = _choose(primary, [low] if low is not None else [], fastest=False)
        if on is not True:
            time, latency = time * on, latency * on
        kernel = _kernel(table, phase, label, chosen, group)
        out.append(collective_operator(name, time * c, latency * c, kernel, topo.scale_up_bytes_per_s))
    return out[0], out[1]


def _expert_curves(table: EfficiencyTable) -> tuple[tuple[CollectiveCurve | None, ...], ...]:
    """Per phase (dispatch, combine): its DeepEP low-latency, DeepEP normal and NCCL all-to-all
    curves (looked up once per table)."""
    hit: tuple[tuple[CollectiveCurve | None, ...], ...] | None = table.__dict__.get("_expert_curves")
    if hit is None:
        hit = tuple(
            tuple(table.collective(n) for n in (f"{p}:deepep_ll", f"{p}:deepep_normal", "all_to_all:nccl"))
            for p in ("dispatch", "combine")
        )
        object.__setattr__(table, "_expert_curves", hit)
    return hit


def send_operator(
    name: str, time_s: ArrayLike, latency_s: ArrayLike, topo: Topology, table: EfficiencyTable
) -> Operator:
    """Pipeline sends of a step (``time_s`` all together, :func:`pipeline_hop_s`) as an operator:
    the link model in every mode (no send/receive table is fitted)."""
    why = "" if table.is_pure else "no send/receive table: link model"
    kernel = Kernel(LINK_MODEL, "", "send", table.chip, table.transferred, why)
    return collective_operator(name, time_s, latency_s, kernel, topo.scale_up_bytes_per_s)
