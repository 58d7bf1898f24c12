"""Disaggregated serving in the search: ``x`` prefill replicas and ``y`` decode replicas (xPyD).

The prefill pool runs prompts only (:func:`~rackmath.analyses.deploy.candidates.evaluate` with
``phase="prefill"``: ``b`` prompts of ``I`` tokens per pass of ``t_pre``); the decode pool runs
decode steps only (``phase="decode"``: ``B`` sequences at context ``I + O/2``, step ``t_dec``).
Each prompt's KV cache moves once between them (:func:`rackmath.core.network.kv_transfer_s`):
over the scale-up fabric when both pools sit in one scale-up domain of the same system
(``chips_p + chips_d <= domain``), otherwise over the scale-out network, each of
``min(chips_p, chips_d)`` chips sending its shard.

For a traffic of ``T`` output tokens/s (``R = T / O`` prompts/s):

* ``y = ceil(T / (B / t_dec))`` decode replicas, ``x = ceil(R / (b / t_pre))`` prefill replicas;
* TTFT = ``t_pre + t_kv`` (no queueing: the same footing as the aggregated search's
  ``max(1, O/B)`` steps), TPOT = ``t_dec``;
* fleet cost = ``(x chips_p price_p + y chips_d price_d) / T``, per million output tokens.

The pools may sit on different systems and precision families (the KV format must match).
Each pool is chosen among its own feasible candidates: the cheapest decode pool meeting TPOT,
then the cheapest prefill pool whose pass plus transfer meets TTFT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rackmath.analyses.deploy.candidates import Candidates, Choice, Workload, evaluate
from rackmath.analyses.deploy.plan_features import BALANCED, MoeRouting
from rackmath.analyses.serving.planned import topology
from rackmath.core import architecture as arch
from rackmath.core import economics as econ
from rackmath.core import network as net
from rackmath.core import roofline as rl
from rackmath.frames import Record
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.runtime import RuntimeProfile

#: Prompts per prefill pass searched: 1 to 64 in powers of two.
PREFILL_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Pool(Record):
    """One pool's plan and figures: ``step_s`` is the decode step or the prefill pass."""

    system: str
    chip: str
    family: str
    weights: str
    kv: str
    plan_text: str
    chips: int
    batch: int
    step_s: float
    rate_per_s: float  # output tokens/s (decode) or prompts/s (prefill) per replica
    replicas: int
    usd_per_chip_hour: float
    bottleneck: str


@dataclass(frozen=True)
class Disaggregated:
    """The cheapest xPyD fleet meeting the SLOs (SI; tokens are output tokens)."""

    prefill: Pool
    decode: Pool
    kv_transfer_s: float
    kv_tier: str  # "scale-up" or "scale-out"
    ttft_s: float
    tpot_s: float
    traffic_tokens_per_s: float

    @property
    def xpyd(self) -> str:
        return f"{self.prefill.replicas}P{self.decode.replicas}D"

    @property
    def chips(self) -> int:
        return self.prefill.replicas * self.prefill.chips + self.decode.replicas * self.decode.chips

    @property
    def fleet_usd_per_million_output_tokens(self) -> float:
        usd_per_s = (
            self.prefill.replicas * self.prefill.chips * self.prefill.usd_per_chip_hour
            + self.decode.replicas * self.decode.chips * self.decode.usd_per_chip_hour
        ) / 3600.0
        return usd_per_s / self.traffic_tokens_per_s * 1e6

    @property
    def prefill_chip_frac(self) -> float:
        return self.prefill.replicas * self.prefill.chips / self.chips

    def to_dict(self) -> dict[str, Any]:
        return {
            "xpyd": self.xpyd,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "kv_transfer_s": self.kv_transfer_s,
            "kv_tier": self.kv_tier,
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "chips": self.chips,
            "prefill_chip_frac": self.prefill_chip_frac,
            "fleet_usd_per_million_output_tokens": self.fleet_usd_per_million_output_tokens,
        }


def _plan_text(c: Candidates, i: int) -> str:
    degrees = {k: int(getattr(c, k)[i]) for k in ("tp", "pp", "dp", "ep")}
    degrees["cp"] = 1 if c.cp is None else int(c.cp[i])
    parts = [f"{k}={v}" for k, v in degrees.items() if v > 1]
    return (",".join(parts) or "tp=1") + (c.routing.plan_suffix() if int(c.ep[i]) > 1 else "")


def _pool(c: Candidates, i: int, rate: float, replicas: int) -> Pool:
    return Pool(
        system=c.system.id,
        chip=c.system.chip.id,
        family=c.family,
        weights=c.precisions.weights.value,
        kv=c.precisions.kv.value,
        plan_text=_plan_text(c, i),
        chips=int(c.chips[i]),
        batch=int(c.batch[i]),
        step_s=float(c.tpot_s[i]),
        rate_per_s=rate,
        replicas=replicas,
        usd_per_chip_hour=c.usd_per_chip_hour,
        bottleneck=str(c.bottleneck[i]),
    )


def kv_tier_topology(prefill: SystemSpec, decode: SystemSpec) -> tuple[net.Topology, net.Topology]:
    """``(scale-out, scale-up)`` topologies for the KV transfer: the slower of the two systems'
    scale-out networks, and the decode system's scale-up fabric put in the scale-out slot (used
    when the whole fleet sits in one scale-up domain of one system)."""
    tp_, td = topology(prefill), topology(decode)
    slow = tp_ if tp_.scale_out_bytes_per_s <= td.scale_out_bytes_per_s else td
    up = replace(td, scale_out_bytes_per_s=td.scale_up_bytes_per_s, scale_out_latency_s=td.scale_up_latency_s)
    return slow, up


def best_disaggregated(
    model: ModelSpec,
    systems: list[SystemSpec],
    workload: Workload,
    *,
    families: tuple[str, ...],
    max_chips: int,
    max_pp: int,
    batches: tuple[int, ...],
    comm_overlap_frac: float = net.CommOverlap.ADDED,
    runtime: RuntimeProfile | None = None,
    efficiency: rl.Efficiency = rl.KERNEL_GROUNDED,
    routing: MoeRouting = BALANCED,
    max_cp: int = 1,
) -> tuple[Disaggregated | None, int, str]:
    """``(best xPyD or None, candidates evaluated, why none)`` over every pair of pools
    (``max_cp > 1``: both pools also with context parallelism, where a prefill pool's long
    prompts gain most)."""
    w = workload
    traffic, prompts = w.traffic_tokens_per_s, w.traffic_tokens_per_s / w.output_len
    kw = {
        "max_chips": max_chips,
        "max_pp": max_pp,
        "comm_overlap_frac": comm_overlap_frac,
        "runtime": runtime,
        "efficiency": efficiency,
        "routing": routing,
        "max_cp": max_cp,
    }
    decodes: list[tuple[Candidates, int, float, int]] = []
    prefills: list[Candidates] = []
    total = 0
    for s in systems:
        for fam in families:
            d = evaluate(model, s, fam, w, batches=batches, phase="decode", **kw)  # type: ignore[arg-type]
            p = evaluate(model, s, fam, w, batches=PREFILL_BATCHES, phase="prefill", **kw)  # type: ignore[arg-type]
            if d is None or p is None:
                continue
            total += d.size + p.size
            ok = d.fits & (d.tpot_s <= (w.tpot_s or np.inf))
            if ok.any():
                rate = d.tokens_per_s
                cost = np.where(
                    ok, econ.replicas_needed(traffic, rate) * d.chips * d.usd_per_chip_hour, np.inf
                )
                i = int(np.lexsort((d.tpot_s, cost))[0])
                decodes.append((d, i, float(rate[i]), int(econ.replicas_needed(traffic, rate[i]))))
            prefills.append(p)
    if not decodes:
        return None, total, f"no decode pool meets TPOT <= {(w.tpot_s or 0) * 1e3:.3g} ms"
    best: Disaggregated | None = None
    best_cost = math.inf
    for d, i, d_rate, y in decodes:
        kv_el = d.precisions.kv.bytes_per_element
        kv_bytes = float(arch.kv_bytes_per_sequence(model, w.input_len, kv_el))
        for p in prefills:
            if p.precisions.kv != d.precisions.kv:
                continue
            slow, up = kv_tier_topology(p.system, d.system)
            p_rate = p.batch / p.tpot_s
            x = econ.replicas_needed(prompts, p_rate)
            fleet_chips = x * p.chips + y * int(d.chips[i])
            together = (p.system.id == d.system.id) & (fleet_chips <= up.chips_per_domain)
            links = np.minimum(p.chips, d.chips[i])
            t_kv = np.where(
                together, net.kv_transfer_s(kv_bytes, links, up), net.kv_transfer_s(kv_bytes, links, slow)
            )
            ttft = p.tpot_s + t_kv
            ok = p.fits & (ttft <= (w.ttft_s or np.inf))
            if not ok.any():
                continue
            cost = np.where(ok, x * p.chips * p.usd_per_chip_hour, np.inf)
            j = int(np.lexsort((ttft, cost))[0])
            total_cost = float(cost[j]) + y * int(d.chips[i]) * d.usd_per_chip_hour
            if total_cost < best_cost:
                best_cost = total_cost
                best = Disaggregated(
                    prefill=_pool(p, j, float(p_rate[j]), int(x[j])),
                    decode=_pool(d, i, d_rate, y),
                    kv_transfer_s=float(t_kv[j]),
                    kv_tier="scale-up" if bool(np.asarray(together)[j]) else "scale-out",
                    ttft_s=float(ttft[j]),
                    tpot_s=float(d.tpot_s[i]),
                    traffic_tokens_per_s=traffic,
                )
    if best is None:
        return (
            None,
            total,
            f"no prefill pool meets TTFT <= {(w.ttft_s or 0) * 1e3:.3g} ms with its KV transfer",
        )
    return best, total, ""


def compare(agg: Choice | None, dis: Disaggregated | None, why_not: str) -> str:
    """One sentence with the numbers: does xPyD beat the aggregated choice, and why."""
    if dis is None:
        return f"No disaggregated fleet meets the SLOs: {why_not}."
    d, p = dis.decode, dis.prefill
    head = (
        f"{dis.xpyd} ({p.replicas} x {p.chips} {p.chip} prefill at {p.plan_text}, {p.batch} prompts a "
        f"pass of {p.step_s * 1e3:.3g} ms; {d.replicas} x {d.chips} {d.chip} decode at {d.plan_text}, "
        f"batch {d.batch:,}, TPOT {d.step_s * 1e3:.3g} ms; KV {dis.kv_transfer_s * 1e3:.3g} ms over "
        f"{dis.kv_tier})"
    )
    usd_d = dis.fleet_usd_per_million_output_tokens
    if agg is None:
        return f"{head} is the only design that meets the SLOs: {_usd(usd_d)} per million output tokens."
    usd_a = agg.fleet_usd_per_million_output_tokens
    per_chip_d = d.rate_per_s / d.chips
    verdict = "beats" if usd_d < usd_a else "does not beat"
    return (
        f"{head} {verdict} the aggregated {agg.replicas} x {agg.chips} {agg.chip} ({agg.plan_text}, batch "
        f"{agg.batch:,}): {_usd(usd_d)} vs {_usd(usd_a)} per million output tokens "
        f"({(usd_d / usd_a - 1) * 100:+.0f}%): its decode chips make {per_chip_d:,.0f} tokens/s each "
        f"with no prompt tokens in their steps, against {agg.tokens_per_s_per_chip:,.0f} for the mixed "
        "replica, "
        f"while the prefill pool takes {dis.prefill_chip_frac * 100:.0f}% of its {dis.chips:,} chips "
        f"(aggregated: {agg.replicas * agg.chips:,})."
    )


def _usd(x: float) -> str:
    return f"${x:.3g}"


def frontier_points(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    *,
    family: str,
    max_chips: int,
    runtime: RuntimeProfile | None = None,
    efficiency: rl.Efficiency = rl.KERNEL_GROUNDED,
    routing: MoeRouting = BALANCED,
) -> tuple[np.ndarray, np.ndarray, Candidates | None, np.ndarray]:
    """Disaggregated points for the frontier: each fitting decode candidate with its share of the
    most prompt-efficient prefill replica (prompts/s per chip): chips per unit =
    ``chips_d + (B / (t_dec O)) / (b / t_pre) chips_p``. Returns (per user, per chip, decode
    candidates, their indices)."""
    d = evaluate(
        model,
        system,
        family,
        workload,
        max_chips=max_chips,
        phase="decode",
        runtime=runtime,
        efficiency=efficiency,
        routing=routing,
    )
    p = evaluate(
        model,
        system,
        family,
        workload,
        max_chips=max_chips,
        batches=PREFILL_BATCHES,
        phase="prefill",
        runtime=runtime,
        efficiency=efficiency,
        routing=routing,
    )
    empty = np.zeros(0)
    if d is None or p is None or not d.fits.any() or not p.fits.any():
        return empty, empty, None, np.zeros(0, np.int64)
    per_chip_p = np.where(p.fits, p.batch / p.tpot_s / p.chips, 0.0)
    j = int(np.argmax(per_chip_p))
    prompts_per_replica = float(p.batch[j] / p.tpot_s[j])
    idx = np.flatnonzero(d.fits)
    share = d.tokens_per_s[idx] / workload.output_len / prompts_per_replica * float(p.chips[j])
    return d.tokens_per_s_per_user[idx], d.tokens_per_s[idx] / (d.chips[idx] + share), d, idx
