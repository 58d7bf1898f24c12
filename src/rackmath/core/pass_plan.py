"""What a pass of a plan's operators needs that no load changes: :func:`pass_plan`.

:func:`rackmath.core.operators.pass_operators` runs every point of a deployment under one plan;
the plan's dimensions as NumPy values, the stage's share of the layers, the heads on a chip and
each operator's static terms (the parameters one chip holds, its kernel shape's columns and
depth, its launches) and curve (:meth:`rackmath.core.chip_rates.ChipRates.curve`) are the same
for all of them. They are computed here once per plan, by the expressions the pass used to
evaluate at each point (the same numbers, to the bit), and kept on the deployment's
:class:`~rackmath.core.chip_rates.ChipRates`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates, CurveChoice
from rackmath.core.efficiency import ShapeTerms, shape_terms
from rackmath.core.numeric import maximum, minimum, num
from rackmath.core.operator_model import OperatorModel, expert_shards, expert_slot_factor
from rackmath.specs.efficiency import OpClass

FloatArray = NDArray[np.float64]

#: The kernel format of the elementwise passes (norms, embedding lookup).
ELEMENTWISE_FORMATS = ("bfloat16",)


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """A dense projection of a plan's pass, all but its rows: its work's rows-free terms
    (:func:`rackmath.core.work.gemm_shape`: the parameters one chip holds over the stage
    (``P / (pp split)``), the kernel shape's columns and depth, the values read and written per
    token and call, its launches) and the curve it runs on."""

    name: str
    work: wk.GemmShape
    formats: tuple[str, ...]
    curve: CurveChoice
    #: the curve's terms at the work's columns and depth (:func:`rackmath.core.efficiency.shape_terms`)
    terms: ShapeTerms


@dataclass(frozen=True, slots=True)
class MoePlan:
    """The router, shared and routed experts of a plan's pass, all but what the load sets."""

    moe_layers: FloatArray
    shards: FloatArray
    groups: FloatArray
    slots: FloatArray
    skew: FloatArray
    expert_tp: FloatArray
    #: the grouped GEMM's load-free terms (:func:`rackmath.core.work.grouped_shape`)
    work: wk.GroupedShape
    formats: tuple[str, ...]
    kind: str
    curve: CurveChoice
    #: the routed experts' curve terms at their columns (the expert's width) and depth (hidden)
    terms: ShapeTerms
    router: GemmPlan
    shared: GemmPlan | None


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What a pass needs of a plan that no load changes: the plan's dimensions as NumPy
    values, the stage's share of the layers, the heads and KV heads on a chip, and each
    operator's static terms and curve."""

    tp: FloatArray
    pp: FloatArray
    dp: FloatArray
    ep: FloatArray
    cp: FloatArray
    on_cp: bool
    cp_queries_everywhere: bool
    layers: FloatArray
    stage: FloatArray
    hidden: float
    kv_split: FloatArray
    heads: FloatArray
    kv_local: FloatArray
    attention_formats: tuple[str, ...]
    decode_curve: CurveChoice
    decode_kind: str
    prefill_curve: CurveChoice
    elementwise_curve: CurveChoice
    embedding_bytes: float
    embedding_calls: FloatArray
    norms_weight_bytes: FloatArray
    qkv: GemmPlan
    out: GemmPlan
    dense: GemmPlan | None
    lm_head: GemmPlan
    moe: MoePlan | None


#: Plans kept per :class:`ChipRates` (a search over many plans of one deployment keeps the last ones).
_PLANS_KEPT = 64


def pass_plan(
    m: OperatorModel,
    rates: ChipRates,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
    skew: ArrayLike = 1.0,
    cp: ArrayLike = 1.0,
    cp_queries_everywhere: bool = False,
) -> PassPlan:
    """The load-free part of :func:`rackmath.core.operators.pass_operators` for ``m`` on
    ``rates`` under one plan, computed once per plan of single values and kept on ``rates`` (a
    deployment's points all run the same plan); a plan of arrays (a search) is computed each
    call."""
    key = (tp, pp, dp, ep, moe_tp, redundant_experts, skew, cp, cp_queries_everywhere)
    if np.ndarray in map(type, key):  # a plan of arrays
        return _pass_plan(m, rates, *key)
    cache: dict[tuple[object, ...], tuple[OperatorModel, PassPlan]] = rates.__dict__.setdefault(
        "_pass_plans", {}
    )
    hit = cache.get((id(m), *key))
    if hit is not None and hit[0] is m:
        return hit[1]
    plan = _pass_plan(m, rates, *key)
    if len(cache) >= _PLANS_KEPT:
        cache.clear()
    cache[(id(m), *key)] = (m, plan)
    return plan


def _pass_plan(
    m: OperatorModel,
    rates: ChipRates,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    moe_tp: ArrayLike,
    redundant_experts: ArrayLike,
    skew: ArrayLike,
    cp: ArrayLike,
    cp_queries_everywhere: bool,
) -> PassPlan:
    t, p, d, e = (num(x) for x in (tp, pp, dp, ep))
    c = num(cp)
    on_cp = bool((c > 1.0).any()) if type(c) is np.ndarray else bool(c > 1.0)
    layers = m.num_layers / p
    h = float(m.hidden)
    P = m.params
    qkv_w, out_w = m.qkv_out_widths
    vocab = P["lm_head"] / h  # the LM head's output width

    def gemm(
        name: str, n_layers: FloatArray, in_values: ArrayLike, out_values: ArrayLike, split: FloatArray,
        cols: ArrayLike, depth: ArrayLike,
    ) -> GemmPlan:  # fmt: skip
        """A dense projection over ``n_layers`` layers: ``in_values`` read and ``out_values``
        written per token per layer (per chip)."""
        formats, activation_bytes = rates.gemm(m.weight_precision[name])
        return _gemm_plan(
            rates, name, P[name] / (p * split), cols, depth, m.bytes_per_param[name], activation_bytes,
            in_values, out_values, n_layers, formats,
        )  # fmt: skip

    kv_split = minimum(t, float(m.kv_heads))
    att_formats = rates.attention_formats
    # the model's group, not a rank's: one kernel for every plan of a search (a GQA model whose
    # TP gives each rank one query head on one KV head stays on the grouped curve)
    decode_kind = wk.decode_family(m.attention_kind, m.heads / m.kv_heads)
    dense = None
    if m.num_dense_layers:
        di = m.mlp_widths[0] / t  # the dense MLP's intermediate width on one chip
        dense = gemm("dense_mlp", m.num_dense_layers / p, h + di, (m.dense_matrices - 1) * di + h, t, di, h)
    return PassPlan(
        tp=t,
        pp=p,
        dp=d,
        ep=e,
        cp=c,
        on_cp=on_cp,
        cp_queries_everywhere=cp_queries_everywhere,
        layers=layers,
        stage=1.0 / p,  # a stage's share of the layers (the loads' attention work is all layers')
        hidden=h,
        kv_split=kv_split,
        heads=m.heads / t,  # query heads on one chip
        kv_local=float(m.kv_heads) / kv_split,  # KV heads on one chip (replicated once tp exceeds them)
        attention_formats=att_formats,
        decode_curve=rates.curve(OpClass.ATTENTION_DECODE, att_formats, decode_kind),
        decode_kind=decode_kind,
        prefill_curve=rates.curve(
            OpClass.ATTENTION_PREFILL, att_formats, m.attention_kind, float(m.prefill_dims[0])
        ),
        elementwise_curve=rates.curve(OpClass.ELEMENTWISE, ELEMENTWISE_FORMATS),
        embedding_bytes=m.bytes_per_param["embedding"],
        embedding_calls=1.0 / p,
        norms_weight_bytes=m.weight_bytes["norms"] / p,
        qkv=gemm("attention_qkv", layers, h, qkv_w / t, t, qkv_w / t, h),
        out=gemm("attention_out", layers, out_w / t, h, t, h, out_w / t),
        dense=dense,
        lm_head=gemm("lm_head", 1.0 / p, h, vocab / t, t, vocab / t, h),
        moe=_moe_plan(m, rates, gemm, t, p, d * c, e, moe_tp, redundant_experts, skew)
        if m.num_moe_layers
        else None,
    )


def _gemm_plan(
    rates: ChipRates,
    name: str,
    params: FloatArray,
    cols: ArrayLike,
    depth: ArrayLike,
    weight_bytes_per_param: float,
    activation_bytes: float,
    in_values: ArrayLike,
    out_values: ArrayLike,
    calls: FloatArray,
    formats: tuple[str, ...],
) -> GemmPlan:
    curve = rates.curve(OpClass.GEMM, formats)
    work = wk.gemm_shape(
        params, cols, depth, weight_bytes_per_param=weight_bytes_per_param, activation_bytes=activation_bytes,
        in_values=in_values, out_values=out_values, calls=calls,
    )  # fmt: skip
    return GemmPlan(name, work, formats, curve, shape_terms(curve.efficiency, cols, depth))


def _moe_plan(
    m: OperatorModel,
    rates: ChipRates,
    gemm: Callable[..., GemmPlan],
    t: FloatArray,
    p: FloatArray,
    d: FloatArray,
    e: FloatArray,
    moe_tp: ArrayLike,
    redundant_experts: ArrayLike,
    skew: ArrayLike,
) -> MoePlan:
    """The load-free terms of the router, shared experts and routed experts (``d``: the stage's
    token-splitting ranks, DP x CP)."""
    h = float(m.hidden)
    moe_layers = m.num_moe_layers / p
    P = m.params
    shards = expert_shards(t, e, moe_tp)
    _, shared_i, expert_i = m.mlp_widths
    expert_tp = maximum(shards / minimum(e, float(m.experts)), 1.0)  # ways one expert is split
    expert_precision = m.weight_precision["routed_experts"]
    formats, activation_bytes = rates.gemm(expert_precision)
    kind = "gated" if m.expert_matrices == 3.0 else "nongated"
    router_formats, router_activation_bytes = rates.gemm(m.weight_precision["router"])
    router = _gemm_plan(
        rates, "router", P["router"] / p, float(m.experts), h, m.bytes_per_param["router"],
        router_activation_bytes, h, float(m.experts), moe_layers, router_formats,
    )  # fmt: skip
    shared = (
        gemm(
            "shared_experts",
            moe_layers,
            h + shared_i / t,
            (m.expert_matrices - 1) * shared_i / t + h,
            t,
            shared_i / t,
            h,
        )
        if P["shared_experts"]
        else None
    )
    curve = rates.curve(OpClass.MOE, formats, kind)
    expert_width = expert_i / expert_tp
    return MoePlan(
        moe_layers=moe_layers,
        shards=shards,
        groups=d * t / shards,
        slots=expert_slot_factor(e, m.experts, redundant_experts),
        skew=num(skew),
        expert_tp=expert_tp,
        work=wk.grouped_shape(
            h,
            expert_width,
            matrices=m.expert_matrices,
            weight_bytes_per_param=expert_precision.bytes_per_element,
            activation_bytes=activation_bytes,
            ep=e,
            calls=moe_layers,
            expert_params=P["routed_experts"] / m.num_moe_layers / expert_tp,  # biases included
        ),
        formats=formats,
        kind=kind,
        curve=curve,
        # the grouped GEMM's columns and depth (rackmath.core.work.grouped_gemm)
        terms=shape_terms(curve.efficiency, num(expert_width), num(h)),
        router=router,
        shared=shared,
    )
