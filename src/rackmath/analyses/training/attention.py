"""The attention core of a training step as the framework's kernel runs it.

Serving's fitted context-attention curve (TensorRT-LLM's FMHA, from the kernel tables) times
the forward; a training framework may run another kernel. Megatron-core and Megatron-Bridge run
Transformer Engine's FusedAttention, cuDNN's fused kernels, on Hopper and Blackwell (TE's
``get_attention_backend`` prefers it over FlashAttention on compute capability 9.0 and above;
FP8 attention runs on it only), and cuDNN's own training benchmark measures their forward and
backward rates by sequence length (``catalog/data/training_kernels.yaml`` ``attention_tables``):
the step times them from that table, forward and backward each on its own measured curve.
Other kernels (FlashAttention-2) are the fitted curve times a published rate ratio. Where a
kernel has no table for the chip, format and head dimensions, the fitted curve runs and the
operator's kernel says why (``fallback``). Kernel-grounded only: the pure roofline and the flat
tables run every kernel at one fraction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from rackmath.analyses.training.setup import TrainingSetup, fp8_attention_format
from rackmath.catalog import training_frameworks as tf
from rackmath.catalog.loader import chip as catalog_chip
from rackmath.core import training_kernels as tk
from rackmath.core import training_step as ts
from rackmath.specs.efficiency import EfficiencyMode, Kernel

#: The table's format names as the kernel reports state them (cuDNN's benchmark says
#: ``bfloat16``, as the serving kernel tables do).
TABLE_FORMATS = {"bf16": "bfloat16"}


def attention_kernel(
    s: TrainingSetup, train_ops: tuple[ts.TrainingOperator, ...], head_dims: tuple[float, float]
) -> tuple[ts.TrainingOperator, ...]:
    """The attention core as the framework's kernel runs it (kernel-grounded only: the pure
    roofline and the flat tables run every kernel at one fraction).

    * A kernel with a measured training table on this chip, format and head dimensions
      (:func:`measured_attention`, cuDNN's fused attention under Transformer Engine): the
      forward at ``F / R_f(s)`` and the backward at ``r_F F / R_b(s)`` for the forward's FLOPs
      ``F``, the backward/forward FLOP ratio ``r_F`` and the table's rates at the sequence
      length each rank attends over, ``s / cp``; a recompute re-runs the forward.
    * Otherwise the fitted curve's forward (and its recompute) and backward times the kernel's
      ratios (:func:`rackmath.catalog.training_frameworks.attention_kernel_ratio`)."""
    if s.efficiency.mode is not EfficiencyMode.KERNEL:
        return train_ops
    fmt = fp8_attention_format(s.profile, s.recipe) or "bf16"
    measured = measured_attention(s, fmt, head_dims)
    if measured is not None:
        flop_ratio = float(tk.attention_backward_flop_ratio(*head_dims))
        seq_len = s.seq_len / s.plan.cp
        return tuple(
            _on_table(o, measured, seq_len, flop_ratio, s.profile.attention_kernel)
            if o.op_class.value.startswith("attention")
            else o
            for o in train_ops
        )
    if s.profile.attention_kernel == tf.CUDNN_ATTENTION:
        dims = f"{head_dims[0]:g}/{head_dims[1]:g}"
        reason = f"no {tf.CUDNN_ATTENTION} table for {s.system.chip.id}, {fmt}, head dims {dims}"
        return tuple(
            replace(o, kernel=replace(o.kernel, fallback=reason))
            if o.op_class.value.startswith("attention") and o.kernel is not None
            else o
            for o in train_ops
        )
    k = s.attention_kernel
    if k is None or (k.forward == 1.0 and k.backward == 1.0):
        return train_ops
    return tuple(
        replace(
            o,
            forward_s=o.forward_s * k.forward,
            recompute_s=o.recompute_s * k.forward,
            input_grad_s=o.input_grad_s * k.backward,
        )
        if o.op_class.value.startswith("attention")
        else o
        for o in train_ops
    )


class MeasuredAttention(NamedTuple):
    """A measured training table on the chip that runs it: its rates times ``peak_ratio`` (the
    chip's peak over the table chip's at the core's format; 1 on that chip itself)."""

    table: tf.AttentionTable
    peak_ratio: float
    fmt: str
    transferred: bool


def measured_attention(
    s: TrainingSetup, fmt: str, head_dims: tuple[float, float]
) -> MeasuredAttention | None:
    """The framework's attention kernel's measured training table for this run; None where the
    kernel has no table for the chip, the core's format ``fmt`` (``bf16``, or ``fp8`` / ``mxfp8``
    under FP8 dot-product attention) and the model's head dimensions."""
    dims = (round(head_dims[0]), round(head_dims[1]))
    table = tf.attention_table(s.system.chip.id, s.profile.attention_kernel, fmt, dims)
    if table is None:
        return None
    core = s.attention_core_precision
    transferred = table.measured_on != s.system.chip.id
    ratio = 1.0
    if transferred:
        ratio = s.system.chip.peak_flops_per_s[core] / catalog_chip(table.measured_on).peak_flops_per_s[core]
    return MeasuredAttention(table, ratio, fmt, transferred)


def _on_table(
    o: ts.TrainingOperator, m: MeasuredAttention, seq_len: float, flop_ratio: float, kernel_name: str
) -> ts.TrainingOperator:
    """One attention operator timed on a measured training table (:func:`attention_kernel`)."""
    fwd_rate, bwd_rate = (r * m.peak_ratio for r in m.table.rates_at(seq_len))
    forward_s = o.forward_flops / fwd_rate
    share = o.recompute_s / o.forward_s if float(o.forward_s) > 0 else 0.0
    kernel = Kernel(
        table=m.table.source + (f" x {m.peak_ratio:.3g} (the peak ratio)" if m.transferred else ""),
        fmt=TABLE_FORMATS.get(m.fmt, m.fmt),
        kind=o.kernel.kind if o.kernel is not None else "",
        chip=m.table.measured_on,
        transferred=m.transferred,
    )
    return replace(
        o,
        forward_s=forward_s,
        recompute_s=share * forward_s,
        input_grad_s=flop_ratio * o.forward_flops / bwd_rate,
        kernel=kernel,
        input_grad_kernel=kernel,
        backward=f"{flop_ratio:.3g}x FLOPs on {kernel_name}'s measured backward",
    )
