"""The kernel model's physical terms (core/efficiency.py) and the table rows it rejects
(analyses/kernels/rows.py): worked numbers from the docstrings, recomputed by hand, and the
invariants the forms must keep."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.analyses.kernels import rows as kr
from rackmath.core import work as wk
from rackmath.core.efficiency import (
    achieved_bandwidth_frac,
    blocks_of,
    chain_s,
    collective_time_s,
    collective_timing,
    operator_time_s,
    operator_timing,
    overlapped_s,
)
from rackmath.errors import InputError
from rackmath.specs import efficiency as seff
from rackmath.specs.efficiency import CollectiveEfficiency, OpEfficiency


def test_power_mean_overlap_worked_numbers() -> None:
    """3 us of compute and 4 us of memory: p = 2 -> 5 us, p = 1 (no overlap) -> 7 us, max -> 4 us."""
    c, m = np.float64(3e-6), np.float64(4e-6)
    assert overlapped_s(c, m, max(c, m), 2.0) == pytest.approx(5e-6)
    assert overlapped_s(c, m, max(c, m), 1.0) == pytest.approx(7e-6)
    # through the operator: 3 GFLOP at 1 PFLOP/s and 4 MB at 1 TB/s
    e = OpEfficiency(overlap_power=2.0)
    assert operator_time_s(e, 3e9, 4e6, 1e15, 1e12, 1.0) == pytest.approx(5e-6)
    assert operator_time_s(OpEfficiency(), 3e9, 4e6, 1e15, 1e12, 1.0) == pytest.approx(4e-6)


@given(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(1.0, 20.0),
)
def test_power_mean_lies_between_the_max_and_the_sum(c: float, m: float, p: float) -> None:
    t = float(overlapped_s(np.float64(c), np.float64(m), np.float64(max(c, m)), p))
    assert max(c, m) * (1 - 1e-12) <= t <= (c + m) * (1 + 1e-12)


def test_an_operator_with_no_work_stays_at_zero_with_overlap() -> None:
    e = OpEfficiency(overlap_power=1.5, floor_s=1e-5)
    assert operator_time_s(e, 0.0, 0.0, 1e15, 1e12, 1.0) == 0.0


def test_bandwidth_saturates_in_output_tiles_when_a_tile_is_set() -> None:
    """Tile 128, half count 8: 1 row x 768 columns is 6 tiles -> 6/14 of the fraction; 256 x
    14,336 is 2 x 112 = 224 tiles -> 224/232. Without the columns the rows form is kept."""
    e = OpEfficiency(bandwidth_frac=0.8, bandwidth_half_rows=8.0, bandwidth_tile=128.0)
    assert achieved_bandwidth_frac(e, 1.0, cols=768.0) == pytest.approx(0.8 * 6 / 14)
    assert achieved_bandwidth_frac(e, 256.0, cols=14336.0) == pytest.approx(0.8 * 224 / 232)
    assert achieved_bandwidth_frac(e, 256.0) == pytest.approx(0.8 * 256 / 264)


def test_bandwidth_rows_are_floored_at_one() -> None:
    """An expected row count below one (1 token over 256 experts) streams weights like one row:
    more tokens can never make the weight stream faster per byte and the call quicker."""
    e = OpEfficiency(bandwidth_frac=0.9, bandwidth_half_rows=0.5)
    assert achieved_bandwidth_frac(e, 0.01) == pytest.approx(achieved_bandwidth_frac(e, 1.0))
    assert achieved_bandwidth_frac(e, 1.0) == pytest.approx(0.9 / 1.5)


def test_the_routing_pass_moves_its_bytes_at_the_chips_bandwidth() -> None:
    """1e9 routed elements x 2 bytes at 8 TB/s add 0.25 ms; at 16 TB/s (a chip twice as fast,
    or two chips acting as one) half of it."""
    e = OpEfficiency(routing_bytes_per_element=2.0)
    base = operator_time_s(OpEfficiency(), 1e9, 1e9, 1e15, 8e12, 1.0)
    assert operator_time_s(e, 1e9, 1e9, 1e15, 8e12, 1.0, routed=1e9) == pytest.approx(base + 2.5e-4)
    assert operator_time_s(e, 1e9, 1e9, 1e15, 8e12, 1.0) == pytest.approx(base)  # not routed
    fast = operator_time_s(OpEfficiency(), 1e9, 1e9, 1e15, 16e12, 1.0)
    assert operator_time_s(e, 1e9, 1e9, 1e15, 16e12, 1.0, routed=1e9) == pytest.approx(fast + 1.25e-4)


def test_each_thread_block_adds_its_fixed_work_at_the_chips_bandwidth() -> None:
    """A decode call of 1,024 sequences x 64 KV heads runs 65,536 thread blocks: at 30 kB a
    block and 3 TB/s they add 0.655 ms to the streamed bytes' time, 80 calls 80 times that, and
    a chip twice as fast (or two pooled) half. A split-KV curve multiplies the blocks: 8 rows
    at 131,072 tokens split every 16,384 are 64 blocks (64 x 1 kB at 1 TB/s = 64 ns); split at
    most 4 times a row, 32 (32 ns)."""
    e = OpEfficiency(block_bytes=30e3)
    base = operator_time_s(OpEfficiency(), 1e9, 1e9, 1e15, 3e12, 65536.0)
    assert operator_time_s(e, 1e9, 1e9, 1e15, 3e12, 65536.0) == pytest.approx(base + 0.65536e-3)
    eighty = operator_time_s(e, 80e9, 80e9, 1e15, 3e12, 65536.0, calls=80.0)
    assert eighty == pytest.approx(80 * (base + 0.65536e-3))
    fast = operator_time_s(OpEfficiency(), 1e9, 1e9, 2e15, 6e12, 65536.0)
    assert operator_time_s(e, 1e9, 1e9, 2e15, 6e12, 65536.0) == pytest.approx(fast + 0.32768e-3)
    split = OpEfficiency(block_bytes=1e3, split_tokens=16384.0)
    assert operator_time_s(split, 0.0, 1e6, 1e15, 1e12, 8.0, depth=131072.0) == pytest.approx(1e-6 + 64e-9)
    capped = OpEfficiency(block_bytes=1e3, split_tokens=16384.0, split_max=4.0)
    assert operator_time_s(capped, 0.0, 1e6, 1e15, 1e12, 8.0, depth=131072.0) == pytest.approx(1e-6 + 32e-9)
    assert operator_time_s(e, 0.0, 0.0, 1e15, 1e12, 8.0) == 0.0  # no work, no blocks


def test_a_decode_call_whose_rows_fill_the_chip_is_not_split() -> None:
    """The docstring's worked numbers: 8 rows of 131,072 tokens split every 16,384 are 64
    blocks; at most 4 splits a row, 32; a fill of 16 blocks, 16; 64 rows at a fill of 16, 64
    (not split). More rows never split into more blocks per row."""
    for e, rows, blocks in (
        (OpEfficiency(split_tokens=16384.0), 8.0, 64.0),
        (OpEfficiency(split_tokens=16384.0, split_max=4.0), 8.0, 32.0),
        (OpEfficiency(split_tokens=16384.0, split_fill=16.0), 8.0, 16.0),
        (OpEfficiency(split_tokens=16384.0, split_fill=16.0), 64.0, 64.0),
    ):
        assert float(blocks_of(e, np.float64(rows), 131072.0)) == blocks
    e = OpEfficiency(split_tokens=512.0, split_max=64.0, split_fill=600.0)
    rows = np.arange(1.0, 2049.0)
    per_row = blocks_of(e, rows, 65536.0) / rows
    assert np.all(np.diff(per_row) <= 1e-12) and per_row[-1] == 1.0


def test_a_ragged_width_slows_the_kernel_by_its_fitted_share() -> None:
    """1 ms of work at 116 columns on a curve with ``unaligned_slowdown`` 0.4: 1.4 ms; at 128
    columns (a whole number of 16) 1 ms; over a grid of widths only the ragged ones slow; a
    curve without the term ignores the width."""
    e = OpEfficiency(unaligned_slowdown=0.4)
    assert operator_time_s(e, 1e12, 0.0, 1e15, 1e12, 1e6, cols=116.0) == pytest.approx(1.4e-3)
    assert operator_time_s(e, 1e12, 0.0, 1e15, 1e12, 1e6, cols=128.0) == pytest.approx(1e-3)
    widths = np.array([48.0, 58.0, 84.0, 96.0, 168.0, 232.0, 464.0])
    t = operator_time_s(e, 1e12, 0.0, 1e15, 1e12, 1e6, cols=widths)
    assert list(np.round(t * 1e3, 9)) == [1.0, 1.4, 1.4, 1.0, 1.4, 1.4, 1.0]
    assert operator_time_s(OpEfficiency(), 1e12, 0.0, 1e15, 1e12, 1e6, cols=116.0) == pytest.approx(1e-3)


def test_a_prefill_runs_a_block_per_query_tile_of_each_sequence_and_head() -> None:
    """2 prompts x 64 heads of 1,000 queries in tiles of 128: 8 tiles each, 1,024 blocks; no
    tile: 128 blocks. The work says how many (sequence, head) runs it has."""
    w = wk.prefill_attention(2000.0, 64.0, 8.0, 64.0, 64.0, 1000.0, flops=1e12)
    assert float(w.sequence_heads) == 128.0  # 2 sequences (2,000 tokens of 1,000) x 64 heads
    tiled = OpEfficiency(block_bytes=1.0, block_tile_rows=128.0)
    assert float(blocks_of(tiled, w.rows, w.depth, w.sequence_heads)) == 1024.0
    assert float(blocks_of(OpEfficiency(block_bytes=1.0), w.rows, w.depth, w.sequence_heads)) == 128.0
    alone = operator_time_s(OpEfficiency(), w.flops, w.bytes, 1e15, 1e12, w.rows, w.cols, w.depth)
    with_blocks = operator_time_s(
        OpEfficiency(block_bytes=1e6, block_tile_rows=128.0), w.flops, w.bytes, 1e15, 1e12,
        w.rows, w.cols, w.depth, sequence_heads=w.sequence_heads,
    )  # fmt: skip
    assert with_blocks == pytest.approx(alone + 1024 * 1e6 / 1e12)


def test_a_causal_prefill_lasts_at_least_its_longest_query_tile() -> None:
    """The docstring's worked number: 1 TFLOP over 2 sequence-heads of 4,095 queries, tiles of
    128, 1 PFLOP/s, chain_frac 0.004: the last tile is 2 x 128 / 4,096 = 1/16 of a
    sequence-head's 0.5 TFLOP, at 4 TFLOP/s -> 7.8125 ms, and it is the compute time when the
    rest would take 1 ms. With 64 sequence-heads of the same FLOPs the chain is 0.24 ms and the
    curve's 1 ms stands; a prompt no longer than twice a tile is one block's whole run."""
    e = OpEfficiency(chain_frac=0.004, block_tile_rows=128.0)
    one = np.float64(1e12)
    assert chain_s(e, one, 1e15, 2.0, 4095.0) == pytest.approx(0.5e12 / 16 / 4e12)
    assert operator_time_s(
        e, 1e12, 0.0, 1e15, 1e12, 8190.0, depth=4095.0, sequence_heads=2.0
    ) == pytest.approx(7.8125e-3)
    assert operator_time_s(
        e, 1e12, 0.0, 1e15, 1e12, 8190.0, depth=4095.0, sequence_heads=64.0
    ) == pytest.approx(1e-3)
    assert chain_s(e, one, 1e15, 2.0, 200.0) == pytest.approx(0.5e12 / 4e12)
    # no sequence-heads known (a GEMM, a decode call): no chain
    assert operator_time_s(e, 1e12, 0.0, 1e15, 1e12, 8190.0, depth=4095.0) == pytest.approx(1e-3)


@given(heads=st.floats(1.0, 4096.0), depth=st.floats(1.0, 131072.0))
def test_more_sequence_heads_never_lengthen_the_chain(heads: float, depth: float) -> None:
    """At equal FLOPs, spreading a prefill over more sequence-heads, or the same heads over a
    longer prompt, never makes its longest block longer."""
    e = OpEfficiency(chain_frac=0.003, block_tile_rows=64.0)
    f = np.float64(1e12)
    assert chain_s(e, f, 1e15, heads * 2.0, depth) <= chain_s(e, f, 1e15, heads, depth)
    assert chain_s(e, f, 1e15, heads, depth * 2.0) <= chain_s(e, f, 1e15, heads, depth)


@pytest.mark.parametrize("power", [0.5, 25.0, float("nan")])
def test_an_overlap_power_outside_its_range_is_refused(power: float) -> None:
    with pytest.raises(InputError, match="overlap_power"):
        OpEfficiency(overlap_power=power)


def test_deepep_low_latency_takes_its_busiest_sm_s_turns() -> None:
    """``core.work.sm_tokens``' worked numbers: 1,024 tokens over Mixtral's 8 experts -> 128 turns
    of one SM; DeepSeek-V3's 256 experts, 128 tokens -> 1. An expert exchange given those turns
    carries them; without, 0 and the rest unchanged. ``collective_time_s``' worked number: 128
    turns at 2.5 us add 320 us to the line."""
    assert wk.sm_tokens(1024.0, 8.0) == 128.0
    assert wk.sm_tokens(128.0, 256.0) == 1.0
    assert wk.sm_tokens(0.0, 8.0) == 0.0
    assert wk.sm_tokens(np.array([1.0, 8.0, 9.0]), 8.0).tolist() == [1.0, 1.0, 2.0]
    plain = wk.expert_exchange(1024.0, 2.0, 4096.0, wk.FP8_DISPATCH_BYTES, 4.0)
    turns = wk.sm_tokens(1024.0, 8.0)
    ll = wk.expert_exchange(1024.0, 2.0, 4096.0, wk.FP8_DISPATCH_BYTES, 4.0, sm_tokens=turns)
    assert plain.sm_tokens == 0.0 and ll.sm_tokens == 128.0
    assert ll[:4] == plain[:4]
    c = CollectiveEfficiency(latency_s=10e-6, bandwidth_frac=0.9, sm_token_s=2.5e-6)
    assert collective_time_s(c, 450e6, 450e9, sm_tokens=128.0) == pytest.approx(10e-6 + 1e-3 / 0.9 + 320e-6)
    assert collective_time_s(c, 450e6, 450e9) == pytest.approx(10e-6 + 1e-3 / 0.9)  # no count: no term
    # the turns are not the call's fixed part (0 tokens, 0 turns)
    assert collective_timing(c, 450e6, 450e9, sm_tokens=128.0)[1] == pytest.approx(10e-6)


def test_a_curve_without_the_sm_term_times_as_before_bit_for_bit() -> None:
    """``sm_token_s = 0`` (every curve but DeepEP low-latency's) leaves a collective's time as it
    was, to the bit, whatever count the caller passes."""
    wire = np.logspace(3, 9, 25)
    chips = np.repeat([2.0, 4.0, 8.0, 16.0, 32.0], 5)
    turns = np.arange(25.0)
    for c in (
        CollectiveEfficiency(latency_s=7e-6, bandwidth_frac=0.8, hop_latency_s=1e-6, pipeline_latency_s=2e-6),
        CollectiveEfficiency(latency_s=None, bandwidth_frac=0.5, group_bandwidth_power=2.0),
    ):
        before = collective_timing(c, wire, 450e9, 3e-6, chips)
        after = collective_timing(c, wire, 450e9, 3e-6, chips, turns)
        assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])


@pytest.mark.parametrize("value", [-1e-6, float("nan"), float("inf"), True, "1e-6"])
def test_a_negative_or_nan_sm_token_time_is_refused_by_name(value: object) -> None:
    with pytest.raises(InputError, match="sm_token_s"):
        CollectiveEfficiency(latency_s=1e-5, bandwidth_frac=0.5, sm_token_s=value)  # type: ignore[arg-type]
    assert CollectiveEfficiency(sm_token_s=2.4e-6).sm_token_s == 2.4e-6


def _moe_table(rows: list[tuple[int, int, int, float]]) -> pd.DataFrame:
    """MoE rows (num_tokens, tp, ep, latency ms) of one shape: 8 experts, top-2, 4096 x 14336."""
    df = pd.DataFrame(
        {
            "moe_dtype": "bfloat16",
            "kernel_source": "moe_torch_flow_cutlass",
            "num_tokens": [r[0] for r in rows],
            "hidden_size": 4096,
            "inter_size": 14336,
            "topk": 2,
            "num_experts": 8,
            "moe_tp_size": [r[1] for r in rows],
            "moe_ep_size": [r[2] for r in rows],
            "distribution": "balanced",
            "latency": [r[3] for r in rows],
        }
    )
    df.attrs["kind"] = "moe"
    return df


def test_balanced_routing_hits_min_of_experts_and_pairs() -> None:
    """2 tokens with top-2 of 8 experts are dealt to 4 distinct experts (random routing would
    expect 8 (1 - (3/4)^2) = 3.5): the weights of 4 experts of 3 x 4096 x 14336 bf16 values.
    Each pair moves its hidden in and out and the gate/up outputs in and out of the down GEMM:
    (4096 + 14336) + (2 x 14336 + 4096) = 51,200 bf16 values (core/work.grouped_gemm)."""
    r = kr.table_rows(_moe_table([(2, 1, 1, 0.5), (64, 1, 1, 1.0)]))[seff.OpClass.MOE]
    weights = 3 * 4096 * 14336 * 2.0
    per_pair = ((4096 + 14336) + (2 * 14336 + 4096)) * 2.0
    assert r.bytes[0] == pytest.approx(4 * weights + 4 * per_pair)
    assert r.bytes[1] == pytest.approx(8 * weights + 128 * per_pair)
    assert r.routed is not None and r.routed[0] == pytest.approx(2 * 2 * 4096)


def test_a_row_slower_than_a_superset_of_its_work_is_rejected() -> None:
    """The H100 table's pattern: EP 4 at 5.0 ms while EP 2 (twice the experts, twice the pairs)
    takes 2.1 ms; EP 8 at 0.55 ms and fewer tokens at less time stay."""
    df = _moe_table(
        [(64, 1, 1, 4.27), (64, 1, 2, 2.14), (64, 1, 4, 5.08), (64, 1, 8, 0.546), (32, 1, 8, 0.40)]
    )
    flagged = kr._moe_slower_than_superset(df)
    assert flagged.tolist() == [False, False, True, False, False]
    kept = kr.table_rows(df)[seff.OpClass.MOE]
    assert len(kept.latency_s) == 4 and 5.08e-3 not in kept.latency_s
    assert len(kr.table_rows(df, physical=False)[seff.OpClass.MOE].latency_s) == 5


def test_a_row_faster_than_hbm_allows_is_rejected_before_the_fastest_kernel_is_chosen() -> None:
    """A second kernel timed at 0.05 ms for 8 experts' weights (2.8 GB: 0.84 ms at 3.35 TB/s)
    cannot have streamed them from HBM; the slower, possible kernel is the operator's time."""
    df = _moe_table([(64, 1, 1, 1.0)])
    fast = df.assign(kernel_source="moe_torch_flow_min_latency", latency=0.05)
    both = pd.concat([df, fast], ignore_index=True)
    both.attrs["kind"] = "moe"
    kept = kr.table_rows(both, hbm_bytes_per_s=3.35e12)[seff.OpClass.MOE]
    assert kept.latency_s.tolist() == pytest.approx([1.0e-3])
    assert kr.table_rows(both)[seff.OpClass.MOE].latency_s.tolist() == pytest.approx([0.05e-3])


def test_a_kernel_whose_ep1_rows_repeat_its_ep2_work_loses_its_ep1_rows() -> None:
    """At 256 and 1,024 tokens every expert is hit, so EP 1 streams twice the weights of EP 2:
    the cutlass kernel takes 1.8x as long and keeps its EP-1 rows; a kernel timing EP 1 at the
    EP-2 time (B200 NVFP4 min-latency: median ratio 1.00) loses them, and only them."""
    cutlass = _moe_table([(256, 1, 1, 1.8), (256, 1, 2, 1.0), (1024, 1, 1, 3.6), (1024, 1, 2, 2.0)])
    same = cutlass.assign(kernel_source="moe_torch_flow_min_latency", latency=[1.0, 1.0, 2.0, 2.0])
    both = pd.concat([cutlass, same], ignore_index=True)
    flagged = kr._moe_ep1_not_scaling(both)
    assert flagged.tolist() == [False] * 4 + [True, False, True, False]


def test_an_sglang_0510_row_runs_min_ep_topk_times_the_ranks_share_of_pairs() -> None:
    """16,384 tokens, top-2 of 8 experts, EP 8: the rank's share is 16384 x 2 / 8 = 4,096 pairs;
    an SGLang 0.5.10 timing ran min(8, 2) = 2 times that, 8,192 pairs of 3 x 4096 x 14336
    (1.44e15 FLOPs), while the weights stay those of its one local expert."""
    trt = _moe_table([(16384, 1, 8, 14.1)])
    sgl = trt.assign(framework="SGLang", version="0.5.10")
    sgl.attrs["kind"] = "moe"
    r_trt, r_sgl = (kr.table_rows(t)[seff.OpClass.MOE] for t in (trt, sgl))
    assert r_trt.flops[0] == pytest.approx(2 * 3 * 4096 * 14336 * 4096)
    assert r_sgl.flops[0] == pytest.approx(2 * 3 * 4096 * 14336 * 8192)
    weights = 3 * 4096 * 14336 * 2.0  # one local expert, bf16
    per_pair = ((4096 + 14336) + (2 * 14336 + 4096)) * 2.0
    assert r_sgl.bytes[0] - 8192 * per_pair == pytest.approx(weights)
    assert r_sgl.rows[0] == pytest.approx(2 * r_trt.rows[0])  # 8,192 pairs on the one expert


def test_the_ep1_rule_keeps_a_kernel_whose_ep1_and_ep2_do_the_same_work() -> None:
    """In an SGLang 0.5.10 table EP 1 and EP 2 run the same pairs (min(ep, topk) / ep = 1), so
    EP 1 taking the EP-2 time is the operator's time and its rows stay."""
    flat = _moe_table([(4096, 1, 1, 25.7), (4096, 1, 2, 25.7), (8192, 1, 1, 50.0), (8192, 1, 2, 49.0)])
    flat = flat.assign(framework="SGLang", version="0.5.10")
    assert not kr._moe_ep1_not_scaling(flat).any()
    assert kr._moe_ep1_not_scaling(flat.assign(framework="TensorRT-LLM")).tolist() == [True, False] * 2


def test_trtllm_decode_attention_beyond_32_query_heads_per_kv_head_reads_per_query_head() -> None:
    """32 sequences at 2,048 tokens, head dim 128, bf16 KV: 32 query heads on 1 KV head read the
    cache once (32 x 2048 x 2 x 128 x 2 B = 33.6 MB); 64 on 1 read it 64 times in a TensorRT-LLM
    table (2.15 GB, a group of 1), once in another framework's."""
    df = pd.DataFrame(
        {
            "framework": ["TRTLLM", "TRTLLM", "SGLang"],
            "batch_size": 32,
            "isl": 1,
            "num_heads": [32, 64, 64],
            "num_key_value_heads": 1,
            "head_dim": 128,
            "window_size": 0,
            "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16",
            "step": 2047,
            "latency": [0.015, 0.300, 0.030],
        }
    )
    df.attrs["kind"] = "generation_attention"
    r = kr.table_rows(df)[seff.OpClass.ATTENTION_DECODE]
    cache = 32 * 2048 * 2 * 128 * 2.0
    queries = 4 * 32 * 128 * np.array([32, 64, 64])
    assert (r.bytes - queries).tolist() == pytest.approx([cache, 64 * cache, cache])
    assert r.cols is not None and r.cols.tolist() == [32.0, 1.0, 64.0]


def test_gated_and_non_gated_moe_rows_are_fitted_as_two_curves() -> None:
    """A non-gated kernel (2 matrices: FLOPs and weights are 2/3 of the gated call's) is its own
    fit group beside the gated rows of the same dtype."""
    gated = _moe_table([(64, 1, 1, 1.0)])
    plain = gated.assign(kernel_source="moe_torch_flow_nongated")
    both = pd.concat([gated, plain], ignore_index=True)
    both.attrs["kind"] = "moe"
    r = kr.table_rows(both)[seff.OpClass.MOE]
    gated_rows = r.kind == "gated"
    assert sorted(r.kind.tolist()) == ["gated", "nongated"]
    assert r.flops[~gated_rows][0] == pytest.approx(r.flops[gated_rows][0] * 2 / 3)
    groups = [(dt, k, int(m.sum())) for dt, k, _, m in kr.fit_groups(r)]
    assert groups == [("bfloat16", "gated", 1), ("bfloat16", "nongated", 1)]


def test_an_operator_with_two_kernels_takes_the_faster_at_each_shape() -> None:
    """A throughput kernel with a 100 us floor and a min-latency kernel at a tenth of the
    bandwidth with a 10 us floor, on 1 MB and 1 GB at 1 TB/s: the small call takes the
    min-latency kernel (10 us + 10 us = 20 us, not 101 us), the large one the throughput kernel
    (1.1 ms, not 10 ms); the compute and memory times reported are the winner's."""
    fast_small = OpEfficiency(bandwidth_frac=0.1, floor_s=10e-6, kernel="min_latency")
    e = OpEfficiency(floor_s=100e-6, kernel="throughput", alternative=fast_small)
    _, memory_s, time_s, _, latency_s = operator_timing(e, np.zeros(2), np.array([1e6, 1e9]), 1e15, 1e12, 1.0)
    assert latency_s.tolist() == pytest.approx([10e-6, 100e-6])  # the winner's launch floor
    assert time_s.tolist() == pytest.approx([20e-6, 1.1e-3])
    assert memory_s.tolist() == pytest.approx([10e-6, 1e-3])
    one = operator_timing(e, 0.0, 1e6, 1e15, 1e12, 1.0)[2]
    assert type(one) is np.float64 and one == pytest.approx(20e-6)


def test_a_second_kernel_runs_only_in_its_region() -> None:
    """The min-latency kernel of the test above bounded to <= 128 tokens on >= 2 EP ranks: the
    1 MB call of 64 tokens on EP 8 takes it (20 us); of 256 tokens, or on EP 1, the throughput
    kernel (101 us); a caller that states neither gets the throughput kernel."""
    fast_small = OpEfficiency(bandwidth_frac=0.1, floor_s=10e-6, max_tokens=128.0, min_ep=2.0)
    e = OpEfficiency(floor_s=100e-6, alternative=fast_small)
    tokens, ep = np.array([64.0, 256.0, 64.0]), np.array([8.0, 8.0, 1.0])
    time_s = operator_timing(e, np.zeros(3), np.full(3, 1e6), 1e15, 1e12, 1.0, tokens=tokens, ep=ep)[2]
    assert time_s.tolist() == pytest.approx([20e-6, 101e-6, 101e-6])
    assert operator_timing(e, 0.0, 1e6, 1e15, 1e12, 1.0)[2] == pytest.approx(101e-6)


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 0.0), ("min_ep", 0.5), ("min_ep", float("inf"))])
def test_a_kernel_region_outside_its_range_is_refused(field: str, value: float) -> None:
    with pytest.raises(InputError, match=field):
        OpEfficiency(**{field: value})


_NUMBERS = [f.name for f in fields(OpEfficiency) if f.type in ("float", float)]


@pytest.mark.parametrize("field", _NUMBERS)
@pytest.mark.parametrize("value", [-1.0, float("nan"), True, "1", float("inf")])
def test_every_number_of_a_curve_out_of_range_is_refused_by_name(field: str, value: object) -> None:
    """A negative, NaN, boolean or text value of any numeric field (and infinity, except for
    ``max_tokens``, where it means no bound) is one InputError naming that field, whatever
    path the check takes; the same field at a valid float builds the curve."""
    if field == "max_tokens" and value == float("inf"):
        assert OpEfficiency(max_tokens=float("inf")).max_tokens == float("inf")
        return
    with pytest.raises(InputError, match=field):
        OpEfficiency(**{field: value})
    valid = {"min_ep": 2.0, "overlap_power": 1.5, "max_tokens": 128.0}.get(field, 0.5)
    assert getattr(OpEfficiency(**{field: valid}), field) == valid


def test_min_latency_rows_beyond_its_dispatch_range_are_not_candidates() -> None:
    """TensorRT-LLM dispatches its min-latency MoE at <= 128 tokens: at 256 tokens the cutlass
    timing is the operator's even where the min-latency row is faster; at 128 the faster stays."""
    cutlass = _moe_table([(128, 1, 2, 0.30), (256, 1, 2, 0.50)])
    fast = cutlass.assign(kernel_source="moe_torch_flow_min_latency", latency=[0.20, 0.40])
    both = pd.concat([cutlass, fast], ignore_index=True)
    both.attrs["kind"] = "moe"
    assert kr._dispatched(both).tolist() == [True, True, True, False]
    r = kr.table_rows(both)[seff.OpClass.MOE]
    assert sorted(r.latency_s.tolist()) == pytest.approx([0.20e-3, 0.50e-3])
    assert r.tokens is not None and sorted(r.tokens.tolist()) == [128.0, 256.0]


def test_blackwell_nvfp4_moe_runs_two_kernels_and_hopper_one() -> None:
    from rackmath.analyses.kernels.tables import efficiency_table
    from rackmath.specs.efficiency import OpClass

    b200 = efficiency_table("b200").of(OpClass.MOE, "nvfp4", "gated")
    assert b200.alternative is not None and b200.alternative.kernel.endswith("min_latency")
    assert (b200.alternative.max_tokens, b200.alternative.min_ep) == (128.0, 2.0)
    assert efficiency_table("h100-sxm").of(OpClass.MOE, "fp8", "gated").alternative is None
