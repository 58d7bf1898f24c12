"""A step as a list of operators, each with its own roofline: where the time goes.

One chip of a stage runs, per micro-batch pass, these operators over the stage's layers. Each
operator's work (FLOPs, bytes by tensor class, the kernel's shape) is described once, in
:mod:`rackmath.core.work`, the description the kernel fit reads the measured tables through:

=================  ===================  ====================================================
operator           class                work per chip and pass (``t`` tokens of a DP rank)
=================  ===================  ====================================================
embedding          elementwise          lookup: ``t h b_emb`` bytes (rows read), no FLOPs
attention_qkv      gemm                 ``2 t P_qkv / tp``; weights ``P_qkv w / tp``
attention          attention_decode     the registry's FLOPs and KV read per sequence (/ tp
                   (attention_prefill   and / the KV heads tp splits); queries in, outputs out
                   in a prompt pass)
attention_prefill  attention_prefill    a mixed step's prompt chunk, beside the decode rows
attention_out      gemm                 ``2 t P_out / tp``
router             gemm                 ``2 t h E`` (replicated)
dense_mlp          gemm                 ``2 t P_mlp / tp`` over the dense layers
shared_experts     gemm                 ``2 t P_shared / tp`` over the MoE layers
routed_experts     moe                  the busiest rank's pairs through its experts
                                        (:func:`rackmath.core.work.grouped_gemm`)
norms              elementwise          ``W`` = norm scales; ``A = 2 x 2 t h`` per layer
lm_head            gemm                 ``2 t h V / tp``
=================  ===================  ====================================================

**Which curve.** Each operator names the curve it runs on (:meth:`ChipRates.curve`): its
class, the kernel format its operands run in and, for attention, the kernel family (``gqa``,
``mla``, ``dsa``). A GEMM's format follows its weight class's storage and the deployment's
compute precision (:func:`rackmath.specs.precision.gemm_formats`: bf16 attention beside
mxfp4 experts runs a bf16 GEMM; block-scaled FP8 weights run the ``fp8_block`` kernel);
attention's follows the KV cache (:func:`~rackmath.specs.precision.attention_format`). The peak
an operator runs at is the one its curve was fitted against. Every operator carries its
:class:`~rackmath.specs.efficiency.Kernel` (table, format, chip, fallback reason, error band).

**Whole sequences.** A DP rank (and a pipeline micro-batch) holds whole sequences: the busiest
of ``dp`` ranks decodes ``ceil(B / dp)`` of a batch of ``B`` (one sequence on 64 attention-DP
ranks is one rank's work, not 1/64 of it on each). The rank the step waits for reads at
least one expert per MoE layer once a token reaches the EP group.

Each operator's time is its own roofline, with the chip's efficiency for its curve
(:mod:`rackmath.core.efficiency`; the pure roofline by default)::

    compute_s = flops / (peak(curve) * compute_frac(shape))
    memory_s  = (W + A + K_r + K_w) / (BW * bandwidth_frac(shape))
    time_s    = max(compute_s, memory_s) + calls * floor_s

and the pass is the **sum** of the operators' times. The lecture's blackboard form,
``max(sum compute_s, sum memory_s)``, is the lower bound (every operator overlapping every
other); the sum is at most twice it (each term ``max(c, m) <= c + m``).

Assumptions: uniform expert routing by default; a plan's ``skew`` (busiest EP rank's load
over the mean) scales the routed-expert GEMM of the rank the step waits for; the
activation function and residual adds are fused into the GEMM epilogues; the LM head runs
on every token of the pass (as :func:`rackmath.core.architecture.prefill_flops_per_sequence`
counts it). Sources: Kaplan et al. 2020 and PaLM appendix B (2 FLOPs per MAC per weight);
Williams, Waterman & Patterson 2009 (the roofline per kernel); Korthikanti et al. 2022
(activations per layer); DeepSeek-V3 report §3.4 (attention-DP beside EP).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import architecture as arch
from rackmath.core import attention as attn
from rackmath.core import efficiency as eff
from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates
from rackmath.core.loads import (
    StepLoad,
)
from rackmath.core.numeric import ceil, maximum, minimum, num
from rackmath.core.roofline import expected_distinct_experts
from rackmath.specs.efficiency import Kernel, OpClass
from rackmath.specs.model import WEIGHT_CLASSES, AttentionKind, MlpKind, ModelSpec
from rackmath.specs.precision import FORMATS, Precision

FloatArray = NDArray[np.float64]

#: Bytes per activation value in the norms and the residual stream: bf16.
ACTIVATION_BYTES = 2.0

#: Activation values a norm moves per token: it reads ``h`` and writes ``h``; two norms per layer.
NORM_VALUES_PER_HIDDEN_PER_LAYER = 4.0

#: The kernel family each attention kind's decode and prefill run on (its curves' ``kind``).
ATTENTION_FAMILY: dict[AttentionKind, str] = {
    AttentionKind.MLA: "mla",
    AttentionKind.DSA: "dsa",
}


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
    #: every operator's weight storage format, by the keys of ``params`` (it picks the kernel format)
    weight_precision: Mapping[str, Precision] = field(default_factory=dict)
    #: weight bytes over parameters, by the keys of ``params`` (scales included)
    bytes_per_param: Mapping[str, float] = field(default_factory=dict)
    #: query heads; a decode query's and output's width per head (MLA absorbed: 576 and 512)
    heads: float = 0.0
    decode_dims: tuple[float, float] = (0.0, 0.0)
    #: a prompt's query and output width per head, and the KV heads its kernel reads; whether
    #: it runs absorbed (DSA: every head against one latent, tiled by heads)
    prefill_dims: tuple[float, float, float] = (0.0, 0.0, 0.0)
    prefill_absorbed: bool = False
    #: the attention kernel family (``gqa``, ``mla``, ``dsa``: :data:`ATTENTION_FAMILY`)
    attention_kind: str = "gqa"
    #: an expert's and a dense MLP's weight matrices: 3 gated (gate, up, down), 2 non-gated (up, down)
    expert_matrices: float = 3.0
    dense_matrices: float = 3.0


def operator_model(model: ModelSpec, weights: Mapping[str, Precision] | Precision) -> OperatorModel:
    """Parameters and bytes by weight class (:data:`WEIGHT_CLASSES`), each class stored in
    ``weights`` (one format for every class, or a mapping per class: gpt-oss keeps attention,
    router, embedding and head in bf16 beside mxfp4 experts)."""
    p = arch.param_counts(model)
    per = dict(weights) if isinstance(weights, Mapping) else dict.fromkeys(WEIGHT_CLASSES, weights)
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
    precision = {name: per[weight_class(name)] for name in params}
    weight_bytes = {name: count * precision[name].bytes_per_element for name, count in params.items()}
    moe = model.moe if model.is_moe else None
    dense = model.dense_mlp
    latent, latent_prefill = attn.rule(a).latent_decode, attn.rule(a).latent_prefill
    q_width = a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim if a.kv_lora_rank else a.head_dim)
    qkv_width = q_width + attn.kv_elements_per_token_per_layer(a)
    heads = float(a.num_heads)
    decode = (
        (float(a.kv_lora_rank + a.qk_rope_head_dim), float(a.kv_lora_rank))
        if latent
        else (
            float(a.head_dim),
            float(a.v_head_dim),
        )
    )
    prefill_kv = heads if latent else float(a.num_kv_heads)  # MLA prefill runs decompressed ...
    prefill = (float(q_width / a.num_heads), float(a.v_head_dim), prefill_kv)
    if latent_prefill:  # ... DSA's absorbed, one shared latent (the decode dims)
        prefill = (*decode, 1.0)
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
        weight_precision=precision,
        bytes_per_param={name: weight_bytes[name] / max(count, 1.0) for name, count in params.items()},
        heads=heads,
        decode_dims=decode,
        prefill_dims=prefill,
        prefill_absorbed=latent_prefill,
        attention_kind=ATTENTION_FAMILY.get(a.kind, "gqa"),
        expert_matrices=3.0 if (moe is None or moe.gated) else 2.0,
        dense_matrices=3.0 if (dense is None or dense.gated) else 2.0,
    )


def weight_class(operator: str) -> str:
    """The weight class (:data:`WEIGHT_CLASSES`) an operator's weights belong to."""
    return "attention" if operator in ("attention_qkv", "attention_out") else operator


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
    e, r = num(ep), num(redundant_experts)
    return ceil((experts + r) / e) * e / experts


def layer_kinds(model: ModelSpec) -> tuple[bool, ...]:
    """True for each MoE layer (for stage splits)."""
    return tuple(layer.mlp is MlpKind.MOE for layer in model.layers)


_ZERO_INPUTS = cast(FloatArray, np.float64(0.0))


class Operator(NamedTuple):
    """One operator of a pass on one chip: work, traffic by tensor class, and its times (s).

    Immutable (a named tuple: a pass builds ten of them, so construction must be cheap).
    ``latency_s`` is the part of ``time_s`` that is launch floors (``calls x floor_s``);
    ``kernel`` names the curve the time comes from."""

    name: str
    op_class: OpClass
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
    latency_s: FloatArray
    #: the peak FLOP/s its curve runs at (the curve's precision)
    peak_flops_per_s: float
    kernel: Kernel
    #: activation values read as matmul inputs (what a low-precision recipe casts; 0 elsewhere)
    input_values: FloatArray = _ZERO_INPUTS

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
        """What takes most of this operator's time: ``compute``, ``memory`` or ``latency``
        (its launch floors, when they exceed both)."""
        code = np.where(self.compute_s >= self.memory_s, 0, 1)
        code = np.where(self.latency_s > np.maximum(self.compute_s, self.memory_s), 2, code)
        return _BOUNDS[code]


_BOUNDS = np.array(["compute", "memory", "latency"])


def timed(
    name: str,
    op_class: OpClass,
    rates: ChipRates,
    work: wk.Work,
    formats: tuple[str, ...],
    kind: str = "",
) -> Operator:
    """An operator's times: its work on the curve it names (:meth:`ChipRates.curve`)."""
    choice = rates.curve(op_class, formats, kind)
    e, pure = choice.efficiency, choice.pure
    r = work.rows
    if not pure and not (type(r) is np.float64 and r > 0.0):  # the pure roofline ignores rows
        r = maximum(r, 1e-30)
    # a Work's fields are NumPy values already: the timing skips the conversions
    compute, memory, time, bandwidth_frac, latency = eff.timing_of(
        e, work.flops, work.bytes, choice.peak_flops_per_s, rates.bandwidth_bytes_per_s, r, work.cols,
        work.depth, work.calls, pure, work.routed, work.tokens, work.ep,
    )  # fmt: skip
    return Operator(
        name,
        op_class,
        work.flops,
        work.weight_bytes,
        work.activation_bytes,
        work.kv_read_bytes,
        work.kv_write_bytes,
        compute,
        memory,
        time,
        rates.bandwidth_bytes_per_s * bandwidth_frac,
        latency,
        choice.peak_flops_per_s,
        choice.kernel,
        _ZERO_INPUTS if work.input_values is None else work.input_values,
    )


_ZERO = np.float64(0.0)


def _has(x: FloatArray) -> bool:
    """Whether any point carries this term (``np.any`` without its dispatch on one value)."""
    return bool(x.any()) if type(x) is np.ndarray else bool(x)


def whole(sequences: FloatArray, ways: FloatArray) -> FloatArray:
    """Sequences the busiest of ``ways`` ranks holds: ``ceil(sequences / ways)`` (whole
    sequences; a fractional count, an average load, is split as it is)."""
    share = sequences / ways
    if type(ways) is not np.ndarray and ways == 1.0:
        return share
    if type(sequences) is not np.ndarray and type(ways) is not np.ndarray:  # one point
        return ceil(share) if sequences == float(np.floor(sequences)) else share
    return np.asarray(np.where(sequences == np.floor(sequences), np.ceil(share), share))


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
    """The operators the busiest chip runs for one micro-batch through one (average) stage.

    ``P = pp`` micro-batches of ``1/P`` of the load each; a stage holds ``1/P`` of the
    layers; a DP rank of ``tp`` chips (the attention's TP x DP) takes whole decode sequences,
    ``ceil(B / (P dp))`` at most (:func:`whole`), and ``1/(P dp)`` of a step's prompt tokens;
    the routed experts are spread over the stage's ``C = dp tp`` chips in ``shards`` =
    :func:`expert_shards` (MoE TP x EP), so ``C / shards`` groups each see ``1/groups`` of the
    tokens. The busiest EP rank (the one the step waits for) gets ``skew`` times the mean routed
    load and reads its :func:`expert_slot_factor` share of slots, one expert at least.
    Kernel shapes (rows, cols, depth) for the efficiency curves: QKV (t, qkv/tp, h), output
    (t, h, heads d_v/tp), MLPs (t, I/tp, h), router (t, E, h), LM head (t, V/tp, h), experts
    (tokens per expert over the EP group, I_e/expert-TP, h), decode attention (sequences x KV
    heads on the chip, query heads per KV head, context), prefill attention (tokens, d_qk,
    prompt length).
    """
    t, p, d, e = (num(x) for x in (tp, pp, dp, ep))
    queries = load.decode_queries
    decode_rows = whole(load.decode_sequences / queries, p * d) * queries  # a rank's decode rows
    prompt_tokens = load.prefill_sequences * load.prefill_length / (p * d)
    tokens = decode_rows + prompt_tokens  # tokens a chip's rank sees per micro-batch
    layers = m.num_layers / p
    stage = 1.0 / p  # a stage's share of the layers (the loads' attention work is all layers')
    dense_layers = m.num_dense_layers / p
    h = float(m.hidden)
    W, P = m.weight_bytes, m.params
    qkv_w, out_w = m.qkv_out_widths
    vocab = P["lm_head"] / h  # the LM head's output width

    def gemm(
        name: str, n_layers: FloatArray, in_values: ArrayLike, out_values: ArrayLike, split: FloatArray,
        cols: ArrayLike, depth: ArrayLike,
    ) -> Operator:  # fmt: skip
        """A dense projection over ``n_layers`` layers: ``in_values`` read and ``out_values``
        written per token per layer (per chip)."""
        formats, activation_bytes = rates.gemm(m.weight_precision[name])
        work = wk.gemm(
            tokens,
            P[name] / (p * split),
            cols,
            depth,
            weight_bytes_per_param=m.bytes_per_param[name],
            activation_bytes=activation_bytes,
            in_values=in_values,
            out_values=out_values,
            calls=n_layers,
        )
        return timed(name, OpClass.GEMM, rates, work, formats)

    kv_split = minimum(t, float(m.kv_heads))
    heads = m.heads / t  # query heads on one chip
    kv_local = float(m.kv_heads) / kv_split  # KV heads on one chip (replicated once tp exceeds them)
    decode = _has(load.decode_sequences)
    prefill = _has(load.prefill_sequences)
    kind = m.attention_kind
    att_formats = rates.attention_formats
    attention: list[Operator] = []
    # A mixed step runs two attention kernels, each at its own efficiency: decode rows read
    # their caches, the prompt chunk computes; one operator would cost the chunk's FLOPs at the
    # few decode rows' efficiency.
    if decode or not prefill:
        qk, v = m.decode_dims
        work = wk.decode_attention(
            decode_rows / queries,
            heads * queries,
            kv_local,
            qk,
            v,
            load.decode_context,
            flops=decode_rows * load.decode_attention_flops * stage / t,
            kv_read_bytes=decode_rows * load.decode_kv_read_bytes * stage / kv_split,
            kv_write_bytes=decode_rows * load.decode_kv_write_bytes * stage / kv_split,
            calls=layers,
        )
        attention.append(timed("attention", OpClass.ATTENTION_DECODE, rates, work, att_formats, kind))
    if prefill:
        qk, v, kv_heads = m.prefill_dims
        prompts = load.prefill_sequences / (p * d)  # a rank's prompts
        work = wk.prefill_attention(
            prompt_tokens,
            heads,
            kv_heads / minimum(t, kv_heads),
            qk,
            v,
            load.prefill_length,
            flops=prompts * load.prefill_attention_flops * stage / t,
            kv_read_bytes=prompts * load.prefill_kv_read_bytes * stage / kv_split,
            kv_write_bytes=prompts * load.prefill_kv_write_bytes * stage / kv_split,
            input_bytes=_activation_bytes(att_formats[0]),
            calls=layers,
            shared_heads=m.prefill_absorbed,
        )
        name = "attention_prefill" if decode else "attention"
        attention.append(timed(name, OpClass.ATTENTION_PREFILL, rates, work, att_formats, kind))
    emb_bytes = m.bytes_per_param["embedding"]
    table: list[Operator | None] = [
        timed(
            "embedding",
            OpClass.ELEMENTWISE,
            rates,
            wk.elementwise(tokens * h * emb_bytes / p, tokens, calls=1.0 / p),
            _ELEMENTWISE,
        ),
        gemm("attention_qkv", layers, h, qkv_w / t, t, qkv_w / t, h),
        *attention,
        gemm("attention_out", layers, out_w / t, h, t, h, out_w / t),
    ]
    if m.num_moe_layers:
        table += _moe_operators(m, load, rates, gemm, tokens, t, p, d, e, moe_tp, redundant_experts, skew)
    if m.num_dense_layers:
        di = m.mlp_widths[0] / t  # the dense MLP's intermediate width on one chip
        table.append(gemm("dense_mlp", dense_layers, h + di, (m.dense_matrices - 1) * di + h, t, di, h))
    table += [
        timed(
            "norms",
            OpClass.ELEMENTWISE,
            rates,
            wk.elementwise(
                tokens * layers * NORM_VALUES_PER_HIDDEN_PER_LAYER * h * ACTIVATION_BYTES,
                tokens,
                calls=layers,
                weight_bytes=W["norms"] / p,
            ),
            _ELEMENTWISE,
        ),
        gemm("lm_head", 1.0 / p, h, vocab / t, t, vocab / t, h),
    ]
    return tuple(op for op in table if op is not None)


_ELEMENTWISE = ("bfloat16",)


def _activation_bytes(fmt: str) -> float:
    f = FORMATS.get(fmt)
    return f.activation_bytes if f is not None else ACTIVATION_BYTES


def _moe_operators(
    m: OperatorModel,
    load: StepLoad,
    rates: ChipRates,
    gemm: Callable[..., Operator],
    tokens: FloatArray,
    t: FloatArray,
    p: FloatArray,
    d: FloatArray,
    e: FloatArray,
    moe_tp: ArrayLike,
    redundant_experts: ArrayLike,
    skew: ArrayLike,
) -> list[Operator | None]:
    """The router, shared experts and routed experts of one pass (see :func:`pass_operators`)."""
    h = float(m.hidden)
    moe_layers = m.num_moe_layers / p
    P = m.params
    shards = expert_shards(t, e, moe_tp)
    groups = d * t / shards
    group_tokens = load.tokens / p / groups
    distinct = expected_distinct_experts(group_tokens, m.experts, m.experts_per_token)
    slots = expert_slot_factor(e, m.experts, redundant_experts)
    # token-expert pairs the busiest rank's group processes (skew x the mean)
    routed_tokens = group_tokens * m.experts_per_token * num(skew)
    _, shared_i, expert_i = m.mlp_widths
    expert_tp = maximum(shards / minimum(e, float(m.experts)), 1.0)  # ways one expert is split
    # experts the busiest rank reads per layer: its share of the distinct ones, one at least
    hit = distinct * slots * expert_tp / shards
    if type(shards) is np.ndarray or shards > 1.0:
        hit = maximum(hit, minimum(routed_tokens, 1.0))
    expert_precision = m.weight_precision["routed_experts"]
    formats, activation_bytes = rates.gemm(expert_precision)
    kind = "gated" if m.expert_matrices == 3.0 else "nongated"
    work = wk.grouped_gemm(
        routed_tokens * expert_tp / shards * moe_layers,
        hit * moe_layers,
        h,
        expert_i / expert_tp,
        matrices=m.expert_matrices,
        weight_bytes_per_param=expert_precision.bytes_per_element,
        activation_bytes=activation_bytes,
        tokens_per_expert=routed_tokens / m.experts,
        # the permute and finalize passes over the pairs this rank receives (the all-to-all
        # dispatch the network model uses), at full hidden width
        routed=routed_tokens * expert_tp / shards * h * moe_layers,
        group_tokens=group_tokens,
        ep=e,
        calls=moe_layers,
        expert_params=P["routed_experts"] / m.num_moe_layers / expert_tp,  # biases included
    )
    router = timed(
        "router",
        OpClass.GEMM,
        rates,
        wk.gemm(
            tokens,
            P["router"] / p,
            float(m.experts),
            h,
            weight_bytes_per_param=m.bytes_per_param["router"],
            activation_bytes=rates.gemm(m.weight_precision["router"])[1],
            in_values=h,
            out_values=float(m.experts),
            calls=moe_layers,
        ),
        rates.gemm_formats(m.weight_precision["router"]),
    )
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
    routed = timed("routed_experts", OpClass.MOE, rates, work, formats, kind)
    return [router, shared, routed]
