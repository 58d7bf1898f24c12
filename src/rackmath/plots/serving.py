"""The lecture's two drawings with real numbers: step time vs batch, cost per token vs batch
(data: :func:`rackmath.views.figures.serving_charts.explain`)."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.serving.explain import Explanation
from rackmath.plots.render_mpl import save_figure
from rackmath.views.figures import serving_charts


def save_explain_plot(result: Explanation, path: str | Path) -> Path:
    return save_figure(serving_charts.explain(result), path)
