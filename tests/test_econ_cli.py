"""The economics commands: JSON faces, plots, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_prices_json(cli) -> None:
    code, out, _ = cli("prices", "--json", "--as-of", "2026-11-22")
    assert code == 0
    d = json.loads(out)
    assert d["as_of"] == "2026-11-22"
    assert d["oldest_price_age_days"] == max(p["age_days"] for p in d["prices"])
    assert d["long_context"]["boundary_implied_kv_bytes_per_token"][0] == pytest.approx(1666.67, rel=1e-4)
    assert d["caching"]["lecture_mapping"] == {"300s": "flash", "3600s": "disk"}
    assert d["fast_mode"]["ideal"]["speedup"] == pytest.approx(2.5)
    assert d["fast_mode"]["published"]["price_multiple"] == pytest.approx(6.0)


def test_prices_text_and_plot(cli, tmp_path: Path) -> None:
    plot = tmp_path / "prices.png"
    code, out, _ = cli("prices", "--provider", "google", "--plot", str(plot))
    assert code == 0
    assert "gemini-3.1-pro" in out and "claude-opus" not in out.split("1. Output")[0]
    assert "5 min -> flash, 1 h -> disk" in out
    assert plot.stat().st_size > 10_000


def test_user_prices_file(cli, tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "prices:\n  - id: acme-1\n    provider: acme\n    name: Acme 1\n    date: '2026-11-01'\n"
        "    confidence: exact\n    source: [contract]\n    tiers:\n"
        "      - {input_usd_per_million_tokens: 1.0, output_usd_per_million_tokens: 3.0}\n"
    )
    code, out, _ = cli(
        "prices",
        "--prices",
        str(mine),
        "--provider",
        "acme",
        "--as-of",
        "2026-11-22",
        "--json",
    )
    assert code == 0
    (row,) = json.loads(out)["prices"]
    assert row["id"] == "acme-1" and row["age_days"] == 21 and row["output_over_input"] == 3.0
    mine.write_text(mine.read_text().replace("1.0,", "-1.0,"))
    code, _, err = cli("prices", "--prices", str(mine))
    assert code == 1 and "input_usd_per_million_tokens" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("prices", "--provider", "anthropix"), "did you mean anthropic"),
        (("prices", "--cache-model", "claude-opus-4.7"), "unknown priced model"),
        (("prices", "--retention", "5x"), "--retention"),
        (("prices", "--amortization", "-3y"), "--amortization"),
        (("prices", "--as-of", "yesterday"), "--as-of"),
        (("overtrain", "--duration", "5x"), "--duration"),
        (("overtrain", "--params", "-5"), "--params"),
        (("fleet", "--traffic", "lots"), "--traffic"),
        (("fleet", "--model", "deepseek-v3"), "--model/--on"),
        (("fleet", "--seed", "-1"), "seed"),
        (("fleet", "--chips-per-replica", "0"), "--chips-per-replica"),
        (("fleet", "--requests", "0"), "requests"),
        (("pareto", "llama-3.1-8b", "--on", "h100-hgx", "--max-chips", "-3"), "--max-chips"),
        (("sparsity", "--sparsity", "0.5"), "--sparsity"),
        (("sparsity", "--model", "gpt-9"), "unknown model"),
    ],
)
def test_bad_input_is_one_line(cli, args, message) -> None:
    code, _, err = cli(*args)
    assert code == 1
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_fleet_json_with_the_lectures_train(cli) -> None:
    code, out, _ = cli("fleet", "--step", "20ms", "--loads", "0.5", "--requests", "500", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["train"]["closed_form_worst_s"] == pytest.approx(0.040)
    assert d["train"]["worst_latency_s"] <= 0.040 + 1e-12
    assert d["tokens_per_s_per_replica"] == pytest.approx(2000 / 0.020)


def test_overtrain_json_and_plot(cli, tmp_path: Path) -> None:
    plot = tmp_path / "o.svg"
    code, out, _ = cli("overtrain", "--json", "--plot", str(plot))
    assert code == 0
    d = json.loads(out)
    assert d["overtraining_factor"] == pytest.approx(129.6)
    assert d["pretrain_over_rl"] == pytest.approx(1.5)
    assert plot.read_text().startswith("<?xml")


def test_sparsity_text(cli) -> None:
    code, out, _ = cli("sparsity", "--sparsity", "1,8,32")
    assert code == 0
    assert "pure win for bandwidth" in out
