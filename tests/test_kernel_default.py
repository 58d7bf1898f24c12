"""Kernel-grounded efficiencies are the default: operator times follow the fitted formula,
chips without tables borrow a measured chip's curves at their own peaks and say so, and
``--efficiency pure`` / ``efficiency="pure"`` gives back the lecture's roofline."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.kernels import tables as et
from rackmath.catalog import kernel_efficiency as ke
from rackmath.core import loads
from rackmath.core import roofline as rl
from rackmath.errors import InputError
from rackmath.specs.efficiency import OpClass
from rackmath.specs.precision import Precision


def _op(step, name):
    return next(o for o in step.operators if o.name == name)


def _entry(chip_id: str, op_class: str, dtype: str, kind: str | None = None) -> dict:
    return next(
        o
        for o in ke.op_entries(chip_id)
        if o["op_class"] == op_class and o["dtype"] == dtype and (kind is None or o.get("kind") == kind)
    )


def test_the_default_is_kernel_grounded_and_pure_is_asked_for() -> None:
    d = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1)
    assert d.efficiency == rl.KERNEL_GROUNDED and d.efficiency.mode == "kernel"
    assert d.efficiency_table.source.startswith("aiconfigurator-core==")
    p = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1, efficiency="pure")
    assert p.efficiency == rl.PURE_ROOFLINE and p.efficiency_table.is_pure
    assert d.pure() == p
    with pytest.raises(InputError, match="efficiency"):
        rm.deployment("llama-3.1-8b", "h100-hgx", efficiency="fast")


def test_a_kernel_grounded_gemm_is_the_fitted_formula_by_hand() -> None:
    """Llama-3.1-8B on one H100, decode at batch 64 and 2,048 tokens of context: the QKV
    projection (bf16) at the catalog's fitted H100 bf16 GEMM entry, recomputed from the raw
    entry: rows = 64 tokens, the GEMM's columns 6,144 (32 query + 2 x 8 KV heads of 128) over a
    reduction of 4,096 (the hidden size), one call per layer (32)."""
    load = loads.decode_load(rm.resolve_model("llama-3.1-8b"), 64.0, 2048.0, 2.0)
    kernel = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1)
    pure = kernel.pure()
    qkv = _op(kernel.step(load), "attention_qkv")
    ref = _op(pure.step(load), "attention_qkv")  # same work and bytes, pure times
    e = _entry("h100-sxm", "gemm", "bfloat16")
    chip = kernel.system.chip
    rows = 64.0
    cols, depth = 6144.0, 4096.0
    compute_frac = (
        e["compute_frac"]
        * rows
        / (rows + e["compute_half_rows"])
        * cols
        / (cols + e["compute_half_cols"])
        * depth
        / (depth + e["compute_half_depth"])
    )
    # the bandwidth saturates in output tiles when the fit chose a tile edge, else in rows
    tile = e["bandwidth_tile"]
    par = math.ceil(rows / tile) * math.ceil(cols / tile) if tile else rows
    bandwidth_frac = e["bandwidth_frac"] * par / (par + e["bandwidth_half_rows"])
    compute_s = float(ref.flops) / (chip.peak_flops(Precision.BF16) * compute_frac)
    moved = float(ref.weight_bytes + ref.activation_bytes + ref.kv_read_bytes + ref.kv_write_bytes)
    memory_s = moved / (chip.hbm_bandwidth_bytes_per_s * bandwidth_frac)
    p = e["overlap_power"]  # compute and memory combined as a power mean (0: their max)
    both_s = (compute_s**p + memory_s**p) ** (1 / p) if p else max(compute_s, memory_s)
    by_hand = both_s + 32 * e["floor_s"]
    assert float(qkv.compute_s) == pytest.approx(compute_s, rel=1e-12)
    assert float(qkv.memory_s) == pytest.approx(memory_s, rel=1e-12)
    assert float(qkv.time_s) == pytest.approx(by_hand, rel=1e-12)
    # the fitted kernel is slower than the roofline, never faster
    assert float(qkv.time_s) > float(ref.time_s)


def test_weight_only_formats_take_the_dequantizing_kernels_fit() -> None:
    d = rm.deployment("llama-3.1-8b", "a100-hgx", chips=1, weights="int4", compute="bf16")
    e = _entry("a100-80gb", "gemm", "int4_wo")
    load = loads.decode_load(d.model, 8.0, 1024.0, 2.0)
    mlp = _op(d.step(load), "dense_mlp")
    assert mlp.kernel.fmt == "int4_wo" and not mlp.kernel.fallback
    assert d.efficiency_table.of(OpClass.GEMM, "int4_wo") == et.op_from_entry(e)


@pytest.mark.parametrize(
    ("system_id", "precision"), [("tpu-v5p-pod", "bf16"), ("mi325x-8", "bf16"), ("rubin-nvl144", "fp8")]
)
def test_chips_without_tables_are_transferred_and_scaled_by_their_own_peaks(
    system_id: str, precision: str
) -> None:
    far = rm.deployment("llama-3.1-8b", system_id, chips=1, weights=precision, compute=precision)
    donor, transferred = ke.resolve(far.system.chip.id)
    assert transferred and far.transferred_from == donor and far.efficiency_table.transferred
    assert "transferred from" in far.efficiency_label and "own peaks" in far.efficiency_label
    donor_table = et.efficiency_table(donor)
    # the donor's fractions, with bands widened for the transfer (catalog transfer_band) ...
    own, given = dict(far.efficiency_table.curves), dict(donor_table.curves)
    assert own.keys() == given.keys()
    for key, curve in own.items():
        assert curve.efficiency == given[key].efficiency and curve.source == given[key].source
        assert curve.band.p10 <= given[key].band.p10 and curve.band.p90 >= given[key].band.p90
    load = loads.decode_load(far.model, 256.0, 4096.0, 2.0)
    gemm = _op(far.step(load), "dense_mlp")
    assert gemm.kernel.chip == donor and gemm.kernel.transferred
    e = far.efficiency_table.of(OpClass.GEMM, gemm.kernel.fmt)
    chip = far.system.chip
    frac = e.compute_frac * 256.0 / (256.0 + e.compute_half_rows)
    if e.compute_tile_rows:
        frac *= 256.0 / (np.ceil(256.0 / e.compute_tile_rows) * e.compute_tile_rows)
    # the MLP's shape on one chip: 14,336 intermediate columns over the 4,096-wide hidden
    frac *= 14336.0 / (14336.0 + e.compute_half_cols) * 4096.0 / (4096.0 + e.compute_half_depth)
    # ... of this chip's own peak and bandwidth
    assert float(gemm.compute_s) == pytest.approx(
        float(gemm.flops) / (chip.peak_flops(far.precisions.compute) * frac)
    )
    par = (
        math.ceil(256.0 / e.bandwidth_tile) * math.ceil(14336.0 / e.bandwidth_tile)
        if e.bandwidth_tile
        else 256.0
    )
    bw_frac = e.bandwidth_frac * par / (par + e.bandwidth_half_rows)
    moved = float(gemm.weight_bytes + gemm.activation_bytes)
    assert float(gemm.memory_s) == pytest.approx(moved / (chip.hbm_bandwidth_bytes_per_s * bw_frac))


def test_a_chip_the_kernel_catalog_does_not_know_takes_the_default_donor() -> None:
    t = et.efficiency_table("my-own-chip")
    assert t.transferred and et.DEFAULT_DONOR in t.source and t.chip == et.DEFAULT_DONOR
    donor = dict(et.efficiency_table(et.DEFAULT_DONOR).curves)
    assert {k: c.efficiency for k, c in t.curves} == {k: c.efficiency for k, c in donor.items()}
    assert all(c.band.p90 >= donor[k].band.p90 for k, c in t.curves)  # widened for the transfer
    assert et.donor_of("my-own-chip") == et.DEFAULT_DONOR and et.donor_of("h100-sxm") is None


def test_scalars_multiply_the_kernel_curves() -> None:
    scalars = rl.Efficiency(flops_frac=0.5, bandwidth_frac=0.8, overhead_s=1e-3)
    t = et.grounded_table("h100-sxm", scalars)
    base = et.efficiency_table("h100-sxm")
    g, g0 = t.of(OpClass.GEMM, "bfloat16"), base.of(OpClass.GEMM, "bfloat16")
    assert g.compute_frac == pytest.approx(0.5 * g0.compute_frac)
    assert g.bandwidth_frac == pytest.approx(0.8 * g0.bandwidth_frac)
    assert t.overhead_s == pytest.approx(base.overhead_s + 1e-3)
    assert et.grounded_table("h100-sxm", rl.PURE_ROOFLINE).is_pure


def test_explain_pure_reproduces_the_lecture_and_kernel_shows_both(cli) -> None:
    """The lecture's decode step at batch 1 is all weights read once at full bandwidth:
    Llama-3.1-70B in bf16 on 8 pooled H100s (the explanation's own weight count)."""
    args = ("explain", "llama-3.1-70b", "--on", "h100-hgx", "--batch", "1,64", "--context", "1", "--json")
    code, out, err = cli(*args, "--efficiency", "pure")
    assert code == 0, err
    pure = json.loads(out)
    assert pure["efficiency"]["mode"] == "pure"
    dep = rm.deployment("llama-3.1-70b", "h100-hgx", efficiency="pure")
    lecture_s = float(dep.weight_bytes_read(1.0)) / dep.bandwidth_bytes_per_s
    step1 = pure["points"][0]["step_s"]
    assert step1 == pytest.approx(lecture_s, rel=0.01)  # activations and KV of one token: < 1%
    grid = dep.decode([1, 64], [1])
    assert [p["step_s"] for p in pure["points"]] == pytest.approx(grid.step_s.ravel().tolist(), rel=1e-12)
    code, out, err = cli(*args)
    assert code == 0, err
    kernel = json.loads(out)
    source = et.efficiency_table("h100-sxm").source
    assert kernel["efficiency"] == {
        "mode": "kernel",
        "label": f"kernel-grounded (measured; {source})",
        "transferred": False,
        "transferred_from": None,
        "source": source,
    }
    for k, p in zip(kernel["points"], pure["points"], strict=True):
        assert k["pure_step_s"] == pytest.approx(p["step_s"], rel=1e-12)
        assert k["step_s"] > k["pure_step_s"]


def test_explain_marks_a_transferred_chip(cli) -> None:
    code, out, err = cli("explain", "llama-3.1-8b", "--on", "tpu-v5p-pod", "--chips", "8", "--json")
    assert code == 0, err
    e = json.loads(out)["efficiency"]
    assert e["transferred"] and e["transferred_from"] == "h100-sxm" and "transferred from" in e["source"]
    code, out, err = cli("explain", "llama-3.1-8b", "--on", "tpu-v5p-pod", "--chips", "8")
    assert code == 0, err
    assert "transferred from h100-sxm" in " ".join(out.split())


def test_plan_and_pareto_say_which_efficiency_they_used() -> None:
    assert et.describe("tpu-v5p", rm.Efficiency())["transferred_from"] == "h100-sxm"
    assert et.describe("h100-sxm", rm.Efficiency(mode="pure")) == {
        "mode": "pure",
        "label": "pure roofline",
        "transferred_from": None,
        "source": "pure roofline",
    }


def test_pareto_pure_flag(cli) -> None:
    base = ("pareto", "llama-3.1-8b", "--on", "h100-hgx", "--max-chips", "2", "--json")
    code, out, err = cli(*base, "--efficiency", "pure")
    assert code == 0, err
    pure = json.loads(out)
    code, out, err = cli(*base)
    assert code == 0, err
    kernel = json.loads(out)
    assert pure["efficiency"]["mode"] == "pure" and kernel["efficiency"]["mode"] == "kernel"
    best = lambda d: max(p["tokens_per_s_per_chip"] for p in d["frontier"])  # noqa: E731
    assert best(kernel) < best(pure)  # fitted kernels never beat the roofline


def test_the_serving_page_toggles_the_efficiency() -> None:
    from rackmath.web.page_serving import build_serving_view
    from rackmath.web.state.serving import parse_serving_query, serving_query

    state, errors = parse_serving_query({"model": "llama-3.1-8b", "system": "h100-hgx", "efficiency": "pure"})
    assert not errors and state.efficiency == "pure"
    assert serving_query(state)["efficiency"] == "pure"
    pure = build_serving_view(state)
    kernel = build_serving_view(parse_serving_query({"model": "llama-3.1-8b", "system": "h100-hgx"})[0])
    assert pure.deployment.efficiency.mode == "pure" and kernel.deployment.efficiency.mode == "kernel"
    assert float(kernel.point.step_s[0, 0]) > float(pure.point.step_s[0, 0])
    _, errors = parse_serving_query({"efficiency": "fast"})
    assert len(errors) == 1 and "efficiency" in str(errors[0])


def test_a_moe_shape_timed_by_two_kernels_keeps_the_faster() -> None:
    """Blackwell NVFP4 MoE tables time a shape with a throughput and a min-latency kernel; the
    framework dispatches the faster, so the fit sees one row per shape (gated and non-gated
    kernels are different operators and both stay)."""
    pd = pytest.importorskip("pandas")
    from rackmath.analyses.kernels import rows as kr

    shape = {
        "moe_dtype": "nvfp4",
        "num_tokens": 64,
        "hidden_size": 7168,
        "inter_size": 2048,
        "topk": 8,
        "num_experts": 256,
        "moe_tp_size": 1,
        "moe_ep_size": 8,
    }
    df = pd.DataFrame(
        [
            {**shape, "kernel_source": "moe_torch_flow_cutlass", "latency": 0.30},
            {**shape, "kernel_source": "moe_torch_flow_min_latency", "latency": 0.12},
            {**shape, "kernel_source": "moe_torch_flow_nongated", "latency": 0.20},
            {**shape, "num_tokens": 128, "kernel_source": "moe_torch_flow_cutlass", "latency": 0.35},
        ]
    )
    kept = kr._fastest_kernel(df)
    assert sorted(kept["latency"].tolist()) == [0.12, 0.20, 0.35]


def test_experts_and_attention_hand_their_kernel_shapes_to_the_curves() -> None:
    """Mixtral 8x7B (bf16) on one H200, decode at batch 4 and 1,000 tokens of context. The
    grouped expert GEMM runs 4 x 2 / 8 = 1 token per expert, 14,336 columns (no expert TP) over
    the 4,096-wide hidden; decode attention runs 4 sequences x 8 KV heads = 32 thread blocks,
    32 / 8 = 4 query heads per KV head, over 1,000 cached tokens."""
    from rackmath.core.efficiency import achieved_bandwidth_frac, achieved_compute_frac

    d = rm.deployment("mixtral-8x7b", "h200-hgx", chips=1)
    load = loads.decode_load(d.model, 4.0, 1000.0, 2.0)
    step = d.step(load)
    peak = d.system.chip.peak_flops(Precision.BF16)
    bw = d.system.chip.hbm_bandwidth_bytes_per_s
    moe, att = _op(step, "routed_experts"), _op(step, "attention")
    e_moe = d.efficiency_table.of(OpClass.MOE, "bfloat16", "gated")
    moe_frac = float(achieved_compute_frac(e_moe, 1.0, 14336.0, 4096.0))
    assert float(moe.compute_s) == pytest.approx(float(moe.flops) / (peak * moe_frac), rel=1e-12)
    e_att = d.efficiency_table.of(OpClass.ATTENTION_DECODE, "bfloat16", "gqa")
    frac = achieved_compute_frac(e_att, 32.0, 4.0, 1000.0)
    assert float(att.compute_s) == pytest.approx(float(att.flops) / (peak * float(frac)), rel=1e-12)
    moved = float(att.kv_read_bytes + att.kv_write_bytes + att.activation_bytes)
    bw_frac = float(achieved_bandwidth_frac(e_att, 32.0, 1000.0))
    assert float(att.memory_s) == pytest.approx(moved / (bw * bw_frac), rel=1e-12)
    # the shapes matter: the rows-only form would give a different compute time
    assert float(achieved_compute_frac(e_moe, 1.0)) > moe_frac * 1.01


def test_a_non_gated_moe_runs_on_the_non_gated_kernels_curve() -> None:
    """Mixtral's experts made non-gated (up and down only) on one B200: the grouped expert GEMM
    takes the fitted non-gated curve (a kernel of its own in TensorRT-LLM's tables), the other
    classes stay as they were, and the expert activations count 2 intermediate widths, not 3."""
    from dataclasses import replace

    gated = rm.deployment("mixtral-8x7b", "b200-hgx", chips=1)
    m = gated.model
    assert m.moe is not None
    plain = rm.deployment(replace(m, moe=replace(m.moe, gated=False)), "b200-hgx", chips=1)
    load = loads.decode_load(m, 64.0, 1000.0, 2.0)
    plain_op = _op(plain.step(load), "routed_experts")
    gated_op = _op(gated.step(load), "routed_experts")
    assert (plain_op.kernel.kind, gated_op.kernel.kind) == ("nongated", "gated")
    e_plain = plain.efficiency_table.of(OpClass.MOE, "bfloat16", "nongated")
    assert e_plain == et.op_from_entry(_entry("b200", "moe", "bfloat16", "nongated"))
    assert e_plain != et.op_from_entry(_entry("b200", "moe", "bfloat16", "gated"))
    assert _op(plain.step(load), "dense_mlp" if m.num_dense_mlp_layers else "attention_qkv").time_s == (
        _op(gated.step(load), "dense_mlp" if m.num_dense_mlp_layers else "attention_qkv").time_s
    )
    a_plain = float(_op(plain.step(load), "routed_experts").activation_bytes)
    a_gated = float(_op(gated.step(load), "routed_experts").activation_bytes)
    h, i = 4096.0, 14336.0
    assert a_plain / a_gated == pytest.approx((2 * h + 2 * i) / (2 * h + 3 * i), rel=1e-9)


def test_the_min_latency_moe_kernel_runs_only_where_its_table_timed_it() -> None:
    """DeepSeek-V3 in NVFP4 on B200 x 8, decode. TensorRT-LLM runs its min-latency MoE kernel at
    <= 128 tokens per call, and its table has no EP-1 timing of it: 64 tokens over EP 8 take the
    faster min-latency curve; 512 tokens over EP 8, and 64 tokens with every rank holding every
    expert (EP 1), take the throughput kernel's time exactly."""
    from dataclasses import replace

    from rackmath.core import parallel as par

    d = rm.deployment("deepseek-v3", "b200-hgx", chips=8, weights="fp4", compute="fp4")
    table = d.efficiency_table
    moe = table.of(OpClass.MOE, "nvfp4", "gated")
    assert moe.alternative is not None
    assert (moe.alternative.max_tokens, moe.alternative.min_ep) == (128.0, 2.0)
    curves = tuple(
        (
            k,
            replace(c, efficiency=replace(c.efficiency, alternative=None))
            if k.op_class is OpClass.MOE
            else c,
        )
        for k, c in table.curves
    )
    one_kernel = replace(table, curves=curves)
    rates = d.chip_rates(1)

    def expert_time_s(batch: float, ep: int, t: object = table) -> float:
        step = par.plan_step(
            d.shardable,
            tp=1,
            pp=1,
            dp=8,
            ep=ep,
            load=loads.decode_load(d.model, batch, 2000.0, 2.0),
            rates=replace(rates, efficiency=t),
            topo=None,
            communication=False,
        )
        return float(_op(step, "routed_experts").time_s)

    assert expert_time_s(64, 8) < 0.9 * expert_time_s(64, 8, one_kernel)
    assert expert_time_s(512, 8) == expert_time_s(512, 8, one_kernel)
    assert expert_time_s(64, 1) == expert_time_s(64, 1, one_kernel)
