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
