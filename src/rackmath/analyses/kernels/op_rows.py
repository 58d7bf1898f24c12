"""Measured kernel calls as operator rows: each call's :class:`~rackmath.core.work.Work`,
its format and kernel family, its latency and a shape hash (what
:mod:`rackmath.analyses.kernels.rows` and :mod:`rackmath.analyses.kernels.attention_rows` build
from the tables, and :mod:`rackmath.analyses.kernels.fit` fits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rackmath.core import work as wk
from rackmath.specs.efficiency import OpClass


@dataclass
class OpRows:
    """Measured kernel calls of one operator class: each call's work (every field an array over
    the rows, :class:`~rackmath.core.work.Work`), its format (``dtype``, a table dtype name) and
    kernel family (``kind``: ``gqa``/``mla`` attention, ``gated``/``nongated`` experts), its
    latency and a shape hash for the deterministic hold-out split. ``dims`` holds the table's
    shape dimensions whose whole values a validation holds out (:data:`HELD_OUT_DIMS`: a GEMM's
    ``m``; a MoE call's ``num_tokens`` and ``ep``; attention's ``batch`` and ``context``, a
    prompt's ``isl``), as the table states them."""

    op_class: OpClass
    dtype: np.ndarray
    kind: np.ndarray
    work: wk.Work
    latency_s: np.ndarray
    key: np.ndarray  # shape hash (uint64)
    dims: dict[str, np.ndarray] = field(default_factory=dict)

    def take(self, mask: np.ndarray) -> OpRows:
        parts = [None if x is None else np.asarray(x)[mask] for x in self.work]
        return OpRows(
            self.op_class,
            self.dtype[mask],
            self.kind[mask],
            wk.Work(*parts),  # type: ignore[arg-type]  # optional fields stay None
            self.latency_s[mask],
            self.key[mask],
            {k: v[mask] for k, v in self.dims.items()},
        )

    @staticmethod
    def concat(a: OpRows, b: OpRows) -> OpRows:
        def cat(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
            return None if x is None or y is None else np.concatenate([x, y])

        return OpRows(
            a.op_class,
            np.concatenate([a.dtype, b.dtype]),
            np.concatenate([a.kind, b.kind]),
            wk.Work(*(cat(x, y) for x, y in zip(a.work, b.work, strict=True))),  # type: ignore[arg-type]
            np.concatenate([a.latency_s, b.latency_s]),
            np.concatenate([a.key, b.key]),
            {k: np.concatenate([a.dims[k], b.dims[k]]) for k in a.dims if k in b.dims},
        )

    def __len__(self) -> int:
        return len(self.latency_s)

    # the work's fields, for readers of a row
    @property
    def rows(self) -> np.ndarray:
        return self.work.rows

    @property
    def cols(self) -> np.ndarray | None:
        return self.work.cols

    @property
    def depth(self) -> np.ndarray | None:
        return self.work.depth

    @property
    def flops(self) -> np.ndarray:
        return self.work.flops

    @property
    def bytes(self) -> np.ndarray:
        return self.work.bytes

    @property
    def routed(self) -> np.ndarray | None:
        return self.work.routed

    @property
    def tokens(self) -> np.ndarray | None:
        return self.work.tokens

    @property
    def ep(self) -> np.ndarray | None:
        return self.work.ep


def _rows_of(n: int, w: wk.Work) -> wk.Work:
    """``w`` with every field an array of ``n`` rows (scalars broadcast), so rows can be taken."""
    parts = (None if x is None else np.broadcast_to(np.asarray(x, float), (n,)).copy() for x in w)
    return wk.Work(*parts)  # type: ignore[arg-type]  # the optional fields stay None


def op_rows_of(
    cls: OpClass,
    dtype: np.ndarray,
    kind: str | np.ndarray,
    w: wk.Work,
    df: Any,
    key: np.ndarray,
    dims: dict[str, np.ndarray] | None = None,
) -> OpRows:
    n = len(dtype)
    kinds = np.broadcast_to(np.asarray(kind, dtype=object), (n,)).astype(str)
    shape = {k: np.broadcast_to(np.asarray(v, float), (n,)).copy() for k, v in (dims or {}).items()}
    return OpRows(cls, dtype, kinds, _rows_of(n, w), floats(df, "latency") * 1e-3, key, shape)


#: The shape dimensions of each class whose whole values a validation holds out (one token
#: count, one EP degree, one context, one batch, one prompt length), as :attr:`OpRows.dims`
#: names them.
HELD_OUT_DIMS: dict[OpClass, tuple[str, ...]] = {
    OpClass.GEMM: ("m",),
    OpClass.MOE: ("num_tokens", "ep"),
    OpClass.ATTENTION_DECODE: ("context", "batch"),
    OpClass.ATTENTION_PREFILL: ("isl",),
}


def floats(df: Any, col: str) -> np.ndarray:
    return df[col].to_numpy(float)


def shape_hash(df: Any, cols: list[str]) -> np.ndarray:
    import pandas as pd

    return pd.util.hash_pandas_object(df[cols].astype(str), index=False).to_numpy(np.uint64)
