"""What a chip offers the operators, and which curve each one runs on.

A :class:`ChipRates` holds one chip's (or ``chips`` pooled) peak FLOP/s by precision, its HBM
bandwidth, the fitted curves of :class:`~rackmath.specs.efficiency.EfficiencyTable` and the
deployment's compute and KV precisions. :meth:`ChipRates.curve` is the one place an operator's
curve is chosen (class x kernel format x kernel family, with a visible fallback) and its peak
looked up: the peak its curve was fitted against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from rackmath.core import efficiency as eff
from rackmath.specs.efficiency import PURE_TABLE, EfficiencyTable, Kernel, OpClass, OpEfficiency
from rackmath.specs.precision import FORMATS, Precision, attention_format, gemm_formats


@dataclass(frozen=True, slots=True)
class CurveChoice:
    """The curve an operator runs on (:meth:`ChipRates.curve`): its efficiency, whether it is the
    pure roofline, the peak it was fitted against and the kernel it names."""

    efficiency: OpEfficiency
    pure: bool
    peak_flops_per_s: float
    kernel: Kernel


@dataclass(frozen=True)
class ChipRates:
    """What one chip (or ``chips`` pooled) offers the operators: peak FLOP/s by precision,
    HBM bandwidth, the fitted curves, and the deployment's compute and KV precision (they
    pick each operator's kernel format)."""

    peak_flops_per_s: Mapping[str, float]
    bandwidth_bytes_per_s: float
    efficiency: EfficiencyTable = PURE_TABLE
    compute: Precision = Precision.BF16
    kv: Precision = Precision.BF16
    #: chips pooled: a pool holds that many L2s, so a curve's spill threshold (``spill_bytes``,
    #: one chip's L2) counts them all
    chips: float = 1.0

    def __post_init__(self) -> None:
        # lookups made once per chip and key (a pass asks for a dozen curves)
        object.__setattr__(self, "_curves", {})
        object.__setattr__(self, "_gemms", {})

    @classmethod
    def uniform(
        cls,
        flops_per_s: float,
        bandwidth_bytes_per_s: float,
        efficiency: EfficiencyTable = PURE_TABLE,
    ) -> ChipRates:
        """Every precision at one peak (a chip for tests and hand derivations)."""
        return cls(
            dict.fromkeys((p.value for p in Precision), flops_per_s), bandwidth_bytes_per_s, efficiency
        )

    def peak(self, precision: str) -> float:
        """Peak FLOP/s at ``precision`` (its element class, else bf16, when the chip lists none)."""
        peaks = self.peak_flops_per_s
        if precision in peaks:
            return float(peaks[precision])
        cls = Precision(precision).compute_class.value
        return float(peaks.get(cls) or peaks.get("bf16") or max(peaks.values()))

    def curve(
        self, op_class: OpClass, formats: tuple[str, ...], kind: str = "", head_dim: float = 0.0
    ) -> CurveChoice:
        """The curve an operator of ``op_class`` runs on (looked up once per chip and key;
        ``head_dim``: the head size, for the classes fitted per head size)."""
        cache: dict[tuple[OpClass, tuple[str, ...], str, float], CurveChoice] = self._curves  # type: ignore[attr-defined]
        hit = cache.get((op_class, formats, kind, head_dim))
        if hit is None:
            compute = FORMATS[formats[0]].compute.value if formats and formats[0] in FORMATS else ""
            e, precision, kernel = self.efficiency.curve(op_class, formats, kind, compute, head_dim)
            if self.chips != 1.0:
                e = pooled_caches(e, self.chips)
            hit = CurveChoice(e, eff.is_pure(e), self.peak(precision), kernel)
            cache[(op_class, formats, kind, head_dim)] = hit
        return hit

    def gemm_formats(self, weights: Precision) -> tuple[str, ...]:
        """The kernel formats a GEMM of weights stored as ``weights`` runs in (at least one:
        bf16 where no kernel runs them, the curve lookup then saying so)."""
        return self.gemm(weights)[0]

    def gemm(self, weights: Precision) -> tuple[tuple[str, ...], float]:
        """:meth:`gemm_formats` and the bytes per input activation element of the first (what
        the kernel reads, scales included), looked up once per chip and weight format."""
        cache: dict[Precision, tuple[tuple[str, ...], float]] = self._gemms  # type: ignore[attr-defined]
        hit = cache.get(weights)
        if hit is None:
            formats = gemm_formats(weights, self.compute) or ("bfloat16",)
            first = FORMATS.get(formats[0])
            hit = cache[weights] = (formats, first.activation_bytes if first is not None else 2.0)
        return hit

    @property
    def attention_formats(self) -> tuple[str, ...]:
        return attention_format(self.kv) or ("bfloat16",)


def pooled_caches(e: OpEfficiency, chips: float) -> OpEfficiency:
    """Curve ``e`` on ``chips`` chips pooled: the L2 a call spills beyond (``spill_bytes``) is
    every chip's (the pool's bytes are its chips' together), on ``e`` and on its alternative."""
    alternative = None if e.alternative is None else pooled_caches(e.alternative, chips)
    if not e.spill_bytes and alternative is e.alternative:
        return e
    return replace(e, spill_bytes=e.spill_bytes * chips, alternative=alternative)
