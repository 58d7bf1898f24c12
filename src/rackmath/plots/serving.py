"""The lecture's two drawings with real numbers: step time vs batch, cost per token vs batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rackmath import fmt
from rackmath.analyses import serving
from rackmath.analyses.explain import Explanation
from rackmath.core import roofline as rl
from rackmath.plots._files import checked_path, pyplot, save


def batch_sweep(result: Explanation, points: int = 200) -> serving.DecodeGrid:
    """A dense log-spaced batch sweep at the first context, for smooth curves."""
    b_star = result.balance.balance_batch_with_kv[0]
    top = max(
        float(result.batches.max()), 4 * (b_star if np.isfinite(b_star) else result.balance.balance_batch)
    )
    batches = np.unique(np.round(np.geomspace(1, top, points)))
    return serving.decode(result.deployment, batches, result.contexts[:1])


def save_explain_plot(result: Explanation, path: str | Path) -> Path:
    path = checked_path(path)
    plt = pyplot()

    d = result.deployment
    sweep = batch_sweep(result)
    b = sweep.batch[:, 0]
    t = sweep.times
    c0 = float(result.contexts[0])
    b_star = float(result.balance.balance_batch_with_kv[0])

    fig, (ax_t, ax_c) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    ms = 1e3
    ax_t.plot(b, t.compute_s[:, 0] * ms, label="compute", color="tab:blue")
    ax_t.plot(b, t.weight_fetch_s[:, 0] * ms, label="weight fetch", color="tab:orange")
    ax_t.plot(b, t.kv_fetch_s[:, 0] * ms, label="KV fetch", color="tab:green")
    ax_t.plot(b, t.memory_s[:, 0] * ms, ":", label="weights + KV", color="tab:red")
    ax_t.plot(b, sweep.step_s[:, 0] * ms, "k", lw=2.2, label="step = max(...)")
    ax_t.axhline(result.latency_floor_s * ms, color="gray", ls="--", lw=1, label="latency floor")
    if np.isfinite(b_star):
        ax_t.axvline(b_star, color="purple", ls="-.", lw=1, label=f"balance B* = {b_star:,.0f}")
    else:
        closed = result.balance.balance_batch
        ax_t.axvline(closed, color="purple", ls="-.", lw=1, label=f"B* without KV = {closed:,.0f}")
    max_b = float(result.max_batch[0])
    if 1 <= max_b < b[-1]:
        ax_t.axvspan(max_b, b[-1], color="gray", alpha=0.12, label="KV does not fit")
    ax_t.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="time per decode step (ms)")
    ax_t.set_title(f"Step time vs batch at {c0:,.0f} tokens of context")
    ax_t.legend(fontsize=8)
    ax_t.grid(True, which="both", alpha=0.3)

    cost = sweep.usd_per_million_output_tokens[:, 0]
    ax_c.plot(b, cost, "k", lw=2.2, label="$ per million output tokens")
    floor_cost = rl.usd_per_million_tokens(sweep.times.compute_s[:, 0], b, d.chips, d.usd_per_chip_hour)
    ax_c.plot(b, floor_cost, color="tab:blue", ls="--", lw=1, label="compute-only cost")
    if np.isfinite(b_star):
        ax_c.axvline(b_star, color="purple", ls="-.", lw=1, label=f"balance B* = {b_star:,.0f}")
    if 1 <= max_b < b[-1]:
        ax_c.axvspan(max_b, b[-1], color="gray", alpha=0.12, label="KV does not fit")
    ax_c.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="USD per million output tokens")
    ax_c.set_title(f"Cost per token vs batch at {fmt.usd(d.usd_per_chip_hour)}/chip-hour")
    ax_c.legend(fontsize=8)
    ax_c.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        f"{d.model.name} on {d.chips} x {d.system.chip.id} "
        f"(weights {d.precisions.weights.value}, KV {d.precisions.kv.value}, "
        f"compute {d.precisions.compute.value})"
    )
    return save(fig, path)
