"""Result objects as tables: ``to_frame()`` (pandas), ``to_xarray()``, ``to_dict()`` and
Jupyter display.

One implementation for every result. A result class mixes in :class:`Tabular` and
declares its columns once, as a :class:`Layout` of :class:`Col` entries: the attribute
that holds the values (a dotted path; ``[]`` walks a sequence, one row per element),
the column name (unit-suffixed, following the project's naming rule) and the unit. Nothing
here computes a number: every value is read from the result's own properties.

* A value that is an array gives one column entry per element; all arrays of a result
  broadcast to one shape (``batch x context`` for the grids) and are flattened in C
  order, so row ``i * n_context + j`` is ``(batch[i], context[j])``.
* A scalar (the model id, the chip count, a precision) is repeated on every row, so
  frames of several results concatenate into one tidy table.
* ``to_xarray()`` names the array axes by :attr:`Layout.dims` (``batch``, ``context``),
  takes their coordinates from :attr:`Layout.coords`, puts each unit in the variable's
  ``attrs["units"]`` and the identifying strings in the dataset's ``attrs``.
* ``to_dict()`` (the JSON): the declared columns by name (:func:`layout_dict`) unless the
  result reports more; a flat record that is no table mixes in :class:`Record` instead (its
  dataclass fields by name). Either way a NaN or infinity is ``None`` (no value).

pandas and xarray live in the optional ``notebook`` extra and are imported only when
asked for (``pip install 'rackmath[notebook]'``).
"""

from __future__ import annotations

import dataclasses
import enum
import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rackmath.errors import RackmathError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd
    import xarray as xr

#: Rows shown by the Jupyter display before it elides the middle of a table.
HTML_MAX_ROWS = 12


class MissingExtraError(RackmathError):
    """An optional dependency that a notebook feature needs is not installed."""

    def __init__(self, package: str, extra: str = "notebook") -> None:
        super().__init__(f"{package} is not installed; install it with: pip install 'rackmath[{extra}]'")


def require(package: str, extra: str = "notebook") -> Any:
    """Import an optional package or raise a one-line :class:`MissingExtraError`."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError:
        raise MissingExtraError(package, extra) from None


@dataclass(frozen=True)
class Col:
    """One column: where its values live on the result, its name and its unit.

    ``unit`` is ``"1"`` for dimensionless fractions and ``""`` for labels and flags.
    """

    attr: str
    name: str
    unit: str = ""


@dataclass(frozen=True)
class Layout:
    """How a result becomes a table.

    ``dims`` name the axes of the result's arrays (``("batch", "context")`` for a grid,
    ``("candidate",)`` for a flat list); ``coords`` names, for each dim, the column whose
    values index it (``None``: the position 0, 1, 2, ...).
    """

    columns: tuple[Col, ...]
    dims: tuple[str, ...] = ()
    coords: tuple[str | None, ...] = ()


def _get(obj: Any, path: str) -> Any:
    """Follow a dotted path; ``a[].b`` maps ``.b`` over the sequence ``a``."""
    head, sep, rest = path.partition("[].")
    for part in head.split("."):
        obj = getattr(obj, part)
    if sep:
        return [_get(item, rest) for item in obj]
    return obj


def _plain(value: Any) -> Any:
    """A scalar label (enum, plan, ...) as a string; numbers, flags and arrays as NumPy."""
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str | int | float) else str(value)
    if isinstance(value, str | bool | int | float | np.generic | np.ndarray):
        return value
    if isinstance(value, list | tuple):
        return np.asarray([_plain(v) for v in value])
    return str(value)


def columns(result: Any) -> tuple[dict[str, Any], dict[str, np.ndarray], tuple[int, ...]]:
    """``(scalars, arrays, shape)``: every declared column read from ``result``, arrays
    broadcast to their common shape."""
    layout: Layout = type(result).frame_layout
    scalars: dict[str, Any] = {}
    raw: dict[str, np.ndarray] = {}
    for col in layout.columns:
        value = _plain(_get(result, col.attr))
        if isinstance(value, np.ndarray) and value.ndim > 0:
            raw[col.name] = value
        else:
            scalars[col.name] = value.item() if isinstance(value, np.generic | np.ndarray) else value
    shape = np.broadcast_shapes(*(a.shape for a in raw.values())) if raw else ()
    arrays = {name: np.broadcast_to(a, shape) for name, a in raw.items()}
    return scalars, arrays, shape


def units(result: Any) -> dict[str, str]:
    """Column name -> unit, as declared."""
    return {c.name: c.unit for c in type(result).frame_layout.columns}


def to_frame(result: Any) -> pd.DataFrame:
    """A tidy DataFrame: one row per array element, one unit-suffixed column per quantity."""
    pd = require("pandas")
    scalars, arrays, shape = columns(result)
    n = int(np.prod(shape)) if shape else 1
    data: dict[str, Any] = {}
    for col in type(result).frame_layout.columns:
        if col.name in arrays:
            data[col.name] = arrays[col.name].reshape(-1) if n else arrays[col.name].reshape(0)
        else:
            data[col.name] = [scalars[col.name]] * n
    return pd.DataFrame(data)


def to_xarray(result: Any) -> xr.Dataset:
    """An xarray Dataset over the result's named dimensions, units in each variable's attrs."""
    xr = require("xarray")
    layout: Layout = type(result).frame_layout
    scalars, arrays, shape = columns(result)
    dims = layout.dims
    if len(dims) != len(shape):
        raise ValueError(f"{type(result).__name__} declares dims {dims} for arrays of shape {shape}")
    unit = units(result)
    coords: dict[str, Any] = {}
    index_cols = set()
    for axis, (dim, col) in enumerate(zip(dims, layout.coords or (None,) * len(dims), strict=True)):
        if col is None:
            coords[dim] = (dim, np.arange(shape[axis]), {"units": ""})
            continue
        take = tuple(slice(None) if k == axis else 0 for k in range(len(shape)))
        coords[dim] = (dim, np.asarray(arrays[col][take]), {"units": unit[col], "long_name": col})
        index_cols.add(col)
    data_vars = {
        name: (dims, np.asarray(a), {"units": unit[name]})
        for name, a in arrays.items()
        if name not in index_cols
    }
    attrs: dict[str, Any] = {"result": type(result).__name__}
    for name, value in scalars.items():
        if isinstance(value, str | bool):
            attrs[name] = value
        else:
            data_vars[name] = ((), np.asarray(value), {"units": unit[name]})
    return xr.Dataset(data_vars=data_vars, coords=coords, attrs=attrs)


def to_html(result: Any, max_rows: int = HTML_MAX_ROWS) -> str | None:
    """A compact HTML summary: the labels, the shape, then the table (middle rows elided).
    ``None`` (Jupyter then shows the plain repr) when pandas is missing."""
    try:
        frame = to_frame(result)
    except MissingExtraError:
        return None
    scalars, _, shape = columns(result)
    labels = ", ".join(f"{k}={v}" for k, v in scalars.items())
    dims = type(result).frame_layout.dims
    size = " × ".join(f"{n} {d}" for n, d in zip(shape, dims, strict=False)) if dims else "1 row"
    head = f"<p><b>{html.escape(type(result).__name__)}</b> ({html.escape(size)})"
    if labels:
        head += f"<br><small>{html.escape(labels)}</small>"
    varying = [c for c in frame.columns if c not in scalars] or list(frame.columns)
    table = frame[varying].to_html(max_rows=max_rows, float_format=lambda x: f"{x:.4g}", index=False)
    return head + "</p>" + table


def no_value(value: Any) -> Any:
    """``value`` as the JSON schema holds it: a NaN or infinity (no value) as ``None``, a NumPy
    scalar as the Python number it is, an enum as its value, anything else as it is."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def layout_dict(result: Any) -> dict[str, Any]:
    """A result's ``to_dict()`` read from its layout: each declared column by its name, a
    scalar as a value, an array as (nested) lists over :attr:`Layout.dims`."""
    scalars, arrays, _ = columns(result)
    out: dict[str, Any] = {}
    for col in type(result).frame_layout.columns:
        if col.name in arrays:
            a = arrays[col.name]
            if a.dtype.kind == "f":  # NaN and infinities: no value
                finite = np.isfinite(a)
                a = a.astype(object)
                a[~finite] = None
            out[col.name] = a.tolist()
        else:
            out[col.name] = no_value(scalars[col.name])
    return out


class Record:
    """Mixin for a flat record (a dataclass of numbers and labels): ``to_dict()`` is its fields
    by name, each as :func:`no_value` gives it. The fields are the record's one schema: a
    record that reports more (a derived quantity) lists it in ``derived_fields``."""

    derived_fields: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        names = [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]
        return {n: no_value(getattr(self, n)) for n in (*names, *self.derived_fields)}


class Tabular:
    """Mixin: ``to_frame()``, ``to_xarray()``, ``_repr_html_`` and (unless the result says
    more) ``to_dict()`` from a class-level layout."""

    frame_layout: ClassVar[Layout]

    def to_dict(self) -> dict[str, Any]:
        """The declared columns by name (:func:`layout_dict`)."""
        return layout_dict(self)

    def to_frame(self) -> pd.DataFrame:
        """A tidy pandas DataFrame (needs the ``notebook`` extra)."""
        return to_frame(self)

    def to_xarray(self) -> xr.Dataset:
        """An xarray Dataset with named dimensions and units (needs the ``notebook`` extra)."""
        return to_xarray(self)

    def _repr_html_(self) -> str | None:
        return to_html(self)


# ------------------------------------------------------------------ shared column sets
#: The two axes of every serving grid and the columns that index them.
GRID_DIMS = ("batch", "context")
GRID_COORDS = ("batch", "context_tokens")


def deployment_labels(precisions: str = "deployment.precisions") -> tuple[Col, ...]:
    """What a serving grid is of: model, system, chip count and the three precisions."""
    return (
        Col("deployment.model.id", "model"),
        Col("deployment.system.id", "system"),
        Col("deployment.chips", "chips", "chips"),
        Col(f"{precisions}.weights", "weights_precision"),
        Col(f"{precisions}.kv", "kv_precision"),
        Col(f"{precisions}.compute", "compute_precision"),
    )


#: Every decode grid's axes, step time, throughput and cost (see ``DecodeThroughput``).
DECODE_COLUMNS = (
    Col("batch", "batch", "sequences"),
    Col("context", "context_tokens", "tokens"),
    Col("step_s", "step_s", "s"),
    Col("tokens_per_s", "tokens_per_s", "tokens/s"),
    Col("tokens_per_s_per_user", "tokens_per_s_per_user", "tokens/s"),
    Col("tokens_per_s_per_chip", "tokens_per_s_per_chip", "tokens/s"),
    Col("usd_per_million_output_tokens", "usd_per_million_output_tokens", "USD per 1e6 tokens"),
    Col("fits", "fits"),
)


def grid_layout(*extra: Col, labels: tuple[Col, ...] = ()) -> Layout:
    """A decode grid's layout: labels, the shared decode columns, then ``extra``."""
    return Layout(columns=(*labels, *DECODE_COLUMNS, *extra), dims=GRID_DIMS, coords=GRID_COORDS)
