"""Measured kernel calls as operator rows: each call's :class:`~rackmath.core.work.Work`,
its format and kernel family, its latency and a shape hash (what
:mod:`rackmath.analyses.kernels.rows` and :mod:`rackmath.analyses.kernels.attention_rows` build
from the tables, and :mod:`rackmath.analyses.kernels.fit` fits)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from rackmath.analyses.kernels.params import MAX_WARM_SPEEDUP
from rackmath.core import work as wk
from rackmath.specs.efficiency import ALIGNED_COLUMNS, OpClass


class Companion(NamedTuple):
    """An operator a measured row timed together with its own (a module table times a whole
    attention module: DSA's rows time the indexer and the sparse core with the projections
    beside them). ``formats`` holds, per row, the kernel formats the step would run it in
    (a tuple, preferred first; the empty tuple on rows that carry no such operator) and
    ``work`` its work per row; the fit times it on the chip's own curve of ``op_class``
    (:func:`rackmath.analyses.kernels.fit.companion_s`)."""

    name: str
    op_class: OpClass
    formats: np.ndarray  # object array of tuples of format names
    work: wk.Work


def take_work(w: wk.Work, mask: np.ndarray) -> wk.Work:
    """The rows ``mask`` selects of a work whose fields are arrays over rows (None stays None)."""
    return wk.Work(*(None if x is None else np.asarray(x)[mask] for x in w))  # type: ignore[arg-type]


def _zero_work(like: wk.Work, n: int) -> wk.Work:
    """``n`` rows of no work, with the fields ``like`` has (the rows that lack a companion)."""
    return wk.Work(*(None if x is None else np.zeros(n) for x in like))  # type: ignore[arg-type]


#: Classes whose warm-replayed rows may run faster than DRAM where their calls fit in the L2
#: (:meth:`OpRows.possible`): those whose fit describes such rows.
#: On the L40S (memory-bound calls of its tables, kept and rejected alike, by bytes over
#: ``calls x L2``) the grouped expert GEMM reads 1.43-1.88x DRAM (median) at 0.5-1 of the L2 and
#: 0.68-0.76x from 1.05 times it; the MLA prefill's calls of 22-86 MB 1.1-1.6 TB/s, of 170 MB and more
#: 0.45-0.54 TB/s. Not GEMM: its calls within the L2 read 0.76-1.03x DRAM (median; the smallest
#: are held to their launch floors), and kept, its rows faster than DRAM moved the L40S's held-out
#: GEMM p90 from 26% to 34% and stayed 23% / 71% off themselves: one ``warm_speedup`` does not
#: describe them, so they stay rejected (docs/calibration.md, "Faster than DRAM only from the L2").
FASTER_FROM_L2_CLASSES = frozenset({OpClass.MOE, OpClass.ATTENTION_PREFILL})


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
    #: operators the table timed together with this one (a module table's projections), each
    #: timed on its own fitted curve and added to this operator's time (:class:`Companion`)
    companions: tuple[Companion, ...] = ()
    #: their time per row on a given fit's curves (:func:`rackmath.analyses.kernels.fit.
    #: with_companions` sets it); None: the rows time this operator alone
    fixed_s: np.ndarray | None = None
    #: per row, the L2 (bytes) a call of at most that many bytes stayed resident in while its
    #: table replayed it back to back (:func:`rackmath.analyses.kernels.fit.table_bytes`); None:
    #: timed cold
    warm_bytes: np.ndarray | None = None

    def take(self, mask: np.ndarray) -> OpRows:
        return OpRows(
            self.op_class,
            self.dtype[mask],
            self.kind[mask],
            take_work(self.work, mask),
            self.latency_s[mask],
            self.key[mask],
            {k: v[mask] for k, v in self.dims.items()},
            tuple(c._replace(formats=c.formats[mask], work=take_work(c.work, mask)) for c in self.companions),
            None if self.fixed_s is None else self.fixed_s[mask],
            None if self.warm_bytes is None else self.warm_bytes[mask],
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
            _concat_companions(a, b),
            None if a.fixed_s is None and b.fixed_s is None else np.concatenate([a.fixed, b.fixed]),
            None if a.warm_bytes is None and b.warm_bytes is None else np.concatenate([a.warm, b.warm]),
        )

    @property
    def fixed(self) -> np.ndarray:
        """:attr:`fixed_s`, zeros where unset."""
        return np.zeros(len(self)) if self.fixed_s is None else self.fixed_s

    @property
    def warm(self) -> np.ndarray:
        """:attr:`warm_bytes`, zeros (cold) where unset."""
        return np.zeros(len(self)) if self.warm_bytes is None else self.warm_bytes

    @property
    def within_warm_l2(self) -> np.ndarray:
        """Which calls a warm-replayed table found in the L2: its bytes at most ``calls x
        warm_bytes`` (all false for a table timed cold)."""
        return (self.warm > 0.0) & (self.work.bytes <= self.work.calls * self.warm)

    def possible(self, hbm_bytes_per_s: float) -> np.ndarray:
        """Which calls ran as fast as physics allows: ``latency >= bytes / rate``, the rate the
        chip's DRAM bandwidth, except that a call can outrun DRAM only from the L2: in a class of
        :data:`FASTER_FROM_L2_CLASSES`, a call :attr:`within_warm_l2` (which
        :func:`rackmath.analyses.kernels.fit.table_bytes` reads ``warm_speedup`` times faster)
        may read its bytes up to :data:`~rackmath.analyses.kernels.params.MAX_WARM_SPEEDUP`
        (100) times faster than DRAM, the most the fit can read them. The rest keep the DRAM
        bound: calls beyond the L2 (a cyclic replay evicts each line first), tables timed cold,
        GEMM. Worked number (L40S, 864 GB/s, an L2 of 96 MiB, MoE): 60 MB in 30 us (2.3x DRAM)
        is possible replayed warm, not cold nor as a GEMM; in 0.5 us (139x) never; 200 MB in
        150 us (1.5x, beyond the L2) never."""
        moved = self.work.bytes
        if self.op_class not in FASTER_FROM_L2_CLASSES:
            return np.asarray(self.latency_s >= moved / hbm_bytes_per_s)
        rate = np.where(self.within_warm_l2, MAX_WARM_SPEEDUP * hbm_bytes_per_s, hbm_bytes_per_s)
        return np.asarray(self.latency_s >= moved / rate)

    def with_fixed(self, fixed_s: np.ndarray | None) -> OpRows:
        return replace(self, fixed_s=fixed_s)

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
    def ragged_cols(self) -> bool:
        """Whether any call's columns are not a whole number of :data:`ALIGNED_COLUMNS` (a
        Triton kernel's loads on them are narrower: ``OpEfficiency.unaligned_slowdown``)."""
        return self.cols is not None and bool(np.any(np.fmod(self.cols, ALIGNED_COLUMNS) != 0.0))

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


def _concat_companions(a: OpRows, b: OpRows) -> tuple[Companion, ...]:
    """``a``'s and ``b``'s companions by name, rows that lack one padded with no work and no
    format (rows of a plain table beside a module table's)."""
    names = [c.name for c in a.companions] + [c.name for c in b.companions if c.name not in
                                              {x.name for x in a.companions}]  # fmt: skip
    out = []
    for name in names:
        ca = next((c for c in a.companions if c.name == name), None)
        cb = next((c for c in b.companions if c.name == name), None)
        like = ca or cb
        assert like is not None
        parts = []
        for rows, c in ((a, ca), (b, cb)):
            if c is None:
                empty = np.empty(len(rows), dtype=object)
                empty[:] = [()] * len(rows)
                parts.append((empty, _zero_work(like.work, len(rows))))
            else:
                parts.append((c.formats, c.work))
        (fa, wa), (fb, wb) = parts
        work = wk.Work(*(None if x is None else np.concatenate([x, y]) for x, y in zip(wa, wb, strict=True)))  # type: ignore[arg-type]
        out.append(Companion(name, like.op_class, np.concatenate([fa, fb]), work))
    return tuple(out)


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
    companions: tuple[Companion, ...] = (),
) -> OpRows:
    n = len(dtype)
    kinds = np.broadcast_to(np.asarray(kind, dtype=object), (n,)).astype(str)
    shape = {k: np.broadcast_to(np.asarray(v, float), (n,)).copy() for k, v in (dims or {}).items()}
    beside = tuple(c._replace(work=_rows_of(n, c.work)) for c in companions)
    return OpRows(cls, dtype, kinds, _rows_of(n, w), floats(df, "latency") * 1e-3, key, shape, beside)


#: The shape dimensions of each class whose whole values a validation holds out (one token
#: count, one EP degree, one context, one batch, one prompt length), as :attr:`OpRows.dims`
#: names them.
HELD_OUT_DIMS: dict[OpClass, tuple[str, ...]] = {
    OpClass.GEMM: ("m",),
    OpClass.MOE: ("num_tokens", "ep"),
    OpClass.ATTENTION_DECODE: ("context", "batch"),
    OpClass.ATTENTION_PREFILL: ("isl",),
}


#: Kernel families whose tables time a whole module rather than one operator (DSA: the
#: projections, the indexer and the sparse core of one attention layer per row): their rows
#: carry the other operators as :class:`Companion` s, and a validation holds out their shape
#: values on their own rows.
MODULE_KINDS = ("dsa",)


def floats(df: Any, col: str) -> np.ndarray:
    return df[col].to_numpy(float)


def shape_hash(df: Any, cols: list[str]) -> np.ndarray:
    import pandas as pd

    return pd.util.hash_pandas_object(df[cols].astype(str), index=False).to_numpy(np.uint64)
