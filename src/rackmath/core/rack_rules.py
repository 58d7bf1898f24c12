"""Rules of thumb the lecture derives for a deployment as a whole, written as formulas.

Pure and vectorized (:mod:`rackmath.core.parallel` holds the step they summarize):
time to first token with chunked prefill, the rack-boundary rule for a pipeline cut (D17)
and the weight-fetch floor of one scale-up domain (D23).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def chunked_prefill_ttft_s(step_s: ArrayLike, batch: ArrayLike, output_len: ArrayLike) -> FloatArray:
    """Time to first token with chunked prefill, no queueing: ``max(1, O/B)`` steps.

    Each step's prefill budget is ``B I / O`` tokens; one prompt of ``I`` tokens needs
    ``O / B`` steps of it (at least one).
    """
    return np.asarray(
        np.maximum(1.0, np.asarray(output_len, float) / np.asarray(batch, float)) * np.asarray(step_s, float),
        dtype=float,
    )


def pipeline_cut_advantage(
    experts_per_token: ArrayLike,
    layers_per_stage: ArrayLike,
    scale_up_bytes_per_s: ArrayLike,
    scale_out_bytes_per_s: ArrayLike,
) -> FloatArray:
    """The rack-boundary rule (D17): scale-up EP time per stage over the cut's scale-out time.

    A token's stage of ``L`` MoE layers moves ``2 k d`` bytes per layer over scale-up
    (dispatch + combine); a pipeline cut moves ``d`` bytes once over scale-out:
    ``(2 k L d / B_up) / (d / B_out) = 2 k L / (B_up / B_out)``. The cut costs no more
    than the expert traffic when this is >= 1, i.e. ``2 k L >= B_up/B_out`` (the lecture's
    ``>= 8``; with k = 8, L = 1 and a ratio of 8 it is 2).
    """
    ratio = np.asarray(scale_up_bytes_per_s, float) / np.asarray(scale_out_bytes_per_s, float)
    return np.asarray(
        2.0 * np.asarray(experts_per_token, float) * np.asarray(layers_per_stage, float) / ratio,
        dtype=float,
    )


def weight_fetch_floor_s(
    weight_bytes: ArrayLike, scale_up_chips: ArrayLike, bandwidth_bytes_per_s: ArrayLike
) -> FloatArray:
    """D23: ``N_total bytes / (S x BW)``: only one scale-up domain's chips read a stage's
    weights in parallel, so the domain's size, not the pipeline's, sets the floor."""
    return np.asarray(
        np.asarray(weight_bytes, float)
        / (np.asarray(scale_up_chips, float) * np.asarray(bandwidth_bytes_per_s, float)),
        dtype=float,
    )
