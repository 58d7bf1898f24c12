"""Simulate page: a stream of requests through a replica (or an xPyD fleet) under a runtime's
caps; TTFT, TPOT, ITL and end-to-end percentiles, the share of requests meeting the SLO and the
goodput, prefix reuse, and on request the attainment curve over arrival rates.

Every number comes from :func:`rackmath.analyses.deploy.slo.serve` (the request simulator of
``rackmath simulate``, its per-request results, :func:`~rackmath.analyses.deploy.slo.attainment`)
and :func:`rackmath.analyses.deploy.rate_search.search`; this module lays them out.
"""

from __future__ import annotations

from functools import lru_cache

import streamlit as st

from rackmath.analyses.deploy.rate_search import MIN_MEASURED, SloSearch, search
from rackmath.analyses.deploy.slo import Fleet, Limit, Slo, SloRun, Workload, parse_trace, serve
from rackmath.analyses.serving.speculative import MAX_SPEC_DEPTH
from rackmath.catalog import loader as catalog
from rackmath.catalog.runtimes import runtimes
from rackmath.errors import RackmathError
from rackmath.specs.workload import LengthDist
from rackmath.units import MS
from rackmath.views import fmt
from rackmath.views.figures import planner_charts
from rackmath.web import components as ui
from rackmath.web.commands import simulate_command
from rackmath.web.state.planner import (
    EFFICIENCY_MODES,
    MAX_WEB_REQUESTS,
    SimulateState,
    parse_simulate_query,
    simulate_query,
)

PAGE = "simulate"
#: The trace uploaded in this session (not in the URL: it can be large).
TRACE_KEY = ui.key(PAGE, "trace_text")


def _fleet(state: SimulateState) -> Fleet:
    return Fleet(
        catalog.model(state.model),
        catalog.system(state.system),
        state.plan,
        runtime=state.runtime,
        efficiency=state.efficiency,
        mtp=state.mtp,
        acceptance=state.acceptance,
        disaggregated=state.disaggregated,
        prefill_plan=state.prefill_plan,
    )


def _workload(state: SimulateState, trace: str | None) -> Workload:
    hit = state.prefix_hit or None
    if trace is not None:
        return Workload(rate_per_s=None, trace=parse_trace(trace, "the uploaded trace"), prefix_hit=hit)
    return Workload(
        state.rate_per_s,
        state.requests,
        LengthDist.parse(state.input, "Prompt lengths"),
        LengthDist.parse(state.output, "Output lengths"),
        state.seed,
        prefix_hit=hit,
    )


def page_slo(state: SimulateState) -> Slo:
    """The page's SLO: TTFT and TPOT limits on each request, at the stated attainment."""
    return Slo((Limit("ttft", state.ttft_ms * MS), Limit("tpot", state.tpot_ms * MS)), state.attainment)


@lru_cache(maxsize=32)
def simulated(state: SimulateState, trace: str | None = None) -> SloRun:
    """The run ``state`` describes (``trace``: an uploaded trace's text instead of the Poisson stream)."""
    return serve(_fleet(state), _workload(state, trace), page_slo(state))


@lru_cache(maxsize=8)
def searched(state: SimulateState) -> SloSearch:
    """The attainment curve and the highest rate meeting the page's SLO (Poisson workloads)."""
    return search(_fleet(state), _workload(state, None), page_slo(state))


def _controls(initial: SimulateState) -> tuple[SimulateState, str | None]:
    ui.init_state(
        PAGE,
        {
            **initial.__dict__,
            "disaggregated": initial.disaggregated or "",
            "prefill_plan": initial.prefill_plan or "",
            "curve": bool(initial.curve),
        },
    )
    with st.sidebar:
        st.header("Deployment")
        model = st.selectbox("Model", list(catalog.models()), key=ui.key(PAGE, "model"))
        system = st.selectbox("System", list(catalog.systems()), key=ui.key(PAGE, "system"))
        plan = st.text_input(
            "Parallel plan of a replica", key=ui.key(PAGE, "plan"), help="e.g. tp=8 or dp=8,ep=8"
        )
        runtime = st.selectbox(
            "Runtime profile",
            list(runtimes()),
            key=ui.key(PAGE, "runtime"),
            format_func=lambda r: f"{runtimes()[r].name} {runtimes()[r].version}",
            help="its sequence cap, token budget, chunked prefill, scheduler policy and KV memory share",
        )
        efficiency = st.radio(
            "Efficiency",
            EFFICIENCY_MODES,
            key=ui.key(PAGE, "efficiency"),
            horizontal=True,
            format_func=lambda m: "kernel-grounded" if m == "kernel" else "pure roofline",
        )
        st.header("Features")
        mtp = st.number_input(
            "MTP draft tokens per step (0 = off)",
            min_value=0,
            max_value=MAX_SPEC_DEPTH,
            step=1,
            key=ui.key(PAGE, "mtp"),
        )
        acceptance = st.slider(
            "Acceptance rate per draft position", 0.0, 1.0, step=0.05, key=ui.key(PAGE, "acceptance"),
            disabled=mtp == 0,
        )  # fmt: skip
        disaggregated = st.text_input(
            "Disaggregation (xPyD, empty = one replica)",
            key=ui.key(PAGE, "disaggregated"),
            placeholder="e.g. 2P1D",
            help="x prefill replicas and y decode replicas of the plan; the KV moves between them",
        )
        prefill_plan = st.text_input(
            "Prefill replicas' plan (empty = the same plan)",
            key=ui.key(PAGE, "prefill_plan"),
            disabled=not disaggregated.strip(),
        )
    st.subheader("Workload and SLO")
    cols = st.columns(4)
    rate = ui.bounded_number(
        PAGE, "rate_per_s", "Arrival rate (requests/s)", where=cols[0], step=1.0, format="%g"
    )
    requests = cols[1].number_input(
        "Requests", min_value=1, max_value=MAX_WEB_REQUESTS, step=500, key=ui.key(PAGE, "requests")
    )
    input_len = cols[2].text_input(
        "Prompt lengths", key=ui.key(PAGE, "input"), help="N, uniform:LO-HI or lognormal:MEAN tokens"
    )
    output_len = cols[3].text_input(
        "Output lengths", key=ui.key(PAGE, "output"), help="N, uniform:LO-HI or lognormal:MEAN tokens"
    )
    cols = st.columns(4)
    ttft = ui.bounded_number(PAGE, "ttft_ms", "TTFT limit (ms, queueing included)", where=cols[0], step=100.0)
    tpot = ui.bounded_number(PAGE, "tpot_ms", "TPOT limit (ms)", where=cols[1], step=5.0)
    attain = ui.bounded_number(
        PAGE, "attainment", "Attainment (share meeting both)", where=cols[2], step=0.01, format="%g"
    )
    hit = cols[3].slider(
        "Prefix-cache hit rate", 0.0, 1.0, step=0.05, key=ui.key(PAGE, "prefix_hit"),
        help="the share of each prompt found cached: its prefill is skipped, its KV still held",
    )  # fmt: skip
    more = st.columns(3)
    seed = more[0].number_input("Seed", min_value=0, max_value=2**31, step=1, key=ui.key(PAGE, "seed"))
    curve = more[1].checkbox(
        "Attainment curve and highest rate", key=ui.key(PAGE, "curve"),
        help="probe 16 arrival rates in steady state (warm-up excluded): a few seconds",
    )  # fmt: skip
    upload = more[2].file_uploader(
        "…or a trace (CSV or Mooncake JSONL)", type=["csv", "jsonl"], key=ui.key(PAGE, "upload"),
        help="CSV rows of arrival_s,input_tokens,output_tokens, or JSON lines of timestamp (ms), "
        "input_length, output_length, hash_ids (as `rackmath simulate --trace`)",
    )  # fmt: skip
    trace = upload.getvalue().decode("utf-8", errors="replace") if upload is not None else None
    state = SimulateState(
        model=str(model),
        system=str(system),
        plan=str(plan),
        runtime=str(runtime),
        rate_per_s=float(rate),
        requests=int(requests),
        input=str(input_len),
        output=str(output_len),
        seed=int(seed),
        mtp=int(mtp),
        acceptance=float(acceptance),
        disaggregated=disaggregated.strip().upper() or None,
        prefill_plan=prefill_plan.strip() or None,
        ttft_ms=float(ttft),
        tpot_ms=float(tpot),
        efficiency=str(efficiency),
        attainment=float(attain),
        prefix_hit=float(hit),
        curve=int(bool(curve)),
    )
    return state, trace


def render_simulate_page() -> None:
    """The Simulate page: the fleet in the sidebar, the workload and SLO above, the results."""
    st.title("Simulate")
    st.caption(
        "Requests arrive (Poisson, or a recorded trace) and a replica serves them as its runtime "
        "would: continuous batching under its caps, chunked prefill, a KV pool. TTFT is counted from "
        "arrival, so it includes queueing; a request meets the SLO when its TTFT and TPOT are both "
        "within their limits, and goodput counts those requests per second."
    )
    initial, errors = parse_simulate_query(st.query_params.to_dict())
    state, trace = _controls(initial)
    ui.sync_url(simulate_query(state))
    ui.show_url_errors(PAGE, errors)
    try:
        run = simulated(state, trace)
    except RackmathError as exc:
        ui.show_error(exc)
        ui.cli_command(simulate_command(state, trace is not None))
        return
    _numbers(run, state)
    if state.curve and trace is None:
        try:
            _curve(searched(state))
        except RackmathError as exc:
            ui.show_error(exc)
    left, right = st.columns(2)
    with left:
        ui.figure(PAGE, "ttft", planner_charts.slo_distribution(run, "ttft"), "simulate")
    with right:
        ui.figure(PAGE, "tpot", planner_charts.slo_distribution(run, "tpot"), "simulate")
    _setup(run)
    ui.downloads(PAGE, "simulate", [run.result.to_dict()], run.to_dict())
    ui.cli_command(simulate_command(state, trace is not None))


def _numbers(run: SloRun, state: SimulateState) -> None:
    r, a = run.result, run.attainment
    assert a is not None
    st.markdown(f"##### SLO attainment over {a.requests:,} requests")
    cols = st.columns(5)
    cols[0].metric(f"TTFT ≤ {fmt.seconds(state.ttft_ms * MS)}", fmt.pct(a.met_frac["ttft"]))
    cols[1].metric(f"TPOT ≤ {fmt.seconds(state.tpot_ms * MS)}", fmt.pct(a.met_frac["tpot"]))
    cols[2].metric(
        "Both (SLO met)",
        fmt.pct(a.all_frac or 0.0),
        help=f"the SLO asks {state.attainment:g} of the requests; {'met' if a.meets_slo else 'missed'} here",
    )
    cols[3].metric(
        "Goodput (requests/s)", f"{a.goodput_requests_per_s:,.3g}", help="requests meeting both, per second"
    )
    cols[4].metric("Goodput (output tokens/s)", f"{a.goodput_output_tokens_per_s:,.0f}")
    st.markdown("##### Latency percentiles")
    names = (
        ("ttft", "TTFT (queueing included)"),
        ("tpot", "TPOT"),
        ("itl", "ITL (every gap between tokens)"),
        ("e2e", "end to end"),
    )
    st.table(
        [
            {"": name, **{f"p{q}": fmt.seconds(r.metrics[f"{m}_p{q}"] or float("nan")) for q in (50, 90, 99)}}
            for m, name in names
        ],
        border="horizontal",
        hide_index=True,
    )
    cols = st.columns(5)
    offered = "trace" if r.rate_per_s is None else f"{r.rate_per_s:,.3g}"
    cols[0].metric("Offered (requests/s)", offered)
    cols[1].metric("Served (requests/s)", f"{r.requests_per_s:,.3g}")
    cols[2].metric("Output tokens/s", f"{r.output_tokens_per_s:,.0f}")
    cols[3].metric("Mean decode batch", f"{r.mean_decode_batch:,.1f}")
    hit = "-" if r.prefix_hit_frac is None else fmt.pct(r.prefix_hit_frac)
    cols[4].metric("Prefix-cache hits", hit, help="share of prompt tokens found cached (prefill skipped)")
    if run.tokens_per_step > 1:
        st.caption(
            f"MTP: {state.mtp} draft tokens a step at acceptance {state.acceptance:g} yield "
            f"{run.tokens_per_step:.3g} tokens a step on average "
            "(the expected value; see analyses.deploy.slo)."
        )


def _curve(found: SloSearch) -> None:
    st.markdown("##### Attainment against the arrival rate")
    best = (
        "no rate probed meets it" if found.best is None else f"at most {found.best.rate_per_s:.3g} requests/s"
    )
    st.caption(
        f"Each rate is a steady-state probe (a warm-up of two request lifetimes not counted, then at least "
        f"{MIN_MEASURED:,} measured requests); the SLO at attainment {found.slo.attainment_frac:g}: {best}."
    )
    ui.figure(PAGE, "curve", planner_charts.attainment_curve(found), "simulate")


def _setup(run: SloRun) -> None:
    s = run.setup
    with st.expander("The replica as the runtime runs it"):
        pools = [("decode", s["decode"]), ("prefill", s["prefill"])] if "decode" in s else [("replica", s)]
        for name, pool in pools:
            rt = pool["runtime"]
            st.markdown(
                f"- **{name}**: {pool['deployment']['chips']} chips, plan {pool['deployment'].get('plan')}; "
                f"{rt['name']} {rt['version']}: {rt['max_seqs']:,} sequences, {rt['max_tokens']:,} tokens a "
                f"step, chunk {rt['chunk_tokens']:,}; KV pool {rt['kv_pool_tokens']:,.0f} tokens "
                f"({rt['kv_memory_frac']:g} of {rt['kv_memory_basis']} memory); policy {rt['policy']}"
            )
        if run.kv_tier:
            st.markdown(f"- KV moves over the {run.kv_tier} network")
