"""The per-operator step (rackmath.core.operators): sums, bounds and hand derivations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath as rm
from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.core import architecture as arch
from rackmath.core import attention as attn
from rackmath.core import efficiency as eff
from rackmath.core import loads
from rackmath.core import operators as ops
from rackmath.specs.efficiency import ANY, Curve, CurveKey, EfficiencyTable, OpClass, OpEfficiency


def test_operator_flops_add_up_to_the_architecture_count() -> None:
    """Every FLOP of ``decode_flops_per_token`` lands in exactly one operator (pooled chip)."""
    for model_id, system_id in (
        ("llama-3.1-70b", "h100-hgx"),
        ("deepseek-v3", "gb200-nvl72"),
        ("gemma-3-27b", "h100-hgx"),
    ):
        dep = rm.deployment(model_id, system_id, efficiency="pure")
        g = dep.decode([1, 64, 4096], [512, 32768])
        total = sum(op.flops for op in g.step.operators)
        np.testing.assert_allclose(total, g.flops, rtol=1e-12, err_msg=model_id)


def test_step_is_the_sum_of_operator_times_plus_communication_and_overhead() -> None:
    dep = plan_deployment(resolve_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64")
    g = dep.decode([1, 512, 8192], [4096, 65536])
    for i in range(3):
        for j in range(2):
            point = g.step.breakdown_at((i, j))
            summed = sum(o["time_s"] for o in point["operators"]) + point["exposed_communication_s"]
            assert g.step_s[i, j] == pytest.approx(summed + point["overhead_s"], rel=1e-12)
            assert 0.0 <= point["exposed_communication_s"] <= point["communication_s"] + 1e-15


def test_one_operator_by_hand() -> None:
    """Llama-3.1-70B on one H100 (bf16), batch 64: the QKV projection is
    ``2 x 64 x 80 x 8192 x (8192 + 2 x 1024)`` FLOPs over 989 TFLOP/s = 0.139 ms against
    ``80 x 8192 x 10240 x 2`` B of weights plus ``64 x 80 x (8192 + 10240) x 2`` B of
    activations over 3.35 TB/s = 4.06 ms: memory-bound, 4.06 ms."""
    dep = rm.deployment("llama-3.1-70b", "h100-hgx", chips=1, efficiency="pure")
    qkv = next(op for op in dep.decode([64], [1024]).step.operators if op.name == "attention_qkv")
    flops = 2 * 64 * 80 * 8192 * (8192 + 2 * 1024)
    weight = 80 * 8192 * 10240 * 2
    activation = 64 * 80 * (8192 + 10240) * 2
    assert float(qkv.flops) == pytest.approx(flops, rel=1e-12)
    assert float(qkv.weight_bytes) == pytest.approx(weight, rel=1e-12)
    assert float(qkv.activation_bytes) == pytest.approx(activation, rel=1e-12)
    assert float(qkv.time_s) == pytest.approx((weight + activation) / 3.35e12, rel=1e-12)
    assert float(qkv.compute_s) == pytest.approx(flops / 989e12, rel=1e-3)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.floats(1, 20000),
    context=st.floats(1, 300000),
    model_id=st.sampled_from(["llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "qwen3-30b-a3b", "gpt-oss-120b"]),
)
def test_the_blackboard_bounds_the_step_within_a_factor_of_two(
    batch: float, context: float, model_id: str
) -> None:
    """max(sum c, sum m) <= sum max(c, m) <= sum c + sum m <= 2 max(sum c, sum m)."""
    dep = rm.deployment(model_id, "gb200-nvl72", efficiency="pure")
    g = dep.decode([batch], [context])
    step, board = float(g.step_s[0, 0]), float(g.blackboard_step_s[0, 0])
    assert board * (1 - 1e-12) <= step <= 2 * board * (1 + 1e-12)


def test_efficiency_only_slows_operators_down() -> None:
    """A table below the pure roofline never makes a step faster, and a floor adds per call."""
    dep = rm.deployment("llama-3.1-70b", "h100-hgx", efficiency="pure")
    slow = EfficiencyTable(
        curves=(
            (
                CurveKey(OpClass.GEMM, ANY, ANY),
                Curve(OpEfficiency(compute_frac=0.7, compute_half_rows=32, floor_s=5e-6), "", "test"),
            ),
            (
                CurveKey(OpClass.ATTENTION_DECODE, ANY, ANY),
                Curve(OpEfficiency(bandwidth_frac=0.8, bandwidth_half_rows=8), "", "test"),
            ),
        )
    )
    load = loads.decode_load(dep.model, np.array([[1.0], [256.0]]), np.array([[1024.0, 65536.0]]), 2.0)
    pure = dep.step(load)
    rates = replace(dep.chip_rates(dep.chips), efficiency=slow)
    from rackmath.core import parallel as par

    fitted = par.plan_step(
        dep.shardable, tp=1, pp=1, dp=1, ep=1, load=load, rates=rates, topo=None, communication=False
    )
    assert np.all(fitted.step_s >= pure.step_s)
    qkv_pure = next(op for op in pure.operators if op.name == "attention_qkv")
    qkv_fit = next(op for op in fitted.operators if op.name == "attention_qkv")
    # 80 launches of 5 us each at least
    assert np.all(
        qkv_fit.time_s - np.maximum(qkv_pure.compute_s / 0.7, qkv_pure.memory_s) >= 80 * 5e-6 - 1e-12
    )


def test_sparse_attention_reads_a_bounded_top_k_but_holds_everything() -> None:
    """DSA (DeepSeek-V3.2): at 128K context each of 61 layers reads 2,048 latents of 576
    values (bf16) plus an FP8 indexer key (128 B) for every held token; it holds all 128K."""
    base = resolve_model("deepseek-v3")
    dsa = replace(
        base, attention=replace(base.attention, index_top_k=2048, index_n_heads=64, index_head_dim=128)
    )
    c = 131072
    read = float(arch.kv_bytes_read_per_sequence(dsa, c, 2.0))
    held = float(arch.kv_bytes_per_sequence(dsa, c, 2.0))
    assert read == pytest.approx(61 * (2048 * 576 * 2 + c * 128 * 1), rel=1e-12)
    assert held == pytest.approx(61 * c * (576 * 2 + 128), rel=1e-12)
    # the dense model reads what it holds
    assert float(arch.kv_bytes_read_per_sequence(base, c, 2.0)) == float(
        arch.kv_bytes_per_sequence(base, c, 2.0)
    )
    # a decode step of the sparse model is far cheaper in KV traffic at long context
    step_dsa = float(loads.decode_load(dsa, 1.0, c, 2.0).kv_bytes)
    step_dense = float(loads.decode_load(base, 1.0, c, 2.0).kv_bytes)
    assert step_dsa < 0.2 * step_dense


def test_every_attention_kind_has_one_registry_entry() -> None:
    from rackmath.specs.model import AttentionKind

    assert set(attn.REGISTRY) == set(AttentionKind)


def test_per_class_precision_reaches_the_step() -> None:
    """gpt-oss-120b keeps attention, router, embedding and head in bf16 beside mxfp4
    experts (modules_to_not_convert): the batch-1 step reads those at 2 B per weight."""
    dep = rm.deployment("gpt-oss-120b", "h100-hgx", chips=1, efficiency="pure")
    step = dep.decode([1], [128]).step
    by_name = {op.name: op for op in step.operators}
    counts = arch.param_counts(dep.model)
    out = (
        dep.model.num_layers
        * dep.model.attention.num_heads
        * dep.model.attention.v_head_dim
        * dep.model.hidden_size
    )
    assert float(by_name["attention_qkv"].weight_bytes) == pytest.approx(
        (counts.attention - out) * 2.0, rel=1e-12
    )
    assert float(by_name["lm_head"].weight_bytes) == pytest.approx(counts.lm_head * 2.0, rel=1e-12)
    per_expert = counts.per_expert * dep.model.num_moe_layers * (4 + 8 / 32) / 8
    assert float(by_name["routed_experts"].weight_bytes) == pytest.approx(4 * per_expert, rel=1e-9)


@pytest.mark.parametrize("efficiency", ["pure", "kernel"])
def test_a_one_rank_plan_with_communication_off_is_the_ideal_chip(efficiency: str) -> None:
    """The lecture's ideal chip is the plan tp = pp = dp = ep = 1 with communication off:
    the same operators, the same step, the same memory account, not a second model."""
    for model_id in ("llama-3.1-8b", "qwen3-30b-a3b"):
        model, sys = resolve_model(model_id), system("h100-hgx")
        planned = plan_deployment(model, sys, "tp=1", communication=False, efficiency=efficiency)
        ideal = pooled.make_deployment(model, sys, chips=1, efficiency=efficiency)
        batches, contexts = [1, 7, 64, 512], [128, 4096, 32768]
        p, f = planned.decode(batches, contexts), ideal.decode(batches, contexts)
        np.testing.assert_allclose(p.step_s, f.step_s, rtol=1e-12, err_msg=model_id)
        np.testing.assert_allclose(p.step.blackboard_s, f.step.blackboard_s, rtol=1e-12, err_msg=model_id)
        assert [op.name for op in p.step.operators] == [op.name for op in f.step.operators]
        held = ideal.memory(f.batch, f.context).total_bytes
        np.testing.assert_allclose(p.memory.total_bytes, held, rtol=1e-12)
        np.testing.assert_array_equal(p.fits, f.fits)


def test_the_ideal_grid_fits_by_the_one_memory_account() -> None:
    """DeepSeek-V3 on 72 pooled GB200s at L = 4,096, derived by hand: every weight
    (arch.weight_bytes_total), per sequence its KV plus one token's live activations,
    17 h values x 2 B (Korthikanti et al. 2022), against 72 x NVML bytes x (1 - 10%)."""
    d = rm.deployment("deepseek-v3", "gb200-nvl72", efficiency="pure")
    context = 4096.0
    weights = arch.weight_bytes_total(d.model, d.precisions.weights)
    per_sequence = float(arch.kv_bytes_per_sequence(d.model, context, 2.0)) + 17 * d.model.hidden_size * 2.0
    usable = 72 * d.system.chip.hbm_capacity_bytes * (1 - d.memory_reserve_frac)
    by_hand = np.floor((usable - weights) / per_sequence)
    assert float(d.max_concurrency([context])[0]) == by_hand
    g = d.decode([by_hand, by_hand + 1], [context])
    assert g.fits[:, 0].tolist() == [True, False]
    # the lecture's weights + KV check alone would admit a few more sequences (activations add
    # 244 kB to the 288 MB a sequence holds at 4K)
    assert np.floor((usable - weights) / (per_sequence - 17 * d.model.hidden_size * 2.0)) > by_hand


def test_an_moe_user_waits_for_k_experts_not_every_weight() -> None:
    """Issue 11 item 8: at batch 1 an MoE token reads only its k experts per layer, so the
    per-user ceiling `explain` prints is 1 / (batch-1 step), above 1 / (all-weights floor),
    and the batch-1 cost is fewer than B* times the balance-batch cost (dense: exactly B*)."""
    d = rm.deployment("deepseek-v3", "gb200-nvl72", efficiency="pure")
    e = rm.explain(d)
    b1 = float(d.decode([1.0], e.contexts[:1]).step_s[0, 0])
    assert e.batch_one_step_s == pytest.approx(b1, rel=1e-12)
    assert b1 < 0.2 * e.latency_floor_s  # 8 of 256 experts per layer, not all of them
    from rackmath.views.derivation import derivation

    text = "\n".join(line for section in derivation(e) for line in section.lines)
    assert f"at most {1 / b1:,.0f} tokens/s per user" in text
    assert e.batch_one_over_balance_cost < e.cost_reference_batch


def test_a_mixed_step_runs_two_attention_kernels_each_at_its_own_efficiency() -> None:
    """Llama-3.1-70B on 8 H100s, 64 decode rows at 2,048 tokens of context beside one 8,192-token
    prompt chunk: decode attention reads the caches, the chunk computes; each is its own
    operator and class, their FLOPs and KV bytes add up to the load's, and a decode-only step
    has no prompt operator."""
    model = resolve_model("llama-3.1-70b")
    dep = rm.deployment("llama-3.1-70b", "h100-hgx", chips=8)
    decode = loads.decode_load(model, 64.0, 2048.0, 2.0)
    prompt = loads.prefill_load(model, 1.0, 8192.0, 2.0)
    mixed = replace(
        decode,
        prefill_sequences=prompt.prefill_sequences,
        prefill_length=prompt.prefill_length,
        prefill_attention_flops=prompt.prefill_attention_flops,
        prefill_kv_write_bytes=prompt.prefill_kv_write_bytes,
    )
    step = dep.step(mixed)
    by_name = {op.name: op for op in step.operators}
    dec, pre = by_name["attention"], by_name["attention_prefill"]
    assert dec.op_class is OpClass.ATTENTION_DECODE and pre.op_class is OpClass.ATTENTION_PREFILL
    assert float(dec.flops + pre.flops) == pytest.approx(float(mixed.attention_flops), rel=1e-12)
    assert float(pre.flops) == pytest.approx(float(loads.prefill_attention_flops_per_sequence(model, 8192.0)))
    kv_held = float(arch.kv_bytes_per_sequence(model, 8192.0, 2.0))
    assert float(pre.kv_write_bytes) == pytest.approx(kv_held, rel=1e-12)  # the chunk writes its cache
    # the chunk is costed at prefill efficiency: no slower than the decode class would make it
    from rackmath.core import work as wk

    chunk = wk.elementwise(0.0, 64.0 * 8.0, model.num_layers)._replace(flops=pre.flops)
    rates = dep.chip_rates(dep.chips)
    as_decode = ops.timed("x", OpClass.ATTENTION_DECODE, rates, chunk, ("bfloat16",), "gqa")
    assert float(pre.compute_s) < float(as_decode.compute_s)
    assert "attention_prefill" not in {op.name for op in dep.step(decode).operators}


def test_a_model_whose_query_heads_each_read_their_own_kv_head_decodes_on_the_mha_curve() -> None:
    """Llama-2-7B (32 query heads on 32 KV heads) decodes on the chip's masked-MHA curve and
    Llama-3.1-70B (64 on 8) on the grouped one, each without a fallback, also under TP 8
    (8 query heads on 1 KV head a chip stays grouped). A table without an MHA curve falls back
    visibly to the GQA curve of the same format, not to another family's."""
    from rackmath.core import work as wk

    assert wk.decode_family("gqa", 1.0) == "mha" and wk.decode_family("gqa", 8.0) == "gqa"
    assert wk.decode_family("mla", 1.0) == "mla"
    assert wk.decode_family("gqa", np.array([1.0, 2.0])).tolist() == ["mha", "gqa"]
    cases = (("llama-2-7b", 1, "mha"), ("llama-3.1-70b", 8, "gqa"), ("llama-3.1-70b", 1, "gqa"))
    for model, chips, kind in cases:
        dep = rm.deployment(model, "h100-hgx", chips=chips)
        att = next(o for o in dep.decode([64], [4096]).step.operators if o.name == "attention")
        assert (att.kernel.kind, att.kernel.fallback) == (kind, ""), model
    gqa = Curve(OpEfficiency(compute_frac=0.5), "bf16", "table")
    dsa = Curve(OpEfficiency(compute_frac=0.2), "bf16", "table")
    table = EfficiencyTable(
        curves=(
            (CurveKey(OpClass.ATTENTION_DECODE, "bfloat16", "dsa"), dsa),
            (CurveKey(OpClass.ATTENTION_DECODE, "bfloat16", "gqa"), gqa),
        ),
        chip="x",
    )
    e, _, kernel = table.curve(OpClass.ATTENTION_DECODE, ("bfloat16",), "mha")
    assert e.compute_frac == 0.5 and kernel.kind == "gqa"
    assert "no attention_decode curve for mha" in kernel.fallback


def test_mla_decode_attention_runs_on_the_mla_curve_with_every_head_a_row() -> None:
    """DeepSeek-V3's absorbed MLA decode: 128 query heads meet one cached latent (a dense
    product, FlashMLA / TensorRT-LLM's MLA kernel), timed in the ``generation_mla`` tables.
    The operator names the MLA curve and hands it one thread block per sequence (one latent
    "KV head") with the 128 heads as the tile's rows; GQA models keep the GQA curve."""
    dep = rm.deployment("deepseek-v3", "gb200-nvl72", chips=8)
    rates = dep.chip_rates(dep.chips)
    att = next(o for o in dep.decode([4096], [4096]).step.operators if o.name == "attention")
    assert (att.kernel.kind, att.kernel.fmt, att.kernel.fallback) == ("mla", "bfloat16", "")
    e, precision, _ = dep.efficiency_table.curve(OpClass.ATTENTION_DECODE, ("bfloat16",), "mla")
    frac = float(eff.achieved_compute_frac(e, 4096.0, cols=128.0, depth=4096.0))
    expected = float(np.sum(att.flops)) / (rates.peak(precision) * frac)
    assert float(np.sum(att.compute_s)) == pytest.approx(expected, rel=1e-9)
    gqa = rm.deployment("llama-3.1-70b", "h100-hgx", chips=8)
    assert gqa.shardable.operators.attention_kind == "gqa" and dep.shardable.operators.attention_kind == "mla"
