"""Kimi K2.5 / K2.6 (`model_type` kimi_k25): a DeepSeek-V3 style text tower under `text_config`
beside a vision tower, its routed experts in compressed-tensors int4. The reader lifts the text
tower; the counts are checked against the published figures."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rackmath.catalog import loader as catalog
from rackmath.core.architecture import param_counts
from rackmath.errors import ConfigError
from rackmath.specs.hf_config import load_config_file, model_from_config
from rackmath.specs.model import AttentionKind, MlpKind
from rackmath.specs.precision import Precision

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "kimi_k25.json"

# Published: Kimi K2 technical report (arXiv:2507.20534) 1.04T total / 32.6B activated, the
# architecture K2.5 keeps (continual pretraining of Kimi-K2-Base; the K2.5 model card rounds to
# 1T / 32B). Tolerance 2% (the catalog's for every model): the report's 1.04T is 1.3% above the
# count of the weights themselves (1.0264T), as kimi-k2's entry notes.
PUBLISHED_TOTAL, PUBLISHED_ACTIVE, TOLERANCE = 1.04e12, 32.6e9, 0.02


def test_the_catalog_entry_reproduces_the_published_counts() -> None:
    m = catalog.model("kimi-k25")
    assert catalog.model("kimi-k2.5").id == catalog.model("kimi-k2.6").id == "kimi-k25"
    p = param_counts(m)
    assert p.total == pytest.approx(PUBLISHED_TOTAL, rel=TOLERANCE)
    assert p.active_under(m.published.active_counts) == pytest.approx(PUBLISHED_ACTIVE, rel=TOLERANCE)
    assert p.total == 1_026_408_232_448  # itemized below


def test_the_text_tower_is_kimi_k2s_architecture_counted_by_hand() -> None:
    m = catalog.model("kimi-k25")
    assert m.family == "kimi_k25" and m.attention.kind is AttentionKind.MLA
    assert param_counts(m) == param_counts(catalog.model("kimi-k2"))  # same text tower
    h, heads, layers, experts, width, vocab = 7168, 64, 61, 384, 2048, 163840
    q = h * 1536 + 1536 + 1536 * heads * (128 + 64)  # q_a, its norm, q_b
    kv = h * (512 + 64) + 512 + 512 * heads * (128 + 128)  # kv_a with rope, its norm, kv_b
    out = heads * 128 * h
    expert = 3 * h * width
    p = param_counts(m)
    assert p.attention == layers * (q + kv + out)
    assert p.routed_experts == 60 * experts * expert  # first_k_dense_replace 1: 60 MoE layers
    assert p.shared_experts == 60 * expert
    assert p.dense_mlp == 1 * 3 * h * 18432
    assert p.router == 60 * (experts * h + experts)  # weight + noaux_tc correction bias
    assert p.embedding == p.lm_head == vocab * h  # untied
    assert [layer.mlp for layer in m.layers[:2]] == [MlpKind.DENSE, MlpKind.MOE]
    assert m.max_context == 262144


def test_routed_experts_are_int4_and_the_rest_stays_bf16() -> None:
    """compressed-tensors: one group, 4-bit int weights, group 32; `ignore` names lm_head,
    self_attn, shared_experts and the dense MLP's projections."""
    m = catalog.model("kimi-k25")
    assert m.native_weight_precision is Precision.INT4
    kept = dict(m.weight_precision_by_class)
    assert set(kept) == {
        "attention", "dense_mlp", "shared_experts", "lm_head", "embedding", "router", "norms",
    }  # fmt: skip
    assert set(kept.values()) == {Precision.BF16}
    assert any("one scale per 32" in n and "4.5" in n for n in m.notes)  # stored as int4 per 128


def test_a_config_file_reads_the_same_and_the_vision_tower_is_left_out() -> None:
    spec = load_config_file(CONFIG)
    assert spec.family == "kimi_k25" and spec.hidden_size == 7168 and spec.vocab_size == 163840
    assert param_counts(spec) == param_counts(catalog.model("kimi-k25"))


def _config() -> dict:
    return json.loads(CONFIG.read_text())


def test_bad_kimi_configs_are_refused_in_one_line() -> None:
    no_text = {k: v for k, v in _config().items() if k != "text_config"}
    with pytest.raises(ConfigError, match="'text_config' is missing") as info:
        model_from_config(no_text, model_id="x")
    assert "\n" not in str(info.value)
    three_bits = copy.deepcopy(_config())
    three_bits["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 3
    with pytest.raises(ConfigError, match="3 bits, type 'int', are not a format") as info:
        model_from_config(three_bits, model_id="x")
    assert "\n" not in str(info.value)
    no_hidden = copy.deepcopy(_config())
    del no_hidden["text_config"]["hidden_size"]
    with pytest.raises(ConfigError, match="'hidden_size' is missing"):
        model_from_config(no_hidden, model_id="x")


def test_explain_runs_the_int4_model_on_eight_h200s(cli) -> None:
    code, out, err = cli("explain", "kimi-k25", "--on", "h200-hgx", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["model"] == "kimi-k25" and d["weights_fit"]
    # int4 experts (4.125 bits as stored by rackmath) + bf16 rest: about 546 GB, not 2 TB of bf16
    assert 5.2e11 < d["weight_bytes_per_chip"] * 8 < 5.8e11
