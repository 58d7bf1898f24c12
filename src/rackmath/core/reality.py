"""Plain-number helpers for checking the cost model against reality: the arithmetic that
turns step times into the quantities benchmarks publish, error statistics, and the grid
search calibration uses. Pure and vectorized; no catalog, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def decode_contexts(input_len: int, output_len: int) -> FloatArray:
    """Context of each decode step of one generation: ``I, I+1, ..., I+O-1``.

    Step ``j`` attends to the prompt and the ``j`` tokens generated before it. With ``O = 1``
    the one token comes from the prefill and there is no decode step (empty array).
    """
    return np.arange(input_len, input_len + output_len - 1, dtype=float) + (output_len > 1) * 1.0


def per_layer_overhead_s(overhead_s_per_layer: ArrayLike, layers: ArrayLike) -> FloatArray:
    """Fixed time of one step that does not shrink with its size: ``layers * t_layer``
    (kernel launches and syncs happen per layer; a CUDA-graph launch of a 32-layer model
    costs tens of microseconds per layer on Hopper, gpt-fast's and vLLM's measurements)."""
    return np.asarray(np.asarray(overhead_s_per_layer, float) * np.asarray(layers, float), dtype=float)


def scheduled_concurrency(kv_limited: ArrayLike, concurrency_frac: float) -> FloatArray:
    """Sequences a continuous-batching scheduler keeps running: ``max(1, f * n_kv)`` of the
    ``n_kv`` the KV memory admits (a scheduler admits new requests as others finish, so on
    average a share ``f <= 1`` of the seats is busy; ``f = 1`` is every seat full).
    Worked number: 256 seats at f = 0.75 -> 192 sequences."""
    return np.asarray(np.maximum(1.0, concurrency_frac * np.asarray(kv_limited, float)))


def dequant_weight_bandwidth_frac(
    bytes_per_weight: ArrayLike, dequant_bytes_per_weight: ArrayLike
) -> FloatArray:
    """Share of the memory system's streaming rate a weight-only quantized GEMM keeps:
    ``b / (b + kappa)``.

    A kernel that reads weights stored in ``b`` bytes (int8: 1, int4: 0.5) and converts each
    to the compute format before the matmul spends, per weight, the time of reading ``b``
    bytes plus a conversion cost that does not shrink with ``b`` (unpack, scale, convert on
    the vector units), written as ``kappa`` byte-equivalents at the same bandwidth. So int4
    gains less than 2x over int8 at batch 1 (gpt-fast on A100: 1.26x). ``kappa = 0`` is the
    pure roofline.
    """
    b = np.asarray(bytes_per_weight, float)
    return np.asarray(b / (b + np.asarray(dequant_bytes_per_weight, float)), dtype=float)


def static_batch_output_tokens_per_s(
    batch: ArrayLike, output_len: ArrayLike, prefill_s: ArrayLike, decode_total_s: ArrayLike
) -> FloatArray:
    """Output tokens per second of a static batch run start to finish:
    ``B * O / (t_prefill + sum_j t_decode(I + j))`` (the first token comes with the prefill,
    so ``O - 1`` decode steps follow; TensorRT-LLM's gptSessionBenchmark times it this way)."""
    b = np.asarray(batch, float)
    o = np.asarray(output_len, float)
    return np.asarray(b * o / (np.asarray(prefill_s, float) + np.asarray(decode_total_s, float)), dtype=float)


def reserve_frac_for_kv_fraction(
    capacity_bytes: ArrayLike, weight_bytes: ArrayLike, kv_frac: ArrayLike, *, of_free: bool
) -> FloatArray:
    """Share of HBM *not* given to the KV cache, from a serving stack's KV-memory setting.

    Of the free memory (TensorRT-LLM, ``kv_cache_free_gpu_mem_fraction = f``): the cache gets
    ``f (C - W)``, so the reserve is ``(1 - f)(C - W) / C``. Of the whole memory (vLLM,
    ``gpu_memory_utilization = f``): the reserve is ``1 - f``. Clipped to ``[0, 1)``.
    """
    c = np.asarray(capacity_bytes, float)
    f = np.asarray(kv_frac, float)
    if of_free:
        reserve = (1.0 - f) * np.maximum(c - np.asarray(weight_bytes, float), 0.0) / c
    else:
        reserve = 1.0 - f + 0.0 * c
    return np.asarray(np.clip(reserve, 0.0, 1.0 - 1e-9), dtype=float)


def relative_error(predicted: ArrayLike, measured: ArrayLike) -> FloatArray:
    """``predicted / measured - 1`` (0.10 = 10% high, -0.10 = 10% low)."""
    return np.asarray(np.asarray(predicted, float) / np.asarray(measured, float) - 1.0, dtype=float)


def log_error(predicted: ArrayLike, measured: ArrayLike) -> FloatArray:
    """``ln(predicted / measured)``: symmetric in over- and under-prediction, what the fit minimizes."""
    return np.asarray(np.log(np.asarray(predicted, float) / np.asarray(measured, float)), dtype=float)


def abs_error_quantiles(errors: ArrayLike) -> tuple[float, float]:
    """(median, 90th percentile) of ``|error|`` (linear interpolation); NaN for no rows."""
    e = np.abs(np.asarray(errors, float))
    if e.size == 0:
        return float("nan"), float("nan")
    return float(np.median(e)), float(np.percentile(e, 90))


def coordinate_search(
    objective: Callable[[dict[str, float]], float],
    start: Mapping[str, float],
    grids: Mapping[str, Sequence[float]],
    *,
    sweeps: int = 3,
    diagonal: bool = False,
) -> dict[str, float]:
    """Minimize ``objective`` one parameter at a time over fixed grids.

    Each sweep visits the parameters in ``grids`` order and moves each to the grid value
    that minimizes the objective with the others held; it stops after ``sweeps`` sweeps or
    when a sweep changes nothing. Deterministic (ties keep the earlier grid value); no
    gradients, so step functions and the roofline's ``max`` are fine.

    With ``diagonal``, a sweep that changes nothing is followed by the moves one axis sweep
    cannot make: two parameters one grid step each at once (``4 x pairs`` trials), the best
    one taken if it lowers the objective, and the sweeps go on. One parameter at a time stalls
    in a valley that runs across two axes; the end-to-end correction's host time a sequence
    and scheduled concurrency trade off that way (one fewer sequence running, a little more
    host time each: ``docs/validation.md``).
    """
    point = dict(start)
    best = objective(point)
    for _ in range(sweeps):
        changed = False
        for name, grid in grids.items():
            for value in grid:
                if value == point[name]:
                    continue
                trial = {**point, name: float(value)}
                score = objective(trial)
                if score < best - 1e-12:
                    best, point, changed = score, trial, True
        if not changed and diagonal:
            trials = [(objective(t), t) for t in _diagonal_moves(point, grids)]
            score, trial = min(trials, key=lambda x: x[0], default=(best, point))
            if score < best - 1e-12:
                best, point, changed = score, trial, True
        if not changed:
            break
    return point


def _diagonal_moves(
    point: Mapping[str, float], grids: Mapping[str, Sequence[float]]
) -> list[dict[str, float]]:
    """Every point two grid steps from ``point``: two parameters, one step each (in grid
    order, so ties go to the first); a parameter off its grid does not move."""
    index = {n: list(g).index(point[n]) for n, g in grids.items() if point[n] in g}
    moves = []
    for a, b in itertools.combinations(index, 2):
        for da, db in itertools.product((-1, 1), repeat=2):
            i, j = index[a] + da, index[b] + db
            if 0 <= i < len(grids[a]) and 0 <= j < len(grids[b]):
                moves.append({**point, a: float(grids[a][i]), b: float(grids[b][j])})
    return moves


def knee_batch(batches: ArrayLike, step_s: ArrayLike) -> float:
    """Where a measured step-time curve turns from flat to rising, read off the data.

    The flat part is the step at the smallest batch ``t_1``; the rising part is the line
    through the origin fitted (least squares) to the points at the largest quarter of batches,
    at least the top two, ``t = s * B``. The knee is where they meet: ``B = t_1 / s``. NaN
    when fewer than three batches are given or the top points do not rise.
    """
    b = np.asarray(batches, float)
    t = np.asarray(step_s, float)
    if b.size < 3:
        return float("nan")
    order = np.argsort(b)
    b, t = b[order], t[order]
    top = max(2, b.size // 4)
    bt, tt = b[-top:], t[-top:]
    slope = float(np.sum(bt * tt) / np.sum(bt * bt))
    if not slope > 0 or tt[-1] <= t[0]:
        return float("nan")
    return float(t[0] / slope)
