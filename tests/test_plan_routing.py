"""`plan` and `pareto` with the plan's MoE features (EPLB slots, skew, two-batch overlap).

Each searched figure is recomputed from the plan text through the plan grammar
(``plan_deployment``) on the pure roofline, and the docs/deployments.md example is checked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rackmath.analyses.deploy import candidates, frontier, plan_features
from rackmath.analyses.deploy import search as srch
from rackmath.analyses.deploy.candidates import Workload
from rackmath.analyses.deploy.plan_features import MoeRouting, PlanFeatures
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import model as catalog_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.core import loads
from rackmath.core import roofline as rl
from rackmath.errors import InputError
from rackmath.specs.plan import ParallelPlan

W = Workload(traffic_tokens_per_s=1e6, input_len=1024, output_len=1024, ttft_s=2.0, tpot_s=0.05)
EPLB = MoeRouting(redundant_experts=32, skew=1.3, tbo_overlap_frac=1.0)


@pytest.fixture(scope="module")
def runs() -> dict[str, srch.SearchResult]:
    m, s = catalog_model("deepseek-v3"), [catalog_system("gb200-nvl72")]
    return {
        name: srch.search(m, s, W, routing=r, disaggregated=True, efficiency=rl.PURE_ROOFLINE)
        for name, r in (
            ("balanced", MoeRouting()),
            ("slots+skew", MoeRouting(redundant_experts=32, skew=1.3)),
            ("eplb", EPLB),
        )
    }


def test_bad_routing_is_one_line() -> None:
    for kw, field in (
        ({"skew": 0.5}, "--skew"),
        ({"skew": float("nan")}, "--skew"),
        ({"tbo_overlap_frac": 1.5}, "--tbo"),
        ({"redundant_experts": -1}, "--redundant-experts"),
    ):
        with pytest.raises(InputError, match=field):
            MoeRouting(**kw)  # type: ignore[arg-type]
    assert (
        plan_features.parse_tbo("on") == 1.0
        and plan_features.parse_tbo("OFF") == 0.0
        and plan_features.parse_tbo("0.25") == 0.25
    )
    for bad in ("2", "nan", "half"):
        with pytest.raises(InputError, match="--tbo"):
            plan_features.parse_tbo(bad)


def test_redundant_slots_open_ep_degrees_that_do_not_divide_the_experts() -> None:
    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    plain = {int(r[3]) for r in candidates.enumerate_plans(m, s, max_chips=72)}
    eplb = {int(r[3]) for r in candidates.enumerate_plans(m, s, max_chips=72, redundant_experts=32)}
    assert 72 not in plain and 36 not in plain  # 256 = 2^8
    assert {72, 36, 18, 9} <= eplb and plain <= eplb  # 256 + 32 = 288 = 72 x 4


def test_the_choice_is_the_plan_grammar_step(runs: dict[str, srch.SearchResult]) -> None:
    """The searched best under EPLB + skew + TBO, recomputed from its plan text."""
    best = runs["eplb"].best
    assert best is not None and best.ep > 1
    plan = ParallelPlan.parse(best.plan_text)
    assert (plan.redundant_experts, plan.skew, plan.tbo) == (32, 1.3, 1.0)
    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    pr = best.precisions
    prec = {"weights": pr.weights.value, "kv": pr.kv.value, "compute": pr.compute.value}
    dep = plan_deployment(m, s, best.plan_text, efficiency=rl.PURE_ROOFLINE, **prec)  # type: ignore[arg-type]
    load = loads.mixed_load(m, float(best.batch), 1024, 1024, pr.kv.bytes_per_element)
    step = float(dep.step(load, decode=True).step_s)
    assert best.tpot_s == pytest.approx(step, rel=1e-9)
    # the same plan without TBO is slower: the all-to-all adds to the step again
    no_tbo = plan_deployment(m, s, best.plan_text.replace(",tbo=on", ""), efficiency=rl.PURE_ROOFLINE, **prec)  # type: ignore[arg-type]
    assert float(no_tbo.step(load, decode=True).step_s) > 1.2 * step


def test_docs_example_eplb_skew_tbo_changes_the_choice(runs: dict[str, srch.SearchResult]) -> None:
    """docs/deployments.md, "MoE routing in the search": the figures quoted there."""
    price = catalog_system("gb200-nvl72").chip.price_usd_per_chip_hour.value_usd
    for name, plan, batch, replicas, usd in (
        ("balanced", "dp=16,ep=16", 8192, 4, 0.0807),
        ("slots+skew", "dp=18,ep=9,redundant_experts=32,skew=1.3", 11585, 4, 0.0908),
        ("eplb", "dp=16,ep=16,redundant_experts=32,skew=1.3,tbo=on", 11585, 3, 0.0605),
    ):
        best = runs[name].best
        assert best is not None
        assert (best.plan_text, best.batch, best.replicas) == (plan, batch, replicas)
        assert best.replicas == math.ceil(1e6 / (best.batch / best.tpot_s))
        by_hand = best.replicas * best.chips * price / 3600.0  # USD per s for 1e6 tokens/s
        assert best.fleet_usd_per_million_output_tokens == pytest.approx(by_hand, rel=1e-12)
        assert best.fleet_usd_per_million_output_tokens == pytest.approx(usd, abs=5e-5)
    # fp8 weights and fp8 KV (the fp8 family, searched beside the checkpoint's fp8-block): the
    # aggregated replica is cheaper than xPyD under every routing, by most with EPLB + skew + TBO
    for run in runs.values():
        assert run.best is not None and run.disaggregated is not None
        assert run.best.precisions.kv.value == "fp8"
        assert (
            run.disaggregated.fleet_usd_per_million_output_tokens
            > run.best.fleet_usd_per_million_output_tokens
        )
        assert "does not beat" in run.disaggregated_note
    for name, xpyd, usd in (
        ("balanced", "7P5D", 0.0858),
        ("slots+skew", "2P5D", 0.0971),
        ("eplb", "3P2D", 0.0706),
    ):
        d = runs[name].disaggregated
        assert d is not None and d.xpyd == xpyd
        assert d.fleet_usd_per_million_output_tokens == pytest.approx(usd, abs=5e-5)
    routing = runs["eplb"].space["moe_routing"]
    assert routing == {"redundant_experts": 32, "skew": 1.3, "tbo_overlap_frac": 1.0}


def test_pareto_threads_the_routing() -> None:
    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    kw = {"precisions": ("fp8",), "max_chips": 72, "efficiency": rl.PURE_ROOFLINE}
    plain = frontier.pareto(m, s, **kw)  # type: ignore[arg-type]
    tbo = frontier.pareto(m, s, routing=MoeRouting(tbo_overlap_frac=1.0), disaggregated=True, **kw)  # type: ignore[arg-type]
    ep_points = [p for p in tbo.frontier if ",ep=" in p.plan_text]
    assert ep_points and all(p.plan_text.endswith("tbo=on") for p in ep_points)
    assert any(p.plan_text.endswith("tbo=on") for p in tbo.disaggregated_frontier)
    # overlap never lengthens a step: the best throughput per chip can only rise
    assert max(p.tokens_per_s_per_chip for p in tbo.frontier) >= max(
        p.tokens_per_s_per_chip for p in plain.frontier
    )


def test_moe_tp_all_reduce_by_hand() -> None:
    """dp=72,ep=18,moe_tp=4 on an NVL72: the experts' TP all-reduce, recomputed from the catalog."""
    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    load = loads.decode_load(m, 4608.0, 4096.0, 1.0)
    kw = {"weights": "fp8", "kv": "fp8", "compute": "fp8", "efficiency": rl.PURE_ROOFLINE}

    def comm(plan: str) -> tuple[float, float]:
        st = plan_deployment(m, s, plan, **kw).step(load, decode=True)  # type: ignore[arg-type]
        return float(st.tp_comm_pass_s), float(st.ep_comm_pass_s)

    tp_comm, _ = comm("dp=72,ep=18,moe_tp=4")
    # tokens per chip n = 4608 / 72 = 64; D = 18 (1 - prod_{j<8} (256 - 256/18 - j) / (256 - j))
    keep = 1.0
    for j in range(8):
        keep *= (256 - 256 / 18 - j) / (256 - j)
    d_ranks = 18 * (1 - keep)
    message = 64 * d_ranks * 4 * 7168 * 2.0  # n D m x hidden x 2 B activations
    bw, alpha = s.chip.scale_up_bandwidth_bytes_per_s_per_direction, s.scale_up_latency_s
    per_layer = 2 * (3 / 4 * message / bw + 3 * alpha)  # ring all-reduce over 4 chips
    assert tp_comm == pytest.approx(58 * per_layer, rel=1e-9)  # 58 MoE layers, attention tp = 1 adds 0
    assert tp_comm == pytest.approx(3.07e-3, rel=0.01)
    # moe_tp equal to the attention tp adds nothing beyond the attention's TP all-reduces
    same, _ = comm("tp=4,dp=18,ep=18,moe_tp=4")
    plain, _ = comm("tp=4,dp=18,ep=18")
    assert same == pytest.approx(plain, rel=1e-12)
    # skew loads the busiest EP rank's group: the reduction scales with its bytes
    skewed, _ = comm("dp=72,ep=18,moe_tp=4,skew=1.3")
    assert skewed == pytest.approx(58 * 2 * (3 / 4 * 1.3 * message / bw + 3 * alpha), rel=1e-9)


def test_mtp_in_the_search_by_hand() -> None:
    """``--mtp 1 --acceptance 0.8``: a candidate's TPOT recomputed from the plan's own steps."""
    from dataclasses import replace

    m, s = catalog_model("deepseek-v3"), catalog_system("gb200-nvl72")
    w = Workload(traffic_tokens_per_s=1e6, input_len=1024, output_len=1024)
    f = PlanFeatures(mtp=1, acceptance=0.8)
    assert f.tokens_per_step == pytest.approx(1.8)
    c = candidates.evaluate(
        m, s, "fp8", w, max_chips=8, batches=(4096,), efficiency=rl.PURE_ROOFLINE, routing=f
    )
    assert c is not None
    i = int(np.flatnonzero((c.dp == 8) & (c.ep == 8) & (c.tp == 1) & (c.pp == 1))[0])
    dep = plan_deployment(
        m, s, "dp=8,ep=8", weights="fp8", kv="fp8", compute="fp8", efficiency=rl.PURE_ROOFLINE
    )
    # verification: 4,096 sequences x 2 query tokens at I + O/2, plus 4,096 x 1.8 / 1,024 new prompts
    verify = loads.decode_load(m, 4096.0, 1536.0, 1.0, tokens_per_sequence=2)
    pre = loads.prefill_load(m, 4096 * 1.8 / 1024, 1024.0, 1.0)
    load = replace(
        verify,
        prefill_sequences=pre.prefill_sequences,
        prefill_length=pre.prefill_length,
        prefill_attention_flops=pre.prefill_attention_flops,
        prefill_kv_write_bytes=pre.prefill_kv_write_bytes,
    )
    t_verify = float(dep.step(load, decode=True).step_s)
    t_plain = float(dep.step(loads.decode_load(m, 4096.0, 1536.0, 1.0), decode=True).step_s)
    cycle = t_verify + 1 * t_plain / 61  # the MTP head: one layer's share of the plain step
    assert float(c.tpot_s[i]) == pytest.approx(cycle / 1.8, rel=1e-9)
    assert float(c.tokens_per_s[i]) == pytest.approx(4096 * 1.8 / cycle, rel=1e-9)
    assert float(c.ttft_s[i]) == pytest.approx(cycle, rel=1e-9)  # max(1, O / (B E)) cycles
    # the gain shrinks as the batch makes the step compute-bound: 2 drafts help at batch 64
    # more than at 4,096
    gains = []
    for b in (64, 4096):
        kw = {"max_chips": 8, "batches": (b,), "efficiency": rl.PURE_ROOFLINE}
        plain = candidates.evaluate(m, s, "fp8", w, **kw)  # type: ignore[arg-type]
        two = candidates.evaluate(m, s, "fp8", w, routing=PlanFeatures(mtp=2, acceptance=0.8), **kw)  # type: ignore[arg-type]
        assert plain is not None and two is not None
        j = int(np.flatnonzero((plain.dp == 8) & (plain.ep == 8) & (plain.tp == 1))[0])
        gains.append(float(plain.tpot_s[j] / two.tpot_s[j]))
    assert gains[0] > gains[1] and gains[0] > 1.5
    with pytest.raises(InputError, match="--acceptance"):
        PlanFeatures(mtp=1, acceptance=1.2)
    with pytest.raises(InputError, match="--mtp"):
        PlanFeatures(mtp=17)
