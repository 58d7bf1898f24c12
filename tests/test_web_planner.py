"""The capacity planner's views: Compare, Frontier and Simulate, and the analyses behind them.

Page numbers are checked against the Python API computed here; the analyses against
independent derivations (published points converted by hand, SLO attainment counted by hand,
MTP's request lengths and its bounds). None of these views existed on 1de8042."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath.analyses.deploy import frontier, slo
from rackmath.analyses.deploy.compare import Configuration, compare, explained
from rackmath.analyses.deploy.systems_frontier import published_points, systems_frontier
from rackmath.catalog import loader as catalog
from rackmath.core import requests as rq
from rackmath.specs.workload import LengthDist, Requests
from rackmath.units import SECONDS_PER_HOUR
from rackmath.views import fmt

MODEL70, H100, B200 = "llama-3.1-70b", "h100-hgx", "b200-hgx"


def run_page(page: str, **query: str) -> AppTest:
    script = f"""
from rackmath.web.pages import guarded
from rackmath.web.page_{page} import render_{page}_page
guarded(render_{page}_page)()
"""
    at = AppTest.from_string(script, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


# --------------------------------------------------------------------------- Compare


def test_compare_is_explain_at_each_point() -> None:
    a = Configuration(catalog.model(MODEL70), catalog.system(H100), 64, 8192, chips=8)
    b = Configuration(catalog.model(MODEL70), catalog.system(H100), 64, 8192, chips=8, plan="tp=8")
    c = compare([a, b])
    pa, pb = c.points
    e = explained(a)
    assert pa.step_s == float(e.decode.step_s[0, 0])
    assert pa.tokens_per_s_per_user == pytest.approx(1 / pa.step_s, rel=1e-15)
    assert pa.tokens_per_s_per_chip == pytest.approx(64 / pa.step_s / 8, rel=1e-12)
    assert pa.usd_per_million_output_tokens == float(e.decode.usd_per_million_output_tokens[0, 0])
    assert pa.joules_per_token == float(e.energy.joules_per_token[0, 0])
    # the memory a chip holds: weights + the batch's KV (64 x 8192 tokens over 8 chips) + activations
    # Llama 3.1 70B: 80 layers x 8 KV heads x 128 x (K, V) x 2 bytes = 327,680 bytes per token
    assert pa.kv_bytes_per_chip == pytest.approx(64 * 8192 * 80 * 8 * 128 * 2 * 2 / 8, rel=1e-12)
    activations = float(np.asarray(e.decode.memory.activation_bytes).ravel()[0]) / 8
    assert 0 < activations < 1e-3 * pa.memory_bytes_per_chip
    assert pa.memory_bytes_per_chip == pytest.approx(
        pa.weight_bytes_per_chip + pa.kv_bytes_per_chip + activations, rel=1e-12
    )
    # it fits against the capacity less the 10% reserve
    assert pa.usable_bytes_per_chip == pytest.approx(0.9 * pa.capacity_bytes_per_chip, rel=1e-12)
    assert pa.fits == (pa.memory_bytes_per_chip <= pa.usable_bytes_per_chip)
    # under a plan the step pays its communication: never faster than the ideal chip
    eb = explained(b)
    assert pb.step_s == float(eb.planned.step_s[0, 0]) and pb.step_s >= pa.step_s
    assert pb.plan == "tp=8" and pa.plan is None
    assert c.ratio("step_s") == (1.0, pytest.approx(pb.step_s / pa.step_s))


def test_the_compare_page_shows_each_configuration_side_by_side() -> None:
    at = run_page("compare", **{"b.system": B200, "b.batch": "256", "b.weights": "fp8"})
    assert [e.value for e in at.error] == []
    result = compare(
        [
            Configuration(catalog.model(MODEL70), catalog.system(H100), 64, 8192, chips=8),
            Configuration(catalog.model(MODEL70), catalog.system(B200), 256, 8192, chips=8, weights="fp8"),
        ]
    )
    table = at.table[0].value
    rows = {r["figure"]: r for r in table.to_dict("records")}
    for column, p in zip([c for c in table.columns if c != "figure"], result.points, strict=True):
        assert column == f"{p.label}: {p.model} on {p.chips} x {p.chip}"
        assert rows["step time"][column] == fmt.seconds(p.step_s)
        assert rows["$ per million output tokens"][column] == fmt.usd(p.usd_per_million_output_tokens) + "/M"
        assert rows["joules per output token"][column] == f"{p.joules_per_token:.3g} J"
        assert rows["memory per chip"][column] == fmt.nbytes(p.memory_bytes_per_chip)
        assert rows["tokens/s per GPU"][column] == f"{p.tokens_per_s_per_chip:,.0f} tokens/s"
    assert at.query_params["b.weights"] == "fp8"


def test_a_configuration_that_does_not_fit_is_said_so() -> None:
    at = run_page("compare", **{"b.batch": "65536"})
    [warning] = [w.value for w in at.warning]
    assert warning.startswith("B does not fit:")
    rows = {r["figure"]: r for r in at.table[0].value.to_dict("records")}
    assert list(rows["fits"].values())[1:] == ["yes", "no"]


def test_bad_compare_urls_name_the_field() -> None:
    at = run_page("compare", **{"a.system": "h100-hgxx", "b.batch": "0"})
    text = " ".join(e.value for e in at.error)
    assert "unknown system 'h100-hgxx'" in text and "b.batch: got '0'" in text
    assert at.table  # the defaults are compared


# --------------------------------------------------------------------------- Frontier


def test_each_systems_curve_is_rackmath_pareto_with_its_energy() -> None:
    model = catalog.model("llama-3.1-8b")
    systems = [catalog.system(s) for s in (H100, B200)]
    sf = systems_frontier(model, systems, max_chips=16)
    for curve, system in zip(sf.curves, systems, strict=True):
        direct = frontier.pareto(model, system, max_chips=16)
        assert [p.to_dict() for p in curve.frontier.frontier] == [p.to_dict() for p in direct.frontier]
        assert all(p.joules_per_token and p.joules_per_token > 0 for p in direct.frontier)
        # a frontier: faster for each user means fewer tokens per GPU
        x = [p.tokens_per_s_per_user for p in direct.frontier]
        y = [p.tokens_per_s_per_chip for p in direct.frontier]
        assert x == sorted(x, reverse=True) and y == sorted(y)


def test_published_points_are_converted_as_the_docstring_says() -> None:
    """Rows of measurements.yaml converted by hand: per user and per GPU."""
    systems = [catalog.system(s) for s in ("a100-hgx", H100, "h200-hgx")]
    pts = {p.row_id: p for p in published_points(catalog.model("llama-2-70b"), systems)}
    # row 5 (gpt-fast): 38.01 tokens/s per user at batch 1 on 4 A100s
    assert pts[5].tokens_per_s_per_user == 38.01 and pts[5].tokens_per_s_per_chip == pytest.approx(38.01 / 4)
    # row 14: a static batch of 64 at 1,094 output tokens/s on 2 H100s
    assert pts[14].tokens_per_s_per_user == pytest.approx(1094 / 64)
    assert pts[14].tokens_per_s_per_chip == pytest.approx(1094 / 2)
    price = catalog.system(H100).chip.price_usd_per_chip_hour.value_usd
    assert pts[14].usd_per_million_output_tokens == pytest.approx(price / SECONDS_PER_HOUR / 547 * 1e6)
    eight = {p.row_id: p for p in published_points(catalog.model("llama-3.1-8b"), [catalog.system(H100)])}
    # row 28: an 8 ms decode step at batch 1 on one H100; row 22: max throughput, no per-user figure
    assert eight[28].tokens_per_s_per_user == pytest.approx(125.0)
    assert eight[28].tokens_per_s_per_chip == pytest.approx(125.0)
    assert eight[22].tokens_per_s_per_user is None and eight[22].tokens_per_s_per_chip == pytest.approx(
        28836.77
    )
    assert 16 not in pts and 19 not in pts  # TTFT rows have no place on these axes


def _spec_traces(at: AppTest) -> list[list[dict[str, Any]]]:
    return [json.loads(el.proto.spec)["data"] for el in at.get("plotly_chart")]


def test_the_frontier_page_draws_every_system_and_the_published_points() -> None:
    at = run_page("frontier", model="llama-2-70b", systems="a100-hgx,h100-hgx,h200-hgx", max_chips="16")
    assert [e.value for e in at.error] == []
    throughput, cost, energy = _spec_traces(at)
    names = [t["name"] for t in throughput]
    for system in ("a100-hgx", "h100-hgx", "h200-hgx"):
        assert any(n.startswith(f"{system} (kernel-grounded") for n in names), names
    published = [n for n in names if n.startswith("published")]
    assert len(published) == 4  # rows 5, 6 (A100), 14 (H100), 20 (H200)
    assert len([n for n in (t["name"] for t in cost) if n.startswith("published")]) == 4
    assert not [t for t in energy if str(t["name"]).startswith("published")]  # no measured power
    table = next(d.value for d in at.dataframe if "row" in d.value.columns)
    assert sorted(table["row"]) == [5, 6, 14, 20]


def test_a_system_the_model_does_not_fit_on_is_named_not_drawn() -> None:
    at = run_page("frontier", model="llama-3.1-405b", systems="h100-hgx,tpu-v4-pod", max_chips="16")
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("tpu-v4-pod: no deployment fits") for w in warnings), warnings
    names = [t["name"] for t in _spec_traces(at)[0]]
    assert any(n.startswith("h100-hgx") for n in names) and not any(n.startswith("tpu-v4-pod") for n in names)


# --------------------------------------------------------------------------- Simulate


class _Times(rq.RequestTimes):
    def __init__(self, arrival: list[float], first: list[float], finish: list[float], out: list[int]) -> None:
        n = len(arrival)
        self.requests = Requests(np.array(arrival), np.ones(n, np.int64), np.array(out, np.int64))
        self.first_token_s = np.array(first, float)
        self.finish_s = np.array(finish, float)
        self.itl_gap_s = np.zeros(0)
        self.itl_weight = np.zeros(0)


def _slo(ttft: float | None, tpot: float | None, attainment: float = 0.99) -> slo.Slo:
    limits = [slo.Limit(m, v) for m, v in (("ttft", ttft), ("tpot", tpot)) if v is not None]
    return slo.Slo(tuple(limits), attainment)


def test_attainment_counts_requests_by_hand() -> None:
    # TTFT: 0.1, 0.5, 2.0, unfinished; TPOT: (1.1-0.1)/10 = 0.1, (0.6-0.5)/1 = 0.1, one token, -
    t = _Times([0.0, 0.0, 0.0, 0.0], [0.1, 0.5, 2.0, math.nan], [1.1, 0.6, 2.0, math.nan], [11, 2, 1, 5])
    a = slo.attainment(t, _slo(1.0, 0.1))
    assert a.met_frac["ttft"] == 0.5  # 0.1 and 0.5 s
    assert a.met_frac["tpot"] == 0.75  # 0.1, 0.1 and the one-token request
    assert a.all_frac == 0.5 and not a.meets_slo  # 0.5 < 0.99
    assert a.goodput_requests_per_s == pytest.approx(2 / 2.0)  # 2 requests over the 2 s run
    assert a.goodput_output_tokens_per_s == pytest.approx((11 + 2) / 2.0)
    assert a.requests_per_s == pytest.approx(3 / 2.0)  # three finished
    b = slo.attainment(t, _slo(0.3, 0.05))
    assert (b.met_frac["ttft"], b.met_frac["tpot"], b.all_frac) == (0.25, 0.25, 0.0)
    # the percentile form: p50 of TTFT within 0.5 s holds (2 of 4), p75 does not
    assert slo.attainment(t, slo.Slo.parse("ttft_p50=0.5s")).meets_slo
    assert not slo.attainment(t, slo.Slo.parse("ttft_p75=0.5s")).meets_slo


@given(
    st.lists(st.floats(0.001, 10), min_size=1, max_size=40),
    st.floats(0.001, 10),
    st.floats(0.001, 10),
)
def test_attainment_is_monotone_in_the_limit(ttfts: list[float], lo: float, hi: float) -> None:
    lo, hi = min(lo, hi), max(lo, hi)
    n = len(ttfts)
    t = _Times([0.0] * n, ttfts, [x + 1 for x in ttfts], [2] * n)
    a, b = slo.attainment(t, _slo(lo, None)), slo.attainment(t, _slo(hi, None))
    assert a.met_frac["ttft"] <= b.met_frac["ttft"]
    assert b.met_frac["ttft"] == sum(x <= hi for x in ttfts) / n
    both = slo.attainment(t, _slo(lo, 0.5))
    assert both.all_frac is not None and both.all_frac <= min(both.met_frac.values())
    assert both.goodput_requests_per_s <= both.requests_per_s


def test_mtp_runs_each_request_as_its_expected_steps_holding_its_whole_kv() -> None:
    reqs = Requests(np.zeros(3), np.array([100, 100, 100]), np.array([1, 2, 500]))
    m = slo.mtp_requests(reqs, 2.44)
    assert m.output_tokens.tolist() == [1, 2, 1 + math.ceil(499 / 2.44)]
    assert (m.cached_tokens + m.output_tokens).tolist() == [1, 2, 500]  # KV reserved for I + O


FLEET = slo.Fleet(catalog.model(MODEL70), catalog.system(H100), "tp=8")
WORK = slo.Workload(4.0, 300, LengthDist.parse("lognormal:2000", "i"), LengthDist.parse("300", "o"), 0)


def test_mtp_speeds_tokens_up_when_drafts_are_kept_and_never_when_none_are() -> None:
    plain = slo.serve(FLEET, WORK, _slo(1.0, 0.05))
    kept = slo.serve(
        slo.Fleet(FLEET.model, FLEET.system, "tp=8", mtp=2, acceptance=0.8), WORK, _slo(1.0, 0.05)
    )
    none = slo.serve(
        slo.Fleet(FLEET.model, FLEET.system, "tp=8", mtp=2, acceptance=0.0), WORK, _slo(1.0, 0.05)
    )
    assert kept.tokens_per_step == pytest.approx(1 + 0.8 + 0.64) and none.tokens_per_step == 1.0
    p50 = "tpot_p50"
    assert kept.result.metrics[p50] < plain.result.metrics[p50] < none.result.metrics[p50]
    # output tokens/s counts the tokens asked for, whatever the steps
    assert kept.result.output_tokens_per_s == pytest.approx(
        WORK.draw().output_tokens.sum() / kept.times.span_s, rel=1e-12
    )


def test_the_simulate_page_shows_the_apis_percentiles_and_attainment() -> None:
    at = run_page("simulate", requests="300", rate_per_s="4.0", output="300", ttft_ms="400", tpot_ms="25")
    run = slo.serve(FLEET, WORK, _slo(0.4, 0.025))
    m = metrics(at)
    a = run.attainment
    assert a is not None
    assert m["TTFT ≤ 400 ms"] == fmt.pct(a.met_frac["ttft"])
    assert m["TPOT ≤ 25 ms"] == fmt.pct(a.met_frac["tpot"])
    assert m["Both (SLO met)"] == fmt.pct(a.all_frac or 0.0)
    assert m["Goodput (requests/s)"] == f"{a.goodput_requests_per_s:,.3g}"
    rows = {r[""]: r for r in at.table[0].value.to_dict("records")}
    assert rows["TTFT (queueing included)"]["p99"] == fmt.seconds(run.result.metrics["ttft_p99"])
    assert rows["ITL (every gap between tokens)"]["p50"] == fmt.seconds(run.result.metrics["itl_p50"])
    charts = _spec_traces(at)
    limit = next(t for t in charts[0] if str(t["name"]).startswith("ttft limit 400 ms"))
    assert f"{a.met_frac['ttft']:.1%} of requests meet it" in limit["name"]


def test_mtp_with_disaggregation_is_refused_in_the_pages_words() -> None:
    at = run_page("simulate", requests="100", mtp="1", disaggregated="1P1D", plan="tp=4")
    [error] = [e.value for e in at.error]
    assert error.startswith("MTP with disaggregation") and "--" not in error


def test_a_trace_reads_as_the_cli_reads_it(tmp_path: Any) -> None:
    from rackmath.specs.workload import read_trace

    text = "arrival_s,input_tokens,output_tokens\n0,100,20\n0.5,2000,10\n1.25,300,1\n"
    path = tmp_path / "trace.csv"
    path.write_text(text)
    ours, cli = slo.parse_trace(text), read_trace(path)
    for name in ("arrival_s", "input_tokens", "output_tokens"):
        assert getattr(ours, name).tolist() == getattr(cli, name).tolist()
    with pytest.raises(Exception, match="sorted"):
        slo.parse_trace("1,10,10\n0,10,10\n")


# --------------------------------------------------------------------------- URLs


_letters = st.sampled_from(["llama-3.1-70b", "llama-3.1-8b", "deepseek-v3"])
_systems = st.sampled_from(["h100-hgx", "b200-hgx", "gb200-nvl72"])


@given(
    st.integers(2, 4),
    st.lists(
        st.tuples(
            _letters, _systems, st.integers(1, 65536), st.integers(1, 2**21), st.sampled_from([None, "tp=8"])
        ),
        min_size=4,
        max_size=4,
    ),
)
def test_a_compare_url_round_trips(count: int, configs: list[tuple[str, str, int, int, str | None]]) -> None:
    from rackmath.web.state.planner import CompareConfig, CompareState, compare_query, parse_compare_query

    state = CompareState(
        count, tuple(CompareConfig(m, s, 8, p, None, None, b, c) for m, s, b, c, p in configs)
    )
    parsed, errors = parse_compare_query(compare_query(state))
    assert errors == [] and parsed.count == count and parsed.shown == state.shown


@given(
    st.floats(0.001, 10_000),
    st.integers(1, 20_000),
    st.sampled_from(["500", "uniform:100-900", "lognormal:2000"]),
    st.integers(0, 16),
    st.sampled_from([None, "2P1D", "1P3D"]),
    st.floats(1.0, 600_000.0),
)
def test_a_simulate_url_round_trips(
    rate: float, requests: int, lengths: str, mtp: int, xpyd: str | None, ttft_ms: float
) -> None:
    from rackmath.web.state.planner import SimulateState, parse_simulate_query, simulate_query

    state = SimulateState(
        rate_per_s=rate, requests=requests, input=lengths, mtp=mtp, disaggregated=xpyd, ttft_ms=ttft_ms
    )
    assert parse_simulate_query(simulate_query(state)) == (state, [])


def test_a_frontier_url_round_trips_and_refuses_too_many_systems() -> None:
    from rackmath.web.state.planner import FrontierState, frontier_query, parse_frontier_query

    state = FrontierState(systems=("h100-hgx", "b200-hgx"), input_len=128, precision="fp8", max_chips=16)
    assert parse_frontier_query(frontier_query(state)) == (state, [])
    eight = ",".join(list(catalog.systems())[:8])
    parsed, [error] = parse_frontier_query({"systems": eight})
    assert "at most 7 systems" in str(error) and parsed.systems == FrontierState().systems


@pytest.mark.parametrize(
    ("query", "says"),
    [
        # explain's own refusals (analyses/serving/explain.check_request), in the page's words
        ({"b.context": "1000000"}, "at most 131,072 tokens (llama-3.1-70b's context window)"),
        ({"b.chips": "64"}, "at most 8 chips in one b200-hgx; give a Parallel plan (e.g. dp=..,ep=..)"),
        ({"b.plan": "tp=16"}, "tp"),
    ],
)
def test_what_explain_refuses_compare_refuses_in_one_line(query: dict[str, str], says: str) -> None:
    at = run_page("compare", **query)
    [error] = [e.value for e in at.error]
    assert says in error and "--" not in error
