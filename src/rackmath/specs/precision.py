"""Numeric formats: storage bytes per element (scales included), the compute peak each one
runs at, and the matmul formats kernels implement (the one format table of the project).

Two things are described here, once:

* :class:`Precision`: how a tensor is *stored* (bytes per element, scales included) and the
  tensor-core rate its element type computes at (:attr:`Precision.compute_class`).
* :class:`KernelFormat`: how a matmul kernel *runs* a pair of operands: the weights' storage,
  the activations' storage (as the kernel reads them, scales included) and the peak it runs
  at. Its ``name`` is the dtype name the measured kernel tables use (``fp8_block``,
  ``w4a16_mxfp4``, ...), and it keys the fitted efficiency curves. :func:`gemm_formats`
  says which formats can run a weight format under a compute precision, in the order an
  engine prefers them.

Scale overheads (bits per element): block-scaled FP8 as DeepSeek-V3 ships it, one FP32 scale
per 128 x 128 weight block (``8 + 32/16384``) and per 1 x 128 activation group
(``8 + 32/128``; DeepSeek-V3 report §3.3.2); OCP microscaling MXFP8 / MXFP4, one 8-bit scale
per 32 elements (``8 + 8/32``, ``4 + 8/32``; OCP MX spec v1.0, 2023); NVIDIA NVFP4, one FP8
scale per 16 elements (``4 + 8/16``; NVIDIA Blackwell architecture brief, 2025; the per-tensor
FP32 scale is negligible); INT4 weight-only as AWQ/GPTQ store it, one FP16 scale per group of
128 (``4 + 16/128``; Lin et al. 2024 and Frantar et al. 2023, group size 128).

Worked numbers (tests): NVFP4 is 0.5625 bytes per element, MXFP4 0.53125, an FP8-block
activation 1.03125, an FP8-block weight 1.000244.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rackmath.errors import UnknownIdError


class Precision(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    #: FP8 (E4M3) with one scale per tensor
    FP8 = "fp8"
    #: FP8 with one FP32 scale per 128 x 128 weight block (DeepSeek-V3, Kimi K2)
    FP8_BLOCK = "fp8-block"
    #: OCP microscaling FP8: 8-bit elements plus one 8-bit scale per 32
    MXFP8 = "mxfp8"
    INT8 = "int8"
    FP6 = "fp6"
    FP4 = "fp4"
    #: 4-bit integers with one FP16 scale per group of 128 (AWQ/GPTQ weight-only)
    INT4 = "int4"
    #: OCP microscaling FP4: 4-bit elements plus one 8-bit scale per 32 (4.25 bits).
    MXFP4 = "mxfp4"
    #: NVIDIA FP4: 4-bit elements plus one FP8 scale per 16 (4.5 bits).
    NVFP4 = "nvfp4"

    @classmethod
    def parse(cls, text: str | Precision, field: str = "precision") -> Precision:
        if isinstance(text, Precision):
            return text
        key = text.strip().lower().replace("_", "-")
        try:
            return cls(key)
        except ValueError:
            raise UnknownIdError(field, text, [p.value for p in cls]) from None

    @property
    def bytes_per_element(self) -> float:
        """Storage bytes per element, block scales included (a weight tensor's layout)."""
        return _BITS[self] / 8

    @property
    def compute_class(self) -> Precision:
        """The peak-FLOP/s row a matmul in this format runs at (block formats: their element)."""
        return _COMPUTE_CLASS.get(self, self)

    @property
    def is_wide(self) -> bool:
        """A 16- or 32-bit float: the format a matmul with unquantized operands runs in."""
        return self in _WIDE


# TF32 is a compute mode; its operands are stored as fp32.
_BITS: dict[Precision, float] = {
    Precision.FP32: 32,
    Precision.TF32: 32,
    Precision.BF16: 16,
    Precision.FP16: 16,
    Precision.FP8: 8,
    Precision.FP8_BLOCK: 8 + 32 / (128 * 128),
    Precision.MXFP8: 8 + 8 / 32,
    Precision.INT8: 8,
    Precision.FP6: 6,
    Precision.FP4: 4,
    Precision.INT4: 4 + 16 / 128,
    Precision.MXFP4: 4 + 8 / 32,
    Precision.NVFP4: 4 + 8 / 16,
}

_COMPUTE_CLASS: dict[Precision, Precision] = {
    Precision.FP8_BLOCK: Precision.FP8,
    Precision.MXFP8: Precision.FP8,
    Precision.MXFP4: Precision.FP4,
    Precision.NVFP4: Precision.FP4,
}

_WIDE = frozenset({Precision.FP32, Precision.TF32, Precision.BF16, Precision.FP16})

#: Bytes per activation element a block-scaled FP8 kernel reads: one FP32 scale per 1 x 128
#: group (DeepSeek-V3 report §3.3.2).
FP8_BLOCK_ACTIVATION_BYTES = 1.0 + 4.0 / 128


@dataclass(frozen=True)
class KernelFormat:
    """One matmul format as kernels run it.

    ``name`` is the measured tables' dtype name and the key of the fitted curves;
    ``weights`` the weight operand's storage; ``activation_bytes`` what the kernel reads per
    input activation element (scales included); ``compute`` the peak row it runs at.
    A weight-only format (``w4a16_mxfp4``, ``int8_wo``) dequantizes narrow weights into a
    16-bit matmul; ``compute`` is then BF16.
    """

    name: str
    weights: Precision
    activation_bytes: float
    compute: Precision
    description: str

    @property
    def weight_bytes(self) -> float:
        return self.weights.bytes_per_element


def _fmt(
    name: str, weights: Precision, activations: Precision | float, compute: Precision, text: str
) -> KernelFormat:
    act = activations.bytes_per_element if isinstance(activations, Precision) else float(activations)
    return KernelFormat(name, weights, act, compute, text)


#: Every matmul format the project knows, by the kernel tables' dtype name.
FORMATS: dict[str, KernelFormat] = {
    f.name: f
    for f in (
        _fmt("float32", Precision.FP32, Precision.FP32, Precision.FP32, "fp32"),
        _fmt("bfloat16", Precision.BF16, Precision.BF16, Precision.BF16, "bf16"),
        _fmt("float16", Precision.FP16, Precision.FP16, Precision.FP16, "fp16"),
        _fmt("fp8", Precision.FP8, Precision.FP8, Precision.FP8, "fp8, one scale per tensor"),
        _fmt(
            "fp8_block",
            Precision.FP8_BLOCK,
            FP8_BLOCK_ACTIVATION_BYTES,
            Precision.FP8,
            "fp8, 128x128 weight blocks and 1x128 activation groups",
        ),
        _fmt("mxfp8", Precision.MXFP8, Precision.MXFP8, Precision.FP8, "mxfp8 (32-element blocks)"),
        _fmt("nvfp4", Precision.NVFP4, Precision.NVFP4, Precision.FP4, "nvfp4 weights and activations"),
        _fmt("mxfp4", Precision.MXFP4, Precision.MXFP4, Precision.FP4, "mxfp4 weights and activations"),
        _fmt(
            "w4a8_mxfp4_mxfp8",
            Precision.MXFP4,
            Precision.MXFP8,
            Precision.FP8,
            "mxfp4 weights, mxfp8 activations",
        ),
        _fmt(
            "w4a16_mxfp4",
            Precision.MXFP4,
            Precision.BF16,
            Precision.BF16,
            "mxfp4 weights dequantized to bf16",
        ),
        _fmt("int8", Precision.INT8, Precision.INT8, Precision.INT8, "int8 weights and activations"),
        _fmt("sq", Precision.INT8, Precision.INT8, Precision.INT8, "int8 SmoothQuant (w8a8)"),
        _fmt("int8_wo", Precision.INT8, Precision.BF16, Precision.BF16, "int8 weights dequantized to bf16"),
        _fmt("int4_wo", Precision.INT4, Precision.BF16, Precision.BF16, "int4 weights dequantized to bf16"),
    )
}
#: Other spellings the tables use for a format.
ALIASES: dict[str, str] = {"half": "float16"}


def kernel_format(name: str) -> KernelFormat:
    """The format a table's dtype name means (aliases included)."""
    key = ALIASES.get(name, name)
    try:
        return FORMATS[key]
    except KeyError:
        raise UnknownIdError("kernel dtype", name, sorted([*FORMATS, *ALIASES])) from None


#: Formats that run a weight format, by the compute class the activations may go down to,
#: in the order an engine prefers them. A 16-bit weight runs at 16 bits whatever the compute.
_RUNS: dict[Precision, dict[Precision, tuple[str, ...]]] = {
    Precision.FP8: {Precision.FP8: ("fp8",)},
    Precision.FP8_BLOCK: {Precision.FP8: ("fp8_block",)},
    Precision.MXFP8: {Precision.FP8: ("mxfp8",)},
    Precision.NVFP4: {Precision.FP4: ("nvfp4",)},
    # "fp4" unqualified: the scaled 4-bit formats engines run (NVFP4 on NVIDIA, MXFP4 elsewhere)
    Precision.FP4: {Precision.FP4: ("nvfp4", "mxfp4")},
    Precision.MXFP4: {
        Precision.FP4: ("mxfp4", "w4a8_mxfp4_mxfp8"),
        Precision.FP8: ("w4a8_mxfp4_mxfp8",),
        Precision.BF16: ("w4a16_mxfp4",),
    },
    Precision.INT8: {Precision.INT8: ("sq", "int8"), Precision.BF16: ("int8_wo",)},
    Precision.INT4: {Precision.BF16: ("int4_wo",)},
}
_WIDE_FORMAT = {
    Precision.FP32: "float32",
    Precision.TF32: "float32",
    Precision.BF16: "bfloat16",
    Precision.FP16: "float16",
}


def gemm_formats(weights: Precision, compute: Precision) -> tuple[str, ...]:
    """The kernel formats that run weights stored as ``weights`` when activations may be
    quantized down to ``compute``'s class, preferred first; empty when no kernel does
    (fp8 weights under a bf16 matmul): the caller falls back visibly.

    Worked examples (tests): bf16 weights under fp8 compute -> ("bfloat16",); fp8-block
    weights under fp8 -> ("fp8_block",); mxfp4 under fp4 -> ("mxfp4", "w4a8_mxfp4_mxfp8");
    mxfp4 under bf16 -> ("w4a16_mxfp4",); int8 under bf16 -> ("int8_wo",).
    """
    if weights.is_wide:
        return (_WIDE_FORMAT[weights],) if weights is not Precision.FP16 else ("float16", "bfloat16")
    runs = _RUNS.get(weights, {})
    cls = compute.compute_class
    if cls in runs:
        return runs[cls]
    # activations narrower than any kernel of these weights takes: the widest kernel that runs them
    wider = [c for c in (Precision.FP8, Precision.INT8, Precision.BF16) if c in runs]
    return runs[wider[0]] if (wider and cls in (Precision.FP4, Precision.FP6)) else ()


def attention_format(kv: Precision) -> tuple[str, ...]:
    """The kernel formats attention over a ``kv`` cache runs in (the tables key decode attention
    by the cache's dtype, prefill by the attention dtype; an fp8 cache runs fp8 attention)."""
    if kv.is_wide:
        return ("bfloat16",) if kv is not Precision.FP16 else ("float16", "bfloat16")
    if kv.compute_class is Precision.FP8:
        return ("fp8",)
    return ()


_PLAIN: dict[float, Precision] = {
    4.0: Precision.FP32,
    2.0: Precision.BF16,
    1.0: Precision.FP8,
    0.5: Precision.FP4,
}


def plain_precision(bytes_per_element: float) -> Precision:
    """The unscaled format a bytes-per-element number stands for (2 -> bf16, 1 -> fp8,
    0.5 -> fp4, 4 -> fp32): callers that state weights as a width get that width's plain format."""
    try:
        return _PLAIN[float(bytes_per_element)]
    except KeyError:
        raise UnknownIdError(
            "bytes per weight", f"{bytes_per_element:g}", [f"{b:g}" for b in _PLAIN]
        ) from None
