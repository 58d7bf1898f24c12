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

from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import attention as attn
from rackmath.specs.model import ActiveCountRule, AttentionSpec, ModelSpec
from rackmath.specs.precision import Precision
from rackmath.units import FLOPS_PER_MAC

FloatArray = NDArray[np.float64]

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


@lru_cache(maxsize=256)
def param_counts(model: ModelSpec) -> ParamCounts:
    """Parameters of ``model`` by component (counts, not bytes), term by term as in
    Megatron-LM's eq. 2 (Narayanan et al. 2021), generalised to GQA, MLA and MoE:

    * embedding ``V h``; LM head ``V h`` (0 when tied to the embedding);
    * attention ``L x`` :func:`attention_params`; dense MLPs ``L_dense x`` :func:`mlp_params`;
    * routed experts ``L_moe E x`` one expert's MLP (``k`` of the ``E`` active per token);
      shared experts ``L_moe x`` their MLP; router ``L_moe (h E + E if biased)``;
    * norms ``L x norms_per_layer x h + h`` (the final norm).

    Llama 3.1 8B (h = 4096, 32 layers, V = 128,256, untied): 8,030,261,248, as published.
    """
    h = model.hidden_size
    n_layers = model.num_layers
    embedding = model.vocab_size * h
    lm_head = 0 if model.tie_word_embeddings else model.vocab_size * h
    attention = n_layers * attention_params(model.attention, h)
    dense_mlp = 0
    if model.dense_mlp is not None:
        d = model.dense_mlp
        dense_mlp = model.num_dense_mlp_layers * mlp_params(h, d.intermediate_size, d.gated, d.bias)
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
        router = n_moe * (h * m.num_experts + (m.num_experts if m.router_bias else 0))
    norms = n_layers * model.norms_per_layer * h + h  # + the final norm
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


def kv_elements_per_token_per_layer(a: AttentionSpec) -> int:
    """Cached values per token per layer (:func:`rackmath.core.attention.kv_elements_per_token_per_layer`):
    MHA/GQA/MQA ``2 H_kv d`` (Llama-3.1-70B: 2,048); MLA ``r_kv + d_rope`` (DeepSeek-V3: 576)."""
    return attn.kv_elements_per_token_per_layer(a)


@lru_cache(maxsize=256)
def _windows(model: ModelSpec) -> tuple[FloatArray, FloatArray]:
    """(windows of sliding layers, as floats; count of full-attention layers) for broadcasting."""
    windows = np.array([layer.window for layer in model.layers if layer.window is not None], float)
    full = np.array(sum(layer.window is None for layer in model.layers), float)
    windows.flags.writeable = False  # cached: shared by every caller
    full.flags.writeable = False
    return windows, full


def cached_tokens_per_layer_sum(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """``sum over layers of min(context, window_l)``: token-slots the whole stack caches."""
    c = np.asarray(context, dtype=float)
    windows, full = _windows(model)
    sliding = np.minimum(c[..., None], windows).sum(axis=-1) if windows.size else 0.0
    return np.asarray(full * c + sliding, dtype=float)


def kv_bytes_per_token(model: ModelSpec, kv_bytes_per_element: float) -> float:
    """Bytes one token adds to the cache when every layer holds it (context within all windows)."""
    per_layer = kv_elements_per_token_per_layer(model.attention) * kv_bytes_per_element
    return float(per_layer * model.num_layers)


#: Bytes per DSA indexer key value: FP8 (DeepSeek-V3.2-Exp report, 2025, §2.1).
INDEXER_KEY_BYTES = 1.0


def read_tokens_per_layer_sum(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """``sum over layers of min(context, window_l, top_k)``: keys one decode query reads.

    Equals :func:`cached_tokens_per_layer_sum` for dense attention; DSA (``index_top_k``)
    bounds every layer at ``top_k`` (DeepSeek-V3.2 at 128K: 61 x 2,048, not 61 x 131,072).
    """
    top_k = model.attention.index_top_k
    if not top_k:
        return cached_tokens_per_layer_sum(model, context)
    c = np.asarray(context, dtype=float)
    windows, full = _windows(model)
    bounded = np.minimum(windows, top_k) if windows.size else windows
    sliding = np.minimum(c[..., None], bounded).sum(axis=-1) if windows.size else 0.0
    return np.asarray(full * np.minimum(c, top_k) + sliding, dtype=float)


def kv_bytes_per_sequence(model: ModelSpec, context: ArrayLike, kv_bytes_per_element: float) -> FloatArray:
    """KV-cache bytes one sequence *holds* at ``context`` tokens.

    ``sum_l  elems_per_token_l * bytes * min(context, window_l)`` (+ the DSA indexer's FP8
    key per token and layer): full-attention layers grow linearly in context;
    sliding-window layers stop at their window.
    """
    a = model.attention
    per_layer = attn.kv_elements_per_token_per_layer(a) * kv_bytes_per_element
    per_layer += attn.indexer_elements_per_token_per_layer(a) * INDEXER_KEY_BYTES
    return per_layer * cached_tokens_per_layer_sum(model, context)


def kv_bytes_read_per_sequence(
    model: ModelSpec, context: ArrayLike, kv_bytes_per_element: float
) -> FloatArray:
    """KV-cache bytes one decode step *reads* for one sequence at ``context`` tokens.

    Dense attention reads what it holds. DSA reads the indexer key of every held token
    and the full cache entry of the ``top_k`` selected ones:
    ``sum_l (idx_bytes min(c, w_l) + kv_elems bytes min(c, w_l, top_k))``.
    """
    a = model.attention
    per_layer = attn.kv_elements_per_token_per_layer(a) * kv_bytes_per_element
    indexer = attn.indexer_elements_per_token_per_layer(a) * INDEXER_KEY_BYTES
    read = per_layer * read_tokens_per_layer_sum(model, context)
    return np.asarray(read + indexer * cached_tokens_per_layer_sum(model, context), dtype=float)


def decode_flops_per_token(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """FLOPs to generate one token that attends to ``context`` cached tokens.

    ``2 * P_matmul_active + 2 * H * (d_qk + d_v) * sum_l min(context, window_l)``
    (MLA in its absorbed form; see the module docstring).
    """
    return np.asarray(
        FLOPS_PER_MAC * param_counts(model).matmul_active + decode_attention_flops_per_token(model, context),
        dtype=float,
    )


def decode_attention_flops_per_token(model: ModelSpec, context: ArrayLike) -> FloatArray:
    """Attention-core FLOPs of one decode token, all layers:
    ``2 H (d_qk + d_v) sum_l read_l`` plus DSA's indexer scoring every held key,
    ``2 H_idx d_idx sum_l held_l`` (0 without DSA)."""
    a = model.attention
    per_visible = attn.flops_per_visible_token(a, decode=True)
    attention = per_visible * read_tokens_per_layer_sum(model, context)
    if a.index_top_k:
        index = FLOPS_PER_MAC * a.index_n_heads * a.index_head_dim
        attention = attention + index * cached_tokens_per_layer_sum(model, context)
    return np.asarray(attention, dtype=float)


def causal_visible_pairs(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """``sum_l sum_{i=1..L} min(i, window_l)``: query-key pairs of a causal prefill, all layers.

    Full layers: ``L(L+1)/2``. A window ``w < L``: ``w(w+1)/2 + (L-w) w``.
    """
    n = np.asarray(length, dtype=float)
    windows, full = _windows(model)
    pairs = full * n * (n + 1) / 2
    if windows.size:
        w = np.minimum(n[..., None], windows)
        pairs = pairs + (w * (w + 1) / 2 + (n[..., None] - w) * w).sum(axis=-1)
    return np.asarray(pairs, dtype=float)


def prefill_flops_per_sequence(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """FLOPs to prefill one prompt of ``length`` tokens (causal attention, no prior cache)."""
    n = np.asarray(length, dtype=float)
    matmul = FLOPS_PER_MAC * param_counts(model).matmul_active * n
    per_visible = attn.flops_per_visible_token(model.attention, decode=False)
    attention = per_visible * causal_visible_pairs(model, n)
    return np.asarray(matmul + attention, dtype=float)


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
    ``default_precision`` requantizes every class uniformly.

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
