"""Plans as 2026 deployments state them: attention TP x DP beside MoE TP x EP, wide EP,
redundant expert slots (EPLB), routing skew and two-batch overlap.

Each feature is checked against a derivation written out here from the model's config
(DeepSeek-V3: hidden 7168, 61 layers of which 58 MoE, 256 experts of intermediate 2048,
k = 8, MLA caching 512 + 64 values per token and layer) and the GB200 NVL72 catalog
(72 chips per NVLink domain, 900 GB/s up, 50 GB/s out per direction), with the pure
roofline so the numbers do not depend on the default efficiency.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath as rm
from rackmath.analyses.serving.planned import plan_deployment, topology
from rackmath.core import loads
from rackmath.core import memory as memory_account
from rackmath.core import network as net
from rackmath.core import operators as ops
from rackmath.core import parallel as par
from rackmath.core import roofline as rl
from rackmath.core import sharding as shard
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.specs.plan import ParallelPlan

H, LAYERS, MOE_LAYERS, E, K, EXPERT_I = 7168, 61, 58, 256, 8, 2048
#: one routed expert's parameters over the 58 MoE layers: gate, up and down (SwiGLU)
EXPERT_PARAMS = 3 * H * EXPERT_I * MOE_LAYERS  # 2,554,331,136
MLA_VALUES = 512 + 64


@pytest.fixture(scope="module")
def dsv3():
    return rm.model("deepseek-v3")


@pytest.fixture(scope="module")
def nvl72():
    return rm.system("gb200-nvl72")


def _dep(dsv3, nvl72, plan: str, **kw):
    return plan_deployment(dsv3, nvl72, plan, efficiency=rl.PURE_ROOFLINE, **kw)


def _op(step: PlanStep, name: str) -> ops.Operator:
    return next(op for op in step.operators if op.name == name)


def _f(x) -> float:
    """One point's value, whatever the grid's shape."""
    return float(np.asarray(x).ravel()[0])


# ----------------------------------------------------------------------------- grammar


def test_the_plan_grammar_states_a_wide_ep_deployment() -> None:
    plan = ParallelPlan.parse("attn_tp=1,attn_dp=72,ep=72,redundant_experts=32,skew=1.3,tbo=on")
    assert (plan.tp, plan.dp, plan.ep, plan.redundant_experts, plan.skew, plan.tbo) == (
        1,
        72,
        72,
        32,
        1.3,
        1.0,
    )
    assert str(plan) == "dp=72,ep=72,redundant_experts=32,skew=1.3,tbo=on"
    assert ParallelPlan.parse(str(plan)) == plan
    assert ParallelPlan.parse("tp=4,dp=8,moe_tp=2,ep=16").expert_shards == 32
    assert ParallelPlan.parse("tp=4,dp=8,ep=16").expert_shards == 16  # max(ep, tp) without moe_tp
    assert ParallelPlan.parse("dp=8,ep=8,tbo=0.5").tbo == 0.5
    assert ParallelPlan.parse("dp=8,ep=8,tbo=off").tbo == 0.0


@pytest.mark.parametrize(
    ("text", "field", "hint"),
    [
        ("dp=8,ep=8,skew=0.5", "plan skew", "a number >= 1"),
        ("dp=8,ep=8,skew=9", "plan skew", "1 to ep = 8"),
        ("skew=1.3", "plan skew", "set ep > 1"),
        ("dp=8,ep=8,skew=nan", "plan skew", "a number >= 1"),
        ("dp=8,ep=8,tbo=2", "plan tbo", "on, off or an overlap fraction"),
        ("dp=8,ep=8,tbo=maybe", "plan tbo", "on, off or an overlap fraction"),
        ("redundant_experts=4", "plan redundant_experts", "set ep > 1"),
        ("dp=8,ep=8,redundant_experts=-1", "plan redundant_experts", "a whole number >= 0"),
        ("dp=8,ep=4,moe_tp=3", "plan moe_tp", "try moe_tp=2"),
        ("dp=8,ep=8,moe_tp=x", "plan moe_tp", "a whole number >= 0"),
    ],
)
def test_bad_plan_values_name_the_field_the_range_and_a_fix(text: str, field: str, hint: str) -> None:
    with pytest.raises(InputError) as err:
        ParallelPlan.parse(text)
    assert err.value.field == field and hint in err.value.allowed
    assert "\n" not in str(err.value)


def test_a_plan_the_model_cannot_hold_says_how_to_fix_it(dsv3, nvl72) -> None:
    with pytest.raises(InputError, match="set redundant_experts >= 32"):
        _dep(dsv3, nvl72, "dp=288,ep=288")
    with pytest.raises(InputError, match="dense: ep must be 1"):
        plan_deployment(rm.model("llama-3.1-70b"), nvl72, "dp=8,ep=8,redundant_experts=8")


def test_bad_plans_exit_1_with_one_line(cli) -> None:
    code, _, err = cli(
        "explain", "deepseek-v3", "--on", "gb200-nvl72", "--chips", "72", "--plan", "dp=72,ep=72,tbo=2"
    )
    assert code == 1 and "plan tbo" in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- hand derivations


def test_redundant_slots_memory_is_ceil_of_slots_over_ep(dsv3, nvl72) -> None:
    """256 + 32 slots on EP = 72: 4 experts per chip, each 3 x 7168 x 2048 x 58 parameters."""
    dep = _dep(dsv3, nvl72, "dp=72,ep=72,redundant_experts=32")
    weights = dep.memory(0.0, 4096).weights
    bytes_per_param = dsv3.weight_precision("routed_experts", dep.precisions.weights).bytes_per_element
    assert float(weights.routed_experts) == pytest.approx(4 * EXPERT_PARAMS * bytes_per_param, rel=1e-12)
    # 72 ranks without redundancy still hold ceil(256/72) = 4 on the fullest rank
    plain = _dep(dsv3, nvl72, "dp=72,ep=72").memory(0.0, 4096).weights.routed_experts
    assert float(plain) == pytest.approx(float(weights.routed_experts))
    # EP = 64: 256/64 = 4 exactly; 32 redundant make it ceil(288/64) = 5
    five = _dep(dsv3, nvl72, "dp=64,ep=64,redundant_experts=32").memory(0.0, 4096).weights.routed_experts
    four = _dep(dsv3, nvl72, "dp=64,ep=64").memory(0.0, 4096).weights.routed_experts
    assert float(five) / float(four) == pytest.approx(5 / 4, rel=1e-12)


def test_attention_dp_holds_all_attention_weights_and_splits_kv_by_sequence(dsv3, nvl72) -> None:
    """Attention DP = 32, TP = 1 (DeepSeek-V3's decode layout) against TP = 4 x DP = 8.

    MLA caches one 576-value latent per token and layer, shared by all heads, so TP cannot
    split it: at TP = 4 every chip of a replica holds its replica's whole cache.
    """
    b, ctx = 256.0, 4096.0
    kv_el = 1.0  # fp8 KV for this check
    kv_seq = LAYERS * MLA_VALUES * kv_el * ctx
    m = shard.shardable(dsv3, 1.0)
    kv_dp = memory_account.kv_bytes_per_chip(kv_seq, b, tp=1, pp=1, dp=32, kv_heads=m.kv_heads)
    kv_tp = memory_account.kv_bytes_per_chip(kv_seq, b, tp=4, pp=1, dp=8, kv_heads=m.kv_heads)
    assert float(kv_dp) == pytest.approx(b / 32 * kv_seq, rel=1e-12)
    assert float(kv_tp) == pytest.approx(b / 8 * kv_seq, rel=1e-12)  # 4x the attention-DP cache
    w_dp = memory_account.weight_bytes_per_chip(m, tp=1, pp=1, ep=32)
    w_tp = memory_account.weight_bytes_per_chip(m, tp=4, pp=1, ep=32)
    assert float(w_dp.tp_sharded) == pytest.approx(m.tp_sharded_bytes)  # attention whole on every chip
    assert float(w_tp.tp_sharded) == pytest.approx(m.tp_sharded_bytes / 4)
    assert float(w_dp.routed_experts) == pytest.approx(
        E / 32 * EXPERT_PARAMS, rel=1e-12
    )  # 8 experts, 1 B/param


def test_moe_tp_splits_each_expert_beside_ep(dsv3) -> None:
    m = shard.shardable(dsv3, 1.0)
    default = memory_account.weight_bytes_per_chip(m, tp=4, pp=1, ep=16)  # max(16, 4) = 16 shards
    split = memory_account.weight_bytes_per_chip(m, tp=4, pp=1, ep=16, moe_tp=2)  # 2 x 16 = 32 shards
    assert float(default.routed_experts) == pytest.approx(E * EXPERT_PARAMS / 16, rel=1e-12)
    assert float(split.routed_experts) == pytest.approx(E * EXPERT_PARAMS / 32, rel=1e-12)


def test_skew_scales_the_busiest_ranks_expert_gemm_and_all_to_all(dsv3, nvl72) -> None:
    """Batch 4608 on attention DP = 72 x EP = 72: each chip decodes 64 sequences; the one
    EP group routes 4608 x 8 token-expert pairs; the busiest rank gets 1.3 / 72 of them."""
    b, ctx, skew = 4608.0, 4096.0, 1.3
    flat = _dep(dsv3, nvl72, "dp=72,ep=72").decode([b], [ctx]).step
    hot = _dep(dsv3, nvl72, f"dp=72,ep=72,skew={skew}").decode([b], [ctx]).step
    expert = _op(hot, "routed_experts")
    flops = 2.0 * b * K * skew * EXPERT_PARAMS / 72
    assert _f(expert.flops) == pytest.approx(flops, rel=1e-12)
    peak = nvl72.chip.peak_flops(_dep(dsv3, nvl72, "dp=72,ep=72").precisions.compute)
    assert _f(expert.compute_s) == pytest.approx(flops / peak, rel=1e-12)
    assert _f(expert.flops) / _f(_op(flat, "routed_experts").flops) == pytest.approx(skew)
    # dispatch + combine: 64 tokens per chip x 1.3, each to D ranks, 7168 bf16 values, twice
    # per MoE layer, all 72 ranks on NVLink: (n-1)/n M / B_up + alpha
    miss = math.prod((E - E / 72 - j) / (E - j) for j in range(K))
    ranks = 72 * (1 - miss)
    message = 64 * skew * ranks * H * 2.0
    one = 71 / 72 * message / 900e9 + 2e-6
    assert float(hot.ep_comm_pass_s[0, 0]) == pytest.approx(2 * MOE_LAYERS * one, rel=1e-9)
    assert float(hot.step_s[0, 0]) > float(flat.step_s[0, 0])
    # the other operators do not see the skew
    assert _f(_op(hot, "attention").time_s) == pytest.approx(_f(_op(flat, "attention").time_s))


def test_wide_ep_beyond_one_rack_crosses_scale_out(dsv3, nvl72) -> None:
    """EP = 144 over two NVL72 racks: half of each chip's dispatch bytes stay in its rack
    (a 72-rank all-to-all on NVLink), half cross at 50 GB/s."""
    topo = topology(nvl72)
    assert float(net.place(topo, 72).domains) == 1 and float(net.place(topo, 144).domains) == 2
    m = 1e6
    t = float(net.ep_all_to_all_s(m / (H * 2.0), 1.0, H, 1, 144, topo))
    inside = 71 / 72 * (m / 2) / 900e9 + 2e-6
    across = 0.5 * m / 50e9 + 5e-6
    assert t == pytest.approx(2 * (inside + across), rel=1e-12)
    dep = _dep(dsv3, nvl72, "dp=144,ep=144,redundant_experts=32")
    assert any("EP group of 144 spans 2 domains: 50%" in n for n in dep.notes)
    assert not any("EP group" in n for n in _dep(dsv3, nvl72, "dp=72,ep=72").notes)
    # MoE TP = 2 spaces the EP ranks two chips apart: EP = 72 then needs two racks
    assert float(net.place(topo, 72, 2).domains) == 2


def test_two_batch_overlap_exposes_only_what_the_pass_cannot_hide(dsv3, nvl72) -> None:
    assert float(net.two_batch_overlap_s(3e-3, 2e-3, 1.0)) == pytest.approx(1e-3)
    assert float(net.two_batch_overlap_s(3e-3, 2e-3, 0.5)) == pytest.approx(2e-3)
    assert float(net.two_batch_overlap_s(1e-3, 2e-3, 1.0)) == 0.0
    # two racks, 64 sequences a chip: the step splits into two halves of 4,608 sequences, each
    # through every operator and its own all-to-all (pp = 1, tp = 1: no TP comm)
    b, ctx = 9216.0, 4096.0
    plain = _dep(dsv3, nvl72, "dp=144,ep=144,redundant_experts=32")
    off = plain.decode([b], [ctx]).step
    half = plain.decode([b / 2], [ctx]).step
    on = _dep(dsv3, nvl72, "dp=144,ep=144,redundant_experts=32,tbo=on").decode([b], [ctx]).step
    pass_half, ep_half = float(half.roofline_s[0, 0]), float(half.ep_comm_s[0, 0])
    assert float(off.exposed_communication_s[0, 0]) == pytest.approx(float(off.ep_comm_s[0, 0]))
    tbo = 2 * pass_half + max(0.0, 2 * ep_half - 2 * pass_half)
    assert tbo < float(off.step_s[0, 0])  # here splitting pays
    assert float(on.step_s[0, 0]) == pytest.approx(tbo, rel=1e-12)
    assert float(on.roofline_s[0, 0]) == pytest.approx(2 * pass_half, rel=1e-12)  # the halves' operators
    assert float(on.ep_comm_s[0, 0]) == pytest.approx(2 * ep_half, rel=1e-12)
    assert float(on.exposed_communication_s[0, 0]) == pytest.approx(
        max(0.0, 2 * ep_half - 2 * pass_half), abs=1e-12
    )
    # one rack at 64 sequences a chip: reading the weights twice costs more than the overlap saves
    one = _dep(dsv3, nvl72, "dp=72,ep=72,redundant_experts=32").decode([4608.0], [ctx]).step
    one_on = _dep(dsv3, nvl72, "dp=72,ep=72,redundant_experts=32,tbo=on").decode([4608.0], [ctx]).step
    assert float(one_on.step_s[0, 0]) == float(one.step_s[0, 0])
    assert [o.name for o in one_on.operators] == [o.name for o in one.operators]
    assert float(one_on.roofline_s[0, 0]) == float(one.roofline_s[0, 0])  # the whole micro-batch's


def test_worked_example_deepseek_v3_wide_ep_on_gb200(dsv3, nvl72) -> None:
    """docs/plans.md's worked example, each figure recomputed here from the config and catalog."""
    plan = "dp=72,ep=72,redundant_experts=32,skew=1.3,tbo=on"
    dep = _dep(dsv3, nvl72, plan, weights="fp8", kv="fp8")
    g = dep.decode([4608], [4096])
    step, mem = g.step, g.memory
    # 1. four slots of one expert each (fp8: 1 byte per parameter)
    assert _f(mem.weights.routed_experts) == pytest.approx(4 * EXPERT_PARAMS * 1.0, rel=1e-12)
    assert pytest.approx(10.22, abs=0.005) == 4 * EXPERT_PARAMS / 1e9
    # 2. KV: 64 sequences x 61 layers x 576 values x 1 B x 4096 tokens
    kv = 64 * LAYERS * MLA_VALUES * 1.0 * 4096
    assert _f(mem.kv_bytes) == pytest.approx(kv, rel=1e-12) and kv / 1e9 == pytest.approx(9.21, abs=0.005)
    # 3. memory per chip as quoted: what the chip holds (the reserve lowers what it may fill)
    held = _f(mem.weights.total) + kv + _f(mem.activation_bytes)
    assert _f(mem.total_bytes) == pytest.approx(held, rel=1e-12)
    p = dep.params  # fp8 converts the blocks' matmuls; embedding, head, routers, norms stay bf16
    wide = p.embedding + p.lm_head + p.router + p.norms
    assert _f(mem.weights.total) == pytest.approx(
        (p.total - p.routed_experts - wide) * 1.0 + 4 * EXPERT_PARAMS * 1.0 + wide * 2.0, rel=1e-12
    )
    assert held / 1e9 == pytest.approx(38.5, abs=0.05) and _f(mem.activation_bytes) / 1e9 < 0.02
    assert mem.usable_bytes / 1e9 == pytest.approx(198.7 * 0.9, abs=0.05)
    # 4. the busiest rank's expert GEMM: compute 0.68 ms under the weights' 1.28 ms
    expert = _op(step, "routed_experts")
    flops = 2 * 4608 * K * 1.3 * EXPERT_PARAMS / 72
    assert _f(expert.flops) == pytest.approx(flops, rel=1e-12)
    assert flops / 5e15 * 1e3 == pytest.approx(0.68, abs=0.005)
    assert _f(expert.weight_bytes) / 8e12 * 1e3 == pytest.approx(1.28, abs=0.005)  # all 4 slots touched
    assert (
        _f(expert.time_s) * 1e3 == pytest.approx(1.430, abs=5e-4) and str(expert.bound.ravel()[0]) == "memory"
    )
    # 5. dispatch + combine: D ranks, 64 x 1.3 tokens per chip, one rack
    ranks = 72 * (1 - math.prod((E - E / 72 - j) / (E - j) for j in range(K)))
    assert ranks == pytest.approx(7.72, abs=0.005)
    message = 64 * 1.3 * ranks * H * 2.0
    a2a = 2 * MOE_LAYERS * (71 / 72 * message / 900e9 + 2e-6)
    assert _f(step.ep_comm_s) == pytest.approx(a2a, rel=1e-9) and a2a * 1e3 == pytest.approx(1.403, abs=5e-4)
    # 6. TBO: two halves would read the weights twice (2 x 4.199 ms) to hide 1.403 ms: no split
    pass_s = _f(step.roofline_s)
    assert pass_s == pytest.approx(sum(_f(op.time_s) for op in step.operators), rel=1e-12)
    assert pass_s * 1e3 == pytest.approx(4.969, abs=5e-4)
    off = _dep(dsv3, nvl72, "dp=72,ep=72,redundant_experts=32,skew=1.3", weights="fp8", kv="fp8")
    half = off.decode([2304], [4096]).step
    assert _f(half.roofline_s) * 1e3 == pytest.approx(4.199, abs=5e-4)
    assert _f(half.ep_comm_s) * 1e3 == pytest.approx(0.817, abs=5e-4)
    assert _f(step.step_s) == pytest.approx(pass_s + a2a, rel=1e-12) and _f(
        step.step_s
    ) * 1e3 == pytest.approx(6.371, abs=5e-4)
    assert 64 / _f(step.step_s) == pytest.approx(10045, abs=1)
    assert _f(off.decode([4608], [4096]).step_s) == _f(step.step_s)
    # at 256 sequences a chip it pays: 15.329 ms -> two 6.507 ms halves hiding 2 x 2.574 ms
    big = dep.decode([18432], [4096])
    whole, halves = off.decode([18432], [4096]).step, off.decode([9216], [4096]).step
    assert _f(whole.step_s) * 1e3 == pytest.approx(15.329, abs=5e-4)
    assert _f(halves.roofline_s) * 1e3 == pytest.approx(6.507, abs=5e-4)
    assert _f(halves.ep_comm_s) * 1e3 == pytest.approx(2.574, abs=5e-4)
    assert _f(big.step.step_s) == pytest.approx(2 * _f(halves.roofline_s), rel=1e-12)
    assert _f(big.step.step_s) * 1e3 == pytest.approx(13.014, abs=5e-4)
    assert 256 / _f(big.step.step_s) == pytest.approx(19671, abs=1)
    assert _f(big.memory.total_bytes) == pytest.approx(
        _f(big.memory.weights.total) + 4 * kv + _f(big.memory.activation_bytes), rel=1e-12
    )
    assert _f(big.memory.total_bytes) / 1e9 == pytest.approx(66.2, abs=0.05)
    # two racks at 64 sequences a chip: 16.69 ms without TBO, 13.17 ms with it
    racks = "dp=144,ep=144,redundant_experts=32,skew=1.3"
    wide_off = _dep(dsv3, nvl72, racks, weights="fp8", kv="fp8").decode([9216], [4096]).step
    wide_on = _dep(dsv3, nvl72, racks + ",tbo=on", weights="fp8", kv="fp8").decode([9216], [4096]).step
    assert _f(wide_off.ep_comm_s) * 1e3 == pytest.approx(12.36, abs=0.005)
    assert _f(wide_off.step_s) * 1e3 == pytest.approx(16.69, abs=0.005)
    assert _f(wide_on.step_s) * 1e3 == pytest.approx(13.17, abs=0.005)


# ----------------------------------------------------------------------------- invariants

_PLANS = st.sampled_from(
    [(1, 8, 8), (1, 32, 32), (1, 64, 64), (1, 72, 72), (4, 8, 32), (2, 72, 144), (8, 8, 8)]
)


def _step(dsv3, nvl72, tp, dp, ep, b, ctx, **kw):
    dep = _dep(dsv3, nvl72, f"tp={tp},dp={dp},ep={ep}")
    m = dep.shardable
    load = loads.decode_load(dsv3, b, ctx, 1.0)
    return par.plan_step(
        m, tp=tp, pp=1, dp=dp, ep=ep, load=load, rates=dep.chip_rates(), topo=dep.topology, **kw
    )


@settings(max_examples=40, deadline=None)
@given(plan=_PLANS, b=st.floats(1, 1e5), ctx=st.floats(1, 2e5))
def test_balanced_defaults_equal_the_explicit_balanced_plan(dsv3, nvl72, plan, b, ctx) -> None:
    """skew = 1, no redundant slots, no moe_tp and no TBO are today's balanced numbers; and
    moe_tp = max(ep, tp)/ep states the same expert split explicitly."""
    tp, dp, ep = plan
    base = _step(dsv3, nvl72, tp, dp, ep, b, ctx)
    same = _step(dsv3, nvl72, tp, dp, ep, b, ctx, skew=1.0, redundant_experts=0, tbo_overlap_frac=0.0)
    explicit = _step(dsv3, nvl72, tp, dp, ep, b, ctx, moe_tp=max(ep, tp) // ep)
    assert float(same.step_s) == float(base.step_s)
    expert = _op(base, "routed_experts")
    # balanced: the b k token-expert pairs spread evenly over the stage's dp x tp chips
    assert _f(expert.flops) == pytest.approx(2 * b * K * EXPERT_PARAMS / (dp * tp), rel=1e-9)
    if ep > 1:  # the EP ranks stay one chip apart in both statements when ep >= tp
        assert _f(_op(explicit, "routed_experts").time_s) == pytest.approx(_f(expert.time_s), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    plan=_PLANS,
    b=st.floats(1, 1e5),
    ctx=st.floats(1, 2e5),
    o=st.floats(0, 1),
    f=st.floats(0, 1),
    skew=st.floats(1, 4),
)
def test_two_batch_overlap_never_lengthens_the_step(dsv3, nvl72, plan, b, ctx, o, f, skew) -> None:
    tp, dp, ep = plan
    off = _step(dsv3, nvl72, tp, dp, ep, b, ctx, comm_overlap_frac=f, skew=min(skew, ep))
    on = _step(dsv3, nvl72, tp, dp, ep, b, ctx, comm_overlap_frac=f, skew=min(skew, ep), tbo_overlap_frac=o)
    assert float(on.step_s) <= float(off.step_s) * (1 + 1e-12)
    assert float(on.step_s) >= float(on.roofline_s) * (1 - 1e-12)  # never below the operators


@settings(max_examples=40, deadline=None)
@given(plan=_PLANS, r=st.integers(0, 512), b=st.floats(0, 1e4), s1=st.floats(1, 4), s2=st.floats(1, 4))
def test_redundant_slots_never_reduce_memory_and_skew_never_speeds_up(
    dsv3, nvl72, plan, r, b, s1, s2
) -> None:
    tp, dp, ep = plan
    m = shard.shardable(dsv3, 1.0)
    kw = dict(batch=b, kv_bytes_per_sequence=1e6, tokens_in_flight=b, tp=tp, pp=1, dp=dp, ep=ep)
    none = memory_account.serving_memory_per_chip(m, **kw).total_bytes
    more = memory_account.serving_memory_per_chip(m, redundant_experts=r, **kw).total_bytes
    assert float(more) >= float(none)
    lo, hi = sorted((min(s1, ep), min(s2, ep)))
    slow = _step(dsv3, nvl72, tp, dp, ep, max(b, 1.0), 4096.0, skew=hi)
    fast = _step(dsv3, nvl72, tp, dp, ep, max(b, 1.0), 4096.0, skew=lo)
    assert float(slow.step_s) >= float(fast.step_s) * (1 - 1e-12)


def test_new_fields_broadcast_over_a_plan_grid(dsv3, nvl72) -> None:
    """Everything stays vectorized: skew, redundancy and TBO as arrays give the per-point answers."""
    skews = np.array([1.0, 1.3, 2.0])[:, None]
    tbo = np.array([0.0, 1.0])[None, :]
    grid = _step(
        dsv3, nvl72, 1, 72, 72, 4608.0, 4096.0, skew=skews, tbo_overlap_frac=tbo, redundant_experts=32
    )
    assert grid.step_s.shape == (3, 2)
    for i, s in enumerate(skews[:, 0]):
        for j, o in enumerate(tbo[0]):
            one = _step(
                dsv3, nvl72, 1, 72, 72, 4608.0, 4096.0, skew=s, tbo_overlap_frac=o, redundant_experts=32
            )
            assert float(grid.step_s[i, j]) == pytest.approx(float(one.step_s), rel=1e-12)


_ROW_FIELDS = ("tp", "pp", "dp", "ep", "cp", "batch", "tpot_s", "memory_bytes_per_chip")


def test_the_search_evaluates_skew_redundancy_and_tbo(dsv3, nvl72) -> None:
    """The search's candidates carry the plan fields: skew never speeds a candidate up,
    TBO never slows one down, redundant slots never shrink its memory; dense-EP-free
    candidates (ep = 1) are untouched."""
    from rackmath.analyses.deploy import candidates

    w = candidates.Workload(traffic_tokens_per_s=1e5)
    base = candidates.evaluate(dsv3, nvl72, "native", w, max_chips=72, max_pp=1)
    hot = candidates.evaluate(
        dsv3, nvl72, "native", w, max_chips=72, max_pp=1, skew=1.3, redundant_experts=32
    )
    tbo = candidates.evaluate(
        dsv3, nvl72, "native", w, max_chips=72, max_pp=1, skew=1.3, redundant_experts=32, tbo_overlap_frac=1.0
    )
    assert base is not None and hot is not None and tbo is not None
    # redundant slots open EP degrees dividing E + R (72, 36, ...): compare on the base's rows
    key = {
        (*r,): i for i, r in enumerate(zip(hot.tp, hot.pp, hot.dp, hot.ep, hot.cp, hot.batch, strict=True))
    }
    rows = np.array(
        [key[(*r,)] for r in zip(base.tp, base.pp, base.dp, base.ep, base.cp, base.batch, strict=True)]
    )
    assert hot.size > base.size and np.any(hot.ep == 72)
    hot, tbo = (dataclasses.replace(c, **{f: getattr(c, f)[rows] for f in _ROW_FIELDS}) for c in (hot, tbo))
    wide = base.ep > 1
    assert wide.any() and (~wide).any()
    assert np.all(hot.tpot_s >= base.tpot_s * (1 - 1e-12))
    assert np.all(hot.tpot_s[wide] > base.tpot_s[wide])
    assert np.array_equal(hot.tpot_s[~wide], base.tpot_s[~wide])
    assert np.all(hot.memory_bytes_per_chip >= base.memory_bytes_per_chip)
    assert np.all(tbo.tpot_s <= hot.tpot_s * (1 + 1e-12))
    assert np.any(tbo.tpot_s[wide] < hot.tpot_s[wide])


_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5).map(float))


@settings(max_examples=200, deadline=None)
@given(a=_VALUES, b=_VALUES)
def test_the_scalar_fast_paths_equal_numpy(a: float, b: float) -> None:
    """The one-point path's helpers give NumPy's answers, NaN included."""
    from rackmath.core import numeric

    for ours, theirs in ((numeric.maximum, np.maximum), (numeric.minimum, np.minimum)):
        for x, y in ((a, b), (np.float64(a), np.float64(b)), (np.array([a]), b)):
            np.testing.assert_array_equal(ours(x, y), theirs(x, y))
    for x in (a, np.float64(a), np.array([a]), a * 1e-3 + 0.5):
        np.testing.assert_array_equal(numeric.ceil(x), np.ceil(x))
    # one value is a Python float (whose arithmetic costs a third of a NumPy scalar's)
    assert type(numeric.num(3)) is float and numeric.num([1.0, 2.0]).shape == (2,)
    assert type(numeric.num(np.asarray(2.0))) is float and type(numeric.num(np.float64(2.0))) is float


def test_one_point_equals_the_same_point_of_a_grid(dsv3, nvl72) -> None:
    """A one-point plan evaluation (computed on scalars) equals that point of a grid."""
    dep = _dep(dsv3, nvl72, "dp=72,ep=72,redundant_experts=32,skew=1.3,tbo=0.5")
    grid = dep.decode([1, 512, 4608], [128, 4096])
    for i, b in enumerate([1, 512, 4608]):
        for j, c in enumerate([128, 4096]):
            one = dep.decode([b], [c])
            assert one.step_s.shape == (1, 1) and one.fits.shape == (1, 1)
            assert float(one.step_s[0, 0]) == pytest.approx(float(grid.step_s[i, j]), rel=1e-12)
            mine, theirs = one.step.breakdown_at((0, 0)), grid.step.breakdown_at((i, j))
            for k in ("communication_s", "exposed_communication_s", "blackboard_step_s"):
                assert mine[k] == pytest.approx(theirs[k], rel=1e-12)
            for x, y in zip(mine["operators"], theirs["operators"], strict=True):
                assert (x["name"], x["bound"]) == (y["name"], y["bound"])
                assert [x[k] for k in ("flops", "time_s", "bytes_read")] == pytest.approx(
                    [y[k] for k in ("flops", "time_s", "bytes_read")], rel=1e-12
                )


_KEYS = st.sampled_from(
    ["tp", "attn_tp", "dp", "attn_dp", "ep", "pp", "moe_tp", "redundant_experts", "skew", "tbo", "xp"]
)
_RAW = st.sampled_from(["0", "1", "2", "8", "72", "1.3", "-1", "on", "off", "nan", "inf", "1e9", "x", ""])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(_KEYS, _RAW), max_size=6))
def test_any_plan_text_parses_or_says_why_in_one_line(parts) -> None:
    from rackmath.errors import RackmathError

    text = ",".join(f"{k}={v}" for k, v in parts)
    try:
        plan = ParallelPlan.parse(text)
    except RackmathError as exc:
        assert "\n" not in str(exc)
        return
    assert ParallelPlan.parse(str(plan)) == plan
    assert plan.dp * plan.tp % plan.ep == 0 and 1.0 <= plan.skew <= max(plan.ep, 1) and 0 <= plan.tbo <= 1


def test_explain_says_where_two_batch_overlap_split_the_step(cli) -> None:
    """64 sequences a chip: no split (reading the weights twice costs more); 256: split."""
    plan = "dp=72,ep=72,redundant_experts=32,skew=1.3,tbo=on"
    args = ("explain", "deepseek-v3", "--on", "gb200-nvl72", "--chips", "72", "--kv", "fp8",
            "--batch", "4608,18432", "--context", "4096", "--plan", plan, "--efficiency", "pure")  # fmt: skip
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    points = json.loads(out)["plan"]["points"]
    assert [p["two_batch_split"] for p in points] == [False, True]
    code, out, err = cli(*args)
    assert code == 0 and "splits the step into two half micro-batches at 1 of 2 points" in out.replace(
        "\n", " "
    )
