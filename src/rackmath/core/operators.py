"""A step as a list of operators, each with its own roofline: where the time goes.

One chip of a stage runs, per micro-batch pass, these operators over the stage's layers
(tensor classes: weights ``W``, activations ``A``, KV read ``K_r``, KV written ``K_w``):

=================  ===================  ====================================================
operator           class                work per chip and pass (``t`` tokens of a DP replica)
=================  ===================  ====================================================
embedding          elementwise          lookup: ``A = t h b_emb`` (rows read), no FLOPs
attention_qkv      gemm                 ``2 t P_qkv / tp`` FLOPs, ``W = P_qkv b / tp``
attention          attention_decode     ``t_dec f_dec`` FLOPs / tp, ``K_r``, ``K_w`` / min(tp, H_kv)
                   (attention_prefill   in a prompt-only pass: ``s_pre f_pre``, the prompts' K)
attention_prefill  attention_prefill    a mixed step's prompt chunk, beside the decode rows
attention_out      gemm                 ``2 t P_out / tp``, ``W = P_out b / tp``
router             gemm                 ``2 t h E`` (replicated), ``W = h E b``
dense_mlp          gemm                 ``2 t P_mlp / tp`` over the dense layers
shared_experts     gemm                 ``2 t P_shared / tp`` over the MoE layers
routed_experts     moe                  ``2 T k P_e / C`` with ``T`` the stage's tokens,
                                        ``W = P_e b E(1-(1-k/E)^n) / max(ep, tp)``
norms              elementwise          ``W`` = norm scales; ``A = 2 x 2 t h`` per layer
lm_head            gemm                 ``2 t h V / tp``, ``W = h V b / tp``
=================  ===================  ====================================================

Each operator's time is its own roofline, with the chip's efficiency for its class
(:mod:`rackmath.core.efficiency`; the pure roofline by default)::

    compute_s = flops / (peak(precision) * compute_frac(rows))
    memory_s  = (W + A + K_r + K_w) / (BW * bandwidth_frac(rows))
    time_s    = max(compute_s, memory_s) + calls * floor_s

and the pass is the **sum** of the operators' times. The lecture's blackboard form,
``max(sum compute_s, sum memory_s)``, is the lower bound (every operator overlapping every
other); the sum is at most twice it (each term ``max(c, m) <= c + m``). GEMM activation
traffic counts the input rows and the output rows (``t (K + N) a``): the matmul reads its
input and writes its output once (tiles stay on chip).

Assumptions: uniform expert routing by default; a plan's ``skew`` (busiest EP rank's load
over the mean) scales the routed-expert GEMM of the rank the step waits for; the
activation function and residual adds are fused into the GEMM epilogues; the LM head runs
on every token of the pass (as :func:`rackmath.core.architecture.prefill_flops_per_sequence`
counts it). Sources: Kaplan et al. 2020 and PaLM appendix B (2 FLOPs per MAC per weight);
Williams, Waterman & Patterson 2009 (the roofline per kernel); Korthikanti et al. 2022
(activations per layer); DeepSeek-V3 report §3.4 (attention-DP beside EP).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import architecture as arch
from rackmath.core import attention as attn
from rackmath.core import efficiency as eff
from rackmath.core.loads import _NONE, StepLoad
from rackmath.core.loads import decode_load as decode_load  # re-exported: callers build loads here
from rackmath.core.loads import mixed_load as mixed_load
from rackmath.core.loads import prefill_attention_flops_per_sequence as prefill_attention_flops_per_sequence
from rackmath.core.loads import prefill_load as prefill_load
from rackmath.core.numeric import maximum, minimum, num
from rackmath.core.roofline import expected_distinct_experts
from rackmath.specs.model import WEIGHT_CLASSES, MlpKind, ModelSpec

FloatArray = NDArray[np.float64]

#: Bytes per activation value in the GEMMs' inputs and outputs and in the norms: bf16.
ACTIVATION_BYTES = 2.0

#: Activation values a norm moves per token: it reads ``h`` and writes ``h``; two norms per layer.
NORM_VALUES_PER_HIDDEN_PER_LAYER = 4.0


@dataclass(frozen=True)
class OperatorModel:
    """A model's operators as numbers: parameters (for FLOPs) and bytes (for traffic) by
    weight class, all layers, plus the shapes sharding needs. Built once by :func:`operator_model`."""

    hidden: int
    num_layers: int
    num_moe_layers: int
    num_dense_layers: int
    kv_heads: int
    experts: int
    experts_per_token: int
    params: Mapping[str, float]  # per class, all layers (routed_experts: one expert, all MoE layers)
    weight_bytes: Mapping[str, float]  # same keys, bytes
    qkv_out_widths: tuple[float, float]  # output widths of the QKV and output projections
    mlp_widths: tuple[float, float, float]  # intermediate width of dense MLP, shared, one expert
    #: query heads and the Q K^T head dimension (the attention kernels' shape); 0 = unknown
    attention_heads: tuple[float, float] = (0.0, 0.0)
    #: decode attention reads one latent shared by every query head (MLA absorbed): a dense kernel
    latent_decode: bool = False
    #: an expert's and a dense MLP's weight matrices: 3 gated (gate, up, down), 2 non-gated (up, down)
    expert_matrices: float = 3.0
    dense_matrices: float = 3.0


def operator_model(model: ModelSpec, weight_bytes_per_param: Mapping[str, float] | float) -> OperatorModel:
    """Parameters and bytes by weight class (:data:`WEIGHT_CLASSES`).

    ``weight_bytes_per_param`` is one number for every class or a mapping per class
    (gpt-oss keeps attention, router, embedding and head in bf16 beside mxfp4 experts).
    """
    p = arch.param_counts(model)
    if isinstance(weight_bytes_per_param, Mapping):
        per = {c: float(weight_bytes_per_param[c]) for c in WEIGHT_CLASSES}
    else:
        per = dict.fromkeys(WEIGHT_CLASSES, float(weight_bytes_per_param))
    a = model.attention
    out_params = arch.attention_out_params(model)  # per layer kind (hybrid and NAS models)
    params = {
        "embedding": float(p.embedding),
        "lm_head": float(p.lm_head or p.embedding),
        "attention_qkv": float(p.attention - out_params),
        "attention_out": float(out_params),
        "dense_mlp": float(p.dense_mlp),
        "routed_experts": float(p.per_expert * model.num_moe_layers),
        "shared_experts": float(p.shared_experts),
        "router": float(p.router),
        "norms": float(p.norms),
    }
    klass = {"attention_qkv": "attention", "attention_out": "attention"}
    weight_bytes = {name: count * per[klass.get(name, name)] for name, count in params.items()}
    moe = model.moe if model.is_moe else None
    dense = model.dense_mlp
    q_width = a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim if a.kv_lora_rank else a.head_dim)
    qkv_width = q_width + attn.kv_elements_per_token_per_layer(a)
    return OperatorModel(
        hidden=model.hidden_size,
        num_layers=model.num_layers,
        num_moe_layers=model.num_moe_layers,
        num_dense_layers=model.num_dense_mlp_layers,
        kv_heads=attn.kv_shardable_heads(a),
        experts=moe.num_experts if moe else 1,
        experts_per_token=moe.experts_per_token if moe else 1,
        params=params,
        weight_bytes=weight_bytes,
        qkv_out_widths=(float(qkv_width), float(a.num_heads * a.v_head_dim)),
        mlp_widths=(
            float(dense.intermediate_size if dense else 0),
            float(moe.shared_intermediate_size if moe else 0),
            float(moe.expert_intermediate_size if moe else 0),
        ),
        attention_heads=(float(a.num_heads), float(q_width / a.num_heads)),
        latent_decode=attn.rule(a).latent_decode,
        expert_matrices=3.0 if (moe is None or moe.gated) else 2.0,
        dense_matrices=3.0 if (dense is None or dense.gated) else 2.0,
    )


def expert_shards(tp: ArrayLike, ep: ArrayLike, moe_tp: ArrayLike = 0) -> FloatArray:
    """Ways the routed experts are split: ``moe_tp x ep`` when the plan states the experts'
    own tensor parallelism (``moe_tp > 0``), else ``max(ep, tp)`` (whole experts over ``ep``,
    then expert-TP when ``tp > ep``). The rest of a stage's chips replicate the experts."""
    e, mt, t = num(ep), num(moe_tp), num(tp)
    if mt.ndim == 0:  # one value for every point: one branch
        return mt * e if mt > 0 else maximum(e, t)
    return np.asarray(np.where(mt > 0, mt * e, np.maximum(e, t)), dtype=float)


def expert_slot_factor(ep: ArrayLike, experts: int, redundant_experts: ArrayLike = 0) -> FloatArray:
    """The busiest EP rank's expert slots over the balanced share: ``ceil((E + R)/ep) ep / E``.

    ``R`` redundant slots (EPLB replicates hot experts) and EP degrees that do not divide
    ``E`` leave some ranks with ``ceil((E + R)/ep)`` slots; a rank's weights (held and read)
    scale with its slots. 1 when ``R = 0`` and ``ep | E``; 256 + 32 on EP = 72: 4 x 72/256 = 1.125.
    """
    e = num(ep)
    return np.ceil((experts + num(redundant_experts)) / e) * e / experts


def layer_kinds(model: ModelSpec) -> tuple[bool, ...]:
    """True for each MoE layer (for stage splits)."""
    return tuple(layer.mlp is MlpKind.MOE for layer in model.layers)


class Operator(NamedTuple):
    """One operator of a pass on one chip: work, traffic by tensor class, and its times (s).

    Immutable (a named tuple: a pass builds ten of them, so construction must be cheap)."""

    name: str
    op_class: eff.OpClass
    flops: FloatArray
    weight_bytes: FloatArray
    activation_bytes: FloatArray
    kv_read_bytes: FloatArray
    kv_write_bytes: FloatArray
    compute_s: FloatArray
    memory_s: FloatArray
    time_s: FloatArray
    #: the bandwidth this operator's traffic moves at (peak x its achieved fraction)
    bandwidth_bytes_per_s: FloatArray

    def moving_s(self, tensor_bytes: ArrayLike) -> FloatArray:
        """Seconds this operator spends moving ``tensor_bytes`` of its traffic."""
        return np.asarray(np.asarray(tensor_bytes, float) / self.bandwidth_bytes_per_s)

    @property
    def bytes_read(self) -> FloatArray:
        """Weights, KV read and half the activation traffic (the inputs)."""
        return np.asarray(self.weight_bytes + self.kv_read_bytes + 0.5 * self.activation_bytes)

    @property
    def bytes_written(self) -> FloatArray:
        return np.asarray(self.kv_write_bytes + 0.5 * self.activation_bytes)

    @property
    def bound(self) -> NDArray[np.str_]:
        return np.where(self.compute_s >= self.memory_s, "compute", "memory")


@dataclass(frozen=True)
class ChipRates:
    """What one chip offers the operators: peak FLOP/s of the GEMMs' and of attention's
    precision, HBM bandwidth, and the efficiency of each operator class."""

    gemm_flops_per_s: float
    attention_flops_per_s: float
    bandwidth_bytes_per_s: float
    efficiency: eff.EfficiencyTable = eff.PURE_TABLE

    @cached_property
    def _by_class(self) -> dict[eff.OpClass, tuple[eff.OpEfficiency, bool]]:
        return {c: (e, eff.is_pure(e)) for c in eff.OpClass for e in (self.efficiency.of(c),)}

    def of(self, op_class: eff.OpClass) -> tuple[eff.OpEfficiency, bool]:
        """The efficiency of ``op_class`` and whether it is the pure roofline (looked up once per chip)."""
        return self._by_class[op_class]

    @cached_property
    def latent_decode(self) -> tuple[eff.OpEfficiency, bool]:
        """Decode attention over a shared latent (MLA absorbed): the decode kernel's bandwidth
        and floor with the prefill-attention kernel's compute terms. All query heads of a
        sequence meet one cached latent, so the kernel is a dense tensor-core product like
        prefill attention, not the per-head GQA decode kernels the decode curve is fitted on
        (FlashMLA, deepseek-ai/FlashMLA 2025-04-22: 660 TFLOP/s of 990 and 3,000 GB/s of
        3.35 TB/s on an H800 SXM5, about 0.67 and 0.90)."""
        dec, pure = self.of(eff.OpClass.ATTENTION_DECODE)
        if pure:
            return dec, pure
        pre, _ = self.of(eff.OpClass.ATTENTION_PREFILL)
        return (
            replace(
                dec,
                compute_frac=pre.compute_frac,
                compute_half_rows=pre.compute_half_rows,
                compute_half_cols=pre.compute_half_cols,
                compute_half_depth=pre.compute_half_depth,
                compute_tile_rows=pre.compute_tile_rows,
            ),
            False,
        )


def _operator(
    name: str,
    op_class: eff.OpClass,
    rates: ChipRates,
    *,
    flops: ArrayLike,
    rows: ArrayLike,
    calls: ArrayLike,
    cols: ArrayLike | None = None,
    depth: ArrayLike | None = None,
    weight_bytes: ArrayLike = _NONE,
    activation_bytes: ArrayLike = _NONE,
    kv_read_bytes: ArrayLike = _NONE,
    kv_write_bytes: ArrayLike = _NONE,
    latent: bool = False,
    routed: ArrayLike | None = None,
    tokens: ArrayLike | None = None,
    ep: ArrayLike | None = None,
) -> Operator:
    e, pure = rates.latent_decode if latent else rates.of(op_class)
    attention = op_class is eff.OpClass.ATTENTION_DECODE or op_class is eff.OpClass.ATTENTION_PREFILL
    peak = rates.attention_flops_per_s if attention else rates.gemm_flops_per_s
    f = num(flops)
    # the absent terms are already NumPy zeros: skip their conversion on the one-point path
    w = weight_bytes if weight_bytes is _NONE else num(weight_bytes)
    a = activation_bytes if activation_bytes is _NONE else num(activation_bytes)
    kr = kv_read_bytes if kv_read_bytes is _NONE else num(kv_read_bytes)
    kw = kv_write_bytes if kv_write_bytes is _NONE else num(kv_write_bytes)
    moved = w + a + kr + kw
    r = rows if pure else maximum(num(rows), 1e-30)  # the pure roofline ignores rows
    compute, memory, time, bandwidth_frac = eff.operator_timing(
        e, f, moved, peak, rates.bandwidth_bytes_per_s, r, cols, depth, calls, pure, routed, tokens, ep
    )
    bandwidth = rates.bandwidth_bytes_per_s * bandwidth_frac
    return Operator(name, op_class, f, w, a, kr, kw, compute, memory, time, bandwidth)


def _has(x: FloatArray) -> bool:
    """Whether any point carries this term (``np.any`` without its dispatch on one value)."""
    return bool(x.any()) if type(x) is np.ndarray else bool(x)


def pass_operators(
    m: OperatorModel,
    load: StepLoad,
    rates: ChipRates,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
    skew: ArrayLike = 1.0,
) -> tuple[Operator, ...]:
    """The operators one chip runs for one micro-batch through one (average) stage.

    ``P = pp`` micro-batches of ``1/P`` of the load each; a stage holds ``1/P`` of the
    layers; a DP replica of ``tp`` chips (the attention's TP x DP) takes ``1/dp`` of a
    micro-batch's tokens; the routed experts are spread over the stage's ``C = dp tp`` chips
    in ``shards`` = :func:`expert_shards` (MoE TP x EP), so ``C / shards`` groups each see
    ``1/groups`` of the tokens. The busiest EP rank (the one the step waits for) gets
    ``skew`` times the mean routed load (FLOPs, rows and activations) and reads its
    :func:`expert_slot_factor` share of slots (redundant experts).
    Kernel shapes (rows, cols, depth) for the efficiency curves: QKV (t, qkv/tp, h), output
    (t, h, heads d_v/tp), MLPs (t, I/tp, h), router (t, E, h), LM head (t, V/tp, h), experts
    (tokens per expert over the EP group, I_e/expert-TP, h), decode attention (sequences, query
    heads per KV head, context), prefill attention (tokens, d_qk, prompt length).
    """
    t, p, d, e = (num(x) for x in (tp, pp, dp, ep))
    per_pass = 1.0 / (p * p)  # 1/P of the tokens, over 1/P of the layers
    tokens = load.tokens / (p * d)  # tokens a chip's replica sees per micro-batch
    layers = m.num_layers / p
    moe_layers = m.num_moe_layers / p
    dense_layers = m.num_dense_layers / p
    h = float(m.hidden)
    act = ACTIVATION_BYTES
    W, P = m.weight_bytes, m.params
    qkv_w, out_w = m.qkv_out_widths
    vocab = P["lm_head"] / h  # the LM head's output width

    def gemm(
        name: str,
        params: float,
        bytes_: float,
        n_layers: FloatArray,
        act_values: FloatArray,
        split: FloatArray,
        cols: ArrayLike,
        depth: ArrayLike,
    ) -> Operator:
        """A dense projection over ``n_layers`` layers: ``act_values`` activation values
        per token per layer move (inputs read plus outputs written, per chip)."""
        return _operator(
            name,
            eff.OpClass.GEMM,
            rates,
            flops=2.0 * tokens * params / (p * split),
            rows=tokens,
            calls=n_layers,
            cols=cols,
            depth=depth,
            weight_bytes=bytes_ / (p * split),
            activation_bytes=tokens * n_layers * act_values * act,
        )

    kv_split = minimum(t, float(m.kv_heads))
    heads, head_dim = m.attention_heads
    share = per_pass / d  # of the load's sequences, on one chip (before the head split)
    decode = _has(load.decode_sequences)
    prefill = _has(load.prefill_sequences)
    attention: list[Operator] = []
    # A mixed step runs two attention kernels, each at its own efficiency: decode rows read
    # their caches, the prompt chunk computes; one operator would cost the chunk's FLOPs at the
    # few decode rows' efficiency.
    if decode or not prefill:
        ctx = load.decode_context
        attention.append(
            _operator(
                "attention",
                eff.OpClass.ATTENTION_DECODE,
                rates,
                flops=load.decode_sequences * load.decode_attention_flops * share / t,
                rows=load.decode_sequences / (p * d),
                calls=layers,
                # query heads per KV head on one chip (KV heads replicate once tp exceeds them);
                # a shared latent is a dense kernel of head dimension ``head_dim`` instead
                cols=(head_dim or None)
                if m.latent_decode
                else (heads * kv_split / (t * m.kv_heads) if heads else None),
                depth=None if (np.ndim(ctx) == 0 and ctx == 0) else ctx,
                latent=m.latent_decode,
                kv_read_bytes=load.decode_sequences * load.decode_kv_read_bytes * share / kv_split,
                kv_write_bytes=load.decode_sequences * load.decode_kv_write_bytes * share / kv_split,
            )
        )
    if prefill:
        attention.append(
            _operator(
                "attention_prefill" if decode else "attention",
                eff.OpClass.ATTENTION_PREFILL,
                rates,
                flops=load.prefill_sequences * load.prefill_attention_flops * share / t,
                rows=load.prefill_sequences * load.prefill_length / (p * d),
                calls=layers,
                cols=head_dim if head_dim else None,
                depth=load.prefill_length,
                kv_read_bytes=load.prefill_sequences * load.prefill_kv_read_bytes * share / kv_split,
                kv_write_bytes=load.prefill_sequences * load.prefill_kv_write_bytes * share / kv_split,
            )
        )
    table: list[Operator | None] = [
        _operator(
            "embedding",
            eff.OpClass.ELEMENTWISE,
            rates,
            flops=_NONE,
            rows=tokens,
            calls=1.0 / p,
            activation_bytes=tokens * h * (W["embedding"] / max(P["embedding"], 1.0)) / p,
        ),
        gemm("attention_qkv", P["attention_qkv"], W["attention_qkv"], layers, h + qkv_w / t, t, qkv_w / t, h),
        *attention,
        gemm("attention_out", P["attention_out"], W["attention_out"], layers, out_w / t + h, t, h, out_w / t),
    ]
    if m.num_moe_layers:
        shards = expert_shards(t, e, moe_tp)
        groups = d * t / shards
        group_tokens = load.tokens / p / groups
        distinct = expected_distinct_experts(group_tokens, m.experts, m.experts_per_token)
        slots = expert_slot_factor(e, m.experts, redundant_experts)
        # token-expert pairs the busiest rank's group processes (skew x the mean)
        routed_tokens = group_tokens * m.experts_per_token * num(skew)
        per_expert_rows = routed_tokens / m.experts
        _, shared_i, expert_i = m.mlp_widths
        expert_tp = maximum(shards / minimum(e, float(m.experts)), 1.0)  # ways one expert is split
        table += [
            _operator(
                "router",
                eff.OpClass.GEMM,
                rates,
                flops=2.0 * tokens * P["router"] / p,
                rows=tokens,
                calls=moe_layers,
                cols=float(m.experts),
                depth=h,
                weight_bytes=W["router"] / p,
            ),
            gemm(
                "shared_experts",
                P["shared_experts"],
                W["shared_experts"],
                moe_layers,
                2 * h + m.expert_matrices * shared_i / t,
                t,
                shared_i / t,
                h,
            )
            if P["shared_experts"]
            else None,
            _operator(
                "routed_experts",
                eff.OpClass.MOE,
                rates,
                flops=2.0 * routed_tokens * P["routed_experts"] / (p * shards),
                rows=per_expert_rows,
                calls=moe_layers,
                cols=expert_i / expert_tp,
                depth=h,
                weight_bytes=W["routed_experts"] * distinct * slots / (p * shards),
                activation_bytes=routed_tokens
                / shards
                * moe_layers
                * (2 * h + m.expert_matrices * expert_i)
                * act,
                # the permute and finalize passes over the pairs this rank receives (the
                # all-to-all dispatch the network model uses), at full hidden width
                routed=routed_tokens * expert_tp / shards * h * moe_layers,
                # where a second kernel may run: the group's tokens per call, over ep ranks
                tokens=group_tokens,
                ep=e,
            ),
        ]
    if m.num_dense_layers:
        di = m.mlp_widths[0] / t  # the dense MLP's intermediate width on one chip
        table.append(
            gemm(
                "dense_mlp",
                P["dense_mlp"],
                W["dense_mlp"],
                dense_layers,
                2 * h + m.dense_matrices * di,
                t,
                di,
                h,
            )
        )
    table += [
        _operator(
            "norms",
            eff.OpClass.ELEMENTWISE,
            rates,
            flops=_NONE,
            rows=tokens,
            calls=layers,
            weight_bytes=W["norms"] / p,
            activation_bytes=tokens * layers * NORM_VALUES_PER_HIDDEN_PER_LAYER * h * act,
        ),
        gemm("lm_head", P["lm_head"], W["lm_head"], 1.0 / p, h + vocab / t, t, vocab / t, h),
    ]
    return tuple(op for op in table if op is not None)
