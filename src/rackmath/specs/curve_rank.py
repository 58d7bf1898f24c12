"""How a curve an operator asks for is replaced when the chip lacks it: by the nearest format
(the same compute precision first, then bf16) and the nearest head size (by ratio), so that
:meth:`rackmath.specs.efficiency.EfficiencyTable.curve` says which it took and why."""

from __future__ import annotations

import math
from typing import Protocol, TypeVar

from rackmath.specs.precision import FORMATS


class _Key(Protocol):
    """What ranking reads of a curve key (:class:`rackmath.specs.efficiency.CurveKey`)."""

    @property
    def fmt(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def head_dim(self) -> int: ...


K = TypeVar("K", bound=_Key)


def format_compute(fmt: str) -> str:
    """The precision a kernel format computes at (bf16 for a format the registry lacks)."""
    f = FORMATS.get(fmt)
    return f.compute.value if f is not None else "bf16"


def nearest_key(keys: list[K], fmt: str, head_dim: float = 0.0) -> K | None:
    """The key whose format computes at ``fmt``'s precision (bf16 next, then any), of the
    nearest head size among a format's (:func:`nearest_head`), deterministic."""
    if not keys:
        return None
    compute = format_compute(fmt)
    ranked = sorted(
        keys,
        key=lambda k: (
            format_compute(k.fmt) != compute,
            k.fmt != "bfloat16",
            k.fmt,
            k.kind,
            _head_distance(k.head_dim, head_dim),
        ),
    )
    return ranked[0]


def _head_distance(size: int, head_dim: float) -> tuple[float, int]:
    """How far head size ``size`` is from ``head_dim``: the ratio's log (the kernels tile the
    head in powers of two), a tie to the larger size; a curve of every head size (0) first."""
    if size == 0:
        return (-1.0, 0)
    if head_dim <= 0:
        return (0.0, -size)
    return (abs(math.log2(size / head_dim)), -size)


def head_curve(sizes: tuple[int, ...], head_dim: float) -> int:
    """The head size whose curve serves an operator of ``head_dim`` among a family's curves
    fitted per head size (``sizes``): its own when timed, else the nearest (:func:`nearest_head`),
    and 0 (the one curve of every size) when the family has none. The one rule the step's
    lookup and the fit's scoring share."""
    if round(head_dim) in sizes:
        return round(head_dim)
    return nearest_head(sizes, head_dim) if sizes else 0


def nearest_head(sizes: tuple[int, ...], head_dim: float) -> int:
    """The head size among ``sizes`` nearest ``head_dim`` (:func:`_head_distance`). Worked
    numbers (tests): 96 among 64, 128, 192, 256 is 128 (1.33x above beats 1.5x below); 160 is
    192 (1.2x below beats 1.25x above); 80 is 64."""
    return min(sizes, key=lambda size: _head_distance(size, head_dim))
