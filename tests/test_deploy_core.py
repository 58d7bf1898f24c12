"""Plan-aware core formulas (rackmath.core.parallel): hand derivations and properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.planned import plan_deployment, topology
from rackmath.catalog.loader import resolve_model, system
from rackmath.core import architecture as arch
from rackmath.core import collectives as coll
from rackmath.core import loads, rack_rules
from rackmath.core import memory as mem
from rackmath.core import network as net
from rackmath.core import parallel as par
from rackmath.core import sharding as shard
from rackmath.core.chip_rates import ChipRates
from rackmath.core.network import CommOverlap
from rackmath.core.step import PlanStep


def _by_name(step: PlanStep, attribute: str) -> dict[str, np.ndarray]:
    return {op.name: np.asarray(getattr(op, attribute)) * step.pp * step.imbalance for op in step.operators}


def test_pure_tp_without_communication_is_the_foundation_ideal_chip() -> None:
    """TP=N, DP=PP=1, communication off, against the pooled ideal chip (N x one chip, one
    rank): every operator does the same FLOPs and moves the same KV per chip; weights
    differ only by the replicated norm scales, (N-1)/N x their bytes; activations differ
    because each TP rank reads its replica's whole input (``h`` per token, not ``h/N``).
    The pooled chip is the bound no layout beats."""
    model, sys = resolve_model("llama-3.1-70b"), system("h100-hgx")
    # the identity is the pure roofline's; kernel-grounded, each TP shard's narrower GEMMs reach
    # a lower fraction of peak than the pooled chip's full-width ones (checked below)
    planned = plan_deployment(model, sys, "tp=8", communication=False, efficiency="pure")
    ideal = pooled.make_deployment(model, sys, chips=8, efficiency="pure")
    batches, contexts = [1, 16, 256, 2048], [512, 8192]
    g, f = planned.decode(batches, contexts), ideal.decode(batches, contexts)
    kg = plan_deployment(model, sys, "tp=8", communication=False).decode(batches, contexts)
    kf = pooled.make_deployment(model, sys, chips=8).decode(batches, contexts)
    assert np.all(kg.step.compute_s >= kf.step.compute_s * (1 - 1e-12))
    for attribute in ("flops", "kv_read_bytes", "kv_write_bytes"):
        plan_ops, ideal_ops = _by_name(g.step, attribute), _by_name(f.step, attribute)
        assert plan_ops.keys() == ideal_ops.keys()
        for name in plan_ops:  # per chip: the pooled chip does 8 chips' work
            np.testing.assert_allclose(8 * plan_ops[name], ideal_ops[name], rtol=1e-12, err_msg=name)
    plan_w, ideal_w = _by_name(g.step, "weight_bytes"), _by_name(f.step, "weight_bytes")
    norms = arch.param_counts(model).norms * ideal.precisions.weights.bytes_per_element
    np.testing.assert_allclose(8 * plan_w["norms"] - ideal_w["norms"], 7 * norms, rtol=1e-12)
    for name in plan_w.keys() - {"norms"}:
        np.testing.assert_allclose(8 * plan_w[name], ideal_w[name], rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(g.step.compute_s, f.step.compute_s, rtol=1e-12)
    assert np.all(g.step.comm_s == 0) and np.all(g.step.hops_s == 0)
    assert np.all(g.step_s >= f.step_s * (1 - 1e-12))
    p, q = planned.prefill([1, 4], [2048]), ideal.prefill([1, 4], [2048])
    np.testing.assert_allclose(p.step.compute_s, q.step.compute_s, rtol=1e-12)


def test_moe_pure_tp_reduces_too() -> None:
    """Routed experts split tp ways read E(1-(1-k/E)^B)/N experts per chip, like the pooled
    chip; norms and routers are replicated on every rank."""
    model, sys = resolve_model("qwen3-30b-a3b"), system("h100-hgx")
    planned = plan_deployment(model, sys, "tp=4", communication=False)
    ideal = pooled.make_deployment(model, sys, chips=4)
    g, f = planned.decode([1, 64, 1024], [4096]), ideal.decode([1, 64, 1024], [4096])
    plan_w, ideal_w = _by_name(g.step, "weight_bytes"), _by_name(f.step, "weight_bytes")
    np.testing.assert_allclose(4 * plan_w["routed_experts"], ideal_w["routed_experts"], rtol=1e-12)
    np.testing.assert_allclose(4 * plan_w["router"], 4 * ideal_w["router"], rtol=1e-12)
    plan_f, ideal_f = _by_name(g.step, "flops"), _by_name(f.step, "flops")
    np.testing.assert_allclose(4 * plan_f["routed_experts"], ideal_f["routed_experts"], rtol=1e-12)
    # every TP rank scores its replica's tokens against all experts: the router is replicated
    np.testing.assert_allclose(plan_f["router"], ideal_f["router"], rtol=1e-12)


def test_ep_all_to_all_by_hand() -> None:
    """DeepSeek-V3, ep=64 dp=64 on one NVL72, batch 2048: 32 tokens per chip. Each token
    goes once to each rank holding one of its k = 8 experts (4 of 256 experts per rank):
    a rank is missed with P = prod_{j<8} (252-j)/(256-j), so D = 64 (1 - P) = 7.68 ranks,
    M = 32 x D x 7168 x 2 B; (63/64) M / 900 GB/s + 2 us, twice (dispatch, combine) in
    each of 58 MoE layers (the link model: ``--efficiency pure``; the fitted DeepEP curves are
    ``tests/test_comm_operators.py``'s)."""
    model, sys = resolve_model("deepseek-v3"), system("gb200-nvl72")
    dep = plan_deployment(model, sys, "dp=64,ep=64", efficiency="pure")
    miss = float(np.prod([(252 - j) / (256 - j) for j in range(8)]))
    ranks = 64 * (1 - miss)
    assert ranks == pytest.approx(7.68, abs=0.01)
    m_bytes = 32 * ranks * 7168 * 2
    one = 63 / 64 * m_bytes / 900e9 + 2e-6
    assert dep.decode([2048], [4096]).step.ep_comm_s[0, 0] == pytest.approx(2 * 58 * one, rel=1e-12)
    # over two racks (32 chips each): half of M stays (31/32 of it leaves the chip over
    # NVLink), half crosses at 50 GB/s with a 5 us hop
    two = plan_deployment(model, sys, "dp=64,ep=64", chips_per_domain=32, efficiency="pure")
    crossing = (31 / 32 * m_bytes / 2 / 900e9 + 2e-6) + 0.5 * m_bytes / 50e9 + 5e-6
    assert two.decode([2048], [4096]).step.ep_comm_s[0, 0] == pytest.approx(2 * 58 * crossing, rel=1e-12)


def test_ep2_sends_each_token_once_per_destination_rank() -> None:
    """The bug this fixes: EP2 with k = 8 of 256 experts charged 8 copies per token
    (4 of them crossing). Each token reaches at most 2 ranks: D = 2 (1 - prod_{j<8}
    (128-j)/(256-j)) = 1.993, so (1/2) D = 0.997 copies leave the chip, not 4."""
    miss = float(np.prod([(128 - j) / (256 - j) for j in range(8)]))
    assert float(coll.expected_destination_ranks(2, 256, 8)) == pytest.approx(2 * (1 - miss), rel=1e-12)
    assert float(coll.expected_destination_ranks(2, 256, 8)) == pytest.approx(1.993, abs=1e-3)
    assert float(coll.expected_destination_ranks(1, 256, 8)) == pytest.approx(1.0)
    # one expert per rank: every pick is a distinct rank
    assert float(coll.expected_destination_ranks(256, 256, 8)) == pytest.approx(8.0)


def test_tp_all_reduce_and_pipeline_hop_by_hand() -> None:
    """Llama-3.1-70B tp=8 on HGX H100, batch 64: two ring all-reduces per layer of
    64 x 8192 x 2 B: 2 (7/8) M / 450 GB/s + 2 x 7 x 2 us each, 80 layers (the link model:
    ``--efficiency pure``; the fitted curves are ``tests/test_comm_operators.py``'s)."""
    model, sys = resolve_model("llama-3.1-70b"), system("h100-hgx")
    m_bytes = 64 * 8192 * 2
    one = 2 * (7 / 8) * m_bytes / 450e9 + 2 * 7 * 2e-6
    dep = plan_deployment(model, sys, "tp=8", efficiency="pure")
    assert dep.decode([64], [4096]).step.tp_comm_s[0, 0] == pytest.approx(2 * 80 * one, rel=1e-12)
    # pp=2: stages of 8 chips fill an HGX each, so both decode hops (activations forward,
    # sampled token back) cross InfiniBand: each chip sends 32 tokens x 8192 x 2 B / 8
    pp = plan_deployment(model, sys, "tp=8,pp=2")
    hop = 32 * 8192 * 2 / 8 / 50e9 + 5e-6
    assert pp.decode([64], [4096]).step.hops_s[0, 0] == pytest.approx(2 * hop, rel=1e-12)
    assert pp.notes == ("2 of 2 pipeline hops per decode token cross scale-out",)


def test_lecture_memory_formula_kv_share_is_independent_of_p() -> None:
    """D20: c = N/(E P) + b len bytes / E; E = 64, b = 256, len = 4096, DeepSeek 671 GB fp8."""
    n_bytes, e, b, length, kv_tok = 671e9, 64, 256, 4096, 70_272.0
    kv = b * length * kv_tok / e
    for p in (1, 2, 4, 8):
        c = float(mem.lecture_memory_per_chip_bytes(n_bytes, e, p, b, length, kv_tok))
        assert c == pytest.approx(n_bytes / (e * p) + kv, rel=1e-12)
    # the general per-chip KV with B = P b sequences and 1/P of the layers per stage agrees
    for p in (1, 2, 4, 8):
        general = mem.kv_bytes_per_chip(length * kv_tok, p * b, tp=1, pp=p, dp=e, kv_heads=1)
        assert float(general) == pytest.approx(kv, rel=1e-12)


def test_rack_boundary_rule() -> None:
    """D17: k = 8, L = 1, ratio 8 -> 2kL/ratio = 2; with GB200's catalog ratio 900/50 = 18 a
    one-layer stage is just short (16/18), two layers clear it (32/18)."""
    assert float(rack_rules.pipeline_cut_advantage(8, 1, 8.0, 1.0)) == 2.0
    topo = topology(system("gb200-nvl72"))
    assert topo.bandwidth_ratio == 18.0
    assert float(
        rack_rules.pipeline_cut_advantage(8, 1, topo.scale_up_bytes_per_s, topo.scale_out_bytes_per_s)
    ) == pytest.approx(16 / 18)
    assert (
        float(rack_rules.pipeline_cut_advantage(8, 2, topo.scale_up_bytes_per_s, topo.scale_out_bytes_per_s))
        > 1
    )


def test_weight_fetch_floor_for_scale_up_sizes() -> None:
    """D23: 671 GB (fp8 DeepSeek) at 8 TB/s per chip: S = 8 -> 10.5 ms, 72 -> 1.16 ms, 576 -> 0.146 ms."""
    got = rack_rules.weight_fetch_floor_s(671e9, np.array([8, 72, 576]), 8e12)
    np.testing.assert_allclose(got, [671e9 / 64e12, 671e9 / 576e12, 671e9 / 4608e12], rtol=1e-12)
    assert got[0] == pytest.approx(10.48e-3, rel=1e-3)


@given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=9), st.integers(1, 4))
def test_balanced_stages_is_optimal(costs: list[float], stages: int) -> None:
    """The DP matches brute force over every contiguous split."""
    stages = min(stages, len(costs))
    split = shard.balanced_stages(costs, stages)
    best = min(
        max(sum(costs[a:b]) for a, b in zip((0, *cuts), (*cuts, len(costs)), strict=True))
        for cuts in itertools.combinations(range(1, len(costs)), stages - 1)
    )
    assert max(split.stage_costs) == pytest.approx(best, rel=1e-12)
    assert sum(split.stage_layers) == len(costs)
    assert split.imbalance >= 1.0 - 1e-12


def test_stage_balance_sees_dense_and_sliding_layers() -> None:
    """DeepSeek's 3 dense layers and gemma-3's 5:1 sliding/global pattern leave imbalance."""
    ds = shard.shardable(resolve_model("deepseek-v3"), 1.0)
    assert shard.balanced_stages(ds.layer_bytes, 8).imbalance > 1.05
    gemma = resolve_model("gemma-3-27b")
    g = shard.shardable(gemma, 2.0)
    uniform = shard.balanced_stages(g.layer_bytes, 31).imbalance
    with_kv = shard.layer_costs_bytes(gemma, g, batch=64, context=131072, kv_bytes_per_element=2.0)
    assert shard.balanced_stages(with_kv, 31).imbalance > uniform + 0.5


_MODELS = ["deepseek-v3", "llama-3.1-70b", "qwen3-235b-a22b", "mixtral-8x7b"]


@given(
    st.sampled_from(_MODELS),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from(["tp", "pp", "dp", "ep"]),
)
def test_sharding_further_never_adds_memory(name: str, tp: int, pp: int, dp: int, ep: int, dim: str) -> None:
    model = resolve_model(name)
    m = shard.shardable(model, 1.0)
    ep = ep if model.is_moe else 1
    plan = {"tp": tp, "pp": pp, "dp": dp, "ep": min(ep, dp * tp)}
    more = dict(plan)
    more[dim] *= 2
    if not model.is_moe and dim == "ep":
        return

    def per_chip(p: dict[str, int]) -> float:
        frac_w, frac_l = shard.stage_fractions(m.layer_bytes, p["pp"])
        w = mem.weight_bytes_per_chip(m, tp=p["tp"], pp=p["pp"], ep=p["ep"], stage_frac=frac_w).total
        kv = mem.kv_bytes_per_chip(
            1e6, 512, tp=p["tp"], pp=p["pp"], dp=p["dp"], kv_heads=m.kv_heads, layer_frac=frac_l
        )
        return float(w + kv)

    assert per_chip(more) <= per_chip(plan) * (1 + 1e-12)


@given(
    st.floats(1e3, 1e9),
    st.sampled_from([2, 4, 8, 16, 64, 256]),
    st.sampled_from([2, 4, 8]),
    st.floats(1e9, 2e12),
    st.floats(1.0, 100.0),
    st.floats(0.0, 1e-5),
    st.floats(0.0, 1e-4),
)
def test_all_to_all_in_domain_never_slower(
    m: float, n: int, r: int, up: float, ratio: float, a_up: float, extra: float
) -> None:
    inside = coll.hierarchical_all_to_all_s(m, n, 1, up, up / ratio, a_up, a_up + extra)
    crossing = coll.hierarchical_all_to_all_s(m, n, min(r, n), up, up / ratio, a_up, a_up + extra)
    assert float(inside) <= float(crossing) * (1 + 1e-12)


@given(
    st.sampled_from([1, 2, 4, 8]), st.floats(0.0, 1e-2), st.floats(0.0, 1e-2), st.sampled_from([1, 64, 1024])
)
def test_hop_latency_never_lowers_decode_latency(pp: int, h1: float, h2: float, batch: int) -> None:
    model = resolve_model("llama-3.1-405b")
    m = shard.shardable(model, 1.0)
    topo = topology(system("h100-hgx"))
    lo, hi = sorted((h1, h2))

    def tpot(h: float) -> float:
        return float(
            par.plan_step(
                m,
                tp=8,
                pp=pp,
                dp=1,
                ep=1,
                load=loads.decode_load(model, batch, 4096, 1.0),
                rates=ChipRates.uniform(1e15, 3.35e12),
                topo=topo,
                extra_hop_latency_s=h,
            ).step_s
        )

    assert tpot(hi) >= tpot(lo)


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_comm_combination_between_max_and_sum(t: float, c: float, f: float) -> None:
    got = float(net.combine_comm_s(t, c, f))
    assert max(t, c) - 1e-15 <= got <= t + c + 1e-15
    assert float(net.combine_comm_s(t, c, CommOverlap.ADDED)) == pytest.approx(t + c)
    assert float(net.combine_comm_s(t, c, CommOverlap.OVERLAPPED)) == pytest.approx(max(t, c))
