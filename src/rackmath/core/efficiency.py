"""How much of a chip's peak one operator reaches: the per-operator efficiency model.

The per-operator step (:mod:`rackmath.core.operators`) times each operator ``i`` as

    compute_s_i = flops_i / (peak_flops_per_s(precision_i) * compute_frac_i(rows_i))
    memory_s_i  = bytes_i / (hbm_bandwidth_bytes_per_s * bandwidth_frac_i(rows_i))
    time_s_i    = max(compute_s_i, memory_s_i) + calls_i * floor_s_i

where ``rows_i`` is the operator's parallel work dimension on one chip (tokens for a GEMM,
tokens per expert for the grouped expert GEMM, sequences for decode attention, tokens for
prefill attention) and ``calls_i`` the kernel launches the step makes (one per layer).

Each fraction saturates in ``rows`` (tile and wave utilisation: a GEMM with a few rows
leaves most of a tensor core's tile empty):

    compute_frac(rows)   = compute_frac   * rows / (rows + compute_half_rows)
    bandwidth_frac(rows) = bandwidth_frac * rows / (rows + bandwidth_half_rows)

so ``compute_half_rows`` is the row count at which half the asymptotic fraction is reached.

A GEMM's other two dimensions matter too (measured tables: an H100 bf16 GEMM with n <= 256
output columns runs ~30% slower than the rows-only form says; fp8 GEMMs with a short
reduction pay their activation quantization): when the caller knows them, the compute
fraction also saturates in the output columns ``cols`` (n) and the reduction depth ``depth`` (k):

    compute_frac(rows, cols, depth) = compute_frac(rows) * cols / (cols + compute_half_cols)
                                                         * depth / (depth + compute_half_depth)

Both half counts default to 0 (no effect), and omitting ``cols`` / ``depth`` leaves the
rows-only form. Worked number: compute_frac 0.8, half at 64 rows and 128 columns,
64 rows x 128 columns -> 0.8 * 0.5 * 0.5 = 0.2.

A kernel that computes its columns in whole tiles of ``compute_tile_cols`` (an absorbed
attention kernel's query heads: Hopper's sparse MLA pads them to 64) does useful work on
``cols / (ceil(cols / tile) * tile)`` of what it computes, a further factor when set. Worked
number: tile 64, 16 columns -> a quarter; 128 columns -> 1.

A grouped expert GEMM pads each expert's tokens to a whole tile of ``compute_tile_rows`` rows
and runs the padded rows ``R = ceil(rows / tile) * tile``: when set, the saturation is in ``R`` and
only the useful share ``rows / R`` of that work counts,

    compute_frac(rows) = compute_frac * R / (R + compute_half_rows) * rows / R
                       = compute_frac * rows / (R + compute_half_rows)

so the compute time of ``rows`` (FLOPs proportional to rows) is ``(R + half) / compute_frac`` row
times: flat inside a tile and never falling as rows grow (the rows-only saturation times the
useful share fell from 1 to 16 rows in a 16-row tile). Worked number: tile 64, no half count,
16 rows -> a quarter; with a half count of 64, 16 rows -> 16 / 128 = an eighth.

Memory is read in tiles along ``depth`` (decode attention reads the KV cache in blocks of
``bandwidth_tile_depth`` tokens, so a 1-token context costs a whole block): when the tile and
``depth`` are given, only ``depth / (ceil(depth / tile) * tile)`` of the bytes read are useful,

    bandwidth_frac(rows, depth) = bandwidth_frac(rows) * depth / (ceil(depth / tile) * tile)

Worked number: tile 64, depth 16 -> a quarter of the asymptotic fraction.

A GEMM streams its operands through output tiles, one thread block each: a GEMV-shaped call (a few
rows, few output columns) runs few blocks and draws a fraction of the HBM bandwidth however many
rows it has. With ``bandwidth_tile`` set and the columns known, the bandwidth saturates in the
output-tile count ``T = ceil(rows / tile) * ceil(cols / tile)`` instead of the rows,

    bandwidth_frac(rows, cols) = bandwidth_frac * T / (T + bandwidth_half_rows)

Worked number: tile 128, half count 8, 1 row x 768 columns -> T = 6 -> 6/14 of the fraction.
(Measured: a bf16 GEMM of 1 x 768 x 1536 on a B200 takes 5.4 us where the bytes need 0.3 us.)

An attention kernel runs its work as thread blocks, and each block has fixed work beside its
bytes: loading its queries, the softmax's running state, writing (for a split, merging) its
output. With ``block_bytes`` set (what a block costs, in bytes streamed at the chip's HBM
bandwidth, so a faster or pooled chip runs blocks as much faster), the time grows by

    calls * blocks * block_bytes / hbm_bandwidth

where ``blocks`` per call (:func:`blocks_of`) is, for decode attention, its rows (sequences x KV
heads) times its split-KV splits; for prefill attention, ``sequence_heads`` (sequences x query
heads) times the query tiles of a prompt, ``ceil(depth / block_tile_rows)``. Measured: an H100's
TensorRT-LLM decode at 8 tokens of context, 64 heads of width 64, grows by 0.712 ms from 1,024
to 2,048 sequences (65,536 blocks more) while their cache needs 40 us at 3.35 TB/s: 10.25 ns,
or 34 kB, a block. Worked number: 65,536 blocks of 30 kB at 3 TB/s -> 0.655 ms; a prompt of
1,000 tokens in tiles of 128 is 8 blocks per head.

A causal prefill cannot end before its longest thread block does: the last query tile of
``block_tile_rows`` rows attends to all ``depth`` keys of its prompt, ``2 T / (depth + 1)`` of
one sequence-head's FLOPs, and runs on one SM. With ``chain_frac`` set (the share of the chip's
peak one block reaches, about the compute fraction over the SM count), the compute time is at
least

    chain_s = flops / sequence_heads * min(1, 2 T / (depth + 1)) / (peak * chain_frac)

(:func:`chain_s`): a prompt of few sequences x heads leaves most SMs idle while its last tiles
run. Measured: on the GB200's TensorRT-LLM MLA prefill table, the 54 calls of one or two
sequence-heads at 2,048 tokens or more run 2.27x the shipped curve with the term taken out
(median), 0.97x with it; fitted, 0.00278 at tiles of 128 (``tests/test_kernel_fit.py``).
Worked number: 1 TFLOP over 2 sequence-heads of 4,095 queries, tiles of 128, 1 PFLOP/s,
chain_frac 0.004 -> 7.8 ms.

A causal prefill's query tiles re-read the keys and values before them: from the L2 while a
call's operands fit there, partly from DRAM past it. With ``spill_bytes`` (the chip's L2) and
``spill_passes`` set, the bytes a call holds beyond the L2 are read that many more times:

    memory_s = (moved + spill_passes * max(0, moved - calls * spill_bytes)) / bandwidth

Measured (L40S TensorRT-LLM context attention, bf16, head 64; L2 96 MiB): calls of 67 MB or
less ran 0.93x a curve fitted without the term, calls of 190 MB or more 1.46x (medians), at
every head count and prompt length; with it 0.99x and 0.98x (docs/calibration.md). Fitted where
the chip catalog states the L2 (L40S, RTX PRO 6000: 0.07-2.6 passes). Worked number: 200 MB in
one call, an L2 of 100 MB, 1.5 passes -> 150 MB more; a call of 80 MB -> none.

A kernel whose columns are not a whole number of :data:`ALIGNED_COLUMNS` (16) runs its loads
narrower: Triton vectorizes a load only on sizes and strides it can prove divisible by 16, so
SGLang's fused MoE kernel on an expert width of 58, 84, 116, 168 or 232 reads its operands in
smaller pieces. With ``unaligned_slowdown`` set the time grows by that share there,

    time_s = time_s * (1 + unaligned_slowdown)        (cols mod 16 != 0)

Measured: on the A100's SGLang MoE curve with the term taken out, the 647 calls of those five
widths run 1.46x the curve (median) and the other 10,469 1.00x; fitted, 0.553
(``tests/test_kernel_fit.py``).
Worked number: 1 ms at 116 columns, slowdown 0.4 -> 1.4 ms; at 128 columns -> 1 ms.

Compute and memory overlap imperfectly: a kernel's load pipeline stalls its tensor cores near the
ridge, so the time is the power mean

    time_s = (compute_s^p + memory_s^p)^(1/p)        (p = ``overlap_power``)

``p = 0`` means ``max(compute_s, memory_s)`` (the roofline's perfect overlap); ``p = 1`` is their sum
(no overlap). Worked number: compute 3 us, memory 4 us, p = 2 -> 5 us; p = 1 -> 7 us; max -> 4 us.
Fitted on the kernel tables: bf16/fp8 grouped expert GEMMs p = 1.2-1.4, dense bf16/fp8 GEMMs
1.5-3.0, GEMMs with a separate quantization pass (fp8-block, NVFP4, weight-only) 1.0-1.3,
attention mostly at the bound (20: overlap close to perfect).

The pure roofline is every fraction 1, every half-row count 0 and no floor
(:data:`PURE`). Fitted values come from measured kernel tables
(``rackmath calibrate kernels``) and live in the catalog with their source.

Units: seconds, rows (dimensionless counts), fractions in (0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import work as wk
from rackmath.core.numeric import ceil, maximum, minimum, num
from rackmath.specs.efficiency import (
    ALIGNED_COLUMNS,
    PURE,
    CollectiveEfficiency,
    OpEfficiency,
)

FloatArray = NDArray[np.float64]
_ONE = 1.0
_ZERO = 0.0


@dataclass(frozen=True, slots=True)
class ShapeTerms:
    """What a curve's fractions take from an operator's columns and depth, which its rows do not
    change (:func:`shape_terms`); None where the curve has no such term. An operator whose
    columns and depth are the plan's computes them once (:mod:`rackmath.core.pass_plan`)."""

    #: ``max(cols, 1)`` and ``max(depth, 1)``: an empty operator keeps a positive fraction
    cols: Any
    depth: Any
    #: ``cols + compute_half_cols``; ``ceil(cols / compute_tile_cols) compute_tile_cols``
    cols_half: Any
    cols_tiles: Any
    #: ``depth + compute_half_depth``
    depth_half: Any
    #: ``ceil(cols / bandwidth_tile)``: the output tiles along the columns
    bandwidth_col_tiles: Any
    #: ``ceil(depth / bandwidth_tile_depth) bandwidth_tile_depth``: the depth read in whole tiles
    bandwidth_depth_tiles: Any


def shape_terms(e: OpEfficiency, cols: ArrayLike | None, depth: ArrayLike | None) -> ShapeTerms:
    """The terms of :class:`ShapeTerms` for curve ``e`` at ``cols`` and ``depth`` (None: not given)."""
    c = d = None
    if cols is not None and (
        e.compute_half_cols > 0.0 or e.compute_tile_cols > 0.0 or e.bandwidth_tile > 0.0
    ):
        c = maximum(cols, 1.0)  # a float, a NumPy value or an array
    if depth is not None and (e.compute_half_depth > 0.0 or e.bandwidth_tile_depth > 0.0):
        d = maximum(depth, 1.0)
    return ShapeTerms(
        c,
        d,
        c + e.compute_half_cols if c is not None and e.compute_half_cols > 0.0 else None,
        ceil(c / e.compute_tile_cols) * e.compute_tile_cols
        if c is not None and e.compute_tile_cols > 0.0
        else None,
        d + e.compute_half_depth if d is not None and e.compute_half_depth > 0.0 else None,
        ceil(c / e.bandwidth_tile) if c is not None and e.bandwidth_tile > 0.0 else None,
        ceil(d / e.bandwidth_tile_depth) * e.bandwidth_tile_depth
        if d is not None and e.bandwidth_tile_depth > 0.0
        else None,
    )


def achieved_compute_frac(
    e: OpEfficiency, rows: ArrayLike, cols: ArrayLike | None = None, depth: ArrayLike | None = None
) -> FloatArray:
    """``compute_frac * rows / (rows + compute_half_rows)`` (1 for the pure roofline),
    times ``cols / (cols + compute_half_cols)`` and ``depth / (depth + compute_half_depth)``
    when those are given. An array ``rows`` gives an array, one value a float.

    Worked number: compute_frac 0.8, half at 64 rows, 64 rows -> 0.4.
    """
    return compute_frac_of(e, num(rows), cols, depth)


def compute_frac_of(
    e: OpEfficiency,
    r: FloatArray,
    cols: ArrayLike | None = None,
    depth: ArrayLike | None = None,
    split: FloatArray | None = None,
    terms: ShapeTerms | None = None,
) -> FloatArray:
    """:func:`achieved_compute_frac` of rows already a number (an array or a float, :func:`num`):
    the first of :func:`fractions_of`."""
    return fractions_of(e, r, cols, depth, split, terms)[0]


def achieved_bandwidth_frac(
    e: OpEfficiency, rows: ArrayLike, depth: ArrayLike | None = None, cols: ArrayLike | None = None
) -> FloatArray:
    """``bandwidth_frac * rows / (rows + bandwidth_half_rows)`` with rows floored at 1 (1 for
    the pure roofline), saturating in output tiles instead of rows when ``bandwidth_tile`` is
    set and ``cols`` given, times the useful share ``depth / (ceil(depth / tile) * tile)`` when
    ``depth`` is given and ``bandwidth_tile_depth`` is set."""
    return bandwidth_frac_of(e, num(rows), depth, cols)


def bandwidth_frac_of(
    e: OpEfficiency,
    rows: FloatArray,
    depth: ArrayLike | None = None,
    cols: ArrayLike | None = None,
    split: FloatArray | None = None,
    terms: ShapeTerms | None = None,
) -> FloatArray:
    """:func:`achieved_bandwidth_frac` of rows already a NumPy value: the second of
    :func:`fractions_of`."""
    return fractions_of(e, rows, cols, depth, split, terms)[1]


def fractions_of(
    e: OpEfficiency,
    rows: FloatArray,
    cols: ArrayLike | None = None,
    depth: ArrayLike | None = None,
    split: FloatArray | None = None,
    terms: ShapeTerms | None = None,
) -> tuple[FloatArray, FloatArray]:
    """``(compute_frac, bandwidth_frac)`` of a call of ``rows`` (NumPy values) at ``cols`` and
    ``depth``: :func:`achieved_compute_frac` and :func:`achieved_bandwidth_frac`, one pass over
    the rows both saturate in. ``split``: ``_split_rows`` of the rows where the caller has it and
    every row is at least 1 (then both fractions read it, :func:`timing_of`); ``terms``:
    :func:`shape_terms` of ``e``, ``cols`` and ``depth`` where the caller has them."""
    s = shape_terms(e, cols, depth) if terms is None else terms
    # a call with work streams at least one row: an expected count below one (fewer tokens than
    # experts) must not slow the weight stream, or more tokens would make the call faster
    r_bandwidth = rows if type(rows) is float and rows >= 1.0 else maximum(rows, 1.0)
    r = rows
    if e.split_tokens > 0.0:
        if split is None:
            r, r_bandwidth = _split_rows(e, rows, depth), _split_rows(e, r_bandwidth, depth)
        else:
            r = r_bandwidth = split
    if e.compute_tile_rows > 0.0:  # whole tiles: saturation in the padded rows, times the useful share
        rr = maximum(r, 1.0)
        padded = ceil(rr / e.compute_tile_rows) * e.compute_tile_rows
        compute = e.compute_frac * rr / (padded + e.compute_half_rows)
    else:
        compute = _saturating(e.compute_frac, e.compute_half_rows, r)
    # an empty operator (0 columns or depth, e.g. a step with no prompt) keeps a positive
    # fraction: its time is 0 FLOPs / rate, not 0 / 0
    if s.cols_half is not None:
        compute = compute * s.cols / s.cols_half
    if s.cols_tiles is not None:  # whole column tiles: the useful share
        compute = compute * s.cols / s.cols_tiles
    if s.depth_half is not None:
        compute = compute * s.depth / s.depth_half
    if s.bandwidth_col_tiles is not None:
        r_bandwidth = ceil(r_bandwidth / e.bandwidth_tile) * s.bandwidth_col_tiles
    bandwidth = _saturating(e.bandwidth_frac, e.bandwidth_half_rows, r_bandwidth)
    if s.bandwidth_depth_tiles is not None:
        bandwidth = bandwidth * s.depth / s.bandwidth_depth_tiles
    return compute, bandwidth


def _split_rows(e: OpEfficiency, rows: FloatArray, depth: ArrayLike | None) -> FloatArray:
    """The parallel work a decode kernel spreads: ``rows x max(1, depth / split_tokens)`` when it
    splits the context over thread blocks (split-KV, flash-decoding) about every
    ``split_tokens`` tokens, at most ``split_max`` splits a row when that is set, and only as
    many splits as bring the call to ``split_fill`` blocks when that is set (a call whose rows
    already fill the chip is not split: TensorRT-LLM sizes its multi-block mode by the SMs the
    grid leaves idle);
    ``rows`` otherwise (a smooth form of the kernels' whole splits, so the fit can place it).
    Worked number: 8 rows, 131,072 tokens, split 16,384 -> 64; with at most 4 splits a row ->
    32; with a fill of 16 blocks -> 16; 64 rows at a fill of 16 are not split -> 64."""
    if e.split_tokens <= 0.0 or depth is None:
        return rows
    splits = maximum(num(depth) / e.split_tokens, 1.0)
    if e.split_fill > 0.0:  # no more splits than fill the chip: rows that do are not split
        splits = minimum(splits, maximum(e.split_fill / maximum(rows, 1.0), 1.0))
    return rows * (minimum(splits, e.split_max) if e.split_max > 0.0 else splits)


def blocks_of(
    e: OpEfficiency,
    rows: FloatArray,
    depth: ArrayLike | None,
    sequence_heads: ArrayLike | None = None,
    split: FloatArray | None = None,
) -> FloatArray:
    """The thread blocks one call runs: with ``sequence_heads`` (prefill attention: sequences x
    query heads), those times the query tiles of ``depth`` queries, ``ceil(depth /
    block_tile_rows)`` (one when no tile is set); else the rows (at least one) times the splits
    of a split-KV decode kernel (:func:`_split_rows`; ``split``: those where the caller has them
    for rows of 1 or more). Worked number: 2 sequences x 64 heads of 1,000 queries in tiles of
    128 -> 1,024 blocks."""
    if sequence_heads is not None:
        if e.block_tile_rows <= 0.0 or depth is None:
            return num(sequence_heads)
        return num(sequence_heads) * ceil(maximum(depth, 1.0) / e.block_tile_rows)
    return _split_rows(e, maximum(rows, 1.0), depth) if split is None else split


def chain_s(
    e: OpEfficiency, f: FloatArray, peak_flops_per_s: float, sequence_heads: ArrayLike, depth: ArrayLike
) -> FloatArray:
    """The compute time of a causal prefill's longest thread block: the last query tile of
    ``block_tile_rows`` rows against all ``depth`` keys, ``min(1, 2 T / (depth + 1))`` of one
    sequence-head's FLOPs (its ``depth (depth + 1) / 2`` causal pairs), at ``chain_frac`` of
    the chip's peak (what one block's SM reaches). Worked number: 1 TFLOP over 2 sequence-heads
    of 4,095 queries, tiles of 128, 1 PFLOP/s, chain_frac 0.004 -> 0.5 TFLOP x 1/16 / 4 TFLOP/s
    = 7.8 ms. A sliding window's last tile reads ``window`` keys, not ``depth``: the work does
    not carry the window, so on a prompt much longer than its window this chain is up to
    twice the kernel's."""
    share = minimum(2.0 * e.block_tile_rows / (maximum(num(depth), 1.0) + 1.0), 1.0)
    return f / maximum(num(sequence_heads), 1.0) * share / (peak_flops_per_s * e.chain_frac)


def spill_bytes_of(e: OpEfficiency, moved: FloatArray, calls: FloatArray) -> FloatArray:
    """``spill_passes * max(0, moved - calls * spill_bytes)``: the DRAM traffic a call adds once
    its operands outgrow the chip's L2 (the module docstring's worked number)."""
    return e.spill_passes * maximum(moved - calls * e.spill_bytes, 0.0)


def _saturating(frac: float, half_rows: float, r: FloatArray) -> FloatArray:
    """``frac * r / (r + half_rows)``, shaped like ``r`` (``frac`` itself when ``half_rows`` is 0)."""
    if half_rows == 0.0:
        return np.full_like(r, frac) if type(r) is np.ndarray else frac  # type: ignore[return-value]
    return frac * r / (r + half_rows)


def is_pure(e: OpEfficiency) -> bool:
    """Whether ``e`` is the pure roofline (every fraction 1, no saturation, no floor)."""
    return e is PURE or e == PURE


def operator_timing(
    e: OpEfficiency,
    flops: ArrayLike,
    bytes_moved: ArrayLike,
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    rows: ArrayLike,
    cols: ArrayLike | None = None,
    depth: ArrayLike | None = None,
    calls: ArrayLike = 1.0,
    pure: bool | None = None,
    routed: ArrayLike | None = None,
    tokens: ArrayLike | None = None,
    ep: ArrayLike | None = None,
    sequence_heads: ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """``(compute_s, memory_s, time_s, bandwidth_frac, latency_s)`` of an operator making ``calls``
    kernel calls: the compute and memory times combined by ``overlap_power`` (``max`` when it
    is 0), plus ``latency_s = calls * floor_s`` (no floor for an operator with no work). The per-operator
    step and the kernel fit both time operators through this one function
    (:func:`operator_times` drops the fraction). A grouped expert GEMM also permutes its
    token-expert pairs into expert order and finalizes them back (gather, weight, sum), a pass
    of its own: ``routed`` elements (pairs x hidden) moving ``routing_bytes_per_element`` bytes
    each at the chip's bandwidth. Fitted on TensorRT-LLM's MoE tables, where every EP rank
    permutes the group's pairs: 0.6-1.8 bytes per element for bf16 and fp8 on Hopper and
    Blackwell. Worked number: 1e9 elements x 2 B at 8 TB/s -> 0.25 ms. ``pure`` may pass
    :func:`is_pure` of ``e`` when the caller knows it. With ``e.alternative`` (a second kernel
    on its own curve) every returned value is the faster kernel's, shape by shape, where the
    call's ``tokens`` (an EP group's) and ``ep`` lie in the alternative's region
    (``max_tokens``, ``min_ep``; a caller that passes neither gets the first kernel wherever
    the region is bounded); an alternative with ``only_cols`` runs at exactly that many columns,
    faster or not, and nowhere else. Worked number: kernels of 0.30 and 0.12 ms at one shape ->
    0.12 ms; the same call of 256 tokens with the second kernel bounded at 128 -> 0.30 ms.
    ``sequence_heads`` (prefill attention's sequences x query heads per call) counts its
    thread blocks with the query tiles (:func:`blocks_of`), each adding ``block_bytes`` at the
    chip's bandwidth. Arrays in give arrays out; single values give floats
    (:mod:`rackmath.core.numeric`).

    Worked number: 1 GFLOP and 1 MB at 1 PFLOP/s and 1 TB/s with the pure roofline -> 1 us
    (both terms 1 us).
    """
    work = wk.record(wk.Work, (
        num(flops), _ZERO, _ZERO, _ZERO, _ZERO, num(rows), cols, depth, num(calls), routed, tokens, ep, None,
        sequence_heads,
    ))  # fmt: skip
    return timing_of(
        e,
        work,
        num(bytes_moved),
        peak_flops_per_s,
        bandwidth_bytes_per_s,
        is_pure(e) if pure is None else pure,
    )


def timing_of(
    e: OpEfficiency,
    work: wk.Work,
    moved: FloatArray,
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    pure: bool,
    terms: ShapeTerms | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """:func:`operator_timing` of a :class:`rackmath.core.work.Work` (its fields NumPy values
    already) moving ``moved`` bytes: the one formula, without the conversions a caller with
    plain numbers needs; ``terms``: :func:`shape_terms` of ``e`` and the work's columns and
    depth where the caller keeps them."""
    f, rows, cols, depth, calls = work.flops, work.rows, work.cols, work.depth, work.calls
    if pure:
        compute_s = f / peak_flops_per_s
        memory_s = moved / bandwidth_bytes_per_s
        return compute_s, memory_s, maximum(compute_s, memory_s), _ONE, _ZERO  # type: ignore[return-value]
    if not (type(rows) is float and rows > 0.0):  # a call of no rows has no time, not 0 / 0
        rows = maximum(rows, 1e-30)
    split = None
    if e.split_tokens > 0.0 and depth is not None:
        # rows all 1 or more (one point; rows of one axis, one grid-sized product): both
        # fractions and the thread blocks split the same rows
        if type(rows) is not np.ndarray:
            if rows >= 1.0:
                split = _split_rows(e, rows, depth)
        elif rows.size < f.size and np.array_equal(maximum(rows, 1.0), rows):
            split = _split_rows(e, rows, depth)
    compute_frac, bandwidth_frac = fractions_of(e, rows, cols, depth, split, terms)
    compute_s = f / (peak_flops_per_s * compute_frac)
    if e.chain_frac and work.sequence_heads is not None and depth is not None:  # the longest query tile
        compute_s = maximum(compute_s, chain_s(e, f, peak_flops_per_s, work.sequence_heads, depth))
    # a call past the L2 re-reads the bytes it holds beyond it from DRAM
    streamed = moved + spill_bytes_of(e, moved, calls) if e.spill_passes else moved
    memory_s = streamed / (bandwidth_bytes_per_s * bandwidth_frac)
    time_s = maximum(compute_s, memory_s)
    if e.overlap_power:
        time_s = overlapped_s(compute_s, memory_s, time_s, e.overlap_power)
    if e.unaligned_slowdown and cols is not None:  # loads not vectorized on a ragged width
        time_s = time_s * (1.0 + e.unaligned_slowdown * (np.fmod(cols, ALIGNED_COLUMNS) != 0.0))
    if e.block_bytes:  # each thread block's fixed work beside its bytes (none without work)
        blocks = blocks_of(e, rows, depth, work.sequence_heads, split)
        time_s = time_s + (calls * blocks * e.block_bytes / bandwidth_bytes_per_s) * (time_s > 0)
    if e.routing_bytes_per_element and work.routed is not None:
        time_s = time_s + num(work.routed) * e.routing_bytes_per_element / bandwidth_bytes_per_s
    latency_s: FloatArray = _ZERO  # type: ignore[assignment]
    if e.floor_s:  # time_s > 0 exactly where the operator has work (flops or bytes)
        latency_s = calls * e.floor_s
        if type(time_s) is not np.ndarray:  # one point: a floor times True is the floor itself
            if not time_s > 0.0:
                latency_s = latency_s * (time_s > 0)
        elif not (time_s.size and time_s.min() > 0.0):
            latency_s = latency_s * (time_s > 0)
        else:  # work everywhere: the floors themselves (times True), at the time's shape
            latency_s = np.broadcast_to(latency_s, np.broadcast_shapes(np.shape(latency_s), time_s.shape))
        time_s = time_s + latency_s
    if e.alternative is not None:  # a second kernel: the faster of the two at each shape
        alt = e.alternative
        other = timing_of(alt, work, moved, peak_flops_per_s, bandwidth_bytes_per_s, False)
        faster = other[2] < time_s
        if alt.only_cols:  # dispatched by shape, not chosen by speed
            at = np.equal(cols, alt.only_cols) if cols is not None else False
            faster = np.broadcast_to(at, np.broadcast_shapes(np.shape(faster), np.shape(at)))
        elif alt.max_tokens < np.inf or alt.min_ep > 1.0:
            if work.tokens is None or work.ep is None:
                faster = np.zeros_like(faster)
            else:
                faster = faster & (num(work.tokens) <= alt.max_tokens) & (num(work.ep) >= alt.min_ep)
        return tuple(  # type: ignore[return-value]
            np.where(faster, b, a)[()]
            for a, b in zip((compute_s, memory_s, time_s, bandwidth_frac, latency_s), other, strict=True)
        )
    return compute_s, memory_s, time_s, bandwidth_frac, latency_s


def overlapped_s(
    compute_s: FloatArray, memory_s: FloatArray, longer_s: FloatArray, power: float
) -> FloatArray:
    """``(compute_s^p + memory_s^p)^(1/p)``, computed as ``longer * (a^p + b^p)^(1/p)`` with both
    ratios to the longer time ``longer_s`` in [0, 1] (no overflow or underflow at p = 20; an
    operator with no work stays at 0). Worked number: 3 and 4 us, p = 2 -> 5 us."""
    if type(longer_s) is not np.ndarray:  # one point: no array to guard
        if not longer_s > 0.0:
            return longer_s
        shorter = compute_s + memory_s - longer_s
        return longer_s * (1.0 + (shorter / longer_s) ** power) ** (1.0 / power)
    # the longer time's ratio is 1 exactly (1^p = 1), so only the shorter one's power is taken:
    # the same numbers as summing both powers, at one power of the grid instead of two
    scale = longer_s if longer_s.size and longer_s.min() > 1e-300 else maximum(longer_s, 1e-300)
    shorter = np.minimum(compute_s, memory_s)
    return longer_s * ((shorter / scale) ** power + 1.0) ** (1.0 / power)


def operator_times(*args: Any, **kwargs: Any) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(compute_s, memory_s, time_s)``: :func:`operator_timing` (the same arguments)
    without the bandwidth fraction."""
    compute_s, memory_s, time_s, _, _ = operator_timing(*args, **kwargs)
    return compute_s, memory_s, time_s


def operator_time_s(*args: Any, **kwargs: Any) -> FloatArray:
    """An operator's time: :func:`operator_timing` (the same arguments), its ``time_s``."""
    return operator_timing(*args, **kwargs)[2]


def collective_timing(
    c: CollectiveEfficiency,
    wire_bytes: ArrayLike,
    link_bytes_per_s: float,
    link_latency_s: float = 0.0,
    chips: ArrayLike | None = None,
    sm_tokens: ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """``(time_s, latency_s)`` of one collective call: the whole time and its fixed part,
    ``latency_s + (chips - 1) hop_latency_s`` (what :attr:`rackmath.core.operators.Operator.
    latency_s` reports). See :func:`collective_time_s`."""
    latency_s = num(link_latency_s if c.latency_s is None else c.latency_s)
    if chips is not None and c.hop_latency_s:
        latency_s = latency_s + maximum(num(chips) - 1.0, 0.0) * c.hop_latency_s
    x = num(wire_bytes) / (link_bytes_per_s * c.bandwidth_frac)
    if chips is not None and c.group_bandwidth_power:
        x = x * (maximum(num(chips), 2.0) / 2.0) ** c.group_bandwidth_power
    time = latency_s + x
    if c.pipeline_latency_s:
        time = time + 2.0 * (c.pipeline_latency_s * x) ** 0.5
    if sm_tokens is not None and c.sm_token_s:
        time = time + num(sm_tokens) * c.sm_token_s
    return time, latency_s


def collective_time_s(
    c: CollectiveEfficiency,
    wire_bytes: ArrayLike,
    link_bytes_per_s: float,
    link_latency_s: float = 0.0,
    chips: ArrayLike | None = None,
    sm_tokens: ArrayLike | None = None,
) -> FloatArray:
    """One collective call:
    ``latency_s + (chips - 1) hop_latency_s + x + 2 sqrt(pipeline_latency_s x)
    + sm_tokens sm_token_s``, where
    ``x = wire_bytes / (link_bytes_per_s * bandwidth_frac) * (max(chips, 2) / 2)^g``
    (``g = group_bandwidth_power``: a rank's bandwidth falls with the group on a PCIe host;
    :class:`CollectiveEfficiency`).

    ``wire_bytes`` is what each chip sends over its link (a ring all-reduce of S bytes on n
    chips sends 2 (n-1)/n S; :mod:`rackmath.core.work`). ``link_latency_s`` is used when
    ``c.latency_s`` is None; the hop term only when ``chips`` is given; the pipeline term
    (chunks streamed through a ring, :class:`CollectiveEfficiency`) only where fitted.
    ``sm_tokens`` (DeepEP's low-latency kernels: the tokens the busiest SM handles in turn,
    :func:`rackmath.core.work.sm_tokens`) adds ``sm_token_s`` a token where the curve has it:
    added to the wire's time, not the larger of the two, as an SM sends each token's copies
    before it casts the next, and the held-out fit says so too (GB200 dispatch p90 28% added,
    32% as a max; ``docs/calibration.md``, "DeepEP low-latency: one SM per expert").
    Worked number: 10 us latency, 450 MB over 450 GB/s at fraction 0.9 -> 10 us + 1.111 ms;
    with 1 us per hop on 8 chips, 7 us more; with a 4 us pipeline latency,
    ``2 sqrt(4 us x 1.111 ms)`` = 133 us more; with a group power of 2 on 8 chips (and no
    pipeline term) the 1.111 ms is 16 times as long, 17.78 ms; with 128 tokens an SM at 2.5 us
    a token (and none of the three), 320 us more. Single values give floats.
    """
    return collective_timing(c, wire_bytes, link_bytes_per_s, link_latency_s, chips, sm_tokens)[0]
