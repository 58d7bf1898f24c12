"""SLO attainment and goodput: the simulator against queueing closed forms, the benchmark
clients' metric definitions traced by hand, attainment's invariants, the steady-state probe, the
docs' worked attainment curve recomputed from the per-request times."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackmath.analyses.deploy import rate_search, slo
from rackmath.analyses.deploy import simulate as sim
from rackmath.catalog.loader import model as catalog_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.core import requests as rq
from rackmath.core import simulation
from rackmath.errors import InputError
from rackmath.specs.workload import LengthDist, Requests, check_trace

S = 0.01  # a constant step, seconds
ONE_AT_A_TIME = rq.Limits(max_seqs=1, max_tokens=10**6, chunk_tokens=10**6, kv_tokens=1e9)


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize(("rho", "tol"), [(0.3, 0.03), (0.5, 0.04), (0.7, 0.06)])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho: float, tol: float) -> None:
    # one sequence at a time, one-token outputs, a constant 10 ms step: M/D/1, whose mean wait
    # is rho s / (2 (1 - rho)): 2.14, 5 and 11.7 ms at rho 0.3, 0.5, 0.7. 1e5 requests (seed 1);
    # the tolerance is about 2.5 standard errors of the mean wait at that load
    rate = rho / S
    assert simulation.md1_mean_wait_s(rate, S) == pytest.approx(rho * S / (2 * (1 - rho)))
    reqs = rq.poisson_requests(rate, 100_000, LengthDist("fixed", 10), LengthDist("fixed", 1), seed=1)
    run = rq.simulate(reqs, rq.StepTable.constant(S), ONE_AT_A_TIME)
    assert float(np.mean(run.ttft_s - S)) == pytest.approx(
        float(simulation.md1_mean_wait_s(rate, S)), rel=tol
    )


@pytest.mark.parametrize(("rho", "tol"), [(0.3, 0.03), (0.5, 0.04), (0.7, 0.06)])
def test_mm1_mean_wait_matches_pollaczek_khinchine(rho: float, tol: float) -> None:
    # a step of 10 us per prompt token and geometric prompts of mean 1,000 tokens: exponential
    # service of mean 10 ms (the geometric's C^2 = 1 - 1/1000), so M/M/1: W = rho E[S] / (1 - rho)
    rate, n = rho / S, 100_000
    arrivals = simulation.poisson_arrivals_s(rate, (n + 10 * math.sqrt(n) + 20) / rate, 1)[:n]
    prompt = np.random.default_rng(11).geometric(1 / 1000, size=n).astype(np.int64)
    grid = np.array([0.0, 2e6])
    table = rq.StepTable(np.zeros(1), grid, np.ones(1), (1e-5 * grid)[None, :, None])
    run = rq.simulate(Requests(arrivals, prompt, np.ones(n, np.int64)), table, ONE_AT_A_TIME)
    wait = float(np.mean(run.ttft_s - 1e-5 * prompt))
    assert simulation.mm1_mean_wait_s(rate, S) == pytest.approx(rho * S / (1 - rho))
    assert wait == pytest.approx(float(simulation.mm1_mean_wait_s(rate, S)), rel=tol)


def test_a_fixed_batch_makes_batch_tokens_a_step() -> None:
    # 32 requests at t = 0 (100 in, 50 out), room for all: one step prefills every prompt (first
    # tokens at s), then 49 decode steps of 32 tokens each: finish 50 s, 1 + 49 steps, every
    # inter-token gap one step, the decode batch 32 in each of the 49 decode steps
    b, i, o = 32, 100, 50
    reqs = check_trace([0.0] * b, [i] * b, [o] * b)
    run = rq.simulate(reqs, rq.StepTable.constant(S), rq.Limits(64, 10_000, 10_000, 1e6))
    assert run.first_token_s == pytest.approx([S] * b)
    assert run.finish_s == pytest.approx([o * S] * b)
    assert run.steps == o and run.decode_seq_steps == b * (o - 1)
    assert run.decode_seq_steps / (run.steps - 1) == b  # tokens per decode step
    assert float(run.itl_weight.sum()) == b * (o - 1)
    assert run.itl_percentile_s(50) == pytest.approx(S) and run.itl_percentile_s(99) == pytest.approx(S)
    assert run.output_tokens_per_s == pytest.approx(b * o / (o * S))


# ----------------------------------------------------------------------------- definitions


def test_itl_pools_every_gap_and_tpot_is_the_mean_of_a_requests_gaps() -> None:
    # prefill-first (SGLang): A (0 s, 100 in, 3 out) first token at s; step 2 runs B's prompt only
    # (B arrived at 0.5 s), so A waits: B first at 2s; step 3 both decode (A: 3s, gap 2s; B: 3s,
    # gap s); step 4 A's last (4s, gap s). Gaps {2s: 1, s: 2}: p50 s, p99 2s. TPOT of A = 3s/2.
    rows = [(0.0, 100, 3), (0.5 * S, 50, 2)]
    lim = rq.Limits(64, 1000, 1000, 1e6, policy="prefill_first")
    run = rq.simulate(check_trace(*zip(*rows, strict=True)), rq.StepTable.constant(S), lim)
    assert run.finish_s == pytest.approx([4 * S, 3 * S])
    gaps: dict[float, float] = {}
    for g, w in zip(np.round(run.itl_gap_s / S, 9), run.itl_weight, strict=True):
        gaps[float(g)] = gaps.get(float(g), 0.0) + float(w)
    assert gaps == {1.0: 2.0, 2.0: 1.0}  # (3 - 1) + (2 - 1) gaps, the first tokens excluded
    assert run.itl_percentile_s(50) == pytest.approx(S) and run.itl_percentile_s(99) == pytest.approx(2 * S)
    assert run.tpot_s == pytest.approx([1.5 * S, S])  # (E2E - TTFT) / (O - 1)
    assert run.e2e_s - run.ttft_s == pytest.approx(run.tpot_s * np.array([2, 1]))


def test_weighted_percentile_by_hand() -> None:
    # values 1, 2, 3 with weights 1, 1, 2: half the weight is reached at 2, the 51st percentile at 3
    assert rq.weighted_percentile([3.0, 1.0, 2.0], [2.0, 1.0, 1.0], 50) == 2.0
    assert rq.weighted_percentile([3.0, 1.0, 2.0], [2.0, 1.0, 1.0], 51) == 3.0
    x = np.array([5.0, 1.0, 4.0, 2.0])
    assert rq.weighted_percentile(x, np.ones(4), 50) == float(np.percentile(x, 50, method="inverted_cdf"))


def test_slo_text_and_attainment_refuse_nonsense() -> None:
    s = slo.Slo.parse("ttft_p99=2s,tpot=50ms")
    assert [(lim.metric, lim.limit_s, lim.percentile) for lim in s.limits] == [
        ("ttft", 2.0, 99.0),
        ("tpot", 0.05, None),
    ]
    assert s.attainment_frac == slo.DEFAULT_ATTAINMENT  # a bare limit asks 0.99 unless stated
    assert slo.Slo.parse("ttft_p99=2s").attainment_frac is None  # the percentiles decide
    assert slo.Slo.parse("ttft=2s", 0.9).attainment_frac == 0.9
    for bad in (0.0, -0.5, 1.01, math.nan):
        with pytest.raises(InputError, match="--attainment"):
            slo.Slo.parse("ttft=2s", bad)
    with pytest.raises(InputError, match="itl with a percentile"):
        slo.Slo.parse("itl=50ms")


class _Times(rq.RequestTimes):
    def __init__(self, arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, out: np.ndarray) -> None:
        self.requests = Requests(arrival, np.ones(arrival.size, np.int64), out)
        self.first_token_s, self.finish_s = first, finish
        self.itl_gap_s, self.itl_weight = np.zeros(0), np.zeros(0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 5), st.floats(0.001, 3), st.floats(0, 5), st.integers(1, 50), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    st.floats(0.01, 3),
    st.floats(0.001, 0.5),
)
def test_goodput_never_exceeds_throughput(
    rows: list[tuple[float, float, float, int, bool]], ttft: float, tpot: float
) -> None:
    arrival = np.sort(np.array([r[0] for r in rows]))
    first = arrival + np.array([r[1] for r in rows])
    finish = np.where([r[4] for r in rows], first + np.array([r[2] for r in rows]), np.nan)
    out = np.array([r[3] for r in rows], np.int64)
    a = slo.attainment(_Times(arrival, first, finish, out), slo.Slo.parse(f"ttft={ttft}s,tpot={tpot}s"))
    assert a.goodput_requests_per_s <= a.requests_per_s + 1e-12
    assert a.goodput_output_tokens_per_s <= a.output_tokens_per_s + 1e-9
    assert a.all_frac is not None and a.all_frac <= min(a.met_frac.values())


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 0.9), st.floats(1.05, 3.0), st.floats(0.011, 0.2), st.integers(0, 5))
def test_attainment_never_rises_with_the_rate(rho: float, faster: float, limit: float, seed: int) -> None:
    # one request at a time at a constant step is a FIFO single server: with the same unit
    # arrivals scaled to each rate (the probes' common random numbers) every wait is monotone in
    # the rate (Lindley's recursion), so the share within a TTFT limit never rises
    def share(rate: float) -> float:
        reqs = rq.poisson_requests(rate, 2000, LengthDist("fixed", 10), LengthDist("fixed", 1), seed=seed)
        run = rq.simulate(reqs, rq.StepTable.constant(S), ONE_AT_A_TIME)
        return slo.attainment(run, slo.Slo.parse(f"ttft={limit}s")).met_frac["ttft"]

    rate = rho / S
    assert share(rate * min(faster, 0.99 / rho)) <= share(rate)


# ----------------------------------------------------------------------------- steady state


def test_a_probe_is_long_enough_for_the_outputs_and_skips_its_warm_up() -> None:
    # lifetimes of 10 s and 100 s at 5 requests/s: warm-up 2 L, window max(4 L, 2,000 / 5 s), tail 2 L
    short, long = rate_search.probe_window(10.0, 5.0), rate_search.probe_window(100.0, 5.0)
    assert (short.warmup_s, short.measure_s, short.tail_s) == (20.0, 400.0, 20.0)
    assert (long.warmup_s, long.measure_s, long.tail_s) == (200.0, 400.0, 200.0)
    # a window that would pass the probe's bound of arrivals shrinks (the warm-up does not) ...
    cut = rate_search.probe_window(10.0, 3000.0)
    assert cut.warmup_s == 20.0 and 3000.0 * cut.horizon_s == pytest.approx(rate_search.MAX_PROBE_REQUESTS)
    # ... down to one lifetime
    assert rate_search.probe_window(10.0, 5000.0).measure_s == 10.0


@pytest.fixture(scope="module")
def worked():  # type: ignore[no-untyped-def]
    """docs/serving-features.md's attainment curve: Llama 3.1 8B on one H100 under vLLM, pure roofline,
    2,000-token prompts and 300-token outputs, TTFT and TPOT within 500 ms and 15 ms for 99 % of
    the requests together."""
    fleet = slo.Fleet(catalog_model("llama-3.1-8b"), catalog_system("h100-hgx"), "tp=1", efficiency="pure")
    work = slo.Workload(1.0, 100, LengthDist.parse("2000", "i"), LengthDist.parse("300", "o"), 0)
    the_slo = slo.Slo.parse("ttft=500ms,tpot=15ms", 0.99)
    return fleet, work, the_slo, rate_search.search(fleet, work, the_slo)


def test_the_docs_attainment_curve_recounted_from_the_times(worked) -> None:  # type: ignore[no-untyped-def]
    fleet, work, _the_slo, found = worked
    assert found.best is not None
    above = [p for p in found.points if p.rate_per_s > found.best.rate_per_s]
    assert above and not above[0].attainment.meets_slo  # the next rate probed misses
    server = slo.build(fleet, work)
    for point in (found.best, above[0]):
        # the same probe by hand: its arrivals, its window, the requests counted with NumPy
        w = point.window
        n = math.ceil(point.rate_per_s * w.horizon_s)
        asked = work.poisson(point.rate_per_s, n)
        run = sim.run_requests(server.replica, asked, cutoff_s=w.horizon_s)
        a = asked.arrival_s
        measured = (a >= w.warmup_s) & (a < w.warmup_s + w.measure_s)
        tpot = (run.finish_s - run.first_token_s) / (asked.output_tokens - 1)
        good = measured & (run.ttft_s <= 0.5) & (tpot <= 0.015)  # NaN (unfinished) compares False
        assert point.attainment.requests == measured.sum() >= rate_search.MIN_MEASURED * 0.9
        assert point.attainment.all_frac == pytest.approx(good.sum() / measured.sum(), abs=1e-12)
        assert point.attainment.goodput_requests_per_s == pytest.approx(good.sum() / w.measure_s)
        assert a[measured].min() >= w.warmup_s  # the warm-up is not counted
    # the curve falls with the rate (a statistical statement on a batching replica: within 2 %)
    shares = [p.attainment.all_frac or 0.0 for p in found.points]
    assert all(later <= earlier + 0.02 for earlier, later in itertools.pairwise(shares))
    for p in found.points:
        assert p.attainment.goodput_requests_per_s <= p.attainment.requests_per_s + 1e-12
