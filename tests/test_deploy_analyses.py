"""Planned deployments, the lecture's layout arguments, disaggregation, search, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rackmath.analyses.deploy import candidates, frontier
from rackmath.analyses.deploy import search as srch
from rackmath.analyses.deploy.candidates import Workload
from rackmath.analyses.deploy.layout import layout
from rackmath.analyses.serving import disaggregated as dis
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.cli.main import app
from rackmath.core import parallel as par
from rackmath.core import sharding as shard
from rackmath.errors import InputError
from rackmath.specs.plan import ParallelPlan


@pytest.mark.parametrize(
    ("model", "plan", "reason"),
    [
        ("llama-3.1-70b", "tp=3", "64 attention heads do not divide by tp = 3"),
        ("llama-3.1-70b", "pp=3,stages=30+30+30", "sum to llama-3.1-70b's 80 layers .these cover 90.,"),
        ("llama-3.1-70b", "dp=2,ep=2", "dense: ep must be 1"),
        ("deepseek-v3", "dp=288,ep=288", r"ep = 288 exceeds 256 experts \+ 0 redundant slots"),
        ("deepseek-v3", "pp=62", "exceeds the 61 layers"),
    ],
)
def test_invalid_plans_are_rejected_with_the_reason(model: str, plan: str, reason: str) -> None:
    with pytest.raises(InputError, match=reason):
        plan_deployment(resolve_model(model), system("h100-hgx"), plan)


def test_uneven_stages_are_balanced_by_the_tool() -> None:
    """61 layers over pp = 2 are accepted (issue 25: today's deployments split them unevenly);
    a caller that wants divisible stages only can still say so."""
    model, sys = resolve_model("deepseek-v3"), system("gb200-nvl72")
    dep = plan_deployment(model, sys, "dp=32,ep=32,pp=2")
    assert sum(dep.stage_split.stage_layers) == 61
    with pytest.raises(InputError, match="61 layers do not divide by pp = 2"):
        plan_deployment(model, sys, "dp=32,ep=32,pp=2", allow_uneven_stages=False)


def test_memory_short_by() -> None:
    """DeepSeek-V3 in bf16 on one HGX H100 (tp=8): 671.0e9 x 2 B, 8-way split except the
    replicated norms and routers, does not fit in an H100's 85.5 GB; short by what it holds less
    what it may fill (the capacity less the 10% reserve)."""
    model, sys = resolve_model("deepseek-v3"), system("h100-hgx")
    dep = plan_deployment(model, sys, "tp=8", weights="bf16")
    mem = dep.memory(1, 4096)
    m = shard.shardable(model, 2.0)
    expected_w = (
        m.tp_sharded_bytes + m.routed_expert_bytes + m.embedding_bytes + m.head_bytes
    ) / 8 + m.replicated_bytes
    assert float(mem.weights.total) == pytest.approx(expected_w, rel=1e-12)
    assert not bool(mem.fits)
    capacity = sys.chip.hbm_capacity_bytes  # 81,559 MiB = 85,520,809,984 bytes (NVML)
    assert capacity == 81_559 * 2**20
    assert mem.usable_bytes == pytest.approx(0.9 * capacity, rel=1e-12)
    assert float(mem.short_by_bytes) == pytest.approx(float(mem.total_bytes) - 0.9 * capacity, rel=1e-12)
    assert float(mem.short_by_bytes) > capacity


def test_pipelining_in_inference() -> None:
    """D18/D22 on Llama-3.1-405B (126 identical layers), tp=8 per stage, micro-batch b = 64:
    weights per chip halve (the vocab pieces move to the end stages), KV per chip is the
    same, and TPOT changes by P hops of the given latency and by the LM head the last stage
    runs: 63 + 63 layers, the head's ``H`` bytes on the second, so the slowest stage is
    ``2 (63 w + H) / (126 w + H)`` times the mean (``w`` one layer's bytes)."""
    model, sys = resolve_model("llama-3.1-405b"), system("h100-hgx")
    one = plan_deployment(model, sys, "tp=8", communication=False)
    two = plan_deployment(
        model, sys, "tp=8,pp=2", communication=False, extra_hop_latency_s=par.LECTURE_HOP_LATENCY_S
    )
    m1, m2 = one.memory(64, 4096), two.memory(128, 4096)
    m = one.shardable
    layers = m.tp_sharded_bytes / 8 + m.replicated_bytes
    assert float(m2.weights.total - m2.weights.vocab) == pytest.approx(float(layers) / 2, rel=1e-12)
    assert float(m2.kv_bytes) == pytest.approx(float(m1.kv_bytes), rel=1e-12)
    first = one.decode([64], [4096]).step
    t1, host = float(first.step_s[0, 0]), float(np.asarray(first.overhead_s))
    t2 = float(two.decode([128], [4096]).step_s[0, 0])
    w, head = m.layer_bytes[0], m.head_bytes
    assert set(m.layer_bytes) == {w} and two.stage_split.stage_layers == (63, 63)
    imbalance = 2 * (63 * w + head) / (126 * w + head)
    assert imbalance == pytest.approx(1.0052, abs=1e-4)  # the head is 0.66 of a layer's bytes
    assert t2 == pytest.approx(imbalance * (t1 - host) + host + 2 * par.LECTURE_HOP_LATENCY_S, rel=1e-9)


def test_one_rack_bounds_the_expert_layer() -> None:
    """D13-D14 on GB200 NVL72: DeepSeek-V3 dp=64,ep=64; spreading the 64 chips over two racks
    sends half of the all-to-all bytes over 50 GB/s instead of 900 GB/s."""
    report = layout(resolve_model("deepseek-v3"), system("gb200-nvl72"))
    e = report.expert_layer
    assert e is not None and e["plan"] == "dp=64,ep=64"
    assert report.bandwidth_ratio == 18.0
    assert e["two_domains"]["step_s"] > e["one_domain"]["step_s"]
    # same roofline parts, only communication changes
    for key in ("compute_s", "weight_fetch_s", "kv_fetch_s"):
        assert e["two_domains"][key] == e["one_domain"][key]
    # kernel-grounded, the in-rack DeepEP call keeps its ~15 us fixed cost: the crossing makes
    # the all-to-all 2.5x longer (the link model, whose in-rack call costs ~4 us: 7.6x)
    assert e["ep_comm_ratio"] > 2
    assert report.rack_rule["lecture"]["advantage"] == 2.0
    rows = report.pipelining["lecture_formula"]["rows"]
    assert len({r["kv_bytes_per_chip"] for r in rows}) == 1
    floors = [r["weight_fetch_floor_s"] for r in report.scale_up]
    assert floors[0] / floors[1] == pytest.approx(9.0) and floors[1] / floors[2] == pytest.approx(8.0)


def test_disaggregated_and_mixed_by_hand() -> None:
    model, sys = resolve_model("deepseek-v3"), system("gb200-nvl72")
    dec = plan_deployment(model, sys, "dp=64,ep=64")
    pre = plan_deployment(model, sys, "dp=8,ep=8")
    point = dis.disaggregated(pre, dec, 2048, 512, decode_batch=1024)
    t_pre = float(pre.prefill([8], [2048]).step_s[0, 0])
    kv = float(pre.kv_bytes_per_sequence(2048))
    t_kv = kv / 8 / 50e9 + 5e-6  # 8 chips send their shares over 400 Gb/s NICs
    assert point.kv_transfer_s == pytest.approx(t_kv, rel=1e-12)
    assert point.ttft_s == pytest.approx(t_pre + t_kv, rel=1e-12)
    assert point.tpot_s == pytest.approx(float(dec.decode([1024], [2048 + 256]).step_s[0, 0]), rel=1e-12)
    mixed = dis.mixed(dec, 2048, 512, batch=1024)
    assert mixed.tpot_s > point.tpot_s  # the mixed step carries prefill work too
    assert set(mixed.to_dict()) == set(point.to_dict())
    fit = dis.mixed(dec, 2048, 512)
    assert fit.fits and fit.batch == fit.max_concurrency
    assert not dis.mixed(dec, 2048, 512, batch=fit.max_concurrency + 64).fits


def test_search_best_meets_slos_and_matches_the_planned_deployment() -> None:
    model = resolve_model("deepseek-v3")
    systems = [system(s) for s in ("h200-hgx", "gb200-nvl72")]
    w = Workload(traffic_tokens_per_s=200_000, input_len=1024, output_len=1024, ttft_s=1.0, tpot_s=0.03)
    r = srch.search(model, systems, w, max_chips=72)
    best = r.best
    assert best is not None and best.tpot_s <= 0.03 and best.ttft_s <= 1.0
    assert r.candidates_evaluated > 1000
    dep = plan_deployment(
        model,
        system(best.system),
        ParallelPlan(tp=best.tp, pp=best.pp, dp=best.dp, ep=best.ep),
        weights=best.precisions.weights,
        kv=best.precisions.kv,
        compute=best.precisions.compute,
    )
    again = dis.mixed(dep, 1024, 1024, batch=best.batch)
    assert again.tpot_s == pytest.approx(best.tpot_s, rel=1e-9)
    assert again.fits
    costs = [c.fleet_usd_per_million_output_tokens for c in (best, *r.runners_up)]
    assert costs == sorted(costs)


def test_infeasible_slo_names_the_binding_constraint() -> None:
    r = srch.search(
        resolve_model("deepseek-v3"), [system("h100-hgx")], Workload(1e5, tpot_s=1e-4), max_chips=64
    )
    assert r.best is None
    assert r.infeasible_reason.startswith("tpot: the best achievable TPOT is")
    small = srch.search(resolve_model("deepseek-v3"), [system("h100-hgx")], Workload(1e5), max_chips=8)
    assert small.best is None and small.families[0].binding == "memory"


@pytest.mark.parametrize("max_chips", [0, -3])
def test_pareto_and_search_refuse_a_chip_cap_below_one(max_chips: int) -> None:
    # 0 used to fall back to the default cap silently, -3 to raise a bare math domain error
    model, sys = resolve_model("llama-3.1-8b"), system("h100-hgx")
    with pytest.raises(InputError, match="--max-chips"):
        frontier.pareto(model, sys, max_chips=max_chips)
    with pytest.raises(InputError, match="--max-chips"):
        srch.search(model, [sys], Workload(1e5), max_chips=max_chips)


def test_pareto_frontier_is_monotone() -> None:
    f = frontier.pareto(resolve_model("llama-3.1-70b"), system("h100-hgx"), max_chips=16)
    x = np.array([p.tokens_per_s_per_user for p in f.frontier])
    y = np.array([p.tokens_per_s_per_chip for p in f.frontier])
    assert len(x) >= 5 and np.all(np.diff(x) < 0) and np.all(np.diff(y) > 0)
    assert np.all(f.all_per_chip <= y.max() * (1 + 1e-12))


def test_every_fitting_candidate_gives_each_data_parallel_rank_a_sequence() -> None:
    """A batch of 1 over dp=8 replicas leaves seven idle: not a deployment (it used to top
    the frontier with 64 chips at batch 1)."""
    c = candidates.evaluate(
        resolve_model("llama-3.1-70b"), system("h100-hgx"), "native", Workload(1e5), max_chips=64
    )
    assert c is not None
    assert np.any(c.fits) and np.all(c.batch[c.fits] >= c.dp[c.fits])
    assert np.any((c.batch < c.dp) & ~c.fits)


runner = CliRunner()


def test_cli_plan_json_and_infeasible() -> None:
    out = runner.invoke(
        app,
        [
            "plan",
            "llama-3.1-70b",
            "--traffic",
            "10000",
            "--hardware",
            "h100-hgx,h200-hgx",
            "--max-chips",
            "16",
            "--tpot-ms",
            "50",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["feasible"] and data["best"]["tpot_s"] <= 0.05
    bad = runner.invoke(
        app,
        [
            "plan",
            "llama-3.1-70b",
            "--traffic",
            "1000",
            "--hardware",
            "h100-hgx",
            "--max-chips",
            "16",
            "--tpot-ms",
            "0.01",
        ],
    )
    assert bad.exit_code != 0
    assert "tpot" in str(bad.exception) or "tpot" in bad.output


def test_cli_layout_and_pareto_plot(tmp_path: Path) -> None:
    out = runner.invoke(app, ["layout", "deepseek-v3", "--on", "gb200-nvl72"])
    assert out.exit_code == 0, out.output
    assert "2kL / ratio = 2" in out.output
    png = tmp_path / "frontier.png"
    res = runner.invoke(
        app, ["pareto", "llama-3.1-8b", "--on", "h100-hgx", "--max-chips", "8", "--plot", str(png)]
    )
    assert res.exit_code == 0, res.output
    assert png.stat().st_size > 10_000
