"""Numeric formats: storage bytes per element and the compute peak each one runs at."""

from __future__ import annotations

from enum import StrEnum

from rackmath.errors import UnknownIdError


class Precision(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    FP6 = "fp6"
    FP4 = "fp4"
    INT4 = "int4"
    #: OCP microscaling FP4: 4-bit elements plus one 8-bit scale per 32 (4.25 bits).
    MXFP4 = "mxfp4"
    #: NVIDIA FP4: 4-bit elements plus one FP8 scale per 16 (4.5 bits).
    NVFP4 = "nvfp4"

    @classmethod
    def parse(cls, text: str | Precision, field: str = "precision") -> Precision:
        if isinstance(text, Precision):
            return text
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise UnknownIdError(field, text, [p.value for p in cls]) from None

    @property
    def bytes_per_element(self) -> float:
        return _BITS[self] / 8

    @property
    def compute_class(self) -> Precision:
        """The peak-FLOP/s row a matmul in this format runs at (block formats: their element)."""
        return _COMPUTE_CLASS.get(self, self)


# TF32 is a compute mode; its operands are stored as fp32.
_BITS: dict[Precision, float] = {
    Precision.FP32: 32,
    Precision.TF32: 32,
    Precision.BF16: 16,
    Precision.FP16: 16,
    Precision.FP8: 8,
    Precision.INT8: 8,
    Precision.FP6: 6,
    Precision.FP4: 4,
    Precision.INT4: 4,
    Precision.MXFP4: 4 + 8 / 32,
    Precision.NVFP4: 4 + 8 / 16,
}

_COMPUTE_CLASS: dict[Precision, Precision] = {
    Precision.MXFP4: Precision.FP4,
    Precision.NVFP4: Precision.FP4,
}
