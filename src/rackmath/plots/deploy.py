"""The serving frontier: tokens/s per chip against tokens/s per user (what public serving
benchmarks plot); data: :func:`rackmath.analyses.figures.pareto`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses import figures
from rackmath.analyses.search import Frontier
from rackmath.plots.render_mpl import save_figure


def save_pareto_plot(result: Frontier, path: str | Path) -> Path:
    return save_figure(figures.pareto(result), path)
