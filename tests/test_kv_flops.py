"""KV-cache bytes and FLOPs per token, recomputed by hand for each attention kind."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rackmath.catalog import loader as catalog
from rackmath.core import architecture as arch
from rackmath.specs.model import AttentionKind, LayerSpec, MlpKind

BF16 = 2.0


def test_gqa_llama_3_1_70b() -> None:
    m = catalog.model("llama-3.1-70b")
    assert m.attention.kind is AttentionKind.GQA
    # 2 (K and V) x 8 KV heads x 128 dims x 80 layers x 2 bytes = 327,680 bytes
    assert arch.kv_bytes_per_token(m, BF16) == 2 * 8 * 128 * 80 * 2 == 327_680


def test_mha_llama_2_7b() -> None:
    m = catalog.model("llama-2-7b")
    assert m.attention.kind is AttentionKind.MHA
    assert arch.kv_bytes_per_token(m, BF16) == 2 * 32 * 128 * 32 * 2


def test_mqa_palm() -> None:
    m = catalog.model("palm-540b")
    assert m.attention.kind is AttentionKind.MQA
    assert arch.kv_bytes_per_token(m, BF16) == 2 * 1 * 256 * 118 * 2


def test_mla_deepseek_caches_latent_plus_rope_key() -> None:
    m = catalog.model("deepseek-v3")
    assert m.attention.kind is AttentionKind.MLA
    assert arch.kv_elements_per_token_per_layer(m.attention) == 512 + 64
    assert arch.kv_bytes_per_token(m, BF16) == 576 * 61 * 2  # 70,272 bytes


def test_sliding_window_layers_stop_at_their_window() -> None:
    m = catalog.model("gpt-oss-120b")  # 18 layers with a 128-token window, 18 full
    per_layer = 2 * 8 * 64 * BF16
    for context in (64, 128, 4096, 131072):
        expected = per_layer * (18 * min(context, 128) + 18 * context)
        assert float(arch.kv_bytes_per_sequence(m, context, BF16)) == pytest.approx(expected)


def test_gemma_mixed_layers() -> None:
    m = catalog.model("gemma-3-27b")
    windows = [layer.window for layer in m.layers]
    assert windows.count(None) == 10 and windows.count(1024) == 52  # 5 local : 1 global
    per_layer = 2 * 16 * 128 * BF16
    context = 32768
    expected = per_layer * (10 * context + 52 * 1024)
    assert float(arch.kv_bytes_per_sequence(m, context, BF16)) == pytest.approx(expected)


def test_decode_flops_dense_by_hand() -> None:
    m = catalog.model("llama-3.1-8b")
    p = arch.param_counts(m)
    context = 1000
    matmul = 2 * (p.total - p.embedding - p.norms)  # lookup and norm scales are not matmuls
    attention = 2 * 32 * (128 + 128) * context * 32
    assert float(arch.decode_flops_per_token(m, context)) == pytest.approx(matmul + attention)


def test_mla_decode_attention_uses_the_absorbed_form() -> None:
    m = catalog.model("deepseek-v3")
    slope = float(arch.decode_flops_per_token(m, 2000) - arch.decode_flops_per_token(m, 1000)) / 1000
    assert slope == pytest.approx(61 * 2 * 128 * (512 + 576))


def test_prefill_is_causal() -> None:
    m = catalog.model("llama-3.1-8b")
    n = 4096
    p = arch.param_counts(m)
    pairs = n * (n + 1) / 2
    expected = 2 * p.matmul_active * n + 2 * 32 * 256 * pairs * 32
    assert float(arch.prefill_flops_per_sequence(m, n)) == pytest.approx(expected)


def test_windowed_causal_pairs() -> None:
    m = catalog.model("llama-3.1-8b")
    one_sliding = dataclasses.replace(m, layers=(LayerSpec(window=100, mlp=MlpKind.DENSE),))
    n = 1000
    brute = sum(min(i, 100) for i in range(1, n + 1))
    assert float(arch.causal_visible_pairs(one_sliding, n)) == brute


def test_training_flops_are_about_six_per_parameter() -> None:
    m = catalog.model("llama-3.1-70b")
    per_token = float(arch.training_flops_per_token(m, 2048))
    n = arch.param_counts(m).matmul_active
    assert 6 * n < per_token < 6.3 * n  # attention adds a few percent at 2K context


def test_kv_grows_linearly_for_full_attention() -> None:
    m = catalog.model("llama-3.1-8b")
    c = np.array([1.0, 10.0, 1000.0, 100000.0])
    kv = arch.kv_bytes_per_sequence(m, c, BF16)
    assert np.allclose(kv / c, arch.kv_bytes_per_token(m, BF16))
