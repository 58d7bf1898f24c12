"""Precision per tensor class (issue 25, item 1): stated on a deployment, a plan, the CLI and a
scenario; read from a checkpoint's config where it says so; each operator on its own kernel.

docs/serving-features.md's worked example is recomputed here from DeepSeek-V3's config
(hidden 7168, 61 layers of which 58 MoE, 256 experts of intermediate 2048, k = 8, MLA) and the
B200's catalog peaks, under the pure roofline.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import rackmath as rm
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.core import roofline as rl
from rackmath.errors import ConfigError, InputError
from rackmath.specs.hf_config import model_from_config
from rackmath.specs.model import parse_weight_classes
from rackmath.specs.precision import Precision

H, MOE_LAYERS, LAYERS, E, K, EXPERT_I = 7168, 58, 61, 256, 8, 2048
EXPERT_PARAMS = 3 * H * EXPERT_I * MOE_LAYERS
#: MLA's projections a layer: q_a, q_b (128 heads x 192), kv_a (512 + 64), kv_b (128 x (128 + 128)), o
MLA_PARAMS = H * 1536 + 1536 * 128 * 192 + H * 576 + 512 * 128 * 256 + 128 * 128 * H
#: B200 (catalog): dense peaks and HBM bandwidth
FP4, FP8, BF16, HBM = 9.0e15, 4.5e15, 2.25e15, 8.0e12
STATED = "experts=nvfp4,attention=fp8"


def _f(x) -> float:
    return float(np.asarray(x).ravel()[0])


@pytest.fixture(scope="module")
def r1():
    return rm.model("deepseek-v3")


@pytest.fixture(scope="module")
def b200():
    return rm.system("b200-hgx")


def _point(r1, b200, stated):
    dep = plan_deployment(r1, b200, "dp=8,ep=8", kv="fp8", efficiency=rl.PURE_ROOFLINE, weight_classes=stated)
    return dep, dep.decode([256], [4096])


def test_nvfp4_experts_fp8_attention_by_hand(r1, b200) -> None:
    """docs/serving-features.md: DeepSeek-R1 on 8 x B200, dp=8,ep=8, fp8 KV, 256 x 4,096."""
    peaks = b200.chip.peak_flops_per_s
    assert (peaks[Precision.FP4], peaks[Precision.FP8], peaks[Precision.BF16]) == (FP4, FP8, BF16)
    assert b200.chip.hbm_bandwidth_bytes_per_s == HBM
    # the format table's bytes, block scales included
    nvfp4, fp8_block = (4 + 8 / 16) / 8, (8 + 32 / (128 * 128)) / 8
    assert (Precision.NVFP4.bytes_per_element, Precision.FP8_BLOCK.bytes_per_element) == (nvfp4, fp8_block)
    shipped_dep, shipped = _point(r1, b200, None)
    dep, mixed = _point(r1, b200, STATED)
    assert dep.precisions.compute is Precision.FP4  # the narrowest class's peak
    assert shipped_dep.precisions.compute is Precision.FP8
    assert dep.weight_formats["routed_experts"] == "nvfp4" and dep.weight_formats["attention"] == "fp8"
    assert dep.weight_formats["lm_head"] == "bf16" and dep.weight_formats["shared_experts"] == "fp8-block"
    # routed experts held: 32 of 256 a chip
    assert _f(mixed.memory.weights.routed_experts) == pytest.approx(32 * EXPERT_PARAMS * nvfp4, rel=1e-12)
    assert _f(shipped.memory.weights.routed_experts) == pytest.approx(
        32 * EXPERT_PARAMS * fp8_block, rel=1e-12
    )
    assert 32 * EXPERT_PARAMS * nvfp4 / 1e9 == pytest.approx(45.98, abs=0.005)
    assert 32 * EXPERT_PARAMS * fp8_block / 1e9 == pytest.approx(81.76, abs=0.005)
    # attention: whole on each chip (tp = 1), its block scales dropped
    assert MLA_PARAMS == 187_105_280
    attention_saving = LAYERS * MLA_PARAMS * (fp8_block - 1.0)
    saving = 32 * EXPERT_PARAMS * (fp8_block - nvfp4) + attention_saving
    assert _f(shipped.memory.weights.total) - _f(mixed.memory.weights.total) == pytest.approx(
        saving, rel=1e-9
    )
    # KV is the same: 32 sequences x 61 layers x 576 x 1 B x 4,096
    kv = 32 * LAYERS * 576 * 1.0 * 4096
    assert _f(mixed.memory.kv_bytes) == pytest.approx(kv, rel=1e-12) == _f(shipped.memory.kv_bytes)
    # the experts' GEMM: all but (248/256)^256 of the 32 experts touched, memory bound at 8 TB/s
    ops = {op.name: op for op in mixed.step.operators}
    before = {op.name: op for op in shipped.step.operators}
    expert = ops["routed_experts"]
    touched = 1 - ((E - K) / E) ** 256
    assert 1 - touched == pytest.approx(3.0e-4, abs=0.5e-4)
    assert _f(expert.weight_bytes) == pytest.approx(32 * touched * EXPERT_PARAMS * nvfp4, rel=1e-9)
    assert _f(expert.weight_bytes) / 1e9 == pytest.approx(45.96, abs=0.005)
    assert _f(expert.weight_bytes) / HBM * 1e3 == pytest.approx(5.75, abs=0.005)
    flops = 2 * 256 * K * EXPERT_PARAMS / 8
    assert _f(expert.flops) == pytest.approx(flops, rel=1e-12) and flops / 1e12 == pytest.approx(
        1.31, abs=0.005
    )
    assert expert.peak_flops_per_s == FP4 and expert.kernel.fmt == "nvfp4"
    assert flops / FP4 * 1e3 == pytest.approx(0.15, abs=0.005)
    expert_bytes = _f(expert.weight_bytes) + _f(expert.activation_bytes)
    assert _f(expert.time_s) == pytest.approx(max(flops / FP4, expert_bytes / HBM), rel=1e-9)
    assert _f(expert.time_s) == pytest.approx(expert_bytes / HBM, rel=1e-12)  # memory bound
    # each GEMM on its own weights' kernel and peak
    for name, fmt, peak in (
        ("attention_qkv", "fp8", FP8),
        ("attention_out", "fp8", FP8),
        ("shared_experts", "fp8_block", FP8),
        ("lm_head", "bfloat16", BF16),
    ):
        assert (ops[name].kernel.fmt, ops[name].peak_flops_per_s) == (fmt, peak)
    assert (
        before["routed_experts"].kernel.fmt == "fp8_block"
        and before["routed_experts"].peak_flops_per_s == FP8
    )
    # the step: every operator plus the all-to-all; only the experts and the attention GEMMs change
    assert _f(mixed.step.step_s) == pytest.approx(
        sum(_f(op.time_s) for op in mixed.step.operators) + _f(mixed.step.ep_comm_s), rel=1e-12
    )
    changed = ("routed_experts", "attention_qkv", "attention_out")
    for name in ops:
        if name not in changed:
            assert _f(ops[name].time_s) == _f(before[name].time_s), name
    assert _f(mixed.step.ep_comm_s) == _f(shipped.step.ep_comm_s)
    drop = sum(_f(before[n].time_s) - _f(ops[n].time_s) for n in changed)
    assert _f(shipped.step.step_s) - _f(mixed.step.step_s) == pytest.approx(drop, rel=1e-9)
    expert_drop = _f(before["routed_experts"].time_s) - _f(expert.time_s)
    assert expert_drop * 1e3 == pytest.approx(4.48, abs=0.005)
    assert drop - expert_drop < 1e-6  # the attention GEMMs lose only their block scales


def test_stated_classes_keep_the_rest_as_shipped_or_requantized(r1) -> None:
    """The classes not named stay as the checkpoint ships them (bf16 head, router, norms), or
    all in ``weights`` when it is given; a class equal to the base is not kept apart."""
    m = r1.with_weight_precisions(parse_weight_classes(STATED))
    assert m.native_weight_precision is Precision.FP8_BLOCK
    assert m.weight_precision("lm_head") is Precision.BF16 and m.weight_precision("router") is Precision.BF16
    assert m.weight_precision("routed_experts") is Precision.NVFP4
    fp8 = r1.with_weight_precisions(parse_weight_classes("experts=nvfp4"), Precision.FP8)
    wide = ("embedding", "lm_head", "router", "norms")  # a quantized base leaves them bf16
    assert fp8.weight_formats == {
        c: Precision.NVFP4 if c == "routed_experts" else Precision.BF16 if c in wide else Precision.FP8
        for c in fp8.weight_formats
    }
    same = r1.with_weight_precisions(parse_weight_classes({"embeddings": "fp8-block"}))
    assert "embedding" not in dict(same.weight_precision_by_class)
    assert same.stated_weight_classes == "embedding fp8-block, lm_head fp8-block; the rest fp8-block"
    # the deployment's weight bytes follow: the routed experts alone change
    a, b = rm.deployment(r1, "b200-hgx"), rm.deployment(r1, "b200-hgx", weight_classes="experts=nvfp4")
    routed = 256 * EXPERT_PARAMS
    assert a.weight_bytes - b.weight_bytes == pytest.approx(
        routed * (Precision.FP8_BLOCK.bytes_per_element - Precision.NVFP4.bytes_per_element), rel=1e-9
    )


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("expert=nvfp4", "a weight class: attention, mlp"),
        ("experts=nvfp3", "a format: fp32"),
        ("experts", "class=format pairs"),
        ("", "at least one class=format pair"),
        ("experts=fp8,routed_experts=nvfp4", "one format per class"),
    ],
)
def test_bad_weight_classes_are_one_line(text, hint) -> None:
    with pytest.raises(InputError) as err:
        parse_weight_classes(text)
    assert "\n" not in str(err.value) and "--weight-classes" in str(err.value) and hint in str(err.value)


# ----------------------------------------------------------------------------- config.json


def _deepseek_config() -> dict:
    return json.loads((Path(__file__).parent / "data" / "hf_configs" / "deepseek_v3.json").read_text())


def test_modelopt_mixed_precision_is_read_per_class() -> None:
    """A ModelOpt MIXED_PRECISION checkpoint (``quantized_layers``: module -> quant_algo) with
    an FP8 KV cache: NVFP4 experts, FP8 attention and shared experts, the rest (unlisted) in
    torch_dtype; the KV defaults to fp8 and compute to the FP4 peak."""
    layers = {
        **{
            f"model.layers.{i}.self_attn.{p}": {"quant_algo": "FP8"}
            for i in range(61)
            for p in ("q_a_proj", "o_proj")
        },
        **{
            f"model.layers.{i}.mlp.experts.{e}.down_proj": {"quant_algo": "NVFP4", "group_size": 16}
            for i in range(3, 61)
            for e in range(4)
        },
        **{f"model.layers.{i}.mlp.shared_experts.down_proj": {"quant_algo": "FP8"} for i in range(3, 61)},
    }
    quant = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": "FP8",
        "quantized_layers": layers,
    }
    spec = model_from_config({**_deepseek_config(), "quantization_config": quant}, model_id="r1-mixed")
    assert spec.native_weight_precision is Precision.NVFP4
    assert spec.native_kv_precision is Precision.FP8
    formats = spec.weight_formats
    assert (formats["routed_experts"], formats["attention"], formats["shared_experts"]) == (
        Precision.NVFP4,
        Precision.FP8,
        Precision.FP8,
    )
    assert {formats[c] for c in ("dense_mlp", "embedding", "lm_head", "router", "norms")} == {Precision.BF16}
    dep = rm.deployment(spec, "b200-hgx")
    assert (dep.precisions.kv, dep.precisions.compute) == (Precision.FP8, Precision.FP4)
    # the same bytes as stating it on the catalog model (whose dense MLP is fp8-block)
    stated = rm.model("deepseek-v3").with_weight_precisions(
        parse_weight_classes("experts=nvfp4,attention=fp8,shared_experts=fp8,mlp=bf16"), Precision.NVFP4
    )
    assert stated.weight_formats["dense_mlp"] is Precision.BF16
    # a bad per-module format is one line naming the module
    bad = {**quant, "quantized_layers": {"model.layers.3.mlp.experts.0.down_proj": {"quant_algo": "INT3"}}}
    with pytest.raises(ConfigError) as err:
        model_from_config({**_deepseek_config(), "quantization_config": bad}, model_id="x")
    assert "\n" not in str(err.value) and "experts.0.down_proj" in str(err.value)


def test_kv_cache_scheme_sets_the_default_kv() -> None:
    """compressed-tensors' ``kv_cache_scheme`` (8-bit float -> fp8); ``null`` says nothing."""
    base = _deepseek_config()
    ct = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                "targets": ["Linear"],
            }
        },
        "ignore": ["lm_head"],
        "kv_cache_scheme": {"num_bits": 8, "type": "float"},
    }
    spec = model_from_config({**base, "quantization_config": ct}, model_id="ct")
    assert spec.native_kv_precision is Precision.FP8
    assert rm.deployment(spec, "h200-hgx").precisions.kv is Precision.FP8
    none = model_from_config({**base, "quantization_config": {**ct, "kv_cache_scheme": None}}, model_id="ct")
    assert (
        none.native_kv_precision is None and rm.deployment(none, "h200-hgx").precisions.kv is Precision.BF16
    )
    assert rm.model("deepseek-v3").native_kv_precision is None  # the catalog's defaults unchanged


# ----------------------------------------------------------------------------- scenarios


def test_a_scenario_states_weights_per_class(tmp_path) -> None:
    """A measurements row's ``weight_classes`` reaches the prediction: the same row with NVFP4
    experts predicts a faster decode step than as shipped (the experts dominate it)."""
    from rackmath.analyses.reality.validation import PURE_ROOFLINE, predict
    from rackmath.catalog.measurements import load_measurements

    entry = {
        "id": 1,
        "source": "test",
        "source_key": "test",
        "url": "https://example.org",
        "quote": "-",
        "confidence": "secondhand",
    }
    row = {
        "phase": "decode",
        "metric": "decode_step_s",
        "value": 0.01,
        "unit": "s",
        "model": "deepseek-v3",
        "system": "b200-hgx",
        "chips": 8,
        "plan": "dp=8,ep=8",
        "kv": "fp8",
        "batch": 256,
        "input_tokens": 3072,
        "output_tokens": 2048,
    }
    texts = []
    for extra in ({}, {"weight_classes": {"experts": "nvfp4", "attention": "fp8"}}):
        path = tmp_path / f"m{len(texts)}.yaml"
        path.write_text(yaml.safe_dump({"measurements": [{**entry, "scenario": {**row, **extra}}]}))
        texts.append(load_measurements(path))
    shipped, mixed = (m.scenarios[0] for m in texts)
    assert mixed.weight_classes == (("attention", Precision.FP8), ("routed_experts", Precision.NVFP4))
    # on the pure roofline the experts' bytes dominate the step (docs/serving-features.md's
    # 13.63 -> 9.15 ms); the kernel-grounded default keeps a smaller gain (attention and the
    # small-batch GEMMs run further below their peaks)
    a, b = predict(shipped, PURE_ROOFLINE).value, predict(mixed, PURE_ROOFLINE).value
    assert b < a * 0.8
    assert predict(mixed).value < predict(shipped).value
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {"measurements": [{**entry, "scenario": {**row, "weight_classes": {"expert": "nvfp4"}}}]}
        )
    )
    with pytest.raises(InputError) as err:
        load_measurements(bad)
    assert "row 1 weight_classes" in str(err.value) and "\n" not in str(err.value)


def test_compressed_tensors_groups_per_class() -> None:
    """Several compressed-tensors groups, each with its targets: NVFP4 routed experts, FP8
    attention and shared experts; the dense MLP, which no group targets, and the ignored head
    stay in torch_dtype. One group still covers every class (Kimi K2.5's int4)."""
    groups = {
        "group_0": {
            "targets": ["re:.*mlp\\.experts.*"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 16},
        },
        "group_1": {
            "targets": ["re:.*self_attn.*", "re:.*shared_experts.*"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        },
    }
    quant = {"quant_method": "compressed-tensors", "config_groups": groups, "ignore": ["lm_head"]}
    spec = model_from_config({**_deepseek_config(), "quantization_config": quant}, model_id="ct-mixed")
    f = spec.weight_formats
    assert spec.native_weight_precision is Precision.NVFP4
    assert (f["routed_experts"], f["attention"], f["shared_experts"]) == (
        Precision.NVFP4,
        Precision.FP8,
        Precision.FP8,
    )
    assert (f["dense_mlp"], f["lm_head"], f["embedding"]) == (Precision.BF16,) * 3
    kimi = rm.model("kimi-k25").weight_formats
    assert kimi["routed_experts"] is Precision.INT4 and kimi["attention"] is Precision.BF16


# ----------------------------------------------------------------------------- the CLI


def test_the_cli_states_weights_per_class(cli) -> None:
    """explain, plan and simulate take --weight-classes; the JSON carries the formats."""
    stated = ("--weight-classes", "experts=nvfp4,attention=fp8")
    code, out, _ = cli(
        "explain",
        "deepseek-v3",
        "--on",
        "b200-hgx",
        *stated,
        "--batch",
        "64",
        "--efficiency",
        "pure",
        "--json",
    )
    assert code == 0
    p = json.loads(out)["precision"]
    assert p["compute"] == "fp4" and p["weight_classes"]["routed_experts"] == "nvfp4"
    code, out, _ = cli(
        "plan", "deepseek-v3", "--on", "b200-hgx", *stated, "--precision", "native", "--aggregated-only",
        "--max-chips", "8", "--efficiency", "pure", "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["best"]["precision"]["weights"] == "fp8-block"
    code, out, _ = cli(
        "simulate", "deepseek-v3", "--on", "b200-hgx", "--plan", "dp=8,ep=8", *stated, "--kv", "fp8",
        "--requests", "50", "--rate", "1/s", "--output", "50", "--input", "500",
        "--efficiency", "pure", "--json",
    )  # fmt: skip
    assert code == 0
    d = json.loads(out)["deployment"]["precision"]
    assert d["kv"] == "fp8" and d["weight_classes"]["attention"] == "fp8"
    code, _, err = cli("simulate", "deepseek-v3", "--on", "b200-hgx", "--weight-classes", "experts=int3")
    assert code == 1 and "--weight-classes" in err and err.count("\n") <= 2


def test_a_quantized_format_converts_the_blocks_not_the_head() -> None:
    """``--weights fp8`` on Llama-3.1-8B (h 4,096, 32 layers, 32 heads x 128, 8 KV heads, MLP
    14,336, vocab 128,256, untied) as ModelOpt, TensorRT-LLM and vLLM quantize it: the blocks'
    linear layers at 1 byte, the embedding and the LM head at 2 (``128,256 x 4,096 x 2 =
    1,050,673,152`` B each), the norms at 2; bf16 converts every class; a stated class wins."""
    from rackmath.catalog.loader import model
    from rackmath.core.architecture import weight_bytes_by_class

    m = model("llama-3.1-8b")
    h, layers = 4096, 32
    attention = layers * (h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h)
    mlp = layers * 3 * h * 14336
    fp8 = weight_bytes_by_class(m, Precision.FP8)
    assert fp8["embedding"] == fp8["lm_head"] == 128256 * h * 2
    assert fp8["attention"] == attention * 1.0 and fp8["dense_mlp"] == mlp * 1.0
    assert fp8["norms"] == (2 * layers + 1) * h * 2
    fp16 = weight_bytes_by_class(m, Precision.FP16)
    assert fp16["lm_head"] == 128256 * h * 2 and fp16["attention"] == attention * 2
    gpt_fast = m.with_weight_precisions(parse_weight_classes("lm_head=int8"), Precision.INT8)
    assert gpt_fast.weight_precision("lm_head") is Precision.INT8
    assert gpt_fast.weight_precision("embedding") is Precision.BF16
    # a checkpoint shipped narrower than 16 bits (DeepSeek-V3's fp8-block) keeps bf16 there
    assert model("deepseek-v3").weight_precision("router", Precision.NVFP4) is Precision.BF16
