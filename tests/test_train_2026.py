"""Training at 2026 scale, derived by hand: a dense FP8 run, an MoE run with EP, an FSDP run,
an interleaved schedule, DualPipe, MFU conventions and the per-operator split.

Every expected number below is recomputed here from the model's shapes and the chip's
catalog figures (H100 SXM: BF16 989.4 TFLOP/s, FP8 1978.9 TFLOP/s, HBM 3.35 TB/s, NVLink
450 GB/s per direction at 2 us, HGX domain of 8), not read back from the code under test.
All runs use the pure roofline so they do not depend on the default efficiency.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath as rm
from rackmath.analyses.training import estimate as T
from rackmath.analyses.training import pipeline, setup
from rackmath.analyses.training import runs as runs_analysis
from rackmath.core import architecture as arch
from rackmath.core import pipeline as pl
from rackmath.core import training_step as ts
from rackmath.errors import InputError
from rackmath.specs.plan import ParallelPlan

BF16, FP8, HBM, NVLINK, ALPHA = 989.4e12, 1978.9e12, 3.35e12, 450e9, 2e-6


def _llama8b(**kw):
    base = dict(tokens=1e9, seq_len=2048, global_batch=2, recompute="none", efficiency="pure")
    base.update(kw)
    plan = base.pop("plan", ParallelPlan())
    return setup.make_training(rm.model("llama-3.1-8b"), rm.system("h100-hgx"), plan, **base)


# ---------------------------------------------------------------------------- core formulas
def test_core_worked_numbers():
    # fsdp_exposed_s: 10 buckets of 2 ms over 3 ms compute: only the first; over 1 ms: 2 + 9 x 1
    assert ts.fsdp_exposed_s(2e-3, 3e-3, 10) == pytest.approx(2e-3)
    assert ts.fsdp_exposed_s(2e-3, 1e-3, 10) == pytest.approx(11e-3)
    # 4 ms of all-to-all under 3 ms of compute, fully overlappable: 1 ms left; half: 2 ms
    assert ts.exposed_overlap_s(4e-3, 3e-3, 1.0) == pytest.approx(1e-3)
    assert ts.exposed_overlap_s(4e-3, 3e-3, 0.5) == pytest.approx(2e-3)
    # a quantised copy: the element and its share of a scale
    r = ts.GemmRecipe
    assert [r.parse(x).quantised_bytes_per_value for x in ("bf16", "fp8", "mxfp8", "fp8-block", "nvfp4")] == [
        0.0,
        1.0,
        1.03125,
        1.03125,
        0.5625,
    ]
    assert r.parse("fp8-current").precision.value == "fp8"

    def per_value(recipe, columnwise, norm=0.0):
        fwd, bwd = ts.cast_bytes(r.parse(recipe), 1.0, norm, columnwise_copy=columnwise)
        return float(fwd), float(bwd)

    # bytes per value, by hand: read bf16 (2), one more read under current scaling (2), one
    # quantised copy per usage the chip cannot share
    assert per_value("fp8", False) == (3.0, 3.0)  # delayed scaling on Blackwell: 2 + 1
    assert per_value("fp8", True) == (4.0, 4.0)  # Hopper: + the transposed copy
    assert per_value("fp8-current", True) == (6.0, 6.0)  # + the amax pass: 2 + 2 + 2 x 1
    assert per_value("mxfp8", True) == (4.0625, 4.0625)  # 2 + 2 x (1 + 1/32)
    # the norm quantises its output: delayed/block scaling skip the BF16 read in the forward;
    # current scaling skips only the amax pass (the cast still reads the norm's BF16 output)
    assert per_value("mxfp8", True, norm=1.0) == (2.0625, 4.0625)
    assert per_value("fp8-current", True, norm=1.0) == (4.0, 6.0)
    assert per_value("bf16", False) == (0.0, 0.0)
    # the values their producer quantises: the docstring's dense MLP (h 4096, I 14336, 2,048
    # tokens, FC1 fused with its norm), a GQA QKV projection, and routed experts' FC2 input
    from types import SimpleNamespace as NS

    def op(name, values, cols, depth):
        return NS(name=name, input_values=values, work=NS(cols=cols, depth=depth))

    mlp = op("dense_mlp", 2048 * (4096 + 14336), 14336, 4096)
    qkv = op("attention_qkv", 2048 * 4096, 6144, 4096)
    experts = op("routed_experts", 8 * 2048 * (2048 + 768), 768, 2048)
    fwd = (mlp, qkv, experts)
    assert ts.producer_quantised_values(fwd, True, False, gqa=True) == 2048 * 4096 * 2
    assert ts.producer_quantised_values(fwd, True, False, gqa=False) == 2048 * 4096  # MLA: no QKV
    assert ts.producer_quantised_values(fwd, False, True, gqa=True) == 8 * 2048 * 768
    assert ts.producer_quantised_values(fwd, False, False, gqa=True) == 0.0
    # DualPipe, 8 stages, 16 micro-batches, unit times: X = (8/2 - 1)(1 + 2 - 1) = 6 -> 6 / 54
    assert pl.bubble_fraction("dualpipe", 8, 16) == pytest.approx(1 / 9)
    assert pl.in_flight_microbatches("dualpipe", 8, 16) == 9


def test_backward_is_split_into_input_and_weight_gradients_per_operator():
    e = T.estimate(_llama8b(recompute="selective"))
    for o in e.step.operators:
        f = float(o.forward_s)
        if o.op_class.value == "gemm":
            # pure roofline: dgrad (m,k,n) and wgrad (n,k,m) have the forward's FLOPs and bytes
            assert (float(o.input_grad_s), float(o.weight_grad_s)) == pytest.approx((f, f))
            assert float(o.recompute_s) == 0.0  # selective re-runs the attention core only
        elif o.name == "attention":
            # FlashAttention's backward: 5 matmuls against the forward's 2 (d_qk = d_v = 128)
            assert (float(o.input_grad_s), float(o.weight_grad_s)) == pytest.approx((2.5 * f, 0.0))
        else:
            assert (float(o.input_grad_s), float(o.weight_grad_s)) == pytest.approx((2 * f, 0.0))
        if o.name == "attention":
            assert float(o.recompute_s) == pytest.approx(f)
    s = e.step
    assert s.t_w_s == pytest.approx(
        sum(float(o.forward_s) for o in s.operators if o.op_class.value == "gemm")
    )


# ---------------------------------------------------------------------------- dense FP8
def test_dense_fp8_run_by_hand():
    """Llama 3.1 8B, one H100, FP8 GEMMs, BF16 attention, s = 2048, 2 micro-batches."""
    s = _llama8b(compute="fp8")
    e = T.estimate(s)
    h, layers, vocab, inter, seq = 4096, 32, 128256, 14336, 2048
    n_matmul = arch.param_counts(s.model).matmul_active
    head_flops = 2 * h * vocab * seq  # the output head stays BF16 (DeepSeek-V3 §3.3; TE)
    gemm_flops = 2 * n_matmul * seq - head_flops  # forward, every other GEMM at FP8
    attn_flops = 2 * 32 * (128 + 128) * layers * seq * (seq + 1) / 2  # causal QK^T and AV
    # memory-bound: embedding lookup (t h 2 B), two norms per layer (t L 4h 2 B) + their scales,
    # the fused element-wise kernels between the GEMMs (SwiGLU 3 I, two residual adds 6 h, RoPE
    # on q and k 2 (32 + 8) 128 values per token per layer, 2 B each)
    norm_weights = 2 * (2 * layers + 1) * h
    elementwise = (3 * inter + 6 * h + 2 * (32 + 8) * 128) * seq * layers * 2
    memory = seq * h * 2 + seq * layers * 4 * h * 2 + norm_weights + elementwise
    # the fused cross-entropy over the logits: 2 B per logit forward, 4 B backward
    loss = seq * vocab * (2 + 4)
    # casts: the FP8 GEMMs' inputs at 4 B per value (read bf16 2 B, write the row-wise and, on
    # Hopper, the transposed column-wise FP8 copy 1 + 1 B; delayed scaling: no amax pass; the
    # generic profile's norms do not quantise) (QKV reads h, the output projection the 32 x 128
    # attention output, the MLP h and then inter), forward and again for the output gradients
    # (the BF16 head casts nothing)
    values = seq * layers * (h + 32 * 128 + h + inter)
    per_microbatch = (
        3 * gemm_flops / FP8
        + 3 * head_flops / BF16
        + 3.5 * attn_flops / BF16  # forward + the 2.5x FlashAttention backward
        + 3 * memory / HBM
        + loss / HBM
        + 2 * values * 4.0 / HBM
    )
    assert e.step.pipeline_s == pytest.approx(2 * per_microbatch, rel=1e-4)
    casts = next(o for o in e.step.operators if o.name == "casts")
    assert float(casts.forward_s) == pytest.approx(values * 4.0 / HBM, rel=1e-6)
    gemm_precision = {o.name: o.precision for o in e.step.operators if o.op_class.value == "gemm"}
    assert gemm_precision.pop("lm_head") == "bf16" and set(gemm_precision.values()) == {"fp8"}
    assert next(o for o in e.step.operators if o.name == "attention").precision == "bf16"
    # conventions: the FP8 peak is 2.0001x the BF16 peak, so the same run's MFU halves
    by = {(c.flops, c.attention, c.peak): c.value for c in e.conventions}
    assert by[("model", True, "bf16")] == pytest.approx(by[("model", True, "fp8")] * FP8 / BF16)
    model_flops = 2 * seq * (3 * (gemm_flops + head_flops) + 3 * attn_flops) / seq
    assert by[("model", True, "bf16")] == pytest.approx(model_flops / e.step.step_s / BF16, rel=1e-6)
    no_attn = 2 * 3 * (gemm_flops + head_flops)
    assert by[("model", False, "bf16")] == pytest.approx(no_attn / e.step.step_s / BF16, rel=1e-6)
    assert by[("hardware", True, "bf16")] == by[("model", True, "bf16")]  # no recompute


def test_fp8_beats_bf16_but_not_twofold():
    bf16, fp8 = (T.estimate(_llama8b(compute=c)).step.step_s for c in ("bf16", "fp8"))
    assert bf16 / 2 < fp8 < bf16  # attention, norms and casts keep it above half


# ---------------------------------------------------------------------------- MoE with EP
def _qwen_moe(**kw):
    base = dict(tokens=1e9, seq_len=4096, global_batch=16, recompute="none", efficiency="pure")
    base.update(kw)
    return setup.make_training(
        rm.model("qwen3-30b-a3b"), rm.system("h100-hgx"), ParallelPlan.parse("ep=8,dp=8"), **base
    )


def test_moe_run_with_ep_by_hand():
    """Qwen3-30B-A3B (128 experts, k = 8, h 2048, 48 MoE layers), EP 8 inside one HGX."""
    s = _qwen_moe()
    e = T.estimate(s)
    h, k, experts, layers, tokens = 2048, 8, 128, 48, 4096
    # a token's 8 experts land on 8 (1 - P_miss) ranks, P_miss = prod_j (112 - j) / (128 - j)
    miss = math.prod((112 - j) / (128 - j) for j in range(k))
    dispatch = tokens * 8 * (1 - miss) * h * 2
    all_to_all = 7 / 8 * dispatch / NVLINK + ALPHA  # one domain: a switch all-to-all
    ep_s = 4 * layers * all_to_all  # dispatch + combine, forward + backward
    assert e.step.ep_mb_s == pytest.approx(ep_s, rel=1e-9)
    # routed experts: each chip's 4096 tokens x 8 experts x 2 FLOPs x 3 (gate, up, down) h x 768
    routed = next(o for o in e.step.operators if o.name == "routed_experts")
    assert float(routed.forward_flops) == pytest.approx(tokens * k * 2 * 3 * h * 768 * layers)
    # 1F1B with no overlap: the whole all-to-all is on the critical path; overlap 1 hides it
    hidden = _qwen_moe(ep_overlap_frac=1.0)
    m = 16 // 8
    eh = T.estimate(hidden).step
    assert e.step.ep_exposed_mb_s == pytest.approx(ep_s)
    assert eh.ep_exposed_mb_s == pytest.approx(max(0.0, ep_s - eh.compute_mb_s))
    assert e.step.pipeline_s - eh.pipeline_s == pytest.approx(m * (ep_s - eh.ep_exposed_mb_s))
    # skew 2: the busiest rank's experts and its all-to-all take twice as long
    skewed = T.estimate(_qwen_moe(routing_skew=2.0)).step
    r2 = next(o for o in skewed.operators if o.name == "routed_experts")
    assert float(r2.forward_s) == pytest.approx(2 * float(routed.forward_s))
    assert skewed.ep_mb_s == pytest.approx(2 * ep_s)
    # the router's auxiliary work: 16 B per token per expert per layer at HBM speed, x3 (fwd + bwd)
    aux = next(o for o in e.step.operators if o.name == "router_aux")
    assert float(aux.time_s) == pytest.approx(3 * tokens * experts * layers * 16 / HBM)


# ---------------------------------------------------------------------------- FSDP
def test_fsdp_run_by_hand():
    """Llama 3.1 8B, ZeRO-3 over 8 GPUs of one HGX, one-layer buckets, 2 micro-batches."""
    s = _llama8b(plan=ParallelPlan.parse("dp=8"), zero=3, seq_len=4096, global_batch=16)
    e = T.estimate(s)
    p = arch.param_counts(s.model)
    held = 2 * p.total  # bf16 parameters of the whole model (tp = pp = 1)
    bucket = held / 32  # one layer's share: 32 buckets
    gather = 7 / 8 * bucket / NVLINK + 7 * ALPHA  # ring all-gather over 8 chips
    scatter = gather  # reduce-scatter of the 16-bit gradients: the same ring
    st = e.step
    assert st.dp_buckets == 32
    forward = gather + 31 * max(0.0, gather - st.t_f_s / 32)
    backward = (gather + scatter) + 31 * max(0.0, gather + scatter - (st.t_b_s + st.t_w_s) / 32)
    assert st.fsdp_exposed_mb_s == pytest.approx(forward + backward, rel=1e-9)
    assert st.dp_s == pytest.approx(2 * 32 * (2 * gather + scatter), rel=1e-9)
    assert st.dp_exposed_s == 0.0  # ZeRO-3 pays per micro-batch, inside the pipeline
    assert st.dp_hidden_s == pytest.approx(st.dp_s - 2 * (forward + backward))  # what prefetch hides
    # one memory account: weights, grads and Adam states sharded 8 ways, plus two gathered buckets
    mem = e.memory
    assert mem.weights_bytes == pytest.approx(2 * p.total / 8)
    assert mem.optimizer_bytes == pytest.approx(12 * p.total / 8)
    assert mem.gathered_bytes == pytest.approx(2 * bucket)
    # bigger buckets: fewer, longer gathers; the first one is never hidden
    big = T.estimate(
        _llama8b(
            plan=ParallelPlan.parse("dp=8"), zero=3, seq_len=4096, global_batch=16, bucket_bytes=held / 4
        )
    ).step
    assert big.dp_buckets == 4


# ---------------------------------------------------------------------------- interleaved
def test_interleaved_schedule_by_hand():
    """Llama 3.1 8B, PP 4 x DP 2 in one HGX, 2 virtual stages, 8 micro-batches."""
    s = _llama8b(
        plan=ParallelPlan.parse("pp=4,dp=2"),
        schedule="interleaved",
        virtual_stages=2,
        seq_len=4096,
        global_batch=16,
    )
    st = T.estimate(s).step
    assert st.microbatches == 8
    assert st.bubble_frac == pytest.approx(3 / (2 * 8 + 3))  # (P-1)/(v m + P-1)
    act = 2 * 1 * 4096 * 4096  # b s h, bf16
    send = act / NVLINK + ALPHA  # the 4 stages, 2 chips apart, share one NVLink domain
    assert st.pp_mb_s == pytest.approx(2 * 2 * send)  # forward and backward, per chunk
    assert st.pipeline_s == pytest.approx(8 * (st.compute_mb_s + st.pp_mb_s) / (1 - 3 / 19))
    plain = T.estimate(_llama8b(plan=ParallelPlan.parse("pp=4,dp=2"), seq_len=4096, global_batch=16)).step
    assert plain.bubble_frac == pytest.approx(3 / (8 + 3))
    assert st.step_s < plain.step_s


def test_dualpipe_run_and_refusals():
    s = _llama8b(plan=ParallelPlan.parse("pp=4,dp=2"), schedule="dualpipe", seq_len=4096, global_batch=16)
    e = T.estimate(s)
    st = e.step
    x = (4 / 2 - 1) * (st.t_f_s + 2 * st.t_b_s - st.t_w_s)
    scale = (st.compute_mb_s + st.pp_mb_s) / st.compute_mb_s
    assert st.bubble_frac == pytest.approx(x * scale / (8 * st.compute_mb_s * scale + x * scale))
    assert s.ep_overlap_frac == 1.0  # DualPipe hides the all-to-all by default
    one = T.estimate(_llama8b(plan=ParallelPlan.parse("pp=4,dp=2"), seq_len=4096, global_batch=16))
    assert e.memory.weights_bytes == pytest.approx(2 * one.memory.weights_bytes)  # two chunks
    with pytest.raises(InputError, match="even number of stages"):
        _llama8b(plan=ParallelPlan.parse("pp=1"), schedule="dualpipe")
    with pytest.raises(InputError, match="an even number >= 2 x the 4 stages"):
        pipeline.pipeline_schedule("dualpipe", 4, 6)


# ---------------------------------------------------------------------------- validation
def test_every_run_states_its_convention_and_validation_compares_like_with_like():
    from rackmath.analyses.reality import validation as V
    from rackmath.analyses.training.runs import predicted_metric
    from rackmath.catalog.training_runs import RunMetric, training_runs

    for run in training_runs():
        assert run.convention.flops in ("model", "hardware")
        if run.metric is RunMetric.MFU:
            # the validation engine's MFU is model FLOPs with attention over the run's peak:
            # every MFU row so far states that convention (a row that does not fails here)
            assert (run.convention.flops, run.convention.attention) == ("model", True), run.id
            e = T.estimate(runs_analysis.run_setup(run))
            assert predicted_metric(run, e) == pytest.approx(e.mfu), run.id
    assert V is not None


def test_kernel_grounded_training_meets_the_median_target_without_fitting_these_rows():
    from rackmath.analyses.training.runs import predicted_metric
    from rackmath.catalog.training_runs import training_runs

    errors = []
    for run in training_runs():
        e = T.estimate(runs_analysis.run_setup(run))
        table = e.setup.table
        if run.measurement_id is not None:
            errors.append(abs(predicted_metric(run, e) / run.value - 1))
        if run.system.chip.id in ("tpu-v4", "h800"):
            assert table.transferred and "transferred" in table.source
    errors.sort()
    assert len(errors) == 7
    # median of the 7 published rows: 14.4% while the operators passed only their row counts;
    # 21.0% since they hand the kernel curves their shapes (prefill attention at its fitted
    # fraction for head dimension 128, docs/validation.md); 20.1% after the kernel refit of
    # 2026-11-24; 15.6% with issue 23's training kernels and each run's framework as stated
    # (still 15.6% with TP overlap's SM margin and Llama 3's interleaved pipeline: rows cross);
    # the 15% target is the xfail below
    assert errors[3] <= 0.16


@pytest.mark.xfail(strict=True, reason="kernel-grounded training median 15.4% > 15% on 2026-11-26")
def test_kernel_grounded_training_median_target():
    from rackmath.analyses.training.runs import predicted_metric
    from rackmath.catalog.training_runs import training_runs

    errors = sorted(
        abs(predicted_metric(r, T.estimate(runs_analysis.run_setup(r))) / r.value - 1)
        for r in training_runs()
        if r.measurement_id is not None
    )
    assert errors[3] <= 0.15


# ---------------------------------------------------------------------------- Blackwell and TPU
def test_blackwell_nvfp4_uses_the_kernel_fit_per_class_and_tpu_is_marked_transferred():

    def job(system, compute):
        return setup.make_training(
            rm.model("llama-3.1-70b"),
            rm.system(system),
            ParallelPlan.parse("tp=4,dp=2"),
            tokens=1e12,
            seq_len=4096,
            global_batch=8,
            compute=compute,
        )

    s = job("gb200-nvl72", "nvfp4")
    assert not s.table.transferred and s.table.chip == "gb200"
    nvfp4, fp8 = T.estimate(s), T.estimate(job("gb200-nvl72", "fp8"))
    assert nvfp4.step.step_s < fp8.step.step_s
    by_name = {o.name: o.precision for o in nvfp4.step.operators if o.op_class.value == "gemm"}
    assert by_name.pop("lm_head") == "bf16" and set(by_name.values()) == {"nvfp4"}  # the head stays BF16
    # each operator ran on its own format's fitted curve: NVFP4 GEMMs, a bf16 head and attention
    kernels = {
        o.name: o.kernel
        for o in nvfp4.step.operators
        if o.kernel is not None and o.op_class.value != "elementwise"
    }
    assert kernels["attention_qkv"].fmt == "nvfp4" and kernels["dense_mlp"].fmt == "nvfp4"
    assert kernels["lm_head"].fmt == "bfloat16" and kernels["attention"].fmt == "bfloat16"
    assert not any(k.fallback for k in kernels.values())  # element-wise passes: the bf16 curve
    tpu = setup.make_training(
        rm.model("palm-540b"),
        rm.system("tpu-v4-pod"),
        ParallelPlan.parse("tp=12,dp=512"),
        tokens=1e12,
        seq_len=2048,
        global_batch=2048,
        microbatch=4,
    )
    assert tpu.table.transferred and tpu.table.source.startswith("transferred from h100-sxm")
    assert "transferred" in T.estimate(tpu).to_dict()["efficiency"]["source"]


def test_a_non_gated_moe_trains_on_the_non_gated_kernels_curve():
    """Mixtral's experts made non-gated: the training step's grouped expert GEMM takes the B200
    bf16 non-gated curve, the gated model the gated one; the dense GEMMs are the same."""
    from dataclasses import replace

    gated = rm.model("mixtral-8x7b")
    assert gated.moe is not None
    plain = replace(gated, moe=replace(gated.moe, gated=False))

    def kernels(model):
        s = setup.make_training(
            model,
            rm.system("b200-hgx"),
            ParallelPlan.parse("tp=1,dp=8,ep=8"),
            tokens=1e12,
            seq_len=4096,
            global_batch=64,
        )
        return {o.name: o.kernel for o in T.estimate(s).step.operators if o.kernel is not None}

    g, p = kernels(gated), kernels(plain)
    assert (g["routed_experts"].kind, p["routed_experts"].kind) == ("gated", "nongated")
    assert g["routed_experts"].fmt == p["routed_experts"].fmt == "bfloat16"
    assert g["attention_qkv"] == p["attention_qkv"]


def test_the_slowest_stage_runs_the_whole_lm_head():
    # Llama 3.1 8B, 32 layers over P = 4: every stage has 8 layers, the last also the LM head
    # (2 x 4096 tokens x 4096 x 128,256 FLOPs, compute-bound at the BF16 peak) and so sets the pace
    s = _llama8b(plan=ParallelPlan.parse("pp=4,dp=2"), seq_len=4096, global_batch=16)
    ops = {o.name: o for o in T.estimate(s).step.operators}
    assert float(ops["lm_head"].forward_s) == pytest.approx(2 * 4096 * 4096 * 128256 / BF16, rel=1e-9)
    one = {o.name: o for o in T.estimate(_llama8b(seq_len=4096, global_batch=16)).step.operators}
    assert float(ops["attention_qkv"].forward_s) == pytest.approx(float(one["attention_qkv"].forward_s) / 4)
    # 126 layers over 16 stages (Llama 3 405B): a middle stage of 8 layers outweighs the end
    # stage of 7 layers + the head (0.66 of a layer's FLOPs), so the head is not on the pace
    big = setup.make_training(
        rm.model("llama-3.1-405b"),
        rm.system("h100-hgx"),
        ParallelPlan.parse("tp=8,pp=16,dp=64"),
        tokens=1e12,
        seq_len=8192,
        global_batch=2048,
    )
    assert {o.name: float(o.forward_s) for o in T.estimate(big).step.operators}["lm_head"] == 0.0


# ---------------------------------------------------------------------------- invariants
@given(g=st.floats(1e-6, 1.0), c=st.floats(1e-6, 1.0), n=st.integers(1, 500))
def test_bucketed_exposure_lies_between_one_bucket_and_no_overlap(g, c, n):
    exposed = ts.fsdp_exposed_s(g, c, n)
    assert g * (1 - 1e-12) <= exposed <= n * g * (1 + 1e-12)  # the first bucket is never hidden
    assert exposed >= n * g - n * c - 1e-12  # compute can hide at most itself


@settings(max_examples=15, deadline=None)
@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_more_ep_overlap_never_slows_a_step(a, b):
    lo, hi = sorted((a, b))
    slow, fast = (T.estimate(_qwen_moe(ep_overlap_frac=f)).step for f in (lo, hi))
    assert fast.step_s <= slow.step_s * (1 + 1e-12)
    assert fast.step_s >= fast.compute_s  # nothing hides compute
