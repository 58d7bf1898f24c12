"""Parameters, KV-cache bytes and FLOPs of a transformer, from its architecture alone.

Conventions
-----------
* FLOPs count 2 per multiply-accumulate (MAC), the vendors' convention for peak FLOP/s.
* A matmul of an ``m``-vector by an ``m x n`` weight is ``m*n`` MACs = ``2*m*n`` FLOPs, so a
  token passing through ``P`` matmul parameters costs ``2P`` FLOPs (Kaplan et al. 2020,
  eq. 2.2; PaLM, Chowdhery et al. 2022, appendix B).
* The input embedding is a table lookup (no FLOPs, only ``hidden`` values read per token);
  the LM head is a real ``hidden x vocab`` matmul, tied to the embedding or not.
* Attention at context ``c`` (tokens visible to the query, bounded by the layer's window):
  scores ``Q K^T`` are ``heads * d_qk * c`` MACs and the weighted sum ``A V`` is
  ``heads * d_v * c`` MACs, so ``2 * heads * (d_qk + d_v) * c`` FLOPs per token per layer.
  MLA decode runs in the absorbed form that DeepSeek's inference code and FlashMLA use:
  queries are projected into the latent, so every head scores against the cached latent
  (``d_qk = r_kv + d_rope = 576``) and sums latent values (``d_v = r_kv = 512``). Prefill
  runs decompressed (``d_qk = nope + rope = 192``, ``d_v = v_head_dim = 128``). The matmul
  parameters are the same either way; only the attention FLOPs differ.

Everything here is pure: a :class:`ModelSpec` in, numbers (NumPy arrays where a context
is given) out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import attention as attn
from rackmath.core.numeric import compact, num
from rackmath.specs.model import ActiveCountRule, AttentionKind, AttentionSpec, LayerSpec, MlpKind, ModelSpec
from rackmath.specs.precision import Precision
from rackmath.units import FLOPS_PER_MAC

FloatArray = NDArray[np.float64]

#: Bytes per DSA indexer key value (defined with the attention registry).
INDEXER_KEY_BYTES = attn.INDEXER_KEY_BYTES

#: Training FLOPs per forward FLOP: forward 1 + backward 2 (input and weight gradients),
#: Kaplan et al. 2020, §2.1.
FORWARD_BACKWARD_PASSES = 3


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by component. ``total`` and ``active`` (per token) are derived."""

    embedding: int
    lm_head: int  # 0 when tied to the embedding
    attention: int
    dense_mlp: int
    routed_experts: int  # all experts of all MoE layers
    shared_experts: int
    router: int
    norms: int
    #: parameters of one routed expert in one layer
    per_expert: int
    #: routed-expert parameters one token touches over all MoE layers (k experts per layer)
    routed_active: int

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self) if f.name not in _NOT_SUMMED)

    @property
    def active(self) -> int:
        """Parameters one token uses: everything except the routed experts it does not pick."""
        return self.total - self.routed_experts + self.routed_active

    @property
    def always_read(self) -> int:
        """Weights every forward step reads regardless of routing (input embedding excluded:
        a lookup touches only the batch's rows)."""
        embedding_only = 0 if self.lm_head == 0 else self.embedding
        return self.total - self.routed_experts - embedding_only

    @property
    def matmul_active(self) -> int:
        """Parameters a token multiplies through: active less lookups and norm scales."""
        lookup = 0 if self.lm_head == 0 else self.embedding
        return self.active - lookup - self.norms

    def active_under(self, rule: ActiveCountRule) -> int:
        """``active`` as a publisher counts it (see :class:`ActiveCountRule`)."""
        input_embedding = 0 if self.lm_head == 0 else self.embedding
        head = self.lm_head or self.embedding
        if rule is ActiveCountRule.HEAD_ONLY:
            return self.active - input_embedding
        if rule is ActiveCountRule.NEITHER:
            return self.active - input_embedding - head
        return self.active

    def by_component(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_SUMMED}


_NOT_SUMMED = {"per_expert", "routed_active"}


def attention_params(a: AttentionSpec, hidden: int) -> int:
    """Weights of one attention block: the kind's rule in :mod:`rackmath.core.attention`."""
    return attn.params(a, hidden)


def mlp_params(hidden: int, intermediate: int, gated: bool, bias: bool) -> int:
    """Gated (SwiGLU): gate and up ``h x i``, down ``i x h`` = ``3hi``; plain: ``2hi``."""
    projections = 3 if gated else 2
    biases = ((2 if gated else 1) * intermediate + hidden) if bias else 0
    return projections * hidden * intermediate + biases


@dataclass(frozen=True)
class LayerGroup:
    """Identical layers, counted once: the unit every per-layer sum runs over."""

    count: int
    attention: AttentionSpec
    window: int | None
    mlp: MlpKind
    #: the dense MLP's width (0 unless ``mlp`` is dense)
    intermediate_size: int


@lru_cache(maxsize=256)
def layer_groups(model: ModelSpec) -> tuple[LayerGroup, ...]:
    """The model's layers grouped by (attention, window, MLP kind, MLP width), first-seen order.

    A uniform model is one group; Llama 4 Maverick three (chunked + dense, chunked + MoE,
    global + MoE); Nemotron-Super-49B eight. Sums over layers are sums over these few groups, each
    vectorized over context, so no analysis loops over 80 or 162 layers per point.
    """
    counts: dict[LayerGroup, int] = {}
    for layer in model.layers:
        key = _layer_group(model, layer)
        counts[key] = counts.get(key, 0) + 1
    return tuple(dataclasses.replace(g, count=n) for g, n in counts.items())


@lru_cache(maxsize=256)
def attention_groups(model: ModelSpec) -> tuple[LayerGroup, ...]:
    """The layers grouped by (attention, window) alone, first-seen order: the groups the
    attention and KV-cache sums run over (their terms read nothing else). DeepSeek-V3's dense
    and MoE layers share one attention: one group, not two; Llama 4 Maverick two, not three.
    The MLP fields of each group are its first layer's and mean nothing here."""
    counts: dict[tuple[AttentionSpec, int | None], LayerGroup] = {}
    for g in layer_groups(model):
        key = (g.attention, g.window)
        seen = counts.get(key)
        counts[key] = g if seen is None else dataclasses.replace(seen, count=seen.count + g.count)
    return tuple(counts.values())


def _layer_group(model: ModelSpec, layer: LayerSpec) -> LayerGroup:
    """One layer as a group of one (the grouping key: everything but the count)."""
    default_width = model.dense_mlp.intermediate_size if model.dense_mlp else 0
    width = (layer.intermediate_size or default_width) if layer.mlp is MlpKind.DENSE else 0
    return LayerGroup(1, model.layer_attention(layer), layer.window, layer.mlp, width)


def layer_params(model: ModelSpec) -> tuple[tuple[int, int, int], ...]:
    """(attention, dense MLP, norm) parameters of each layer, in layer order (for stage splits;
    a MoE layer's experts and router are :func:`param_counts`' per-MoE-layer share). The sums
    over layers are :func:`param_counts`' attention, dense_mlp and norms less the final norm."""
    h = model.hidden_size
    d = model.dense_mlp
    out = []
    for layer in model.layers:
        g = _layer_group(model, layer)
        dense = mlp_params(h, g.intermediate_size, d.gated, d.bias) if d and g.mlp is MlpKind.DENSE else 0
        out.append((attention_params(g.attention, h), dense, _norms(model, g)))
    return tuple(out)


def kv_bytes_per_layer(model: ModelSpec, context: float, kv_bytes_per_element: float) -> tuple[float, ...]:
    """Bytes each layer holds for one sequence at ``context``, in layer order (for stage splits):
    the per-layer terms of :func:`kv_bytes_per_sequence`."""
    c = num(float(context))
    return tuple(
        float(_held_bytes(_attention_terms(_layer_group(model, x)), c, kv_bytes_per_element))
        for x in model.layers
    )


def _norms(model: ModelSpec, group: LayerGroup) -> int:
    """Norm scales of one layer: ``norms_per_layer x h``, half before attention and half
    before the MLP; a block that is absent (no-op) brings none."""
    half = model.norms_per_layer * model.hidden_size // 2
    return half * (group.attention.kind is not AttentionKind.NONE) + half * (group.mlp is not MlpKind.NONE)


@lru_cache(maxsize=256)
def param_counts(model: ModelSpec) -> ParamCounts:
    """Parameters of ``model`` by component (counts, not bytes), term by term as in
    Megatron-LM's eq. 2 (Narayanan et al. 2021), generalised to GQA, MLA, MoE and per-layer
    blocks (summed over :func:`layer_groups`):

    * embedding ``V h``; LM head ``V h`` (0 when tied to the embedding);
    * attention ``sum_l`` :func:`attention_params` of layer ``l``'s kind;
      dense MLPs ``sum_l`` :func:`mlp_params` at layer ``l``'s width;
    * routed experts ``L_moe E x`` one expert's MLP (``k`` of the ``E`` active per token);
      shared experts ``L_moe x`` their MLP; router ``L_moe (h E + E if biased + h if the
      shared expert is gated)``;
    * norms ``sum_l`` (``norms_per_layer x h``, less the half of an absent block) ``+ h``.

    Llama 3.1 8B (h = 4096, 32 layers, V = 128,256, untied): 8,030,261,248, as published.
    """
    h = model.hidden_size
    groups = layer_groups(model)
    embedding = model.vocab_size * h
    lm_head = 0 if model.tie_word_embeddings else model.vocab_size * h
    attention = sum(g.count * attention_params(g.attention, h) for g in groups)
    dense_mlp = 0
    if model.dense_mlp is not None:
        d = model.dense_mlp
        dense_mlp = sum(
            g.count * mlp_params(h, g.intermediate_size, d.gated, d.bias)
            for g in groups
            if g.mlp is MlpKind.DENSE
        )
    routed = shared = router = per_expert = routed_active = 0
    if model.moe is not None and model.num_moe_layers:
        m = model.moe
        n_moe = model.num_moe_layers
        per_expert = mlp_params(h, m.expert_intermediate_size, m.gated, m.expert_bias)
        routed = n_moe * m.num_experts * per_expert
        routed_active = n_moe * m.experts_per_token * per_expert
        shared = (
            n_moe * mlp_params(h, m.shared_intermediate_size, m.gated, False)
            if m.shared_intermediate_size
            else 0
        )
        gate = h if m.shared_expert_gate else 0
        router = n_moe * (h * m.num_experts + (m.num_experts if m.router_bias else 0) + gate)
    norms = sum(g.count * _norms(model, g) for g in groups) + h  # + the final norm
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense_mlp,
        routed_experts=routed,
        shared_experts=shared,
        router=router,
        norms=norms,
        per_expert=per_expert,
        routed_active=routed_active,
    )


def attention_out_params(model: ModelSpec) -> int:
    """Weights of the attention output projections, all layers: ``sum_l out_width_l x h``."""
    return sum(g.count * attn.out_width(g.attention) * model.hidden_size for g in layer_groups(model))


def kv_elements_per_token_per_layer(a: AttentionSpec) -> int:
    """Cached values per token per layer (:func:`rackmath.core.attention.kv_elements_per_token_per_layer`):
    MHA/GQA/MQA ``2 H_kv d`` (Llama-3.1-70B: 2,048); MLA ``r_kv + d_rope`` (DeepSeek-V3: 576)."""
    return attn.kv_elements_per_token_per_layer(a)


@dataclass(frozen=True)
class AttentionTerms:
    """One attention group (:func:`attention_groups`) with the per-layer constants the sums over
    layers read at every point: its kind's rule and each count the rule gives for it."""

    count: int
    attention: AttentionSpec
    window: int | None
    rule: attn.AttentionRule
    #: :func:`rackmath.core.attention.kv_elements_per_token_per_layer`
    kv_elements: int
    #: :func:`rackmath.core.attention.indexer_elements_per_token_per_layer`
    indexer_elements: int
    #: :func:`rackmath.core.attention.state_elements_per_layer`
    state_elements: int
    #: :func:`rackmath.core.attention.flops_per_visible_token` in decode
    decode_flops_per_key: int
    #: :func:`rackmath.core.attention.indexer_flops_per_key`
    indexer_flops_per_key: int
    #: :func:`rackmath.core.attention.state_flops_per_token`
    state_flops: int


@lru_cache(maxsize=256)
def attention_terms(model: ModelSpec) -> tuple[AttentionTerms, ...]:
    """:func:`attention_groups` with their constants (:class:`AttentionTerms`), formed once per
    model: a per-point sum then reads them instead of dispatching on the kind for each."""
    return tuple(_attention_terms(g) for g in attention_groups(model))


def _attention_terms(g: LayerGroup) -> AttentionTerms:
    a = g.attention
    return AttentionTerms(
        g.count,
        a,
        g.window,
        attn.rule(a),
        attn.kv_elements_per_token_per_layer(a),
        attn.indexer_elements_per_token_per_layer(a),
        attn.state_elements_per_layer(a),
        attn.flops_per_visible_token(a, decode=True),
        attn.indexer_flops_per_key(a),
        attn.state_flops_per_token(a),
    )


def _per_layer_sum(
    model: ModelSpec, context: ArrayLike, term: Callable[..., ArrayLike], *args: float
) -> FloatArray:
    """``sum over layers of term(layer, context, *args)`` as a sum over :func:`attention_terms`
    (``term`` reads only a group's attention, window and constants), broadcast over ``context``."""
    c = num(context)  # one value stays a float (rackmath.core.numeric)
    total = np.zeros_like(c) if type(c) is np.ndarray else 0.0
    for g in attention_terms(model):
        total = total + g.count * num(term(g, c, *args))
    return total  # type: ignore[return-value]


def cached_tokens_per_layer_sum(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """``sum over layers of held_l(context)`` (``min(context, window_l)``): token-slots the stack caches."""
    return _per_layer_sum(model, context, lambda g, c: attn.held_tokens(g.attention, g.window, c))


def kv_bytes_per_token(model: ModelSpec, kv_bytes_per_element: float) -> float:
    """Bytes one token adds to the cache when every layer holds it (context within all windows;
    the DSA indexer key and fixed states excluded)."""
    return float(
        sum(g.count * kv_elements_per_token_per_layer(g.attention) for g in layer_groups(model))
        * kv_bytes_per_element
    )


def kv_cache_layers(model: ModelSpec) -> int:
    """Layers that cache per-token keys and values (Qwen3-Next: 12 of 48; Nemotron-Super: 49 of 80)."""
    return sum(g.count for g in layer_groups(model) if kv_elements_per_token_per_layer(g.attention))


def state_bytes_per_sequence(model: ModelSpec, state_bytes_per_element: float) -> float:
    """Fixed state one sequence holds whatever its context (linear attention; Qwen3-Next in
    bf16: 36 x 548,864 x 2 = 39,518,208 B); 0 for models with only a KV cache."""
    return float(
        sum(g.count * attn.state_elements_per_layer(g.attention) for g in layer_groups(model))
        * state_bytes_per_element
    )


def read_tokens_per_layer_sum(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """``sum over layers of read_l(context)``: keys one decode query reads.

    Equals :func:`cached_tokens_per_layer_sum` for dense attention; DSA (``index_top_k``)
    bounds every layer at ``top_k`` (DeepSeek-V3.2 at 128K: 61 x 2,048, not 61 x 131,072).
    """
    return _per_layer_sum(model, context, lambda g, c: attn.read_tokens(g.attention, g.window, c))


def _held_bytes(g: AttentionTerms, c: FloatArray, b: float) -> FloatArray:
    per_token = g.kv_elements * b
    per_token += g.indexer_elements * attn.INDEXER_KEY_BYTES
    return per_token * num(g.rule.held(g.attention, g.window, c)) + g.state_elements * b


def _read_bytes(g: AttentionTerms, c: FloatArray, b: float) -> FloatArray:
    a = g.attention
    index = g.indexer_elements * attn.INDEXER_KEY_BYTES
    return (
        g.kv_elements * b * num(g.rule.read(a, g.window, c))
        + (index * attn.indexed_tokens(a, g.window, c) if index else 0.0)
        + g.state_elements * b
    )


def kv_bytes_per_sequence(model: ModelSpec, context: ArrayLike, kv_bytes_per_element: float) -> FloatArray:
    """KV-cache bytes one sequence *holds* at ``context`` tokens.

    ``sum_l (elems_l b + idx_l) held_l(context) + state_l b``: full-attention layers grow
    linearly in context; sliding-window and chunked layers stop at their window or chunk;
    DSA adds its FP8 indexer key per token; a linear-attention layer holds a fixed state
    (stored, like the cache, at ``kv_bytes_per_element``). At ``context = 1`` this is also
    what one decode step writes (one token's entries plus the rewritten states).
    """
    return _per_layer_sum(model, context, _held_bytes, kv_bytes_per_element)


def kv_bytes_read_per_sequence(
    model: ModelSpec, context: ArrayLike, kv_bytes_per_element: float
) -> FloatArray:
    """KV-cache bytes one decode step *reads* for one sequence at ``context`` tokens.

    ``sum_l (elems_l b read_l(c) + idx_l indexed_l(c) + state_l b)``: dense attention reads
    what it holds; DSA reads the full entry of the ``top_k`` selected tokens and, once it holds
    more than ``top_k``, the indexer key of every held token
    (:func:`rackmath.core.attention.indexed_tokens`); a linear-attention layer reads its state
    whatever ``c``.
    """
    return _per_layer_sum(model, context, _read_bytes, kv_bytes_per_element)


def decode_flops_per_token(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """FLOPs to generate one token that attends to ``context`` cached tokens.

    ``2 * P_matmul_active +`` :func:`decode_attention_flops_per_token` (MLA in its absorbed form).
    A context broadcast over a grid is computed on its one row (:func:`rackmath.core.numeric.compact`)
    and returned as a view at the grid's shape.
    """
    c = compact(context)
    flops = np.asarray(
        FLOPS_PER_MAC * param_counts(model).matmul_active + decode_attention_flops_per_token(model, c),
        dtype=float,
    )
    return flops if c is context else np.broadcast_to(flops, np.shape(context))


def _decode_attention(g: AttentionTerms, c: FloatArray) -> FloatArray:
    a = g.attention
    return (
        g.decode_flops_per_key * num(g.rule.read(a, g.window, c))
        + (g.indexer_flops_per_key * attn.indexed_tokens(a, g.window, c) if a.index_top_k else 0.0)
        + g.state_flops
    )


def decode_attention_flops_per_token(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """Attention-core FLOPs of one decode token, all layers:
    ``sum_l 2 H (d_qk + d_v) read_l`` plus DSA's indexer scoring every held key once more
    than ``top_k`` are held, ``2 H_idx d_idx indexed_l``, plus a linear layer's state update
    (context-free)."""
    return _per_layer_sum(model, context, _decode_attention)


def causal_visible_pairs(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """``sum_l sum_{i=1..L} visible_l(i)``: query-key pairs of a causal prefill, all layers.

    Full layers: ``L(L+1)/2``. A window ``w < L``: ``w(w+1)/2 + (L-w) w``; DSA bounds each
    query at ``top_k``; a chunk ``C`` restarts every ``C`` tokens; linear layers have none.
    """
    return _per_layer_sum(model, length, lambda g, n: attn.prefill_pairs(g.attention, g.window, n))


def _prefill_attention(g: AttentionTerms, n: FloatArray) -> FloatArray:
    a = g.attention
    return (
        attn.flops_per_visible_token(a, decode=False) * attn.prefill_pairs(a, g.window, n)
        + attn.indexer_flops_per_key(a) * attn.indexer_pairs(a, g.window, n)
        + attn.state_flops_per_token(a) * n
    )


def prefill_attention_flops_per_sequence(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """Attention-core FLOPs of one causal prefill of ``length`` tokens, all layers:
    ``sum_l 2 H (d_qk + d_v) pairs_l(n)`` plus DSA's indexer over every causal pair once the
    prompt is longer than ``top_k``, ``2 H_idx d_idx n(n+1)/2``
    (:func:`rackmath.core.attention.indexer_pairs`), plus a linear layer's ``n`` state updates."""
    return _per_layer_sum(model, length, _prefill_attention)


def prefill_flops_per_sequence(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """FLOPs to prefill one prompt of ``length`` tokens (causal attention, no prior cache)."""
    n = np.asarray(length, dtype=float)
    matmul = FLOPS_PER_MAC * param_counts(model).matmul_active * n
    return np.asarray(matmul + prefill_attention_flops_per_sequence(model, n), dtype=float)


def training_flops_per_token(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """Forward + backward = 3x the forward FLOPs (backward is twice the forward): the
    ``6N`` rule with causal attention included (Kaplan et al. 2020, §2.1)."""
    n = np.asarray(length, dtype=float)
    return FORWARD_BACKWARD_PASSES * prefill_flops_per_sequence(model, n) / n


def weight_bytes_by_class(model: ModelSpec, default_precision: Precision | None = None) -> dict[str, float]:
    """Bytes of each weight class (:data:`rackmath.specs.model.WEIGHT_CLASSES`): the class's
    parameters (:func:`param_counts`) times its storage bytes per element.

    A class's precision is :meth:`ModelSpec.weight_precision`: served as shipped
    (``default_precision`` None or the native one), the classes the checkpoint keeps
    unconverted (``modules_to_not_convert``) stay in their own precision; any other
    ``default_precision`` requantizes the checkpoint (a quantized format leaves the embedding,
    LM head, router and norms at 16 bits, :data:`rackmath.specs.model.UNQUANTIZED_CLASSES`).

    gpt-oss-120b (h 2880, 36 layers, 64 heads x 64, 8 KV heads, 128 experts of 2880, vocab
    201,088, untied; experts mxfp4 = 4.25 bits, attention / router / embedding / LM head /
    norms bf16): routed experts ``36 x 128 x (3 x 2880^2 + 3 x 2880) x 0.53125 =
    60,935,224,320`` B; embedding = LM head ``201,088 x 2880 x 2 = 1,158,266,880`` B each.
    """
    counts = param_counts(model).by_component()
    return {
        name: float(count * model.weight_precision(name, default_precision).bytes_per_element)
        for name, count in counts.items()
    }


def weight_bytes_total(model: ModelSpec, default_precision: Precision | None = None) -> float:
    """All weight bytes held: the sum of :func:`weight_bytes_by_class`."""
    return float(sum(weight_bytes_by_class(model, default_precision).values()))


def moe_weight_bytes(model: ModelSpec, precision: float | Precision) -> tuple[float, float, int, int]:
    """(bytes always read, bytes of one expert summed over MoE layers, E, k) for a step.

    The split feeds :func:`rackmath.core.roofline.weight_bytes_read`, which adds the routed
    experts a batch touches. ``precision``: a :class:`Precision` (each class at its own
    storage precision, :func:`weight_bytes_by_class`) or a uniform bytes per parameter.
    """
    counts = param_counts(model)
    if isinstance(precision, Precision):
        by_class = weight_bytes_by_class(model, precision)
        lookup = 0.0 if counts.lm_head == 0 else by_class["embedding"]  # a lookup reads a few rows
        always = sum(by_class.values()) - by_class["routed_experts"] - lookup
        expert_bytes_per_param = model.weight_precision("routed_experts", precision).bytes_per_element
    else:
        always = counts.always_read * precision
        expert_bytes_per_param = precision
    if not model.is_moe or model.moe is None:
        return always, 0.0, 1, 1
    expert_all_layers = counts.per_expert * model.num_moe_layers * expert_bytes_per_param
    return always, expert_all_layers, model.moe.num_experts, model.moe.experts_per_token
