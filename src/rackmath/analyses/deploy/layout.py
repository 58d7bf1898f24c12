"""The lecture's layout arguments (Ch2-Ch4, D13-D24) as computations on a real model and system.

1. One scale-up domain bounds the expert layer: EP inside one domain vs the same EP
   spread over two domains (half of the all-to-all bytes cross scale-out).
2. The rack-boundary rule: a pipeline cut between domains is cheap when
   ``2 k L_stage >= B_up / B_out``.
3. Pipelining in inference: weights per chip fall as ``1/P``, KV per chip stays put,
   latency changes only by the hops.
4. Scale-up size: the weight-fetch floor ``N_total / (S x BW)`` for S = 8, 72, 576.
5. Stage balance: the best split into ``P`` stages and the imbalance it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rackmath.analyses.kernels.tables import describe
from rackmath.analyses.serving.deployment import Deployment, check_context
from rackmath.analyses.serving.planned import plan_deployment, topology
from rackmath.core import memory as memory_account
from rackmath.core import parallel as par
from rackmath.core import rack_rules
from rackmath.core import roofline as rl
from rackmath.core import sharding as shard
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_BATCH
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan

#: Scale-up sizes of the lecture's D15: Hopper 8, Blackwell 72, Rubin Ultra "~500+" (576).
SCALE_UP_SIZES: tuple[int, ...] = (8, 72, 576)
#: The lecture's D17 inputs: k = 8 experts per token, 1 layer per stage, a ratio of 8.
LECTURE_RULE = {"experts_per_token": 8, "layers_per_stage": 1, "bandwidth_ratio": 8.0}
#: The lecture's D20 example: E = 64 chips per stage, P = 4 stages.
LECTURE_MEMORY_EXAMPLE = {"expert_chips": 64, "stages": 4}
PIPELINE_STAGES: tuple[int, ...] = (1, 2, 4)
BALANCE_STAGES: tuple[int, ...] = (2, 4, 8)
#: Shortest context for the stage-balance-with-KV rows (D24): a long context, where the
#: KV of full-attention layers outgrows that of sliding-window layers.
BALANCE_MIN_CONTEXT = 32768


def _largest_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def base_plan(model: ModelSpec, system: SystemSpec) -> ParallelPlan:
    """The layout the lecture describes: experts across one domain with attention-DP
    (MoE), or TP across an 8-chip node (dense)."""
    s = system.scale_up_domain_chips
    if model.is_moe and model.moe:
        ep = _largest_divisor_at_most(model.moe.num_experts, s)
        return ParallelPlan(dp=ep, ep=ep)
    return ParallelPlan(tp=_largest_divisor_at_most(model.attention.num_heads, min(s, 8)))


@dataclass(frozen=True)
class LayoutReport:
    model: str
    system: str
    batch: int
    context: int
    bandwidth_ratio: float
    expert_layer: dict[str, Any] | None
    rack_rule: dict[str, Any]
    pipelining: dict[str, Any]
    scale_up: list[dict[str, Any]]
    stage_balance: list[dict[str, Any]]
    #: the efficiency the steps use (:func:`rackmath.analyses.kernels.tables.describe`)
    efficiency: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "system": self.system,
            "batch": self.batch,
            "context": self.context,
            "bandwidth_ratio": self.bandwidth_ratio,
            "expert_layer": self.expert_layer,
            "rack_rule": self.rack_rule,
            "pipelining": self.pipelining,
            "scale_up": self.scale_up,
            "stage_balance": self.stage_balance,
            "efficiency": self.efficiency,
        }


def _decode(dep: Deployment, batch: int, context: int) -> dict[str, float]:
    g = dep.decode([batch], [context])
    s = g.step
    return {
        "step_s": float(g.step_s[0, 0]),
        "compute_s": float(s.compute_s[0, 0]),
        "weight_fetch_s": float(s.weight_fetch_s[0, 0]),
        "kv_fetch_s": float(s.kv_fetch_s[0, 0]),
        "ep_comm_s": float(s.ep_comm_s[0, 0]),
        "tp_comm_s": float(s.tp_comm_s[0, 0]),
        "hops_s": float(s.hops_s[0, 0]),
    }


def expert_layer_across_domains(
    model: ModelSpec, system: SystemSpec, *, batch: int, context: int, **kwargs: Any
) -> dict[str, Any] | None:
    """D13-D14: the same EP plan inside one domain and split evenly over two."""
    if not model.is_moe:
        return None
    plan = base_plan(model, system)
    one = plan_deployment(model, system, plan, **kwargs)
    half = plan.chips // 2
    two = plan_deployment(model, system, plan, chips_per_domain=half, **kwargs)
    a, b = _decode(one, batch, context), _decode(two, batch, context)
    return {
        "plan": str(plan),
        "chips": plan.chips,
        "one_domain": a,
        "two_domains": b,
        "cross_domain_frac": 0.5,
        "step_ratio": b["step_s"] / a["step_s"],
        "ep_comm_ratio": b["ep_comm_s"] / a["ep_comm_s"] if a["ep_comm_s"] else float("nan"),
    }


def layout(
    model: ModelSpec,
    system: SystemSpec,
    *,
    batch: int = 2048,
    context: int = 4096,
    microbatch: int = 256,
    weights: str | None = None,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
) -> LayoutReport:
    """All five arguments for a model on a system (uneven pipeline stages allowed); refuses a
    context beyond the model's window."""
    check_context(model, context, "--context")
    checks.whole_valued("--batch", batch, maximum=MAX_BATCH)
    checks.whole_valued("--context", context)
    kw: dict[str, Any] = {"weights": weights, "efficiency": rl.Efficiency.parse(efficiency)}
    plan = base_plan(model, system)
    base = plan_deployment(model, system, plan, **kw)
    topo = topology(system)
    m = base.shardable
    k = model.moe.experts_per_token if model.is_moe and model.moe else 1

    rule_rows = []
    for layers in (1, 2, 4):
        adv = float(
            rack_rules.pipeline_cut_advantage(
                k, layers, topo.scale_up_bytes_per_s, topo.scale_out_bytes_per_s
            )
        )
        rule_rows.append(
            {
                "layers_per_stage": layers,
                "two_k_l": 2 * k * layers,
                "advantage": adv,
                "cut_is_cheap": adv >= 1,
            }
        )
    lecture_adv = float(
        rack_rules.pipeline_cut_advantage(
            LECTURE_RULE["experts_per_token"],
            LECTURE_RULE["layers_per_stage"],
            LECTURE_RULE["bandwidth_ratio"],
            1.0,
        )
    )

    pipe_rows = []
    for p in PIPELINE_STAGES:
        pp_plan = ParallelPlan(tp=plan.tp, dp=plan.dp, ep=plan.ep, pp=p)
        rows = {}
        for label, hop in (("catalog_hops", 0.0), ("lecture_hops", par.LECTURE_HOP_LATENCY_S)):
            dep = plan_deployment(
                model, system, pp_plan, allow_uneven_stages=True, extra_hop_latency_s=hop, **kw
            )
            rows[label] = dep
        dep = rows["catalog_hops"]
        mem = dep.memory(p * microbatch, context)
        pipe_rows.append(
            {
                "stages": p,
                "chips": pp_plan.chips,
                "batch": p * microbatch,
                "weights_bytes_per_chip": float(mem.weights_bytes),
                "kv_bytes_per_chip": float(mem.kv_bytes),
                "tpot_s": float(dep.decode([p * microbatch], [context]).step_s[0, 0]),
                "tpot_lecture_hops_s": float(
                    rows["lecture_hops"].decode([p * microbatch], [context]).step_s[0, 0]
                ),
                "stage_layers": list(dep.stage_split.stage_layers),
            }
        )
    kv_tok = base.kv_bytes_per_sequence(1.0)
    ex = LECTURE_MEMORY_EXAMPLE
    lecture_mem = [
        {
            "stages": p,
            "bytes_per_chip": float(
                memory_account.lecture_memory_per_chip_bytes(
                    m.total_bytes, ex["expert_chips"], p, microbatch, context, kv_tok
                )
            ),
            "kv_bytes_per_chip": float(
                memory_account.lecture_memory_per_chip_bytes(
                    0.0, ex["expert_chips"], p, microbatch, context, kv_tok
                )
            ),
        }
        for p in (1, 2, 4, 8)
    ]

    all_read = m.tp_sharded_bytes + m.replicated_bytes + m.routed_expert_bytes + m.head_bytes
    bw = system.chip.hbm_bandwidth_bytes_per_s
    scale_rows = [
        {
            "scale_up_chips": s,
            "weight_fetch_floor_s": float(rack_rules.weight_fetch_floor_s(all_read, s, bw)),
            "fits_in_domain": s * system.chip.hbm_capacity_bytes >= m.total_bytes,
        }
        for s in SCALE_UP_SIZES
    ]

    kv_el = base.precisions.kv.bytes_per_element
    long_ctx = max(context, BALANCE_MIN_CONTEXT)
    costs_kv = shard.layer_costs_bytes(model, m, batch=batch, context=long_ctx, kv_bytes_per_element=kv_el)
    balance_rows = []
    for p in BALANCE_STAGES:
        if p > model.num_layers:
            continue
        # the LM head on the last stage, as the plans run it (shard.pipeline_costs)
        w = shard.pipeline_split(m, p)
        c = shard.balanced_stages((*costs_kv[:-1], costs_kv[-1] + m.head_bytes), p)
        balance_rows.append(
            {
                "stages": p,
                "stage_layers": list(w.stage_layers),
                "imbalance_weights": w.imbalance,
                "stage_layers_with_kv": list(c.stage_layers),
                "imbalance_with_kv": c.imbalance,
                "kv_context": long_ctx,
            }
        )

    return LayoutReport(
        model=model.id,
        system=system.id,
        batch=batch,
        context=context,
        bandwidth_ratio=topo.bandwidth_ratio,
        expert_layer=expert_layer_across_domains(model, system, batch=batch, context=context, **kw),
        rack_rule={
            "experts_per_token": k,
            "bandwidth_ratio": topo.bandwidth_ratio,
            "rows": rule_rows,
            "lecture": {**LECTURE_RULE, "advantage": lecture_adv},
        },
        pipelining={
            "plan_per_stage": str(plan),
            "microbatch": microbatch,
            "rows": pipe_rows,
            "lecture_hop_latency_s": par.LECTURE_HOP_LATENCY_S,
            "lecture_formula": {**ex, "microbatch": microbatch, "context": context, "rows": lecture_mem},
        },
        scale_up=scale_rows,
        stage_balance=balance_rows,
        efficiency=describe(system.chip.id, kw["efficiency"]),
    )
