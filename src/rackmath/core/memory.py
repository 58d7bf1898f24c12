"""The one serving memory account per chip: weights by sharding rule, KV cache, activations.

Every fit check (deployment, search, sweep) calls :func:`serving_memory_per_chip`. What one
chip of the heaviest stage holds:

* attention, dense MLPs, shared experts, LM head, embedding: split ``tp`` ways;
* norm scales and routers: replicated (small);
* routed experts: ``ceil((E + R) / ep)`` expert slots per EP rank (``R`` redundant slots,
  EPLB), each split over the expert-TP degree ``shards / ep`` (:func:`expert_shards`);
  with ``R = 0`` and ``ep | E`` this is ``X / max(ep, tp)``, today's rule;
* KV cache: split over ``dp`` replicas by sequence, over ``min(tp, kv_heads)`` by head
  (MLA caches one latent shared by all heads, so TP cannot split it: ``kv_heads = 1``),
  over ``cp`` by sequence position, and over ``pp`` by layer;
* activations: one layer's live values (Korthikanti et al. 2022, eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import operator_model as opm
from rackmath.core.lazy import cached_property
from rackmath.core.network import DEFAULT_ACTIVATION_BYTES
from rackmath.core.numeric import frozen_record, minimum, num
from rackmath.core.sharding import ShardableModel

FloatArray = NDArray[np.float64]


#: Activation values live per token per hidden unit in one transformer layer: Korthikanti
#: et al. 2022 ("Reducing Activation Recomputation"), eq. 1 gives ``34 s b h`` bytes per
#: layer at 2-byte activations (= 17 values x h per token), attention scores left out
#: (flash attention keeps them on chip). Inference holds about one layer's worth live.
ACTIVATION_VALUES_PER_HIDDEN = 17


#: Tokens of one KV-cache block: vLLM's default block size (``CacheConfig.DEFAULT_BLOCK_SIZE =
#: 16``, vllm/config/cache.py). Context parallelism stripes a sequence's cache over its ranks
#: block by block at the coarsest (vLLM's ``--cp-kv-cache-interleave-size`` equals the block
#: size for disaggregated serving), so a rank with no whole block of a sequence holds nothing.
KV_BLOCK_TOKENS = 16


def max_context_parallel(tokens: ArrayLike) -> FloatArray:
    """The largest CP degree a sequence of ``tokens`` tokens can use: one KV block per rank
    at least, ``floor(tokens / 16)`` (at least 1). A 100-token prompt: 6; 128K: 8,192."""
    return np.maximum(np.floor(num(tokens) / KV_BLOCK_TOKENS), 1.0)


expert_shards = opm.expert_shards  # one rule, beside the operators that use it
expert_slot_factor = opm.expert_slot_factor


def kv_shards(tp: ArrayLike, kv_heads: int) -> FloatArray:
    """Ways TP splits the KV cache: ``min(tp, kv_heads)``; beyond that heads are replicated."""
    return minimum(num(tp), float(kv_heads))


@dataclass(frozen=True)
class ChipWeightBytes:
    """Weight bytes one chip of the heaviest stage holds, by sharding rule."""

    tp_sharded: FloatArray
    replicated: FloatArray
    routed_experts: FloatArray
    vocab: FloatArray  # embedding and/or LM head

    @cached_property
    def total(self) -> FloatArray:
        return np.asarray(self.tp_sharded + self.replicated + self.routed_experts + self.vocab)


def weight_bytes_per_chip(
    m: ShardableModel,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    ep: ArrayLike,
    stage_frac: ArrayLike | None = None,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
) -> ChipWeightBytes:
    """Bytes of weights per chip: ``stage_frac * (A/tp + R + X s/shards) + V/tp``.

    ``A`` = attention, dense MLPs, shared experts; ``R`` = norms, routers; ``X`` = routed
    experts, ``shards`` = :func:`expert_shards` (``max(ep, tp)``, or ``moe_tp x ep``) and
    ``s`` = :func:`expert_slot_factor` (``ceil((E + R_slots)/ep) ep / E``: the busiest EP
    rank's slots over the balanced share; 1 without redundant slots when ``ep | E``);
    ``stage_frac`` = the heaviest stage's share of the layers (``1/P`` when even;
    :func:`stage_fractions`). ``V``: embedding plus head on one stage when ``P = 1``; with
    ``P > 1`` the first stage holds the embedding and the last the head, so the larger.

    Worked number (EPLB): DeepSeek-V3's 256 experts plus 32 redundant on EP = 72 put
    ``ceil(288/72) = 4`` slots on each rank where 256/72 = 3.56 would be the balanced share
    (``s = 4 x 72 / 256 = 1.125``).
    """
    t = np.asarray(tp, float)
    p = np.asarray(pp, float)
    frac = 1.0 / p if stage_frac is None else np.asarray(stage_frac, float)
    head = 0.0 if m.tied_embeddings else m.head_bytes
    vocab = np.where(p > 1, max(m.embedding_bytes, m.head_bytes), m.embedding_bytes + head) / t
    slots = expert_slot_factor(ep, m.experts, redundant_experts)
    terms: tuple[FloatArray, ...] = (
        frac * m.tp_sharded_bytes / t,
        frac * m.replicated_bytes + 0.0 * t,
        frac * m.routed_expert_bytes * slots / expert_shards(t, ep, moe_tp),
        vocab + 0.0 * frac,
    )
    if any(isinstance(x, np.ndarray) and x.ndim for x in terms):  # a grid: every term on its shape
        terms = tuple(np.broadcast_arrays(*terms))
    return ChipWeightBytes(*terms)


def kv_bytes_per_chip(
    kv_bytes_per_sequence: ArrayLike,
    batch: ArrayLike,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    kv_heads: int,
    cp: ArrayLike = 1,
    layer_frac: ArrayLike | None = None,
) -> FloatArray:
    """KV-cache bytes per chip: ``B/dp * kv_seq * layer_frac / (min(tp, H_kv) * cp)``.

    ``B`` sequences in all (over every micro-batch in flight), ``kv_seq`` bytes each over
    all layers; a stage holds ``layer_frac`` (``1/P`` when even) of the layers.
    """
    frac = 1.0 / num(pp) if layer_frac is None else num(layer_frac)
    # the leading value made a NumPy one, the rest divide and multiply into it (the same bits)
    return num(batch) / dp * kv_bytes_per_sequence * frac / (kv_shards(tp, kv_heads) * cp)  # type: ignore[operator,return-value]


def activation_bytes_per_chip(
    tokens_per_replica: ArrayLike,
    hidden: int,
    *,
    tp: ArrayLike,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
) -> FloatArray:
    """Live activations of one layer: ``tokens * 17 h * bytes / tp`` (Korthikanti eq. 1)."""
    return num(tokens_per_replica) * hidden * ACTIVATION_VALUES_PER_HIDDEN * activation_bytes / tp  # type: ignore[operator,return-value]


@dataclass(frozen=True)
class ChipMemory:
    """What one chip of the heaviest stage holds while serving: weights by sharding rule,
    KV cache, live activations (bytes; arrays broadcast over plan and grid)."""

    weights: ChipWeightBytes
    kv_bytes: FloatArray
    activation_bytes: FloatArray

    @cached_property
    def total_bytes(self) -> FloatArray:
        return np.asarray(self.weights.total + self.kv_bytes + self.activation_bytes)


def serving_memory_per_chip(
    m: ShardableModel,
    *,
    batch: ArrayLike,
    kv_bytes_per_sequence: ArrayLike,
    tokens_in_flight: ArrayLike,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    stage_frac: ArrayLike | None = None,
    layer_frac: ArrayLike | None = None,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
    weights: ChipWeightBytes | None = None,
    cp: ArrayLike = 1,
) -> ChipMemory:
    """The one serving memory account every fit check uses (deployment, search, sweep):
    :func:`weight_bytes_per_chip` + :func:`kv_bytes_per_chip` + :func:`activation_bytes_per_chip`
    for ``tokens_in_flight`` over the ``pp x dp`` replicas' micro-batches. Attention data
    parallelism (``dp`` replicas of ``tp`` chips) splits the KV cache ``dp`` ways by sequence
    and the attention weights only ``tp`` ways; redundant expert slots add expert bytes.
    Context parallelism (``cp`` ranks of a DP rank, holding the same weights) splits every
    sequence's KV cache ``cp`` ways by position and the tokens in flight ``cp`` ways.
    ``weights``: :func:`weight_bytes_per_chip` for this plan when the caller already has it
    (they depend on the plan, not on the load)."""
    if weights is None:
        weights = weight_bytes_per_chip(
            m,
            tp=tp,
            pp=pp,
            ep=ep,
            stage_frac=stage_frac,
            moe_tp=moe_tp,
            redundant_experts=redundant_experts,
        )
    return frozen_record(
        ChipMemory,
        weights=weights,
        kv_bytes=kv_bytes_per_chip(
            kv_bytes_per_sequence,
            batch,
            tp=tp,
            pp=pp,
            dp=dp,
            kv_heads=m.kv_heads,
            cp=cp,
            layer_frac=layer_frac,
        ),
        activation_bytes=activation_bytes_per_chip(
            num(tokens_in_flight) / (num(pp) * dp * cp),  # type: ignore[operator]
            m.hidden,
            tp=tp,
            activation_bytes=activation_bytes,
        ),
    )


def lecture_memory_per_chip_bytes(
    total_weight_bytes: ArrayLike,
    expert_chips: ArrayLike,
    stages: ArrayLike,
    microbatch: ArrayLike,
    context: ArrayLike,
    kv_bytes_per_token: ArrayLike,
) -> FloatArray:
    """The lecture's D20: ``c = N_total/(E P) + b len bytes / E`` with ``P`` micro-batches.

    Each stage holds ``1/P`` of the weights over ``E`` chips; it caches its ``1/P`` of the
    layers for all ``P`` micro-batches of ``b`` sequences, ``P * b * len * bytes/P / E``:
    the KV share does not depend on ``P``. (The special case of :func:`weight_bytes_per_chip`
    and :func:`kv_bytes_per_chip` with everything split ``E`` ways and ``B = P b``.)
    """
    e = np.asarray(expert_chips, float)
    return np.asarray(
        np.asarray(total_weight_bytes, float) / (e * np.asarray(stages, float))
        + np.asarray(microbatch, float)
        * np.asarray(context, float)
        * np.asarray(kv_bytes_per_token, float)
        / e,
        dtype=float,
    )


def max_concurrency(
    usable_bytes_per_chip: ArrayLike,
    weight_bytes_per_chip: ArrayLike,
    per_sequence_bytes_per_chip: ArrayLike,
) -> FloatArray:
    """Sequences that fit: ``floor((usable - weights) / bytes one sequence adds per chip)``, >= 0."""
    room = np.asarray(usable_bytes_per_chip, float) - np.asarray(weight_bytes_per_chip, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.floor(room / np.asarray(per_sequence_bytes_per_chip, float))
    return np.asarray(np.maximum(np.nan_to_num(n, nan=0.0, posinf=0.0), 0.0), dtype=float)
