"""A training micro-batch as operators: forward, input gradient, weight gradient, recompute.

The forward operators are serving's (:func:`rackmath.core.operators.pass_operators` on a
prefill-shaped load of one micro-batch), plus the passes only training runs (expert permute
and unpermute, the loss, the element-wise activations: :mod:`rackmath.core.training_kernels`);
each keeps its own roofline, precision and efficiency. Training adds, per operator (``f`` =
its forward time on one chip; each backward kernel in :mod:`rackmath.core.training_kernels`):

====================  ==========================  =====================  =====================
operator class        input gradient              weight gradient        recompute (policy)
====================  ==========================  =====================  =====================
gemm                  dgrad ``(m, k, n)`` on the  wgrad ``(n, k, m)`` on  ``gemm`` share x ``f``
                      GEMM curve                  the GEMM curve
moe (grouped)         m-grouped dgrad             ``f / 0.77`` k-grouped  ``gemm`` share x ``f``
attention core        ``r_F / r_E f`` (2.5 / the  0                      ``attention`` share
                      chip's backward rate)                              x ``f``
element-wise, casts   ``2 f`` (the loss: its own  0                      ``elementwise`` share
                      backward bytes)                                    x ``f``
====================  ==========================  =====================  =====================

* A GEMM ``Y = X W`` has two backward GEMMs of its FLOPs: ``dX = dY W^T`` (input gradient,
  on the pipeline's critical path) and ``dW = X^T dY`` (weight gradient, which zero-bubble
  schedules defer), each at its own shape on the forward's curve. On the pure roofline (no
  shape effect) each takes ``f``: the "backward = 2 x forward" rule (Kaplan et al. 2020
  §2.1), split as Qi et al. 2023 split it.
* The attention core has no weights; its FlashAttention backward recomputes ``Q K^T``: 2.5 x
  the forward FLOPs for equal head dims (FA3 §4.1), at the chip's measured backward rate.
* Norms, the embedding lookup, activations and casts are memory-bound; their backward reads
  the saved input and the output gradient and writes the input gradient: ``2 f``.
* Recompute (Korthikanti et al. 2022 §5) by :class:`RecomputeShares`: ``none`` 0;
  ``selective`` re-runs the attention core's forward; ``full`` (and ``sqrt``,
  ``reversible``) re-runs every forward operator; a framework's own policies state their
  shares (``catalog/data/training_frameworks.yaml``).

Low-precision GEMMs (:class:`GemmRecipe`) compute at the FP8 or FP4 peak but must quantise
their inputs: each GEMM's input activations in the forward and its output gradients in the
backward, a memory-bound ``casts`` operator timed by :func:`cast_bytes` as Transformer
Engine's quantizers run (a BF16 read, one more under current scaling, one quantised copy per
usage the chip cannot share, none where the producing kernel quantises). Attention, norms and casts
stay in BF16; their FLOPs run at the BF16 peak (``ChipRates.attention_flops_per_s``). So do
the output head and the router's gating GEMM (:data:`HIGH_PRECISION_GEMMS`): DeepSeek-V3
§3.3 keeps "the embedding module, the output head, MoE gating modules, normalization
operators, and attention operators" in their original precision, and Megatron-LM's FP8
(Transformer Engine) quantises the linear layers inside the transformer blocks only; the
caller gives them at the BF16 peak and they add no casts.

Routing skew ``k >= 1`` stretches the routed-expert operator on the busiest expert rank by
``k`` (at training token counts the expert GEMMs are compute-bound, so time scales with the
tokens routed there). The auxiliary router cost (softmax over the ``E`` logits in fp32,
top-k and the load-balance loss) is an elementwise operator of
``ROUTER_AUX_BYTES_PER_LOGIT`` bytes per token per expert per MoE layer.

Worked number (a test recomputes it): a GEMM of 1 GFLOP at 1 PFLOP/s (pure roofline,
compute-bound) gives forward 1 us, input gradient 1 us, weight gradient 1 us, and with full
recompute 1 us more: 4 us per micro-batch; the attention core of 1 GFLOP at the BF16 peak
of 0.5 PFLOP/s gives 2 + 5 us (2.5 x the FLOPs), plus 2 us recomputed under ``selective`` or
``full``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import operators as ops
from rackmath.core import training_kernels as tk
from rackmath.core.chip_rates import ChipRates
from rackmath.errors import UnknownIdError
from rackmath.specs import efficiency as seff
from rackmath.specs.efficiency import Kernel
from rackmath.specs.precision import FORMATS, Precision, gemm_formats

FloatArray = NDArray[np.float64]

#: GEMMs that stay in BF16 under every low-precision recipe (the output head and the MoE
#: gate; see the module docstring)
HIGH_PRECISION_GEMMS = ("lm_head", "router")

#: fp32 bytes the router's auxiliary work moves per token per expert per MoE layer: write the
#: logits, read them into the softmax and write the probabilities (3 x 4 B); the top-k and the
#: load-balance loss read the probabilities once more, counted in the same 4 B passes.
ROUTER_AUX_BYTES_PER_LOGIT = 16.0


class RecomputeShares(NamedTuple):
    """Shares of each forward a recompute policy re-runs before the backward: the attention
    core, the GEMMs (and grouped experts), the element-wise passes."""

    attention: float = 0.0
    gemm: float = 0.0
    elementwise: float = 0.0


#: rackmath's recompute modes as shares (Korthikanti et al. 2022 §5: selective re-runs the
#: attention core; full, sqrt and reversible re-run every forward operator).
RECOMPUTE_SHARES: dict[str, RecomputeShares] = {
    "none": RecomputeShares(),
    "selective": RecomputeShares(1.0, 0.0, 0.0),
    "full": RecomputeShares(1.0, 1.0, 1.0),
    "sqrt": RecomputeShares(1.0, 1.0, 1.0),
    "reversible": RecomputeShares(1.0, 1.0, 1.0),
}


class BackwardModel(NamedTuple):
    """How the backward kernels are timed (:mod:`rackmath.core.training_kernels`): the attention
    core's backward FLOPs over its forward's and its backward FLOP/s over its forward's, the
    k-grouped expert wgrad's throughput over the forward's, each element-wise pass's
    backward over its forward (2 unless named: the loss), and the backward GEMMs' (dense and
    grouped dgrad and wgrad) time over their curve's where they accumulate split (Hopper
    per-tensor FP8; 1 elsewhere and on the pure roofline)."""

    attention_flop_ratio: float = 2.5
    attention_efficiency_ratio: float = 1.0
    grouped_wgrad_ratio: float = tk.GROUPED_WGRAD_THROUGHPUT_RATIO
    elementwise_backward: tuple[tuple[str, float], ...] = ()
    gemm_backward_slowdown: float = 1.0


class GemmRecipe(StrEnum):
    """How the GEMMs of a training step compute and what their quantisation costs."""

    BF16 = "bf16"
    FP16 = "fp16"
    #: FP8 with one scale per tensor (Transformer Engine delayed scaling, Micikevicius et al. 2022)
    FP8 = "fp8"
    #: FP8 with one scale per tensor from the tensor's own amax, computed before the cast
    #: (Transformer Engine ``Float8CurrentScaling``, Megatron's ``fp8-cs``; torchao's dynamic
    #: "tensorwise" float8)
    FP8_CURRENT = "fp8-current"
    #: FP8 with one fp32 scale per 1x128 activation tile (DeepSeek-V3 report §3.3.2)
    FP8_BLOCK = "fp8-block"
    #: OCP MX FP8: one E8M0 scale byte per 32 elements (OCP Microscaling Formats v1.0, 2023)
    MXFP8 = "mxfp8"
    #: NVIDIA NVFP4: 4-bit elements, one FP8 E4M3 scale per 16 (Blackwell; NVIDIA 2025)
    NVFP4 = "nvfp4"

    @classmethod
    def parse(cls, text: str | GemmRecipe | Precision) -> GemmRecipe:
        if isinstance(text, GemmRecipe):
            return text
        key = str(text.value if isinstance(text, Precision) else text).strip().lower()
        try:
            return cls(key)
        except ValueError:
            raise UnknownIdError("GEMM recipe (compute precision)", text, [r.value for r in cls]) from None

    @property
    def precision(self) -> Precision:
        """The GEMMs' operand format (its compute class is the peak they run at)."""
        return Precision.FP8 if self is GemmRecipe.FP8_CURRENT else Precision(self.value)

    @property
    def current_scaling(self) -> bool:
        """Whether each cast first reduces its tensor's amax (one more read of it)."""
        return self is GemmRecipe.FP8_CURRENT

    @property
    def block_scaled(self) -> bool:
        """Scales per block of values: the row-wise and the column-wise (transposed) use of a
        tensor need their own quantised copies, whatever the chip."""
        return self in (GemmRecipe.FP8_BLOCK, GemmRecipe.MXFP8, GemmRecipe.NVFP4)

    @property
    def quantised_bytes_per_value(self) -> float:
        """Bytes one quantised copy of a value takes: the element and its share of a scale, as
        the recipe's kernel format reads it (:data:`rackmath.specs.precision.FORMATS`); 0 for
        16-bit GEMMs (nothing to cast). fp8: 1; fp8-block and mxfp8: 1 + 1/32; nvfp4: 0.5625."""
        if self.precision.is_wide:
            return 0.0
        fmt = gemm_formats(self.precision, self.precision)[0]
        return FORMATS[fmt].activation_bytes


def cast_bytes(
    recipe: GemmRecipe, values: ArrayLike, producer_quantised: ArrayLike = 0.0, *, columnwise_copy: bool
) -> tuple[FloatArray, FloatArray]:
    """HBM bytes the casts of one micro-batch move, forward and backward, for ``values`` GEMM
    input values (the output gradients are counted as many):

        forward  = 2 v (1 + c) - 2 n + k q v
        backward = 2 v (1 + c)       + k q v

    * ``2 v``: the quantize kernel reads each BF16 value once;
    * ``c = 1`` under current scaling: a separate amax kernel reads the tensor first (Transformer
      Engine ``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax`` then
      ``nvte_quantize_v2``, ``transformer_engine/pytorch/csrc/quantizer.cpp``); delayed and
      block scaling take the amax inside the cast;
    * ``k`` quantised copies of ``q`` bytes a value (:attr:`GemmRecipe.quantised_bytes_per_value`):
      2 where the backward's column-wise use needs its own tensor (``columnwise_copy``: every
      block-scaled recipe, and per-tensor FP8 on Hopper and Ada, whose FP8 GEMMs read both
      operands K-major: Transformer Engine, "Performance considerations", Handling transposes),
      else 1 (one FP8 tensor serves both uses on Blackwell);
    * ``n`` of the forward values are quantised by the kernel that produces them (Transformer
      Engine's ``LayerNormLinear`` norm before a dense block's QKV and first MLP projections; a
      fused grouped MLP's FC1 epilogue for FC2): no BF16 read for those under delayed or block
      scaling; under current scaling the producer reduces the amax (``quantize_with_amax``)
      but the cast still reads its BF16 output.

    Worked numbers (bytes per value, ``n = 0``): fp8 on a B200 3; fp8 on an H100 4; fp8-current
    on an H100 6; mxfp8 4.0625; fp8-current on an H100 with every value producer-quantised:
    forward 4, backward 6.
    """
    v, n = np.asarray(values, float), np.asarray(producer_quantised, float)
    if recipe.precision.is_wide:
        return np.zeros_like(v), np.zeros_like(v)
    read = ops.ACTIVATION_BYTES * v * (2.0 if recipe.current_scaling else 1.0)
    written = (2.0 if columnwise_copy else 1.0) * recipe.quantised_bytes_per_value * v
    return np.asarray(read - ops.ACTIVATION_BYTES * n + written), np.asarray(read + written)


def producer_quantised_values(
    forward: tuple[ops.Operator, ...], fused_norm: bool, fused_grouped_mlp: bool, *, gqa: bool
) -> float:
    """GEMM input values the kernel producing them quantises (no cast pass reads them,
    :func:`cast_bytes`' ``n``): with ``fused_norm`` (Transformer Engine's ``LayerNormLinear``)
    a GQA block's QKV inputs and a dense MLP's ``h`` of its ``h + I/tp`` (the work's depth and
    cols); with ``fused_grouped_mlp`` the routed experts' ``I`` of ``h + I``, which FC1's fused
    SwiGLU epilogue writes in MXFP8, row- and column-wise scaled (TE
    ``ops/fused/forward_grouped_mlp.py``: ``d_dtype`` float8_e4m3fn). Worked number: a dense
    MLP of h 4096, I 14336 reading 2,048 tokens x (4096 + 14336) values, fused: 2,048 x 4096."""
    total = 0.0
    for op in forward:
        w = op.work
        if fused_norm and gqa and op.name == "attention_qkv":
            total += float(op.input_values)
        elif w is None or w.cols is None or w.depth is None:
            continue
        elif fused_norm and op.name == "dense_mlp":
            total += float(op.input_values * w.depth / (w.depth + w.cols))
        elif fused_grouped_mlp and op.name == "routed_experts":
            total += float(op.input_values * w.cols / (w.depth + w.cols))
    return total


@dataclass(frozen=True)
class TrainingOperator:
    """One operator of a training micro-batch on one chip (seconds; FLOPs of the forward)."""

    name: str
    op_class: seff.OpClass
    precision: str
    forward_flops: FloatArray
    forward_s: FloatArray
    input_grad_s: FloatArray
    weight_grad_s: FloatArray
    recompute_s: FloatArray
    bound: str
    #: the curve the forward ran on (:class:`~rackmath.specs.efficiency.Kernel`; None for the
    #: training-only passes: casts, router losses)
    kernel: Kernel | None = None
    #: the curves the input and weight gradients ran on (None where they are the forward's
    #: time scaled: element-wise passes, a stated ratio) and how the backward was timed
    input_grad_kernel: Kernel | None = None
    weight_grad_kernel: Kernel | None = None
    backward: str = ""

    @property
    def backward_s(self) -> FloatArray:
        return np.asarray(self.input_grad_s + self.weight_grad_s)

    @property
    def time_s(self) -> FloatArray:
        """Forward + input gradient + weight gradient + recompute."""
        return np.asarray(self.forward_s + self.input_grad_s + self.weight_grad_s + self.recompute_s)


def _elementwise(
    bytes_moved: FloatArray, rows: FloatArray, calls: float, rates: ChipRates
) -> tuple[FloatArray, FloatArray, FloatArray]:
    op = tk.elementwise("cast", bytes_moved, rows, calls, rates)
    return op.compute_s, op.memory_s, op.time_s


def _backward(op: ops.Operator, rates: ChipRates, model: BackwardModel) -> tuple[ops.Operator, tk.Backward]:
    """The forward as training runs it and its backward (:mod:`rackmath.core.training_kernels`)."""
    if op.op_class is seff.OpClass.GEMM:
        return op, tk.slower(tk.gemm_backward(op, rates), model.gemm_backward_slowdown)
    if op.op_class is seff.OpClass.MOE:
        fwd = tk.grouped_forward(op, rates)
        return fwd, tk.slower(
            tk.grouped_backward(fwd, rates, model.grouped_wgrad_ratio), model.gemm_backward_slowdown
        )
    if op.op_class in (seff.OpClass.ATTENTION_PREFILL, seff.OpClass.ATTENTION_DECODE):
        return op, tk.attention_backward(
            op, rates, model.attention_flop_ratio, model.attention_efficiency_ratio
        )
    factor = dict(model.elementwise_backward).get(op.name, 2.0)
    zero = 0.0 * np.asarray(op.time_s, float)
    return op, tk.Backward(
        None, None, factor * np.asarray(op.time_s, float), zero, f"{factor:g}x forward bytes"
    )


def training_operators(
    forward: tuple[ops.Operator, ...],
    rates: ChipRates,
    *,
    recompute: str | RecomputeShares,
    recipe: GemmRecipe | str = GemmRecipe.BF16,
    hidden: int,
    routing_skew: float = 1.0,
    tokens: float = 1.0,
    layers: float = 1.0,
    backward: BackwardModel = BackwardModel(),
    columnwise_copy: bool = False,
    producer_quantised_values: ArrayLike = 0.0,
) -> tuple[TrainingOperator, ...]:
    """The training operators of one micro-batch on one chip (see the module table).

    ``forward`` is :func:`rackmath.core.operators.pass_operators` of the micro-batch (plus any
    training-only element-wise passes); ``tokens`` and ``layers`` are the chip's tokens and
    layers (for the casts' rows and calls); ``routing_skew`` is the busiest expert rank's load
    over the mean; ``recompute`` a mode name or its :class:`RecomputeShares`; ``backward`` how
    each class's backward is timed (:class:`BackwardModel`); ``columnwise_copy`` and
    ``producer_quantised_values`` how the casts run (:func:`cast_bytes`).
    """
    rec = RECOMPUTE_SHARES[str(recompute)] if isinstance(recompute, str) else recompute
    recipe = GemmRecipe.parse(recipe)
    out: list[TrainingOperator] = []
    gemm_input_values: FloatArray = np.zeros(())
    attention_precision = "bf16" if recipe is not GemmRecipe.FP16 else "fp16"
    for raw in forward:
        op, bwd = _backward(raw, rates, backward)
        skew = routing_skew if op.name == "routed_experts" else 1.0
        f = np.asarray(op.time_s, float) * skew
        attention = op.op_class in (seff.OpClass.ATTENTION_PREFILL, seff.OpClass.ATTENTION_DECODE)
        matmul = op.op_class in (seff.OpClass.GEMM, seff.OpClass.MOE)
        share = rec.attention if attention else rec.gemm if matmul else rec.elementwise
        if matmul and op.name not in HIGH_PRECISION_GEMMS:
            gemm_input_values = gemm_input_values + op.input_values
            precision = recipe.precision.value
        elif attention and not rates.kv.is_wide:
            precision = rates.kv.value  # FP8 dot-product attention (the framework's setting)
        else:
            precision = attention_precision
        out.append(
            TrainingOperator(
                name=op.name,
                op_class=op.op_class,
                precision=precision,
                forward_flops=np.asarray(op.flops, float),
                forward_s=f,
                input_grad_s=np.asarray(bwd.input_grad_s, float) * skew,
                weight_grad_s=np.asarray(bwd.weight_grad_s, float) * skew,
                recompute_s=share * f,
                bound=str(np.asarray(op.bound).flat[0]),
                kernel=op.kernel,
                input_grad_kernel=None if bwd.input_grad is None else bwd.input_grad.kernel,
                weight_grad_kernel=None if bwd.weight_grad is None else bwd.weight_grad.kernel,
                backward=bwd.how,
            )
        )
        if op.name == "router":
            logits = np.asarray(op.flops, float) / (2.0 * hidden)  # tokens x experts x MoE layers
            aux = _elementwise(logits * ROUTER_AUX_BYTES_PER_LOGIT, np.asarray(tokens), layers, rates)[2]
            out.append(
                TrainingOperator(
                    "router_aux",
                    seff.OpClass.ELEMENTWISE,
                    "fp32",
                    np.zeros(()),
                    aux,
                    2 * aux,
                    0 * aux,
                    rec.elementwise * aux,
                    "memory",
                    backward="2x forward bytes",
                )
            )
    if not recipe.precision.is_wide:
        forward_bytes, backward_bytes = cast_bytes(
            recipe, gemm_input_values, producer_quantised_values, columnwise_copy=columnwise_copy
        )
        rows = np.asarray(tokens)
        cast = _elementwise(forward_bytes, rows, layers, rates)[2]
        out.append(
            TrainingOperator(
                "casts",
                seff.OpClass.ELEMENTWISE,
                recipe.precision.value,
                np.zeros(()),
                cast,
                _elementwise(backward_bytes, rows, layers, rates)[2],
                0 * cast,
                rec.elementwise * cast,
                "memory",
                backward="the output gradients' casts",
            )
        )
    return tuple(out)


#: The expert block of a MoE layer in Megatron's combined 1F1B schedule (its ``mlp`` node:
#: routed experts; the shared experts and the permutes run beside them); every other operator
#: of the layer is its ``attn`` node (attention, norms, router).
EXPERT_BLOCK = ("routed_experts", "shared_experts", "permute", "unpermute")


def combined_1f1b_exposed_s(
    ops_: tuple[TrainingOperator, ...],
    dispatch_s: float,
    combine_s: float,
    layers: float,
    unpaired_frac: float,
) -> float:
    """Expert all-to-all left exposed per micro-batch under Megatron-core's combined 1F1B
    (``--overlap-moe-expert-parallel-comm``), which pairs each MoE layer's forward of micro-batch
    ``i+1`` with its backward of micro-batch ``i`` and issues, on a compute and a communication
    stream, ``F.attn | B.combine``, ``F.dispatch | B.expert``, ``B.dispatch | F.expert``,
    ``F.combine | B.attn`` (Megatron-LM docs, "Combined 1F1B: Expert-Parallel All-to-All
    Overlap", Fine-grained execution). Each all-to-all hides under its one paired block:

        paired  = L [ (d - a_f)+ + (d - e_b)+ + (c - e_f)+ + (c - a_b)+ ]
        exposed = (1 - u) paired + u (dispatch + combine)

    per layer ``d`` and ``c`` (the dispatch and combine directions' all-to-alls, two each per
    layer: ``dispatch_s / 2L``, ``combine_s / 2L``; the backward of a combine runs in the
    dispatch direction), ``e`` the expert block's (:data:`EXPERT_BLOCK`) forward and backward,
    ``a`` the rest of the micro-batch's work per layer; ``u`` the share of passes that run
    unpaired (:func:`combined_1f1b_unpaired_frac`). Worked number: d = c = 2 ms, a_f 1.2,
    e_b 1.5, e_f 0.7, a_b 2.5 ms, one layer, u = 0: 0.8 + 0.5 + 1.3 + 0 = 2.6 ms (where
    hiding under the whole micro-batch would leave 8 - 5.9 = 2.1 ms)."""
    if layers <= 0:
        return float(dispatch_s + combine_s)
    e_f = sum(float(o.forward_s) for o in ops_ if o.name in EXPERT_BLOCK)
    e_b = sum(float(o.backward_s + o.recompute_s) for o in ops_ if o.name in EXPERT_BLOCK)
    a_f = sum(float(o.forward_s) for o in ops_) - e_f
    a_b = sum(float(o.backward_s + o.recompute_s) for o in ops_) - e_b
    d, c = dispatch_s / (2.0 * layers), combine_s / (2.0 * layers)
    blocks = ((d, a_f), (d, e_b), (c, e_f), (c, a_b))
    paired = layers * sum(max(0.0, comm - block / layers) for comm, block in blocks)
    return float((1.0 - unpaired_frac) * paired + unpaired_frac * (dispatch_s + combine_s))


def combined_1f1b_unpaired_frac(stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Share of a stage's forward and backward passes combined 1F1B cannot pair: without a
    pipeline the first forward and the last backward (``1/m``); with one, the interleaved
    schedule's warm-up forwards and cool-down backwards on the first stage,
    ``2 (P - 1) + (v - 1) P`` (Megatron-core ``get_pp_rank_microbatches``) plus the one
    warm-up micro-batch the combined schedule adds, out of ``m v`` passes. Worked number:
    P 8, v 4, m 512: (14 + 24 + 1) / 2048 = 1.9%."""
    if stages <= 1:
        return 1.0 / max(microbatches, 1)
    warmup = 2 * (stages - 1) + (virtual_stages - 1) * stages + 1
    return min(1.0, warmup / (microbatches * virtual_stages))


def fsdp_exposed_s(comm_per_bucket_s: float, compute_per_bucket_s: float, buckets: int) -> float:
    """Exposed time of ``n`` bucketed collectives, each overlapping one bucket of compute
    (prefetch: bucket ``i+1`` is gathered while bucket ``i`` computes; a gradient bucket is
    reduce-scattered while the next one's backward runs).

    A two-stage pipeline of ``n`` items: makespan ``g + (n-1) max(g, c) + c``, so the time
    beyond the ``n c`` of compute is

        exposed = g + (n - 1) max(0, g - c)

    (the first bucket is never hidden). PyTorch FSDP (Zhao et al. 2023, §3.3 "backward and
    forward prefetching"); Li et al. 2020 (DDP gradient bucketing). Worked number: 10
    buckets of 2 ms traffic over 3 ms of compute each: 2 ms exposed; over 1 ms each:
    2 + 9 x 1 = 11 ms.
    """
    n = max(int(buckets), 1)
    g, c = float(comm_per_bucket_s), float(compute_per_bucket_s)
    return g + (n - 1) * max(0.0, g - c)


def exposed_overlap_s(comm_s: float, compute_s: float, overlap_frac: float) -> float:
    """Communication left exposed when ``overlap_frac`` of it may hide under ``compute_s``:
    ``comm - min(overlap_frac x comm, compute)``. DualPipe (DeepSeek-V3 §3.2.1) hides the
    expert all-to-all under the paired chunk's compute (``overlap_frac = 1``); plain 1F1B
    hides nothing (0). Worked number: 4 ms of all-to-all, 3 ms compute, overlap 1: 1 ms."""
    hidden = min(max(overlap_frac, 0.0) * comm_s, compute_s)
    return float(comm_s - hidden)
