"""Training drawings: the lecture's pipeline picture from a simulated schedule, and the
memory per chip by component and recomputation mode; data: :mod:`rackmath.views.figures`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.training.estimate import TrainingEstimate
from rackmath.analyses.training.pipeline import PipelineResult
from rackmath.plots.render_mpl import save_figure
from rackmath.views.figures import training_charts


def save_pipeline_plot(schedule: PipelineResult, path: str | Path) -> Path:
    """One bar per op per stage: the lecture's pipeline drawing, from a real schedule."""
    return save_figure(training_charts.pipeline(schedule.timeline), path)


def save_training_plot(result: TrainingEstimate, schedule: PipelineResult, path: str | Path) -> Path:
    """Memory per chip by component for each recomputation mode, beside the schedule."""
    return save_figure(training_charts.training(result, schedule.timeline), path)
