"""Every chart of rackmath as data: one :class:`~rackmath.figure_spec.FigureData` per chart.

The faces draw these and compute nothing: :mod:`rackmath.plots.render_mpl` (files) and
:mod:`rackmath.web.render_plotly` (the explorer). Everything a chart needs beyond an
analysis result is computed here, once, by calling the analyses and the core: the dense
batch sweep behind the step-time and cost curves, the compute-only cost, the cheapest batch
that fits, the iso-loss curve of over-training, the cache-hit curves, the axis spans
(a log axis padded to a factor 2 around the finite positive data) and the conversion of SI
values to an axis' unit (s -> ms, bytes -> GB, USD per token -> per million).

One module per topic: ``serving_charts``, ``economics_charts``, ``training_charts``,
``validation_charts``, ``planner_charts`` (compare, the frontier across systems, SLOs);
``_common`` holds the shared constants and guide lines. Every public
name is re-exported here, so ``from rackmath.analyses import figures`` reaches them all.
"""

from rackmath.analyses.explain import cheapest_fitting
from rackmath.analyses.figures._common import (
    BAND_FRAC,
    CACHE_CURVE_RETENTIONS_S,
    ERROR_AXIS_FRAC,
    LABELLED_OPS,
    OVERTRAIN_CURVE_SPAN,
    OVERTRAIN_Y_FACTOR,
    PHASE_COLORS,
    SWEEP_PAST_BALANCE,
    SWEEP_POINTS,
    Timeline,
    log_span,
)
from rackmath.analyses.figures.economics_charts import (
    OvertrainCurve,
    cache,
    fast_mode,
    fleet,
    fleet_batch,
    fleet_latency,
    long_context,
    overtrain,
    overtrain_curve,
    price_ratio,
    prices,
    sparsity,
    sparsity_cost,
    sparsity_needs,
)
from rackmath.analyses.figures.planner_charts import (
    comparison,
    slo_distribution,
    systems_frontier,
)
from rackmath.analyses.figures.serving_charts import (
    batch_sweep,
    compute_only_usd_per_million,
    cost,
    explain,
    memory,
    mfu_context,
    pareto,
    step_time,
)
from rackmath.analyses.figures.training_charts import (
    pipeline,
    recompute_step,
    training,
    training_memory,
)
from rackmath.analyses.figures.validation_charts import (
    measure,
    metric_scale,
    validation,
    validation_errors,
    validation_report,
)

__all__ = [
    "BAND_FRAC",
    "CACHE_CURVE_RETENTIONS_S",
    "ERROR_AXIS_FRAC",
    "LABELLED_OPS",
    "OVERTRAIN_CURVE_SPAN",
    "OVERTRAIN_Y_FACTOR",
    "PHASE_COLORS",
    "SWEEP_PAST_BALANCE",
    "SWEEP_POINTS",
    "OvertrainCurve",
    "Timeline",
    "batch_sweep",
    "cache",
    "cheapest_fitting",
    "comparison",
    "compute_only_usd_per_million",
    "cost",
    "explain",
    "fast_mode",
    "fleet",
    "fleet_batch",
    "fleet_latency",
    "log_span",
    "long_context",
    "measure",
    "memory",
    "metric_scale",
    "mfu_context",
    "overtrain",
    "overtrain_curve",
    "pareto",
    "pipeline",
    "price_ratio",
    "prices",
    "recompute_step",
    "slo_distribution",
    "sparsity",
    "sparsity_cost",
    "sparsity_needs",
    "step_time",
    "systems_frontier",
    "training",
    "training_memory",
    "validation",
    "validation_errors",
    "validation_report",
]
