"""Reading Hugging Face config.json files: every supported family, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackmath.catalog import loader as catalog
from rackmath.core.architecture import param_counts
from rackmath.errors import ConfigError, UnknownIdError
from rackmath.specs.hf_config import load_config_file, model_from_config
from rackmath.specs.model import AttentionKind, MlpKind
from rackmath.specs.precision import Precision

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"

# file -> (family, attention, published total params it should reproduce within 2%)
FAMILIES = {
    "llama.json": ("llama", AttentionKind.GQA, 8.03e9),
    "mistral.json": ("mistral", AttentionKind.GQA, 7.24e9),
    "mixtral.json": ("mixtral", AttentionKind.GQA, 46.7e9),
    "qwen2.json": ("qwen2", AttentionKind.GQA, 72.7e9),
    "qwen3.json": ("qwen3", AttentionKind.GQA, 8.2e9),
    "qwen3_moe.json": ("qwen3_moe", AttentionKind.GQA, 30.5e9),
    "deepseek_v3.json": ("deepseek_v3", AttentionKind.MLA, 671e9),
    "kimi_k2.json": ("kimi_k2", AttentionKind.MLA, 1.04e12),
    "gpt_oss.json": ("gpt_oss", AttentionKind.GQA, 20.91e9),
    "gemma3.json": ("gemma3", AttentionKind.GQA, 27.0e9),
    "glm4_moe.json": ("glm4_moe", AttentionKind.GQA, 355e9),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_parses(name: str) -> None:
    family, attention, total = FAMILIES[name]
    spec = load_config_file(HF_CONFIGS / name)
    assert spec.family == family
    assert spec.attention.kind is attention
    assert param_counts(spec).total == pytest.approx(total, rel=0.02)


def test_files_and_catalog_agree_for_deepseek() -> None:
    from_file = load_config_file(HF_CONFIGS / "deepseek_v3.json")
    assert param_counts(from_file) == param_counts(catalog.model("deepseek-v3"))
    assert from_file.native_weight_precision is Precision.FP8_BLOCK  # 128 x 128 weight blocks
    assert [layer.mlp for layer in from_file.layers[:4]] == [MlpKind.DENSE] * 3 + [MlpKind.MOE]


def test_gpt_oss_is_mxfp4_with_alternating_windows() -> None:
    spec = load_config_file(HF_CONFIGS / "gpt_oss.json")
    assert spec.native_weight_precision is Precision.MXFP4
    assert [layer.window for layer in spec.layers[:4]] == [128, None, 128, None]


def test_malformed_json_names_the_problem() -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config_file(HF_CONFIGS / "malformed.json")


def test_missing_field_is_named() -> None:
    with pytest.raises(ConfigError, match="'hidden_size' is missing"):
        load_config_file(HF_CONFIGS / "missing_field.json")


def test_unsupported_family_lists_suggestions() -> None:
    with pytest.raises(UnknownIdError, match="model_type 'mamba'"):
        load_config_file(HF_CONFIGS / "unsupported.json")


def test_wrong_types_and_ranges_are_rejected() -> None:
    config = json.loads((HF_CONFIGS / "llama.json").read_text())
    for field, value, message in [
        ("num_hidden_layers", "32", "must be an integer"),
        ("num_attention_heads", 0, ">= 1"),
        ("num_key_value_heads", 7, "must divide num_attention_heads"),
        ("tie_word_embeddings", "yes", "true or false"),
    ]:
        with pytest.raises(ConfigError, match=message):
            model_from_config({**config, field: value}, model_id="x")


def test_not_an_object() -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        model_from_config([1, 2], model_id="x")  # type: ignore[arg-type]


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(HF_CONFIGS / "nope.json")


def test_hub_import_fetches_only_config_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub path downloads config.json alone (no code) and parses it like a local file."""
    import sys
    import types

    calls: list[tuple[str, str]] = []

    def fake_download(repo_id: str, filename: str, revision: str | None = None, **kwargs: object) -> str:
        calls.append((repo_id, filename))
        return str(HF_CONFIGS / "mixtral.json")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=fake_download))
    from rackmath.catalog.loader import resolve_model

    spec = resolve_model("hf:mistralai/Mixtral-8x7B-v0.1")
    assert calls == [("mistralai/Mixtral-8x7B-v0.1", "config.json")]
    assert spec.id == "mixtral-8x7b-v0.1" and spec.family == "mixtral"


def test_hub_errors_are_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    def offline(*args: object, **kwargs: object) -> str:
        raise OSError("network unreachable")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=offline))
    from rackmath.catalog.loader import resolve_model

    with pytest.raises(ConfigError, match=r"could not fetch config\.json of 'org/model'"):
        resolve_model("hf:org/model")


def test_hub_retries_are_not_printed_and_the_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # the real client logs "Retrying in 1s [Retry 1/5]." per retry; the CLI must print one line
    import logging
    import sys
    import types

    def flaky(*args: object, **kwargs: object) -> str:
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        raise OSError("cannot reach the Hub.\nCheck your connection.")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=flaky))
    from rackmath.catalog.loader import resolve_model

    hub_log = logging.getLogger("huggingface_hub")
    before = hub_log.level
    with caplog.at_level(logging.NOTSET), pytest.raises(ConfigError) as err:
        resolve_model("hf:org/model")
    assert "Retrying" not in caplog.text and "Retrying" not in capsys.readouterr().err
    assert "\n" not in str(err.value) and "Check your connection." in str(err.value)
    assert hub_log.level == before  # restored


def test_modules_to_not_convert_become_weight_classes() -> None:
    base = json.loads((HF_CONFIGS / "gpt_oss.json").read_text())
    config = {
        **base,
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
                "model.layers.3.mlp",
            ],
        },
    }
    spec = model_from_config(config, model_id="oss")
    by_class = dict(spec.weight_precision_by_class)
    assert by_class == {c: Precision.BF16 for c in ("attention", "router", "embedding", "lm_head", "norms")}
    assert spec.weight_precision("routed_experts") is Precision.MXFP4
    assert spec.weight_precision("attention") is Precision.BF16
    assert spec.weight_precision("attention", Precision.FP8) is Precision.FP8  # uniform requantization
    assert any("model.layers.3.mlp" in n for n in spec.notes)  # one layer: reported, not guessed
    # no list: the quantized linears are converted; the embedding, head, router and norms keep
    # torch_dtype (what DeepSeek-V3's FP8 checkpoint and every quantizer's defaults do)
    plain = model_from_config({**base, "quantization_config": {"quant_method": "mxfp4"}}, model_id="oss")
    assert dict(plain.weight_precision_by_class) == {
        c: Precision.BF16 for c in ("embedding", "lm_head", "router", "norms")
    }
    assert plain.weight_precision("attention") is Precision.MXFP4
