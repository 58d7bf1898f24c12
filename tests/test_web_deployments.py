"""The Deployments page with AppTest: its numbers are the search's and the frontier's."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath.analyses.deploy import frontier, search
from rackmath.analyses.deploy.candidates import Workload
from rackmath.catalog import loader as catalog
from rackmath.views import fmt
from rackmath.web.state.deployments import DeploymentsState, deployments_query

SCRIPT = """
from rackmath.web.pages import guarded
from rackmath.web.page_deployments import render_deployments_page
guarded(render_deployments_page)()
"""
SMALL = DeploymentsState(
    model="llama-3.1-8b",
    systems=("h100-hgx", "b200-hgx"),
    precisions=("native",),
    traffic_tokens_per_s=20_000.0,
)


def run_page(state: DeploymentsState | None = None, **raw: str) -> AppTest:
    at = AppTest.from_string(SCRIPT, default_timeout=60)
    for k, v in {**(deployments_query(state) if state else {}), **raw}.items():
        at.query_params[k] = v
    return at.run()


def expected(state: DeploymentsState) -> search.SearchResult:
    return search.search(
        catalog.model(state.model),
        [catalog.system(s) for s in state.systems],
        Workload(
            state.traffic_tokens_per_s,
            input_len=state.input_len,
            output_len=state.output_len,
            ttft_s=None if state.ttft_ms is None else state.ttft_ms / 1e3,
            tpot_s=None if state.tpot_ms is None else state.tpot_ms / 1e3,
        ),
        precisions=state.precisions,
        max_chips=state.max_chips,
    )


def test_the_cheapest_fleet_is_the_searchs() -> None:
    at = run_page(SMALL)
    assert not at.exception
    assert [e.value for e in at.error] == []
    best = expected(SMALL).best
    assert best is not None
    m = {x.label: x.value for x in at.metric}
    assert m["System"] == best.system
    assert m["Plan"] == best.plan_text
    assert m["Chips"] == f"{best.chips} x {best.replicas}"
    assert m["$ per M output tokens"] == fmt.usd(best.fleet_usd_per_million_output_tokens)
    assert m["TPOT"] == fmt.seconds(best.tpot_s)
    assert dict(at.query_params) == deployments_query(SMALL)


def test_the_frontier_plot_is_the_pareto_result() -> None:
    import json

    at = run_page(SMALL)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    line = next(t for t in spec["data"] if str(t["name"]).startswith("frontier"))
    f = frontier.pareto(catalog.model("llama-3.1-8b"), catalog.system("h100-hgx"), precisions=("native",))
    assert line["x"] == [p.tokens_per_s_per_user for p in f.frontier]
    # the frontier runs from the most interactive point down: throughput per chip only rises
    assert len(line["y"]) > 2 and all(b >= a for a, b in zip(line["y"], line["y"][1:], strict=False))


def test_an_impossible_slo_says_what_binds_and_the_page_goes_on() -> None:
    at = run_page(SMALL)
    at.number_input(key="deployments.tpot_ms").set_value(0.5).run()
    assert not at.exception
    reason = expected(DeploymentsState(**{**SMALL.__dict__, "tpot_ms": 0.5})).infeasible_reason
    assert reason
    assert any("no deployment meets the SLOs" in e.value and reason in e.value for e in at.error)
    assert at.get("plotly_chart")  # the frontier is still drawn
    at.number_input(key="deployments.tpot_ms").set_value(50.0).run()
    assert [e.value for e in at.error] == [] and at.metric


def test_bad_url_values_are_reported() -> None:
    at = run_page(systems="h100-hgx,nope", precisions="fp3", traffic_tokens_per_s="-1", model="llama-3.1-8b")
    assert not at.exception
    msgs = "\n".join(e.value for e in at.error)
    assert "unknown system 'nope'" in msgs
    assert "precisions: got 'fp3'" in msgs
    assert "traffic_tokens_per_s: got '-1'" in msgs


def test_an_empty_search_space_is_explained() -> None:
    at = run_page(SMALL)
    at.multiselect(key="deployments.systems").set_value([]).run()
    assert not at.exception
    assert any("pick at least one system" in e.value for e in at.error)
