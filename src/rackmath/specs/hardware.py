"""Chips and systems as typed, frozen specs (validated once, at the catalog boundary).

All fields are SI: bytes, bytes/s, FLOP/s, seconds, watts, USD. Link bandwidths are per
chip and per direction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, field_validator

from rackmath.errors import PrecisionUnavailableError
from rackmath.specs.precision import Precision

Confidence = Literal["exact", "secondhand"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DatedPrice(_Frozen):
    """A market price with the day it was read; prices age, so the date travels with it."""

    value_usd: PositiveFloat
    date: str
    source: str
    note: str = ""
    #: True when no market price was found and the value is derived (the note says how);
    #: faces print "(estimate)" beside it.
    estimate: bool = False

    @property
    def estimate_label(self) -> str:
        """ " (estimate)" for a derived price, "" for a read one: what faces append."""
        return " (estimate)" if self.estimate else ""


class ChipSpec(_Frozen):
    id: str
    name: str
    vendor: str
    status: Literal["shipping", "announced"] = "shipping"
    peak_flops_per_s: dict[Precision, PositiveFloat] = Field(
        description="dense peak FLOP/s (ops/s for int) per compute precision, 2 FLOPs per MAC"
    )
    hbm_capacity_bytes: PositiveFloat
    hbm_bandwidth_bytes_per_s: PositiveFloat
    scale_up_bandwidth_bytes_per_s_per_direction: PositiveFloat | None = None
    scale_out_bandwidth_bytes_per_s_per_direction: PositiveFloat | None = None
    tdp_w: PositiveFloat | None = None
    #: streaming multiprocessors (NVIDIA): what a kernel sharing the chip takes its share of
    #: (Transformer Engine's overlapped collectives reserve SMs from their GEMM); None if unstated
    streaming_multiprocessors: PositiveInt | None = None
    #: the last-level on-chip cache (NVIDIA's L2), bytes, with its source; None if unstated. A
    #: causal prefill whose operands outgrow it re-reads keys and values from DRAM
    #: (:func:`rackmath.core.efficiency.spill_bytes_of`), and a kernel table replayed warm read
    #: the calls that fit in it from there (:func:`rackmath.analyses.kernels.fit.table_bytes`)
    l2_cache_bytes: PositiveFloat | None = None
    price_usd_per_chip_hour: DatedPrice
    confidence: Confidence
    date: str
    source: list[str] = Field(min_length=1)
    notes: str = ""

    @field_validator("peak_flops_per_s")
    @classmethod
    def _has_a_peak(cls, value: dict[Precision, float]) -> dict[Precision, float]:
        if not value:
            raise ValueError("at least one precision needs a peak")
        return value

    def peak_flops(self, precision: Precision) -> float:
        """Dense peak at ``precision``'s compute class; refuses to invent a missing one."""
        key = precision.compute_class
        try:
            return self.peak_flops_per_s[key]
        except KeyError:
            raise PrecisionUnavailableError(
                self.id, key.value, [p.value for p in self.peak_flops_per_s]
            ) from None


class SystemSpec(_Frozen):
    """Chips joined by a scale-up fabric (one domain), domains joined by a scale-out network."""

    id: str
    name: str
    chip: ChipSpec
    status: Literal["shipping", "announced"] = "shipping"
    scale_up_domain_chips: PositiveInt
    scale_up_fabric: str
    scale_up_latency_s: PositiveFloat
    scale_out_fabric: str
    scale_out_latency_s: PositiveFloat
    default_chips: PositiveInt
    confidence: Confidence
    date: str
    source: list[str] = Field(min_length=1)
    notes: str = ""
