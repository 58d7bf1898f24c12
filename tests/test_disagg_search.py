"""xPyD in the search: pool sizes, KV transfer and cost recomputed by hand from the pools' figures."""

from __future__ import annotations

import json
import math

import pytest

from rackmath.analyses.deploy import candidates, frontier
from rackmath.analyses.deploy import disagg_search as dis
from rackmath.analyses.deploy import search as srch
from rackmath.analyses.deploy.candidates import BATCH_GRID, Workload
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import model as catalog_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.core import roofline as rl

W = Workload(traffic_tokens_per_s=1e6, input_len=1024, output_len=1024, ttft_s=2.0, tpot_s=0.05)


@pytest.fixture(scope="module")
def v3_result() -> srch.SearchResult:
    return srch.search(
        catalog_model("deepseek-v3"),
        [catalog_system("gb200-nvl72")],
        W,
        disaggregated=True,
        efficiency=rl.PURE_ROOFLINE,  # the hand derivations below are on the pure roofline
    )


def test_xpyd_sizes_cost_and_ttft_by_hand(v3_result: srch.SearchResult) -> None:
    d = v3_result.disaggregated
    assert d is not None
    dec, pre = d.decode, d.prefill
    # y = ceil(T / (B / t_dec)), x = ceil((T / O) / (b / t_pre))
    assert dec.rate_per_s == pytest.approx(dec.batch / dec.step_s)
    assert dec.replicas == math.ceil(1e6 / dec.rate_per_s)
    assert pre.replicas == math.ceil(1e6 / 1024 / (pre.batch / pre.step_s))
    assert d.xpyd == f"{pre.replicas}P{dec.replicas}D"
    # KV of one 1,024-token prompt, DeepSeek-V3 MLA at fp8: (512 + 64) x 61 layers x 1 B = 35,136 B/token
    kv_bytes = 35_136 * 1024
    links = min(pre.chips, dec.chips)
    chip, sys_ = catalog_system("gb200-nvl72").chip, catalog_system("gb200-nvl72")
    assert pre.kv == dec.kv == "fp8"
    assert pre.replicas * pre.chips + dec.replicas * dec.chips <= 72 and d.kv_tier == "scale-up"
    t_kv = kv_bytes / links / chip.scale_up_bandwidth_bytes_per_s_per_direction + sys_.scale_up_latency_s
    assert d.kv_transfer_s == pytest.approx(t_kv, rel=1e-9)
    assert d.ttft_s == pytest.approx(pre.step_s + t_kv) and d.ttft_s <= 2.0
    assert d.tpot_s == dec.step_s <= 0.05
    price = chip.price_usd_per_chip_hour.value_usd
    usd = (pre.replicas * pre.chips + dec.replicas * dec.chips) * price / 3600 / 1e6 * 1e6
    assert d.fleet_usd_per_million_output_tokens == pytest.approx(usd, rel=1e-12)


def test_decode_pool_step_is_the_operator_step(v3_result: srch.SearchResult) -> None:
    d = v3_result.disaggregated
    assert d is not None
    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    dep = plan_deployment(
        m, s, d.decode.plan_text, weights="fp8", kv="fp8", compute="fp8", efficiency=rl.PURE_ROOFLINE
    )
    step = float(dep.decode([d.decode.batch], [1024 + 1024 / 2]).step_s[0, 0])
    assert d.decode.step_s == pytest.approx(step, rel=1e-9)
    pre = plan_deployment(
        m, s, d.prefill.plan_text, weights="fp8", kv="fp8", compute="fp8", efficiency=rl.PURE_ROOFLINE
    )
    assert d.prefill.step_s == pytest.approx(
        float(pre.prefill([d.prefill.batch], [1024]).step_s[0, 0]), rel=1e-9
    )


def test_the_sentence_states_both_costs(v3_result: srch.SearchResult) -> None:
    d, agg = v3_result.disaggregated, v3_result.best
    assert d is not None and agg is not None
    note = v3_result.disaggregated_note
    verdict = (
        "beats"
        if d.fleet_usd_per_million_output_tokens < agg.fleet_usd_per_million_output_tokens
        else "does not"
    )
    assert verdict in note and d.xpyd in note and f"{agg.fleet_usd_per_million_output_tokens:.3g}" in note


def test_an_unreachable_ttft_leaves_no_pool() -> None:
    w = Workload(traffic_tokens_per_s=1e6, input_len=1024, output_len=1024, ttft_s=1e-5, tpot_s=0.05)
    best, _, why = dis.best_disaggregated(
        catalog_model("deepseek-v3"),
        [catalog_system("gb200-nvl72")],
        w,
        families=("native",),
        max_chips=72,
        max_pp=1,
        batches=BATCH_GRID,
    )
    assert best is None and "TTFT" in why


def test_plan_cli_finds_xpyd_for_deepseek(cli) -> None:
    code, out, _ = cli(
        "plan", "deepseek-v3", "--on", "gb200-nvl72", "--slo", "ttft_p99=2s,tpot_p99=50ms", "--json"
    )
    assert code == 0
    d = json.loads(out)
    assert d["disaggregated"]["xpyd"].endswith("D") and d["disaggregated_vs_aggregated"]
    code, _, err = cli("plan", "deepseek-v3", "--on", "gb200-nvl72", "--slo", "e2e_p99=2s")
    assert code == 1 and "--slo" in err


def test_disaggregated_frontier_points_by_hand() -> None:
    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    w = Workload(traffic_tokens_per_s=1.0, input_len=1024, output_len=1024)
    per_user, per_chip, d, idx = dis.frontier_points(m, s, w, family="native", max_chips=72)
    assert d is not None and idx.size == per_chip.size > 0
    p = candidates.evaluate(m, s, "native", w, max_chips=72, batches=dis.PREFILL_BATCHES, phase="prefill")
    assert p is not None
    j = max(range(p.size), key=lambda k: (p.batch[k] / p.tpot_s[k] / p.chips[k]) if p.fits[k] else 0.0)
    k = int(idx[len(idx) // 2])
    rate = d.batch[k] / d.tpot_s[k]
    chips = d.chips[k] + rate / 1024 / (p.batch[j] / p.tpot_s[j]) * p.chips[j]
    assert per_chip[len(idx) // 2] == pytest.approx(rate / chips, rel=1e-12)
    assert per_user[len(idx) // 2] == pytest.approx(1 / d.tpot_s[k])
    f = frontier.pareto(m, s, disaggregated=True)
    assert f.disaggregated_frontier and f.to_dict()["disaggregated_frontier"]


def test_runtime_caps_the_search_per_engine() -> None:
    # vLLM, one engine (dp = 1): B <= 1,024 sequences and B (1 + I/O) <= 8,192 tokens a step.
    # I = 1,024, O = 128: 9 B <= 8,192 -> B <= 910, so batch 724 can fit and 1,024 cannot.
    from rackmath.catalog.runtimes import runtime

    w = Workload(traffic_tokens_per_s=1e5, input_len=1024, output_len=128)
    m, s = catalog_model("llama-3.1-70b"), catalog_system("h100-hgx")
    c = candidates.evaluate(m, s, "native", w, max_chips=8, max_pp=1, runtime=runtime("vllm"))
    assert c is not None
    one = (c.dp == 1) & (c.tp == 8)
    assert not c.fits[one & (c.batch > 910)].any()
    assert c.fits[one & (c.batch == 724)].all()
    free = candidates.evaluate(m, s, "native", w, max_chips=8, max_pp=1)
    assert free is not None and free.fits[one & (c.batch == 1024)].all()  # memory alone allows it
