"""App-level tests of the web explorer with Streamlit's AppTest (no browser).

Each test runs the real entry script (``rackmath/web/app.py``), sets widgets or URL
parameters, reruns, and checks the numbers on the page against the Python API computed
here independently, so a page that lays out the wrong number fails.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath import explain
from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment
from rackmath.api import deployment
from rackmath.catalog import loader as catalog
from rackmath.specs.hf_config import load_config_file
from rackmath.specs.precision import Precision
from rackmath.views import fmt
from rackmath.web import APP_PATH
from rackmath.web.state.common import encode_config
from rackmath.web.state.serving import ServingState, serving_query

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"
TIMEOUT_S = 60


def run_app(query: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(str(APP_PATH), default_timeout=TIMEOUT_S)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at.run()


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def plots(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _values(v: Any) -> Any:
    """Plotly sends NumPy arrays as base64 typed arrays: {"dtype": "f8", "bdata": ...}."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return v


def trace(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    found = next(t for t in spec["data"] if str(t.get("name", "")).startswith(prefix))
    return {k: _values(v) for k, v in found.items()}


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def point(dep: Deployment, batch: int, context: int) -> DecodeGrid:
    return dep.decode([batch], [context])


# --------------------------------------------------------------------------- the default view


def test_default_page_lays_out_the_api_numbers() -> None:
    at = run_app()
    ok(at)
    assert errors(at) == []
    dep = deployment("deepseek-v3", "gb200-nvl72")
    result = explain(dep, contexts=[4096])
    p = point(dep, 256, 4096)
    m = metrics(at)
    assert m["Step time"] == fmt.seconds(float(p.step_s[0, 0]))
    assert m["Tokens/s (all chips)"] == f"{p.tokens_per_s[0, 0]:,.0f}"
    assert m["$ per M output tokens"] == fmt.usd(float(p.usd_per_million_output_tokens[0, 0]))
    assert m["Bound by"] == str(p.step.bottleneck[0, 0])
    assert m["Latency floor"] == fmt.seconds(result.latency_floor_s)
    assert m["Largest batch that fits"] == f"{result.max_batch[0]:,.0f}"
    assert m["B* without KV"] == f"{result.balance.balance_batch:,.0f}"
    assert m["HBM drain time"] == fmt.seconds(result.hbm_drain_time_s)
    # DeepSeek-V3 at 4K context: MLA's KV fetch per sequence outweighs its compute on GB200
    assert np.isnan(result.balance.balance_batch_with_kv[0]) and m["Balance batch B*"] == "none"
    assert len(plots(at)) == 4
    assert dict(at.query_params) == {
        "model": "deepseek-v3",
        "system": "gb200-nvl72",
        "chips": "72",
        "batch": "256",
        "context": "4096",
        "efficiency": "kernel",
    }


def test_step_time_plot_is_the_sweep_in_milliseconds_and_marks_the_floor() -> None:
    at = run_app({"model": "llama-3.1-8b", "system": "h100-hgx", "chips": "1", "context": "256"})
    ok(at)
    spec = plots(at)[0]
    step = trace(spec, "step (sum")
    dep = deployment("llama-3.1-8b", "h100-hgx", chips=1)
    grid = dep.decode(step["x"], [256])
    np.testing.assert_allclose(step["y"], grid.step_s[:, 0] * 1e3, rtol=1e-12)
    floor = trace(spec, "latency floor")
    assert floor["y"][0] == pytest.approx(pooled.latency_floor_s(dep) * 1e3, rel=1e-12)
    b_star = explain(dep, contexts=[256]).balance.balance_batch_with_kv[0]
    # at 256 tokens the KV fetch per sequence is small enough that compute takes over
    assert np.isfinite(b_star)
    assert trace(spec, "balance B*")["x"][0] == pytest.approx(b_star)


# --------------------------------------------------------------------------- controls


def test_batch_slider_moves_the_numbers_the_marker_and_the_url() -> None:
    at = run_app()
    before = metrics(at)["Step time"]
    at.select_slider(key="serving.batch").set_value(4096).run()
    ok(at)
    dep = deployment("deepseek-v3", "gb200-nvl72")
    p = point(dep, 4096, 4096)
    assert metrics(at)["Step time"] == fmt.seconds(float(p.step_s[0, 0])) != before
    marker = trace(plots(at)[0], "selected batch")
    assert marker["x"] == [4096]
    assert marker["y"][0] == pytest.approx(float(p.step_s[0, 0]) * 1e3)
    assert at.query_params["batch"] == "4096"


def test_context_slider_changes_what_fits() -> None:
    at = run_app()
    at.select_slider(key="serving.context").set_value(131072).run()
    ok(at)
    dep = deployment("deepseek-v3", "gb200-nvl72")
    expected = dep.max_concurrency([131072])[0]
    assert metrics(at)["Largest batch that fits"] == f"{expected:,.0f}"
    assert at.query_params["context"] == "131072"


def test_system_change_resets_the_chip_count_to_the_new_systems_default() -> None:
    at = run_app()
    at.selectbox(key="serving.model").set_value("llama-3.1-70b")
    at.selectbox(key="serving.system").set_value("h100-hgx").run()
    ok(at)
    assert at.number_input(key="serving.chips").value == catalog.system("h100-hgx").default_chips == 8
    dep = deployment("llama-3.1-70b", "h100-hgx")
    assert metrics(at)["Latency floor"] == fmt.seconds(pooled.latency_floor_s(dep))
    assert at.query_params["system"] == "h100-hgx" and at.query_params["chips"] == "8"


def test_chips_scale_the_latency_floor_down() -> None:
    at = run_app({"model": "llama-3.1-70b", "system": "h100-hgx"})
    at.number_input(key="serving.chips").set_value(4).run()
    ok(at)
    four = deployment("llama-3.1-70b", "h100-hgx", chips=4)
    eight = deployment("llama-3.1-70b", "h100-hgx", chips=8)
    assert pooled.latency_floor_s(four) == pytest.approx(2 * pooled.latency_floor_s(eight))
    assert metrics(at)["Latency floor"] == fmt.seconds(pooled.latency_floor_s(four))


def test_fp8_weights_halve_the_blocks_share_of_the_latency_floor() -> None:
    at = run_app({"model": "llama-3.1-70b", "system": "h100-hgx"})
    bf16 = metrics(at)["Latency floor"]
    at.selectbox(key="serving.weights").set_value("fp8").run()
    ok(at)
    dep = deployment("llama-3.1-70b", "h100-hgx", weights="fp8")
    assert metrics(at)["Latency floor"] == fmt.seconds(pooled.latency_floor_s(dep)) != bf16
    base = deployment("llama-3.1-70b", "h100-hgx")
    head = base.params.lm_head + base.params.norms  # fp8 leaves them bf16: their half stays
    bandwidth = 8 * 3.35e12  # 8 H100 SXM, HBM3
    expected = pooled.latency_floor_s(base) / 2 + head * 1.0 / bandwidth
    assert pooled.latency_floor_s(dep) == pytest.approx(expected)
    assert at.query_params["weights"] == "fp8"


def test_price_override_scales_the_cost_linearly() -> None:
    at = run_app({"model": "llama-3.1-8b", "system": "h100-hgx", "chips": "1", "batch": "64"})
    at.number_input(key="serving.usd_per_chip_hour").set_value(10.0).run()
    ok(at)
    dep = deployment("llama-3.1-8b", "h100-hgx", chips=1, usd_per_chip_hour=10.0)
    usd = float(point(dep, 64, 4096).usd_per_million_output_tokens[0, 0])
    # cost = price x chips x step / (3600 x batch) per token, x 1e6 tokens
    step = float(point(dep, 64, 4096).step_s[0, 0])
    assert usd == pytest.approx(10.0 * step / 3600 / 64 * 1e6)
    assert metrics(at)["$ per M output tokens"] == fmt.usd(usd)


def test_editing_the_chips_bandwidth_moves_the_floor() -> None:
    """Twice the catalog's HBM bandwidth halves the latency floor (every weight read once)."""
    chip = catalog.system("h100-hgx").chip
    at = run_app({"model": "llama-3.1-8b", "system": "h100-hgx", "chips": "1"})
    at.number_input(key="serving.hbm_tb_per_s").set_value(2 * chip.hbm_bandwidth_bytes_per_s / 1e12).run()
    ok(at)
    base = deployment("llama-3.1-8b", "h100-hgx", chips=1)
    assert metrics(at)["Latency floor"] == fmt.seconds(pooled.latency_floor_s(base) / 2)
    assert "edited" in at.markdown[2].value or any("(edited)" in m.value for m in at.markdown)
    assert float(at.query_params["hbm_tb_per_s"]) == pytest.approx(2 * chip.hbm_bandwidth_bytes_per_s / 1e12)


def test_editing_the_chips_capacity_changes_what_fits() -> None:
    at = run_app({"model": "llama-3.1-8b", "system": "h100-hgx", "chips": "1"})
    at.number_input(key="serving.hbm_gb").set_value(160.0).run()
    ok(at)
    from rackmath.web.state.serving import serving_system

    system = serving_system(ServingState(system="h100-hgx", hbm_gb=160.0), Precision.BF16)
    assert system.chip.hbm_capacity_bytes == 160e9
    dep = deployment("llama-3.1-8b", system, chips=1)
    assert metrics(at)["Largest batch that fits"] == f"{dep.max_concurrency([4096])[0]:,.0f}"


# --------------------------------------------------------------------------- custom models


def _custom(at: AppTest) -> AppTest:
    return at.selectbox(key="serving.model").set_value("custom").run()


def test_custom_model_asks_for_a_config_first() -> None:
    at = _custom(run_app())
    ok(at)
    assert errors(at) == []
    assert any("config.json" in i.value for i in at.info)
    assert not at.metric


def test_a_pasted_config_json_is_served_like_the_catalogs() -> None:
    text = (HF_CONFIGS / "llama.json").read_text()
    at = _custom(run_app({"system": "h100-hgx", "chips": "1"}))
    at.text_area(key="serving.config").set_value(text).run()
    ok(at)
    assert errors(at) == []
    spec = load_config_file(HF_CONFIGS / "llama.json")
    dep = deployment(spec, "h100-hgx", chips=1)
    assert metrics(at)["Latency floor"] == fmt.seconds(pooled.latency_floor_s(dep))
    assert at.query_params["model"] == "custom" and at.query_params["cfg"] == encode_config(text)


def test_an_uploaded_config_json_is_read() -> None:
    content = (HF_CONFIGS / "qwen3_moe.json").read_bytes()
    at = _custom(run_app({"system": "h100-hgx", "chips": "8"}))
    at.file_uploader(key="serving.upload").upload("config.json", content, "application/json")
    at.run()
    ok(at)
    assert errors(at) == []
    dep = deployment(load_config_file(HF_CONFIGS / "qwen3_moe.json"), "h100-hgx", chips=8)
    assert metrics(at)["B* without KV"] == f"{pooled.balance(dep, [4096]).balance_batch:,.0f}"


def test_a_custom_model_in_the_url_is_restored() -> None:
    text = (HF_CONFIGS / "mistral.json").read_text()
    at = run_app({"model": "custom", "cfg": encode_config(text), "system": "h100-hgx", "chips": "1"})
    ok(at)
    assert at.text_area(key="serving.config").value == text
    dep = deployment(load_config_file(HF_CONFIGS / "mistral.json"), "h100-hgx", chips=1)
    assert metrics(at)["Latency floor"] == fmt.seconds(pooled.latency_floor_s(dep))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("malformed.json", "config.json is not valid JSON"),
        ("missing_field.json", "field 'hidden_size' is missing"),
        ("unsupported.json", "unknown model_type 'mamba'"),
    ],
)
def test_a_bad_pasted_config_shows_the_error_and_the_app_goes_on(name: str, expected: str) -> None:
    at = _custom(run_app())
    at.text_area(key="serving.config").set_value((HF_CONFIGS / name).read_text()).run()
    ok(at)
    assert any(expected in e for e in errors(at)), errors(at)
    assert not at.metric
    # the app still answers: back to a catalog model
    at.selectbox(key="serving.model").set_value("llama-3.1-8b").run()
    ok(at)
    assert errors(at) == [] and at.metric


def test_a_binary_upload_is_refused_with_a_message() -> None:
    at = _custom(run_app())
    at.file_uploader(key="serving.upload").upload("config.json", b"\xff\xfe\x00garbage", "application/json")
    at.run()
    ok(at)
    assert any("not UTF-8 text" in e for e in errors(at)), errors(at)


# --------------------------------------------------------------------------- bad input and impossible plans


def test_out_of_range_url_values_are_reported_and_defaults_used() -> None:
    at = run_app({"batch": "0", "context": "lots", "chips": "-3", "model": "deepsek-v3", "kv": "fp7"})
    ok(at)
    msgs = "\n".join(errors(at))
    assert "batch: got '0'; allowed: a whole number from 1 to 65,536" in msgs
    assert "context: got 'lots'" in msgs
    assert "chips: got '-3'" in msgs
    assert "unknown model 'deepsek-v3'; did you mean deepseek-v3" in msgs
    assert "unknown kv precision 'fp7'" in msgs
    assert len(plots(at)) == 4  # the default view is still drawn
    assert at.query_params["batch"] == "256"  # the URL now holds what is shown
    at.run()
    assert errors(at) == []  # the message belonged to the bad link, not to the page


def test_a_compute_precision_the_chip_lacks_is_refused() -> None:
    at = run_app({"system": "h100-hgx", "model": "llama-3.1-8b", "compute": "fp4"})
    ok(at)
    assert any("h100-sxm has no fp4 compute peak" in e for e in errors(at)), errors(at)
    assert at.metric


def test_a_default_precision_the_chip_lacks_is_explained() -> None:
    """Rubin lists fp8 and fp4 peaks only: a bf16 model needs an explicit compute choice."""
    at = run_app({"system": "rubin-nvl144", "model": "llama-3.1-8b"})
    ok(at)
    assert any("rubin has no bf16 compute peak" in e for e in errors(at)), errors(at)
    at.selectbox(key="serving.compute").set_value("fp8").run()
    ok(at)
    assert errors(at) == [] and at.metric


def test_a_model_that_does_not_fit_says_by_how_much() -> None:
    at = run_app({"model": "llama-3.1-405b", "system": "h100-hgx", "chips": "1"})
    ok(at)
    dep = deployment("llama-3.1-405b", "h100-hgx", chips=1)
    short_gb = (dep.weight_bytes_per_chip - dep.usable_bytes_per_chip) / 1e9
    assert any(f"short by {short_gb:.1f} GB" in e for e in errors(at)), errors(at)
    specs = plots(at)
    assert len(specs) == 1 and specs[0]["layout"]["title"]["text"].startswith("Memory of one chip: over by")


def test_a_batch_beyond_memory_warns() -> None:
    at = run_app({"model": "llama-3.1-70b", "system": "h100-hgx", "batch": "65536"})
    ok(at)
    dep = deployment("llama-3.1-70b", "h100-hgx")
    mb = dep.max_concurrency([4096])[0]
    assert any(f"largest batch that fits is {mb:,.0f}" in w.value for w in at.warning)


# --------------------------------------------------------------------------- sharing and export


def test_a_state_round_trips_through_the_url() -> None:
    state = ServingState(
        model="mixtral-8x7b",
        system="h200-hgx",
        chips=2,
        kv="fp8",
        batch=32,
        context=32768,
        usd_per_chip_hour=3.5,
    )
    at = run_app(serving_query(state))
    ok(at)
    assert errors(at) == []
    assert dict(at.query_params) == serving_query(state)
    dep = deployment("mixtral-8x7b", "h200-hgx", chips=2, kv="fp8", usd_per_chip_hour=3.5)
    p = point(dep, 32, 32768)
    assert metrics(at)["$ per M output tokens"] == fmt.usd(float(p.usd_per_million_output_tokens[0, 0]))


def test_tables_and_plots_offer_csv_json_and_png() -> None:
    at = run_app()
    ok(at)
    labels = {b.label for b in at.get("download_button")}
    assert {"CSV", "JSON", "full result (JSON)", "Plots as PNG (matplotlib)", "Plot data (JSON)"} <= labels
    table = at.dataframe[0].value
    assert list(table["batch"]) == [1, 8, 32, 128, 512, 1024, 2048, 4096, 8192]


def _shown(at: AppTest, index: int) -> Any:
    """The cells of a table as the page shows them (its Styler's display values)."""
    import pyarrow as pa

    styler = at.dataframe[index].proto.arrow_data.styler
    return pa.ipc.open_stream(styler.display_values).read_all().to_pandas()


def test_tables_show_units_not_raw_si_fractions() -> None:
    at = run_app({"model": "llama-3.1-8b", "system": "h100-hgx", "context": "4096"})
    ok(at)
    data, shown = at.dataframe[0].value, _shown(at, 0)
    # the data behind the table (and its downloads) stays in SI units
    row = data.iloc[-1]
    assert 0 < row["mfu"] < 1 and row["step_s"] < 1
    cells = shown.iloc[-1]
    assert cells["mfu"] == f"{row['mfu']:.1%}"
    assert cells["step_s"] == fmt.seconds(row["step_s"])
    assert cells["usd_per_million_output_tokens"] == fmt.usd(row["usd_per_million_output_tokens"]) + "/M"
    assert cells["batch"] == f"{row['batch']:,.0f}"
    for col in shown.columns:  # no bare fraction such as 0.6431 anywhere
        assert not any(re.fullmatch(r"0\.\d+", str(v)) for v in shown[col]), col


def test_the_page_shows_where_the_time_goes_operator_by_operator() -> None:
    """The second table is the selected point's operators, read from the analysis: their
    times add up (with overhead and exposed communication, both 0 on the ideal chip) to the
    step the page reports."""
    at = run_app()
    ok(at)
    ops = at.dataframe[1].value
    assert {"attention", "attention_qkv", "lm_head"} <= set(ops["name"])
    state = ServingState()
    dep = deployment(state.model, state.system)
    p = point(dep, state.batch, state.context)
    assert float(ops["time_s"].sum()) == pytest.approx(float(p.step_s[0, 0]), rel=1e-9)
    assert list(ops["time_s"]) == sorted(ops["time_s"], reverse=True)
