"""The serving frontier: tokens/s per chip against tokens/s per user (what public
serving benchmarks plot), drawn from :func:`rackmath.analyses.search.pareto`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.search import Frontier
from rackmath.plots._files import checked_path, pyplot, save


def save_pareto_plot(result: Frontier, path: str | Path) -> Path:
    out = checked_path(path)
    fig, ax = pyplot().subplots(figsize=(8, 5.5), constrained_layout=True)
    ax.scatter(
        result.all_per_user, result.all_per_chip, s=4, color="0.8", label="all plans x batches that fit"
    )
    xs = [p.tokens_per_s_per_user for p in result.frontier]
    ys = [p.tokens_per_s_per_chip for p in result.frontier]
    ax.plot(xs, ys, "-o", color="tab:red", ms=3, lw=1.8, label="frontier")
    for p in result.frontier[:: max(1, len(result.frontier) // 8)]:
        ax.annotate(
            f"{p.plan_text} B={p.batch}", (p.tokens_per_s_per_user, p.tokens_per_s_per_chip), fontsize=7
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="tokens/s per user (1 / TPOT)",
        ylabel="output tokens/s per chip",
        title=f"{result.model} on {result.system}: {result.input_len} in / {result.output_len} out",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out)
