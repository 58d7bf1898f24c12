"""Training framework profiles (``data/training_frameworks.yaml``) and the backward-kernel
ratios the kernel tables lack (``data/training_kernels.yaml``), as frozen specs."""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import numpy as np

from rackmath.catalog.loader import CatalogError, catalog_entries, lookup, read_data
from rackmath.specs.training_framework import RecomputePolicy, TrainingFramework

#: The profile a run gets when it states no framework.
GENERIC = "generic"


def _framework(raw: dict[str, Any]) -> TrainingFramework:
    policies = tuple(RecomputePolicy(**p) for p in raw.pop("recompute"))
    return TrainingFramework(
        recompute=policies,
        sources=dict(raw.pop("sources", {})),
        gemm_recipes=dict(raw.pop("gemm_recipes", {})),
        tp_overlap_margin_sms=dict(raw.pop("tp_overlap_margin_sms", {})),
        version=str(raw.pop("version")),
        date=str(raw.pop("date")),
        bucket_params=float(raw.pop("bucket_params")),
        bucket_params_per_dp_rank=float(raw.pop("bucket_params_per_dp_rank")),
        **raw,
    )


@cache
def frameworks() -> dict[str, TrainingFramework]:
    """Every profile by id."""
    out: dict[str, TrainingFramework] = {}
    for raw in catalog_entries("training_frameworks.yaml", "frameworks"):
        try:
            profile = _framework(dict(raw))
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"training_frameworks.yaml entry {raw.get('id')!r}: {exc}") from exc
        out[profile.id] = profile
    return out


def framework(framework_id: str | None) -> TrainingFramework:
    """A profile by id (``megatron-bridge``, ``torchtitan``, ...); None: the generic step.
    An unknown id is one line with the known ones."""
    result: TrainingFramework = lookup("training framework", framework_id or GENERIC, frameworks())
    return result


class BackwardRatio(NamedTuple):
    """A measured ratio of a training kernel on a chip (the attention backward's FLOP/s over its
    forward's, a split-accumulation slowdown, compute slowed beside overlapped traffic), where
    it comes from, and whether it was measured on another chip."""

    value: float
    source: str
    transferred: bool


@cache
def attention_backward_efficiency(chip_id: str, fmt: str = "bf16") -> BackwardRatio:
    """The attention core's backward over forward FLOP/s on ``chip_id`` for an attention core
    in ``fmt`` (``bf16``; ``fp8`` or ``mxfp8`` under FP8 dot-product attention), from
    ``data/training_kernels.yaml``. A chip it does not list takes its stated default; an 8-bit
    core on a chip without a measured 8-bit pair takes the chip's 16-bit ratio, marked
    transferred."""
    data = read_data("training_kernels.yaml")
    if fmt != "bf16":
        for entry in data["attention_backward_efficiency_8bit"]:
            if chip_id in entry["chips"] and fmt in entry["values"]:
                return BackwardRatio(float(entry["values"][fmt]), str(entry["source"]), False)
        wide = attention_backward_efficiency(chip_id)
        return BackwardRatio(
            wide.value, f"no {fmt} backward/forward pair: the 16-bit ratio ({wide.source})", True
        )
    for entry in data["attention_backward_efficiency"]:
        if chip_id in entry["chips"]:
            return BackwardRatio(float(entry["value"]), str(entry["source"]), False)
    d = data["default"]
    return BackwardRatio(float(d["value"]), str(d["source"]), True)


@cache
def split_accumulation(chip_id: str, recipe: str) -> BackwardRatio | None:
    """The backward GEMMs' (dgrad, wgrad) time over the forward's curve under ``recipe`` on
    ``chip_id`` where they run with split accumulation (Hopper, per-tensor FP8;
    ``data/training_kernels.yaml`` ``fp8_split_accumulation``), None elsewhere. Transferred on
    a chip other than the one it was measured on."""
    entry = read_data("training_kernels.yaml")["fp8_split_accumulation"]
    if chip_id not in entry["chips"] or recipe not in entry["recipes"]:
        return None
    own = chip_id in entry["measured"]
    m = entry["measured"][chip_id if own else entry["transferred_from"]]
    return BackwardRatio(float(m["slowdown"]), str(entry["source"]).format(table=m["table"]), not own)


@cache
def overlap_compute_slowdown(chip_id: str, vendor: str) -> BackwardRatio | None:
    """How much longer compute runs while a collective the framework hides shares the chip's
    SMs with it (``data/training_kernels.yaml`` ``overlap_compute_slowdown``: 1.189, measured
    on A100, H100 and two AMD GPUs), None for a vendor whose collectives run on their own
    engines (TPU, Trainium). Transferred on a chip other than those measured."""
    entry = read_data("training_kernels.yaml")["overlap_compute_slowdown"]
    if vendor not in entry["vendors"]:
        return None
    return BackwardRatio(float(entry["slowdown"]), str(entry["source"]), chip_id not in entry["measured_on"])


class KernelRatio(NamedTuple):
    """How much longer a framework's attention kernel takes than the chip's fitted curve,
    forward and backward, and where the figures come from."""

    forward: float
    backward: float
    source: str
    transferred: bool


#: The fitted curve itself: no ratio.
FITTED_ATTENTION = "fitted"


def attention_kernel_ratio(chip_id: str, kernel: str, seq_len: float) -> KernelRatio:
    """The ``kernel``'s time over the fitted prefill-attention curve's on ``chip_id`` at
    ``seq_len`` tokens (``data/training_kernels.yaml`` ``attention_kernels``): the fitted
    kernel's rate over ``kernel``'s, interpolated in log sequence length, the end ratios
    beyond the measured lengths. ``fitted``, or a chip without a published pair: 1 (the latter
    marked transferred). Worked number: FlashAttention-2 on an H100 at 8K: forward
    646 / 370 = 1.746, backward 559 / 318 = 1.758."""
    if kernel == FITTED_ATTENTION:
        return KernelRatio(1.0, 1.0, "the chip's fitted prefill-attention curve", False)
    if kernel == CUDNN_ATTENTION:
        return KernelRatio(1.0, 1.0, "its measured table where one exists (attention_table)", False)
    data = read_data("training_kernels.yaml")["attention_kernels"]
    for entry in data.get(kernel, []):
        if chip_id in entry["chips"]:
            x = np.log(np.asarray(entry["seq_len"], float))
            at = float(np.log(max(float(seq_len), 1.0)))
            fwd = np.asarray(entry["fa3_forward"], float) / np.asarray(entry["fa2_forward"], float)
            bwd = np.asarray(entry["fa3_backward"], float) / np.asarray(entry["fa2_backward"], float)
            return KernelRatio(
                float(np.interp(at, x, fwd)), float(np.interp(at, x, bwd)), str(entry["source"]), False
            )
    return KernelRatio(1.0, 1.0, f"no published {kernel} / fitted pair on {chip_id}: the fitted curve", True)


#: Transformer Engine's FusedAttention: cuDNN's fused attention kernels, timed from cuDNN's
#: own measured training tables (``data/training_kernels.yaml`` ``attention_tables``).
CUDNN_ATTENTION = "cudnn-fused"


class AttentionTable(NamedTuple):
    """A framework's attention kernel as measured in training: forward and backward FLOP/s
    by sequence length, for one chip, format and pair of head dimensions."""

    seq_len: tuple[float, ...]
    forward_flops_per_s: tuple[float, ...]
    backward_flops_per_s: tuple[float, ...]
    measured_on: str
    source: str

    def rates_at(self, seq_len: float) -> tuple[float, float]:
        """(forward, backward) FLOP/s at ``seq_len`` tokens: linear in log sequence length
        between the measured lengths, the end values beyond them. Worked number: cuDNN on a
        GB200 in MXFP8 at 6,144 tokens, between 4,096 (1,716 / 1,027 TFLOP/s) and 8,192
        (1,926 / 1,267): ``t = log 1.5 / log 2 = 0.585``, forward 1,838.8, backward 1,167.4."""
        x = np.log(np.asarray(self.seq_len, float))
        at = float(np.log(max(float(seq_len), 1.0)))
        return (
            float(np.interp(at, x, np.asarray(self.forward_flops_per_s, float))),
            float(np.interp(at, x, np.asarray(self.backward_flops_per_s, float))),
        )


@cache
def attention_table(chip_id: str, kernel: str, fmt: str, head_dims: tuple[int, int]) -> AttentionTable | None:
    """``kernel``'s measured training table on ``chip_id`` for an attention core in ``fmt``
    (``bf16``, ``fp8``, ``mxfp8``) with head dimensions ``(d_qk, d_v)``; None where none was
    measured (the step then runs the fitted curve and says so). ``measured_on`` names the chip
    the table is of (another than ``chip_id`` when transferred)."""
    data = read_data("training_kernels.yaml").get("attention_tables", {})
    for entry in data.get(kernel, []):
        dims = tuple(int(d) for d in entry["head_dims"])
        if chip_id in entry["chips"] and dims == tuple(head_dims) and fmt in entry["forward_tflops"]:
            return AttentionTable(
                tuple(float(v) for v in entry["seq_len"]),
                tuple(float(v) * 1e12 for v in entry["forward_tflops"][fmt]),
                tuple(float(v) * 1e12 for v in entry["backward_tflops"][fmt]),
                str(entry["measured_on"]),
                str(entry["source"]),
            )
    return None


class DispatcherRate(NamedTuple):
    """An expert dispatcher's measured algorithm bandwidth at one EP size on a chip (bytes per
    second a rank receives in a dispatch, sends in a combine), and where it comes from."""

    dispatch_bf16_bytes_per_s: float
    dispatch_fp8_bytes_per_s: float
    combine_bytes_per_s: float
    source: str
    transferred: bool


def ep_dispatcher_rate(chip_id: str, dispatcher: str, ranks: int) -> DispatcherRate | None:
    """``dispatcher``'s measured rate on ``chip_id`` at ``ranks`` EP ranks in one NVLink domain
    (``data/training_kernels.yaml`` ``ep_dispatchers``), linear in ranks between the measured
    sizes; None outside them or where it was not measured (the step then runs the fitted
    curves). A chip measured on another (``measured_on``) is marked transferred. Worked number:
    HybridEP on a GB200 at 8 ranks: dispatch 545.71 GB/s, combine 568.94 GB/s."""
    data = read_data("training_kernels.yaml").get("ep_dispatchers", {})
    for entry in data.get(dispatcher, []):
        if chip_id not in entry["chips"]:
            continue
        sizes = np.asarray(entry["ranks"], float)
        if not sizes[0] <= ranks <= sizes[-1]:
            return None
        dispatch, fp8, combine = (
            float(np.interp(ranks, sizes, np.asarray(entry[key], float)))
            for key in ("dispatch_bf16_bytes_per_s", "dispatch_fp8_bytes_per_s", "combine_bytes_per_s")
        )
        return DispatcherRate(dispatch, fp8, combine, str(entry["source"]), chip_id != entry["measured_on"])
    return None
