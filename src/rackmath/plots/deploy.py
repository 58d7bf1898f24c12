"""The serving frontier: tokens/s per chip against tokens/s per user (what public serving
benchmarks plot; data: :func:`rackmath.views.figures.serving_charts.pareto`), and a simulated
workload's SLO attainment against the arrival rate or its latency distributions (data:
:mod:`rackmath.views.figures.planner_charts`)."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.deploy.frontier import Frontier
from rackmath.analyses.deploy.rate_search import SloSearch
from rackmath.analyses.deploy.slo import SloRun
from rackmath.plots.render_mpl import save_figure
from rackmath.views.figures import planner_charts, serving_charts


def save_pareto_plot(result: Frontier, path: str | Path) -> Path:
    return save_figure(serving_charts.pareto(result), path)


def save_attainment_plot(result: SloSearch, path: str | Path) -> Path:
    return save_figure(planner_charts.attainment_curve(result), path)


def save_latency_plot(result: SloRun, path: str | Path) -> Path:
    return save_figure(planner_charts.latency_distributions(result), path)
