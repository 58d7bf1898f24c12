"""The serving frontier: tokens/s per chip against tokens/s per user (what public serving
benchmarks plot); data: :func:`rackmath.views.figures.serving_charts.pareto`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.deploy.frontier import Frontier
from rackmath.plots.render_mpl import save_figure
from rackmath.views.figures import serving_charts


def save_pareto_plot(result: Frontier, path: str | Path) -> Path:
    return save_figure(serving_charts.pareto(result), path)
