"""A step as a list of operators, each with its own roofline: where the time goes.

One chip of a stage runs, per micro-batch pass, these operators over the stage's layers. Each
operator's work (FLOPs, bytes by tensor class, the kernel's shape) is described once, in
:mod:`rackmath.core.work`, the description the kernel fit reads the measured tables through:

=================  ===================  ====================================================
operator           class                work per chip and pass (``t`` tokens of a DP rank)
=================  ===================  ====================================================
embedding          elementwise          lookup: ``t h b_emb`` bytes (rows read), no FLOPs
attention_qkv      gemm                 ``2 t P_qkv / tp``; weights ``P_qkv w / tp``
attention          attention_decode     the registry's FLOPs and KV read per sequence (/ tp
                   (attention_prefill   and / the KV heads tp splits); queries in, outputs out
                   in a prompt pass)
attention_prefill  attention_prefill    a mixed step's prompt chunk, beside the decode rows
attention_out      gemm                 ``2 t P_out / tp``
router             gemm                 ``2 t h E`` (replicated)
dense_mlp          gemm                 ``2 t P_mlp / tp`` over the dense layers
shared_experts     gemm                 ``2 t P_shared / tp`` over the MoE layers
routed_experts     moe                  the busiest rank's pairs through its experts
                                        (:func:`rackmath.core.work.grouped_gemm`)
norms              elementwise          ``W`` = norm scales; ``A = 2 x 2 t h`` per layer
lm_head            gemm                 ``2 t h V / tp``
=================  ===================  ====================================================

**Which curve.** Each operator names the curve it runs on (:meth:`ChipRates.curve`): its
class, the kernel format its operands run in and, for attention, the kernel family (``gqa``,
``mla``, ``dsa``). A GEMM's format follows its weight class's storage and the deployment's
compute precision (:func:`rackmath.specs.precision.gemm_formats`: bf16 attention beside
mxfp4 experts runs a bf16 GEMM; block-scaled FP8 weights run the ``fp8_block`` kernel);
attention's follows the KV cache (:func:`~rackmath.specs.precision.attention_format`). The peak
an operator runs at is the one its curve was fitted against. Every operator carries its
:class:`~rackmath.specs.efficiency.Kernel` (table, format, chip, fallback reason, error band).

**Whole sequences.** A DP rank (and a pipeline micro-batch) holds whole sequences: the busiest
of ``dp`` ranks decodes ``ceil(B / dp)`` of a batch of ``B`` (one sequence on 64 attention-DP
ranks is one rank's work, not 1/64 of it on each). The rank the step waits for reads at
least one expert per MoE layer once a token reaches the EP group.

Each operator's time is its own roofline, with the chip's efficiency for its curve
(:mod:`rackmath.core.efficiency`; the pure roofline by default)::

    compute_s = flops / (peak(curve) * compute_frac(shape))
    memory_s  = (W + A + K_r + K_w) / (BW * bandwidth_frac(shape))
    time_s    = max(compute_s, memory_s) + calls * floor_s

and the pass is the **sum** of the operators' times. The lecture's blackboard form,
``max(sum compute_s, sum memory_s)``, is the lower bound (every operator overlapping every
other); the sum is at most twice it (each term ``max(c, m) <= c + m``).

Assumptions: uniform expert routing by default; a plan's ``skew`` (busiest EP rank's load
over the mean) scales the routed-expert GEMM of the rank the step waits for; the
activation function and residual adds are fused into the GEMM epilogues; the LM head runs
on every token of the pass (as :func:`rackmath.core.architecture.prefill_flops_per_sequence`
counts it). Sources: Kaplan et al. 2020 and PaLM appendix B (2 FLOPs per MAC per weight);
Williams, Waterman & Patterson 2009 (the roofline per kernel); Korthikanti et al. 2022
(activations per layer); DeepSeek-V3 report §3.4 (attention-DP beside EP).
"""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import efficiency as eff
from rackmath.core import numeric
from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates, CurveChoice
from rackmath.core.loads import StepLoad, microbatch_tokens, rank_share, whole
from rackmath.core.numeric import maximum, minimum
from rackmath.core.operator_model import OperatorModel, top_k_gather_work
from rackmath.core.pass_plan import ELEMENTWISE_FORMATS, GemmPlan, MoePlan, pass_plan
from rackmath.core.roofline import expected_distinct_experts
from rackmath.specs.efficiency import Kernel, OpClass, OpEfficiency
from rackmath.specs.precision import FORMATS

FloatArray = NDArray[np.float64]

#: Bytes per activation value in the norms and the residual stream: bf16.
ACTIVATION_BYTES = 2.0

#: Activation values a norm moves per token: it reads ``h`` and writes ``h``; two norms per layer.
NORM_VALUES_PER_HIDDEN_PER_LAYER = 4.0

_ZERO_INPUTS = cast(FloatArray, 0.0)


class Operator(NamedTuple):
    """One operator of a pass on one chip: work, traffic by tensor class, and its times (s).

    Immutable (a named tuple: a pass builds ten of them, so construction must be cheap).
    ``latency_s`` is the part of ``time_s`` that is launch floors (``calls x floor_s``);
    ``kernel`` names the curve the time comes from."""

    name: str
    op_class: OpClass
    flops: FloatArray
    weight_bytes: FloatArray
    activation_bytes: FloatArray
    kv_read_bytes: FloatArray
    kv_write_bytes: FloatArray
    compute_s: FloatArray
    memory_s: FloatArray
    time_s: FloatArray
    #: the bandwidth this operator's traffic moves at (peak x its achieved fraction)
    bandwidth_bytes_per_s: FloatArray
    latency_s: FloatArray
    #: the peak FLOP/s its curve runs at (the curve's precision)
    peak_flops_per_s: float
    kernel: Kernel
    #: activation values read as matmul inputs (what a low-precision recipe casts; 0 elsewhere)
    input_values: FloatArray = _ZERO_INPUTS
    #: the work timed and the curve it was timed on (kernel formats, family): what a training
    #: step re-times at a backward kernel's shape (:mod:`rackmath.core.training_kernels`)
    work: wk.Work | None = None
    curve_key: tuple[tuple[str, ...], str] = ((), "")

    def moving_s(self, tensor_bytes: ArrayLike) -> FloatArray:
        """Seconds this operator spends moving ``tensor_bytes`` of its traffic."""
        return np.asarray(np.asarray(tensor_bytes, float) / self.bandwidth_bytes_per_s)

    @property
    def bytes_read(self) -> FloatArray:
        """Weights, KV read and half the activation traffic (the inputs)."""
        return np.asarray(self.weight_bytes + self.kv_read_bytes + 0.5 * self.activation_bytes)

    @property
    def bytes_written(self) -> FloatArray:
        return np.asarray(self.kv_write_bytes + 0.5 * self.activation_bytes)

    @property
    def bound(self) -> NDArray[np.str_]:
        """What takes most of this operator's time: ``compute``, ``memory`` or ``latency``
        (its launch floors, when they exceed both)."""
        code = np.where(self.compute_s >= self.memory_s, 0, 1)
        code = np.where(self.latency_s > np.maximum(self.compute_s, self.memory_s), 2, code)
        return _BOUNDS[code]


_BOUNDS = np.array(["compute", "memory", "latency"])


def timed(
    name: str,
    op_class: OpClass,
    rates: ChipRates,
    work: wk.Work,
    formats: tuple[str, ...],
    kind: str = "",
) -> Operator:
    """An operator's times: its work on the curve it names (:meth:`ChipRates.curve`)."""
    return timed_on(
        name, op_class, rates.curve(op_class, formats, kind), rates.bandwidth_bytes_per_s, work, formats, kind
    )


def timed_on(
    name: str,
    op_class: OpClass,
    choice: CurveChoice,
    bandwidth: float,
    work: wk.Work,
    formats: tuple[str, ...],
    kind: str = "",
    terms: eff.ShapeTerms | None = None,
) -> Operator:
    """:func:`timed` on a curve already chosen (a plan's passes choose each operator's once);
    ``terms``: the curve's :func:`rackmath.core.efficiency.shape_terms` at the work's columns
    and depth, where the plan keeps them."""
    e, pure, peak = choice.efficiency, choice.pure, choice.peak_flops_per_s
    # a grid-sized operator (attention over batch x context) is timed in blocks of rows
    if type(work.flops) is not np.ndarray or (shape := numeric.grid_shape(work)) is None:
        compute, memory, time, frac, latency = eff.timing_of(
            e, work, work.bytes, peak, bandwidth, pure, terms
        )
    else:
        compute, memory, time, frac, latency = numeric.by_rows(
            lambda *f: _timing(e, pure, peak, bandwidth, wk.Work(*f)), work, shape
        )
    moving = bandwidth * frac
    inputs = _ZERO_INPUTS if work.input_values is None else work.input_values
    return wk.record(Operator, (
        name, op_class, work.flops, work.weight_bytes, work.activation_bytes, work.kv_read_bytes,
        work.kv_write_bytes, compute, memory, time, moving, latency, peak, choice.kernel, inputs, work,
        (formats, kind),
    ))  # fmt: skip


def _timing(
    e: OpEfficiency, pure: bool, peak_flops_per_s: float, bandwidth: float, work: wk.Work
) -> tuple[FloatArray, ...]:
    """:func:`rackmath.core.efficiency.timing_of` of ``work`` on the curve ``e``."""
    return eff.timing_of(e, work, work.bytes, peak_flops_per_s, bandwidth, pure)


_ZERO = 0.0


def _has(x: FloatArray) -> bool:
    """Whether any point carries this term (``np.any`` without its dispatch on one value)."""
    return bool(x.any()) if type(x) is np.ndarray else bool(x)


def pass_operators(
    m: OperatorModel,
    load: StepLoad,
    rates: ChipRates,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    dp: ArrayLike,
    ep: ArrayLike,
    moe_tp: ArrayLike = 0,
    redundant_experts: ArrayLike = 0,
    skew: ArrayLike = 1.0,
    cp: ArrayLike = 1.0,
    cp_queries_everywhere: bool = False,
) -> tuple[Operator, ...]:
    """The operators the busiest chip runs for one micro-batch through one (average) stage.

    ``P = pp`` micro-batches of ``1/P`` of the load each; a stage holds ``1/P`` of the
    layers; a DP rank of ``tp`` chips (the attention's TP x DP) takes whole decode sequences,
    ``ceil(B / (P dp))`` at most (:func:`rackmath.core.loads.whole`), and ``1/(P dp)`` of a
    step's prompt tokens;
    the routed experts are spread over the stage's ``C = dp tp`` chips in ``shards`` =
    :func:`expert_shards` (MoE TP x EP), so ``C / shards`` groups each see ``1/groups`` of the
    tokens. The busiest EP rank (the one the step waits for) gets ``skew`` times the mean routed
    load and reads its :func:`expert_slot_factor` share of slots, one expert at least.
    Kernel shapes (rows, cols, depth) for the efficiency curves: QKV (t, qkv/tp, h), output
    (t, h, heads d_v/tp), MLPs (t, I/tp, h), router (t, E, h), LM head (t, V/tp, h), experts
    (tokens per expert over the EP group, I_e/expert-TP, h), decode attention (sequences x KV
    heads on the chip, query heads per KV head, context), prefill attention (tokens, d_qk,
    prompt length).

    **Context parallelism** (``cp = c > 1``; a DP rank is ``c`` groups of ``tp`` chips holding the
    same weights): each of the ``c`` ranks runs the GEMMs, norms and head on ``1/c`` of the DP
    rank's tokens (``ceil(n/c)`` whole decode sequences, ``1/c`` of a prompt's tokens: the
    load-balanced zigzag split of Megatron and SGLang). Decode attention: every CP rank attends
    all ``n`` sequences over its ``1/c`` of each one's cache (KV striped token by token, SGLang's
    ``p mod c``), so FLOPs and the KV read are ``1/c``, the kernel's depth ``L/c``; a new
    token's KV is written by the rank that owns its sequence. Prefill attention: a rank's
    ``S/c`` queries over the gathered ``S`` keys and values, ``1/c`` of the causal FLOPs (the
    zigzag split balances them) and of the cache written. ``cp_queries_everywhere`` (the
    ``a2a`` merge, Helix): the QKV projection runs every decode sequence on every CP rank, so no
    query is gathered. The traffic is :func:`rackmath.core.collective_ops.cp_collectives`.
    """
    plan = pass_plan(m, rates, tp, pp, dp, ep, moe_tp, redundant_experts, skew, cp, cp_queries_everywhere)
    t, p, c, on_cp = plan.tp, plan.pp, plan.cp, plan.on_cp
    bandwidth = rates.bandwidth_bytes_per_s
    queries = load.decode_queries
    decode_rows, prompts, prompt_tokens = rank_share(load, p, plan.dp)
    tokens = decode_rows + prompt_tokens  # tokens a chip's rank sees per micro-batch
    qkv_tokens = tokens
    own_rows = decode_rows  # the decode rows whose tokens this chip computes (and whose KV it writes)
    if on_cp:
        cp_rows = whole(decode_rows / queries, c) * queries
        own_rows = (
            cp_rows if type(c) is not np.ndarray else np.asarray(np.where(c > 1.0, cp_rows, decode_rows))
        )
        tokens = own_rows + prompt_tokens / c
        qkv_tokens = decode_rows + prompt_tokens / c if plan.cp_queries_everywhere else tokens
    layers, stage = plan.layers, plan.stage
    h = plan.hidden
    kv_split, heads, kv_local = plan.kv_split, plan.heads, plan.kv_local
    decode = _has(load.decode_sequences)
    prefill = _has(load.prefill_sequences)
    kind = m.attention_kind
    att_formats = plan.attention_formats
    attention: list[Operator] = []
    # A mixed step runs two attention kernels, each at its own efficiency: decode rows read
    # their caches, the prompt chunk computes; one operator would cost the chunk's FLOPs at the
    # few decode rows' efficiency.
    if decode or not prefill:
        qk, v = m.decode_dims
        if on_cp:  # every sequence of the DP rank, over this rank's 1/c of each one's cache
            work = wk.decode_attention_of(
                decode_rows / queries,
                heads * queries,
                kv_local,
                qk,
                v,
                load.decode_context / c,
                decode_rows * load.decode_attention_flops * stage / t / c,
                decode_rows * load.decode_kv_read_bytes * stage / kv_split / c,
                own_rows * load.decode_kv_write_bytes * stage / kv_split,
                layers,
            )
        else:  # a sequence's terms scaled first (context-sized), the rows last: one grid-sized product
            work = wk.decode_attention_of(
                decode_rows / queries,
                heads * queries,
                kv_local,
                qk,
                v,
                load.decode_context,
                decode_rows * (load.decode_attention_flops * stage / t),
                decode_rows * (load.decode_kv_read_bytes * stage / kv_split),
                decode_rows * load.decode_kv_write_bytes * stage / kv_split,
                layers,
            )
        attention.append(
            timed_on(
                "attention",
                OpClass.ATTENTION_DECODE,
                plan.decode_curve,
                bandwidth,
                work,
                att_formats,
                plan.decode_kind,
            )
        )
    if prefill:
        qk, v, kv_heads = m.prefill_dims
        share = c if on_cp else 1.0  # the CP rank's share of a prompt's queries, FLOPs and cache
        flops = prompts * load.prefill_attention_flops * stage / t / share
        kv_read = prompts * load.prefill_kv_read_bytes * stage / kv_split / share
        if m.top_k and rates.efficiency.dsa_prefill_gathers_top_k:  # every top-k slot, padding too
            extra, gathered = top_k_gather_work(m, load.prefill_length, heads, rates.kv.bytes_per_element)
            flops = flops + prompts * extra * layers / share
            kv_read = kv_read + prompts * gathered * layers / share
        work = wk.prefill_attention(
            prompt_tokens / share,
            heads,
            kv_heads / minimum(t, kv_heads),
            qk,
            v,
            load.prefill_length,
            flops=flops,
            kv_read_bytes=kv_read,
            kv_write_bytes=prompts * load.prefill_kv_write_bytes * stage / kv_split / share,
            input_bytes=_activation_bytes(att_formats[0]),
            calls=layers,
            kv_tokens=prompt_tokens if on_cp else None,
            shared_heads=m.prefill_absorbed,
        )
        name = "attention_prefill" if decode else "attention"
        attention.append(
            timed_on(name, OpClass.ATTENTION_PREFILL, plan.prefill_curve, bandwidth, work, att_formats, kind)
        )
    table: list[Operator] = [
        timed_on(
            "embedding",
            OpClass.ELEMENTWISE,
            plan.elementwise_curve,
            bandwidth,
            wk.elementwise_of(tokens * h * plan.embedding_bytes / p, tokens, plan.embedding_calls),
            ELEMENTWISE_FORMATS,
        ),
        gemm_operator(plan.qkv, qkv_tokens, bandwidth),
        *attention,
        gemm_operator(plan.out, tokens, bandwidth),
    ]
    if plan.moe is not None:
        table += _moe_operators(m, load, plan.moe, bandwidth, tokens, p)
    if plan.dense is not None:
        table.append(gemm_operator(plan.dense, tokens, bandwidth))
    table += [
        timed_on(
            "norms",
            OpClass.ELEMENTWISE,
            plan.elementwise_curve,
            bandwidth,
            wk.elementwise_of(
                tokens * layers * NORM_VALUES_PER_HIDDEN_PER_LAYER * h * ACTIVATION_BYTES,
                tokens,
                layers,
                plan.norms_weight_bytes,
            ),
            ELEMENTWISE_FORMATS,
        ),
        gemm_operator(plan.lm_head, tokens, bandwidth),
    ]
    return tuple(table)


def _activation_bytes(fmt: str) -> float:
    f = FORMATS.get(fmt)
    return f.activation_bytes if f is not None else ACTIVATION_BYTES


def gemm_operator(g: GemmPlan, rows: FloatArray, bandwidth: float) -> Operator:
    """The projection ``g`` of ``rows`` tokens (:func:`rackmath.core.work.gemm`), timed."""
    work = wk.gemm_rows(rows, g.work)
    return timed_on(g.name, OpClass.GEMM, g.curve, bandwidth, work, g.formats, "", g.terms)


def _moe_operators(
    m: OperatorModel,
    load: StepLoad,
    plan: MoePlan,
    bandwidth: float,
    tokens: FloatArray,
    p: FloatArray,
) -> list[Operator]:
    """The router, shared experts (where the model has them) and routed experts of one pass
    (see :func:`pass_operators`)."""
    h = float(m.hidden)
    moe_layers, shards, expert_tp = plan.moe_layers, plan.shards, plan.expert_tp
    group_tokens = microbatch_tokens(load, p) / plan.groups
    distinct = expected_distinct_experts(group_tokens, m.experts, m.experts_per_token)
    # token-expert pairs the busiest rank's group processes (skew x the mean)
    routed_tokens = group_tokens * m.experts_per_token * plan.skew
    # experts the busiest rank reads per layer: its share of the distinct ones, one at least
    hit = distinct * plan.slots * expert_tp / shards
    if type(shards) is np.ndarray or shards > 1.0:
        hit = maximum(hit, minimum(routed_tokens, 1.0))
    rank_pairs = routed_tokens * expert_tp / shards  # the pairs this rank receives
    work = wk.grouped_pairs(
        rank_pairs * moe_layers,
        hit * moe_layers,
        routed_tokens / m.experts,
        # the permute and finalize passes over the pairs this rank receives (the all-to-all
        # dispatch the network model uses), at full hidden width
        rank_pairs * h * moe_layers,
        group_tokens,
        plan.work,
    )
    router = gemm_operator(plan.router, tokens, bandwidth)
    shared = gemm_operator(plan.shared, tokens, bandwidth) if plan.shared is not None else None
    routed = timed_on(
        "routed_experts", OpClass.MOE, plan.curve, bandwidth, work, plan.formats, plan.kind, plan.terms
    )
    return [router, routed] if shared is None else [router, shared, routed]
