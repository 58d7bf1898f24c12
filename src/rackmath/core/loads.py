"""What one step asks of a model: decode rows, prompt chunks, their attention and KV traffic.

A :class:`StepLoad` is the work of one step before any plan or chip is chosen; the operators
(:mod:`rackmath.core.operators`) split it over a plan (:func:`rank_share`,
:func:`microbatch_tokens`: whole sequences per rank and per pipeline micro-batch) and cost it
on a chip. Fields keep their own shapes (batch-only, context-only) and broadcast where they meet.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import architecture as arch
from rackmath.core.numeric import ceil, frozen_record, num
from rackmath.specs.model import ModelSpec

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class StepLoad:
    """What one step processes, over the whole deployment (arrays broadcast together).

    ``decode_sequences`` sequences each make one token, attending to their cache
    (``decode_attention_flops`` FLOPs and ``decode_kv_read_bytes`` bytes each);
    ``prefill_sequences`` prompts of ``prefill_length`` tokens are processed
    (``prefill_attention_flops`` FLOPs and ``prefill_kv_write_bytes`` cache bytes each).
    Build with :func:`decode_load`, :func:`prefill_load` or :func:`mixed_load`.
    """

    decode_sequences: FloatArray
    decode_attention_flops: FloatArray
    decode_kv_read_bytes: FloatArray
    decode_kv_write_bytes: FloatArray
    prefill_sequences: FloatArray
    prefill_length: FloatArray
    prefill_attention_flops: FloatArray
    prefill_kv_write_bytes: FloatArray
    #: cache bytes each prompt reads (a cached prefix its suffix attends to); none by default
    prefill_kv_read_bytes: FloatArray = field(default_factory=lambda: np.zeros(()))
    #: each decoding sequence's context (the attention kernel's depth); 0 = not stated
    decode_context: FloatArray = field(default_factory=lambda: np.zeros(()))
    #: query rows per decoding sequence (``q = k + 1`` in a speculative verify step, else 1):
    #: ``decode_sequences / decode_queries`` sequences, whole ones per rank
    decode_queries: FloatArray = field(default_factory=lambda: cast(FloatArray, 1.0))
    #: whether the prompts are whole requests (a batch of prompts: a pipeline micro-batch holds
    #: whole ones, so one prompt on ``P`` stages is one micro-batch) or a pooled share of prompt
    #: tokens that splits evenly (continuous batching's average ``B/O`` prompts a step, the
    #: simulator's chunk budget)
    prefill_whole: bool = False

    def halved(self) -> StepLoad:
        """Half of this step's sequences (a two-batch-overlap micro-batch); per-sequence work,
        lengths and contexts unchanged."""
        return replace(
            self, decode_sequences=self.decode_sequences / 2.0, prefill_sequences=self.prefill_sequences / 2.0
        )

    @property
    def tokens(self) -> FloatArray:
        return self.decode_sequences + self.prefill_sequences * self.prefill_length

    @property
    def attention_flops(self) -> FloatArray:
        return (
            self.decode_sequences * self.decode_attention_flops
            + self.prefill_sequences * self.prefill_attention_flops
        )

    @property
    def kv_bytes(self) -> FloatArray:
        """Cache bytes read and written, all sequences and layers."""
        return np.asarray(
            self.decode_sequences * (self.decode_kv_read_bytes + self.decode_kv_write_bytes)
            + self.prefill_sequences * (self.prefill_kv_write_bytes + self.prefill_kv_read_bytes)
        )


_NONE = cast(FloatArray, 0.0)  # a term the load does not have; broadcasts against any grid
_ONE = cast(FloatArray, 1.0)  # a factor of 1 (the cache read shared by one query)


@lru_cache(maxsize=256)
def _one_token_kv_bytes(model: ModelSpec, kv_bytes_per_element: float) -> FloatArray:
    """Cache bytes one new token writes (a per-model constant)."""
    return num(arch.kv_bytes_per_sequence(model, 1.0, kv_bytes_per_element))


def decode_load(
    model: ModelSpec,
    batch: ArrayLike,
    context: ArrayLike,
    kv_bytes_per_element: float,
    tokens_per_sequence: ArrayLike = 1.0,
) -> StepLoad:
    """``batch`` sequences at ``context`` cached tokens each make one token.

    Fields keep their own shapes (batch-only, context-only) and broadcast where combined,
    so a batch x context grid costs full-grid arithmetic only where both meet (attention).

    ``tokens_per_sequence = q > 1`` is a speculative verification step: each sequence runs
    ``q = k + 1`` query tokens (its last token and ``k`` drafts) in one pass. The GEMMs see
    ``B q`` tokens (weights still read once); query ``i`` attends to ``L + i`` tokens, so
    attention FLOPs are ``q`` times those at the mean context ``L + (q - 1)/2``; the cache
    is read once per sequence (the verification kernel shares it over the ``q`` queries),
    so ``decode_sequences = B q`` rows carry ``1/q`` of the sequence's read each; ``q``
    tokens' KV is written. ``q = 1`` is the plain decode step.
    """
    b = num(batch)
    c = num(context)
    q = num(tokens_per_sequence)
    rows, attention_context, read_share = b, c, _ONE
    if (q != 1.0) if type(q) is not np.ndarray else (q != 1.0).any():  # a verify step
        rows, attention_context, read_share = b * q, c + (q - 1.0) / 2.0, 1.0 / q
    return frozen_record(  # every field named: the prefill terms the load does not have are 0
        StepLoad,
        decode_sequences=rows,
        decode_attention_flops=num(arch.decode_attention_flops_per_token(model, attention_context)),
        decode_kv_read_bytes=num(
            arch.kv_bytes_read_per_sequence(model, c, kv_bytes_per_element) * read_share
        ),
        decode_kv_write_bytes=_one_token_kv_bytes(model, kv_bytes_per_element),
        prefill_sequences=_NONE,
        prefill_length=_NONE,
        prefill_attention_flops=_NONE,
        prefill_kv_write_bytes=_NONE,
        prefill_kv_read_bytes=_NONE,
        decode_context=c,
        decode_queries=q,
        prefill_whole=False,
    )


def prefill_attention_flops_per_sequence(model: ModelSpec, length: ArrayLike) -> FloatArray:
    """Causal attention FLOPs of one prompt: ``2 H (d_qk + d_v) sum_l sum_i min(i, w_l)``
    (per layer kind: :func:`rackmath.core.architecture.prefill_attention_flops_per_sequence`)."""
    return arch.prefill_attention_flops_per_sequence(model, length)


def prefill_load(
    model: ModelSpec,
    batch: ArrayLike,
    length: ArrayLike,
    kv_bytes_per_element: float,
    cached: ArrayLike = 0.0,
    *,
    whole: bool = False,
) -> StepLoad:
    """``batch`` prompts of ``length`` tokens each (no prior cache); their KV is written.

    ``whole``: the prompts are whole requests, never split over pipeline micro-batches
    (:attr:`StepLoad.prefill_whole`); by default a share of prompt tokens that splits evenly.

    ``cached = P > 0``: the first ``P`` tokens' KV is already cached (a prefix-cache hit), so
    only the ``L - P`` suffix tokens run through the layers; their attention covers the pairs
    of positions ``P+1..L`` (``pairs(L) - pairs(P)``), they read the prefix's cache once
    (:func:`rackmath.core.architecture.kv_bytes_read_per_sequence` at ``P``) and write
    ``held(L) - held(P)`` cache bytes. ``P = 0`` is the plain prefill.
    """
    n = num(length)
    p = num(cached)
    cold = bool(np.all(p == 0.0))  # the plain prefill: skip the prefix terms (all zero)
    kvb = kv_bytes_per_element
    return StepLoad(
        decode_sequences=_NONE,
        decode_attention_flops=_NONE,
        decode_kv_read_bytes=_NONE,
        decode_kv_write_bytes=_NONE,
        prefill_sequences=num(batch),
        prefill_length=n if cold else n - p,
        prefill_attention_flops=num(prefill_attention_flops_per_sequence(model, n))
        - (0.0 if cold else prefill_attention_flops_per_sequence(model, p)),
        prefill_kv_write_bytes=num(arch.kv_bytes_per_sequence(model, n, kvb))
        - (0.0 if cold else arch.kv_bytes_per_sequence(model, p, kvb)),
        prefill_kv_read_bytes=_NONE if cold else arch.kv_bytes_read_per_sequence(model, p, kvb),
        prefill_whole=whole,
    )


def mixed_load(
    model: ModelSpec,
    batch: ArrayLike,
    input_len: ArrayLike,
    output_len: ArrayLike,
    kv_bytes_per_element: float,
    hit_frac: ArrayLike = 0.0,
) -> StepLoad:
    """Continuous batching with chunked prefill, in steady state.

    ``B`` sequences decode at the mean context ``I + O/2``; to keep ``B`` in flight ``B/O``
    new prompts of ``I`` tokens start each step: ``tokens = B (1 + I/O)``. With a prefix-cache
    hit rate ``h`` each new prompt's first ``h I`` tokens are cached (:func:`prefill_load`'s
    ``cached``): ``tokens = B (1 + (1 - h) I/O)``; the decode context, and so the KV each
    sequence holds, is still ``I + O/2``. Worked number: ``B = 64``, ``I = 2000``, ``O = 500``,
    ``h = 0.5``: ``64 + (64 / 500) x 1000 = 192`` tokens a step (``320`` without the cache).
    """
    b = np.asarray(batch, float)
    i = np.asarray(input_len, float)
    o = np.asarray(output_len, float)
    dec = decode_load(model, b, i + o / 2.0, kv_bytes_per_element)
    pre = prefill_load(model, b / o, i, kv_bytes_per_element, cached=np.asarray(hit_frac, float) * i)
    return replace(
        dec,
        prefill_sequences=pre.prefill_sequences,
        prefill_length=pre.prefill_length,
        prefill_attention_flops=pre.prefill_attention_flops,
        prefill_kv_write_bytes=pre.prefill_kv_write_bytes,
        prefill_kv_read_bytes=pre.prefill_kv_read_bytes,
    )


# ----------------------------------------------------------------------------- a rank's share


def whole(sequences: FloatArray, ways: FloatArray) -> FloatArray:
    """Sequences the busiest of ``ways`` ranks holds: ``ceil(sequences / ways)`` (whole
    sequences; a fractional count, an average load, is split as it is)."""
    share = sequences / ways
    if type(ways) is not np.ndarray and ways == 1.0:
        return share
    if type(sequences) is not np.ndarray and type(ways) is not np.ndarray:  # one point
        return ceil(share) if sequences == float(np.floor(sequences)) else share
    return np.asarray(np.where(sequences == np.floor(sequences), np.ceil(share), share))


class RankShare(NamedTuple):
    """What one DP rank runs of one micro-batch: decode query rows, prompts and prompt tokens."""

    decode_rows: FloatArray
    prompts: FloatArray
    prompt_tokens: FloatArray


def rank_share(load: StepLoad, pp: FloatArray, dp: FloatArray) -> RankShare:
    """The busiest DP rank's share of one micro-batch (``P = pp`` micro-batches, ``dp`` ranks):
    ``ceil(B / (P dp))`` whole decode sequences (:func:`whole`); prompts whole per micro-batch
    where the load's are whole requests (:attr:`StepLoad.prefill_whole`: one 128K prompt on
    ``pp = 4`` is one micro-batch through four stages, not four quarter-prompts in flight),
    ``ceil(S / P)`` of them shared by the ``dp`` ranks, else ``S / (P dp)`` (an average load
    splits evenly)."""
    p, d = pp, dp
    queries = load.decode_queries
    decode_rows = whole(load.decode_sequences / queries, p * d) * queries
    if load.prefill_whole:
        per_microbatch = whole(load.prefill_sequences, p)
        prompts = per_microbatch / d
        prompt_tokens = per_microbatch * load.prefill_length / d
    else:
        prompts = load.prefill_sequences / (p * d)
        prompt_tokens = load.prefill_sequences * load.prefill_length / (p * d)
    return RankShare(decode_rows, prompts, prompt_tokens)


def microbatch_tokens(load: StepLoad, pp: ArrayLike) -> FloatArray:
    """Tokens of the busiest of the ``P`` micro-batches, over all the stage's chips: whole
    decode sequences (``ceil(B / P)``) and whole prompts where the load's are whole requests,
    so a batch smaller than ``P`` leaves stages idle; ``tokens / P`` with one stage."""
    p = num(pp)
    if type(p) is not np.ndarray and p == 1.0:
        return load.tokens / p
    queries = load.decode_queries
    decode = whole(load.decode_sequences / queries, p) * queries
    prompts = whole(load.prefill_sequences, p) if load.prefill_whole else load.prefill_sequences / p
    split = decode + prompts * load.prefill_length
    return split if type(p) is not np.ndarray else np.asarray(np.where(p == 1.0, load.tokens / p, split))
