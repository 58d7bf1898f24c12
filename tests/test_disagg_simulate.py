"""`simulate --disaggregated xPyD`: the prefill pool, the KV transfer, the decode pool, by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rackmath.analyses.deploy import simulate as sim
from rackmath.catalog.loader import model as catalog_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.core import disagg_requests as dq
from rackmath.core import requests as rq
from rackmath.errors import InputError
from rackmath.specs.workload import LengthDist, check_trace

PRE, DEC = 0.040, 0.010  # constant prefill and decode steps (s)


def _limits() -> rq.Limits:
    return rq.Limits(max_seqs=64, max_tokens=4096, chunk_tokens=4096, kv_tokens=1e6)


def _run(
    rows: list[tuple[float, int, int]], kv_s: float = 0.005, x: int = 1, y: int = 1
) -> dq.DisaggregatedRun:
    a, i, o = zip(*rows, strict=True)
    return dq.simulate_disaggregated(
        check_trace(a, i, o),
        prefill_table=rq.StepTable.constant(PRE),
        prefill_limits=_limits(),
        prefill_replicas=x,
        decode_table=rq.StepTable.constant(DEC),
        decode_limits=_limits(),
        decode_replicas=y,
        kv_transfer_s=kv_s,
    )


def test_one_request_no_queueing() -> None:
    # TTFT = prefill pass + KV transfer = 40 + 5 = 45 ms; tokens 2..4 at 55, 65, 75 ms
    r = _run([(1.0, 1000, 4)])
    assert r.ttft_s[0] == pytest.approx(PRE + 0.005)
    assert r.finish_s[0] == pytest.approx(1.0 + 0.045 + 3 * DEC)
    assert r.tpot_s[0] == pytest.approx(DEC)
    assert r.prefill_steps == 1 and r.decode_steps == 3


def test_a_one_token_request_never_leaves_the_prefill_pool() -> None:
    r = _run([(0.0, 500, 1)])
    assert r.finish_s[0] == pytest.approx(PRE) and r.decode_steps == 0


def test_queueing_at_the_prefill_pool_and_round_robin() -> None:
    # two prompts at t = 0 on one prefill replica with a 1,000-token budget: the second waits a step
    lim = rq.Limits(max_seqs=64, max_tokens=1000, chunk_tokens=1000, kv_tokens=1e6)
    reqs = check_trace([0.0, 0.0], [1000, 1000], [3, 3])
    kw = {"decode_table": rq.StepTable.constant(DEC), "decode_limits": _limits(), "decode_replicas": 1}
    one = dq.simulate_disaggregated(
        reqs,
        prefill_table=rq.StepTable.constant(PRE),
        prefill_limits=lim,
        prefill_replicas=1,
        kv_transfer_s=0.0,
        **kw,
    )
    assert one.ttft_s == pytest.approx([PRE, 2 * PRE])
    two = dq.simulate_disaggregated(
        reqs,
        prefill_table=rq.StepTable.constant(PRE),
        prefill_limits=lim,
        prefill_replicas=2,
        kv_transfer_s=0.0,
        **kw,
    )
    assert two.ttft_s == pytest.approx([PRE, PRE])  # 2P: one prompt each
    # both land at 40 ms on one decode replica: they decode together, 2 tokens each, in 20 ms
    assert two.finish_s == pytest.approx([PRE + 2 * DEC, PRE + 2 * DEC])


def test_bad_pools_are_one_line() -> None:
    for text in ("2P", "P1D", "0P1D", "2x1", "1P2000D"):
        with pytest.raises(InputError, match="--disaggregated"):
            sim.parse_xpyd(text)
    assert sim.parse_xpyd("3p2d") == (3, 2)
    with pytest.raises(InputError, match="kv_transfer_s"):
        _run([(0.0, 10, 2)], kv_s=float("nan"))


def test_kv_transfer_is_the_searchs_figure() -> None:
    # Llama-3.1-70B bf16 KV: 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 327,680 B a token;
    # 2,000 tokens over 4 links of NVLink (1P1D of tp=4 on one HGX: 8 chips in the domain)
    from rackmath.analyses.serving.planned import plan_deployment
    from rackmath.catalog.runtimes import runtime

    m, s = catalog_model("llama-3.1-70b"), catalog_system("h200-hgx")
    dep = plan_deployment(m, s, "tp=4")
    rep = sim.replica(dep, runtime("vllm"), max_context=2300, mean_context=2300)
    t, tier = sim.kv_transfer_times_s(rep, rep, 1, 1, np.array([2000]))
    bw = s.chip.scale_up_bandwidth_bytes_per_s_per_direction
    assert tier == "scale-up"
    assert t[0] == pytest.approx(327_680 * 2000 / 4 / bw + s.scale_up_latency_s, rel=1e-9)
    _, tier2 = sim.kv_transfer_times_s(rep, rep, 2, 1, np.array([2000]))
    assert tier2 == "scale-out"  # 12 chips do not fit one 8-chip domain


def test_cli_runs_an_xpyd_fleet(cli) -> None:
    code, out, _ = cli(
        "simulate", "llama-3.1-70b", "--on", "h200-hgx", "--plan", "tp=4", "--rate", "5/s",
        "--requests", "300", "--input", "2000", "--output", "100", "--disaggregated", "2P1D", "--json",
    )  # fmt: skip
    assert code == 0, out
    d = json.loads(out)
    assert d["disaggregated"] == "2P1D" and d["kv_tier"] == "scale-out"
    r = d["result"]
    assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"] < 10 and 0 < r["tpot_p50_s"] < 0.1
    code, out, err = cli("simulate", "llama-3.1-70b", "--on", "h200-hgx", "--disaggregated", "2x")
    assert code == 1 and "--disaggregated" in err and "Traceback" not in err + out


def test_infinite_lengths_are_one_line() -> None:
    # fuzz: `simulate --output inf` raised OverflowError in int(inf)
    for text in ("inf", "uniform:1-inf", "lognormal:inf", "1e400"):
        with pytest.raises(InputError, match="--output"):
            LengthDist.parse(text, "--output")


def test_the_rate_search_runs_an_xpyd_fleet() -> None:
    """`simulate --disaggregated 1P1D --slo ...`: the answer's probe meets the SLO, the next rate of
    the curve above it fails, and the curve tops at 1.5x the smaller pool's capacity."""
    from rackmath.analyses.deploy import rate_search, slo

    m, s = catalog_model("llama-3.1-8b"), catalog_system("h100-hgx")
    fleet = slo.Fleet(m, s, "tp=1", efficiency="pure", disaggregated="1P1D")
    work = slo.Workload(1.0, 100, LengthDist("fixed", 1000), LengthDist("fixed", 200))
    the_slo = slo.Slo.parse("ttft_p99=500ms,tpot_p99=20ms")
    found = rate_search.search(fleet, work, the_slo, points=6, probes=4)
    assert found.best is not None and found.best.attainment.meets_slo
    above = [p for p in found.points if p.rate_per_s > found.best.rate_per_s]
    assert above and not above[0].attainment.meets_slo
    server = slo.build(fleet, work)
    assert server.prefill is not None
    pre, dec = server.prefill, server.replica
    top = 1.5 * min(
        sim.prefill_capacity_rate_per_s(pre, 1000), sim.decode_capacity_rate_per_s(dec, 1000, 200)
    )
    assert max(p.rate_per_s for p in found.points) == pytest.approx(top, rel=1e-12)
    # the prefill pool's capacity by hand: full 8,192-token chunks of 1,000-token prompts
    chunk = pre.limits.max_tokens
    assert sim.prefill_capacity_rate_per_s(pre, 1000) == pytest.approx(
        chunk / 1000 / float(pre.table(0.0, chunk, 500))
    )


def test_cli_searches_the_rate_of_an_xpyd_fleet(cli) -> None:
    args = ("simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--requests", "1000")
    code, out, err = cli(*args, "--input", "1000", "--output", "200", "--disaggregated", "1P1D",
                         "--slo", "ttft_p99=500ms,tpot_p99=20ms",
                         "--efficiency", "pure", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["disaggregated"] == "1P1D" and d["curve"] and "result" not in d
    best = d["best"]["attainment"]
    assert best["met_frac"]["ttft_p99"] >= 0.99 and best["met_frac"]["tpot_p99"] >= 0.99
    code, out, err = cli(*args, "--input", "1000", "--output", "200", "--disaggregated", "1P1D",
                         "--slo", "ttft_p99=1us", "--efficiency", "pure")  # fmt: skip
    assert (
        code == 1 and "--slo" in err and "Traceback" not in err + out and len(err.strip().splitlines()) == 1
    )
