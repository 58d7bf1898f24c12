"""The legs of a step's collectives, and the expert exchange, the collective with the most.

A leg is one implementation's time for a collective (:class:`Leg`): a fitted curve of the
rates' efficiency table (:func:`fitted`) or the link model. An operator runs on the leg it may
use (:func:`choose`), reports the kernel of that leg (:func:`kernel_of`, with how the curve was
extrapolated to its group) and becomes an operator of class ``collective``
(:func:`collective_operator`). The expert dispatch and combine (:func:`expert_operators`) choose
among DeepEP low-latency, DeepEP normal, NCCL's all-to-all and the link model; their plan-only
terms are placed once per EP group and table (:class:`_Route`). Which implementation runs
which collective, and why: :mod:`rackmath.core.collective_ops`, whose operators these are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import collectives as coll
from rackmath.core import work as wk
from rackmath.core.efficiency import collective_timing
from rackmath.core.network import DEFAULT_ACTIVATION_BYTES, Group, Topology, expert_all_to_all_s
from rackmath.core.numeric import maximum, num
from rackmath.core.operators import Operator
from rackmath.specs.efficiency import CollectiveCurve, EfficiencyTable, Kernel, OpClass

FloatArray = NDArray[np.float64]


LINK_MODEL = "link model"
#: Bytes a value DeepEP sends: an fp8 dispatch (plus its scales) and a bf16 combine
#: (DeepEP's defaults in SGLang and TensorRT-LLM; its tables time these payloads).
DEEPEP_VALUE_BYTES: dict[str, float] = {"dispatch": wk.FP8_DISPATCH_BYTES, "combine": 2.0}
_ZERO = cast(FloatArray, 0.0)  # a term a collective lacks; broadcasts anywhere


class Leg(NamedTuple):
    """One implementation's time per call (and fixed part) for a collective, the points it may
    run at (``usable``: True, or a bool per point), its label and curve (None: link model)."""

    time: FloatArray
    latency: FloatArray
    usable: Any
    label: str
    curve: CollectiveCurve | None


def collective_operator(
    name: str, time_s: ArrayLike, latency_s: ArrayLike, kernel: Kernel, link_bytes_per_s: ArrayLike
) -> Operator:
    """A collective as an operator of the step: ``time_s`` and its fixed part ``latency_s``
    (seconds, every call together), no FLOPs and no HBM bytes, and the kernel it ran on."""
    z = _ZERO
    bandwidth = num(link_bytes_per_s)
    return wk.record(Operator, (
        name, OpClass.COLLECTIVE, z, z, z, z, z, z, z, num(time_s), bandwidth, num(latency_s), 0.0, kernel,
        z, None, _NO_CURVE,
    ))  # fmt: skip


_NO_CURVE: tuple[tuple[str, ...], str] = ((), "")  # a collective's Operator.curve_key


def fitted(curve: CollectiveCurve, work: wk.CommWork, topo: Topology) -> tuple[FloatArray, FloatArray]:
    """``(time, latency)`` of one in-domain call on a fitted curve over the scale-up link."""
    return collective_timing(
        curve.efficiency,
        work.wire_bytes,
        topo.scale_up_bytes_per_s,
        topo.scale_up_latency_s,
        work.ranks,
        work.sm_tokens,
    )


def choose(primary: Leg, alternatives: list[Leg], fastest: bool) -> tuple[FloatArray, FloatArray, str, Leg]:
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


def kernel_of(
    table: EfficiencyTable, collective: str, label: str, leg: Leg, extent: tuple[float, float]
) -> Kernel:
    """The kernel a collective ran on, with how it was extrapolated (cached per table), on a
    group of :func:`group_extent` ``(k, R)``."""
    k, r = extent
    key = (collective, label, leg.label, k, r)
    cache: dict[tuple[str, str, str, float, float], Kernel] | None = table.__dict__.get("_collective_kernels")
    if cache is None:  # not setdefault: that builds an empty dict every call
        cache = table.__dict__["_collective_kernels"] = {}
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = describe(table, collective, label, leg.curve, k, r)
    return hit


def group_extent(group: Group) -> tuple[float, float]:
    """``(k, R)``: the group's most ranks in a domain and most domains over its points."""
    return _largest(group.chips_per_domain), _largest(group.domains)


def _largest(x: FloatArray) -> float:
    return float(x.max(initial=0.0)) if type(x) is np.ndarray else float(x)


def describe(
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
    chip, transferred = table.origin_of(curve.chip)
    return Kernel(curve.source, label, collective, chip, transferred, why, curve.band)


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
    experts: ArrayLike | None = None,
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
    (:func:`expert_all_to_all_s`). With ``experts`` (the model's routed experts ``E``), DeepEP
    low-latency also takes the turns of its busiest SM, which walks every token of the rank
    whatever domain its copies go to: ``ceil(tokens_per_chip / E)`` tokens
    (:func:`rackmath.core.work.sm_tokens`) at its curve's ``sm_token_s``.
    """
    c = num(calls)
    tokens, d = num(tokens_per_chip), num(destination_ranks)
    limited = destination_domains is not None
    route = _route(table, group, limited)
    if not route.fitted:
        payload = value_bytes or (activation_bytes, activation_bytes)
        out = []
        for name, phase, b in zip(names, _PHASES, payload, strict=True):
            time = expert_all_to_all_s(group, tokens, d, hidden, b, destination_domains)  # type: ignore[arg-type]
            latency = expert_all_to_all_s(group, 0.0 * tokens, d, hidden, b, destination_domains)  # type: ignore[arg-type]
            kernel = describe(table, phase, "", None, 0.0, 0.0)
            out.append(collective_operator(name, time * c, latency * c, kernel, route.bandwidth))
        return out[0], out[1]
    # the in-domain share: M/R over n/R ranks (node-limited: every copy, forwarded in the domain)
    local = tokens if (route.one_domain or limited) else tokens / route.r
    crossing = num(destination_domains) if destination_domains is not None else _ZERO
    # one SM per expert (core.work.sm_tokens), walking the rank's every token, not the share M/R
    turns = wk.sm_tokens(tokens, experts) if experts is not None and route.low_latency else _ZERO
    out = []
    for i, (name, phase, (ll, normal, nccl)) in enumerate(zip(names, _PHASES, route.curves, strict=True)):
        deepep = DEEPEP_VALUE_BYTES[phase] if value_bytes is None else value_bytes[i]
        low = None
        if ll is not None:
            low = _exchange(
                route, ll, "deepep_ll", tokens, local, experts_per_token, hidden, deepep, turns, crossing
            )
        if low is not None and type(low.usable) is not np.ndarray and low.usable:  # one decode-sized point
            time, latency, label, chosen = low.time, low.latency, low.label, low
        else:
            plain = activation_bytes if value_bytes is None else value_bytes[i]
            if normal is not None:
                primary = _exchange(
                    route, normal, "deepep_normal", tokens, local, d, hidden, deepep, _ZERO, crossing
                )
            elif nccl is not None:
                primary = _exchange(route, nccl, "nccl", tokens, local, d, hidden, plain, _ZERO, crossing)
            else:
                primary = _exchange(route, None, LINK_MODEL, tokens, local, d, hidden, plain, _ZERO, crossing)
            time, latency, label, chosen = choose(primary, [low] if low is not None else [], fastest=False)
        if route.on is not True:
            time, latency = time * route.on, latency * route.on
        kernel = kernel_of(table, phase, label, chosen, route.extent)
        out.append(collective_operator(name, time * c, latency * c, kernel, route.bandwidth))
    return out[0], out[1]


_PHASES = ("dispatch", "combine")


@dataclass(frozen=True, slots=True)
class _Route:
    """An EP group's expert exchanges on one table, what does not vary with the load: built
    once per group, table and routing (:func:`_route`, cached on the group)."""

    #: per phase (dispatch, combine): DeepEP low-latency, DeepEP normal and NCCL's all-to-all
    curves: tuple[tuple[CollectiveCurve | None, ...], ...]
    topology: Topology
    limited: bool  # node-limited routing (DeepEP's node-deduplicated path)
    fitted: bool  # any of them (else the link model times both phases)
    low_latency: bool  # a DeepEP low-latency curve among them
    inside: FloatArray  # the ranks one exchange runs over in a domain: n/R (node-limited: k)
    share: FloatArray  # wk.wire_share(inside): what of a rank's in-domain bytes leaves it
    r: FloatArray  # max(R, 1) domains
    one_domain: bool  # a single value R = 1 (no crossing leg)
    across: FloatArray  # the crossing leg's seconds a byte, (R-1)/R / B_out (0 in one domain)
    across_latency: FloatArray  # a_out where R > 1
    link_latency: FloatArray  # the link model's in-domain fixed part, a_up where n/R > 1
    on: Any  # True, or per point n > 1
    extent: tuple[float, float]  # group_extent(group)
    bandwidth: FloatArray  # B_up, the operators' link


def _route(table: EfficiencyTable, group: Group, limited: bool) -> _Route:
    """The :class:`_Route` of ``group`` on ``table`` (``limited``: node-limited routing, where
    an exchange runs over a domain's ``k`` ranks), cached on the group per table."""
    routes: dict[tuple[int, bool], tuple[EfficiencyTable, _Route]] | None = group.__dict__.get("_routes")
    if routes is None:
        routes = group.__dict__["_routes"] = {}
    hit = routes.get((id(table), limited))
    if hit is not None and hit[0] is table:
        return hit[1]
    topo, curves = group.topology, _expert_curves(table)
    n, r = group.size, maximum(group.domains, 1.0)
    inside = group.chips_per_domain if limited else n / r
    one_domain = type(r) is not np.ndarray and r == 1.0
    route = _Route(
        curves,
        topo,
        limited,
        any(c for phase in curves for c in phase),
        any(phase[0] is not None for phase in curves),
        inside,
        wk.wire_share(inside),
        r,
        one_domain,
        _ZERO if one_domain else coll.cross_domain_fraction(r) / topo.scale_out_bytes_per_s,
        _ZERO if one_domain else num(topo.scale_out_latency_s * (r > 1)),
        num(topo.scale_up_latency_s * (inside > 1)),
        True if type(n) is not np.ndarray and n > 1 else n > 1,
        group_extent(group),
        num(topo.scale_up_bytes_per_s),
    )
    routes[(id(table), limited)] = (table, route)  # the table kept: its id is not reused meanwhile
    return route


def _exchange(
    route: _Route,
    curve: CollectiveCurve | None,
    label: str,
    tokens: FloatArray,
    local: FloatArray,
    copies: ArrayLike,
    hidden: float,
    b: ArrayLike,
    turns: FloatArray,
    crossing: FloatArray,
) -> Leg:
    """One implementation of an expert exchange (:func:`expert_operators`): ``local`` of the
    rank's ``tokens`` in its domain, ``copies`` each of ``hidden`` values of ``b`` bytes, its
    busiest SM's ``turns``, and (node-limited) ``crossing`` copies a token across domains."""
    topo, limited = route.topology, route.limited
    w = wk.expert_exchange(local, copies, hidden, b, route.inside, sm_tokens=turns, share=route.share)
    if curve is None:
        t = coll.all_to_all_s(
            w.message_bytes, route.inside, topo.scale_up_bytes_per_s, topo.scale_up_latency_s
        )
        a = route.link_latency
    else:
        t, a = fitted(curve, w, topo)
    # the rank's whole message
    m = w.message_bytes if (route.one_domain or limited) else w.message_bytes * route.r
    usable = True if curve is None or label != "deepep_ll" else m <= curve.max_message_bytes
    if route.one_domain:
        return Leg(t, a, usable, label, curve)
    crossed = m if not limited else tokens * crossing * hidden * num(b)
    return Leg(
        t + route.across * crossed + route.across_latency, a + route.across_latency, usable, label, curve
    )


def _expert_curves(table: EfficiencyTable) -> tuple[tuple[CollectiveCurve | None, ...], ...]:
    """Per phase (dispatch, combine): its DeepEP low-latency, DeepEP normal and NCCL all-to-all
    curves (looked up once per table)."""
    hit: tuple[tuple[CollectiveCurve | None, ...], ...] | None = table.__dict__.get("_expert_curves")
    if hit is None:
        hit = tuple(
            tuple(table.collective(n) for n in (f"{p}:deepep_ll", f"{p}:deepep_normal", "all_to_all:nccl"))
            for p in _PHASES
        )
        object.__setattr__(table, "_expert_curves", hit)
    return hit
