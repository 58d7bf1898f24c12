"""Training math: FLOPs, memory per chip, and communication per step, on plain numbers.

FLOPs
-----
Training a token costs forward + backward = 3 forwards (the backward computes the input
gradient and the weight gradient, each as costly as the forward): ``6 N`` per token plus
causal attention (:func:`rackmath.core.architecture.training_flops_per_token`). This is
the *model* FLOP count behind MFU (PaLM, Chowdhery et al. 2022, appendix B). Recomputed
work is counted separately (:func:`recompute_flops_per_token`); it enters hardware FLOPs
utilisation and step time, never MFU.

Memory (bytes per chip)
-----------------------
* Model states (Rajbhandari et al. 2020, "ZeRO", §3 and Figure 1): weights, gradients and
  optimizer states per parameter, ``16`` bytes for mixed-precision Adam (2 + 2 + 12: fp32
  master weights, momentum and variance). ZeRO stage 1 shards the optimizer states over
  the ``N_d`` data-parallel ranks, stage 2 the gradients too, stage 3 the weights too.
* Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", §4): per layer, with 16-bit activations, ``s b h (34 + 5 a s / h)``
  bytes (eq. 1): attention block ``11 s b h + 5 a s^2 b``, MLP ``19 s b h``, two norms
  ``4 s b h``. With tensor parallelism ``t`` and sequence parallelism everything is
  divided by ``t`` (eq. 4); without sequence parallelism ``10 s b h`` stays replicated
  (eq. 2). Selective recomputation drops the ``5 a s^2 b`` term (eq. 6); full
  recomputation keeps only each layer's ``2 s b h`` input (§4.1). We generalise the
  ``h``-terms to GQA and gated MLPs term by term (see :func:`layer_activation_terms`).

Everything is pure: numbers in, numbers out, SI units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import IntEnum, StrEnum
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import architecture as arch
from rackmath.errors import InputError, UnknownIdError
from rackmath.specs.model import AttentionKind, ModelSpec
from rackmath.units import FLOPS_PER_MAC

FloatArray = NDArray[np.float64]

#: Bytes of one 16-bit activation value (bf16/fp16), Korthikanti et al.'s assumption.
ACTIVATION_BYTES = 2
#: Bytes of one dropout-mask entry (Korthikanti et al. 2022, §4.1: masks are one byte).
DROPOUT_MASK_BYTES = 1
#: Training FLOPs per forward FLOP: forward 1 + backward 2 (input and weight gradients).
FORWARD_BACKWARD_PASSES = arch.FORWARD_BACKWARD_PASSES
#: Tensors an attention layer caches per token: one key and one value.
KV_TENSORS = 2
#: HBM bytes an optimizer step moves per byte of model state held: read once, write once.
OPTIMIZER_PASSES = 2


_Choice = TypeVar("_Choice", bound=StrEnum)


def _member(cls: type[_Choice], text: str | _Choice, what: str) -> _Choice:
    """``text`` as a member of ``cls`` (case and surrounding spaces ignored), else an
    :class:`UnknownIdError` naming ``what`` and the members."""
    if isinstance(text, cls):
        return text
    try:
        return cls(text.strip().lower())
    except ValueError:
        raise UnknownIdError(what, text, [m.value for m in cls]) from None


# ---------------------------------------------------------------------------- optimizers
class Optimizer(StrEnum):
    ADAM_MIXED = "adam-mixed"  # bf16 weights and grads, fp32 master + m + v
    ADAM_FP32 = "adam-fp32"  # everything fp32
    ADAM_BF16 = "adam-bf16"  # pure bf16 weights, grads and both moments
    SGD_MOMENTUM_MIXED = "sgd-mixed"  # bf16 weights and grads, fp32 master + momentum

    @classmethod
    def parse(cls, text: str | Optimizer) -> Optimizer:
        return _member(cls, text, "optimizer")


@dataclass(frozen=True)
class OptimizerBytes:
    """Bytes per parameter of the weights the step reads, their gradients, and the states."""

    weights: float
    grads: float
    states: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.states


#: ZeRO (Rajbhandari et al. 2020) §3: mixed-precision Adam keeps fp16 weights and grads
#: (2 + 2) and ``K = 12`` bytes of fp32 master weights, momentum and variance.
OPTIMIZER_BYTES: dict[Optimizer, OptimizerBytes] = {
    Optimizer.ADAM_MIXED: OptimizerBytes(weights=2, grads=2, states=12),
    Optimizer.ADAM_FP32: OptimizerBytes(weights=4, grads=4, states=8),
    Optimizer.ADAM_BF16: OptimizerBytes(weights=2, grads=2, states=4),
    Optimizer.SGD_MOMENTUM_MIXED: OptimizerBytes(weights=2, grads=2, states=8),
}


class ZeroStage(IntEnum):
    """What the data-parallel ranks shard (ZeRO stages; FSDP full sharding is stage 3)."""

    NONE = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    WEIGHTS = 3


def model_state_bytes(
    params: ArrayLike, optimizer: OptimizerBytes, zero: ZeroStage, dp: ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(weight, gradient, optimizer-state) bytes per chip for ``params`` parameters per chip
    before data-parallel sharding (ZeRO Figure 1: ``(2 + 2 + K) Psi`` at stage 0,
    ``2 Psi + 2 Psi + K Psi / N_d`` at 1, ``2 Psi + (2 + K) Psi / N_d`` at 2,
    ``(2 + 2 + K) Psi / N_d`` at 3).

    Mixed-precision Adam, 7.5B parameters, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
    """
    p = np.asarray(params, float)
    n = np.asarray(dp, float)
    weights = p * optimizer.weights / (n if zero >= ZeroStage.WEIGHTS else 1.0)
    grads = p * optimizer.grads / (n if zero >= ZeroStage.GRADIENTS else 1.0)
    states = p * optimizer.states / (n if zero >= ZeroStage.OPTIMIZER else 1.0)
    return np.asarray(weights, float), np.asarray(grads, float), np.asarray(states, float)


# ---------------------------------------------------------------------------- activations
class Recompute(StrEnum):
    NONE = "none"  # store every activation
    SELECTIVE = "selective"  # recompute the attention core (Korthikanti et al. §5)
    FULL = "full"  # store each layer's input, recompute the whole layer
    SQRT = "sqrt"  # checkpoint every ~sqrt(L) layers (Chen et al. 2016)
    REVERSIBLE = "reversible"  # RevNet-style layers: reconstruct inputs from outputs

    @classmethod
    def parse(cls, text: str | Recompute) -> Recompute:
        return _member(cls, text, "recompute mode")


@dataclass(frozen=True)
class LayerShape:
    """The widths that set a layer's activations (Korthikanti et al. use ``h``, ``a``, ``4h``).

    ``q_width`` = heads x query head dim; ``kv_width`` = KV heads x head dim (each of K, V);
    ``mlp_width`` = the MLP intermediate size (a MoE layer: experts per token x expert
    width + shared width, the activations one token creates); ``dropout`` keeps the paper's
    one-byte masks (modern LLM pre-training runs without dropout).
    """

    hidden: int
    heads: int
    q_width: int
    kv_width: int
    mlp_width: int
    mlp_gated: bool
    dropout: bool = True


def layer_shape(model: ModelSpec, *, dropout: bool = False) -> LayerShape:
    """The :class:`LayerShape` of a model's typical layer (MoE layers when it has them).

    MLA is counted decompressed, as training runs it (queries and keys ``H x 192``,
    values ``H x 128`` for DeepSeek-V3).
    """
    a = model.attention
    if a.kind in (AttentionKind.MLA, AttentionKind.DSA):  # DSA: MLA plus an indexer
        q_width = a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        kv_width = a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) // 2
    else:
        q_width = a.num_heads * a.head_dim
        kv_width = a.num_kv_heads * a.head_dim
    if model.is_moe and model.moe is not None:
        m = model.moe
        width = m.experts_per_token * m.expert_intermediate_size + m.shared_intermediate_size
        gated = m.gated
    elif model.dense_mlp is not None:
        width, gated = model.dense_mlp.intermediate_size, model.dense_mlp.gated
    else:  # pragma: no cover - every spec has one MLP kind
        raise InputError("model", model.id, "a model with an MLP")
    return LayerShape(
        hidden=model.hidden_size,
        heads=a.num_heads,
        q_width=q_width,
        kv_width=kv_width,
        mlp_width=width,
        mlp_gated=gated,
        dropout=dropout,
    )


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes per token per layer, split as Korthikanti et al. split them (no parallelism).

    ``replicated``: what stays whole on each tensor-parallel rank without sequence
    parallelism (layer-norm inputs, the attention and MLP inputs, the two dropout masks:
    ``10 h`` in the paper). ``sharded``: the rest of the ``h``-terms (``24 h``).
    ``per_context``: bytes per token per token of context (``5 a``: scores, softmax, mask).
    """

    replicated: float
    sharded: float
    per_context: float
    layer_input: float


def layer_activation_terms(shape: LayerShape) -> ActivationTerms:
    """Korthikanti et al. 2022 §4.1, term by term, generalised (bytes per token per layer).

    Attention: input to QKV ``2h``, Q and K for ``QK^T`` ``2 q + 2 kv``, V ``2 kv``, input of
    the output projection ``2 q``, its dropout mask ``h``; scores path ``5 a s`` (softmax
    output ``2 a s``, its mask ``a s``, dropout output ``2 a s``). MLP: input ``2h``,
    activation input and output ``2 f + 2 f`` (gated: gate, up and product ``6 f``),
    dropout mask ``h``. Norms: ``2h`` each, two per layer. With ``q = kv = h``, ``f = 4h``,
    ungated: ``11 h + 19 h + 4 h = 34 h`` and ``5 a s``: eq. 1.
    """
    h, q, kv, f = shape.hidden, shape.q_width, shape.kv_width, shape.mlp_width
    mask = DROPOUT_MASK_BYTES * h if shape.dropout else 0.0
    b = ACTIVATION_BYTES
    norms = 2 * b * h
    attention_in = b * h
    mlp_in = b * h
    replicated = norms + attention_in + mlp_in + 2 * mask
    attention_rest = b * (q + kv) + b * kv + b * q
    mlp_rest = (3 if shape.mlp_gated else 2) * b * f
    # softmax output 2 a s; with dropout also its 1-byte mask and its 2-byte output
    score_bytes = ACTIVATION_BYTES + ((DROPOUT_MASK_BYTES + ACTIVATION_BYTES) if shape.dropout else 0)
    return ActivationTerms(
        replicated=float(replicated),
        sharded=float(attention_rest + mlp_rest),
        per_context=float(score_bytes * shape.heads),
        layer_input=float(b * h),
    )


def activation_bytes_per_token_per_layer(
    shape: LayerShape,
    seq_len: ArrayLike,
    *,
    tp: int = 1,
    sequence_parallel: bool = True,
    recompute: Recompute = Recompute.NONE,
) -> FloatArray:
    """Activation bytes one token leaves on one chip in one layer (Korthikanti et al. Table 2).

    * none: ``(R + S + 5 a s) / t`` with sequence parallelism, ``R + (S + 5 a s)/t`` without
      (paper: ``34 h / t + 5 a s / t`` and ``10 h + 24 h / t + 5 a s / t``);
    * selective: the same without the ``5 a s`` attention-core term;
    * full: only the layer input ``2 h`` (``/ t`` with sequence parallelism).

    ``seq_len`` is the sequence on this chip (divided by context parallelism already).
    GPT-3 175B (h 12288, a 96, s 2048), t = 8 with SP, no recompute:
    ``12288 (34 + 5 * 96 * 2048 / 12288) / 8 = 175,104`` bytes.
    """
    terms = layer_activation_terms(shape)
    s = np.asarray(seq_len, float)
    recompute = Recompute.parse(recompute)
    if recompute is Recompute.FULL:
        return np.asarray(terms.layer_input / (tp if sequence_parallel else 1) + 0 * s, float)
    context = 0.0 * s if recompute is Recompute.SELECTIVE else terms.per_context * s
    if recompute not in (Recompute.NONE, Recompute.SELECTIVE):
        raise InputError("recompute", recompute.value, "none, selective or full for a single layer")
    if sequence_parallel:
        return np.asarray((terms.replicated + terms.sharded + context) / tp, float)
    return np.asarray(terms.replicated + (terms.sharded + context) / tp, float)


def sqrt_checkpoint_segments(layers: int) -> int:
    """Segments for ``sqrt(L)`` checkpointing (Chen et al. 2016, "Training Deep Nets with
    Sublinear Memory Cost", §4.1): ``ceil(sqrt(L))``."""
    return max(1, math.ceil(math.sqrt(layers)))


@dataclass(frozen=True)
class StageActivations:
    """Activation bytes per token on one chip's stage, split by how they scale with the
    micro-batches in flight.

    ``stored_bytes_per_token``: what each micro-batch keeps from its forward until its
    backward (all layers' activations, or only the checkpoints); held once per micro-batch
    in flight. ``rebuild_bytes_per_token``: the buffer a recomputing backward fills while it
    rebuilds a layer (or a segment) of the one micro-batch in its backward; a stage runs one
    backward at a time, so it is held once, whatever the micro-batches in flight.
    """

    stored_bytes_per_token: FloatArray
    rebuild_bytes_per_token: FloatArray

    @property
    def one_microbatch_bytes_per_token(self) -> FloatArray:
        """Peak of a single micro-batch: stored plus rebuild."""
        return np.asarray(self.stored_bytes_per_token + self.rebuild_bytes_per_token, float)

    def peak_bytes_per_token(self, in_flight: float) -> FloatArray:
        """Peak over the stage with ``in_flight`` micro-batches stored:
        ``in_flight * stored + rebuild`` (per token of one micro-batch)."""
        return np.asarray(in_flight * self.stored_bytes_per_token + self.rebuild_bytes_per_token, float)


def stage_activations(
    shape: LayerShape,
    layers: int,
    seq_len: ArrayLike,
    *,
    tp: int = 1,
    sequence_parallel: bool = True,
    recompute: Recompute = Recompute.NONE,
) -> StageActivations:
    """Activation bytes per token over ``layers`` layers on a chip, stored vs rebuilt.

    By mode (``A`` = one layer stored whole, with the attention core recomputed as flash
    attention does, ``x`` = one layer input), stored + rebuild:

    * none / selective: ``L A_mode`` + 0;
    * full: ``L x`` + ``A`` (inputs of all layers; one layer rebuilt in the backward);
    * sqrt: ``k x`` + ``ceil(L/k) A``, ``k = ceil(sqrt L)`` segments of ``ceil(L/k)`` layers
      (the segment in its backward is rebuilt whole);
    * reversible: ``2 x`` + ``A``, constant in ``L``: only the output of the stack (both
      streams) is kept, each layer's input is rebuilt from its output in the backward.

    With ``n`` micro-batches in flight the stage peaks at ``n stored + rebuild``: only one
    micro-batch is in its backward at a time. Worked number (Llama 3.1 70B shape, h 8192,
    q 8192, kv 1024, gated f 28672; L 10, t 8 with SP, full recompute): ``x = 2 * 8192 / 8
    = 2048`` B; ``A = (4 h [two norms] + 2 h + 2 h [attention, MLP inputs] + 2 (q + kv) +
    2 kv + 2 q + 3 * 2 f) / 8 = 274,432 / 8 = 34,304`` B; 4 in flight: ``4 * 10 * 2048 +
    34,304 = 116,224`` B per token (the old count, ``4 (10 * 2048 + 34,304)``, was 219,136).
    """
    recompute = Recompute.parse(recompute)
    if layers < 1:
        raise InputError("layers", layers, "a whole number >= 1")

    def per_layer(mode: Recompute) -> FloatArray:
        return activation_bytes_per_token_per_layer(
            shape, seq_len, tp=tp, sequence_parallel=sequence_parallel, recompute=mode
        )

    if recompute in (Recompute.NONE, Recompute.SELECTIVE):
        stored = layers * per_layer(recompute)
        return StageActivations(np.asarray(stored, float), np.zeros_like(stored, dtype=float))
    whole = per_layer(Recompute.SELECTIVE)
    x = per_layer(Recompute.FULL)
    if recompute is Recompute.FULL:
        return StageActivations(np.asarray(layers * x, float), np.asarray(whole, float))
    if recompute is Recompute.SQRT:
        k = sqrt_checkpoint_segments(layers)
        return StageActivations(np.asarray(k * x, float), np.asarray(math.ceil(layers / k) * whole, float))
    return StageActivations(np.asarray(2 * x, float), np.asarray(whole, float))


def stage_activation_bytes_per_token(
    shape: LayerShape, layers: int, seq_len: ArrayLike, **options: Any
) -> FloatArray:
    """Activation bytes one token of one micro-batch holds over ``layers`` layers on a chip,
    at the peak of its own backward: stored plus rebuild of :func:`stage_activations` (the
    same keyword options; none / selective ``L A``; full ``L x + A``; sqrt ``k x + ceil(L/k) A``;
    reversible ``2 x + A``). Several micro-batches in flight: use
    :meth:`StageActivations.peak_bytes_per_token`.
    """
    return stage_activations(shape, layers, seq_len, **options).one_microbatch_bytes_per_token


def with_mtp_layers(model: ModelSpec, modules: int) -> ModelSpec:
    """The model with ``modules`` more copies of its last layer: the transformer blocks of its
    multi-token-prediction modules (DeepSeek-V3 §2.2), counted as Megatron-LM counts them
    (``num_floating_point_operations``: one more layer of the last layer's kind per module)."""
    if not modules:
        return model
    return replace(model, layers=model.layers + (model.layers[-1],) * modules)


def mtp_projection_params(hidden: float) -> float:
    """One MTP module's projection of the normed hidden state and the next token's normed
    embedding, concatenated, to the hidden state (DeepSeek-V3 §2.2, ``M_k``): ``2h x h``."""
    return 2.0 * hidden * hidden


def mtp_matmul_params(model: ModelSpec, modules: int) -> float:
    """Parameters each token multiplies through in ``modules`` MTP modules beyond their layers:
    the projection (:func:`mtp_projection_params`) and the shared LM head run again (the
    embedding where tied). DeepSeek-V3 (h 7,168, V 129,280), one module: 102.76 M + 926.68 M =
    1.029 B."""
    p = arch.param_counts(model)
    return modules * (mtp_projection_params(model.hidden_size) + (p.lm_head or p.embedding))


def forward_attention_flops_per_token(
    model: ModelSpec, seq_len: ArrayLike, mtp_modules: int = 0
) -> FloatArray:
    """FLOPs per token of the attention core (``QK^T`` and ``AV``) in one causal forward:
    the forward minus its ``2 N_matmul`` weight matmuls (``mtp_modules``: theirs included)."""
    n = np.asarray(seq_len, float)
    model = with_mtp_layers(model, mtp_modules)
    forward = arch.prefill_flops_per_sequence(model, n) / n
    return np.asarray(forward - 2.0 * arch.param_counts(model).matmul_active, float)


def model_flops_per_token(model: ModelSpec, seq_len: ArrayLike, mtp_modules: int = 0) -> FloatArray:
    """``6 N_active`` plus causal attention: the MFU numerator per token; with ``mtp_modules``
    MTP modules trained beside the model, theirs too (:func:`with_mtp_layers`,
    :func:`mtp_matmul_params`), as Megatron-LM counts them. DeepSeek-V3 at 4,096 tokens:
    one module adds 10.19 GFLOP, 4.1 % (a test derives it by hand)."""
    head = FORWARD_BACKWARD_PASSES * FLOPS_PER_MAC * mtp_matmul_params(model, mtp_modules)
    return arch.training_flops_per_token(with_mtp_layers(model, mtp_modules), seq_len) + head


def recompute_flops_per_token(
    model: ModelSpec, seq_len: ArrayLike, recompute: Recompute, mtp_modules: int = 0
) -> FloatArray:
    """Extra forward FLOPs per token that recomputation adds.

    none: 0; selective: the attention core again (Korthikanti et al. §5; for GPT-3 at
    s = 2048 with causal attention, 0.46% of the model FLOPs); full, sqrt and reversible:
    one more forward (reversible layers rebuild each input by running F and G once more,
    and that same call gives the graph to backprop). ``mtp_modules``: theirs as well.
    """
    recompute = Recompute.parse(recompute)
    n = np.asarray(seq_len, float)
    if recompute is Recompute.NONE:
        return np.zeros_like(n)
    if recompute is Recompute.SELECTIVE:
        return forward_attention_flops_per_token(model, n, mtp_modules)
    forward = arch.prefill_flops_per_sequence(with_mtp_layers(model, mtp_modules), n) / n
    return np.asarray(forward + FLOPS_PER_MAC * mtp_matmul_params(model, mtp_modules), float)


# ---------------------------------------------------------------------------- messages
def boundary_activation_bytes(microbatch: float, tokens_per_sequence: float, hidden: int) -> float:
    """Bytes of one layer's ``b s h`` input/output activations, 16-bit (Korthikanti et al.):
    ``ACTIVATION_BYTES * b * s * h``. The message of a tensor-parallel all-reduce and of a
    pipeline send (before the split over tensor-parallel ranks). ``tokens_per_sequence`` is
    ``s`` on one chip (``s / cp`` under context parallelism).
    Llama 3 405B, b = 1, s = 8192, h = 16384: 2 x 8192 x 16384 = 268 MB."""
    return float(ACTIVATION_BYTES * microbatch * tokens_per_sequence * hidden)


def context_parallel_kv_bytes(microbatch: float, seq_len: float, kv_width: int, tp: int) -> float:
    """Keys and values of a whole sequence on one tensor-parallel rank, 16-bit:
    ``KV_TENSORS * ACTIVATION_BYTES * b * s * kv_width / tp`` (``kv_width`` = KV heads x head
    dim, each of K and V; see :class:`LayerShape`). The all-gather of context parallelism."""
    return float(KV_TENSORS * ACTIVATION_BYTES * microbatch * seq_len * kv_width / tp)


def recompute_forward_passes(mode: Recompute) -> float:
    """Forward passes a layer's tensor-parallel collectives run per step: 1, plus 1 when the
    whole layer is recomputed in the backward (full, sqrt checkpoints, reversible layers).
    Selective recomputation redoes only the attention core, which has no collective."""
    return 2.0 if mode in (Recompute.FULL, Recompute.SQRT, Recompute.REVERSIBLE) else 1.0


def optimizer_step_s(state_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """Time of an element-wise optimizer update, HBM-bound: each byte of model state
    (weights, gradients, optimizer states) read once and written once:
    ``OPTIMIZER_PASSES * state_bytes / BW``. 16 B/param x 1e9 params on 3.35e12 B/s: 9.6 ms."""
    return OPTIMIZER_PASSES * state_bytes / bandwidth_bytes_per_s
