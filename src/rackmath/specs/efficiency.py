"""Efficiency as data: operator classes and the fractions of peak each reaches on a chip.

Typed, frozen and validated here; the catalog stores fitted values in this form
(``catalog/data/kernel_efficiency.yaml``) and :mod:`rackmath.core.efficiency` holds the
functions that turn them into operator times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from numbers import Real

import numpy as np

from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.curve_rank import format_compute, head_curve, nearest_key

#: Largest fitted ``overlap_power``: at 20 the combination is within 3.5% of ``max``
#: (``2 ** (1 / 20) = 1.035`` where the two terms are equal), so larger values add nothing.
MAX_OVERLAP_POWER = 20.0


class EfficiencyMode(StrEnum):
    """Which efficiencies a cost runs on: the one switch of every command, page and call.

    ``kernel`` (the default everywhere): each operator at the fraction of peak fitted on the
    chip's measured kernel tables (a chip without tables borrows a measured chip's curves,
    scaled by its own peaks, and says ``transferred``); ``pure``: the lecture's roofline, every
    operator at its peak FLOP/s and bandwidth. Scalars (``flops_frac``, ...) multiply either
    (:class:`rackmath.core.roofline.Efficiency`)."""

    KERNEL = "kernel"
    PURE = "pure"

    @classmethod
    def parse(cls, value: object, field: str = "efficiency") -> EfficiencyMode:
        """``"kernel"`` / ``"pure"`` (any case) as the mode; a bad value is one line."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise InputError(
                field, value, "kernel (fitted kernel curves, the default) or pure (the lecture's roofline)"
            ) from None


class OpClass(StrEnum):
    """Operator classes that share one efficiency curve on a chip."""

    GEMM = "gemm"  # dense projections: QKV, output, dense MLP, shared experts, router, LM head
    MOE = "moe"  # routed experts as one grouped GEMM
    ATTENTION_DECODE = "attention_decode"  # one query token per sequence against its KV cache
    ATTENTION_PREFILL = "attention_prefill"  # causal attention over a prompt
    ELEMENTWISE = "elementwise"  # norms, activations, residual adds, embedding lookup
    COLLECTIVE = "collective"  # all-reduce, all-gather, reduce-scatter, all-to-all, send/recv


#: The column count a kernel's loads are vectorized at: Triton specializes an integer
#: argument (a size, a stride) as divisible by 16 only when it is (``get_int_specialization``,
#: triton-lang/triton python/triton/backends/compiler.py @0009f6bf), and SGLang's fused MoE
#: kernel takes its widths and strides as such arguments (``fused_moe_kernel``, sgl-project/
#: sglang python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_kernels.py @018e2ed1).
ALIGNED_COLUMNS = 16


#: The decode kernel family of a call in which every query head reads its own KV head:
#: TensorRT-LLM decodes such calls with its masked multi-head attention kernel and calls whose
#: KV heads serve several query heads with its XQA kernels ("Masked MHA with multi-block
#: optimization for generation; XQA kernels for MQA/GQA models", TensorRT-LLM attention docs,
#: nvidia.github.io/TensorRT-LLM/advanced/gpt-attention.html): two kernels, two curves
#: (:func:`rackmath.core.work.decode_family`).
MHA_KIND = "mha"
#: The family a curve missing on a chip falls back to first (then any other of its class).
RELATED_FAMILY: dict[str, str] = {MHA_KIND: "gqa"}


@dataclass(frozen=True)
class OpEfficiency:
    """Achievable fractions of peak for one operator class on one chip and precision.

    The forms are in :mod:`rackmath.core.efficiency`. The last two fields:
    ``bandwidth_tile`` (0: bandwidth saturates in rows) is the edge of the output tile a GEMM
    kernel streams its operands through; when set, the bandwidth saturates in the number of
    output tiles ``ceil(rows / tile) * ceil(cols / tile)`` (a GEMV-shaped GEMM with few output
    columns runs few thread blocks and cannot draw the whole HBM bandwidth).
    ``overlap_power`` (0: compute and memory overlap perfectly, ``max``) combines the two times
    as ``(compute^p + memory^p)^(1/p)``: 1 is no overlap at all (their sum).
    ``routing_bytes_per_element`` (0: none) is the HBM traffic per routed element (token-expert
    pair x hidden) of a grouped expert GEMM's permute and finalize passes, timed at the chip's
    full bandwidth (see :func:`rackmath.core.efficiency.operator_timing`).
    ``alternative`` (None: one kernel) is a second kernel the framework can run the same
    operator with, on its own fitted curve (``kernel`` names it); the operator takes the faster
    of the two at each shape, as an autotuner does (TensorRT-LLM's NVFP4 MoE on B200/GB200: a
    throughput and a min-latency kernel).
    ``max_tokens`` (inf) and ``min_ep`` (1) bound where an alternative kernel runs: calls of at
    most ``max_tokens`` tokens (an EP group's, per call) on at least ``min_ep`` expert-parallel
    ranks, the region its table timed it in. Outside it the operator runs the first kernel.
    TensorRT-LLM dispatches its NVFP4 min-latency MoE at <= 128 tokens only
    (``DeepseekV3DecoderLayer._enable_min_latency_mode``, NVIDIA/TensorRT-LLM 2025), and its
    tables hold no EP-1 timing of that kernel
    (:func:`rackmath.analyses.kernels.rows._moe_ep1_not_scaling`).
    ``only_cols`` (0: none) makes an alternative the kernel the framework dispatches at exactly
    that many columns, and only there, whatever the other would take: TensorRT-LLM decodes MLA
    on SM120 with its XQA kernel (``kSM120_MLA``, NVIDIA/TensorRT-LLM
    cpp/kernels/xqa/mla_sm120.cu) where the KV cache is FP8 and a rank holds 128 query heads
    (FlashInfer's wrapper of that kernel refuses any other head count), and with a generic
    kernel elsewhere: :data:`rackmath.catalog.kernel_tables.SM120_XQA_MLA`.
    ``split_tokens`` (0: none) is the context a decode kernel gives each thread block when it
    splits a long context (split-KV, flash-decoding): the rows both saturations see become
    ``rows x max(1, depth / split_tokens)`` (a batch of one at 128K tokens is many blocks),
    at most ``rows x split_max`` when ``split_max`` is set (kernels cap the blocks a sequence
    is split into: TensorRT-LLM's multi-block mode, FlashInfer's split-KV scheduler), and
    no more splits than make ``split_fill`` blocks when that is set (a call whose rows fill the
    chip is not split: :func:`rackmath.core.efficiency.blocks_of`).
    ``compute_tile_cols`` (0: none) is a whole tile of columns the kernel computes however few
    it is given: an absorbed attention kernel runs its query heads in tiles (FlashMLA's sparse
    kernels on Hopper take heads in multiples of 64; an H200 DSA module's time grows by less than
    20% from 1 to 64 local heads), so only ``cols / (ceil(cols / tile) tile)`` of the
    computed columns are useful.
    ``block_bytes`` (0: none) is what each thread block of an attention kernel adds beside its
    bytes (its queries loaded, its softmax state, its output written and, for a split, merged),
    as bytes streamed at the chip's HBM bandwidth; ``block_tile_rows`` (0: one block per
    sequence and head) the query rows a prefill block takes. The blocks are a decode call's rows
    times its split-KV splits, a prefill call's sequences x query heads times its query tiles
    (:func:`rackmath.core.efficiency.blocks_of`).
    ``unaligned_slowdown`` (0: none) is the share a kernel's time grows by when its columns (a
    grouped expert GEMM's width) are not a whole number of :data:`ALIGNED_COLUMNS`: a Triton
    kernel's loads are vectorized only on strides it can prove divisible by 16
    (:func:`rackmath.core.efficiency.timing_of`).
    ``chain_frac`` (0: none) is the share of the chip's peak one thread block of a causal prefill
    reaches: the compute time is at least its last query tile's (``block_tile_rows`` rows against
    the whole prompt) at that rate (:func:`rackmath.core.efficiency.chain_s`).
    ``spill_bytes`` (0: none) is the chip's L2 and ``spill_passes`` how many more times a call
    reads the bytes it holds beyond it: a causal prefill's query tiles re-read keys and values
    that hit the L2 while the call fits there, and come from DRAM beyond
    (:func:`rackmath.core.efficiency.spill_bytes_of`).
    ``warm_speedup`` (0: none) describes how the curve's table was measured, not the step: a
    call whose bytes fit in the L2 was replayed back to back with them resident there, and read
    them this many times faster than from DRAM (:func:`rackmath.analyses.kernels.fit.table_bytes`).
    The step never reads it: a serving step reads each layer's weights once, cold, and times a
    prefill's queries, keys and values at the curve's DRAM rate.
    """

    compute_frac: float = 1.0
    compute_half_rows: float = 0.0
    bandwidth_frac: float = 1.0
    bandwidth_half_rows: float = 0.0
    floor_s: float = 0.0
    compute_half_cols: float = 0.0
    compute_half_depth: float = 0.0
    bandwidth_tile_depth: float = 0.0
    compute_tile_rows: float = 0.0
    bandwidth_tile: float = 0.0
    overlap_power: float = 0.0
    routing_bytes_per_element: float = 0.0
    kernel: str = ""
    alternative: OpEfficiency | None = None
    max_tokens: float = float("inf")
    min_ep: float = 1.0
    only_cols: float = 0.0
    split_tokens: float = 0.0
    split_max: float = 0.0
    compute_tile_cols: float = 0.0
    block_bytes: float = 0.0
    block_tile_rows: float = 0.0
    unaligned_slowdown: float = 0.0
    chain_frac: float = 0.0
    split_fill: float = 0.0
    spill_bytes: float = 0.0
    spill_passes: float = 0.0
    warm_speedup: float = 0.0

    def __post_init__(self) -> None:
        if self._plainly_valid():
            return
        for name in ("compute_frac", "bandwidth_frac"):
            checks.fraction(name, getattr(self, name), zero=False)
        checks.fraction("chain_frac", self.chain_frac)
        for name in (
            "compute_half_rows",
            "bandwidth_half_rows",
            "floor_s",
            "compute_half_cols",
            "compute_half_depth",
            "bandwidth_tile_depth",
            "compute_tile_rows",
            "bandwidth_tile",
            "routing_bytes_per_element",
            "split_tokens",
            "split_max",
            "compute_tile_cols",
            "block_bytes",
            "block_tile_rows",
            "unaligned_slowdown",
            "split_fill",
            "only_cols",
            "spill_bytes",
            "spill_passes",
            "warm_speedup",
        ):
            checks.at_least(name, getattr(self, name), 0.0, allowed="a finite number >= 0")
        if not (_is_real(self.max_tokens) and self.max_tokens > 0.0):  # inf allowed: no bound
            raise InputError("max_tokens", self.max_tokens, "tokens > 0 (inf: no bound)")
        checks.at_least("min_ep", self.min_ep, 1.0, allowed="a finite number of ranks >= 1")
        power = self.overlap_power
        if not (_is_real(power) and (power == 0.0 or 1.0 <= power <= MAX_OVERLAP_POWER)):
            raise InputError(
                "overlap_power",
                self.overlap_power,
                f"0 (perfect overlap) or a number in [1, {MAX_OVERLAP_POWER:g}]",
            )

    def _plainly_valid(self) -> bool:
        """Whether every number is a float inside its range, checked in one pass: a fit builds
        tens of thousands of curves, and with the per-field checks alone (which name the field
        that is wrong) the A100's refit took 59 s instead of 51 s. Anything else (an int, a
        NumPy number, a value out of range) goes through those checks."""
        nonnegative = (
            self.compute_half_rows, self.bandwidth_half_rows, self.floor_s, self.compute_half_cols,
            self.compute_half_depth, self.bandwidth_tile_depth, self.compute_tile_rows, self.bandwidth_tile,
            self.routing_bytes_per_element, self.split_tokens, self.split_max, self.compute_tile_cols,
            self.block_bytes, self.block_tile_rows, self.unaligned_slowdown, self.split_fill, self.only_cols,
            self.spill_bytes, self.spill_passes, self.warm_speedup,
        )  # fmt: skip
        fractions = (self.compute_frac, self.bandwidth_frac)
        return (
            all(type(v) is float and 0.0 <= v < math.inf for v in nonnegative)
            and all(type(v) is float and 0.0 < v <= 1.0 for v in fractions)
            and type(self.chain_frac) is float
            and 0.0 <= self.chain_frac <= 1.0
            and type(self.overlap_power) is float
            and (self.overlap_power == 0.0 or 1.0 <= self.overlap_power <= MAX_OVERLAP_POWER)
            and type(self.min_ep) is float
            and 1.0 <= self.min_ep < math.inf
            and type(self.max_tokens) is float
            and self.max_tokens > 0.0
        )


def _is_real(value: object) -> bool:
    """A real number (a bool or text is not one, though Python compares a bool as 0 or 1)."""
    return isinstance(value, Real) and not isinstance(value, bool)


PURE = OpEfficiency()


@dataclass(frozen=True)
class CollectiveEfficiency:
    """One collective implementation as it reaches a link:
    ``t = latency_s + (chips - 1) hop_latency_s + x + 2 sqrt(pipeline_latency_s x)
    + sm_tokens sm_token_s`` with ``x = wire_bytes / (bw * frac)``
    (:func:`rackmath.core.efficiency.collective_time_s`).

    ``latency_s`` is the fixed cost of one collective call (NCCL measures 7-28 us on
    NVLink, far above the wire's ~1 us); ``None`` keeps the system catalog's link latency.
    ``hop_latency_s`` adds ``(chips - 1) * hop_latency_s`` when the caller passes the group
    size (an H200 NCCL all-reduce of 256 elements takes 6.0, 9.5 and 16.0 us on 2, 4 and 8
    GPUs: each further GPU is another step of the algorithm). ``pipeline_latency_s`` (0: the
    plain alpha-beta line) is what a pipelined collective pays per chunk over its pipeline's
    depth: NCCL cuts a buffer into chunks and streams them through the ring, and with the
    chunk count that minimises the time a message of ``x`` seconds on the wire takes
    ``(sqrt(c) + sqrt(x))^2 = c + x + 2 sqrt(c x)`` (the segmented-pipeline model;
    Pjesivac-Grbovic et al. 2007, "Performance analysis of MPI collective operations",
    Cluster Computing 10, §3), ``c`` folded into ``latency_s``. A mid-sized NCCL all-gather on
    an H100 runs at 0.4 of the large-message bandwidth; the line misses it by up to 45%.

    ``group_bandwidth_power`` (``g``; 0: every rank keeps its link's rate, as on an NVSwitch)
    divides a rank's bandwidth by ``(chips / 2)^g`` past a pair (``x`` times that factor; only
    when the caller passes the group size). On a PCIe host without NVLink NCCL copies GPU to
    GPU (P2P) only on paths below the CPU (NVIDIA/nccl v2.27.3-1 ``src/graph/paths.cc`` lines
    307-313: ``p2pLevel = PATH_PXB``, on AMD CPUs ``PATH_SYS`` for two GPUs only; NCCL 2.23.4's
    release notes, commit 68b54236: P2P through the CPU off from three GPUs, as many interleaved
    flows degrade it); past a pair the traffic is staged through host memory and every rank's
    flow shares the CPU and the socket link. The L40S's NCCL all-gather of 128 MiB runs at
    19.3, 4.7 and 1.18 GB/s a rank on 2, 4 and 8 GPUs: ``g = 2``
    (:func:`rackmath.core.efficiency.collective_timing`; ``docs/calibration.md``, "PCIe hosts").

    ``sm_token_s`` (0: none) is what each token adds that the busiest SM of a DeepEP
    low-latency kernel handles in turn (:func:`rackmath.core.work.sm_tokens`: ``ceil(tokens /
    E)`` for ``E`` experts): ``t`` grows by ``sm_tokens x sm_token_s`` (only when the caller
    passes the count). The dispatch runs one SM per expert and each SM casts and sends one token
    after another, so with few experts a call is that SM's turns, not the link's bytes: on the
    GB200 table the alpha-beta curve alone ran the 8-expert rows at up to 11.8x its time (p90 of
    |measured / predicted - 1| 6.98; over every row, 5.2 at 512 tokens, 7.75 at 1,024, 0.29 at
    one), while 128 to 512 experts fit within 8-45% (p90). 1,024 tokens of 2 copies over 8
    experts and of 1 copy over 16 take 363 and 181 us (4,096 and 5,120 values a token): one
    SM's 128 and 64 turns of 2.7 us. The bytes an expert receives do not say it (3.2x as many
    in the first), nor the width (1.5x from 4,096 to 6,144 values, 1.09x the time). Fitted on
    the low-latency curves only: 1.9-2.5 us a token for the dispatch on the six chips with
    tables (GB200 2.42 us; its 8-expert rows at 256 tokens or more then run 1.03-1.17x the
    curve), 0.14-0.23 us for the combine (``docs/calibration.md``, "DeepEP low-latency: one SM
    per expert")."""

    latency_s: float | None = None
    bandwidth_frac: float = 1.0
    hop_latency_s: float = 0.0
    pipeline_latency_s: float = 0.0
    group_bandwidth_power: float = 0.0
    sm_token_s: float = 0.0

    def __post_init__(self) -> None:
        checks.fraction("bandwidth_frac", self.bandwidth_frac, zero=False)
        if self.latency_s is not None:
            checks.at_least("latency_s", self.latency_s, 0.0, allowed="seconds >= 0")
        for name in ("hop_latency_s", "pipeline_latency_s", "sm_token_s"):
            checks.at_least(name, getattr(self, name), 0.0, allowed="seconds >= 0")
        checks.at_least(
            "group_bandwidth_power", self.group_bandwidth_power, 0.0, allowed="a power >= 0 (0: none)"
        )


PURE_NETWORK = CollectiveEfficiency()


@dataclass(frozen=True)
class CurveKey:
    """Which fitted curve an operator runs on: its class, the kernel format (the measured
    tables' dtype name, :data:`rackmath.specs.precision.FORMATS`; for attention the KV cache's
    format) and the kernel family (attention: ``gqa``, ``mla``, ``dsa``; grouped experts:
    ``gated``, ``nongated``; ``""`` where the class has one family). ``head_dim`` (0: every head
    size) names a kernel built for one query/key head size: TensorRT-LLM compiles its context
    attention per head size, and on SM89 and SM120 those kernels' rates differ by up to 2.8x at
    one format (:data:`HEAD_SIZED`)."""

    op_class: OpClass
    fmt: str
    kind: str = ""
    head_dim: int = 0

    def __str__(self) -> str:
        name = "/".join(x for x in (self.op_class.value, self.kind, self.fmt) if x)
        return f"{name}/head {self.head_dim}" if self.head_dim else name


#: The classes and families whose curves are fitted per head size (:attr:`CurveKey.head_dim`):
#: GQA/MHA causal prefill. On the L40S's FP8 tables the context kernel reaches 93, 197, 170 and
#: 71 TFLOP/s at head sizes 64, 128, 192 and 256 (2,048-4,096-token prompts), and one curve for
#: the four missed the head-128 calls by a median 87% (docs/validation.md). Decode attention's
#: head sizes sit within 13% of their curve at the median on every chip but the L40S's masked
#: MHA kernel (25% at head 192 in FP8), and the MLA and DSA tables time one head shape, so
#: neither is split.
HEAD_SIZED: frozenset[tuple[OpClass, str]] = frozenset({(OpClass.ATTENTION_PREFILL, "gqa")})


@dataclass(frozen=True)
class ErrorBand:
    """How far measurements fall from a curve's prediction: the 10th and 90th percentiles of
    ``measured / predicted`` over held-out rows (1, 1: unknown or exact), and how it was
    measured. A time ``t`` lies in ``[p10 t, p90 t]`` for 80% of held-out kernel calls."""

    p10: float = 1.0
    p90: float = 1.0
    rows: int = 0
    how: str = ""

    def __post_init__(self) -> None:
        if not (0.0 < self.p10 <= 1.0 <= self.p90 and np.isfinite(self.p90)):
            raise InputError("error band", (self.p10, self.p90), "0 < p10 <= 1 <= p90, finite")


NO_BAND = ErrorBand()


@dataclass(frozen=True)
class Curve:
    """One fitted curve: the efficiency, the precision whose peak its compute fraction is a
    fraction of, the measured table it comes from, and its held-out error. ``chip``: the chip
    whose table it was fitted on, when that is not the table's (a transferred chip's curve of
    its own, beside the donor's: :meth:`EfficiencyTable.origin_of`); "" for the table's chip."""

    efficiency: OpEfficiency
    precision: str
    source: str
    band: ErrorBand = NO_BAND
    chip: str = ""


@dataclass(frozen=True)
class Kernel:
    """What an operator's time was computed on, as a report states it.

    ``table``: the measured table (or ``"pure roofline"``, ``"link model"``); ``fmt`` and
    ``kind``: the curve's format and family; ``chip``: the chip whose table it is (the donor
    when ``transferred``); ``fallback``: why a curve other than the one the operator asked
    for was used ("" when it is that one); ``band``: the curve's held-out error; ``head_dim``:
    the head size the curve's kernel was timed at (0: every size, :attr:`CurveKey.head_dim`).
    """

    table: str
    fmt: str
    kind: str = ""
    chip: str = ""
    transferred: bool = False
    fallback: str = ""
    band: ErrorBand = NO_BAND
    head_dim: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "format": self.fmt,
            "kind": self.kind,
            "head_dim": self.head_dim or None,
            "chip": self.chip,
            "transferred": self.transferred,
            "fallback": self.fallback or None,
            "error_p10": self.band.p10,
            "error_p90": self.band.p90,
        }


@dataclass(frozen=True)
class CollectiveCurve:
    """A collective as one library implementation runs it on a chip: the alpha-beta fit,
    the group sizes and message sizes it was measured over, its source and error."""

    efficiency: CollectiveEfficiency
    source: str
    max_ranks: float = float("inf")
    min_message_bytes: float = 0.0
    max_message_bytes: float = float("inf")
    band: ErrorBand = NO_BAND
    #: the chip whose table it was fitted on when not the table's ("": the table's), as Curve.chip
    chip: str = ""


#: The flat table's key: a curve for every format and family of a class.
ANY = "*"


@dataclass(frozen=True)
class EfficiencyTable:
    """Every fitted curve of one chip, and its collectives, plus a per-step fixed overhead.

    ``curves`` maps a :class:`CurveKey` to a :class:`Curve` (a key with format ``"*"`` applies
    to every format and family of its class: the flat tables of the end-to-end calibration);
    ``collectives`` maps ``"<collective>:<implementation>"`` (``all_reduce:nccl``,
    ``all_reduce:custom``, ``dispatch:deepep_ll``, ...) to a :class:`CollectiveCurve`.
    ``chip`` is the chip whose tables the curves come from, ``transferred`` whether the
    deployment's chip borrows them; ``source`` says where the numbers come from
    (``"pure roofline"`` for the empty table). :meth:`curve` picks an operator's curve and
    says when it had to fall back.
    """

    curves: tuple[tuple[CurveKey, Curve], ...] = ()
    collectives: tuple[tuple[str, CollectiveCurve], ...] = ()
    overhead_s: float = 0.0
    #: host time per running sequence per decode step, charged per engine (scheduler)
    overhead_s_per_sequence: float = 0.0
    source: str = "pure roofline"
    chip: str = ""
    transferred: bool = False
    #: the chip's DSA prefill kernel runs each query over all top-k slots, padding included
    #: (:data:`rackmath.catalog.kernel_tables.DSA_PREFILL_GATHERS_TOP_K`)
    dsa_prefill_gathers_top_k: bool = False

    def __post_init__(self) -> None:
        for name in ("overhead_s", "overhead_s_per_sequence"):
            checks.at_least(name, getattr(self, name), 0.0, allowed="seconds >= 0")

    @property
    def is_pure(self) -> bool:
        return (
            not self.curves
            and not self.collectives
            and self.overhead_s == 0.0
            and self.overhead_s_per_sequence == 0.0
        )

    def _lookup(self) -> dict[CurveKey, Curve]:
        cached: dict[CurveKey, Curve] | None = self.__dict__.get("_by_key")
        if cached is None:
            cached = dict(self.curves)
            object.__setattr__(self, "_by_key", cached)
        return cached

    def of(self, op_class: OpClass, fmt: str, kind: str = "", head_dim: float = 0.0) -> OpEfficiency:
        """The efficiency an operator of ``op_class`` in format ``fmt`` runs at (:meth:`curve`)."""
        return self.curve(op_class, (fmt,), kind, head_dim=head_dim)[0]

    def collective(self, name: str) -> CollectiveCurve | None:
        """The fitted curve of ``"<collective>:<implementation>"``, or None (looked up once)."""
        cached: dict[str, CollectiveCurve] | None = self.__dict__.get("_collectives_by_name")
        if cached is None:
            cached = dict(self.collectives)
            object.__setattr__(self, "_collectives_by_name", cached)
        return cached.get(name)

    def curve(
        self,
        op_class: OpClass,
        formats: tuple[str, ...],
        kind: str = "",
        compute: str = "",
        head_dim: float = 0.0,
    ) -> tuple[OpEfficiency, str, Kernel]:
        """``(efficiency, peak precision, kernel)`` of an operator of ``op_class`` that runs in
        the first of ``formats`` the chip has a curve for (``kind``: its kernel family;
        ``head_dim``: its query/key head size, which picks among curves fitted per head size,
        :data:`HEAD_SIZED`).

        Without such a curve the operator falls back, visibly (``kernel.fallback`` says why):
        to the curve of the nearest head size the chip's tables time (head 96 on head 128's, a
        tie to the larger), to a curve of the same family in a format computing at the same
        precision (fp8-block on the per-tensor fp8 curve), then in bf16, then to a related
        family's curve (:data:`RELATED_FAMILY`: MHA decode on the GQA curve), then to another
        family's curve of the same class (MLA decode on the GQA curve), and to the pure roofline
        when the class has no curve at all. ``compute`` is the peak the operator runs at on the
        pure roofline (default: the first format's own).
        """
        wanted = formats[0] if formats else ""
        by_key = self._lookup()
        pure_peak = compute or format_compute(wanted)
        if not by_key:
            return PURE, pure_peak, Kernel("pure roofline", wanted, kind, self.chip)
        for fmt in formats:
            found = self._sized(op_class, fmt, kind, head_dim)
            if found is not None:
                key, why = found
                hit = by_key[key]
                return hit.efficiency, hit.precision, self._kernel(hit, key, why)
        flat = by_key.get(CurveKey(op_class, ANY, ANY))
        if flat is not None:
            return flat.efficiency, pure_peak, self._kernel(flat, CurveKey(op_class, wanted, kind), "")
        same_kind = [k for k in by_key if k.op_class is op_class and k.kind == kind]
        related = [k for k in by_key if k.op_class is op_class and k.kind == RELATED_FAMILY.get(kind)]
        other_kind = [k for k in by_key if k.op_class is op_class and k.kind != kind]
        for pool, why in ((same_kind, ""), (related, "family"), (other_kind, "family")):
            near = nearest_key(pool, wanted, head_dim)
            if near is not None:
                key, hit = near, by_key[near]
                asked = f"{kind} {wanted}".strip() if why else (wanted or "any format")
                reason = (
                    f"no {op_class.value} curve for {asked} on {self.chip or 'this chip'}: "
                    f"runs on the {key!s} curve"
                )
                return hit.efficiency, hit.precision, self._kernel(hit, key, reason)
        return (
            PURE,
            pure_peak,
            Kernel(
                "pure roofline",
                wanted,
                kind,
                self.chip,
                self.transferred,
                f"no {op_class.value} curve on {self.chip or 'this chip'}: pure roofline",
            ),
        )

    def _sized(self, op_class: OpClass, fmt: str, kind: str, head_dim: float) -> tuple[CurveKey, str] | None:
        """The curve of ``op_class`` / ``kind`` / ``fmt`` for head size ``head_dim``: its own,
        else the nearest head size's (with why), else the one curve of every head size; None
        when the chip has none of them."""
        size = head_curve(self._head_sizes().get((op_class, fmt, kind), ()), head_dim)
        key = CurveKey(op_class, fmt, kind, size)
        if key not in self._lookup():
            return None
        if size in (0, round(head_dim)):
            return key, ""
        asked = f"head size {head_dim:g}" if head_dim > 0 else "an unstated head size"
        why = (
            f"no {op_class.value} curve for {asked} on {self.chip or 'this chip'}: "
            f"runs on the head-{size} curve (the nearest its tables time)"
        )
        return key, why

    def _head_sizes(self) -> dict[tuple[OpClass, str, str], tuple[int, ...]]:
        cached: dict[tuple[OpClass, str, str], tuple[int, ...]] | None = self.__dict__.get("_sizes")
        if cached is None:
            sizes: dict[tuple[OpClass, str, str], list[int]] = {}
            for k in self._lookup():
                if k.head_dim:
                    sizes.setdefault((k.op_class, k.fmt, k.kind), []).append(k.head_dim)
            cached = {k: tuple(sorted(v)) for k, v in sizes.items()}
            object.__setattr__(self, "_sizes", cached)
        return cached

    def _kernel(self, c: Curve, key: CurveKey, fallback: str) -> Kernel:
        chip, transferred = self.origin_of(c.chip)
        return Kernel(c.source, key.fmt, key.kind, chip, transferred, fallback, c.band, key.head_dim)

    def origin_of(self, curve_chip: str) -> tuple[str, bool]:
        """``(chip, transferred)`` a kernel on a curve fitted on ``curve_chip`` reports: a
        transferred chip's own curve (``curve_chip`` set and not the donor) is not transferred."""
        if curve_chip and curve_chip != self.chip:
            return curve_chip, False
        return self.chip, self.transferred


PURE_TABLE = EfficiencyTable()
