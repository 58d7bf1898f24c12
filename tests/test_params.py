"""Parameter counts: every catalog model against its owner's published figures, and the
per-component formulas recomputed by hand for one dense and one MLA/MoE model."""

from __future__ import annotations

import pytest

from rackmath.catalog import loader as catalog
from rackmath.core.architecture import attention_params, param_counts
from rackmath.specs.model import ActiveCountRule

TOLERANCE = 0.02  # the acceptance bound

REQUIRED = [
    "deepseek-v3",
    "kimi-k2",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-2-7b",
    "llama-2-70b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "gemma-3-27b",
    "glm-4.5",
    "palm-540b",
]


def test_catalog_has_every_required_model() -> None:
    assert set(REQUIRED) <= set(catalog.models())
    assert catalog.model("deepseek-r1").id == "deepseek-v3"


@pytest.mark.parametrize("model_id", sorted(catalog.models()))
def test_total_matches_published_within_2_percent(model_id: str) -> None:
    model = catalog.model(model_id)
    assert model.published is not None, "every catalog model carries its published counts"
    computed = param_counts(model).total
    rel = max(TOLERANCE, model.published.tolerance_frac)
    assert computed == pytest.approx(model.published.params_total, rel=rel)


@pytest.mark.parametrize("model_id", sorted(catalog.models()))
def test_active_matches_published_within_2_percent(model_id: str) -> None:
    model = catalog.model(model_id)
    assert model.published is not None
    computed = param_counts(model).active_under(model.published.active_counts)
    rel = max(TOLERANCE, model.published.tolerance_frac)
    assert computed == pytest.approx(model.published.params_active, rel=rel)


def test_llama_3_1_8b_components_by_hand() -> None:
    # hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, SwiGLU 14336, vocab 128256, untied
    p = param_counts(catalog.model("llama-3.1-8b"))
    h, layers, kv_width, ffn, vocab = 4096, 32, 8 * 128, 14336, 128256
    assert p.embedding == vocab * h == p.lm_head
    assert p.attention == layers * (h * h + 2 * h * kv_width + h * h)
    assert p.dense_mlp == layers * 3 * h * ffn
    assert p.norms == (2 * layers + 1) * h
    assert p.total == 8_030_261_248  # the safetensors count on the Hub
    assert p.routed_experts == p.router == 0


def test_deepseek_v3_components_by_hand() -> None:
    m = catalog.model("deepseek-v3")
    p = param_counts(m)
    h, heads = 7168, 128
    q = h * 1536 + 1536 + 1536 * heads * (128 + 64)
    kv = h * (512 + 64) + 512 + 512 * heads * (128 + 128)
    out = heads * 128 * h
    assert attention_params(m.attention, h) == q + kv + out
    expert = 3 * h * 2048
    assert p.per_expert == expert
    assert p.routed_experts == 58 * 256 * expert  # 3 dense layers, then 58 MoE layers
    assert p.shared_experts == 58 * expert
    assert p.dense_mlp == 3 * 3 * h * 18432
    assert p.routed_active == 58 * 8 * expert
    # DeepSeek-V3 README: 671B total, 37B activated
    assert p.total / 1e9 == pytest.approx(671, rel=0.005)
    assert p.active / 1e9 == pytest.approx(37, rel=0.02)


def test_gpt_oss_counts_use_the_model_cards_rule() -> None:
    m = catalog.model("gpt-oss-120b")
    p = param_counts(m)
    assert m.published is not None and m.published.active_counts is ActiveCountRule.HEAD_ONLY
    # the rule differs from the default by exactly the input embedding table
    assert p.active - p.active_under(ActiveCountRule.HEAD_ONLY) == p.embedding


def test_tied_embeddings_are_counted_once() -> None:
    gemma = param_counts(catalog.model("gemma-3-27b"))
    assert gemma.lm_head == 0
    assert gemma.embedding == 262208 * 5376


def test_gpt_oss_weight_bytes_by_class_follow_modules_to_not_convert() -> None:
    import rackmath as rm
    from rackmath.core import architecture as arch
    from rackmath.specs.precision import Precision

    # gpt-oss-120b config: h 2880, 36 layers, 64 heads x 64, 8 KV heads, qkv and output bias,
    # sinks, 128 experts of 2880 (gated, biased), top-4, router with bias, vocab 201,088, untied.
    # quantization_config: mxfp4 (4 + 8/32 bits = 0.53125 B), except modules_to_not_convert =
    # self_attn, mlp.router, embed_tokens, lm_head, which stay bf16 (2 B); norms bf16 too.
    h, layers, vocab = 2880, 36, 201_088
    q, kv = 64 * 64, 8 * 64
    attention = layers * (h * q + 2 * h * kv + q * h + (q + 2 * kv) + h + 64)
    router = layers * (h * 128 + 128)
    expert = 3 * h * 2880 + (2 * 2880 + h)
    experts = layers * 128 * expert
    embedding = vocab * h
    norms = layers * 2 * h + h
    mx, bf = 4.25 / 8, 2.0
    expected = {
        "embedding": embedding * bf,
        "lm_head": embedding * bf,
        "attention": attention * bf,
        "dense_mlp": 0.0,
        "routed_experts": experts * mx,
        "shared_experts": 0.0,
        "router": router * bf,
        "norms": norms * bf,
    }
    assert expected["routed_experts"] == 60_935_224_320  # the core docstring's figure
    assert expected["embedding"] == 1_158_266_880
    m = catalog.model("gpt-oss-120b")
    got = arch.weight_bytes_by_class(m)
    assert got == pytest.approx(expected, rel=1e-12)
    assert arch.weight_bytes_total(m) == pytest.approx(sum(expected.values()), rel=1e-12)
    # a uniform requantization ignores the per-class exceptions
    assert arch.weight_bytes_total(m, Precision.BF16) == pytest.approx(2.0 * param_counts(m).total, rel=1e-12)
    # batch-1 decode reads the LM head, attention, router, norms and k = 4 experts per layer
    # (the input embedding is a lookup): 3,096,849,024 + 4 x 36 x expert x 0.53125 B
    always = (embedding + attention + router + norms) * bf
    batch1 = always + 4 * layers * expert * mx
    assert batch1 == 5_001_074_784
    d = rm.deployment("gpt-oss-120b", "h100-hgx")
    assert d.weight_bytes == pytest.approx(sum(expected.values()), rel=1e-12)
    assert float(d.weight_bytes_read(1)) == pytest.approx(batch1, rel=1e-12)
    # all at mxfp4 (the old count) was 2,726,826,282 B: 45% low
    uniform_mx = (param_counts(m).always_read + 4 * layers * expert) * mx
    assert uniform_mx / batch1 == pytest.approx(0.545, abs=0.001)
