"""Figures for the economics commands: they draw what the analyses return, nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rackmath.analyses import caching
from rackmath.analyses import fleet as fleet_analysis
from rackmath.analyses import overtrain as overtrain_analysis
from rackmath.analyses import prices as prices_analysis
from rackmath.analyses import sparsity as sparsity_analysis
from rackmath.core import scaling_laws as sl
from rackmath.plots._files import checked_path, pyplot, save
from rackmath.units import MILLION


def _figure(path: str | Path, ncols: int) -> tuple[Path, Any, Any]:
    out = checked_path(path)
    fig, axes = pyplot().subplots(1, ncols, figsize=(5.2 * ncols, 4.6), constrained_layout=True)
    return out, fig, np.atleast_1d(axes)


def _save(fig: Any, path: Path) -> Path:
    return save(fig, path)


def save_prices_plot(report: prices_analysis.PricesReport, path: str | Path) -> Path:
    """Cost and price per token vs context; cache hit cost vs retention; fast-mode curve."""
    path, fig, (ax_lc, ax_cache, ax_fast) = _figure(path, 3)
    lc = report.long_context
    if lc is not None:
        ax_lc.plot(lc.contexts, lc.cost_usd_per_million_output_tokens, "k", lw=2, label="cost / output token")
        ax_lc.step(
            lc.contexts,
            lc.price_usd_per_million_output_tokens,
            where="post",
            color="tab:red",
            label=f"{lc.price.id} output price",
        )
        ax_lc.plot(lc.contexts, lc.cost_usd_per_million_input_tokens, "k--", lw=1, label="cost / input token")
        ax_lc.step(
            lc.contexts,
            lc.price_usd_per_million_input_tokens,
            where="post",
            color="tab:orange",
            ls="--",
            label="input price",
        )
        ax_lc.axvline(lc.crossover_context_tokens, color="purple", ls="-.", lw=1, label="KV = compute (len*)")
        ax_lc.set(xscale="log", yscale="log", xlabel="context (tokens)", ylabel="USD per million tokens")
        ax_lc.set_title(f"{lc.deployment.model.id}, batch {lc.batch:,.0f}")
        ax_lc.legend(fontsize=7)
        ax_lc.grid(True, which="both", alpha=0.3)
    c = report.caching
    r = np.geomspace(1e-3, 1e6, 200)
    hits = c.hit_usd_per_token_at(r) * MILLION
    for tier, hit in zip(c.tiers, hits, strict=True):
        ax_cache.plot(r, hit, label=f"{tier.id} (drain {tier.drain_time_s:.3g} s)")
    ax_cache.axhline(c.recompute_usd_per_token * MILLION, color="k", ls="--", label="recompute (prefill)")
    for t, name in ((caching.SHORT_RETENTION_S, "5 min"), (caching.LONG_RETENTION_S, "1 h")):
        ax_cache.axvline(t, color="gray", lw=0.8, ls=":")
        ax_cache.annotate(name, (t, 0.02), xycoords=("data", "axes fraction"), fontsize=7, rotation=90)
    ax_cache.set(
        xscale="log", yscale="log", xlabel="retention (s)", ylabel="USD per million tokens (hold + fetch)"
    )
    ax_cache.set_title("Prompt cache: cost of a hit by tier")
    ax_cache.legend(fontsize=7)
    ax_cache.grid(True, which="both", alpha=0.3)
    f = report.fast_mode
    if f.deployment is not None:
        dm = f.deployment
        ax_fast.plot(dm.price_multiples, dm.speedups, "k", lw=2, label=f"{dm.deployment.model.id} roofline")
        ax_fast.plot([dm.requested_price_multiple], [dm.fast_speedup], "o", color="tab:red")
    k, m = f.ideal.normal_over_balance, f.ideal.price_multiple
    grid = np.geomspace(1.0, max(100.0, m), 100)
    ax_fast.plot(
        grid, np.full_like(grid, k), color="tab:blue", ls="--", label=f"lecture ideal: ceiling {k:g}x"
    )
    ax_fast.plot(
        [m], [f.ideal.speedup], "s", color="tab:blue", label=f"{m:g}x price -> {f.ideal.speedup:g}x speed"
    )
    ax_fast.set(xscale="log", yscale="log", xlabel="price multiple", ylabel="speed-up")
    ax_fast.set_title("What a higher price buys")
    ax_fast.legend(fontsize=7)
    ax_fast.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def save_fleet_plot(result: fleet_analysis.Fleet, path: str | Path) -> Path:
    path, fig, (ax_t, ax_b) = _figure(path, 2)
    loads = [p.load_frac for p in result.loads]
    ms = 1e3
    ax_t.plot(loads, [p.ttft_p50_s * ms for p in result.loads], "o-", label="TTFT p50")
    ax_t.plot(loads, [p.ttft_p99_s * ms for p in result.loads], "o--", label="TTFT p99")
    ax_t.plot(loads, [p.tpot_p50_s * ms for p in result.loads], "s-", label="TPOT p50")
    ax_t.plot(loads, [p.tpot_p99_s * ms for p in result.loads], "s--", label="TPOT p99")
    ax_t.axhline(
        result.train.closed_form_worst_s * ms, color="gray", ls=":", label="train worst case T + run"
    )
    ax_t.set(xlabel="load (fraction of capacity)", ylabel="ms", yscale="log")
    ax_t.set_title("Latency vs load (simulated)")
    ax_t.legend(fontsize=8)
    ax_t.grid(True, alpha=0.3)
    ax_b.plot(loads, [p.mean_batch for p in result.loads], "o-", label="mean running batch")
    ax_b.axhline(result.batch, color="gray", ls=":", label="max batch")
    ax_b.set(xlabel="load (fraction of capacity)", ylabel="sequences")
    ax_b.set_title(f"{result.replicas:,} replicas for {result.traffic_tokens_per_s:.3g} tokens/s")
    ax_b.legend(fontsize=8)
    ax_b.grid(True, alpha=0.3)
    return _save(fig, path)


def save_overtrain_plot(result: overtrain_analysis.Overtraining, path: str | Path) -> Path:
    path, fig, (ax,) = _figure(path, 1)
    n = np.geomspace(result.optimum_params / 10, result.optimum_params * 10, 200)
    d = sl.tokens_for_loss(n, result.loss, result.fit)
    pre, rl, inf = sl.lifecycle_compute_flops(
        n, d, result.rl_tokens, result.inference_tokens, result.coefficients
    )
    rest = rl + inf
    ax.plot(n, pre, label="pre-training")
    ax.plot(n, rest, label="RL + inference")
    ax.plot(n, pre + rest, "k", lw=2, label="lifetime total")
    ax.axvline(result.params, color="tab:red", ls="--", label=f"equal thirds, N = {result.params:.3g}")
    ax.axvline(
        result.optimum_params,
        color="tab:green",
        ls="-.",
        label=f"exact optimum, N = {result.optimum_params:.3g}",
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="active parameters N (same loss)",
        ylabel="FLOPs (pre-training equivalent)",
    )
    ax.set_title(f"Over-training at loss {result.loss:.3f}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def save_sparsity_plot(result: sparsity_analysis.SparsityStudy, path: str | Path) -> Path:
    path, fig, (ax_c, ax_q) = _figure(path, 2)
    s = [r.sparsity for r in result.rows]
    ax_c.plot(
        s, [r.usd_per_million_tokens_at_balance for r in result.rows], "o-", label="at the balance batch"
    )
    ax_c.plot(
        s,
        [r.usd_per_million_tokens_at_users for r in result.rows],
        "s--",
        label=f"with {result.users:,.0f} users",
    )
    ax_c.set(
        xscale="log", yscale="log", xlabel="sparsity N_total / N_active", ylabel="USD per million tokens"
    )
    ax_c.set_title("Cost per token")
    ax_c.legend(fontsize=8)
    ax_c.grid(True, which="both", alpha=0.3)
    ax_q.plot(s, [r.effective_params for r in result.rows], "o-", label="dense-equivalent (Clark et al.)")
    ax_q.plot(s, [r.balance_batch for r in result.rows], "s--", label="balance batch (users needed)")
    ax_q.set(xscale="log", yscale="log", xlabel="sparsity N_total / N_active")
    ax_q.set_title("What sparsity buys and needs")
    ax_q.legend(fontsize=8)
    ax_q.grid(True, which="both", alpha=0.3)
    return _save(fig, path)
