"""`explain`: the whole blackboard derivation for one deployment, as one result object.

The CLI, the web page and notebooks all render this object; its :meth:`Explanation.to_dict`
is the stable JSON schema of ``rackmath explain --json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath import __version__
from rackmath.analyses.serving import energy as energy_
from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import DecodeGrid, Deployment, PrefillGrid, check_context
from rackmath.analyses.serving.energy import EnergyGrid
from rackmath.analyses.serving.parts import GRID_LABELS
from rackmath.analyses.serving.planned import replan
from rackmath.analyses.serving.pooled import BalancePoint, require_weights_fit
from rackmath.analyses.serving.prefix import PrefixCache, PrefixPrefill, prefix_prefill
from rackmath.analyses.serving.speculative import Speculation, SpeculativeGrid, speculative_decode
from rackmath.core import architecture as arch
from rackmath.core import roofline as rl
from rackmath.core.energy import DEFAULT_PUE
from rackmath.errors import InputError
from rackmath.frames import Col, Layout, Tabular
from rackmath.specs.bounds import MAX_BATCH, MAX_CONTEXT
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.plan import ParallelPlan

FloatArray = NDArray[np.float64]

DEFAULT_BATCHES: tuple[int, ...] = (1, 8, 32, 128, 512, 1024, 2048, 4096, 8192)
DEFAULT_CONTEXTS: tuple[int, ...] = (4096,)
#: Contexts for the MFU-vs-context curve (powers of two, 1K to 1M tokens).
MFU_CONTEXTS = tuple(2**p for p in range(10, 21))


def cheapest_fitting(grid: Any, context_index: int = 0) -> int | None:
    """Index of the batch with the least cost per output token among those whose KV fits
    at context ``context_index`` (None when none fits). ``grid``: any decode grid with
    ``fits`` and ``usd_per_million_output_tokens`` (ideal chip or planned)."""
    cost = np.where(grid.fits[:, context_index], grid.usd_per_million_output_tokens[:, context_index], np.inf)
    if not np.isfinite(cost).any():
        return None
    return int(np.argmin(cost))


def two_batch_split_points(grid: Any) -> tuple[int, int]:
    """(points where two-batch overlap split the step, points) of a planned grid."""
    split = np.broadcast_to(grid.step.two_batch_split, grid.step_s.shape)
    return int(np.count_nonzero(split)), int(split.size)


def cheapest_fitting_point(grid: Any) -> tuple[int, int] | None:
    """(batch index, context index) of the cheapest point that fits over the whole grid."""
    cost = np.where(grid.fits, grid.usd_per_million_output_tokens, np.inf)
    if not np.isfinite(cost).any():
        return None
    i, j = np.unravel_index(int(np.argmin(cost)), cost.shape)
    return int(i), int(j)


@dataclass(frozen=True)
class Explanation(Tabular):
    """The whole derivation; as a table, one row per (batch, context) point of the decode grid
    with the deployment's balance figures repeated on every row."""

    frame_layout = Layout(
        columns=(
            *GRID_LABELS,
            Col("decode.batch", "batch", "sequences"),
            Col("decode.context", "context_tokens", "tokens"),
            Col("decode.step_s", "step_s", "s"),
            Col("decode.step_s_p10", "step_s_p10", "s"),
            Col("decode.step_s_p90", "step_s_p90", "s"),
            Col("decode.end_to_end_step_s_p10", "end_to_end_step_s_p10", "s"),
            Col("decode.end_to_end_step_s_p90", "end_to_end_step_s_p90", "s"),
            Col("decode.blackboard_step_s", "blackboard_step_s", "s"),
            Col("decode.step.compute_s", "compute_s", "s"),
            Col("decode.step.weight_fetch_s", "weight_fetch_s", "s"),
            Col("decode.step.kv_fetch_s", "kv_fetch_s", "s"),
            Col("decode.step.bottleneck", "bottleneck"),
            Col("decode.tokens_per_s_per_user", "tokens_per_s_per_user", "tokens/s"),
            Col("decode.tokens_per_s_per_chip", "tokens_per_s_per_chip", "tokens/s"),
            Col(
                "decode.usd_per_million_output_tokens", "usd_per_million_output_tokens", "USD per 1e6 tokens"
            ),
            Col("decode.tokens_per_s_per_chip_p10", "tokens_per_s_per_chip_p10", "tokens/s"),
            Col("decode.tokens_per_s_per_chip_p90", "tokens_per_s_per_chip_p90", "tokens/s"),
            Col(
                "decode.usd_per_million_output_tokens_p10",
                "usd_per_million_output_tokens_p10",
                "USD per 1e6 tokens",
            ),
            Col(
                "decode.usd_per_million_output_tokens_p90",
                "usd_per_million_output_tokens_p90",
                "USD per 1e6 tokens",
            ),
            Col("decode.mfu", "mfu_frac", "1"),
            Col("decode.fits", "fits"),
            Col("balance.balance_batch", "balance_batch", "sequences"),
            Col("latency_floor_s", "latency_floor_s", "s"),
            Col("hbm_drain_time_s", "hbm_drain_time_s", "s"),
        ),
        dims=("batch", "context"),
        coords=("batch", "context_tokens"),
    )

    deployment: Deployment
    decode: DecodeGrid
    prefill: PrefillGrid  # batch 1, one prompt per context
    balance: BalancePoint
    latency_floor_s: float
    hbm_drain_time_s: float
    max_batch: FloatArray  # per context
    batch_one_over_balance_cost: float  # at the first context, KV included
    cost_reference_batch: float  # the B* that ratio uses (exact with KV, else closed form)
    mfu_contexts: FloatArray
    mfu_at_balance_batch: FloatArray  # MFU vs context at the closed-form balance batch
    planned: DecodeGrid | None = None  # the same grid under a parallel plan, when one is given
    speculative: SpeculativeGrid | None = None  # the same grid with speculative decoding / MTP
    prefix: PrefixPrefill | None = None  # prefill with a prefix-cache hit, one prompt per context
    energy: EnergyGrid | None = None  # joules of the decode grid (None: the chip has no TDP)
    planned_energy: EnergyGrid | None = None

    pure_step_s: FloatArray | None = None  # the decode grid's step on the pure roofline (kernel mode)

    @property
    def contexts(self) -> FloatArray:
        return self.decode.context[0]

    @property
    def batch_one_step_s(self) -> float:
        """A decode step at batch 1 and the first context: what one user waits per token.
        For an MoE model it reads only the ``k`` experts per layer that token picks, so it
        is shorter than :attr:`latency_floor_s` (every expert read)."""
        step = self.deployment.decode([1.0], self.contexts[:1]).step_s
        return float(step[0, 0])

    @property
    def focus_index(self) -> tuple[int, int]:
        """The point the report breaks down operator by operator: the cheapest per token
        among those that fit (the largest batch at the first context when none fits)."""
        point = cheapest_fitting_point(self.decode)
        return point if point is not None else (int(np.argmax(self.decode.batch[:, 0])), 0)

    @property
    def batches(self) -> FloatArray:
        return self.decode.batch[:, 0]

    def to_dict(self) -> dict[str, Any]:
        d = self.deployment
        g = self.decode
        points = []
        for i in range(g.step_s.shape[0]):
            for j in range(g.step_s.shape[1]):
                points.append(
                    {
                        "batch": int(g.batch[i, j]),
                        "context": int(g.context[i, j]),
                        "step_s": float(g.step_s[i, j]),
                        "compute_s": float(g.step.compute_s[i, j]),
                        "weight_fetch_s": float(g.step.weight_fetch_s[i, j]),
                        "kv_fetch_s": float(g.step.kv_fetch_s[i, j]),
                        "bottleneck": str(g.step.bottleneck[i, j]),
                        "tokens_per_s_per_user": float(g.tokens_per_s_per_user[i, j]),
                        "tokens_per_s": float(g.tokens_per_s[i, j]),
                        "tokens_per_s_per_chip": float(g.tokens_per_s_per_chip[i, j]),
                        "usd_per_million_output_tokens": float(g.usd_per_million_output_tokens[i, j]),
                        **g.band_at((i, j)),
                        "mfu": float(g.mfu[i, j]),
                        "mbu": float(g.mbu[i, j]),
                        "fits": bool(g.fits[i, j]),
                        **(self.energy.at((i, j), d.chips) if self.energy is not None else {}),
                        "pure_step_s": float(
                            g.step_s[i, j] if self.pure_step_s is None else self.pure_step_s[i, j]
                        ),
                        **g.step.breakdown_at((i, j)),
                    }
                )
        with_kv = self.balance.balance_batch_with_kv
        return {
            "rackmath_version": __version__,
            "model": d.model.id,
            "system": d.system.id,
            "chip": d.system.chip.id,
            "chips": d.chips,
            "precision": {
                "weights": d.precisions.weights.value,
                "kv": d.precisions.kv.value,
                "compute": d.precisions.compute.value,
                **({"weight_classes": d.weight_formats} if d.model.stated_weight_classes else {}),
            },
            "usd_per_chip_hour": d.usd_per_chip_hour,
            "price_date": d.system.chip.price_usd_per_chip_hour.date,
            "params_total": d.params.total,
            "params_active": d.params.active,
            "params_by_component": d.params.by_component(),
            "kv_bytes_per_token": arch.kv_bytes_per_token(d.model, d.precisions.kv.bytes_per_element),
            "peak_flops_per_s": d.peak_flops_per_s,
            "bandwidth_bytes_per_s": d.bandwidth_bytes_per_s,
            "flop_per_byte": self.balance.flop_per_byte,
            "dense_balance_batch": self.balance.dense_balance_batch,
            "sparsity": self.balance.sparsity,
            "balance_batch": self.balance.balance_batch,
            "balance_batch_with_kv": None if np.isnan(with_kv[0]) else float(with_kv[0]),
            "balance_batch_with_kv_by_context": [
                {"context": int(c), "balance_batch": None if np.isnan(b) else float(b)}
                for c, b in zip(self.contexts, with_kv, strict=True)
            ],
            "latency_floor_s": self.latency_floor_s,
            "hbm_drain_time_s": self.hbm_drain_time_s,
            "max_batch": int(self.max_batch[0]),
            "max_batch_by_context": [
                {"context": int(c), "max_batch": int(m)}
                for c, m in zip(self.contexts, self.max_batch, strict=True)
            ],
            "weight_bytes_per_chip": d.weight_bytes_per_chip,
            "usable_bytes_per_chip": d.usable_bytes_per_chip,
            "weights_fit": d.weights_fit,
            "batch_one_over_balance_cost": self.batch_one_over_balance_cost,
            "cost_reference_batch": self.cost_reference_batch,
            "usd_per_million_input_tokens": [
                {"context": int(c), "usd": float(u)}
                for c, u in zip(self.contexts, self.prefill.usd_per_million_input_tokens[0], strict=True)
            ],
            "mfu_vs_context": [
                {"context": int(c), "mfu": float(m)}
                for c, m in zip(self.mfu_contexts, self.mfu_at_balance_batch, strict=True)
            ],
            "efficiency": {
                **d.efficiency_described,
                "transferred": d.transferred_from is not None,
            },
            "assumptions": list(assumptions(d)),
            "points": points,
            **({"plan": self._plan_dict()} if self.planned is not None else {}),
            **({"speculative": self.speculative.to_dict()} if self.speculative is not None else {}),
            **({"prefix": self.prefix.to_dict()} if self.prefix is not None else {}),
            **({"energy": self.energy.summary()} if self.energy is not None else {}),
        }

    def _plan_dict(self) -> dict[str, Any]:
        """The plan section of the JSON: the same points with communication and real memory."""
        assert self.planned is not None
        p = self.planned
        s = p.step
        rows = []
        for i in range(p.step_s.shape[0]):
            for j in range(p.step_s.shape[1]):
                rows.append(
                    {
                        "batch": int(p.batch[i, j]),
                        "context": int(p.context[i, j]),
                        "step_s": float(p.step_s[i, j]),
                        "compute_s": float(s.compute_s[i, j]),
                        "weight_fetch_s": float(s.weight_fetch_s[i, j]),
                        "kv_fetch_s": float(s.kv_fetch_s[i, j]),
                        "tp_comm_s": float(s.tp_comm_s[i, j]),
                        "ep_comm_s": float(s.ep_comm_s[i, j]),
                        "hops_s": float(s.hops_s[i, j]),
                        "two_batch_split": bool(np.broadcast_to(s.two_batch_split, p.step_s.shape)[i, j]),
                        "bottleneck": str(s.bottleneck[i, j]),
                        "tokens_per_s_per_chip": float(p.tokens_per_s_per_chip[i, j]),
                        "usd_per_million_output_tokens": float(p.usd_per_million_output_tokens[i, j]),
                        **p.band_at((i, j)),
                        "memory_per_chip_bytes": float(p.memory.total_bytes[i, j]),
                        "fits": bool(p.fits[i, j]),
                        **(
                            self.planned_energy.at((i, j), p.deployment.chips)
                            if self.planned_energy is not None
                            else {}
                        ),
                        **s.breakdown_at((i, j)),
                    }
                )
        return {
            "plan": str(p.deployment.plan),
            "comm_overlap_frac": p.deployment.comm_overlap_frac,
            "notes": list(p.deployment.notes),
            "points": rows,
        }


def assumptions(d: Deployment) -> tuple[str, ...]:
    eff = d.efficiency
    base = (
        f"{d.chips} chips act as one ideal chip ({d.chips}x FLOP/s, bandwidth and memory) with no "
        "communication cost in sections 1-6; --plan adds a real layout.",
        "step = sum over operators of each one's time + exposed communication + overhead; an "
        "operator's time is max(compute, memory) on the roofline and, on fitted kernel curves, the "
        "power mean (compute^p + memory^p)^(1/p) its kernels measure (the lecture's max(total "
        "compute, total memory) is the lower bound, blackboard_step_s); FLOPs count 2 per MAC.",
        "MoE routing is uniform: a batch of B tokens reads E(1-(1-k/E)^B) experts per layer.",
        (
            f"efficiency per operator: {d.efficiency_label} (--efficiency pure for the roofline)"
            if eff == rl.KERNEL_GROUNDED
            else f"efficiency: {eff.flops_frac:.0%} of peak FLOP/s, {eff.bandwidth_frac:.0%} of peak "
            f"bandwidth, {eff.overhead_s * 1e3:.2f} ms per-step overhead"
            + (" (pure roofline)" if eff == rl.PURE_ROOFLINE else "")
            + (f", times the per-operator {d.efficiency_label}" if eff.mode is EfficiencyMode.KERNEL else "")
        ),
        f"{d.memory_reserve_frac:.0%} of HBM reserved for activations and workspace.",
    )
    return base + d.notes


def check_chips_in_system(deployment: Deployment, plan: object) -> None:
    """Without a plan the chips act as one system: at most the system's own chips (its
    default count or its scale-up domain); more need a plan that spans systems."""
    d = deployment
    most = max(d.system.default_chips, d.system.scale_up_domain_chips)
    if plan is None and d.chips > most:
        raise InputError(
            "--chips",
            d.chips,
            f"at most {most:,} chips in one {d.system.id}; give a --plan (e.g. dp=..,ep=..) to span systems",
        )


def check_request(deployment: Deployment, batches: Any, contexts: Any, plan: object = None) -> None:
    """The rules ``explain`` applies before any work, in the order the CLI met them: the
    chips one system holds (without a plan), contexts within the model's window and the
    work bounds, batches within the work bound, and weights that fit the chips."""
    check_chips_in_system(deployment, plan)
    check_context(deployment.model, contexts, "--context")
    for field, values, most in (("--context", contexts, MAX_CONTEXT), ("--batch", batches, MAX_BATCH)):
        top = float(np.max(values)) if np.size(values) else 0.0
        if top > most:
            raise InputError(field, f"{top:,.0f}", f"numbers up to {most:,}")
    require_weights_fit(deployment)


def explain(
    deployment: Deployment,
    batches: tuple[float, ...] | list[float] = DEFAULT_BATCHES,
    contexts: tuple[float, ...] | list[float] = DEFAULT_CONTEXTS,
    plan: ParallelPlan | str | None = None,
    *,
    speculation: Speculation | None = None,
    prefix: PrefixCache | None = None,
    pue: float = DEFAULT_PUE,
) -> Explanation:
    """The ideal-chip derivation over ``batches x contexts``; with ``plan``, the same deployment
    under that plan (:func:`rackmath.analyses.serving.planned.replan`: communication, per-chip
    memory) beside it.
    The plan must use the deployment's chips. ``speculation`` adds speculative decoding over
    the same grid (on the plan's step when a plan is given, else on the ideal chip),
    ``prefix`` a prefix-cache hit on each context's prompt; energy at facility ``pue`` is
    always computed where the chip has a TDP."""
    d = deployment
    check_request(d, batches, contexts, plan)
    energy_.check_pue(pue)
    planned = None
    planned_dep = None
    if plan is not None:
        the_plan = ParallelPlan.parse(plan) if isinstance(plan, str) else plan
        if the_plan.chips != d.chips:
            raise InputError(
                "--plan",
                str(the_plan),
                f"a plan over the deployment's {d.chips} chips (it covers {the_plan.chips})",
            )
        planned_dep = replan(d, the_plan, allow_uneven_stages=True)
        planned = planned_dep.decode(batches, contexts)
    grid = d.decode(batches, contexts)
    bal = pooled.balance(d, contexts)
    first_context = float(np.asarray(contexts, float).ravel()[0])
    b_star = float(bal.balance_batch_with_kv[0])
    if np.isnan(b_star):
        b_star = bal.balance_batch
    pair = d.decode([1.0, b_star], [first_context]).usd_per_million_output_tokens[:, 0]
    mfu_curve = d.decode([bal.balance_batch], MFU_CONTEXTS).mfu[0]
    return Explanation(
        deployment=d,
        decode=grid,
        prefill=d.prefill([1.0], contexts),
        balance=bal,
        latency_floor_s=pooled.latency_floor_s(d),
        hbm_drain_time_s=pooled.hbm_drain_time_s(d),
        max_batch=d.max_concurrency(np.asarray(contexts, float)),
        batch_one_over_balance_cost=float(pair[0] / pair[1]),
        cost_reference_batch=b_star,
        mfu_contexts=np.asarray(MFU_CONTEXTS, float),
        mfu_at_balance_batch=mfu_curve,
        planned=planned,
        speculative=None
        if speculation is None
        else speculative_decode(planned_dep or d, batches, contexts, speculation),
        prefix=None if prefix is None else prefix_prefill(d, contexts, prefix, _tiers(d, prefix)),
        energy=energy_.decode_energy(grid, pue),
        planned_energy=None if planned is None else energy_.decode_energy(planned, pue),
        pure_step_s=(
            d.pure().decode(batches, contexts).step_s if d.efficiency.mode is EfficiencyMode.KERNEL else None
        ),
    )


def _tiers(d: Deployment, prefix: PrefixCache) -> tuple[Any, ...]:
    """Every catalog tier beside the chosen one, so the report compares them."""
    from rackmath.analyses.serving.prefix import default_cache_tiers
    from rackmath.catalog.economics import memory_tiers

    tiers = default_cache_tiers(d, memory_tiers())
    return tiers if any(t.id == prefix.tier.id for t in tiers) else (prefix.tier, *tiers)
