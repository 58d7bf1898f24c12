"""Architectures 2026 deployments run: DSA (DeepSeek-V3.2), chunked-local attention with
interleaved MoE (Llama 4), hybrid linear attention (Qwen3-Next), MPT and per-layer NAS blocks
(Nemotron). Parameter counts against published figures, KV held and read recomputed by hand
from the config values, the config.json round trip, and one end-to-end explain per model."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.catalog import loader as catalog
from rackmath.core import architecture as arch
from rackmath.core import attention as attn
from rackmath.core import loads
from rackmath.core import operator_model as opm
from rackmath.core import operators as ops
from rackmath.core.chip_rates import ChipRates
from rackmath.errors import ConfigError
from rackmath.specs.hf_config import load_config_file, model_from_config
from rackmath.specs.model import AttentionKind, MlpKind
from rackmath.specs.precision import Precision

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"
BF16 = 2.0

NEW_MODELS = {
    "deepseek-v3.2": "deepseek_v32.json",
    "llama-4-scout": "llama4_scout.json",
    "llama-4-maverick": "llama4_maverick.json",
    "qwen3-next-80b-a3b": "qwen3_next.json",
    "mpt-7b": "mpt.json",
    "llama-3.3-nemotron-super-49b": "nemotron_nas_super.json",
    "llama-3.1-nemotron-ultra-253b": "nemotron_nas_ultra.json",
}


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(("model_id", "fixture"), sorted(NEW_MODELS.items()))
def test_config_json_fixture_reads_to_the_catalog_entry(model_id: str, fixture: str) -> None:
    from_file = load_config_file(HF_CONFIGS / fixture)
    entry = catalog.model(model_id)
    for field in ("family", "hidden_size", "vocab_size", "tie_word_embeddings", "attention", "layers"):
        assert getattr(from_file, field) == getattr(entry, field), field
    assert from_file.dense_mlp == entry.dense_mlp and from_file.moe == entry.moe
    assert arch.param_counts(from_file) == arch.param_counts(entry)


# ----------------------------------------------------------------------------- parameter counts


def test_mpt_7b_by_hand() -> None:
    # d 4096, 32 layers, MHA, 4x GELU MLP, no biases (LayerNorm scales only), tied 50,432 vocab
    h, layers, vocab = 4096, 32, 50432
    per_layer = 4 * h * h + 2 * h * 4 * h + 2 * h
    expected = vocab * h + layers * per_layer + h
    p = arch.param_counts(catalog.model("mpt-7b"))
    assert p.total == expected == 6_649_286_656
    assert p.total == pytest.approx(6.7e9, rel=0.01)  # MosaicML: 6.7B


def test_qwen3_next_matches_the_exact_published_count() -> None:
    # 79,674,391,296 total and 3,874,929,408 active: printed (from the checkpoint) in public
    # code (code-index id 70181782850); Qwen's card rounds to 80B / 3B
    p = arch.param_counts(catalog.model("qwen3-next-80b-a3b"))
    assert p.total == 79_674_391_296
    assert p.active == 3_874_929_408
    h = 2048
    gdn = h * (2 * 2048 + 2 * 4096) + h * 64 + (2 * 2048 + 4096) * 4 + 2 * 32 + 128 + 4096 * h
    gated_attention = h * (4096 + 4096) + 2 * h * 512 + 4096 * h + 2 * 256
    assert p.attention == 36 * gdn + 12 * gated_attention


def test_llama_4_counts_by_hand() -> None:
    h, vocab, expert = 5120, 202048, 3 * 5120 * 8192
    attention = 48 * (2 * h * 5120 + 2 * h * 1024)
    embeddings = 2 * vocab * h
    norms = 48 * 2 * h + h
    scout = arch.param_counts(catalog.model("llama-4-scout"))
    assert scout.total == embeddings + attention + norms + 48 * (16 * expert + expert + h * 16)
    assert scout.total / 1e9 == pytest.approx(109, rel=0.02)  # Meta: 109B incl. vision encoder
    assert scout.active / 1e9 == pytest.approx(17, rel=0.02)
    maverick = arch.param_counts(catalog.model("llama-4-maverick"))
    dense = 3 * h * 16384
    moe = 24 * (128 * expert + expert + h * 128)
    assert maverick.total == embeddings + attention + norms + moe + 24 * dense
    assert maverick.total / 1e9 == pytest.approx(400, rel=0.005)
    assert maverick.active / 1e9 == pytest.approx(17, rel=0.02)


def test_nemotron_super_counts_layer_by_layer_from_the_raw_config() -> None:
    config = json.loads((HF_CONFIGS / "nemotron_nas_super.json").read_text())
    h, heads, head_dim = 8192, 64, 128
    total = 2 * 128256 * h + h
    for block in config["block_configs"]:
        a, f = block["attention"], block["ffn"]
        if not a["no_op"]:
            kv = heads // a["n_heads_in_group"] * head_dim
            total += 2 * h * heads * head_dim + 2 * h * kv + h
        if not f["no_op"]:
            width = int(2 * f["ffn_mult"] * h / 3)
            width = 256 * math.ceil(width / 256)
            total += 3 * h * width + h
    m = catalog.model("llama-3.3-nemotron-super-49b")
    assert arch.param_counts(m).total == total
    assert total / 1e9 == pytest.approx(49, rel=0.02)  # NVIDIA: 49B
    assert len(arch.layer_groups(m)) == 8  # 80 layers in 8 distinct shapes
    assert sum(g.count for g in arch.layer_groups(m)) == 80


def test_nemotron_ultra_has_layers_without_attention_or_ffn() -> None:
    m = catalog.model("llama-3.1-nemotron-ultra-253b")
    kinds = [m.layer_attention(x).kind for x in m.layers]
    assert kinds.count(AttentionKind.NONE) == 98
    assert sum(x.mlp is MlpKind.NONE for x in m.layers) == 81
    assert arch.param_counts(m).total / 1e9 == pytest.approx(253, rel=0.005)
    # KV only in the 64 attention layers: 2 x 8 x 128 values each
    assert arch.kv_bytes_per_token(m, BF16) == 64 * 2 * 8 * 128 * BF16


def test_deepseek_v32_is_v3_plus_the_indexer() -> None:
    v3, v32 = catalog.model("deepseek-v3"), catalog.model("deepseek-v3.2")
    assert v32.attention.kind is AttentionKind.DSA and v32.attention.index_top_k == 2048
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert arch.param_counts(v32).total - arch.param_counts(v3).total == 61 * indexer == 851_524_864
    assert arch.param_counts(v32).total / 1e9 == pytest.approx(671, rel=0.005)


# ----------------------------------------------------------------------------- KV held and read


@pytest.mark.parametrize("context", [32_768, 131_072])
def test_llama_4_chunked_layers_hold_one_chunk(context: int) -> None:
    m = catalog.model("llama-4-maverick")
    per_token_layer = 2 * 8 * 128 * BF16  # 4,096 B
    held = per_token_layer * (12 * context + 36 * min(context, 8192))
    assert float(arch.kv_bytes_per_sequence(m, context, BF16)) == held
    assert float(arch.kv_bytes_read_per_sequence(m, context, BF16)) == held
    # 32K: 2,818,572,288 B (a full-attention model would hold 6,442,450,944)
    assert {32_768: 2_818_572_288, 131_072: 7_650_410_496}[context] == held


def test_llama_4_chunked_prefill_pairs_restart_every_chunk() -> None:
    m = catalog.model("llama-4-scout")
    n, c = 32_768, 8192
    pairs = 12 * n * (n + 1) / 2 + 36 * (n // c) * c * (c + 1) / 2
    assert float(arch.causal_visible_pairs(m, n)) == pairs
    brute = sum(min(i, (i - 1) % c + 1) for i in range(1, 20_001))  # 20,000 tokens, brute force
    a = m.layer_attention(m.layers[0])
    assert a.kind is AttentionKind.CHUNKED
    assert float(attn.prefill_pairs(a, None, 20_000)) == brute


def test_qwen3_next_state_is_independent_of_context() -> None:
    m = catalog.model("qwen3-next-80b-a3b")
    state = 36 * (32 * 128 * 128 + 3 * (2 * 2048 + 4096)) * BF16  # 39,518,208 B
    full_per_token = 12 * 2 * 2 * 256 * BF16  # 24,576 B
    for c in (1_000, 100_000):
        assert float(arch.kv_bytes_per_sequence(m, c, BF16)) == state + full_per_token * c
        assert float(arch.kv_bytes_read_per_sequence(m, c, BF16)) == state + full_per_token * c
    assert state == 39_518_208
    # one decode step writes one token's entries and rewrites every state
    load = loads.decode_load(m, 1, 50_000, BF16)
    assert float(load.decode_kv_write_bytes) == state + full_per_token
    # state-update FLOPs per token per linear layer: 2 x 3 x 32 x 128 x 128
    flops = arch.decode_attention_flops_per_token(m, [1_000, 2_000])
    per_token_full = 12 * 2 * 16 * (256 + 256)
    assert np.diff(flops)[0] == per_token_full * 1_000
    assert flops[0] == 36 * 6 * 32 * 128 * 128 + per_token_full * 1_000


def test_dsa_reads_top_k_at_100k_but_holds_everything() -> None:
    m = catalog.model("deepseek-v3.2")
    latent = (512 + 64) * BF16  # 1,152 B per token and layer
    indexer = 128 * 1.0  # FP8 key
    c = 100_000
    assert float(arch.kv_bytes_per_sequence(m, c, BF16)) == 61 * (latent + indexer) * c
    assert float(arch.kv_bytes_read_per_sequence(m, c, BF16)) == 61 * (latent * 2048 + indexer * c)
    # at or below top-k it reads every latent and no indexer key (every token is selected: the
    # engines skip the scoring); one token more and the indexer reads every held key
    assert float(arch.kv_bytes_read_per_sequence(m, 2000, BF16)) == 61 * latent * 2000
    assert float(arch.kv_bytes_read_per_sequence(m, 2049, BF16)) == 61 * (latent * 2048 + indexer * 2049)
    read_100k = float(arch.kv_bytes_read_per_sequence(m, c, BF16))
    dense_100k = float(arch.kv_bytes_read_per_sequence(catalog.model("deepseek-v3"), c, BF16))
    assert read_100k / dense_100k == pytest.approx((1152 * 2048 + 128 * c) / (1152 * c))  # ~0.13
    # decode attention: absorbed MLA over top-k, indexer over every held key
    expected = 61 * (2 * 128 * (1024 + 64) * 2048 + 2 * 64 * 128 * c)
    assert float(arch.decode_attention_flops_per_token(m, c)) == expected
    # at or below top-k: the sparse core over every held token, no indexer scoring
    assert float(arch.decode_attention_flops_per_token(m, 2048)) == 61 * 2 * 128 * (1024 + 64) * 2048


def test_dsa_prefill_flops_bound_each_query_at_top_k() -> None:
    m = catalog.model("deepseek-v3.2")
    n, k = 10_000, 2048
    pairs = k * (k + 1) / 2 + (n - k) * k
    # the sparse core runs absorbed in prefill too (MQA mode: 576-wide scores, 512-wide values)
    expected = 61 * (2 * 128 * (1024 + 64) * pairs + 2 * 64 * 128 * n * (n + 1) / 2)
    assert float(arch.prefill_attention_flops_per_sequence(m, n)) == pytest.approx(expected, rel=1e-12)
    assert float(loads.prefill_attention_flops_per_sequence(m, n)) == pytest.approx(expected, rel=1e-12)
    # a prompt of top-k tokens or fewer: no indexer (the short-sequence fast path)
    short = 61 * 2 * 128 * (1024 + 64) * k * (k + 1) / 2
    assert float(arch.prefill_attention_flops_per_sequence(m, k)) == pytest.approx(short, rel=1e-12)


def test_the_operator_models_attention_reads_what_the_registry_says() -> None:
    rates = ChipRates.uniform(1e15, 1e12)
    for model_id in ("deepseek-v3.2", "llama-4-maverick", "qwen3-next-80b-a3b"):
        m = catalog.model(model_id)
        load = loads.decode_load(m, 8.0, 100_000.0, BF16)
        table = ops.pass_operators(opm.operator_model(m, Precision.BF16), load, rates, tp=1, pp=1, dp=1, ep=1)
        attention = next(op for op in table if op.name == "attention")
        assert float(attention.kv_read_bytes) == 8 * float(arch.kv_bytes_read_per_sequence(m, 100_000, BF16))
        assert float(attention.flops) == 8 * float(arch.decode_attention_flops_per_token(m, 100_000))


def test_output_projections_follow_each_layer_kind() -> None:
    m = catalog.model("qwen3-next-80b-a3b")
    assert arch.attention_out_params(m) == 36 * 4096 * 2048 + 12 * 4096 * 2048
    nas = catalog.model("llama-3.3-nemotron-super-49b")
    assert arch.attention_out_params(nas) == 49 * 8192 * 8192  # 31 no-op layers have none


@given(st.floats(min_value=1.0, max_value=2e6), st.sampled_from(sorted(NEW_MODELS)))
def test_a_step_never_reads_more_cache_than_it_holds(context: float, model_id: str) -> None:
    m = catalog.model(model_id)
    held = float(arch.kv_bytes_per_sequence(m, context, BF16))
    read = float(arch.kv_bytes_read_per_sequence(m, context, BF16))
    assert 0 < read <= held * (1 + 1e-12)
    assert np.isfinite(float(arch.decode_flops_per_token(m, context)))


# ----------------------------------------------------------------------------- bad configs


def test_bad_per_layer_configs_name_the_field() -> None:
    nas = json.loads((HF_CONFIGS / "nemotron_nas_super.json").read_text())
    with pytest.raises(ConfigError, match="block_configs"):
        model_from_config({**nas, "block_configs": nas["block_configs"][:3]}, model_id="x")
    broken = [dict(b) for b in nas["block_configs"]]
    broken[0] = {"attention": {**broken[0]["attention"], "n_heads_in_group": 7}, "ffn": broken[0]["ffn"]}
    with pytest.raises(ConfigError, match="n_heads_in_group"):
        model_from_config({**nas, "block_configs": broken}, model_id="x")
    qn = json.loads((HF_CONFIGS / "qwen3_next.json").read_text())
    with pytest.raises(ConfigError, match="layer_types"):
        model_from_config({**qn, "layer_types": ["mamba"] * 48}, model_id="x")
    mpt = json.loads((HF_CONFIGS / "mpt.json").read_text())
    with pytest.raises(ConfigError, match="attn_type"):
        model_from_config({**mpt, "attn_config": {"attn_type": "sparse"}}, model_id="x")
    gqa = model_from_config(
        {**mpt, "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 8}}, model_id="x"
    )
    assert gqa.attention.num_kv_heads == 8


def test_llama4_default_patterns_match_the_listed_ones() -> None:
    raw = json.loads((HF_CONFIGS / "llama4_maverick.json").read_text())
    listed = dict(raw["text_config"])
    listed["no_rope_layers"] = [int((i + 1) % 4 != 0) for i in range(48)]
    listed["moe_layers"] = list(range(1, 48, 2))
    a = model_from_config(raw, model_id="a")
    b = model_from_config({**raw, "text_config": listed}, model_id="b")
    assert a.layers == b.layers
    no_chunk = model_from_config(
        {**raw, "text_config": {**raw["text_config"], "attention_chunk_size": None}}, model_id="c"
    )
    assert all(no_chunk.layer_attention(x).kind is AttentionKind.GQA for x in no_chunk.layers)
    assert dataclasses.replace(a, id="b", name="b") == dataclasses.replace(b, source=a.source)


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("model_id", sorted(NEW_MODELS))
def test_explain_runs_on_every_new_model(cli, model_id: str) -> None:
    code, out, err = cli(
        "explain", model_id, "--on", "h200-hgx", "--batch", "1,32", "--context", "2k", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    steps = [p["step_s"] for p in data["points"]]
    assert len(steps) == 2 and all(math.isfinite(s) and s > 0 for s in steps)
    assert steps[1] > steps[0]


@pytest.mark.parametrize("model_id", sorted(NEW_MODELS))
def test_per_layer_terms_sum_to_the_model(model_id: str) -> None:
    m = catalog.model(model_id)
    per_layer = arch.kv_bytes_per_layer(m, 50_000, BF16)
    assert len(per_layer) == m.num_layers
    assert sum(per_layer) == pytest.approx(float(arch.kv_bytes_per_sequence(m, 50_000, BF16)), rel=1e-12)
    p = arch.param_counts(m)
    a, d, n = (sum(col) for col in zip(*arch.layer_params(m), strict=True))
    assert (a, d, n + m.hidden_size) == (p.attention, p.dense_mlp, p.norms)


def test_explain_states_which_layers_cache_and_the_fixed_state(cli) -> None:
    m = catalog.model("qwen3-next-80b-a3b")
    assert arch.kv_cache_layers(m) == 12
    assert arch.state_bytes_per_sequence(m, BF16) == 36 * 548_864 * BF16 == 39_518_208
    assert arch.state_bytes_per_sequence(catalog.model("llama-4-scout"), BF16) == 0.0
    code, out, _ = cli("explain", "qwen3-next-80b-a3b", "--on", "h200-hgx", "--batch", "1", "--context", "8k")
    assert code == 0
    assert "1024 values/token/layer x 12 layers x 2 B = 24.6 kB per token" in out
    assert "39.5 MB state per sequence" in out
