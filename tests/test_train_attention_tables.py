"""Training attention on the kernel's own measured training tables (issue 23: "backward as its
own curve where measured"): Megatron-core and Megatron-Bridge run Transformer Engine's
FusedAttention, cuDNN's fused kernels, on Hopper and Blackwell; cuDNN's training benchmark
measures their forward and backward TFLOP/s by sequence length.

Every expected number is recomputed here from the model's shape and the table's figures as
``training_kernels.yaml`` states them (cuDNN's benchmark CSVs), not read back from the code.
"""

from __future__ import annotations

import math

import pytest

import rackmath as rm
from rackmath.analyses.training import estimate as T
from rackmath.analyses.training import runs as R
from rackmath.analyses.training import setup
from rackmath.catalog import training_frameworks as tf
from rackmath.catalog.training_runs import held_out_runs
from rackmath.specs.plan import ParallelPlan


def _attention(e):
    return next(o for o in e.step.operators if o.name == "attention")


def _causal_flops(seqs: float, s: int, heads: int, d_qk: int, d_v: int, layers: float) -> float:
    """2 x heads x (d_qk + d_v) per unmasked score, s (s + 1) / 2 scores, per layer."""
    return 2 * heads * (d_qk + d_v) * s * (s + 1) / 2 * layers * seqs


def test_the_table_interpolates_in_log_sequence_length():
    t = tf.attention_table("gb200", "cudnn-fused", "mxfp8", (128, 128))
    assert t is not None and t.measured_on == "gb200"
    # measured points come back exactly: 4,096 tokens, 1,716 / 1,027 TFLOP/s
    assert t.rates_at(4096) == (1716e12, 1027e12)
    # 6,144 tokens: t = log 1.5 / log 2 of the way from 4,096 to 8,192 (1,926 / 1,267)
    w = math.log(1.5) / math.log(2)
    fwd, bwd = t.rates_at(6144)
    assert fwd == pytest.approx(1716e12 + w * (1926e12 - 1716e12))
    assert bwd == pytest.approx(1027e12 + w * (1267e12 - 1027e12))
    assert fwd / 1e12 == pytest.approx(1838.8, abs=0.05) and bwd / 1e12 == pytest.approx(1167.4, abs=0.05)
    # beyond the measured lengths: the end values
    assert t.rates_at(512) == (1350e12, 735e12) and t.rates_at(131072) == (2033e12, 1452e12)
    # nothing measured: no table (the step runs the fitted curve and says so)
    assert tf.attention_table("a100-80gb", "cudnn-fused", "bf16", (128, 128)) is None
    assert tf.attention_table("gb200", "cudnn-fused", "bf16", (64, 64)) is None
    assert tf.attention_table("gb200", "fitted", "bf16", (128, 128)) is None


def test_qwen3_30b_on_gb200_in_mxfp8_by_hand():
    """Megatron-Bridge's Qwen3-30B-A3B row: MBS 4 of 4,096 tokens, 48 layers, 32 query heads
    of 128, FP8 dot-product attention under MXFP8: cuDNN's MXFP8 rates at 4,096 tokens."""
    run = next(r for r in held_out_runs() if r.id == "bridge-qwen3-30b-gb200-mxfp8")
    a = _attention(T.estimate(R.run_setup(run)))
    flops = _causal_flops(4, 4096, 32, 128, 128, 48)
    assert float(a.forward_flops) == pytest.approx(flops, rel=1e-9)
    assert float(a.forward_s) == pytest.approx(flops / 1716e12, rel=1e-9)
    assert float(a.input_grad_s) == pytest.approx(2.5 * flops / 1027e12, rel=1e-9)
    assert a.kernel is not None and (a.kernel.chip, a.kernel.fmt, a.kernel.transferred) == (
        "gb200",
        "mxfp8",
        False,
    )
    assert "llama3.1_20260813_111214.csv" in a.kernel.table and a.input_grad_kernel == a.kernel
    assert "measured backward" in a.backward


def _llama8b(system: str, framework: str = "megatron-bridge", **kw):
    return setup.make_training(
        rm.model("llama-3.1-8b"),
        rm.system(system),
        ParallelPlan.parse("dp=8"),
        tokens=1e9,
        seq_len=8192,
        global_batch=8,
        recompute="none",
        framework=framework,
        **kw,
    )


def test_transferred_tables_say_so_and_scale_by_the_peak():
    """Llama 3.1 8B (32 layers, 32 query heads of 128), one 8,192-token sequence per chip."""
    flops = _causal_flops(1, 8192, 32, 128, 128, 32)
    # the H100 on the H200's table (the same GH100 compute and peaks): 644 / 541 TFLOP/s
    h100 = _attention(T.estimate(_llama8b("h100-hgx")))
    assert float(h100.forward_s) == pytest.approx(flops / 644e12, rel=1e-9)
    assert float(h100.input_grad_s) == pytest.approx(2.5 * flops / 541e12, rel=1e-9)
    assert (h100.kernel.chip, h100.kernel.transferred) == ("h200", True)
    # the B200 on the GB200's at the ratio of their BF16 peaks, 2.25 / 2.5 PFLOP/s
    b200 = _attention(T.estimate(_llama8b("b200-hgx")))
    assert float(b200.forward_s) == pytest.approx(flops / (1552e12 * 0.9), rel=1e-9)
    assert float(b200.input_grad_s) == pytest.approx(2.5 * flops / (1297e12 * 0.9), rel=1e-9)
    assert (b200.kernel.chip, b200.kernel.transferred) == ("gb200", True) and "0.9" in b200.kernel.table
    # on its own chip nothing is transferred
    gb200 = _attention(T.estimate(_llama8b("gb200-nvl72")))
    assert float(gb200.forward_s) == pytest.approx(flops / 1552e12, rel=1e-9)
    assert not gb200.kernel.transferred


def test_a_missing_table_falls_back_visibly_to_the_fitted_curve():
    # an A100 has no cuDNN training table (and TE would pick FlashAttention below sm90)
    def a100(**kw):
        return setup.make_training(
            rm.model("llama-3.1-8b"),
            rm.system("a100-hgx"),
            ParallelPlan.parse("dp=8"),
            tokens=1e9,
            seq_len=8192,
            global_batch=8,
            recompute="none",
            framework="megatron-core",
            **kw,
        )

    on_cudnn = _attention(T.estimate(a100()))
    fitted = _attention(T.estimate(a100(framework_settings={"attention_kernel": "fitted"})))
    assert float(on_cudnn.forward_s) == float(fitted.forward_s)
    assert float(on_cudnn.input_grad_s) == float(fitted.input_grad_s)
    assert "no cudnn-fused table for a100-80gb, bf16, head dims 128/128" in on_cudnn.kernel.fallback
    assert fitted.kernel.fallback == ""
    # the pure roofline ignores kernel tables altogether
    pure = _attention(T.estimate(_llama8b("gb200-nvl72", efficiency="pure")))
    assert pure.kernel is None or "cudnn" not in pure.kernel.table


def test_mla_runs_on_its_own_head_dims_table():
    """DeepSeek-V3's MLA trains as multi-head attention of head dims 192 / 128 (r_F = 2.6):
    Bridge's GB300 row runs on cuDNN's dsv3 table at its 4,096 tokens (BF16: forward 1,590,
    backward 1,143 TFLOP/s)."""
    run = next(r for r in held_out_runs() if r.id == "bridge-deepseek-v3-gb300-bf16")
    a = _attention(T.estimate(R.run_setup(run)))
    assert "dsv3_20260424_101002.csv" in a.kernel.table and a.kernel.chip == "gb300"
    assert run.seq_len == 4096
    # the busiest of its two stages stretches both passes alike: their ratio is the tables'
    assert float(a.input_grad_s) / float(a.forward_s) == pytest.approx(2.6 * 1590 / 1143, rel=1e-9)


def test_an_unknown_attention_kernel_is_refused_in_one_line():
    from rackmath.errors import InputError

    with pytest.raises(
        InputError,
        match="attention_kernel: got 'flash-4'; allowed: one of fitted, flash-attention-2, cudnn-fused",
    ):
        _llama8b("h100-hgx", framework_settings={"attention_kernel": "flash-4"})
