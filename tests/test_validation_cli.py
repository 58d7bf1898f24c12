"""`rackmath validate` and `rackmath calibrate` end to end: JSON schema, plot, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_validate_json_carries_fractions_and_every_row(cli, tmp_path: Path) -> None:
    plot = tmp_path / "validate.png"
    code, out, _ = cli("validate", "--json", "--plot", str(plot))
    assert code == 0
    data = json.loads(out)
    assert data["rows_expressed"] == len(data["rows"]) and data["rows_unsupported"] == len(
        data["unsupported"]
    )
    assert data["rows_expressed"] + data["rows_unsupported"] == 50
    for column in ("roofline", "calibrated", "loso"):
        block = data["aggregates"][column]
        for group in [block["overall"], *block["by_phase"].values(), *block["by_hardware"].values()]:
            assert 0 <= group["median_abs_error"] <= group["p90_abs_error"] < 10  # fractions, not percents
    for row in data["rows"]:
        assert row["measured"] > 0 and row["url"] and row["source"]
        for column in ("roofline", "calibrated", "loso"):
            cell = row[column]
            assert cell["predicted"] > 0
            assert cell["error_frac"] == pytest.approx(cell["predicted"] / row["measured"] - 1)
    assert all(u["reason"] for u in data["unsupported"])
    assert plot.stat().st_size > 10_000


def test_validate_text_lists_unsupported_rows(cli) -> None:
    code, out, _ = cli("validate")
    assert code == 0
    assert "listed unsupported" in out and "MI250X" in out and "overall" in out


def test_calibrate_reports_leave_one_source_out(cli) -> None:
    code, out, _ = cli("calibrate", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data["calibration"]["families"]) >= {"nvidia-ampere", "nvidia-hopper"}
    loso = data["leave_one_source_out"]
    assert loso["rows"] >= 30 and 0 < loso["median_abs_error"] < 1
    held = [i for v in data["loso_by_source"].values() for i in v["row_ids"]]
    assert len(held) == len(set(held)) == loso["rows"]


def test_calibrate_on_a_subset_and_bad_source(cli) -> None:
    code, out, _ = cli("calibrate", "--exclude-source", "megatron-lm", "--json")
    assert code == 0
    data = json.loads(out)
    assert "megatron-lm" not in data["loso_by_source"]
    code, _, err = cli("calibrate", "--exclude-source", "gpt-fastt")
    assert code == 1 and "gpt-fast" in err and "Traceback" not in err


_OWN_ROW = """
measurements:
- id: 1
  source: a local measurement
  source_key: local
  url: https://example.invalid/local
  quote: batch-1 decode step
  confidence: exact
  scenario:
    model: {model}
    system: h100-hgx
    chips: 1
    weights: bf16
    kv: bf16
    compute: bf16
    batch: 1
    input_tokens: 1
    output_tokens: 1
    phase: decode
    metric: decode_step_s
    value: 0.005
    unit: s
"""


def test_validate_accepts_a_model_given_as_config_json(cli, tmp_path: Path) -> None:
    config_dir = tmp_path / "my-llama"
    config_dir.mkdir()
    source = Path(__file__).parent / "data" / "hf_configs" / "llama.json"  # Llama 3.1 8B
    (config_dir / "config.json").write_text(source.read_text())
    own = tmp_path / "rows.yaml"
    own.write_text(_OWN_ROW.format(model="my-llama/config.json"))  # relative to the file
    code, out, err = cli("validate", "--measurements", str(own), "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["model"].endswith("config.json")
    # By hand: batch 1 reads every weight but the input embedding (a lookup), bf16:
    # (8,030,261,248 - 128,256 x 4,096) x 2 B = 15,009,849,344 B over one H100's 3.35 TB/s
    # = 4.4806 ms; the KV of a 1-2 token context (131,072 B per token) and the one token's
    # activations in and out of each operator (about 32 x 92k values x 2 B = 5.9 MB, 4e-4 of
    # the weights) stay below 1e-3 of it.
    by_hand = (8_030_261_248 - 128_256 * 4096) * 2 / 3.35e12
    assert row["roofline"]["predicted"] == pytest.approx(by_hand, rel=1e-3)
    assert row["roofline"]["predicted"] > by_hand
    # the same row naming the catalog id predicts the same, in every column
    catalog_rows = tmp_path / "catalog-rows.yaml"
    catalog_rows.write_text(_OWN_ROW.format(model="llama-3.1-8b"))
    code, out, _ = cli("validate", "--measurements", str(catalog_rows), "--json")
    same = json.loads(out)["rows"][0]
    for column in ("roofline", "calibrated", "loso"):
        assert row[column]["predicted"] == pytest.approx(same[column]["predicted"], rel=1e-12)


def test_validate_own_rows_refuse_a_missing_config(cli, tmp_path: Path) -> None:
    own = tmp_path / "rows.yaml"
    own.write_text(_OWN_ROW.format(model="nowhere/config.json"))
    code, _, err = cli("validate", "--measurements", str(own))
    assert code == 1 and "config.json" in err and "Traceback" not in err
    code, _, err = cli("validate", "--measurements", str(tmp_path / "absent.yaml"))
    assert code == 1 and "--measurements" in err
