"""Attention kinds as one registry: weights, KV cache held, KV cache read, FLOPs.

Each :class:`~rackmath.specs.model.AttentionKind` has one :class:`AttentionRule`; a new
kind is one entry here, not branches across files. Per layer (window ``w`` from the layer,
context ``c`` tokens already cached):

* ``params(a, h)``: weights of one attention block;
* ``kv_elements(a)``: values one held token keeps in this layer's cache;
* ``held(a, w, c)`` / ``read(a, w, c)``: tokens the layer *holds* and tokens one decode
  query *reads*; ``pairs(a, w, n)``: query-key pairs of a causal prefill of ``n`` tokens;
* ``flops_per_visible(a, decode)``: FLOPs one query spends per key it attends to,
  ``2 H (d_qk + d_v)`` (scores ``Q K^T`` plus the weighted sum ``A V``, 2 per MAC);
* ``state_elements(a)`` / ``state_flops(a)``: a fixed per-sequence state (linear
  attention), rewritten every token whatever the context, and the FLOPs of that update;
* ``out_width(a)``: the input width of the output projection (``H d_v``).

What a layer holds and what a step reads differ: a sliding window bounds both at ``w``;
chunked local attention (Llama 4) holds at most one chunk ``C`` and reads at most ``C``
(the last token of a chunk reads ``C``; averaged over a chunk about ``C/2``: ``read`` is
that bound); DeepSeek-V3.2's sparse attention (DSA) holds the whole context but reads only
the ``top_k`` tokens its indexer selects, plus the indexer's own FP8 key of every held
token (DeepSeek-V3.2-Exp report, 2025: top-k = 2,048, 64 indexer heads of 128); a gated
delta net (Qwen3-Next) holds no cache, only an ``H_v x d_k x d_v`` state and a short
convolution window, read and rewritten every step.

DSA as the engines run it (TensorRT-LLM tech blog 15, "Optimizing DeepSeek-V3.2 on NVIDIA
Blackwell GPUs", 2025): the indexer scores keys only when a sequence holds more than
``top_k`` of them (:func:`indexed_tokens`; at or below ``top_k`` every token is selected and
the engine skips the scoring and the top-k, its "fast path for short sequences", PR-9524),
and the sparse MLA core runs in MQA mode (absorbed, every head against the shared 576-wide
latent) in prefill as in decode, where dense MLA prefills decompressed (MHA mode).

Sources: Vaswani et al. 2017 (MHA), Ainslie et al. 2023 (GQA), Shazeer 2019 (MQA),
DeepSeek-V2 report §2.1 (MLA; absorbed decode as in DeepSeek's inference code and FlashMLA),
Meta's Llama 4 model card and ``Llama4TextConfig`` (chunked attention), Yang et al. 2024
"Gated Delta Networks" and ``Qwen3NextGatedDeltaNet`` (state shape), Bercovich et al. 2024
"Puzzle" (Nemotron-NAS no-op and linear-replacement blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core.numeric import minimum, num
from rackmath.specs.model import AttentionKind, AttentionSpec
from rackmath.units import FLOPS_PER_MAC

FloatArray = NDArray[np.float64]
Tokens = Callable[[AttentionSpec, "float | None", FloatArray], FloatArray]

#: Bytes per DSA indexer key value: FP8 (DeepSeek-V3.2-Exp report, 2025, §2.1).
INDEXER_KEY_BYTES = 1.0

#: Matrix-vector passes over a gated-delta-net head state per token: read out ``S^T k``,
#: the rank-1 delta update ``S += beta k (v - S^T k)^T``, read out ``S^T q`` (Yang et al.
#: 2024, eq. 10; the decay's scaling is folded in). Each is ``d_k d_v`` MACs.
DELTA_RULE_PASSES = 3


def _zero(*_: object) -> int:
    return 0


def _no_tokens(a: AttentionSpec, window: float | None, c: FloatArray) -> FloatArray:
    return np.zeros_like(c)


def _window_tokens(a: AttentionSpec, window: float | None, c: FloatArray) -> FloatArray:
    """``min(c, w)``: a full layer holds (and reads) every token, a sliding one its window."""
    return c if window is None else minimum(c, float(window))


def _window_pairs(n: FloatArray, window: float | None) -> FloatArray:
    """``sum_{i=1..n} min(i, w)`` = ``n(n+1)/2`` (full), ``w(w+1)/2 + (n-w) w`` (window ``w < n``)."""
    if window is None:
        return n * (n + 1) / 2
    w = np.minimum(n, float(window))
    return w * (w + 1) / 2 + (n - w) * w


def top_k_gather(top_k: float, length: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The work a DSA prefill kernel adds when it runs every query over all ``top_k`` slots of
    its index list, the selected tokens and the padding alike, each slot's latent gathered from
    the cache for that query (the chips of
    :data:`rackmath.catalog.kernel_tables.DSA_PREFILL_GATHERS_TOP_K`), per sequence of ``n``
    tokens per layer: the query-slot pairs beyond the causal selection's
    ``sum_i min(i, top_k)`` and the slots gathered::

        extra_pairs = n top_k - sum_{i=1..n} min(i, top_k),   slots = n top_k

    Each pair costs what a selected one does (``2 H (d_qk + d_v)`` FLOPs absorbed) and each
    slot reads its ``d_qk``-wide latent (576 values for DeepSeek-V3.2). Worked number: n =
    1,024, top_k = 2,048: 2,097,152 slots, 1,572,352 pairs beyond the 524,800 causal ones."""
    n = num(length)
    slots = n * float(top_k)
    return np.asarray(slots - _window_pairs(n, float(top_k))), np.asarray(slots)


def _top_k(a: AttentionSpec, window: float | None) -> float | None:
    """The tighter of the window and DSA's top-k (None: neither bounds; a 0 or None bounds
    nothing)."""
    top_k = a.index_top_k
    if window and top_k:
        return float(min(window, top_k))
    bound = window or top_k
    return float(bound) if bound else None


def _standard_params(a: AttentionSpec, hidden: int) -> int:
    """``W_q: h x (H d)`` (x2 with an output gate), ``W_k, W_v: h x (H_kv d)``,
    ``W_o: (H d) x h``, biases, q/k norms, sinks."""
    q_width = a.num_heads * a.head_dim
    kv_width = a.num_kv_heads * a.head_dim
    gate = q_width if a.output_gate else 0
    weights = hidden * (q_width + gate) + 2 * hidden * kv_width + q_width * hidden
    biases = (q_width + 2 * kv_width if a.qkv_bias else 0) + (hidden if a.output_bias else 0)
    norms = 2 * a.head_dim if a.qk_norm else 0
    sinks = a.num_heads if a.sinks else 0
    return weights + biases + norms + sinks


def _mla_params(a: AttentionSpec, hidden: int) -> int:
    """MLA (DeepSeek-V2 §2.1): queries through a rank-``r_q`` bottleneck (direct when
    ``q_lora_rank`` is null), keys and values through the cached latent ``r_kv + d_rope``
    then ``r_kv x H (d_nope + d_v)``, RMSNorm scales on both latents, output ``H d_v x h``,
    plus DSA's indexer when present."""
    heads = a.num_heads
    q_out = heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
    q = hidden * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * q_out if a.q_lora_rank else hidden * q_out
    kv = (
        hidden * (a.kv_lora_rank + a.qk_rope_head_dim)
        + a.kv_lora_rank
        + a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim)
    )
    return q + kv + heads * a.v_head_dim * hidden + _indexer_params(a, hidden)


def _indexer_params(a: AttentionSpec, hidden: int) -> int:
    """DSA's lightning indexer (DeepSeek-V3.2 inference ``Indexer``): queries from the query
    latent ``r_q x H_idx d_idx``, one key ``h x d_idx`` with a LayerNorm (scale and bias,
    ``2 d_idx``), head weights ``h x H_idx``. DeepSeek-V3.2: 12,582,912 + 917,504 + 256 +
    458,752 = 13,959,424 per layer. 0 without DSA."""
    if not a.index_top_k:
        return 0
    q_src = a.q_lora_rank or hidden
    return (
        q_src * a.index_n_heads * a.index_head_dim
        + hidden * a.index_head_dim
        + 2 * a.index_head_dim
        + hidden * a.index_n_heads
    )


def _mla_read(a: AttentionSpec, window: float | None, c: FloatArray) -> FloatArray:
    """``min(c, w, top_k)``: DSA reads only the selected tokens' cache entries."""
    bound = _top_k(a, window)
    return c if bound is None else minimum(c, bound)


def _mla_pairs(a: AttentionSpec, window: float | None, n: FloatArray) -> FloatArray:
    """Each prefill query attends to ``min(i, w, top_k)`` keys."""
    return _window_pairs(n, _top_k(a, window))


def _standard_pairs(a: AttentionSpec, window: float | None, n: FloatArray) -> FloatArray:
    return _window_pairs(n, window)


def _standard_flops(a: AttentionSpec, decode: bool) -> int:
    return FLOPS_PER_MAC * a.num_heads * (a.head_dim + a.v_head_dim)


def _absorbed_flops(a: AttentionSpec) -> int:
    """``2 H (2 r_kv + d_rope)``: every head scores the ``r_kv + d_rope`` latent and sums
    ``r_kv``-wide latent values (DeepSeek-V3: 2 x 128 x 1,088 = 278,528 per key)."""
    return FLOPS_PER_MAC * a.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)


def _dsa_flops(a: AttentionSpec, decode: bool) -> int:
    """DSA's sparse MLA runs absorbed (MQA mode) in decode and prefill alike (module docstring)."""
    return _absorbed_flops(a)


def _mla_flops(a: AttentionSpec, decode: bool) -> int:
    """Absorbed decode: every head scores against the latent (``d_qk = r_kv + d_rope = 576``)
    and sums latent values (``d_v = r_kv = 512``); prefill runs decompressed
    (``d_qk = d_nope + d_rope = 192``, ``d_v = 128``)."""
    if decode:
        return _absorbed_flops(a)
    return FLOPS_PER_MAC * a.num_heads * (a.head_dim + a.v_head_dim)


def _chunk_tokens(a: AttentionSpec, window: float | None, c: FloatArray) -> FloatArray:
    """``min(c, C)``: one chunk at most is held, and read by its last token."""
    return minimum(_window_tokens(a, window, c), float(a.chunk_size))


def _chunk_pairs(a: AttentionSpec, window: float | None, n: FloatArray) -> FloatArray:
    """``q C(C+1)/2 + r(r+1)/2`` with ``n = q C + r``: each chunk is causal on its own
    (8,192-token chunks at n = 32,768: 4 x 33,558,528 = 134,234,112 pairs)."""
    size = float(a.chunk_size)
    full, rest = np.floor(n / size), np.mod(n, size)
    return full * size * (size + 1) / 2 + rest * (rest + 1) / 2


def _linear_key_dim(a: AttentionSpec) -> int:
    return a.linear_num_key_heads * a.linear_key_head_dim


def _linear_value_dim(a: AttentionSpec) -> int:
    return a.linear_num_value_heads * a.linear_value_head_dim


def _linear_params(a: AttentionSpec, hidden: int) -> int:
    """Gated delta net (``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz: h x (2 K + 2 V)``,
    ``in_proj_ba: h x 2 H_v``, a depthwise conv of ``k`` taps over ``2K + V`` channels,
    ``dt_bias`` and ``A_log`` (``H_v`` each), a gated RMSNorm of ``d_v``, ``out_proj: V x h``
    (``K = H_k d_k``, ``V = H_v d_v``). Qwen3-Next-80B (h 2048, 16 x 128 keys, 32 x 128
    values, k = 4): 33,718,464 per layer."""
    k, v = _linear_key_dim(a), _linear_value_dim(a)
    heads = a.linear_num_value_heads
    projections = hidden * (2 * k + 2 * v) + hidden * 2 * heads + v * hidden
    conv = (2 * k + v) * a.linear_conv_kernel
    return projections + conv + 2 * heads + a.linear_value_head_dim


def _linear_state(a: AttentionSpec) -> int:
    """``H_v d_k d_v`` (the delta-rule state) ``+ (k - 1)(2K + V)`` (the conv window).
    Qwen3-Next: 32 x 128 x 128 + 3 x 8,192 = 548,864 values per layer."""
    heads = a.linear_num_value_heads
    recurrent = heads * a.linear_key_head_dim * a.linear_value_head_dim
    conv = (a.linear_conv_kernel - 1) * (2 * _linear_key_dim(a) + _linear_value_dim(a))
    return recurrent + conv


def _linear_state_flops(a: AttentionSpec) -> int:
    """``2 x 3 H_v d_k d_v`` per token (:data:`DELTA_RULE_PASSES`), whatever the context."""
    heads = a.linear_num_value_heads
    return FLOPS_PER_MAC * DELTA_RULE_PASSES * heads * a.linear_key_head_dim * a.linear_value_head_dim


@dataclass(frozen=True)
class AttentionRule:
    """The facts every attention kind must state (see the module docstring)."""

    params: Callable[[AttentionSpec, int], int]
    kv_elements: Callable[[AttentionSpec], int]
    flops_per_visible: Callable[[AttentionSpec, bool], int]
    #: heads tensor parallelism can split the cache over (MLA's latent is shared: 1)
    kv_shardable_heads: Callable[[AttentionSpec], int]
    held: Tokens = _window_tokens
    read: Tokens = _window_tokens
    pairs: Tokens = _standard_pairs
    state_elements: Callable[[AttentionSpec], int] = _zero
    state_flops: Callable[[AttentionSpec], int] = _zero
    out_width: Callable[[AttentionSpec], int] = lambda a: a.num_heads * a.v_head_dim
    #: every query head of a sequence reads one shared cached latent (MLA absorbed): the decode
    #: kernel is a dense product, compute-bound at large batch (see operators.ChipRates.latent_decode)
    latent_decode: bool = False
    #: the prefill kernel runs absorbed too (DSA's sparse MLA: MQA mode in both phases); dense
    #: MLA prefills decompressed, a KV head per query head
    latent_prefill: bool = False


def _gqa_kv(a: AttentionSpec) -> int:
    """A key and a value per KV head: ``2 H_kv d`` (Llama-3.1-70B: 2 x 8 x 128 = 2,048)."""
    return 2 * a.num_kv_heads * a.head_dim


def _mla_kv(a: AttentionSpec) -> int:
    """The latent and the shared RoPE key: ``r_kv + d_rope`` (DeepSeek-V3: 512 + 64 = 576)."""
    return a.kv_lora_rank + a.qk_rope_head_dim


_STANDARD = AttentionRule(_standard_params, _gqa_kv, _standard_flops, lambda a: a.num_kv_heads)
_MLA = AttentionRule(
    _mla_params, _mla_kv, _mla_flops, lambda a: 1, read=_mla_read, pairs=_mla_pairs, latent_decode=True
)

REGISTRY: dict[AttentionKind, AttentionRule] = {
    AttentionKind.MHA: _STANDARD,
    AttentionKind.GQA: _STANDARD,
    AttentionKind.MQA: _STANDARD,
    AttentionKind.MLA: _MLA,
    # MLA plus the lightning indexer (its weights, key and top-k bound live in the MLA rule's
    # terms, keyed on ``index_top_k``), absorbed in prefill as in decode
    AttentionKind.DSA: AttentionRule(
        _mla_params,
        _mla_kv,
        _dsa_flops,
        lambda a: 1,
        read=_mla_read,
        pairs=_mla_pairs,
        latent_decode=True,
        latent_prefill=True,
    ),
    AttentionKind.CHUNKED: AttentionRule(
        _standard_params,
        _gqa_kv,
        _standard_flops,
        lambda a: a.num_kv_heads,
        held=_chunk_tokens,
        read=_chunk_tokens,
        pairs=_chunk_pairs,
    ),
    AttentionKind.LINEAR: AttentionRule(
        _linear_params,
        _zero,
        _zero,
        lambda a: a.linear_num_value_heads,
        held=_no_tokens,
        read=_no_tokens,
        pairs=_no_tokens,
        state_elements=_linear_state,
        state_flops=_linear_state_flops,
        out_width=_linear_value_dim,
    ),
    # One h x h matmul in place of attention: weights and their FLOPs, no cache.
    AttentionKind.LINEAR_PROJ: AttentionRule(
        lambda a, h: h * h,
        _zero,
        _zero,
        lambda a: 1,
        held=_no_tokens,
        read=_no_tokens,
        pairs=_no_tokens,
        out_width=_zero,
    ),
    AttentionKind.NONE: AttentionRule(
        _zero, _zero, _zero, lambda a: 1, held=_no_tokens, read=_no_tokens, pairs=_no_tokens, out_width=_zero
    ),
}


def rule(a: AttentionSpec) -> AttentionRule:
    return REGISTRY[a.kind]


def params(a: AttentionSpec, hidden: int) -> int:
    """Weights of one attention block (see each kind's rule)."""
    return rule(a).params(a, hidden)


def kv_elements_per_token_per_layer(a: AttentionSpec) -> int:
    """Cached values per token per layer (the DSA indexer key excluded: see
    :func:`indexer_elements_per_token_per_layer`)."""
    return rule(a).kv_elements(a)


def indexer_elements_per_token_per_layer(a: AttentionSpec) -> int:
    """DSA's indexer key per token per layer (``index_head_dim``; 0 without DSA)."""
    return a.index_head_dim if a.index_top_k else 0


def indexer_flops_per_key(a: AttentionSpec) -> int:
    """DSA's indexer scores a key with ``2 H_idx d_idx`` FLOPs per query (0 without DSA):
    DeepSeek-V3.2, 2 x 64 x 128 = 16,384."""
    return FLOPS_PER_MAC * a.index_n_heads * a.index_head_dim if a.index_top_k else 0


def indexed_tokens(a: AttentionSpec, window: float | None, context: ArrayLike) -> FloatArray:
    """Keys DSA's indexer scores (and whose FP8 keys it reads) for one decode query: every
    held token when more than ``top_k`` are held, none otherwise (every token is selected
    then: the engines skip the scoring and the top-k, module docstring). DeepSeek-V3.2 at
    2,048 tokens: 0; at 2,049: 2,049. 0 without DSA."""
    c = num(context)
    if not a.index_top_k:
        return np.zeros_like(c) if type(c) is np.ndarray else 0.0  # type: ignore[return-value]
    held = num(rule(a).held(a, window, c))
    return np.where(held > a.index_top_k, held, 0.0)[()]


def indexer_pairs(a: AttentionSpec, window: float | None, length: ArrayLike) -> FloatArray:
    """Query-key pairs DSA's indexer scores in a causal prefill of ``n`` tokens: ``n(n+1)/2``
    when ``n > top_k`` (every query against every earlier key; the top-k then bounds the
    core), 0 at or below ``top_k`` (the short-sequence fast path). 0 without DSA.
    Worked number: n = 10,000 -> 50,005,000; n = 2,048 -> 0."""
    n = np.asarray(length, float)
    if not a.index_top_k:
        return np.zeros_like(n)
    return np.asarray(np.where(n > a.index_top_k, n * (n + 1) / 2, 0.0), dtype=float)


def flops_per_visible_token(a: AttentionSpec, *, decode: bool) -> int:
    """``2 H (d_qk + d_v)``: FLOPs per query token per visible key, one layer."""
    return rule(a).flops_per_visible(a, decode)


def kv_shardable_heads(a: AttentionSpec) -> int:
    """KV heads tensor parallelism can split: ``H_kv`` (MLA: 1, one latent for all heads)."""
    return rule(a).kv_shardable_heads(a)


def held_tokens(a: AttentionSpec, window: float | None, context: ArrayLike) -> FloatArray:
    """Tokens one layer caches at ``context`` (window, chunk; 0 for a state-only layer)."""
    return num(rule(a).held(a, window, num(context)))


def read_tokens(a: AttentionSpec, window: float | None, context: ArrayLike) -> FloatArray:
    """Tokens one decode query reads in one layer (``min(context, window, chunk, top_k)``)."""
    return num(rule(a).read(a, window, num(context)))


def prefill_pairs(a: AttentionSpec, window: float | None, length: ArrayLike) -> FloatArray:
    """Query-key pairs one layer's attention core computes in a causal prefill of ``length``."""
    return np.asarray(rule(a).pairs(a, window, np.asarray(length, float)), dtype=float)


def state_elements_per_layer(a: AttentionSpec) -> int:
    """Values of a fixed per-sequence state (linear attention), whatever the context."""
    return rule(a).state_elements(a)


def state_flops_per_token(a: AttentionSpec) -> int:
    """FLOPs of one token's state update (linear attention; 0 otherwise)."""
    return rule(a).state_flops(a)


def out_width(a: AttentionSpec) -> int:
    """Input width of the output projection (``H d_v``; 0 where there is none)."""
    return rule(a).out_width(a)
