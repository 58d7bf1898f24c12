"""URL <-> page state, state -> specs, figure and export helpers, and `rackmath web` (no browser)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.catalog import loader as catalog
from rackmath.errors import ConfigError, InputError, RackmathError, UnknownIdError
from rackmath.specs.precision import Precision
from rackmath.web.state.common import (
    CUSTOM_MODEL,
    MAX_BATCH,
    MAX_CONTEXT,
    decode_config,
    encode_config,
    model_from_text,
    upload_text,
)
from rackmath.web.state.deployments import DeploymentsState, deployments_query, parse_deployments_query
from rackmath.web.state.serving import ServingState, edited_chip, parse_serving_query, serving_query

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"

positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


def bounded(name: str) -> st.SearchStrategy[float]:
    """Any value the page accepts for ``name`` (its bounds are the widgets' and the URL's)."""
    from rackmath.web.state.bounds import BOUNDS

    lo, hi = BOUNDS[name]
    return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)


states = st.builds(
    ServingState,
    model=st.sampled_from(sorted(catalog.models())),
    system=st.sampled_from(sorted(catalog.systems())),
    chips=st.none() | st.integers(1, 10_000),
    weights=st.none() | st.sampled_from([p.value for p in Precision]),
    kv=st.none() | st.sampled_from([p.value for p in Precision]),
    compute=st.none() | st.sampled_from([p.value for p in Precision]),
    usd_per_chip_hour=st.none() | bounded("serving.usd_per_chip_hour"),
    hbm_gb=st.none() | bounded("serving.hbm_gb"),
    hbm_tb_per_s=st.none() | bounded("serving.hbm_tb_per_s"),
    peak_tflop_per_s=st.none() | bounded("serving.peak_tflop_per_s"),
    batch=st.integers(1, MAX_BATCH),
    context=st.integers(1, MAX_CONTEXT),
    mtp=st.none() | st.integers(0, 16),
    acceptance=st.none() | st.floats(0.0, 1.0),
    prefix_hit=st.none() | st.floats(0.0, 0.95),
    prefix_tier=st.none() | st.sampled_from(["hbm", "host-dram", "cxl", "ssd", "hdd"]),
    pue=st.none() | st.floats(1.0, 3.0),
)


@given(states)
def test_serving_state_round_trips_through_the_url(state: ServingState) -> None:
    assert parse_serving_query(serving_query(state)) == (state, [])


@given(st.text(max_size=3000))
def test_config_text_round_trips_through_its_url_token(text: str) -> None:
    token = encode_config(text)
    assert token.replace("-", "").replace("_", "").isalnum() or token == ""
    assert decode_config(token) == text


def test_a_custom_model_round_trips_with_its_config() -> None:
    state = ServingState(model=CUSTOM_MODEL, config=(HF_CONFIGS / "llama.json").read_text())
    assert parse_serving_query(serving_query(state)) == (state, [])


def test_deployments_state_round_trips_including_no_slo() -> None:
    state = DeploymentsState(systems=("h100-hgx",), precisions=("fp8", "fp4"), ttft_ms=None, tpot_ms=25.0)
    query = deployments_query(state)
    assert query["ttft_ms"] == "none" and query["systems"] == "h100-hgx"
    assert parse_deployments_query(query) == (state, [])


@pytest.mark.parametrize(
    ("params", "kind", "text"),
    [
        ({"batch": "0"}, InputError, "batch: got '0'; allowed: a whole number from 1 to 65,536"),
        ({"batch": "2.5"}, InputError, "batch: got '2.5'"),
        ({"context": str(MAX_CONTEXT + 1)}, InputError, "context: got '2097153'"),
        ({"usd_per_chip_hour": "nan"}, InputError, "a number from 0.01 to 1000"),
        ({"hbm_gb": "-80"}, InputError, "hbm_gb: got '-80'"),
        ({"model": "lama-3.1-8b"}, UnknownIdError, "did you mean llama-3.1-8b"),
        ({"system": "gb200"}, UnknownIdError, "unknown system 'gb200'"),
        ({"weights": "fp5"}, UnknownIdError, "unknown weights precision 'fp5'"),
        ({"cfg": "!!!not-a-token"}, InputError, "URL parameter cfg"),
        ({"model": "custom"}, InputError, "'custom' with a cfg parameter"),
    ],
)
def test_bad_url_values_become_errors_and_defaults(params: dict[str, str], kind: type, text: str) -> None:
    state, errors = parse_serving_query({**params, "chips": "4"})
    assert len(errors) == 1 and isinstance(errors[0], kind) and text in str(errors[0])
    assert state == ServingState(chips=4)  # the bad value falls back to its default, the rest is kept


def test_a_repeated_url_parameter_takes_the_last_value() -> None:
    state, errors = parse_serving_query({"batch": ["8", "64"]})
    assert errors == [] and state.batch == 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "config.json is empty"),
        ("{not json", "not valid JSON: Expecting property name enclosed in double quotes at line 1"),
        ("[1, 2]", "must be a JSON object"),
        ('{"model_type": "mamba"}', "unknown model_type 'mamba'"),
        ("x" * 300_000, "300,000 characters"),
    ],
)
def test_bad_config_text_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(RackmathError) as info:
        model_from_text(text)
    assert message in str(info.value)


def test_a_pasted_config_reads_like_the_file() -> None:
    from rackmath.specs.hf_config import load_config_file

    pasted = model_from_text((HF_CONFIGS / "qwen3_moe.json").read_text())
    read = load_config_file(HF_CONFIGS / "qwen3_moe.json")
    assert (pasted.layers, pasted.attention, pasted.moe) == (read.layers, read.attention, read.moe)


def test_a_non_utf8_upload_is_refused() -> None:
    with pytest.raises(ConfigError, match="not UTF-8"):
        upload_text(b"\xff\xfe\x00")


def test_edited_chip_converts_face_units_to_si() -> None:
    chip = catalog.chip("h100-sxm")
    edited = edited_chip(chip, Precision.FP8, hbm_gb=96.0, hbm_tb_per_s=4.0, peak_tflop_per_s=2000.0)
    assert edited.hbm_capacity_bytes == 96e9
    assert edited.hbm_bandwidth_bytes_per_s == 4e12
    assert edited.peak_flops_per_s[Precision.FP8] == 2e15
    assert edited.peak_flops_per_s[Precision.BF16] == chip.peak_flops_per_s[Precision.BF16]
    assert edited.id == "h100-sxm-edited"
    assert edited_chip(chip, Precision.FP8) is chip


def test_an_impossible_chip_figure_is_an_input_error() -> None:
    with pytest.raises(InputError, match="hbm_bandwidth_bytes_per_s"):
        edited_chip(catalog.chip("h100-sxm"), Precision.BF16, hbm_tb_per_s=-1.0)


# --------------------------------------------------------------------------- exports and figures

web = pytest.importorskip("plotly", reason="needs the web extra")


def test_csv_and_json_exports_hold_the_rows() -> None:
    pytest.importorskip("streamlit")
    from rackmath.web.components import records_csv, records_json

    rows = [{"batch": 1, "step_s": 0.5, "plan": {"tp": 2}}, {"batch": 8, "step_s": 0.25, "plan": {"tp": 4}}]
    parsed = list(csv.DictReader(io.StringIO(records_csv(rows).decode())))
    assert [r["batch"] for r in parsed] == ["1", "8"]
    assert json.loads(parsed[1]["plan"]) == {"tp": 4}
    assert json.loads(records_json(rows)) == rows


def test_memory_figure_stacks_to_the_chips_capacity() -> None:
    from rackmath.api import deployment
    from rackmath.views.figures.serving_charts import memory
    from rackmath.web.render_plotly import figure

    dep = deployment("llama-3.1-70b", "h100-hgx")
    fig = figure(memory(dep, dep.decode([64], [4096])))
    bars = [t for t in fig.data if t.type == "bar"]
    assert next(t.name for t in bars) == "weights"
    assert sum(float(t.x[0]) for t in bars) == pytest.approx(dep.system.chip.hbm_capacity_bytes / 1e9)
    kv = next(t for t in bars if t.name.startswith("KV cache"))
    expected = 64 * float(dep.kv_bytes_per_sequence(4096)) / dep.chips / 1e9
    assert float(kv.x[0]) == pytest.approx(expected)


def test_the_no_fit_band_starts_at_the_largest_batch() -> None:
    from rackmath.api import deployment, explain
    from rackmath.views.figures.serving_charts import batch_sweep, cost
    from rackmath.web.render_plotly import figure

    dep = deployment("llama-3.1-70b", "h100-hgx")
    result = explain(dep, contexts=[4096])
    sweep = batch_sweep(result, top_batch=4096)
    fig = figure(cost(result, sweep, dep.decode([64], [4096])))
    band = next(t for t in fig.data if str(t.name).startswith("KV does not fit"))
    assert band.x[0] == pytest.approx(float(result.max_batch[0]))


# --------------------------------------------------------------------------- rackmath web


def test_web_command_runs_streamlit_headless_on_the_port(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rackmath.cli import web_cmds
    from rackmath.cli.main import app
    from rackmath.web import APP_PATH

    seen: list[list[str]] = []
    monkeypatch.setattr(web_cmds, "serve", lambda cmd: seen.append(cmd) or 0)
    result = CliRunner().invoke(app, ["web", "--port", "8765"])
    assert result.exit_code == 0, result.output
    cmd = seen[0]
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4] == str(APP_PATH)
    flags = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert flags["--server.port"] == "8765"
    assert flags["--server.address"] == "localhost"
    assert flags["--server.headless"] == "true"
    assert flags["--browser.gatherUsageStats"] == "false"
    assert flags["--client.showErrorDetails"] == "none"


def test_web_command_refuses_a_bad_port() -> None:
    from typer.testing import CliRunner

    from rackmath.cli.main import app

    result = CliRunner().invoke(app, ["web", "--port", "70000"])
    assert result.exit_code == 2


def test_web_command_names_the_missing_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util
    import sys

    from rackmath.cli.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name, *a)
    )
    monkeypatch.setattr(sys, "argv", ["rackmath", "web"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    assert "pip install 'rackmath[web]'" in capsys.readouterr().err


# --------------------------------------------------------------------------- bounded inputs


def test_every_number_widget_has_a_minimum_and_a_maximum() -> None:
    """Each st.number_input names min_value and max_value (the real-valued ones read from the
    bounds table); nothing a user types can start unbounded work."""
    import ast

    from rackmath.web import APP_PATH

    offenders = []
    for path in sorted(APP_PATH.parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "number_input":
                names = {k.arg for k in node.keywords}
                if not {"min_value", "max_value"} <= names:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, "unbounded number inputs: " + ", ".join(offenders)


def test_the_bounds_table_is_what_the_url_parsers_enforce() -> None:
    from rackmath.web.state.bounds import BOUNDS
    from rackmath.web.state.economics import parse_economics_query
    from rackmath.web.state.serving import parse_serving_query

    _lo, hi = BOUNDS["economics.fleet.traffic_tokens_per_s"]
    _, errors = parse_economics_query({"fleet.traffic_tokens_per_s": str(hi * 10)})
    assert len(errors) == 1 and "fleet.traffic_tokens_per_s" in str(errors[0]) and f"{hi:g}" in str(errors[0])
    _, errors = parse_economics_query({"fleet.loads": "0.5,5"})
    assert len(errors) == 1 and "fleet.loads" in str(errors[0])
    _, errors = parse_serving_query({"hbm_gb": "1e9"})
    assert len(errors) == 1 and "hbm_gb" in str(errors[0])
    state, errors = parse_serving_query({"hbm_gb": "141"})
    assert errors == [] and state.hbm_gb == 141.0
