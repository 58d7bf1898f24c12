"""Figures of the economics commands; data: :mod:`rackmath.views.figures`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.economics import fleet as fleet_analysis
from rackmath.analyses.economics import overtrain as overtrain_analysis
from rackmath.analyses.economics import prices as prices_analysis
from rackmath.analyses.economics import sparsity as sparsity_analysis
from rackmath.plots.render_mpl import save_figure
from rackmath.views.figures import economics_charts


def save_prices_plot(report: prices_analysis.PricesReport, path: str | Path) -> Path:
    """Cost and price per token vs context; cache hit cost vs retention; fast-mode curve."""
    return save_figure(economics_charts.prices(report.long_context, report.caching, report.fast_mode), path)


def save_fleet_plot(result: fleet_analysis.Fleet, path: str | Path) -> Path:
    return save_figure(economics_charts.fleet(result), path)


def save_overtrain_plot(result: overtrain_analysis.Overtraining, path: str | Path) -> Path:
    return save_figure(economics_charts.overtrain(result), path)


def save_sparsity_plot(result: sparsity_analysis.SparsityStudy, path: str | Path) -> Path:
    return save_figure(economics_charts.sparsity(result), path)
