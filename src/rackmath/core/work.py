"""Each operator's work, described once: FLOPs, bytes by tensor class, and its kernel's shape.

The per-operator step (:mod:`rackmath.core.operators`) and the kernel fit
(:mod:`rackmath.analyses.kernels.rows`, which reads the measured tables as operator calls)
both describe an operator through these functions, so a fitted curve is a fraction of exactly
the FLOPs and bytes the step charges (``tests/test_work_parity.py`` walks every kept table
row through them). A :class:`Work` is one chip's share of an operator over ``calls`` kernel
launches; its shape key (``rows``, ``cols``, ``depth``) is what the efficiency curves
saturate in (:mod:`rackmath.core.efficiency`):

=========================  ===========================  =========================================
operator                   rows / cols / depth          FLOPs; bytes
=========================  ===========================  =========================================
GEMM (:func:`gemm`)        m / n / k                    ``2 m P``; weights ``P w``, activations
                                                        ``m (in a + out o)`` per call
grouped experts            tokens per expert / I / h    ``2 mats h I pairs``; weights of the
(:func:`grouped_gemm`)                                  experts hit, activations per pair
decode attention           see :func:`decode_attention` ``2 q H (d_qk + d_v) L``; the KV read,
                                                        queries in and outputs out
prefill attention          tokens / d_qk / length       ``2 H (d_qk + d_v) pairs``; Q, K, V, O
elementwise                rows / - / -                 no FLOPs; bytes read and written
=========================  ===========================  =========================================

Units: FLOPs (2 per multiply-accumulate), bytes, counts. ``w`` and ``a`` are the stored bytes
per weight and per input activation element of the operator's format, scales included
(:mod:`rackmath.specs.precision`); outputs are written in bf16 (:data:`OUTPUT_BYTES`).
Arrays broadcast; single values give floats (:mod:`rackmath.core.numeric`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core.numeric import ceil, maximum, num
from rackmath.specs.efficiency import MHA_KIND
from rackmath.specs.precision import FP8_BLOCK_ACTIVATION_BYTES

FloatArray = NDArray[np.float64]

#: Bytes per output value a matmul or an attention kernel writes: bf16 (TensorRT-LLM, vLLM
#: and SGLang keep the residual stream in bf16 whatever the GEMM's input format).
OUTPUT_BYTES = 2.0

_ZERO = cast(FloatArray, 0.0)  # a term the operator lacks; broadcasts anywhere
_ONE = cast(FloatArray, 1.0)  # one call: already a float, so num() keeps it as it is

#: A record from all its fields in order: ``tuple.__new__(Work, fields)`` is what a NamedTuple's
#: generated ``__new__`` does, without that Python-level call (0.2 us a record; a plan point's
#: pass builds twenty of them, :class:`rackmath.core.operators.Operator` included).
record = tuple.__new__


class Work(NamedTuple):
    """One operator's work on one chip over ``calls`` kernel launches (see the module table).

    ``routed`` (grouped experts: token-expert pairs x hidden the permute and finalize passes
    move), ``tokens`` (the EP group's tokens per call) and ``ep`` bound where a second kernel
    may run (:attr:`rackmath.specs.efficiency.OpEfficiency.max_tokens`); ``None`` elsewhere.
    ``input_values`` counts the values a matmul reads as inputs (0 where none).
    """

    flops: FloatArray
    weight_bytes: FloatArray
    activation_bytes: FloatArray
    kv_read_bytes: FloatArray
    kv_write_bytes: FloatArray
    rows: FloatArray
    cols: FloatArray | None
    depth: FloatArray | None
    calls: FloatArray
    routed: FloatArray | None = None
    tokens: FloatArray | None = None
    ep: FloatArray | None = None
    #: activation values the operator reads as matmul inputs (what a low-precision recipe casts)
    input_values: FloatArray | None = None
    #: prefill attention: sequences x query heads per call, whose queries the kernel runs in
    #: thread blocks of a tile of query rows (:func:`rackmath.core.efficiency.blocks_of`)
    sequence_heads: FloatArray | None = None

    @property
    def bytes(self) -> FloatArray:
        """Every byte the operator moves through HBM (a float for one point); a term the
        operator lacks (:data:`_ZERO` itself) is not added (``x + 0.0`` is ``x``)."""
        total = self.weight_bytes + self.activation_bytes
        if self.kv_read_bytes is not _ZERO or self.kv_write_bytes is not _ZERO:
            total = total + self.kv_read_bytes + self.kv_write_bytes
        return total


@dataclass(frozen=True, slots=True)
class GemmShape:
    """A GEMM's work all but its rows (:func:`gemm_shape`): what a plan's projection keeps
    from point to point. ``flops_per_row = 2 params``; ``weight_bytes = params w``;
    ``activation_bytes_per_row = in a + out o`` per row and call."""

    flops_per_row: FloatArray
    weight_bytes: FloatArray
    activation_bytes_per_row: FloatArray
    in_values: FloatArray
    cols: FloatArray
    depth: FloatArray
    calls: FloatArray


def gemm_shape(
    params: ArrayLike,
    cols: ArrayLike,
    depth: ArrayLike,
    *,
    weight_bytes_per_param: ArrayLike,
    activation_bytes: ArrayLike,
    in_values: ArrayLike,
    out_values: ArrayLike,
    calls: ArrayLike = 1.0,
) -> GemmShape:
    """The rows-free terms of :func:`gemm` (its arguments but ``rows``)."""
    # the arguments stay as given (Python floats or NumPy values): they multiply into the rows
    return GemmShape(
        2.0 * params,  # type: ignore[arg-type,operator]
        params * weight_bytes_per_param,  # type: ignore[arg-type,operator]
        in_values * activation_bytes + out_values * OUTPUT_BYTES,  # type: ignore[arg-type,operator]
        in_values, cols, depth, num(calls),  # type: ignore[arg-type]
    )  # fmt: skip


def gemm(
    rows: ArrayLike,
    params: ArrayLike,
    cols: ArrayLike,
    depth: ArrayLike,
    *,
    weight_bytes_per_param: ArrayLike,
    activation_bytes: ArrayLike,
    in_values: ArrayLike,
    out_values: ArrayLike,
    calls: ArrayLike = 1.0,
) -> Work:
    """``rows`` tokens through ``params`` weights over ``calls`` launches (one per layer):
    ``flops = 2 rows params``, weights ``params w``, activations ``rows calls (in a + out o)``
    with ``in_values`` values read and ``out_values`` written per token and call.

    A measured GEMM of ``m x n x k`` is ``gemm(m, n k, n, k, in_values=k, out_values=n)``;
    a gated MLP block of width ``I`` is one operator of ``params = 3 h I``, reading ``h + I``
    values (the up/gate input, the down input) and writing ``2 I + h`` (their outputs).
    Worked number: 16 x 7168 x 2048 in bf16 -> 0.470 GFLOP, 29.36 MB of weights, 0.295 MB of
    activations (16 (2048 x 2 + 7168 x 2) bytes).
    """
    shape = gemm_shape(
        params, cols, depth, weight_bytes_per_param=weight_bytes_per_param, activation_bytes=activation_bytes,
        in_values=in_values, out_values=out_values, calls=calls,
    )  # fmt: skip
    return gemm_rows(num(rows), shape)


def gemm_rows(m: FloatArray, g: GemmShape) -> Work:
    """:func:`gemm` of ``m`` tokens (a NumPy value) through a shape kept from point to point (a
    plan's projection, :class:`rackmath.core.pass_plan.GemmPlan`): the products with the rows
    only. ``m (2 params)`` is ``2 m params`` to the bit (doubling is exact)."""
    mc = m * g.calls
    return record(Work, (
        m * g.flops_per_row, g.weight_bytes, mc * g.activation_bytes_per_row, _ZERO, _ZERO, m, g.cols,
        g.depth, g.calls, None, None, None, mc * g.in_values, None,
    ))  # fmt: skip


def grouped_gemm(
    pairs: ArrayLike,
    experts_hit: ArrayLike,
    hidden: ArrayLike,
    width: ArrayLike,
    *,
    matrices: ArrayLike,
    weight_bytes_per_param: ArrayLike,
    activation_bytes: ArrayLike,
    tokens_per_expert: ArrayLike,
    routed: ArrayLike,
    group_tokens: ArrayLike,
    ep: ArrayLike,
    calls: ArrayLike = 1.0,
    expert_params: ArrayLike | None = None,
) -> Work:
    """Routed experts as one grouped GEMM on one chip: ``pairs`` token-expert pairs (all
    ``calls`` together) through ``experts_hit`` local experts of ``matrices`` matrices of
    ``hidden x width`` (3 gated, 2 non-gated; ``width`` the expert's intermediate size per
    expert-TP shard):

        flops       = 2 matrices hidden width pairs
        weights     = experts_hit matrices hidden width w
        activations = pairs ((hidden + width) a + ((matrices - 1) width + hidden) o)

    (the first GEMM reads ``hidden`` and writes its ``matrices - 1`` outputs of ``width``; the
    second reads ``width`` and writes ``hidden``). ``experts_hit`` is the caller's routing model
    (uniform random in serving, dealt evenly in the measured tables); rows are
    ``tokens_per_expert`` over the EP group. ``expert_params`` (default ``matrices hidden
    width``) counts an expert's parameters on the chip where it has more (biases).
    Worked number: 1,024 pairs, 8 experts hit,
    h = 7168, I = 2048, gated, fp8 (w = a = 1): 90.2 GFLOP, 352 MB of weights, 32.5 MB of
    activations (1,024 (9,216 x 1 + 11,264 x 2) bytes).
    """
    shape = grouped_shape(
        hidden, width, matrices=matrices, weight_bytes_per_param=weight_bytes_per_param,
        activation_bytes=activation_bytes, ep=ep, calls=calls, expert_params=expert_params,
    )  # fmt: skip
    return grouped_pairs(
        num(pairs), num(experts_hit), num(tokens_per_expert), num(routed), num(group_tokens), shape
    )


@dataclass(frozen=True, slots=True)
class GroupedShape:
    """A grouped expert GEMM's work all but its load (:func:`grouped_shape`): what a plan's
    routed experts keep from point to point, per token-expert pair where it scales with them."""

    params: FloatArray
    flops_per_pair: FloatArray
    weight_bytes_per_param: FloatArray
    activation_bytes_per_pair: FloatArray
    in_values_per_pair: FloatArray
    cols: FloatArray
    depth: FloatArray
    calls: FloatArray
    ep: FloatArray


def grouped_shape(
    hidden: ArrayLike,
    width: ArrayLike,
    *,
    matrices: ArrayLike,
    weight_bytes_per_param: ArrayLike,
    activation_bytes: ArrayLike,
    ep: ArrayLike,
    calls: ArrayLike = 1.0,
    expert_params: ArrayLike | None = None,
) -> GroupedShape:
    """The load-free terms of :func:`grouped_gemm` (its arguments but the pairs, the experts
    hit, the tokens per expert, the routed elements and the group's tokens)."""
    w, h, mats = num(width), num(hidden), num(matrices)
    params = mats * h * w if expert_params is None else num(expert_params)
    return GroupedShape(
        params,
        2.0 * params,
        num(weight_bytes_per_param),
        (h + w) * num(activation_bytes) + ((mats - 1.0) * w + h) * OUTPUT_BYTES,
        h + w,
        w,
        h,
        num(calls),
        num(ep),
    )


def grouped_pairs(
    q: FloatArray,
    experts_hit: FloatArray,
    tokens_per_expert: FloatArray,
    routed: FloatArray,
    group_tokens: FloatArray,
    g: GroupedShape,
) -> Work:
    """:func:`grouped_gemm` of a load (NumPy values: ``q`` pairs, ...) through a shape kept from
    point to point (a plan's routed experts, :class:`rackmath.core.pass_plan.MoePlan`)."""
    return record(Work, (
        g.flops_per_pair * q, experts_hit * g.params * g.weight_bytes_per_param,
        q * g.activation_bytes_per_pair, _ZERO, _ZERO, tokens_per_expert, g.cols, g.depth, g.calls,
        routed, group_tokens, g.ep, q * g.in_values_per_pair, None,
    ))  # fmt: skip


def decode_attention(
    sequences: ArrayLike,
    query_heads: ArrayLike,
    kv_heads: ArrayLike,
    query_width: ArrayLike,
    output_width: ArrayLike,
    context: ArrayLike,
    *,
    flops: ArrayLike,
    kv_read_bytes: ArrayLike,
    kv_write_bytes: ArrayLike = 0.0,
    calls: ArrayLike = 1.0,
) -> Work:
    """Decode attention on one chip: ``sequences`` queries (one per sequence, or ``q`` per
    sequence in a verify step: ``query_heads`` then counts them) of ``query_heads`` heads
    against ``kv_heads`` KV heads over ``calls`` layers. ``flops`` and ``kv_read_bytes`` are
    the attention registry's (:mod:`rackmath.core.attention`: ``2 H (d_qk + d_v)`` per
    visible key, the cache bytes each kind reads); the queries are read and the outputs
    written in bf16, ``sequences x query_heads x (query_width + output_width) x 2`` per call.

    Shape: rows = ``sequences x kv_heads`` (the kernel's thread blocks, one per sequence and
    KV head before any split of the context), cols = query heads per KV head (the rows a
    KV head's tile serves; MLA, whose one latent every head reads, has ``kv_heads = 1`` and
    cols = its heads), depth = the context. Worked number (GB200, MLA, 128 sequences of 4,096
    tokens, 128 heads): 146.0 GFLOP and 604 MB of latent read in one call
    (``tests/test_work_parity.py``).
    """
    return decode_attention_of(
        num(sequences), num(query_heads), kv_heads, query_width, output_width, num(context),
        num(flops), num(kv_read_bytes), num(kv_write_bytes), num(calls),
    )  # fmt: skip


def decode_attention_of(
    n: FloatArray,
    hq: FloatArray,
    hk: Any,
    query_width: Any,
    output_width: Any,
    context: FloatArray,
    flops: FloatArray,
    kv_read_bytes: FloatArray,
    kv_write_bytes: FloatArray,
    c: FloatArray,
) -> Work:
    """:func:`decode_attention` of NumPy values (``n`` sequences, ``hq`` query heads, the
    context, FLOPs, KV bytes and ``c`` calls; a pass has them so): the KV heads and head widths
    multiply into them."""
    activation = n * hq * (query_width + output_width) * OUTPUT_BYTES * c
    return record(Work, (
        flops, _ZERO, activation, kv_read_bytes, kv_write_bytes, n * hk, hq / hk, context, c,
        None, None, None, None, None,
    ))  # fmt: skip


def decode_family(kind: str, group: ArrayLike) -> Any:
    """The kernel family a decode call of a ``kind`` model runs: :data:`MHA_KIND` where
    ``group`` (query heads per KV head read, the work's cols) is 1 and the model is ``gqa``,
    else ``kind``; an array ``group`` gives an array of names. Worked numbers: Llama-3.1-70B (64
    query heads on 8 KV heads) -> ``gqa``; 32 heads on 32 -> ``mha``; MLA stays ``mla``."""
    if kind != "gqa":
        return kind
    if np.ndim(group):
        return np.where(np.asarray(group) == 1.0, MHA_KIND, kind)
    return MHA_KIND if float(group) == 1.0 else kind  # type: ignore[arg-type]


def prefill_attention(
    tokens: ArrayLike,
    query_heads: ArrayLike,
    kv_heads: ArrayLike,
    query_width: ArrayLike,
    output_width: ArrayLike,
    length: ArrayLike,
    *,
    flops: ArrayLike,
    kv_read_bytes: ArrayLike = 0.0,
    kv_write_bytes: ArrayLike = 0.0,
    input_bytes: ArrayLike = OUTPUT_BYTES,
    calls: ArrayLike = 1.0,
    kv_tokens: ArrayLike | None = None,
    shared_heads: bool = False,
    sequences: ArrayLike | None = None,
) -> Work:
    """Causal attention over prompts of ``length`` (``tokens`` of them on the chip): the
    registry's ``flops``; Q, K and V read at ``input_bytes`` each (``query_heads`` queries of
    ``query_width`` and ``kv_heads`` keys and values of ``query_width + output_width`` per
    token; MLA's prefill runs decompressed, ``kv_heads = query_heads``) and O written in bf16;
    a cached prefix's ``kv_read_bytes`` and the new cache's ``kv_write_bytes``. Shape: rows =
    tokens, cols = ``query_width`` (the inner dimension of ``Q K^T``), depth = ``length``.
    ``kv_tokens`` (default ``tokens``): the tokens whose keys and values are read, where they
    are more than the queries (context parallelism: a rank's ``S/cp`` queries attend to the
    ``S`` gathered keys and values).
    ``shared_heads``: the kernel runs absorbed (MQA mode, DSA's sparse MLA: every head against
    one shared latent), and its tile is the query heads per KV head, as a decode kernel's:
    cols = ``query_heads / kv_heads``.
    ``sequences`` (default ``tokens / length``: prompts of ``length`` new tokens) times the
    query heads is the work's ``sequence_heads``, each a ``length``-query run of thread blocks.
    """
    m, hq, hk = num(tokens), num(query_heads), num(kv_heads)
    c, qw, ow = num(calls), num(query_width), num(output_width)
    values_in = hq * qw + hk * (qw + ow)
    activation = m * c * (values_in * num(input_bytes) + hq * ow * OUTPUT_BYTES)
    if kv_tokens is not None:  # the keys and values of the tokens beyond the rank's own
        activation = activation + c * (num(kv_tokens) - m) * hk * (qw + ow) * num(input_bytes)
    return Work(
        flops=num(flops),
        weight_bytes=_ZERO,
        activation_bytes=activation,
        kv_read_bytes=num(kv_read_bytes),
        kv_write_bytes=num(kv_write_bytes),
        rows=m,
        cols=hq / hk if shared_heads else num(query_width),
        depth=num(length),
        calls=c,
        sequence_heads=(m / maximum(num(length), 1.0) if sequences is None else num(sequences)) * hq,
    )


def elementwise(
    bytes_moved: ArrayLike, rows: ArrayLike, calls: ArrayLike = 1.0, weight_bytes: ArrayLike = _ZERO
) -> Work:
    """A memory-bound pass (norms, casts, an embedding lookup): ``bytes_moved`` activation bytes
    read and written plus ``weight_bytes`` of parameters, no FLOPs counted."""
    return elementwise_of(num(bytes_moved), num(rows), num(calls), num(weight_bytes))


def elementwise_of(
    bytes_moved: FloatArray, rows: FloatArray, calls: FloatArray, weight_bytes: FloatArray = _ZERO
) -> Work:
    """:func:`elementwise` of NumPy values (a pass has them so)."""
    return record(Work, (
        _ZERO, weight_bytes, bytes_moved, _ZERO, _ZERO, rows, None, None, calls, None, None, None, None, None,
    ))  # fmt: skip


# ----------------------------------------------------------------------------- collectives
#
# A collective's work is what one chip puts on its link per call (``wire_bytes``), the buffer
# each rank contributes (``message_bytes``: what a fitted curve's message range is measured
# in), the group size and the calls. The kernel fit reads every measured collective table
# through these functions (:func:`rackmath.analyses.kernels.rows.comm_rows`) and the step times
# its collectives on the same (:func:`rackmath.core.network.collective_operator`):
#
# ====================  =================================  ======================================
# collective            message ``M`` per rank             wire bytes per chip
# ====================  =================================  ======================================
# ring all-reduce       the buffer ``S``                   ``2 (n-1)/n S`` (NCCL's bus bytes)
# one-shot all-reduce   the buffer ``S``                   ``(n-1) S`` (every peer's buffer read)
# all-gather            the gathered result ``S``          ``(n-1)/n S``
# reduce-scatter        the input buffer ``S``             ``(n-1)/n S``
# all-to-all            ``M`` spread evenly over the group ``(n-1)/n M``
# expert dispatch or    ``tokens x copies x h x b``        ``(n-1)/n M``: DeepEP low-latency sends
# combine                                                  ``k`` copies a token (one per expert),
#                                                          DeepEP normal and NCCL one per
#                                                          destination rank; low-latency also
#                                                          ``ceil(tokens / E)`` tokens an SM
#                                                          handles in turn (:func:`sm_tokens`)
# send / receive        the activation ``M``               ``M``
# ====================  =================================  ======================================


#: Bytes per value of an FP8 token exchange: the block-scaled FP8 activation format, one byte
#: plus an fp32 scale per 128 values (DeepSeek-V3 report §3.3: 1x128 activation tiles;
#: DeepEP's FP8 dispatch sends the same).
FP8_DISPATCH_BYTES = FP8_BLOCK_ACTIVATION_BYTES


class CommWork(NamedTuple):
    """One collective's work per chip: the bytes each chip puts on its link per call
    (``wire_bytes``), the message each rank contributes (``message_bytes``), the group size
    and the number of calls; for DeepEP's low-latency kernels also the tokens the busiest SM
    handles one after another per call (``sm_tokens``, :func:`sm_tokens`; 0 elsewhere)."""

    wire_bytes: FloatArray
    message_bytes: FloatArray
    ranks: FloatArray
    calls: FloatArray
    sm_tokens: FloatArray = _ZERO


def all_reduce(message_bytes: ArrayLike, ranks: ArrayLike, calls: ArrayLike = 1.0) -> CommWork:
    """A ring all-reduce of an ``S``-byte buffer over ``n`` ranks sends ``2 (n - 1)/n S`` per
    chip (reduce-scatter then all-gather; Thakur, Rabenseifner & Gropp 2005). Worked number:
    16 MiB over 8 GPUs -> 29.36 MB on the wire per chip."""
    s, n = num(message_bytes), num(ranks)
    return CommWork(2.0 * (n - 1.0) / maximum(n, 1.0) * s, s, n, num(calls))


def one_shot_all_reduce(message_bytes: ArrayLike, ranks: ArrayLike, calls: ArrayLike = 1.0) -> CommWork:
    """The custom all-reduce engines run at small messages (TensorRT-LLM's and vLLM's one-shot
    kernel): each rank reads the ``n - 1`` peers' whole ``S``-byte buffers over NVLink and
    reduces locally, ``(n - 1) S`` per chip in one step instead of the ring's ``2 (n - 1)``
    steps. Worked number: 16 KiB (8,192 bf16 values) over 8 GPUs -> 114.7 kB per chip.

    The custom tables (TensorRT-LLM's AUTO strategy: one-shot, then two-shot, then NCCL as the
    message grows) fit better on these bytes than on the ring's, where the custom kernel runs
    (:func:`rackmath.analyses.kernels.rows.comm_rows`; on those rows the H100's median error is
    3% on these bytes, 6% on the ring's)."""
    s, n = num(message_bytes), num(ranks)
    return CommWork(maximum(n - 1.0, 0.0) * s, s, n, num(calls))


def wire_share(ranks: ArrayLike) -> FloatArray:
    """``(n - 1)/n``: the share of a rank's buffer that leaves it in an all-gather or an
    all-to-all over ``n`` ranks (0 for one rank)."""
    n = num(ranks)
    return (n - 1.0) / maximum(n, 1.0)


def all_gather(message_bytes: ArrayLike, ranks: ArrayLike, calls: ArrayLike = 1.0) -> CommWork:
    """An all-gather of an ``S``-byte result: ``(n - 1)/n S`` per chip (:func:`wire_share`; each
    chip receives the ``n - 1`` shards it lacks; nccl-tests' size is the gathered buffer)."""
    s, n = num(message_bytes), num(ranks)
    return CommWork(wire_share(n) * s, s, n, num(calls))


def reduce_scatter(message_bytes: ArrayLike, ranks: ArrayLike, calls: ArrayLike = 1.0) -> CommWork:
    """A reduce-scatter of an ``S``-byte input: ``(n - 1)/n S`` per chip, the mirror of
    :func:`all_gather` (nccl-tests' size is the input buffer)."""
    return all_gather(message_bytes, ranks, calls)


def all_to_all(
    bytes_per_chip: ArrayLike,
    ranks: ArrayLike,
    calls: ArrayLike = _ONE,
    sm_tokens: ArrayLike = _ZERO,
    share: ArrayLike | None = None,
) -> CommWork:
    """Each chip spreads ``M`` bytes evenly over the group: ``(n - 1)/n M`` leave it (an EP
    dispatch or combine of ``tokens x destinations x hidden`` values); ``sm_tokens`` as
    :class:`CommWork` says. ``share``: the group's :func:`wire_share` where the caller holds it
    (a plan's group, placed once: :mod:`rackmath.core.collective_ops`)."""
    m, n = num(bytes_per_chip), num(ranks)
    wire = (wire_share(n) if share is None else share) * m  # type: ignore[operator]
    return CommWork(wire, m, n, num(calls), sm_tokens)  # type: ignore[arg-type]


def sm_tokens(tokens: ArrayLike, experts: ArrayLike) -> FloatArray:
    """The tokens of one rank that the busiest SM of a DeepEP low-latency dispatch handles one
    after another: ``ceil(tokens / E)`` for ``E`` routed experts.

    The low-latency dispatch launches one SM per expert (``num_sms = ceil(E / ceil(E / SMs))``,
    ``E`` when ``E`` is at most the chip's SMs) and each SM walks the rank's tokens in turn,
    token ``sm_id``, then ``sm_id + num_sms``, ...: it casts a token to fp8 with the whole block
    and sends its ``k`` copies before taking the next (deepseek-ai/DeepEP 79bbb54
    ``csrc/kernels/internode_ll.cu`` lines 203 and 495-501). So however wide the link, a call
    takes at least its busiest SM's ``ceil(tokens / num_sms)`` turns
    (:attr:`rackmath.specs.efficiency.CollectiveEfficiency.sm_token_s`). The combine's serial
    part is its send, one warp group per expert and peer rank (lines 791-837), ``tokens k / E``
    copies each; its curve fits its own time a turn of this count, which its held-out figures
    do not tell from that one (``docs/calibration.md``, "DeepEP low-latency: one SM per
    expert"). Assumed: ``E`` at most the SMs (132 on an H100, 148 on a B200); above, an SM runs
    ``ceil(E / SMs)`` experts' warp groups and walks ``tokens / num_sms`` tokens, which the
    tables (E of 160 to 512) do not tell from ``tokens / E``: the term is a few microseconds
    there. Worked number: 1,024 tokens over Mixtral's 8 experts -> 128 turns; DeepSeek-V3's
    256 experts, 128 tokens -> 1."""
    return ceil(num(tokens) / num(experts))


def expert_exchange(
    tokens: ArrayLike,
    copies: ArrayLike,
    hidden: ArrayLike,
    value_bytes: ArrayLike,
    ranks: ArrayLike,
    calls: ArrayLike = _ONE,
    sm_tokens: ArrayLike = _ZERO,
    share: ArrayLike | None = None,
) -> CommWork:
    """One expert dispatch (or combine) on one rank: ``tokens`` tokens of ``hidden`` values of
    ``value_bytes`` bytes, ``copies`` copies each, spread over ``ranks`` EP ranks
    (:func:`all_to_all` of ``M = tokens x copies x hidden x value_bytes``; ``share`` as it
    says); for DeepEP's low-latency kernels ``sm_tokens``, the tokens its busiest SM handles in
    turn (:func:`sm_tokens` of the rank's tokens and the routed experts ``E``; 0 elsewhere).

    ``copies``: DeepEP's low-latency kernels send one copy per selected expert (``k``); its
    normal kernels and an NCCL all-to-all one per destination rank
    (:func:`rackmath.core.collectives.expected_destination_ranks`, ``D``). Worked number
    (DeepSeek-V3, one token, ``k = 8``, h = 7,168, an fp8 dispatch of 1 + 4/128 bytes a value
    over 8 ranks): ``M = 59.1 kB``, 51.7 kB on the wire; 1 token a turn for its 256 experts."""
    # float64 from the first factor: no num() on the rest
    m = num(tokens) * copies * hidden * value_bytes  # type: ignore[operator]
    return all_to_all(m, ranks, calls, sm_tokens, share)


def send(message_bytes: ArrayLike, calls: ArrayLike = 1.0) -> CommWork:
    """A point-to-point send (a pipeline hop): the whole message on the wire, two ranks."""
    s = num(message_bytes)
    return CommWork(s, s, 0.0 * s + 2.0, num(calls))
