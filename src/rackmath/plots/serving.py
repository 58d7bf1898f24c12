"""The lecture's two drawings with real numbers: step time vs batch, cost per token vs batch
(data: :func:`rackmath.analyses.figures.explain`)."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.explain import Explanation
from rackmath.analyses.figures import serving_charts
from rackmath.plots.render_mpl import save_figure


def save_explain_plot(result: Explanation, path: str | Path) -> Path:
    return save_figure(serving_charts.explain(result), path)
