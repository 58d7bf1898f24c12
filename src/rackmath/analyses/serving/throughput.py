"""What every decode grid derives from its step time: tokens/s (in all, per user, per chip), the
price per million output tokens, and the p10-p90 band of each; and the checked
``batch x context`` axes the grids share.

The pooled grid (:class:`~rackmath.analyses.serving.pooled.DecodeGrid`), the planned one
(:class:`~rackmath.analyses.serving.planned.DecodeGrid`) and speculative decoding's
(:class:`~rackmath.analyses.serving.speculative.SpeculativeGrid`) each provide ``batch``,
``step_s`` and a ``deployment``; this base turns them into the same figures.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import roofline as rl
from rackmath.core.lazy import cached_property
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.specs.efficiency import EfficiencyMode, ErrorBand

FloatArray = NDArray[np.float64]


def batch_context_grid(batch: ArrayLike, context: ArrayLike) -> tuple[FloatArray, FloatArray]:
    b = np.asarray(batch, float)
    c = np.asarray(context, float)
    if not _at_least_one(b):
        raise InputError("batch", batch, "numbers >= 1")
    if not _at_least_one(c):
        raise InputError("context", context, "token counts >= 1")
    return b[:, None] if b.ndim == 1 else b, c[None, :] if c.ndim == 1 else c


def _at_least_one(a: FloatArray) -> bool:
    """Whether ``a`` holds values, every one finite and 1 or more (NaN fails both comparisons;
    one value is compared as a Python float, without four ufunc calls)."""
    if a.size == 1:
        return 1.0 <= a.item() < np.inf
    return a.size > 0 and bool(((a >= 1) & (a < np.inf)).all())


class DecodeThroughput(ABC):
    """Throughput and cost of one decode step over a batch, shared by every decode grid.

    A subclass provides ``batch``, ``step_s`` and a ``deployment`` with ``chips`` and
    ``usd_per_chip_hour``; each of ``batch`` sequences gains one token per step.
    """

    batch: FloatArray
    deployment: Any

    @property
    @abstractmethod
    def step_s(self) -> FloatArray:
        """Seconds per decode step; each grid knows where its step time comes from."""

    @property
    def step_tokens(self) -> FloatArray:
        """Tokens one step yields over the batch: one per sequence (speculative decoding: the
        mean accepted per sequence, :class:`~rackmath.analyses.serving.speculative.SpeculativeGrid`)."""
        return self.batch

    @property
    def tokens_per_s(self) -> FloatArray:
        return np.asarray(self.step_tokens / self.step_s)

    @property
    def tokens_per_s_per_user(self) -> FloatArray:
        return np.broadcast_to(1.0 / self.step_s, self.step_s.shape)

    @property
    def tokens_per_s_per_chip(self) -> FloatArray:
        return np.asarray(self.tokens_per_s / self.deployment.chips)

    @property
    def usd_per_million_output_tokens(self) -> FloatArray:
        d = self.deployment
        return rl.usd_per_million_tokens(self.step_s, self.step_tokens, d.chips, d.usd_per_chip_hour)

    # The band (p10-p90) of each figure: the step's (:attr:`rackmath.core.step.PlanStep.step_band_s`,
    # every operator at the edges of its curve's held-out error); a throughput's p10 comes from
    # the step's p90 (a slower step yields fewer tokens), a price's p10 from the step's p10.

    @property
    def step_band_s(self) -> tuple[FloatArray, FloatArray]:
        """The step's p10 and p90 (seconds), from the grid's plan step (the step itself when
        the grid has none)."""
        step = getattr(self, "times", None) or getattr(self, "step", None)
        if not isinstance(step, PlanStep):
            return self.step_s, self.step_s
        lo, hi = step.step_band_s
        return np.broadcast_to(lo, self.step_s.shape), np.broadcast_to(hi, self.step_s.shape)

    @property
    def step_s_p10(self) -> FloatArray:
        return self.step_band_s[0]

    @property
    def step_s_p90(self) -> FloatArray:
        return self.step_band_s[1]

    @property
    def tokens_per_s_per_chip_p10(self) -> FloatArray:
        return np.asarray(self.step_tokens / self.step_s_p90 / self.deployment.chips)

    @property
    def tokens_per_s_per_chip_p90(self) -> FloatArray:
        return np.asarray(self.step_tokens / self.step_s_p10 / self.deployment.chips)

    @property
    def usd_per_million_output_tokens_p10(self) -> FloatArray:
        d = self.deployment
        return rl.usd_per_million_tokens(self.step_s_p10, self.step_tokens, d.chips, d.usd_per_chip_hour)

    @property
    def usd_per_million_output_tokens_p90(self) -> FloatArray:
        d = self.deployment
        return rl.usd_per_million_tokens(self.step_s_p90, self.step_tokens, d.chips, d.usd_per_chip_hour)

    @property
    def end_to_end_band(self) -> ErrorBand | None:
        """How far published measurements fall from the kernel-grounded model's steps (the
        step-time ratios' p10 and p90 over ``rackmath validate``'s serving rows,
        :func:`rackmath.catalog.measurements.end_to_end_band`); None on the pure roofline, whose
        misses are another model's."""
        if self.deployment.efficiency.mode is not EfficiencyMode.KERNEL:
            return None
        from rackmath.catalog.measurements import end_to_end_band

        return end_to_end_band()

    @cached_property
    def end_to_end_step_band_s(self) -> tuple[FloatArray, FloatArray]:
        """The step's end-to-end p10 and p90 (s): its kernel band (:attr:`step_band_s`) widened
        by how far published measurements fall from the kernel-grounded model's steps
        (:attr:`end_to_end_band`, ratios ``r10 <= 1 <= r90``)::

            p10 = min(kernel p10, r10 x step),  p90 = max(kernel p90, r90 x step)

        The kernel band covers the kernel tables' error only; this one adds what a serving
        framework does that no kernel table times (host work, scheduling), measured on the
        project's published rows (docs/validation.md: the share inside, leave-one-source-out).
        Worked number: a 10 ms step with a kernel band of 9-12 ms and ratios 0.96-1.64 has
        9-16.4 ms. The pure roofline has none: the kernel band (the step itself) is returned."""
        lo, hi = self.step_band_s
        band = self.end_to_end_band
        if band is None:
            return lo, hi
        return np.minimum(lo, band.p10 * self.step_s), np.maximum(hi, band.p90 * self.step_s)

    @property
    def end_to_end_step_s_p10(self) -> FloatArray:
        return self.end_to_end_step_band_s[0]

    @property
    def end_to_end_step_s_p90(self) -> FloatArray:
        return self.end_to_end_step_band_s[1]

    def band_at(self, index: tuple[int, int]) -> dict[str, Any]:
        """The p10-p90 band of one point's step, throughput and price, as JSON keys; with the
        end-to-end band (:attr:`end_to_end_step_band_s`) under ``end_to_end`` where there is one."""
        kernel = self._edges_at(index, self.step_s_p10, self.step_s_p90)
        band = self.end_to_end_band
        if band is None:
            return kernel
        e2e = self._edges_at(index, self.end_to_end_step_s_p10, self.end_to_end_step_s_p90)
        how = {"step_ratio_p10": band.p10, "step_ratio_p90": band.p90, "rows": band.rows, "how": band.how}
        return {**kernel, "end_to_end": {**e2e, **how}}

    def _edges_at(self, index: tuple[int, int], p10_s: FloatArray, p90_s: FloatArray) -> dict[str, float]:
        """One point's band edges from its step's (a throughput's p10 from the step's p90, a
        price's p10 from the step's p10), as JSON keys."""
        d = self.deployment
        lo, hi = float(p10_s[index]), float(p90_s[index])
        tokens = float(np.broadcast_to(self.step_tokens, self.step_s.shape)[index])
        return {
            "step_s_p10": lo,
            "step_s_p90": hi,
            "tokens_per_s_p10": tokens / hi,
            "tokens_per_s_p90": tokens / lo,
            "tokens_per_s_per_chip_p10": tokens / hi / d.chips,
            "tokens_per_s_per_chip_p90": tokens / lo / d.chips,
            "usd_per_million_output_tokens_p10": float(
                rl.usd_per_million_tokens(lo, tokens, d.chips, d.usd_per_chip_hour)
            ),
            "usd_per_million_output_tokens_p90": float(
                rl.usd_per_million_tokens(hi, tokens, d.chips, d.usd_per_chip_hour)
            ),
        }
