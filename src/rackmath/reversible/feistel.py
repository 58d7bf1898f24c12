"""A Feistel round (the lecture's D37): ``(x, y) -> (x, y + f(x))``, inverse ``y = z - f(x)``.

The inner function ``f`` need not be invertible (it may hash, clamp, or throw away
information): the inverse only ever *evaluates* ``f`` on the half that passes through
unchanged. Works on anything supporting ``+`` and ``-`` (NumPy arrays, torch tensors,
Python floats); float64 inputs come back to within rounding of one add and one subtract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def feistel_forward(x: T, y: T, f: Callable[[T], T]) -> tuple[T, T]:
    """``(x, y) -> (x, y + f(x))``."""
    return x, y + f(x)  # type: ignore[operator]


def feistel_inverse(x: T, z: T, f: Callable[[T], T]) -> tuple[T, T]:
    """``(x, z) -> (x, z - f(x))``: undoes :func:`feistel_forward` for any ``f``."""
    return x, z - f(x)  # type: ignore[operator]


def feistel_network(x: T, y: T, rounds: Sequence[Callable[[T], T]]) -> tuple[T, T]:
    """Several rounds with the halves swapped between them (the RevNet form, D38):
    ``(x, y) -> (y + f(x), x)`` per round."""
    for f in rounds:
        x, y = feistel_forward(x, y, f)
        x, y = y, x
    return x, y


def feistel_network_inverse(a: T, b: T, rounds: Sequence[Callable[[T], T]]) -> tuple[T, T]:
    """Undo :func:`feistel_network` round by round, last round first."""
    for f in reversed(rounds):
        a, b = b, a
        a, b = feistel_inverse(a, b, f)
    return a, b
