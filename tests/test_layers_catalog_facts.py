"""The catalog facts the faces show (rackmath.analyses.catalog_facts), checked by hand, and
the `models` / `hardware` commands printing exactly them (they no longer call the core)."""

from __future__ import annotations

import json

import pytest

from rackmath.analyses.catalog_facts import chip_facts, model_facts
from rackmath.catalog import loader as catalog
from rackmath.specs.precision import Precision

# Llama-3.1-70B config.json: 80 layers, 8 KV heads of dimension 128 (GQA).
LLAMA_70B_LAYERS, LLAMA_70B_KV_HEADS, LLAMA_70B_HEAD_DIM = 80, 8, 128
# DeepSeek-V3 config.json: MLA caches kv_lora_rank 512 + qk_rope_head_dim 64 per layer, 61 layers.
DSV3_LAYERS, DSV3_KV_LORA_RANK, DSV3_ROPE_DIM = 61, 512, 64
# NVIDIA H100 SXM datasheet: 989.4 TFLOP/s dense bf16, 3.35 TB/s HBM3.
H100_BF16_FLOPS_PER_S, H100_HBM_BYTES_PER_S = 989.4e12, 3.35e12


def test_gqa_kv_bytes_per_token_by_hand() -> None:
    f = model_facts(catalog.model("llama-3.1-70b"), Precision.BF16.bytes_per_element)
    values = 2 * LLAMA_70B_KV_HEADS * LLAMA_70B_HEAD_DIM  # K and V
    assert f.kv_values_per_token_per_layer == values == 2_048
    assert f.kv_bytes_per_token == values * LLAMA_70B_LAYERS * 2 == 327_680
    assert f.params_active == f.params_total  # dense: every weight is read for every token
    assert f.params_total == pytest.approx(70.6e9, rel=0.005)  # Meta's model card: 70.6B


def test_mla_kv_bytes_and_moe_active_params_by_hand() -> None:
    m = catalog.model("deepseek-v3")
    bf16 = model_facts(m, Precision.BF16.bytes_per_element)
    fp8 = model_facts(m, Precision.FP8.bytes_per_element)
    assert bf16.kv_values_per_token_per_layer == DSV3_KV_LORA_RANK + DSV3_ROPE_DIM == 576
    assert bf16.kv_bytes_per_token == 576 * DSV3_LAYERS * 2 == 70_272
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    # DeepSeek-V3 technical report: 671B total, 37B activated per token.
    assert bf16.params_total == pytest.approx(671e9, rel=0.005)
    assert bf16.params_active == pytest.approx(37e9, rel=0.03)


def test_h100_ridge_point_and_drain_time_by_hand() -> None:
    chip = catalog.chip("h100-sxm")
    f = chip_facts(chip)
    assert f.flop_per_byte_bf16 == pytest.approx(H100_BF16_FLOPS_PER_S / H100_HBM_BYTES_PER_S)  # 295
    assert f.flop_per_byte_bf16 == pytest.approx(295.3, abs=0.1)
    assert f.hbm_drain_s == pytest.approx(chip.hbm_capacity_bytes / H100_HBM_BYTES_PER_S)
    assert 0.023 < f.hbm_drain_s < 0.026  # 80 GB (NVML: 85.5e9 B) read at 3.35 TB/s


def test_a_chip_without_a_bf16_peak_has_no_ridge_point() -> None:
    chip = catalog.chip("h100-sxm")
    peaks = {p: v for p, v in chip.peak_flops_per_s.items() if p is not Precision.BF16}
    f = chip_facts(chip.model_copy(update={"peak_flops_per_s": peaks}))
    assert f.flop_per_byte_bf16 is None
    assert f.hbm_drain_s == chip_facts(chip).hbm_drain_s


def test_the_models_command_prints_the_facts(cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli("models", "--json")
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out)}
    for model_id in ("llama-3.1-70b", "deepseek-v3"):
        f = model_facts(catalog.model(model_id))
        assert rows[model_id]["params_total"] == f.params_total
        assert rows[model_id]["params_active"] == f.params_active
        assert rows[model_id]["kv_bytes_per_token_bf16"] == f.kv_bytes_per_token
