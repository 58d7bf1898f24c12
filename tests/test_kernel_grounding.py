"""Hand derivations of kernel-grounded steps (issue "Kernel grounding that cannot drift", must show).

Each test writes an operator's work out from the model's config (FLOPs at 2 per MAC, bytes by
tensor class, the kernel's shape) and times it on the fitted curve the catalog holds for that
class, format and kernel family (read here from ``catalog/data/kernel_efficiency.yaml``),
through the one timing formula (:func:`rackmath.core.efficiency.operator_timing`). The step the
model builds must carry the same work and the same time; a refit changes the curves, not these
derivations.
"""

from __future__ import annotations

import numpy as np
import pytest

from rackmath.analyses.kernels import tables as et
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog import kernel_efficiency as ke
from rackmath.catalog.loader import chip as load_chip
from rackmath.catalog.loader import model as load_model
from rackmath.catalog.loader import system
from rackmath.core import operators as ops
from rackmath.core.efficiency import operator_timing
from rackmath.specs.precision import Precision

FP8_BLOCK = 1.0 + 4.0 / (128 * 128)  # bytes per fp8-block weight (one fp32 scale per 128 x 128)
FP8_BLOCK_ACT = 1.0 + 4.0 / 128  # bytes per fp8-block activation (one fp32 scale per 1 x 128)


def _curve(chip_id: str, op_class: str, dtype: str, kind: str | None = None, head_dim: int = 0):
    entry = next(
        o
        for o in ke.op_entries(chip_id)
        if o["op_class"] == op_class and o["dtype"] == dtype and (kind is None or o.get("kind") == kind)
        and o.get("head_dim", 0) == head_dim
    )  # fmt: skip
    return et.op_from_entry(entry), entry["precision"]


def _v(x) -> float:
    """One point of an array (a decode grid's (1, 1) answer) as a float."""
    return float(np.ravel(x)[0])


def _time(chip_id, op_class, dtype, kind, *, flops, bytes_, rows, cols, depth, calls, **kw) -> float:
    e, precision = _curve(chip_id, op_class, dtype, kind)
    c = load_chip(chip_id)
    return float(
        operator_timing(
            e,
            flops,
            bytes_,
            c.peak_flops(Precision.parse(precision)),
            c.hbm_bandwidth_bytes_per_s,
            rows,
            cols,
            depth,
            calls,
            **kw,
        )[2]
    )


# ----------------------------------------------------------------------------- the README demo
@pytest.fixture(scope="module")
def demo():
    return plan_deployment(load_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64")


@pytest.mark.parametrize("context", [4096, 32768])
def test_the_demo_plan_at_batch_one_is_one_rank_with_one_sequence(demo, context: int) -> None:
    """DeepSeek-V3 on 64 GB200s, dp=64, ep=64, batch 1: one attention-DP rank holds the whole
    sequence (not 1/64 of it on each), reads every replicated weight once and its one sequence's
    latent; its four expert slots see the token's 8 picks spread over 64 ranks, so it reads one
    expert per layer. Written out, operator by operator (61 layers, 58 of them MoE):

    * decode attention (absorbed MLA, bf16 cache): 2 x 128 heads x (576 + 512) FLOPs per key,
      576 x 2 B per cached token per layer, rows = 1 sequence x 1 latent, cols = 128 heads;
    * routed experts: 1 expert of 3 x 7168 x 2048 fp8-block weights per layer, 8/64 of a
      token's pairs per rank.

    The physics says about 9 ms whatever the context (the issue's reading: replicated weights
    plus one sequence's KV, +0.04 ms at 4K and +0.31 ms at 32K of latent): the step is bound by
    weights and launch floors, not compute, and the 32K step is at most 15% above the 4K one.
    """
    g = demo.decode([1], [context])
    step = g.step
    by = {o.name: o for o in step.operators}
    layers, moe_layers = 61, 58
    # attention: by hand
    flops = 2 * 128 * (576 + 512) * context * layers
    kv = context * 576 * 2.0 * layers
    act = 128 * (576 + 512) * 2.0 * layers
    att = by["attention"]
    assert float(att.flops) == pytest.approx(flops) and float(att.kv_read_bytes) == pytest.approx(kv)
    assert att.kernel.kind == "mla" and att.kernel.fmt == "bfloat16" and not att.kernel.fallback
    t_att = _time(
        "gb200", "attention_decode", "bfloat16", "mla",
        flops=flops, bytes_=kv + act + 576 * 2.0 * layers, rows=1.0, cols=128.0, depth=context, calls=layers,
    )  # fmt: skip
    assert float(att.time_s) == pytest.approx(t_att, rel=1e-9)
    # routed experts: the busiest rank reads one expert per MoE layer
    expert_params = 3 * 7168 * 2048
    pairs = 8 / 64 * moe_layers
    moe = by["routed_experts"]
    assert float(moe.weight_bytes) == pytest.approx(expert_params * FP8_BLOCK * moe_layers)
    assert float(moe.flops) == pytest.approx(2 * expert_params * pairs)
    moved = expert_params * FP8_BLOCK * moe_layers + pairs * (
        (7168 + 2048) * FP8_BLOCK_ACT + (2 * 2048 + 7168) * 2
    )
    t_moe = _time(
        "gb200", "moe", "fp8_block", "gated",
        flops=2 * expert_params * pairs, bytes_=moved, rows=8 / 256, cols=2048.0, depth=7168.0,
        calls=moe_layers, routed=pairs * 7168, tokens=1.0, ep=64.0,
    )  # fmt: skip
    assert float(moe.time_s) == pytest.approx(t_moe, rel=1e-9)
    # the step: the sum of its operators plus the expert all-to-all, bound by weights or floors
    assert float(step.roofline_s[0, 0]) == pytest.approx(sum(float(o.time_s) for o in step.operators))
    assert str(step.bottleneck[0, 0]) in ("weights", "latency")
    assert 6e-3 < float(step.step_s[0, 0]) < 12e-3


def test_the_demo_step_barely_moves_from_4k_to_32k(demo) -> None:
    g = demo.decode([1], [4096, 32768])
    short, long = (float(x) for x in g.step_s[0])
    assert 0.0 < long - short < 0.15 * short  # the 18.3 -> 60.4 ms was the MLA bug


# ----------------------------------------------------------------------------- DeepSeek-V3 at 8,192
def test_deepseek_attention_at_batch_8192_on_the_pooled_rack_is_the_bf16_mla_curve() -> None:
    """DeepSeek-V3 at batch 8,192 and 4,096 tokens on 64 pooled GB200s (explain's sections 1-6):
    the attention computes on the bf16 MLA curve at the bf16 peak (the cache is bf16), not the
    fp8 GEMM curve at the fp8 peak: 8,192 x 61 x 2 x 128 x 1,088 x 4,096 FLOPs and 8,192 x 61
    x 576 x 2 B x 4,096 of latent. The measured table at the per-chip shape (128 sequences of
    4,096 tokens, 128 heads, bf16) is 127.9 us per layer, 7.80 ms for 61 layers."""
    from rackmath.analyses.serving import pooled

    d = pooled.make_deployment(load_model("deepseek-v3"), system("gb200-nvl72"), chips=64)
    att = next(o for o in d.decode([8192], [4096]).step.operators if o.name == "attention")
    layers, ctx = 61, 4096
    flops = 8192 * layers * 2 * 128 * 1088 * ctx
    kv = 8192 * layers * 576 * 2.0 * ctx
    assert _v(att.flops) == pytest.approx(flops) and _v(att.kv_read_bytes) == pytest.approx(kv)
    assert (att.kernel.kind, att.kernel.fmt) == ("mla", "bfloat16")
    assert _v(att.peak_flops_per_s) == pytest.approx(64 * 2.5e15)  # the bf16 peak, pooled
    # within 15% of the table's 61 x 127.9 us (the pooled chip saturates in 64x the rows)
    assert _v(att.time_s) == pytest.approx(61 * 127.9e-6, rel=0.15)


# ----------------------------------------------------------------------------- gpt-oss-120b on B200
def test_gpt_oss_on_one_b200_runs_each_class_on_its_own_format() -> None:
    """gpt-oss-120b on one B200, batch 1: attention, router and LM head are bf16 weights and run
    bf16 GEMMs at the bf16 peak; the mxfp4 experts run TensorRT-LLM's w4a8 (mxfp4 x mxfp8)
    grouped GEMM at the fp8 peak. Each GEMM's time by hand on its curve."""
    from rackmath.analyses.serving import pooled

    d = pooled.make_deployment(load_model("gpt-oss-120b"), system("b200-hgx"), chips=1)
    step = d.decode([1], [4096]).step
    by = {o.name: o for o in step.operators}
    fmts = {
        n: by[n].kernel.fmt for n in ("attention_qkv", "attention_out", "router", "lm_head", "routed_experts")
    }
    assert fmts == {
        "attention_qkv": "bfloat16",
        "attention_out": "bfloat16",
        "router": "bfloat16",
        "lm_head": "bfloat16",
        "routed_experts": "w4a8_mxfp4_mxfp8",
    }
    assert not any(by[n].kernel.fallback for n in fmts)
    # the LM head by hand: 1 token through 2,880 x 201,088 bf16 weights
    h, vocab = 2880, 201088
    head = by["lm_head"]
    t = _time(
        "b200", "gemm", "bfloat16", None,
        flops=2 * h * vocab, bytes_=h * vocab * 2.0 + (h * 2.0 + vocab * 2.0), rows=1.0,
        cols=float(vocab), depth=float(h), calls=1.0,
    )  # fmt: skip
    assert _v(head.time_s) == pytest.approx(t, rel=1e-9)
    # the experts by hand: 4 experts of 3 x 2880 x 2880 mxfp4 weights (+ biases) in 36 layers
    m = load_model("gpt-oss-120b")
    from rackmath.core import architecture as arch

    per_expert = arch.param_counts(m).per_expert  # the expert's parameters, biases included
    moe = by["routed_experts"]
    mxfp4 = 4.25 / 8
    assert _v(moe.weight_bytes) == pytest.approx(4 * per_expert * mxfp4 * 36)
    assert _v(moe.peak_flops_per_s) == pytest.approx(load_chip("b200").peak_flops(Precision.FP8))


# ----------------------------------------------------------------------------- split-KV decode
def test_one_long_context_decode_splits_the_cache_over_thread_blocks() -> None:
    """Llama-3.1-70B under TP 8 on H100s, batch 1 at 131,072 tokens: one chip holds 8 query
    heads and 1 KV head, so one sequence is one KV head's thread block before any split. The
    fitted split-KV curve spreads the context over ``131,072 / split_tokens`` blocks (at most
    ``split_max``), which is what lets one sequence draw about half the HBM bandwidth; the
    measured TensorRT-LLM table has this very shape (8 query heads over 1 KV head, head dim
    128, bf16) at 131,072 tokens."""
    import pandas as pd

    from rackmath.catalog import kernel_tables as kt

    if kt.package_data_dir() is None:
        pytest.skip("needs the kernels extra")
    e, _ = _curve("h100-sxm", "attention_decode", "bfloat16", "gqa")
    assert e.split_tokens > 0  # the fit found a split
    ctx = 131072
    kv = ctx * 2 * 128 * 2.0  # one KV head's keys and values in bf16, one layer
    flops = 2 * 8 * 256 * ctx
    act = 8 * 256 * 2.0 + 2 * 128 * 2.0  # queries in and outputs out, and the new token's K and V
    t = _time(
        "h100-sxm", "attention_decode", "bfloat16", "gqa",
        flops=flops, bytes_=kv + act, rows=1.0, cols=8.0, depth=float(ctx), calls=1.0,
    )  # fmt: skip
    ref = kt.primary(kt.discover(), "h100-sxm", "generation_attention")
    df = pd.read_parquet(ref.path)
    row = df[
        (df.batch_size == 1)
        & (df.num_heads == 8)
        & (df.num_key_value_heads == 1)
        & (df.head_dim == 128)
        & (df.isl + df.step == ctx)
        & (df.kv_cache_dtype == "bfloat16")
        & (df.window_size == 0)
    ]
    measured = float(row.latency.min()) * 1e-3
    # +25% (+20% while MHA and grouped calls shared one curve, whose blocks cost less; +7% before
    # the per-block term, with which the fit caps a row at 75 splits, not 122)
    assert t == pytest.approx(measured, rel=0.3)
    splits = max(ctx / e.split_tokens, 1.0)
    splits = min(splits, e.split_max) if e.split_max else splits
    from dataclasses import replace

    h100 = load_chip("h100-sxm")
    no_split = float(
        operator_timing(
            replace(e, split_tokens=0.0, split_max=0.0), flops, kv + act, h100.peak_flops(Precision.BF16),
            h100.hbm_bandwidth_bytes_per_s, splits, 8.0, float(ctx), 1.0,
        )[2]
    )  # fmt: skip
    assert no_split == pytest.approx(t, rel=1e-9)  # the split is exactly more parallel rows
    # the step's attention operator of the whole model is 80 such calls, on one of 8 chips
    d = plan_deployment(load_model("llama-3.1-70b"), system("h100-hgx"), "tp=8", communication=False)
    att = next(o for o in d.decode([1], [ctx]).step.operators if o.name == "attention")
    assert float(att.time_s) == pytest.approx(80 * t, rel=1e-6)
    # about half the HBM from one sequence (table: 0.54; the curve 0.42 since the per-block term, 0.50 before)
    assert kv / (t - e.floor_s) / 3.35e12 > 0.4


def test_a_short_context_decode_costs_its_thread_blocks() -> None:
    """Decode attention at a short context is paid per thread block, not per byte. The H100
    TensorRT-LLM table, 64 query heads on 64 KV heads of width 64, bf16, 8 tokens of context:
    1,024 more sequences (65,536 more blocks, one per sequence and KV head) add 0.712 ms, where
    their cache (65,536 x 8 tokens x 2 x 64 x 2 B = 134 MB) needs 40 us at 3.35 TB/s: the other
    0.672 ms are 10.25 ns a block, what 34.3 kB take at 3.35 TB/s (11.37 ns at head dim 256 once
    its 4x bytes, 160 us, are taken off). The fitted ``block_bytes`` of the MHA curve (64 query
    heads on 64 KV heads run masked MHA) carries it; without it the curve misses the step by
    more than half."""
    from dataclasses import replace

    import pandas as pd

    from rackmath.catalog import kernel_tables as kt

    if kt.package_data_dir() is None:
        pytest.skip("needs the kernels extra")
    df = pd.read_parquet(kt.primary(kt.discover(), "h100-sxm", "generation_attention").path)

    def measured_s(batch: int, head_dim: int) -> float:
        row = df[
            (df.batch_size == batch) & (df.num_heads == 64) & (df.num_key_value_heads == 64)
            & (df.head_dim == head_dim) & (df.isl + df.step == 8) & (df.kv_cache_dtype == "bfloat16")
            & (df.window_size == 0)
        ]  # fmt: skip
        return float(row.latency.min()) * 1e-3

    hbm = load_chip("h100-sxm").hbm_bandwidth_bytes_per_s
    blocks = 1024 * 64
    for head_dim in (64, 256):
        extra_s = measured_s(2048, head_dim) - measured_s(1024, head_dim)
        cache = blocks * 8 * 2 * head_dim * 2.0
        per_block_s = (extra_s - cache / hbm) / blocks
        assert per_block_s == pytest.approx(10.25e-9 if head_dim == 64 else 11.37e-9, rel=0.01)
    assert 134.2e6 / hbm / (measured_s(2048, 64) - measured_s(1024, 64)) < 0.06  # bytes: 6%

    assert 10.25e-9 * hbm == pytest.approx(34.3e3, rel=2e-3)
    e, _ = _curve("h100-sxm", "attention_decode", "bfloat16", "mha")  # 64 query heads on 64: masked MHA
    assert 10e3 < e.block_bytes < 60e3  # the fit found the per-block work (tens of kB)
    c = load_chip("h100-sxm")

    def curve_s(eff, batch: float) -> float:
        flops = batch * 64 * 4 * 64 * 8
        nbytes = batch * 64 * (8 * 2 * 64 + 2 * 64) * 2.0  # the cache read, queries in and outputs out
        timing = operator_timing(
            eff, flops, nbytes, c.peak_flops(Precision.BF16), hbm, batch * 64, 1.0, 8.0, 1.0
        )
        return float(timing[2])

    for batch in (1024, 2048):
        assert curve_s(e, batch) == pytest.approx(measured_s(batch, 64), rel=0.2)
    without = replace(e, block_bytes=0.0)
    assert curve_s(without, 2048) < 0.5 * measured_s(2048, 64)


def test_a_sliding_window_prefill_costs_its_thread_blocks() -> None:
    """A prefill's thread blocks are one per tile of query rows and head. The H100 TensorRT-LLM
    table, one prompt, 64 query heads on 8 KV heads of width 64, a 128-token window, bf16: from
    8,192 to 16,384 tokens the time grows by 0.306 ms while the new queries' FLOPs (8,192 x 128
    keys x 64 heads x 4 x 64) take 17.4 us at the 989 TFLOP/s peak; the other 0.289 ms are 8,192
    more blocks of 64 query rows, 35 ns (118 kB at HBM speed) each. The fitted head-64 curve
    (blocks of 64 rows) times the window rows within 11% (-8.3%, -4.7% and -0.4% at 1,024, 4,096
    and 16,384 tokens on the curve of 2026-11-27; a 15 us floor is a quarter of the shortest),
    and without its blocks gives 0.52, 0.43 and 0.41 of them; a full causal prompt of 16,384
    tokens, whose FLOPs dominate, within 10% (-0.8%)."""
    from dataclasses import replace

    import pandas as pd

    from rackmath.catalog import kernel_tables as kt
    from rackmath.core import work as wk

    if kt.package_data_dir() is None:
        pytest.skip("needs the kernels extra")
    df = pd.read_parquet(kt.primary(kt.discover(), "h100-sxm", "context_attention").path)

    def measured_s(isl: int, window: int) -> float:
        row = df[
            (df.batch_size == 1) & (df.num_heads == 64) & (df.num_key_value_heads == 8) & (df.head_dim == 64)
            & (df.isl == isl) & (df.window_size == window) & (df.attn_dtype == "bfloat16")
            & (df.kv_cache_dtype == "bfloat16")
        ]  # fmt: skip
        return float(row.latency.min()) * 1e-3

    c = load_chip("h100-sxm")
    peak, hbm = c.peak_flops(Precision.BF16), c.hbm_bandwidth_bytes_per_s
    extra_s = measured_s(16384, 128) - measured_s(8192, 128)
    flops_s = 8192 * 128 * 64 * 4 * 64 / peak
    assert extra_s == pytest.approx(0.306e-3, rel=0.01) and flops_s == pytest.approx(17.4e-6, rel=0.01)
    per_block_s = (extra_s - flops_s) / (8192 // 64 * 64)
    assert per_block_s == pytest.approx(35.3e-9, rel=0.01)
    assert per_block_s * hbm == pytest.approx(118e3, rel=0.01)

    e, _ = _curve("h100-sxm", "attention_prefill", "bfloat16", "gqa", head_dim=64)
    assert e.block_tile_rows == 64.0 and 30e3 < e.block_bytes < 200e3

    def curve_s(eff, isl: int, window: int) -> float:
        w = min(window, isl) if window else isl
        pairs = w * (w + 1) / 2 + (isl - w) * w
        work = wk.prefill_attention(float(isl), 64.0, 8.0, 64.0, 64.0, float(isl), flops=pairs * 4 * 64 * 64)
        timing = operator_timing(
            eff, work.flops, work.bytes, peak, hbm, work.rows, work.cols, work.depth, work.calls,
            sequence_heads=work.sequence_heads,
        )  # fmt: skip
        return float(timing[2])

    for isl in (1024, 4096, 16384):
        assert curve_s(e, isl, 128) == pytest.approx(measured_s(isl, 128), rel=0.11)
        assert curve_s(replace(e, block_bytes=0.0), isl, 128) < 0.55 * measured_s(isl, 128)
    assert curve_s(e, 16384, 0) == pytest.approx(measured_s(16384, 0), rel=0.1)


def test_the_pure_roofline_is_the_same_work_at_peak() -> None:
    """Kernel-grounded and pure steps describe the same work; only times differ."""
    d = plan_deployment(load_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64")
    k = d.decode([64], [4096]).step
    p = plan_deployment(load_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64", efficiency="pure")
    q = p.decode([64], [4096]).step
    for a, b in zip(k.operators, q.operators, strict=True):
        assert float(a.flops) == float(b.flops) and float(a.weight_bytes) == float(b.weight_bytes)
        assert float(a.time_s) >= float(b.time_s) * (1 - 1e-12)
    assert {o.kernel.table for o in q.operators} == {"pure roofline"}
    assert {"input_values", "curve_key"} <= set(ops.Operator._fields)  # what the fit and training read
