"""Context parallelism and uneven pipeline stages in serving (issue 25, items 4 and 5).

docs/plans.md's two worked examples, each figure recomputed here from the model's config and
the catalog with the pure roofline: a 131,072-token prompt on Llama 3.1 70B with prefill CP
(the KV all-gather, the attention split, the cache per chip), and DeepSeek-V3's 61 layers on
4 stages with the LM head on the last (the split found by brute force, its imbalance, the KV
the first stage holds, one whole prompt through the stages). Then the search, the simulator
and the refusals.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.deploy import candidates
from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy.candidates import Workload
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.runtimes import runtime as catalog_runtime
from rackmath.core import loads
from rackmath.core import memory as mem
from rackmath.core import roofline as rl
from rackmath.errors import InputError
from rackmath.specs.workload import check_trace

PROMPT = 131_072
#: Llama 3.1 70B: 80 layers, 64 query heads and 8 KV heads of 128, hidden 8192
L70, HQ, HKV, D, HID = 80, 64, 8, 128, 8192
#: GB200 NVL72 as docs/plans.md states it: bf16 dense peak, NVLink per direction, one hop
PEAK_BF16, NVLINK, HOP = 2.5e15, 900e9, 2e-6


def _f(x) -> float:
    return float(np.asarray(x).ravel()[0])


@pytest.fixture(scope="module")
def nvl72():
    return rm.system("gb200-nvl72")


@pytest.fixture(scope="module")
def llama():
    return rm.model("llama-3.1-70b")


@pytest.fixture(scope="module")
def dsv3():
    return rm.model("deepseek-v3")


def _prefill(llama, nvl72, plan: str):
    dep = plan_deployment(llama, nvl72, plan, efficiency=rl.PURE_ROOFLINE)
    return dep, dep.prefill([1], [PROMPT])


def _op(ops, name: str):
    return next(op for op in ops if op.name == name)


# ----------------------------------------------------------------------------- prefill CP


def test_prefill_cp_worked_example(llama, nvl72) -> None:
    """docs/plans.md: one 128K prompt at tp=8, then cp = 4 and 8 (ag) and cp = 4 (ring)."""
    assert (llama.num_layers, llama.attention.num_heads, llama.attention.num_kv_heads) == (L70, HQ, HKV)
    base, one = _prefill(llama, nvl72, "tp=8")
    topo = base.topology
    assert (topo.scale_up_bytes_per_s, topo.scale_up_latency_s, topo.chips_per_domain) == (NVLINK, HOP, 72)
    assert base.system.chip.peak_flops(base.precisions.compute) == PEAK_BF16
    # the causal attention: 4 x S(S+1)/2 x H x d FLOPs a layer, 1/tp of it a chip, compute bound
    flops = 4 * PROMPT * (PROMPT + 1) / 2 * HQ * D * L70
    assert flops == pytest.approx(2.25e16, rel=1e-3)
    att = _op(one.step.operators, "attention")
    assert _f(att.flops) == pytest.approx(flops / 8, rel=1e-12)
    assert _f(att.time_s) == pytest.approx(flops / 8 / PEAK_BF16, rel=1e-9)
    assert _f(att.time_s) == pytest.approx(1.13, abs=0.005)
    # the cache a chip holds: one KV head of 128 keys and values in bf16, 80 layers
    kv_tp8 = PROMPT * L70 * 2 * D * 2.0
    assert _f(one.memory.kv_bytes) == pytest.approx(kv_tp8, rel=1e-12) and kv_tp8 / 1e9 == pytest.approx(
        5.37, abs=0.005
    )

    # the TP all-reduces: two a layer of the rank's tokens x hidden x 2 B over 8 chips (ring)
    def all_reduce_s(tokens: float) -> float:
        return 2 * L70 * (2 * 7 / 8 * tokens * HID * 2.0 / NVLINK + 2 * 7 * HOP)

    assert _f(one.step.tp_comm_s) == pytest.approx(all_reduce_s(PROMPT), rel=1e-9)
    assert _f(one.step.step_s) == pytest.approx(_f(one.step.roofline_s) + all_reduce_s(PROMPT), rel=1e-12)
    # the KV gathered a layer: S x 2 x d x 2 B (one KV head a chip), (c-1)/c of it on the wire
    s_kv = PROMPT * 2 * D * 2.0
    assert s_kv / 1e6 == pytest.approx(67.1, abs=0.05)
    for cp in (4, 8):
        dep, g = _prefill(llama, nvl72, f"tp=8,cp={cp}")
        step = g.step
        gather = L70 * ((cp - 1) / cp * s_kv / NVLINK + (cp - 1) * HOP)
        assert _f(step.cp_comm_s) == pytest.approx(gather, rel=1e-9)
        assert _f(_op(step.collectives, "cp_kv_all_gather").time_s) == pytest.approx(gather, rel=1e-9)
        if cp == 4:
            assert gather / L70 * 1e6 == pytest.approx(61.9, abs=0.05) and gather * 1e3 == pytest.approx(
                4.95, abs=0.005
            )
        # every chip runs 1/cp of the tokens and of the attention; the cache splits cp ways
        assert _f(_op(step.operators, "attention").flops) == pytest.approx(flops / 8 / cp, rel=1e-12)
        for name in ("attention", "attention_qkv", "dense_mlp"):
            assert _f(_op(step.operators, name).time_s) == pytest.approx(
                _f(_op(one.step.operators, name).time_s) / cp, rel=1e-9
            )
        assert _f(g.memory.kv_bytes) == pytest.approx(kv_tp8 / cp, rel=1e-12)
        assert _f(step.tp_comm_s) == pytest.approx(all_reduce_s(PROMPT / cp), rel=1e-9)
        # ag: the gather is waited for, before the attention
        assert _f(step.step_s) == pytest.approx(
            _f(step.roofline_s) + all_reduce_s(PROMPT / cp) + gather, rel=1e-12
        )
        assert dep.chips == 8 * cp
        if cp == 4:
            assert gather / _f(step.step_s) == pytest.approx(0.007, abs=0.0005)
    # ring: the same bytes pass under the layer's 3.5 ms of attention, so none is exposed
    ag = _prefill(llama, nvl72, "tp=8,cp=4")[1].step
    ring = _prefill(llama, nvl72, "tp=8,cp=4,cp_comm=ring")[1].step
    per_layer_attention = _f(_op(ring.operators, "attention").time_s) / L70
    assert per_layer_attention * 1e3 == pytest.approx(3.5, abs=0.05)
    assert _f(_op(ring.collectives, "cp_kv_ring").time_s) == pytest.approx(_f(ag.cp_comm_s), rel=1e-12)
    assert _f(ring.step_s) == pytest.approx(_f(ag.step_s) - _f(ag.cp_comm_s), rel=1e-12)


def test_decode_cp_reads_a_share_of_the_cache(llama, nvl72) -> None:
    """Decode CP: each rank reads 1/cp of every sequence's cache and the LSE merge adds
    ``(c-1) n h [(d_qk + d_v) b / c + 4]`` bytes a chip a layer (ag) or one all-to-all (a2a)."""
    ctx, b = 131_072.0, 8
    one = plan_deployment(llama, nvl72, "tp=8", efficiency=rl.PURE_ROOFLINE).decode([b], [ctx]).step
    for comm in ("ag", "a2a"):
        step = (
            plan_deployment(llama, nvl72, f"tp=8,cp=4,cp_comm={comm}", efficiency=rl.PURE_ROOFLINE)
            .decode([b], [ctx])
            .step
        )
        assert _f(_op(step.operators, "attention").kv_read_bytes) == pytest.approx(
            _f(_op(one.operators, "attention").kv_read_bytes) / 4, rel=1e-12
        )
        names = {op.name for op in step.collectives}
        if comm == "ag":
            assert {"cp_q_all_gather", "cp_lse_all_gather", "cp_out_reduce_scatter"} <= names
            q = _op(step.collectives, "cp_q_all_gather")
            # the 8 sequences' queries (8 heads a chip x 128 x 2 B), 2 computed on each of the 4
            # ranks: 3/4 of them reach a chip over the wire, once a layer
            assert _f(q.time_s) == pytest.approx(L70 * (3 / 4 * b * 8 * D * 2.0 / NVLINK + 3 * HOP), rel=1e-9)
        else:
            assert "cp_merge_all_to_all" in names and "cp_q_all_gather" not in names
        assert _f(step.step_s) < _f(one.step_s)


# ----------------------------------------------------------------------------- uneven stages


def _layer_costs(dep) -> list[float]:
    m = dep.shardable
    costs = list(m.layer_bytes)
    costs[-1] += m.head_bytes
    return costs


def _brute_force_split(costs: list[float], stages: int) -> list[tuple[int, ...]]:
    """Every composition of the layers into ``stages`` contiguous parts minimising the slowest."""
    n, best, found = len(costs), float("inf"), []
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    for cuts in itertools.combinations(range(1, n), stages - 1):
        edges = (0, *cuts, n)
        worst = max(prefix[e] - prefix[s] for s, e in itertools.pairwise(edges))
        sizes = tuple(e - s for s, e in itertools.pairwise(edges))
        if worst < best - 1e-3:
            best, found = worst, [sizes]
        elif abs(worst - best) <= 1e-3:
            found.append(sizes)
    return found


def test_uneven_stages_worked_example(dsv3, nvl72) -> None:
    """docs/plans.md: DeepSeek-V3's 61 layers on 4 stages, the LM head on the last."""
    kw = {"efficiency": rl.PURE_ROOFLINE, "weights": "fp8", "kv": "fp8", "communication": False}
    one = plan_deployment(dsv3, nvl72, "dp=8,ep=8", **kw)
    four = plan_deployment(dsv3, nvl72, "pp=4,dp=8,ep=8", **kw)
    stated = plan_deployment(dsv3, nvl72, "pp=4,dp=8,ep=8,stages=16+15+15+15", **kw)
    m = four.shardable
    dense, moe, head = m.layer_bytes[0], m.layer_bytes[-1], m.head_bytes
    assert m.layer_bytes == (dense,) * 3 + (moe,) * 58
    # fp8: a byte a parameter of the blocks' matmuls. An MoE layer: 257 experts (256 routed + 1
    # shared) of 3 x 7168 x 2048 and MLA (q_a, q_b, kv_a, kv_b, o); its router (256 x 7168) at
    # bf16, 2 B; its norms (7168 x 2 + 1536 + 512, bf16) are the 0.0003% left. The head: bf16.
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert moe == pytest.approx(257 * 3 * 7168 * 2048 + mla + 256 * 7168 * 2, rel=1e-5)
    assert (round(dense / 1e9, 3), round(moe / 1e9, 3), round(head / 1e9, 3)) == (0.583, 11.509, 1.853)
    # the split: brute force over all C(60, 3) contiguous splits, the head on the last stage
    costs = _layer_costs(four)
    assert _brute_force_split(costs, 4) == [(17, 15, 15, 14)]
    assert four.stage_split.stage_layers == (17, 15, 15, 14)
    total = sum(costs)
    assert total / 1e9 == pytest.approx(671.1, abs=0.05) and 15 * moe / 1e9 == pytest.approx(172.6, abs=0.05)
    imbalance = 4 * 15 * moe / total
    assert four.stage_split.imbalance == pytest.approx(imbalance, rel=1e-12)
    assert imbalance == pytest.approx(1.0289, abs=5e-5)
    assert (14 * moe + head) / 1e9 == pytest.approx(163.0, abs=0.05)
    # the stated split puts 15 MoE layers and the head on the last stage
    stated_imbalance = 4 * (15 * moe + head) / total
    assert stated.stage_split.imbalance == pytest.approx(stated_imbalance, rel=1e-12)
    assert stated_imbalance == pytest.approx(1.0400, abs=5e-5) and (15 * moe + head) / 1e9 == pytest.approx(
        174.5, abs=0.05
    )
    # KV: 64 sequences a DP rank x 8,192 tokens x 576 values x 1 B, the first stage's 17 layers
    kv = 64 * 8192 * 576 * 1.0
    assert _f(one.decode([512], [8192]).memory.kv_bytes) == pytest.approx(kv * 61, rel=1e-12)
    assert _f(four.decode([512], [8192]).memory.kv_bytes) == pytest.approx(kv * 17, rel=1e-12)
    assert _f(stated.decode([512], [8192]).memory.kv_bytes) == pytest.approx(kv * 16, rel=1e-12)
    # one whole prompt goes through the 4 stages in turn: the one-stage TTFT times the imbalance
    t1 = _f(one.prefill([1], [8192]).step_s)
    assert _f(four.prefill([1], [8192]).step_s) == pytest.approx(imbalance * t1, rel=1e-9)
    assert _f(stated.prefill([1], [8192]).step_s) == pytest.approx(stated_imbalance * t1, rel=1e-9)


def test_a_pipeline_microbatch_holds_whole_prompts(dsv3) -> None:
    """One 128K prompt on pp = 4 is one micro-batch of the whole prompt (stages idle), not four
    quarter-prompts; an average (pooled) load still splits evenly."""
    whole = loads.prefill_load(dsv3, 1.0, 131_072.0, 1.0, whole=True)
    pooled = loads.prefill_load(dsv3, 1.0, 131_072.0, 1.0)
    assert _f(loads.microbatch_tokens(whole, 4.0)) == 131_072.0
    assert _f(loads.microbatch_tokens(pooled, 4.0)) == 131_072.0 / 4
    five = loads.prefill_load(dsv3, 5.0, 1000.0, 1.0, whole=True)
    assert _f(loads.microbatch_tokens(five, 4.0)) == 2 * 1000.0  # ceil(5/4) prompts


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("model", "plan", "call", "field", "hint"),
    [
        (
            "llama-3.1-70b",
            "tp=8,cp=16",
            ("decode", [1], [100]),
            "plan cp",
            "at most 6 for a 100-token context",
        ),
        ("llama-3.1-70b", "tp=8,cp=8", ("prefill", [1], [64]), "plan cp", "at most 4 for a 64-token prompt"),
        ("deepseek-v3", "pp=4,dp=8,ep=8,stages=16+16+15+15", None, "plan stages", "e.g. stages=17+15+15+14"),
        ("deepseek-v3", "pp=4,dp=8,ep=8,stages=16+15+15", None, "plan stages", "one per pipeline stage"),
        ("llama-3.1-70b", "tp=8,cp_comm=ring", None, "plan cp_comm", "set cp > 1"),
    ],
)
def test_bad_cp_and_stages_are_one_line(nvl72, model, plan, call, field, hint) -> None:
    with pytest.raises(InputError) as err:
        dep = plan_deployment(rm.model(model), nvl72, plan, efficiency=rl.PURE_ROOFLINE)
        if call is not None:
            getattr(dep, call[0])(call[1], call[2])
    text = str(err.value)
    assert "\n" not in text and field in text and hint in text


def test_max_context_parallel_is_the_kv_blocks() -> None:
    assert mem.KV_BLOCK_TOKENS == 16
    assert [int(mem.max_context_parallel(n)) for n in (1, 15, 16, 100, 131_072)] == [1, 1, 1, 6, 8192]


# ----------------------------------------------------------------------------- search, simulator


def test_the_search_takes_cp(llama, nvl72) -> None:
    """max_cp = 8 adds cp = 2, 4, 8 rows (each dividing width / tp); max_cp = 1 is the old space;
    a cp row's figures are the planned deployment's at the same plan; a prompt of 64 tokens
    (4 KV blocks) drops cp = 8."""
    plain = candidates.enumerate_plans(llama, nvl72, max_chips=64)
    wide = candidates.enumerate_plans(llama, nvl72, max_chips=64, max_cp=8)
    assert plain.shape[1] == 5 and set(plain[:, 4]) == {1}
    assert set(wide[:, 4]) == {1, 2, 4, 8}
    assert {tuple(r) for r in plain} == {tuple(r) for r in wide if r[4] == 1}
    assert np.all(wide[:, 0] * wide[:, 2] * wide[:, 4] <= 64)
    long = Workload(traffic_tokens_per_s=1000.0, input_len=32_768, output_len=256)
    c = candidates.evaluate(
        llama, nvl72, "native", long, max_chips=64, max_cp=8, efficiency=rl.PURE_ROOFLINE, phase="prefill"
    )
    assert c is not None and set(c.cp) == {1, 2, 4, 8}
    assert np.array_equal(c.chips, c.tp * c.pp * c.dp * c.cp)
    i = int(np.flatnonzero((c.cp == 4) & (c.tp == 8) & (c.dp == 1) & (c.pp == 1) & (c.batch == 1))[0])
    dep = plan_deployment(llama, nvl72, "tp=8,cp=4", efficiency=rl.PURE_ROOFLINE)
    assert float(c.ttft_s[i]) == pytest.approx(_f(dep.prefill([1], [32_768]).step_s), rel=1e-9)
    assert candidates.choice_at(c, i, 1000.0).plan_text == "tp=8,cp=4"
    short = Workload(traffic_tokens_per_s=1000.0, input_len=64, output_len=256)
    s = candidates.evaluate(
        llama, nvl72, "native", short, max_chips=64, max_cp=8, efficiency=rl.PURE_ROOFLINE
    )
    assert s is not None and set(s.cp) == {1, 2, 4}


def test_the_simulator_runs_a_cp_plan(llama, nvl72) -> None:
    """A CP plan's replica holds each sequence's KV over its cp ranks (a token's KV a chip is
    1/cp) and serves 100K-token prompts faster than the plan without CP."""
    vllm = catalog_runtime("vllm")
    tp8 = plan_deployment(llama, nvl72, "tp=8")
    cp4 = plan_deployment(llama, nvl72, "tp=8,cp=4")

    def per_token(dep) -> float:
        return _f(dep.memory(1.0, 1000.0).kv_bytes - dep.memory(0.0, 1000.0).kv_bytes)

    assert per_token(cp4) == pytest.approx(per_token(tp8) / 4, rel=1e-12)
    n = 20
    reqs = check_trace(np.arange(n) * 5.0, np.full(n, 100_000), np.full(n, 100))
    results = [
        sim.run(sim.replica(d, vllm, max_context=100_100, mean_context=100_050), reqs) for d in (tp8, cp4)
    ]
    ttft = [r.metrics["ttft_p50"] for r in results]
    assert ttft[0] is not None and ttft[1] is not None and ttft[1] < ttft[0] / 2


def test_a_prefill_pool_takes_cp_for_long_prompts(llama, nvl72) -> None:
    """xPyD with 100K-token prompts: with max_cp = 8 the pools may use CP; the fleet costs no
    more, and here the prefill pool runs one prompt over CP ranks at about half the TTFT of the
    plan without CP (pure roofline, TTFT <= 3 s, TPOT <= 30 ms, 2,000 tokens/s)."""
    from rackmath.analyses.deploy.disagg_search import best_disaggregated

    work = Workload(traffic_tokens_per_s=2000.0, input_len=100_000, output_len=1000, ttft_s=3.0, tpot_s=0.03)
    kw = {
        "families": ("native",),
        "max_chips": 64,
        "max_pp": 16,
        "batches": candidates.BATCH_GRID,
        "efficiency": rl.PURE_ROOFLINE,
    }
    plain, n_plain, _ = best_disaggregated(llama, [nvl72], work, **kw)
    wide, n_wide, _ = best_disaggregated(llama, [nvl72], work, max_cp=8, **kw)
    assert plain is not None and wide is not None and n_wide > n_plain
    assert wide.fleet_usd_per_million_output_tokens <= plain.fleet_usd_per_million_output_tokens * (1 + 1e-12)
    assert "cp=" not in plain.prefill.plan_text and "cp=" in wide.prefill.plan_text
    assert wide.ttft_s < 0.6 * plain.ttft_s
