"""The request-level simulator: hand-traced schedules, M/D/1, the step table, runtime caps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import model as catalog_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.catalog.runtimes import runtime, runtimes
from rackmath.core import architecture as arch
from rackmath.core import loads, simulation
from rackmath.core import requests as rq
from rackmath.core import roofline as rl
from rackmath.errors import InputError, UnknownIdError
from rackmath.specs.workload import LengthDist, Requests, check_trace

S = 0.01  # a constant step, seconds


def _reqs(rows: list[tuple[float, int, int]]) -> Requests:
    a, i, o = zip(*rows, strict=True)
    return check_trace(a, i, o)


def _limits(**kw: object) -> rq.Limits:
    base: dict[str, object] = {"max_seqs": 64, "max_tokens": 1000, "chunk_tokens": 1000, "kv_tokens": 1e6}
    base.update(kw)
    return rq.Limits(**base)  # type: ignore[arg-type]


def test_two_requests_traced_by_hand() -> None:
    # A: arrives 0, 100 in, 3 out. Step 1 (0..s) prefills A -> A's first token at s.
    # B: arrives 0.5 s (inside step 1), 50 in, 2 out; joins at s: step 2 = A decodes + B's prompt
    # -> A token 2 and B's first token at 2s; step 3: both decode -> A token 3, B token 2 at 3s.
    run = rq.simulate(_reqs([(0.0, 100, 3), (0.5 * S, 50, 2)]), rq.StepTable.constant(S), _limits())
    assert run.first_token_s == pytest.approx([S, 2 * S])
    assert run.finish_s == pytest.approx([3 * S, 3 * S])
    assert run.ttft_s == pytest.approx([S, 2 * S - 0.5 * S])
    assert run.tpot_s == pytest.approx([S, S])
    assert run.steps == 3


def test_chunked_prefill_takes_ceil_input_over_chunk_steps() -> None:
    # 2,500 prompt tokens at 1,000 per step: 3 steps to the first token, then 1 step per token
    run = rq.simulate(_reqs([(0.0, 2500, 4)]), rq.StepTable.constant(S), _limits(chunk_tokens=1000))
    assert run.first_token_s[0] == pytest.approx(3 * S)
    assert run.finish_s[0] == pytest.approx(6 * S)


def test_prefill_first_policy_stalls_decoding_for_a_prompt() -> None:
    # as the hand trace above, but step 2 carries B's prompt only: A's tokens 2 and 3 move one
    # step later (3s, 4s); B's second token comes with A's third at 4s... B decodes in step 3 too.
    rows = [(0.0, 100, 3), (0.5 * S, 50, 2)]
    run = rq.simulate(_reqs(rows), rq.StepTable.constant(S), _limits(policy="prefill_first"))
    assert run.first_token_s == pytest.approx([S, 2 * S])
    assert run.finish_s == pytest.approx([4 * S, 3 * S])


def test_kv_pool_admits_whole_requests_only() -> None:
    # 103 + 52 tokens > a 150-token pool: B waits until A has finished (3s), then 2 steps
    rows = [(0.0, 100, 3), (0.5 * S, 50, 2)]
    run = rq.simulate(_reqs(rows), rq.StepTable.constant(S), _limits(kv_tokens=150))
    assert run.first_token_s[1] == pytest.approx(4 * S)
    assert run.finish_s[1] == pytest.approx(5 * S)


def test_sequence_cap_queues_the_second_request() -> None:
    rows = [(0.0, 100, 3), (0.5 * S, 50, 2)]
    run = rq.simulate(_reqs(rows), rq.StepTable.constant(S), _limits(max_seqs=1))
    assert run.first_token_s[1] == pytest.approx(4 * S)


def test_md1_mean_wait_matches_pollaczek_khinchine() -> None:
    # one sequence at a time, one-token outputs, constant step: an M/D/1 queue.
    # rho = 50/s x 10 ms = 0.5 -> W_q = 0.5 x 10 ms / (2 x 0.5) = 5 ms (hand), within 3 %
    assert simulation.md1_mean_wait_s(50.0, S) == pytest.approx(0.005)
    reqs = rq.poisson_requests(50.0, 100_000, LengthDist("fixed", 10), LengthDist("fixed", 1), seed=3)
    run = rq.simulate(reqs, rq.StepTable.constant(S), _limits(max_seqs=1))
    wait = float(np.mean(run.ttft_s - S))
    assert wait == pytest.approx(0.005, rel=0.03)


def test_fast_forward_equals_step_by_step() -> None:
    # a context-dependent step; long outputs at a light load take the vectorized stretches
    table = rq.StepTable(
        np.array([0.0, 64.0]),
        np.array([0.0, 1000.0]),
        np.array([1.0, 5000.0]),
        np.array([[[0.01, 0.02], [0.03, 0.04]], [[0.02, 0.05], [0.04, 0.06]]]),
    )
    reqs = rq.poisson_requests(2.0, 300, LengthDist("fixed", 200), LengthDist("fixed", 400), seed=1)
    fast = rq.simulate(reqs, table, _limits())
    old = rq.FAST_FORWARD_MIN_STEPS
    try:
        rq.FAST_FORWARD_MIN_STEPS = 10**9
        slow = rq.simulate(reqs, table, _limits())
    finally:
        rq.FAST_FORWARD_MIN_STEPS = old
    assert fast.finish_s == pytest.approx(slow.finish_s, rel=1e-12)
    assert fast.steps == slow.steps


@settings(max_examples=40, deadline=None)
@given(
    d=st.floats(0, 64),
    p=st.floats(0, 1000),
    c=st.floats(1, 5000),
)
def test_table_is_exact_for_a_linear_step(d: float, p: float, c: float) -> None:
    dg, pg, cg = np.array([0.0, 8.0, 64.0]), np.array([0.0, 100.0, 1000.0]), np.array([1.0, 50.0, 5000.0])
    f = lambda d, p, c: 1e-3 + 2e-5 * d + 3e-6 * p + 4e-7 * c  # noqa: E731
    table = rq.StepTable(dg, pg, cg, f(dg[:, None, None], pg[None, :, None], cg[None, None, :]))
    assert float(table(d, p, c)) == pytest.approx(f(d, p, c), rel=1e-9)
    assert table.scalar()(d, p, c) == pytest.approx(f(d, p, c), rel=1e-9)


def test_lognormal_has_the_stated_mean() -> None:
    x = LengthDist.parse("lognormal:2000", "--input").sample(200_000, np.random.default_rng(0))
    assert x.mean() == pytest.approx(2000, rel=0.01)
    u = LengthDist.parse("uniform:100-300", "--input").sample(100_000, np.random.default_rng(0))
    assert (u.min(), u.max()) == (100, 300)
    assert u.mean() == pytest.approx(200, rel=0.01)


@pytest.mark.parametrize(
    ("rows", "field"),
    [
        ([(0.0, 10, 5), (-1.0, 10, 5)], "trace arrival_s"),
        ([(1.0, 10, 5), (0.5, 10, 5)], "trace arrival_s"),
        ([(0.0, 0, 5)], "trace input_tokens"),
        ([(0.0, 10, 2.5)], "trace output_tokens"),
    ],
)
def test_bad_traces_name_the_field(rows: list[tuple[float, float, float]], field: str) -> None:
    with pytest.raises(InputError) as e:
        check_trace(*zip(*rows, strict=True))
    assert e.value.field == field


@pytest.mark.parametrize("text", ["0", "-3", "lognormal:0", "uniform:5-2", "normal:5", "x"])
def test_bad_lengths(text: str) -> None:
    with pytest.raises(InputError):
        LengthDist.parse(text, "--input")


def test_rates_and_slos_refuse_nonsense() -> None:
    with pytest.raises(InputError):
        rq.poisson_requests(0.0, 10, LengthDist("fixed", 1), LengthDist("fixed", 1))
    assert sim.parse_slo("ttft_p99=2s,tpot_p99=50ms") == {"ttft_p99": 2.0, "tpot_p99": 0.05}
    assert sim.parse_slo("ttft=2s,itl_p90=80ms") == {"ttft": 2.0, "itl_p90": 0.08}
    for bad in ("ttft_p0=2s", "ttft_p100=2s", "ttft_p99=0s", "ttft_p99=2", "tpot_p99=-1ms", "", "tbt=1s"):
        with pytest.raises(InputError):
            sim.parse_slo(bad)


# ----------------------------------------------------------------------------- on a deployment


@pytest.fixture(scope="module")
def dep():  # type: ignore[no-untyped-def]
    return plan_deployment(
        catalog_model("llama-3.1-70b"), catalog_system("h100-hgx"), "tp=8", efficiency=rl.PURE_ROOFLINE
    )


def test_runtime_catalog_is_sourced() -> None:
    assert {"vllm", "sglang", "trtllm"} <= set(runtimes())
    for p in runtimes().values():
        assert p.source and p.date
    v = runtime("vllm")
    assert (v.max_seqs, v.max_tokens, v.kv_memory_frac) == (1024, 8192, 0.9)
    with pytest.raises(UnknownIdError):
        runtime("vlm")


def test_kv_pool_by_hand(dep) -> None:  # type: ignore[no-untyped-def]
    # Llama-3.1-70B bf16 KV: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 B = 327,680 B per token,
    # 40,960 B per chip at tp=8. vLLM: 0.9 x HBM - weights - activations, over that.
    m = dep.model
    assert arch.kv_bytes_per_token(m, 2.0) == pytest.approx(327_680)
    hbm = dep.system.chip.hbm_capacity_bytes
    mem = dep.memory(0.0, 2500.0, tokens_in_flight=8192)
    weights, act = float(np.asarray(mem.weights.total)), float(np.asarray(mem.activation_bytes))
    expect = (0.9 * hbm - weights - act) / 40_960
    assert sim.kv_pool_tokens(replace(dep, runtime=runtime("vllm")), 2500.0) == pytest.approx(
        expect, rel=1e-9
    )
    expect_free = 0.9 * (hbm - weights - act) / 40_960
    assert sim.kv_pool_tokens(replace(dep, runtime=runtime("trtllm")), 2500.0) == pytest.approx(
        expect_free, rel=1e-9
    )


def test_step_table_is_the_plan_step(dep) -> None:  # type: ignore[no-untyped-def]
    table = sim.step_table(dep, 64, 8192, 4000.0)
    kv = dep.kv_bytes_per_element
    c = float(table.context[3])
    want = float(dep.step(loads.decode_load(dep.model, 64.0, c, kv), decode=True).step_s)
    assert float(table(64.0, 0.0, c)) == pytest.approx(want, rel=1e-12)
    want_p = float(dep.step(loads.prefill_load(dep.model, 1.0, 8192.0, kv), decode=True).step_s)
    assert float(table(0.0, 8192.0, c)) == pytest.approx(want_p, rel=1e-12)


def test_runtime_caps_the_batch(dep) -> None:  # type: ignore[no-untyped-def]
    # an overloaded replica under max_seqs = 16 runs 16 sequences nearly all the time
    rep = sim.replica(dep, runtime("vllm").with_overrides(max_seqs=16), max_context=600, mean_context=600)
    reqs = rq.poisson_requests(1000.0, 2000, LengthDist("fixed", 100), LengthDist("fixed", 500))
    res = sim.run(rep, reqs, 1000.0)
    assert 15.0 < res.mean_decode_batch <= 16.0


def test_docs_worked_kv_pool_numbers(dep) -> None:  # type: ignore[no-untyped-def]
    # docs/deployments.md "Serving runtimes": 17.64 GB weights per chip (70.56e9 params x 2 B / 8),
    # 1,441,474 tokens under vLLM, 1,485,239 under TensorRT-LLM
    mem = dep.memory(0.0, 2500.0, tokens_in_flight=8192)
    assert float(np.asarray(mem.weights.total)) == pytest.approx(17.64e9, rel=1e-3)
    assert sim.kv_pool_tokens(replace(dep, runtime=runtime("vllm")), 2500.0) == pytest.approx(
        1_441_474, rel=1e-5
    )
    assert sim.kv_pool_tokens(replace(dep, runtime=runtime("trtllm")), 2500.0) == pytest.approx(
        1_485_239, rel=1e-5
    )


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.floats(0, 0.5), st.integers(1, 3000), st.integers(1, 40)), min_size=1, max_size=25
    ),
    max_seqs=st.integers(1, 8),
    extra_tokens=st.integers(0, 2000),
    chunk=st.integers(1, 4000),
    policy=st.sampled_from(rq.POLICIES),
)
def test_every_schedule_respects_the_step_counts(
    rows: list[tuple[float, int, int]], max_seqs: int, extra_tokens: int, chunk: int, policy: str
) -> None:
    rows = sorted(rows)
    reqs = _reqs(rows)
    lim = rq.Limits(
        max_seqs=max_seqs,
        max_tokens=max_seqs + extra_tokens,
        chunk_tokens=chunk,
        kv_tokens=1e5,
        policy=policy,
    )
    run = rq.simulate(reqs, rq.StepTable.constant(S), lim)
    assert np.all(np.isfinite(run.finish_s))
    per_step = min(chunk, lim.max_tokens)
    prompt_steps = np.ceil(reqs.input_tokens / per_step)
    assert np.all(run.ttft_s >= prompt_steps * S - 1e-9)  # a prompt needs its chunks
    decode = run.finish_s - run.first_token_s
    assert np.all(decode >= (reqs.output_tokens - 1) * S - 1e-9)
    if policy == "mixed":  # every step carries every decoding sequence
        assert decode == pytest.approx((reqs.output_tokens - 1) * S)
    assert run.steps * S == pytest.approx(run.busy_s)


def test_generalizes_the_fleet_simulator() -> None:
    # fleet's replica (rq.BatchStepTable): a joiner counts in the batch of its join step and makes
    # its first token there. With one prompt token per request (p = joiners) and a step linear
    # in the batch, t(b) = a + k b, the general table T(d, p) = a + k (d + p) is the same server.
    from rackmath.core import simulation as sim

    a, k, batch, out = 0.004, 2e-5, 64, 50
    arrivals = sim.poisson_arrivals_s(300.0, 20.0, seed=5)
    steps = a + k * np.arange(1, batch + 1)
    reqs = Requests(arrivals, np.ones(arrivals.size, np.int64), np.full(arrivals.size, out, np.int64))
    fleet_table = rq.BatchStepTable(steps, prompt_tokens=1)
    ref = rq.simulate(reqs, fleet_table, fleet_table.limits())
    grid = np.array([0.0, float(batch)])
    table = rq.StepTable(grid, grid, np.array([0.0]), (a + k * (grid[:, None] + grid[None, :]))[:, :, None])
    run = rq.simulate(reqs, table, _limits(max_seqs=batch, max_tokens=2 * batch))
    assert np.all(np.isfinite(ref.finish_s))
    assert run.first_token_s == pytest.approx(ref.first_token_s, rel=1e-9)
    assert run.finish_s == pytest.approx(ref.finish_s, rel=1e-9)


def test_unchunked_prompts_run_whole_or_wait() -> None:
    # budget 1,000, no chunking: A (900 in) runs in step 1; B (600 in, arrived at 0) does not fit
    # the 100 tokens left, waits, and runs in step 2 beside A's decode token (1 + 600 <= 1,000)
    rows = [(0.0, 900, 3), (0.0, 600, 2)]
    run = rq.simulate(_reqs(rows), rq.StepTable.constant(S), _limits(chunked=False))
    assert run.first_token_s == pytest.approx([S, 2 * S])
    chunked = rq.simulate(_reqs(rows), rq.StepTable.constant(S), _limits())
    assert chunked.first_token_s == pytest.approx([S, 2 * S])  # B's first 100 tokens went in step 1
    with pytest.raises(InputError, match="not chunked"):
        rq.simulate(_reqs([(0.0, 1500, 2)]), rq.StepTable.constant(S), _limits(chunked=False))
    assert not runtime("trtllm").chunked_prefill and runtime("vllm").chunked_prefill


def test_sglang_memory_flag_follows_the_engine_size() -> None:
    # SGLang's mem_fraction_static: 0.88 on 1 GPU, 0.87 on 2, 0.85 on 4, 0.81 on 8, 0.79 on 16+
    sg = runtime("sglang")
    assert sg.memory_frac([1, 2, 3, 4, 8, 12, 16, 64]).tolist() == [
        0.88,
        0.87,
        0.87,
        0.85,
        0.81,
        0.81,
        0.79,
        0.79,
    ]
    assert runtime("vllm").memory_frac([1, 8]).tolist() == [0.9, 0.9]
