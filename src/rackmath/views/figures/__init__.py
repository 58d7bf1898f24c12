"""Every chart of rackmath as data: one :class:`~rackmath.views.figure_spec.FigureData` per chart.

The faces draw these and compute nothing: :mod:`rackmath.plots.render_mpl` (files) and
:mod:`rackmath.web.render_plotly` (the explorer). Everything a chart needs beyond an
analysis result is computed here, once, by calling the analyses and the core: the dense
batch sweep behind the step-time and cost curves, the compute-only cost, the cheapest batch
that fits, the iso-loss curve of over-training, the cache-hit curves, the axis spans
(a log axis padded to a factor 2 around the finite positive data) and the conversion of SI
values to an axis' unit (s -> ms, bytes -> GB, USD per token -> per million).

One module per topic: ``serving_charts``, ``economics_charts``, ``training_charts``,
``validation_charts``, ``planner_charts`` (compare, the frontier across systems, SLOs);
``common`` holds the shared constants and guide lines.
"""
