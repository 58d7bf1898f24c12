"""Training kernels: each operator's backward as the kernels that run it, and the passes only
training has (expert permute and unpermute, the loss, the element-wise activations, the
optimizer step), each timed on the chip's curves.

The forward of every operator is serving's (:mod:`rackmath.core.operators`, measured tables).
The kernel tables hold forward calls only (aiconfigurator-core 0.12 ships no backward
table: no dgrad, wgrad or backward phase in any of its tables), so a backward is either the
same curve read at the backward kernel's own shape, or a stated ratio with its source:

==================  ================================  =========================================
operator class      input gradient (dgrad)            weight gradient (wgrad)
==================  ================================  =========================================
GEMM ``Y = X W^T``  ``dX = dY W``: an ``m x k x n``   ``dW = dY^T X``: an ``n x k x m`` GEMM, its
(``m x n x k``)     GEMM on the forward's curve        reduction over the ``m`` tokens, on the
                    (rows m, cols k, depth n)          forward's curve (rows n, cols k, depth m)
grouped experts     m-grouped, as the forward, at      k-grouped (each expert's reduction over its
(tokens/expert      (tokens/expert, h, I): the same    own tokens): the forward's time over
x I x h)            kernel in the NN layout            :data:`GROUPED_WGRAD_THROUGHPUT_RATIO`
attention core      ``r_F / r_E`` x the forward time   none (no weights)
norms, embedding,   2 x the forward (read the saved    none
activations, casts  input and the output gradient,
                    write the input gradient)
==================  ================================  =========================================

* Attention backward FLOPs: FlashAttention stores only ``O`` and the row log-sum-exp, so
  its backward recomputes ``S = Q K^T`` and then runs ``dV = P^T dO``, ``dP = dO V^T``,
  ``dQ = dS K``, ``dK = dS^T Q``: ``r_F = (3 d_qk + 2 d_v) / (d_qk + d_v)`` of the forward's
  ``2 (d_qk + d_v)`` FLOPs per score (:func:`attention_backward_flop_ratio`: 2.5 for equal
  head dims, Shah et al. 2024 "FlashAttention-3" §4.1, and the ``2.5 f`` of
  ``Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py``; 2.6 for MLA's 192/128).
* Its efficiency: the backward reaches ``r_E`` of the forward's FLOP/s on the same shape
  (``catalog/data/training_kernels.yaml``, by chip: H100 FA3 hd128 at 8K-16K 559-561 against
  646-648 TFLOP/s = 0.866; B200 cuDNN BF16 causal GQA at 8K-128K 0.79), so its time is
  ``r_F / r_E`` of the forward's: 2.89 on Hopper, 3.16 on Blackwell. The pure roofline has
  ``r_E = 1``.
* Grouped wgrad: DeepGEMM's k-grouped FP8 wgrad (PR #95, H800: 939, 900, 1044 and 1033
  TFLOP/s at 4 groups of 4096 and 8192 tokens) against its m-grouped forward on the same
  matrices (README: 1346 and 1214 TFLOP/s): 0.698, 0.741, 0.776 and 0.851, mean 0.77. The pure
  roofline takes 1.
* Split accumulation (:func:`slower`): on Hopper, the per-tensor FP8 recipes run dgrad and
  wgrad with full-precision (split) accumulation where the forward, and the curve, accumulate
  fast; every backward GEMM, dense and grouped, takes the chip's measured split / fast ratio
  (``catalog/data/training_kernels.yaml`` ``fp8_split_accumulation``: 1.031 on an H100 SXM,
  1.030 on an H200, medians over 100 training-size GEMMs). The pure roofline takes 1.
* Compute beside hidden traffic (:func:`overlap_interference_s`): a GPU's collectives and
  sends run on its SMs, so compute overlapped with them runs 1.189x slower (Lee et al. 2025, arXiv
  2507.03114v1: the average over A100, H100, MI250 and MI210; ``training_kernels.yaml``
  ``overlap_compute_slowdown``); ``h`` hidden seconds cost ``h (1 - 1/1.189)``.

Worked numbers (tests recompute them): a GEMM of 4096 x 14336 x 4096 runs its wgrad as a
14336 x 4096 x 4096 GEMM (rows 14336, depth 4096 tokens); attention with ``d_qk = d_v =
128`` has ``r_F = 2.5`` and on an H100 takes 2.5 / 0.866 = 2.887 x its forward time; an
expert forward of 10 ms has a wgrad of 10 / 0.77 = 12.99 ms kernel-grounded, 10 ms pure.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import operators as ops
from rackmath.core import training as tr
from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates
from rackmath.core.numeric import maximum, num
from rackmath.specs.efficiency import OpClass
from rackmath.specs.precision import Precision

FloatArray = NDArray[np.float64]

#: k-grouped (wgrad) over m-grouped (forward) throughput of the same expert matrices:
#: DeepGEMM PR #95's grouped wgrad (939, 900, 1044, 1033 TFLOP/s, H800 FP8, 4 groups of
#: 4096 / 8192 tokens; quoted in DeepGEMM issue #107) over its README's m-grouped contiguous
#: forward (1346 for N 4096 K 7168, 1214 for N 7168 K 2048): mean of the four ratios.
GROUPED_WGRAD_THROUGHPUT_RATIO = 0.77

#: Bytes per value of the element-wise training passes (bf16 activations).
VALUE_BYTES = 2.0


def attention_backward_flop_ratio(d_qk: ArrayLike, d_v: ArrayLike) -> FloatArray:
    """Backward over forward FLOPs of a FlashAttention core: ``(3 d_qk + 2 d_v) / (d_qk + d_v)``
    (5 matmuls against 2, ``S = Q K^T`` recomputed; see the module docstring). Worked numbers:
    128/128 -> 2.5; MLA 192/128 -> 2.6."""
    q, v = num(d_qk), num(d_v)
    return np.asarray((3.0 * q + 2.0 * v) / (q + v), float)[()]


class Backward(NamedTuple):
    """One operator's backward: input and weight gradients (seconds, every call together),
    the kernels they ran on, and how they were timed."""

    input_grad: ops.Operator | None
    weight_grad: ops.Operator | None
    input_grad_s: FloatArray
    weight_grad_s: FloatArray
    how: str


def _retimed(op: ops.Operator, rates: ChipRates, work: wk.Work, name: str) -> ops.Operator:
    formats, kind = op.curve_key
    return ops.timed(name, op.op_class, rates, work, formats, kind)


def _scaled(op: ops.Operator, k: float | FloatArray) -> ops.Operator:
    return op._replace(
        compute_s=op.compute_s * k, memory_s=op.memory_s * k, time_s=op.time_s * k, latency_s=op.latency_s * k
    )


def gemm_backward(op: ops.Operator, rates: ChipRates) -> Backward:
    """A GEMM's dgrad ``(m, k, n)`` and wgrad ``(n, k, m)`` on the forward's curve, each with the
    forward's FLOPs and bytes (the dgrad reads ``dY`` and ``W`` and writes ``dX``; the wgrad
    reads ``dY`` and ``X`` and writes ``dW``, the weight's size). An operator without its work
    (built elsewhere) takes the forward's time for each."""
    w = op.work
    if w is None or w.cols is None or w.depth is None:
        return Backward(None, None, op.time_s, op.time_s, "dgrad = wgrad = forward")
    dgrad = _retimed(op, rates, w._replace(cols=w.depth, depth=w.cols), f"{op.name}.dgrad")
    wgrad = _retimed(op, rates, w._replace(rows=w.cols, cols=w.depth, depth=w.rows), f"{op.name}.wgrad")
    return Backward(
        dgrad, wgrad, dgrad.time_s, wgrad.time_s, "dgrad (m,k,n), wgrad (n,k,m) on the GEMM curve"
    )


def slower(b: Backward, slowdown: float) -> Backward:
    """``b`` with its kernels ``slowdown`` times longer (the backward GEMMs' split
    accumulation on Hopper per-tensor FP8: :class:`rackmath.core.training_step.BackwardModel`).
    Worked number: a 10 ms dgrad at 1.031 takes 10.31 ms."""
    if slowdown == 1.0:
        return b
    dgrad, wgrad = (None if o is None else _scaled(o, slowdown) for o in (b.input_grad, b.weight_grad))
    return Backward(
        dgrad,
        wgrad,
        b.input_grad_s * slowdown,
        b.weight_grad_s * slowdown,
        f"{b.how}; split accumulation x{slowdown:g}",
    )


def grouped_forward(op: ops.Operator, rates: ChipRates) -> ops.Operator:
    """The grouped expert GEMM alone, without the permute and finalize pass the serving
    curve carries (training runs them as their own kernels, :func:`permute_operators`)."""
    w = op.work
    if w is None or w.routed is None:
        return op
    return _retimed(op, rates, w._replace(routed=None), op.name)


def grouped_backward(op: ops.Operator, rates: ChipRates, wgrad_ratio: float) -> Backward:
    """A grouped expert GEMM's backward: the m-grouped dgrad at ``(tokens/expert, h, I)`` on the
    forward's curve, and the k-grouped wgrad at the forward's time over ``wgrad_ratio``
    (:data:`GROUPED_WGRAD_THROUGHPUT_RATIO`; 1 on the pure roofline). ``op`` is the grouped
    GEMM alone (:func:`grouped_forward`)."""
    w = op.work
    if w is None or w.cols is None or w.depth is None:
        return Backward(None, None, op.time_s, op.time_s, "dgrad = wgrad = forward")
    dgrad = _retimed(op, rates, w._replace(cols=w.depth, depth=w.cols), f"{op.name}.dgrad")
    ratio = 1.0 if _pure(op, rates) else wgrad_ratio
    wgrad = _scaled(op, 1.0 / ratio)._replace(name=f"{op.name}.wgrad")
    return Backward(
        dgrad, wgrad, dgrad.time_s, wgrad.time_s, f"m-grouped dgrad; k-grouped wgrad at {ratio:g} of forward"
    )


def attention_backward(
    op: ops.Operator, rates: ChipRates, flop_ratio: float, efficiency_ratio: float
) -> Backward:
    """The attention core's backward: ``flop_ratio / efficiency_ratio`` x its forward time
    (:func:`attention_backward_flop_ratio`; the efficiency ratio 1 on the pure roofline)."""
    eff = 1.0 if _pure(op, rates) else efficiency_ratio
    bwd = _scaled(op, flop_ratio / eff)._replace(name=f"{op.name}.backward")
    zero = 0.0 * op.time_s
    return Backward(
        bwd, None, bwd.time_s, zero, f"{flop_ratio:.3g}x FLOPs at {eff:.3g} of the forward's rate"
    )


def _pure(op: ops.Operator, rates: ChipRates) -> bool:
    formats, kind = op.curve_key
    return rates.curve(op.op_class, formats, kind).pure if formats else True


def elementwise(
    name: str, bytes_moved: ArrayLike, rows: ArrayLike, calls: ArrayLike, rates: ChipRates
) -> ops.Operator:
    """A memory-bound bf16 pass of ``bytes_moved`` bytes over ``calls`` launches on the chip's
    element-wise curve."""
    return ops.timed(
        name, OpClass.ELEMENTWISE, rates, wk.elementwise(bytes_moved, rows, calls), ("bfloat16",)
    )


def permute_bytes(tokens: ArrayLike, hidden: ArrayLike, experts_per_token: ArrayLike) -> FloatArray:
    """HBM bytes of one expert permute (or unpermute) per MoE layer in the forward:
    ``(1 + k) T h b``. Megatron-core's ``permute`` gathers the ``T`` tokens (``T h`` read) into
    expert order (``T k h`` written); ``unpermute`` reads the ``T k h`` expert outputs and
    scatter-adds them back (``T h`` written), weighted by the routing probabilities
    (``megatron/core/transformer/moe/moe_utils.py``, ``permute`` / ``unpermute``).
    The backward mirrors each (a scatter-add and a gather). Worked number: 4096 tokens, h 2048,
    k 8, bf16: 9 x 4096 x 2048 x 2 = 151 MB."""
    return np.asarray((1.0 + num(experts_per_token)) * num(tokens) * num(hidden) * VALUE_BYTES, float)[()]


def permute_operators(
    tokens: ArrayLike,
    hidden: ArrayLike,
    experts_per_token: ArrayLike,
    moe_layers: ArrayLike,
    rates: ChipRates,
) -> tuple[ops.Operator, ops.Operator]:
    """The expert permute and unpermute of one micro-batch on one chip (``moe_layers`` each),
    :func:`permute_bytes` each."""
    b = permute_bytes(tokens, hidden, experts_per_token) * num(moe_layers)
    return (
        elementwise("permute", b, tokens, moe_layers, rates),
        elementwise("unpermute", b, tokens, moe_layers, rates),
    )


#: Bytes per logit the loss moves in the forward and in the backward: a fused cross-entropy
#: (Transformer Engine / Apex, Megatron-Bridge's ``cross_entropy_loss_fusion``) reads the bf16
#: logits once in the forward (2) and once more to write their bf16 gradient (2 + 2); the
#: unfused vocab-parallel loss (Megatron-core's default, eager PyTorch) casts to fp32 (2 read,
#: 4 written) and runs max, subtract, exp, sum and the target pick as fp32 passes (4 reads and
#: 2 writes of 4 B: 24, so 30 in all, counted from ``vocab_parallel_cross_entropy``), then
#: reads the probabilities and writes the gradient (4 + 4) and casts it (4 + 2) in the backward.
LOSS_BYTES_PER_LOGIT: dict[bool, tuple[float, float]] = {True: (2.0, 4.0), False: (30.0, 14.0)}


def loss_operator(
    tokens: ArrayLike, vocab_per_chip: ArrayLike, fused: bool, rates: ChipRates
) -> tuple[ops.Operator, FloatArray]:
    """The cross-entropy loss over the logits of one micro-batch on one chip
    (:data:`LOSS_BYTES_PER_LOGIT`): the forward operator and the backward's seconds.
    Worked number: 8192 tokens x 16,032 logits fused: 263 MB forward, 525 MB backward."""
    fwd_b, bwd_b = LOSS_BYTES_PER_LOGIT[bool(fused)]
    logits = num(tokens) * num(vocab_per_chip)
    op = elementwise("loss", logits * fwd_b, tokens, 1.0, rates)
    return op, np.asarray(op.time_s * (bwd_b / fwd_b), float)[()]


def mtp_projection(
    tokens: ArrayLike,
    hidden: float,
    tp: ArrayLike,
    modules: ArrayLike,
    rates: ChipRates,
    precision: Precision,
    weight_bytes_per_param: float,
) -> ops.Operator:
    """The projections of ``modules`` MTP modules over one micro-batch on one chip: each maps
    the normed hidden state and the next token's normed embedding, concatenated (``2h``), to
    ``h`` (DeepSeek-V3 §2.2, the matrix ``M_k``; Megatron-LM's ``eh_proj``, column-parallel
    over ``tp``): a GEMM of ``2h x h / tp`` per module, in ``precision`` (the format the other
    projections run in). Worked number: 4096 tokens, h 7168, tp 1, one module:
    2 x 4096 x 2 x 7168^2 = 842 GFLOP."""
    h, t = float(hidden), num(tp)
    formats, activation_bytes = rates.gemm(precision)
    work = wk.gemm(
        tokens,
        num(modules) * tr.mtp_projection_params(h) / t,
        h / t,
        2.0 * h,
        weight_bytes_per_param=weight_bytes_per_param,
        activation_bytes=activation_bytes,
        in_values=2.0 * h,
        out_values=h / t,
        calls=modules,
    )
    return ops.timed("mtp_projection", OpClass.GEMM, rates, work, formats)


def activation_values(
    hidden: float,
    rope_width: float,
    mlp_width: float,
    gated: bool,
    *,
    fused: bool,
) -> float:
    """Values one token moves per layer through the element-wise kernels between the GEMMs
    (forward; the backward is twice, as every element-wise pass):

    * the MLP activation: gated (SwiGLU) reads gate and up and writes their product, ``3 I``
      fused (Megatron's bias-SwiGLU fusion, ``torch.compile``), ``5 I`` eager (``silu``
      reads and writes ``I``, the product reads ``2 I`` and writes ``I``); non-gated (GELU)
      ``2 I`` either way;
    * the two residual adds: each reads two streams and writes one, ``2 x 3 h``;
    * rotary embeddings on Q and K: read and write ``q + k`` widths, once fused, three times
      eager (torchtitan's complex multiply: view, multiply, cast back).

    ``I``, ``h`` and ``rope_width`` are the widths on one chip (divided by TP as the GEMMs
    split them). Worked number (Llama 3.1 8B, one chip: h 4096, I 14336 gated, q + k = 5120):
    fused 3 x 14336 + 6 x 4096 + 2 x 5120 = 77,824 values; eager 112,000."""
    mlp = (3.0 if fused else 5.0) * mlp_width if gated else 2.0 * mlp_width
    rope = (2.0 if fused else 6.0) * rope_width
    return float(mlp + 6.0 * hidden + rope)


def optimizer_operator(state_bytes: ArrayLike, rows: ArrayLike, rates: ChipRates) -> ops.Operator:
    """The optimizer step as a memory-bound operator on the element-wise curve: every byte of
    model state the chip holds read once and written once (``2 x state_bytes``; a fused,
    multi-tensor Adam, one launch). ``rows`` is the parallel work (parameters over hidden).
    Worked number: 16 GB of states at 3.35 TB/s on the pure roofline -> 9.55 ms."""
    return elementwise("optimizer", 2.0 * num(state_bytes), maximum(num(rows), 1.0), 1.0, rates)


def ring_exposed_s(step_comm_s: float, step_compute_s: float, steps: float) -> float:
    """Exposed time of a ring exchange that overlaps each step's transfer with the block of
    compute the previous step made possible (ring attention: the KV chunk for step ``i + 1``
    travels while step ``i``'s block computes; the local block computes while the first chunk
    travels): ``steps x max(0, comm - compute)``. Liu et al. 2023 (Ring Attention) §3;
    Megatron-core's ``--cp-comm-type p2p``. Worked number: 7 steps of 2 ms transfer over 3 ms
    of compute: 0; over 1 ms: 7 ms."""
    return float(max(steps, 0.0) * max(0.0, step_comm_s - step_compute_s))


def sm_margin_slowdown(sms: ArrayLike, margin_sms: ArrayLike) -> FloatArray:
    """How much longer a compute-bound GEMM takes when a collective overlapped with it keeps
    ``margin_sms`` of the chip's ``sms`` streaming multiprocessors (Transformer Engine's
    userbuffers with ``set_sm_margin``: the GEMM is launched on ``sms - margin_sms`` SMs,
    ``transformer_engine/common/comm_gemm_overlap``): ``sms / (sms - margin_sms)``. Its
    throughput scales with the SMs it gets. Worked number: TE's default 16 SMs of an H100's
    132: 132 / 116 = 1.138."""
    n, m = num(sms), num(margin_sms)
    return np.asarray(n / (n - m), float)[()]


def overlap_interference_s(hidden_comm_s: ArrayLike, slowdown: ArrayLike) -> FloatArray:
    """Time a step loses to the compute slowed under a collective it hides. While ``h``
    seconds of communication run beside compute, the compute runs ``slowdown`` times slower
    (the collective's thread blocks hold part of the SMs), so it completes ``h / slowdown`` of
    its work in that window and the rest, ``h (1 - 1 / slowdown)``, is added after it. Worked
    number: 10 ms of hidden DP traffic at 1.189 (Lee et al. 2025's average) costs 1.590 ms."""
    return np.asarray(num(hidden_comm_s) * (1.0 - 1.0 / num(slowdown)), float)[()]


def tp_overlap_shares(matrices: float) -> dict[str, dict[str, float]]:
    """Which share of each training operator's forward, input gradient and weight gradient is
    the GEMM Transformer Engine overlaps a TP collective with (its names,
    :data:`rackmath.specs.training_framework.TP_OVERLAP_GEMMS`): ``attention_out`` is
    ``proj``; ``attention_qkv`` is ``qkv``; ``dense_mlp`` holds ``fc1`` (gate and up:
    ``(n - 1) / n`` of its FLOPs for ``n`` matrices) and ``fc2`` (down: ``1 / n``). Worked
    number: a SwiGLU MLP (3 matrices) runs fc2 in 1/3 of its forward, fc1 in 2/3 of its
    backward."""
    fc2 = 1.0 / matrices
    return {
        "attention_out": {"proj_fprop": 1.0},
        "attention_qkv": {"qkv_dgrad": 1.0, "qkv_wgrad": 1.0},
        "dense_mlp": {"fc2_fprop": fc2, "fc1_dgrad": 1.0 - fc2, "fc1_wgrad": 1.0 - fc2},
    }


def tp_overlap_slowdown(
    parts: dict[str, float], margins_sms: dict[str, int], sms: float, gemms: tuple[str, ...]
) -> float:
    """One pass of an operator whose ``parts`` (GEMM name -> share of the pass,
    :func:`tp_overlap_shares`) include the overlapped ``gemms``: each of those shares at
    :func:`sm_margin_slowdown` of its margin, the rest as before,
    ``sum_g w_g S / (S - m_g) + (1 - sum_g w_g)``. Worked number: a SwiGLU MLP's forward under
    TE's default 16-SM margin on fc2 on an H100: 2/3 + 1/3 x 132/116 = 1.046."""
    slowed = [(parts[g], float(sm_margin_slowdown(sms, margins_sms.get(g, 0)))) for g in gemms if g in parts]
    return sum(w * f for w, f in slowed) + (1.0 - sum(w for w, _ in slowed))
