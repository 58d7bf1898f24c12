"""Parameter counts: every catalog model against its owner's published figures, and the
per-component formulas recomputed by hand for one dense and one MLA/MoE model."""

from __future__ import annotations

import pytest

from rackmath import catalog
from rackmath.core.architecture import attention_params, param_counts
from rackmath.specs import ActiveCountRule

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
    assert computed == pytest.approx(model.published.params_total, rel=TOLERANCE)


@pytest.mark.parametrize("model_id", sorted(catalog.models()))
def test_active_matches_published_within_2_percent(model_id: str) -> None:
    model = catalog.model(model_id)
    assert model.published is not None
    computed = param_counts(model).active_under(model.published.active_counts)
    assert computed == pytest.approx(model.published.params_active, rel=TOLERANCE)


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
