"""The command line: `explain`, `models`, `hardware`, `--version`, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rackmath as rm
from rackmath.analyses.serving import pooled

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"

POINT_KEYS = {
    "batch",
    "context",
    "step_s",
    "compute_s",
    "weight_fetch_s",
    "kv_fetch_s",
    "bottleneck",
    "tokens_per_s_per_user",
    "tokens_per_s",
    "tokens_per_s_per_chip",
    "usd_per_million_output_tokens",
    "mfu",
    "fits",
}
TOP_KEYS = {
    "model",
    "system",
    "chips",
    "precision",
    "params_total",
    "params_active",
    "kv_bytes_per_token",
    "flop_per_byte",
    "balance_batch",
    "balance_batch_with_kv",
    "latency_floor_s",
    "hbm_drain_time_s",
    "max_batch",
    "points",
}


def test_explain_json_has_the_stable_keys_and_matches_the_api(cli) -> None:
    code, out, _ = cli(
        "explain",
        "llama-3.1-70b",
        "--on",
        "h100-hgx",
        "--batch",
        "1,64",
        "--context",
        "1k,8k",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert set(data) >= TOP_KEYS
    assert data["precision"] == {"weights": "bf16", "kv": "bf16", "compute": "bf16"}
    assert len(data["points"]) == 4
    assert all(set(p) >= POINT_KEYS for p in data["points"])
    dep = rm.deployment("llama-3.1-70b", "h100-hgx")
    g = dep.decode([64], [8000])
    point = next(p for p in data["points"] if p["batch"] == 64 and p["context"] == 8000)
    assert point["step_s"] == pytest.approx(float(g.step_s[0, 0]))
    assert point["usd_per_million_output_tokens"] == pytest.approx(
        float(g.usd_per_million_output_tokens[0, 0])
    )
    assert data["latency_floor_s"] == pytest.approx(pooled.latency_floor_s(dep))


def test_explain_text_reads_like_the_blackboard(cli) -> None:
    code, out, _ = cli("explain", "deepseek-r1", "--on", "gb200-nvl72", "--chips", "64")
    assert code == 0
    for phrase in (
        "Latency floor",
        "balance batch",
        "the lecture's ~300",
        "N_total/N_active",
        "drain time",
        "Reading",
    ):
        assert phrase in out
    assert "routed sparsity E/k = 32" in out


def test_explain_plot(cli, tmp_path: Path) -> None:
    path = tmp_path / "plot.png"
    code, _, _ = cli("explain", "mixtral-8x7b", "--on", "h100-hgx", "--plot", str(path))
    assert code == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "plot.svg"
    code, _, _ = cli("explain", "mixtral-8x7b", "--on", "h100-hgx", "--plot", str(svg), "--json")
    assert code == 0 and svg.read_text().lstrip().startswith("<?xml")


def test_explain_from_a_config_file(cli) -> None:
    code, out, _ = cli("explain", str(HF_CONFIGS / "qwen3_moe.json"), "--on", "h200-hgx", "--json")
    assert code == 0
    assert json.loads(out)["params_total"] == pytest.approx(30.5e9, rel=0.02)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["explain", "llama-3.1-80b", "--on", "h100-hgx"], "did you mean llama-3.1-8b"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgxx"], "did you mean h100-hgx"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--batch", "0"], "--batch"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--batch", "a,b"], "comma-separated numbers"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--context", "-5"], "--context"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "0"], "chips"),
        (["explain", "llama-3.1-8b", "--on", "a100-hgx", "--compute", "fp8"], "a100-80gb has no fp8"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--kv", "fp7"], "unknown kv precision 'fp7'"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--price-per-chip-hour", "-1"], "positive"),
        (["explain", str(HF_CONFIGS / "malformed.json"), "--on", "h100-hgx"], "not valid JSON"),
        (["explain", str(HF_CONFIGS / "missing_field.json"), "--on", "h100-hgx"], "'hidden_size' is missing"),
        (["explain", "llama-3.1-8b", "--on", "h100-hgx", "--plot", "x.gif"], ".png, .svg or .pdf"),
    ],
)
def test_bad_input_gets_one_line_and_exit_1(cli, args, message) -> None:
    code, out, err = cli(*args)
    assert code == 1
    assert message in err
    assert "Traceback" not in err and out == ""


def test_a_deployment_that_does_not_fit_says_by_how_much(cli) -> None:
    code, _, err = cli("explain", "llama-3.1-405b", "--on", "h100-hgx", "--chips", "1")
    assert code == 1
    # 405,853,388,800 params x 2 bytes on one H100: 81,559 MiB = 85.52e9 bytes, 90% usable
    needed, usable = 405_853_388_800 * 2 / 1e9, 0.9 * 85.52
    assert f"needs {needed:.1f} GB per chip" in err and f"has {usable:.1f} GB" in err
    assert f"short by {needed - usable:.1f} GB" in err


def test_usage_errors_exit_2(cli) -> None:
    code, _, _ = cli("explain", "llama-3.1-8b")  # no --on
    assert code == 2


def test_models_and_hardware_tables(cli) -> None:
    code, out, _ = cli("models", "--json")
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows["deepseek-v3"]["params_total"] == pytest.approx(671e9, rel=0.01)
    code, out, _ = cli("hardware", "--json")
    assert code == 0
    data = json.loads(out)
    assert {c["id"] for c in data["chips"]} >= {"h100-sxm", "gb200", "tpu7x"}
    code, out, _ = cli("hardware")
    assert code == 0 and "gb200-nvl72" in out


def test_version(cli) -> None:
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("rackmath ")


def test_explain_with_a_plan_adds_communication_and_memory(cli) -> None:
    from rackmath.analyses.serving.planned import plan_deployment

    code, out, _ = cli(
        "explain", "deepseek-v3", "--on", "gb200-nvl72", "--chips", "64", "--plan", "dp=64,ep=64",
        "--batch", "1,2048", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["plan"]["plan"] == "dp=64,ep=64"
    point = next(p for p in data["plan"]["points"] if p["batch"] == 2048)
    grid = plan_deployment(rm.model("deepseek-v3"), rm.system("gb200-nvl72"), "dp=64,ep=64").decode(
        [2048], [4096]
    )
    assert point["step_s"] == pytest.approx(float(grid.step_s[0, 0]))
    assert point["ep_comm_s"] == pytest.approx(float(grid.step.ep_comm_s[0, 0]))
    assert point["ep_comm_s"] > 0 and point["tp_comm_s"] == 0  # no TP in this plan
    ideal = next(p for p in data["points"] if p["batch"] == 2048)
    assert point["step_s"] > ideal["step_s"]  # a real layout never beats the ideal chip
    code, text, _ = cli(
        "explain", "deepseek-v3", "--on", "gb200-nvl72", "--chips", "64", "--plan", "dp=64,ep=64"
    )
    assert code == 0 and "7. With the plan dp=64,ep=64" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chips", "64", "--plan", "dp=32,ep=32"], "a plan over the deployment's 64 chips"),
        (["--chips", "512", "--plan", "dp=512,ep=512"], "256"),  # 512 EP ranks, 256 expert slots
        (["--chips", "64", "--plan", "dp=64,xp=2"], "unknown plan dimension 'xp'"),
    ],
)
def test_explain_rejects_bad_plans(cli, args, message) -> None:
    code, _, err = cli("explain", "deepseek-v3", "--on", "gb200-nvl72", *args)
    assert code == 1 and message in err


def test_estimated_prices_are_labelled_where_shown(cli) -> None:
    code, out, _ = cli("explain", "llama-3.1-70b", "--on", "gb300-nvl72")
    assert code == 0 and "price $6.50 (estimate) per chip-hour" in out
    code, out, _ = cli("explain", "llama-3.1-70b", "--on", "gb300-nvl72", "--price-per-chip-hour", "7")
    assert code == 0 and "price $7.00 per chip-hour" in out and "(estimate)" not in out
    code, out, _ = cli("explain", "llama-3.1-70b", "--on", "h100-hgx")
    assert code == 0 and "price $2.29 per chip-hour" in out
    code, out, _ = cli("hardware", "--json")
    chips = {c["id"]: c for c in json.loads(out)["chips"]}
    assert chips["gb300"]["price_usd_per_chip_hour"]["estimate"] is True
    assert chips["h100-sxm"]["price_usd_per_chip_hour"]["estimate"] is False
