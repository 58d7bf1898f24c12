"""The Economics page with AppTest: every tab's numbers are the economics analyses' own.

Each test opens one tab (``tab=`` in the URL; only the open tab computes), moves a control
and checks what the page shows against the analysis called here independently.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import numpy as np
import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath.analyses.economics import caching, fast_mode, fleet, overtrain, prices, sparsity
from rackmath.analyses.serving import cache_tiers
from rackmath.api import deployment
from rackmath.catalog import economics as ce
from rackmath.core import scaling_laws as sl
from rackmath.errors import InputError
from rackmath.views import fmt
from rackmath.web import economics_views
from rackmath.web.state.economics import (
    ECONOMICS_TABS,
    EconomicsState,
    FleetTab,
    economics_query,
    parse_economics_query,
)

SCRIPT = """
from rackmath.web.pages import guarded
from rackmath.web.page_economics import render_economics_page
guarded(render_economics_page)()
"""
REFERENCE = ("deepseek-v3", "gb200-nvl72")


def run_page(**query: str) -> AppTest:
    at = AppTest.from_string(SCRIPT, default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def plots(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def trace(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A trace by name prefix, with Plotly's base64 typed arrays decoded."""

    def values(v: Any) -> Any:
        if isinstance(v, dict) and "bdata" in v:
            return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
        return v

    found = next(t for t in spec["data"] if str(t.get("name", "")).startswith(prefix))
    return {k: values(v) for k, v in found.items()}


def reference() -> Any:
    return deployment(*REFERENCE)


# --------------------------------------------------------------------------- what prices reveal


def test_prices_tab_is_the_roofline_ratio_and_the_long_context_reading() -> None:
    at = run_page()
    ok(at)
    assert errors(at) == []
    dep = reference()
    rr = prices.roofline_ratio(dep, 2000, 8192)
    m = metrics(at)
    assert m["Roofline $ per M output"] == fmt.usd(rr.usd_per_million_output_tokens)
    assert m["Roofline $ per M input"] == fmt.usd(rr.usd_per_million_input_tokens)
    assert m["Roofline output / input"] == f"{rr.output_over_input:.1f}x"
    assert m["Decode MFU"] == fmt.pct(rr.decode_mfu)
    lc = prices.long_context(ce.price("gemini-3.1-pro"), dep, batch=64)
    assert m["KV = compute at (len*)"] == f"{lc.crossover_context_tokens:,.0f} tokens"
    assert m["Price above cost everywhere"] == ("yes" if lc.above_cost_everywhere else "no")
    ratio, long = plots(at)
    bars = trace(ratio, "output price / input price")
    expected = {p.id: p.base.output_over_input for p in ce.prices().values()}
    assert dict(zip(bars["y"], bars["x"], strict=True)) == pytest.approx(expected)
    cost = trace(long, "cost per output token")
    np.testing.assert_allclose(cost["x"], lc.contexts)
    np.testing.assert_allclose(cost["y"], lc.cost_usd_per_million_output_tokens, rtol=1e-12)
    assert dict(at.query_params) == economics_query(EconomicsState())


def test_the_decode_batch_moves_the_ratio_and_the_url() -> None:
    at = run_page()
    before = metrics(at)["Roofline output / input"]
    at.number_input(key="economics.prices.batch").set_value(64).run()
    ok(at)
    rr = prices.roofline_ratio(reference(), 64, 8192)
    assert metrics(at)["Roofline output / input"] == f"{rr.output_over_input:.1f}x" != before
    assert at.query_params["prices.batch"] == "64"


# --------------------------------------------------------------------------- cache tiers


def test_cache_tiers_and_the_cheapest_by_retention_are_the_analysis() -> None:
    at = run_page(tab="caches")
    at.text_input(key="economics.caches.retentions").set_value("10s,5m,1h").run()
    ok(at)
    dep = reference()
    amort = 3 * 365 * 86400.0
    c = caching.cache_economics(
        dep,
        cache_tiers.default_tiers(dep, ce.memory_tiers(), amort),
        retentions_s=[10.0, 300.0, 3600.0],
        amortization_s=amort,
        price=ce.price("claude-opus-4.6"),
    )
    tiers = at.dataframe[0].value
    assert list(tiers["id"]) == [t.id for t in c.tiers]
    np.testing.assert_allclose(tiers["drain_time_s"], [t.drain_time_s for t in c.tiers], rtol=1e-12)
    by_retention = at.dataframe[1].value
    assert list(by_retention["retention_s"]) == [10.0, 300.0, 3600.0]
    assert list(by_retention["cheapest"]) == c.cheapest
    assert metrics(at)["Cheapest for 5 min"] == c.cheapest_at(300.0)
    recompute = trace(plots(at)[0], "recompute")
    assert recompute["y"][0] == pytest.approx(c.recompute_usd_per_token * 1e6)
    assert at.query_params["caches.retentions"] == "10s,5m,1h"


def test_a_bad_retention_is_one_message_and_the_tab_recovers() -> None:
    at = run_page(tab="caches")
    at.text_input(key="economics.caches.retentions").set_value("5x").run()
    ok(at)
    assert any("caches.retentions: got '5x'" in e for e in errors(at)), errors(at)
    assert at.text_input(key="economics.caches.retentions").value == "5x"  # the control stays
    at.text_input(key="economics.caches.retentions").set_value("5m").run()
    assert errors(at) == [] and plots(at)


# --------------------------------------------------------------------------- fast modes


def test_fast_mode_numbers_and_curve_follow_the_price_multiple() -> None:
    at = run_page(tab="fast")
    ok(at)
    dep = reference()
    default = fast_mode.report(dep, context=4096, price=ce.price("claude-opus-4.6"))
    assert default.deployment is not None
    assert metrics(at)["Fast batch at 6x"] == f"{default.deployment.fast_batch:,.0f}"
    at.number_input(key="economics.fast.price_multiple").set_value(3.0).run()
    ok(at)
    f = fast_mode.report(dep, context=4096, price=ce.price("claude-opus-4.6"), price_multiple=3.0)
    assert f.deployment is not None
    m = metrics(at)
    assert m["Fast batch at 3x"] == f"{f.deployment.fast_batch:,.0f}"
    assert m["Fast speed-up"] == f"{f.deployment.fast_speedup:.2f}x"
    assert m["Batch-1 ceiling"] == f"{f.deployment.ceiling_speedup:.1f}x"
    spec = plots(at)[0]
    curve = trace(spec, "deepseek-v3: batch")
    np.testing.assert_allclose(curve["x"], f.deployment.price_multiples, rtol=1e-12)
    np.testing.assert_allclose(curve["y"], f.deployment.speedups, rtol=1e-12)
    floor = trace(spec, "latency floor (batch 1)")
    assert floor["y"][0] == pytest.approx(f.deployment.ceiling_speedup)
    assert at.query_params["fast.price_multiple"] == "3.0"


# --------------------------------------------------------------------------- fleets

SMALL_FLEET = FleetTab(batch=256, loads="0.5,0.9", requests=300)


def test_fleet_sizing_train_and_simulation_are_the_analysis() -> None:
    state = EconomicsState(tab="fleet", fleet=SMALL_FLEET)
    at = run_page(**economics_query(state))
    ok(at)
    f = fleet.fleet(batch=256, step_s=0.015625, loads=[0.5, 0.9], requests=300)
    m = metrics(at)
    assert m["Replicas"] == f"{f.replicas:,}"
    assert m["Chips"] == f"{f.chips:,}"
    assert m["$ per M tokens"] == fmt.usd(f.usd_per_million_tokens)
    assert m["Worst, simulated"] == fmt.seconds(f.train.worst_latency_s)
    table = at.dataframe[0].value
    np.testing.assert_allclose(table["ttft_p99_s"], [p.ttft_p99_s for p in f.loads], rtol=1e-12)
    p99 = trace(plots(at)[0], "TTFT p99")
    np.testing.assert_allclose(p99["y"], [p.ttft_p99_s * 1e3 for p in f.loads], rtol=1e-12)


def test_fleet_step_times_from_the_references_roofline() -> None:
    state = EconomicsState(
        tab="fleet",
        model="llama-3.1-70b",
        system="h100-hgx",
        fleet=FleetTab(traffic_tokens_per_s=1e6, batch=64, step_source="roofline", loads="0.5", requests=200),
    )
    at = run_page(**economics_query(state))
    ok(at)
    dep = deployment("llama-3.1-70b", "h100-hgx")
    f = fleet.fleet(traffic_tokens_per_s=1e6, batch=64, deployment=dep, loads=[0.5], requests=200)
    assert metrics(at)["Step time"] == fmt.seconds(f.step_s)
    assert metrics(at)["Replicas"] == f"{f.replicas:,}"
    at.number_input(key="economics.fleet.batch").set_value(100_000).run()
    ok(at)
    assert any("at most" in e and "fit in memory" in e for e in errors(at)), errors(at)


# --------------------------------------------------------------------------- over-training, sparsity


def test_overtraining_chain_follows_every_input() -> None:
    at = run_page(tab="overtrain")
    at.number_input(key="economics.overtrain.params_billions").set_value(70.0)
    at.number_input(key="economics.overtrain.rl_efficiency_frac").set_value(0.5).run()
    ok(at)
    r = overtrain.overtrain(
        params=70e9,
        tokens_per_s=50e6,
        duration_s=60 * 86400.0,
        coefficients=sl.ComputeCoefficients(rl=3.0, rl_efficiency=0.5),
    )
    m = metrics(at)
    assert m["Pre-training tokens D_pre"] == f"{r.pretrain_tokens:.3g}"
    assert m["RL tokens D_RL"] == f"{r.rl_tokens:.3g}"
    assert m["Over-trained"] == f"{r.overtraining_factor:,.0f}x"
    assert m["Exact optimum N"] == fmt.count(r.optimum_params)
    assert trace(plots(at)[0], "equal thirds")["x"][0] == pytest.approx(70e9)
    assert at.query_params["overtrain.params_billions"] == "70.0"


def test_sparsity_rows_and_costs_are_the_study() -> None:
    at = run_page(tab="sparsity")
    at.text_input(key="economics.sparsity.sparsities").set_value("1,8,32")
    at.number_input(key="economics.sparsity.users").set_value(500).run()
    ok(at)
    s = sparsity.sparsity_study(reference(), sparsities=[1, 8, 32], users=500)
    table = at.dataframe[0].value
    np.testing.assert_allclose(table["chips"], [r.chips for r in s.rows])
    np.testing.assert_allclose(
        table["usd_per_million_tokens_at_users"],
        [r.usd_per_million_tokens_at_users for r in s.rows],
        rtol=1e-12,
    )
    cost = trace(plots(at)[0], "with 500 users")
    np.testing.assert_allclose(cost["y"], [r.usd_per_million_tokens_at_users for r in s.rows], rtol=1e-12)


# --------------------------------------------------------------------------- errors, URL, exports


def test_a_reference_that_does_not_fit_is_reported_and_other_tabs_work() -> None:
    at = run_page(system="h100-hgx")  # DeepSeek-V3's 671 GB of fp8 weights on 8 x 80 GB
    ok(at)
    assert any("does not fit" in e for e in errors(at)), errors(at)
    at.session_state["economics.tab"] = ECONOMICS_TABS["overtrain"]
    at.run()
    ok(at)
    assert errors(at) == [] and metrics(at)["Over-trained"] == "130x"
    assert at.query_params["tab"] == "overtrain"


def test_bad_url_values_are_reported_and_defaults_used() -> None:
    at = run_page(**{"tab": "nope", "fleet.batch": "0", "prices.long_price": "gpt-5", "model": "gpt-9"})
    ok(at)
    msgs = "\n".join(errors(at))
    assert "tab: got 'nope'" in msgs
    assert "prices.long_price: got 'gpt-5'" in msgs
    assert "unknown model 'gpt-9'" in msgs
    assert "Roofline output / input" in metrics(at)  # the default tab, drawn


def test_hidden_tabs_keep_their_state_in_the_url() -> None:
    state = EconomicsState(tab="overtrain", fleet=SMALL_FLEET)
    at = run_page(**economics_query(state))
    ok(at)
    assert dict(at.query_params) == economics_query(state)
    assert parse_economics_query(dict(at.query_params)) == (state, [])


def test_url_parsing_refuses_what_the_analyses_would() -> None:
    _, errs = parse_economics_query(
        {"fleet.loads": ",".join(["0.5"] * 9), "overtrain.rl_efficiency_frac": "1.5"}
    )
    assert [type(e) for e in errs] == [InputError, InputError]
    assert "at most 8 numbers" in str(errs[0]) and "a number from 0.001 to 1" in str(errs[1])


def test_every_tab_offers_csv_json_and_the_matplotlib_png() -> None:
    for tab in ("prices", "overtrain"):
        at = run_page(tab=tab)
        labels = {b.label for b in at.get("download_button")}
        assert {"CSV", "JSON", "full result (JSON)", "Plots as PNG (matplotlib)"} <= labels, tab
    report = economics_views.prices_report(EconomicsState(), dt.date.today())  # what the PNG draws
    assert report.to_dict()["caching"]["lecture_mapping"] == {"300s": "flash", "3600s": "disk"}


def test_every_number_on_the_fleets_tab_is_bounded() -> None:
    """Loads, batch, output tokens, traffic, step time and price: each widget has a min and a
    max, the ones the URL parser enforces (as the CLI refuses out-of-range options)."""
    from rackmath.web.state.economics import ECONOMICS_BOUNDS

    at = run_page(tab="fleet")
    ok(at)
    inputs = {n.key: n for n in at.number_input}
    fleet_inputs = {k: n for k, n in inputs.items() if k.startswith("economics.fleet.")}
    assert len(fleet_inputs) >= 6
    for k, n in fleet_inputs.items():
        assert n.proto.has_min and n.proto.has_max, k
    lo, hi = ECONOMICS_BOUNDS["fleet.traffic_tokens_per_s"]
    traffic = inputs["economics.fleet.traffic_tokens_per_s"].proto
    assert (traffic.min, traffic.max) == (lo, hi)
    at.text_input(key="economics.fleet.loads").set_value("0.5,3").run()
    assert any("fleet.loads" in e and "1e-06 to 2" in e for e in errors(at))
