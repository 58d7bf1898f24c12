"""Training drawings: the lecture's pipeline picture from a simulated schedule, and the
memory per chip by component and recomputation mode; data: :mod:`rackmath.analyses.figures`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses import figures
from rackmath.analyses.figures import Timeline
from rackmath.analyses.training import TrainingEstimate
from rackmath.plots.render_mpl import save_figure


def save_pipeline_plot(timeline: Timeline, path: str | Path) -> Path:
    """One bar per op per stage: the lecture's pipeline drawing, from a real schedule."""
    return save_figure(figures.pipeline(timeline), path)


def save_training_plot(result: TrainingEstimate, timeline: Timeline, path: str | Path) -> Path:
    """Memory per chip by component for each recomputation mode, beside the schedule."""
    return save_figure(figures.training(result, timeline), path)
