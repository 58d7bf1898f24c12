"""NumPy's elementwise helpers with a fast path for single values.

The core's formulas are written once over arrays; a single plan-aware point evaluates the
same formulas on Python floats. The two are the same IEEE double arithmetic, to the bit, but a
float's multiply costs ~25 ns against ~45 ns for two NumPy scalars and ~75 ns for a NumPy
scalar and a float, and a ufunc call such as ``np.maximum`` ~1-2 us on either (``np.where``
~3 us). These helpers give the ufunc's result (NaN propagating like NumPy's) without the call
when every argument is one value, and call NumPy otherwise; :func:`num` turns an input into an
array or a float. A float divided by zero raises where NumPy gives ``inf``: the formulas a point
runs divide by rates, fractions and counts that are positive by construction (a batch or
context of 0 is refused before), and those that may divide by zero (a price per token, a
concurrency) convert their inputs with ``np.asarray``. A core function called directly with one
value and a zero divisor (a link of 0 bytes/s, 0 experts, a margin of every SM) raises
``ZeroDivisionError`` where an array gives ``inf``; the specs refuse such values before any
analysis runs.
A large grid's elementwise formula can run in blocks of rows (:func:`by_rows`): the same
numbers, with temporaries that stay in the caches. The records a point builds (a load, a step,
a memory account) are built in one step each (:func:`frozen_record`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
_T = TypeVar("_T")
_F64 = np.float64  # bound once: ``num`` runs hundreds of times per plan point


def num(x: ArrayLike) -> FloatArray:
    """``x`` as float64: an array stays an array, a single value (a Python or NumPy number, a
    0-d array) becomes a Python float, so one copy of each formula serves a grid and a single
    point alike."""
    if type(x) is float:  # the common case first, in the fewest steps
        return x
    if type(x) is _F64 or type(x) is int:
        return float(x)  # type: ignore[return-value]
    a = np.asarray(x, float)
    return float(a) if a.ndim == 0 else a  # type: ignore[return-value]


def frozen_record(cls: type[_T], **fields: Any) -> _T:
    """An instance of the frozen dataclass ``cls`` holding ``fields``, every field named (defaults
    included): what ``cls(**fields)`` builds, without its ``__init__``'s ``object.__setattr__``
    for each field (~80 ns each; a point builds records of 10 and 13 fields). A class with a
    ``__post_init__`` is refused (it would be skipped), and so is a field left out."""
    if len(fields) != _field_count(cls):  # type: ignore[arg-type]
        raise TypeError(f"{cls.__name__}: every field is named, not only {sorted(fields)}")
    record = object.__new__(cls)
    record.__dict__.update(fields)
    return record


@lru_cache(maxsize=64)
def _field_count(cls: type) -> int:
    """The fields of the dataclass ``cls`` that :func:`frozen_record` may build."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: build it with its __init__")
    return len(dataclasses.fields(cls))


#: The single values the helpers compare without NumPy (a type in a set is a faster test than
#: ``isinstance``, which walks a NumPy scalar's bases); a caller may still pass NumPy scalars.
_FLOATS = frozenset((float, _F64))


def maximum(a: ArrayLike, b: ArrayLike) -> FloatArray:
    """``np.maximum(a, b)``."""
    if type(a) in _FLOATS and type(b) in _FLOATS:
        return a if (a >= b or a != a) else b  # type: ignore[return-value,operator]
    return np.maximum(a, b)


def minimum(a: ArrayLike, b: ArrayLike) -> FloatArray:
    """``np.minimum(a, b)``."""
    if type(a) in _FLOATS and type(b) in _FLOATS:
        return a if (a <= b or a != a) else b  # type: ignore[return-value,operator]
    return np.minimum(a, b)


def ceil(x: ArrayLike) -> FloatArray:
    """``np.ceil(x)``."""
    if (type(x) is float or type(x) is _F64) and -1e300 < x < 1e300:  # finite: -floor(-x) is exact
        return -((-x) // 1.0)  # type: ignore[return-value]
    return np.ceil(x)


def lowest(x: ArrayLike) -> Any:
    """``x.min()`` of an array, ``x`` itself of one value (a float has no ``min``)."""
    return x.min() if type(x) is np.ndarray else x


def highest(x: ArrayLike) -> Any:
    """``x.max()`` of an array, ``x`` itself of one value."""
    return x.max() if type(x) is np.ndarray else x


def compact(x: _T) -> _T:
    """``x`` without the axes it is only broadcast along (stride 0): the smallest array that
    ``np.broadcast_to`` turns back into ``x``. An elementwise formula of the compact values
    gives the same numbers as of ``x`` itself at a fraction of the arithmetic (a plan's
    ``pp`` broadcast over a 1,000 x 1,000 grid is one value). Anything else is returned as is."""
    if not isinstance(x, np.ndarray) or 0 not in x.strides:
        return x
    return x[tuple(slice(0, 1) if s == 0 else slice(None) for s in x.strides)]  # type: ignore[return-value]


def constant(x: ArrayLike) -> float | None:
    """The one value every element of ``x`` holds where ``x`` is a single value or one value
    broadcast (:func:`compact`), else None: what lets a formula skip an exact identity
    (``y * 1.0`` and ``y - 0.0`` are ``y``, to the bit)."""
    if isinstance(x, float | int):
        return float(x)
    c = compact(x)
    return float(c.item()) if type(c) is np.ndarray and c.size == 1 else None


#: Elements of one block of a large grid evaluated block by block (:func:`by_rows`): 32,768
#: float64 (256 KB) per temporary, so the twenty-odd temporaries of an operator's timing stay
#: in the caches instead of streaming a grid-sized array through memory for each operation
#: (and below the size at which the C allocator hands out fresh pages for each one).
BLOCK_ELEMENTS = 32768


def grid_shape(args: tuple[object, ...]) -> tuple[int, ...] | None:
    """The broadcast shape of the arrays among ``args`` where it is large enough for
    :func:`by_rows` to split (two blocks or more along its first axis), else None (a point, a
    short axis: NumPy scalars pass at the cost of a type check each)."""
    shapes = [a.shape for a in args if type(a) is np.ndarray and a.size > 1]
    if not shapes:
        return None
    shape = np.broadcast_shapes(*shapes)
    if len(shape) < 2 or shape[0] < 2 * _block_rows(shape):
        return None
    return shape


def _block_rows(shape: tuple[int, ...]) -> int:
    width = 1
    for n in shape[1:]:
        width *= n
    return max(2, BLOCK_ELEMENTS // max(width, 1))


def by_rows(
    fn: Callable[..., tuple[Any, ...]], args: tuple[Any, ...], shape: tuple[int, ...]
) -> tuple[Any, ...]:
    """``fn(*args)`` evaluated over blocks of rows of ``shape``'s first axis: the same numbers
    (``fn`` is elementwise, so each element goes through the same operations), each output an
    array like ``fn``'s, without grid-sized temporaries. An argument spanning the first axis
    is sliced, any other (one value, an axis of length 1) passed whole; an output that does not
    span the first axis (it depends only on what was passed whole) is the first block's, and
    one that every block gives as one value broadcast (the same bits) stays that value,
    broadcast. ``shape`` comes from :func:`grid_shape`."""
    n, nd = shape[0], len(shape)
    rows = _block_rows(shape)
    cut = [type(a) is np.ndarray and a.ndim == nd and a.shape[0] == n for a in args]
    outs: list[Any] = []
    kinds: list[str] = []  # "rows": assembled block by block; "one": one value so far; "whole"
    start = 0
    while start < n:
        stop = n if n - start < 2 * rows else start + rows  # every block two rows or more
        part = fn(*(a[start:stop] if c else a for a, c in zip(args, cut, strict=True)))
        if not outs:
            for o in part:
                if not (type(o) is np.ndarray and o.ndim == nd and o.shape[0] == stop):
                    kinds.append("whole")
                elif o.size and not any(o.strides):
                    kinds.append("one")
                else:
                    kinds.append("rows")
                outs.append(np.empty((n, *o.shape[1:]), o.dtype) if kinds[-1] == "rows" else o)
        for i, o in enumerate(part):
            if kinds[i] == "one":
                first = outs[i]
                if (
                    not any(o.strides)
                    and o.dtype == first.dtype
                    and o.flat[0].tobytes() == first.flat[0].tobytes()
                ):
                    continue
                whole = np.empty((n, *o.shape[1:]), o.dtype)  # another value: the rows so far, then on
                whole[:start] = first[:1]
                outs[i], kinds[i] = whole, "rows"
            if kinds[i] == "rows":
                outs[i][start:stop] = o
        start = stop
    return tuple(
        np.broadcast_to(o[:1], (n, *o.shape[1:])) if kind == "one" else o
        for o, kind in zip(outs, kinds, strict=True)
    )
