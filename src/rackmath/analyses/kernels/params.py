"""The parameters a kernel curve is fitted in: their order, bounds and start (log space), and the
:class:`~rackmath.specs.efficiency.OpEfficiency` a parameter vector stands for
(:func:`curve_of`). :mod:`rackmath.analyses.kernels.fit` searches them.
"""

from __future__ import annotations

import numpy as np

from rackmath.specs.efficiency import MAX_OVERLAP_POWER, OpEfficiency

# Fitted parameters (log space): compute_frac, compute_half_rows, bandwidth_frac,
# bandwidth_half_rows, floor_s, compute_half_cols, compute_half_depth, overlap_power,
# routing_bytes_per_element (MoE: 1e-4 to 1e3 bytes per routed element at full HBM speed),
# split_tokens (decode attention: 64 tokens to 1e7, which is no split at any context),
# split_max (the most splits a row takes: 1 to 1e4, the top being no cap at any context) and
# block_bytes (attention: what a thread block adds, as bytes at HBM speed: 1e-2 to 1e7; below
# NO_BLOCK_BYTES it is none), unaligned_slowdown (grouped experts on ragged widths: 1e-4-10) and
# chain_frac (prefill attention: the peak share of its longest block, 1e-6-1; none at compute_frac)
# and split_fill (decode: the blocks a call fills before it stops splitting, 1-1e7) and
# spill_passes (causal prefill on a chip whose L2 is stated: the more times a call reads its bytes
# beyond the L2, 1e-4-100; below NO_SPILL_PASSES none) and warm_speedup (GEMM, MoE and prefill
# attention rows of a table that replayed its calls warm: how much faster a call that fits in the
# L2 read its bytes, 1-100; below NO_WARM_SPEEDUP none).
#: The most times faster than DRAM a warm-replayed call within the L2 reads its bytes: the top of
#: ``warm_speedup``'s range, and what a table row within the L2 may run at before it is rejected as
#: not the operator's timing (:meth:`rackmath.analyses.kernels.op_rows.OpRows.possible`).
MAX_WARM_SPEEDUP = 100.0
# fmt: off
LOG_LO = np.log([1e-5, 1e-3, 1e-5, 1e-3, 1e-8, 1e-3, 1e-3, 1.0, 1e-4, 64.0, 1.0, 1e-2, 1e-4, 1e-6, 1.0,
                  1e-4, 1.0])
LOG_HI = np.log([1.0, 1e5, 1.0, 1e5, 1e-3, 1e5, 1e5, MAX_OVERLAP_POWER, 1e3, 1e7, 1e4, 1e7, 10.0, 1.0, 1e7,
                  100.0, MAX_WARM_SPEEDUP])
START = np.log([0.7, 16.0, 0.7, 1.0, 5e-6, 64.0, 64.0, 4.0, 2.0, 4096.0, 64.0, 1e3, 0.3, 1e-2, 1e3, 0.5,
                3.0])
# fmt: on
#: A fitted split above this is no split at any context the tables hold (128K tokens).
NO_SPLIT_TOKENS = 1e6
#: A fitted thread block cost below this many bytes is none (a microsecond per 300,000 blocks
#: at 3 TB/s).
NO_BLOCK_BYTES = 10.0
#: A fitted cap above this many splits a row is no cap at any context the tables hold.
NO_SPLIT_MAX = 5e3
#: A fitted fill above this many blocks a call caps no split in the tables (a row splits at most
#: 128K / 64 = 2,048 times).
NO_SPLIT_FILL = 1e6
#: A fitted spill below this many passes is none (1% of the bytes beyond the L2 read again).
NO_SPILL_PASSES = 1e-2
#: A fitted warm speedup below this is none (a call that fits in the L2 read 5% faster).
NO_WARM_SPEEDUP = 1.05


# fmt: off
def curve_of(
    p: np.ndarray, with_cols: bool, tile: float = 0.0, row_tile: float = 0.0, bandwidth_tile: float = 0.0,
    with_routing: bool = False, with_split: bool = False, col_tile: float = 0.0, with_blocks: bool = False,
    block_tile: float = 0.0, with_unaligned: bool = False, with_chain: bool = False, cache_bytes: float = 0.0,
    with_warm: bool = False,
) -> OpEfficiency:
    # fmt: on
    """The curve the parameter vector ``p`` (log space, in the order above) stands for, with the
    fit's discrete choices (tiles) and which terms the class fits; a term fitted past its
    ``NO_*`` edge is none."""
    c, h, b, hb, fl, hn, hk, power, routing, split, split_max, block, unaligned, chain, fill, spill, warm = (
        np.exp(p)
    )
    splitting = with_split and split < NO_SPLIT_TOKENS
    chain = float(chain) if with_chain and chain < min(c, 1.0) else 0.0  # else it never binds
    spill = float(spill) if cache_bytes > 0.0 and spill >= NO_SPILL_PASSES else 0.0
    tiled = with_blocks and (block > NO_BLOCK_BYTES or chain > 0.0)
    split = float(split) if splitting else 0.0
    split_max = float(split_max) if splitting and split_max < NO_SPLIT_MAX else 0.0
    return OpEfficiency(
        compute_frac=float(min(c, 1.0)),
        compute_half_rows=float(h),
        bandwidth_frac=float(min(b, 1.0)),
        bandwidth_half_rows=float(hb),
        floor_s=float(fl),
        compute_half_cols=float(hn) if with_cols else 0.0,
        compute_half_depth=float(hk) if with_cols else 0.0,
        bandwidth_tile_depth=float(tile),
        compute_tile_rows=float(row_tile),
        bandwidth_tile=float(bandwidth_tile),
        overlap_power=float(min(max(power, 1.0), MAX_OVERLAP_POWER)),
        routing_bytes_per_element=float(routing) if with_routing else 0.0,
        split_tokens=split,
        split_max=split_max,
        compute_tile_cols=float(col_tile),
        block_bytes=float(block) if with_blocks and block > NO_BLOCK_BYTES else 0.0,
        block_tile_rows=float(block_tile) if tiled else 0.0,
        unaligned_slowdown=float(unaligned) if with_unaligned else 0.0,
        chain_frac=chain,
        split_fill=float(fill) if splitting and fill < NO_SPLIT_FILL else 0.0,
        spill_bytes=float(cache_bytes) if spill > 0.0 else 0.0,
        spill_passes=spill,
        warm_speedup=float(warm) if with_warm and warm >= NO_WARM_SPEEDUP else 0.0,
    )
