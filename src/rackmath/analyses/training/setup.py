"""A training job, validated once: model, system, plan, batch, schedule, precision recipe.

:func:`make_training` checks the plan against the model and the system and fills defaults;
:mod:`rackmath.analyses.training.step` turns the setup into a step (per operator) and the
memory per chip, :mod:`rackmath.analyses.training.estimate` into an estimate.

Efficiency: an :class:`~rackmath.core.roofline.Efficiency` as every deployment holds it
(:func:`rackmath.analyses.kernels.tables.grounded_table`): ``kernel`` (the default) runs every
operator on the chip's fitted kernel curves, ``pure`` on the roofline, scalars multiplying
either (:data:`CALIBRATED_TRAINING` is the pure roofline at the one flops_frac fitted over the
published runs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.parts import DEFAULT_MEMORY_RESERVE_FRAC, Precisions
from rackmath.analyses.training import stages as stg
from rackmath.catalog import training_frameworks as tf
from rackmath.core import architecture as arch
from rackmath.core import pipeline as pl
from rackmath.core import roofline as rl
from rackmath.core import training as tr
from rackmath.core.lazy import cached_property
from rackmath.core.training_step import GemmRecipe
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_CHIPS, MAX_CONTEXT, MAX_TOKENS
from rackmath.specs.efficiency import EfficiencyMode, EfficiencyTable
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision
from rackmath.specs.training_framework import RecomputePolicy, TrainingFramework

#: Default global batch: 4M tokens (Llama 2, Touvron et al. 2023, §2.2: "4M tokens").
DEFAULT_GLOBAL_BATCH_TOKENS = 4 * 2**20
#: Default sequence length when the model's own is longer (Llama 3 pre-trains at 8K).
DEFAULT_SEQ_LEN = 8192
#: MTP modules a run may state: a bound on the work asked for, not a published limit
#: (DeepSeek-V3 trains 1; its checkpoint ships ``num_nextn_predict_layers: 1``).
MAX_MTP_LAYERS = 8

#: One achievable-matmul fraction on the pure roofline for every training row, fitted once
#: (geometric mean of measured / pure-roofline throughput over the seven training rows of
#: shared/reference/measurements.csv plus DeepSeek-V3; see docs/training.md). Never per row.
#: 0.679 with DeepSeek-V3's MTP module on its last stage; 0.671 with the SMs TP overlap keeps
#: from its GEMMs; 0.662 since the Llama 3 rows run the
#: interleaved schedule their paper states (0.728 with
#: the training kernels of issue 23; 0.747 before, with DeepSeek-V3 run as run; 0.807 and
#: 0.77 earlier).
CALIBRATED_TRAINING = rl.Efficiency(flops_frac=0.67, mode=EfficiencyMode.PURE)


@dataclass(frozen=True)
class TrainingSetup:
    """A validated training job: the deployment it runs on (model, system, plan, precisions,
    price, efficiency, memory reserve), and what to train for how many tokens, how batched
    and scheduled."""

    deployment: Deployment
    tokens: float
    seq_len: int
    global_batch: int  # sequences per step
    microbatch: int  # sequences per micro-batch
    schedule: pl.Schedule
    virtual_stages: int
    recompute: tr.Recompute
    optimizer: tr.Optimizer
    zero: tr.ZeroStage
    sequence_parallel: bool
    notes: tuple[str, ...] = field(default=())
    #: how the GEMMs compute (bf16, fp8, fp8-block, mxfp8, nvfp4); its precision is the
    #: deployment's compute precision
    recipe: GemmRecipe = GemmRecipe.BF16
    #: share of the expert all-to-all that may hide under compute (DualPipe 1, 1F1B 0)
    ep_overlap_frac: float = 0.0
    #: the overlap is the framework's combined 1F1B: each all-to-all under one paired compute
    #: block (:func:`rackmath.core.training_step.combined_1f1b_exposed_s`), not the whole step
    ep_overlap_paired: bool = False
    #: busiest expert rank's tokens over the mean (1 = balanced routing)
    routing_skew: float = 1.0
    #: data-parallel bucket (FSDP unit) in bytes of 16-bit parameters; None: one layer
    bucket_bytes: float | None = None
    #: node-limited routing: each token to at most this many scale-up domains (DeepSeek-V3:
    #: 4); None: free routing, every destination rank's copy crossing on its own
    ep_max_domains: int | None = None
    #: dispatch all-to-alls (forward dispatch, backward into the down-projection) in FP8
    #: with one FP32 scale per 128 values; combines stay BF16 (DeepSeek-V3 §3.3.2)
    ep_dispatch_fp8: bool = False
    #: the framework the job runs under, with the settings the run changed (None: the
    #: generic step, :data:`rackmath.catalog.training_frameworks.GENERIC`)
    framework: TrainingFramework | None = None
    #: the framework's recompute policy by its own name (its shares of each forward re-run)
    recompute_policy: RecomputePolicy | None = None
    #: transformer layers on each pipeline stage (None: ``ceil(L/P)`` on the fullest, as before)
    stage_layers: tuple[int, ...] | None = None
    #: multi-token-prediction modules trained with the model (DeepSeek-V3: 1), on the last stage
    mtp_layers: int = 0
    #: the attention backward's FLOP/s over its forward's on this chip, and its source
    attention_backward: tf.BackwardRatio | None = None
    #: the framework's attention kernel against the chip's fitted curve (None: the curve)
    attention_kernel: tf.KernelRatio | None = None
    #: the backward GEMMs' split accumulation over the forward's curve (None: not split)
    split_accumulation: tf.BackwardRatio | None = None

    # What the job runs on, read off its deployment.
    @property
    def model(self) -> ModelSpec:
        return self.deployment.model

    @property
    def system(self) -> SystemSpec:
        return self.deployment.system

    @property
    def plan(self) -> ParallelPlan:
        return self.deployment.plan

    @property
    def compute(self) -> Precision:
        """The precision whose peak the GEMMs run at (the recipe's)."""
        return self.deployment.precisions.compute

    @property
    def usd_per_chip_hour(self) -> float:
        return self.deployment.usd_per_chip_hour

    @property
    def efficiency(self) -> rl.Efficiency:
        return self.deployment.efficiency

    @property
    def table(self) -> EfficiencyTable:
        """The efficiency table the operators use (the deployment's)."""
        return self.deployment.efficiency_table

    @property
    def efficiency_label(self) -> str:
        return self.deployment.efficiency_label

    @property
    def profile(self) -> TrainingFramework:
        """The framework profile the step runs under (the generic one when none is stated)."""
        return self.framework if self.framework is not None else tf.framework(None)

    @property
    def chips(self) -> int:
        return self.plan.chips

    @property
    def microbatches(self) -> int:
        """Micro-batches per step per pipeline: ``global_batch / (dp * microbatch)``."""
        return self.global_batch // (self.plan.dp * self.microbatch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def layers_per_stage(self) -> int:
        """Layers on the fullest stage."""
        if self.stage_layers is not None:
            return max(self.stage_layers)
        return math.ceil(self.model.num_layers / self.plan.pp)

    @property
    def peak_flops_per_s(self) -> float:
        """Peak of the precision the GEMMs compute at."""
        return self.system.chip.peak_flops(self.compute)

    @property
    def attention_precision(self) -> Precision:
        """Attention, norms and casts: the deployment's rule over a 16-bit cache (BF16 where the
        chip has it; FP16 runs stay FP16; else the GEMMs' precision)."""
        return self.deployment.attention_precision

    @property
    def attention_core_precision(self) -> Precision:
        """The attention core's own: FP8 where the framework runs FP8 dot-product attention
        (``fp8_attention``) and the GEMMs are FP8 or MXFP8 (:func:`fp8_attention_format`);
        else :attr:`attention_precision`. Norms, the head and the MFU peak stay 16-bit."""
        return Precision.FP8 if fp8_attention_format(self.profile, self.recipe) else self.attention_precision

    @property
    def fused_grouped_mlp(self) -> bool:
        """The routed experts run as Transformer Engine's fused grouped MLP (the framework's
        ``fused_grouped_mlp``; :func:`make_training` refuses it where TE cannot run it)."""
        return bool(self.profile.fused_grouped_mlp and self.model.is_moe)

    @property
    def columnwise_copy(self) -> bool:
        """Whether each cast writes a second, column-wise quantised copy for the backward's
        transposed GEMMs: under every block-scaled recipe, and under per-tensor FP8 on the chips
        whose FP8 GEMMs read both operands K-major (:data:`FP8_TRANSPOSE_CHIPS`)."""
        per_tensor = self.recipe in (GemmRecipe.FP8, GemmRecipe.FP8_CURRENT)
        return self.recipe.block_scaled or (per_tensor and self.system.chip.id in FP8_TRANSPOSE_CHIPS)

    @property
    def bf16_peak_flops_per_s(self) -> float:
        return self.system.chip.peak_flops(self.attention_precision)

    @cached_property
    def params(self) -> arch.ParamCounts:
        return arch.param_counts(self.model)


def make_training(
    model: ModelSpec,
    system: SystemSpec,
    plan: ParallelPlan,
    *,
    tokens: float,
    chips: int | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    microbatch: int = 1,
    schedule: pl.Schedule | str = pl.Schedule.ONE_F_ONE_B,
    virtual_stages: int = 1,
    recompute: tr.Recompute | str | None = None,
    optimizer: tr.Optimizer | str = tr.Optimizer.ADAM_MIXED,
    zero: int | None = None,
    sequence_parallel: bool = True,
    compute: Precision | GemmRecipe | str | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC,
    ep_overlap_frac: float | None = None,
    routing_skew: float = 1.0,
    bucket_bytes: float | None = None,
    ep_max_domains: int | None = None,
    ep_dispatch_fp8: bool = False,
    framework: str | TrainingFramework | None = None,
    framework_settings: Mapping[str, Any] | None = None,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    balance_stages: bool = False,
    stage_layers: tuple[int, ...] | list[int] | None = None,
    mtp_layers: int = 0,
) -> TrainingSetup:
    """Check the plan against the model and system once; fill defaults; explain refusals.

    ``framework`` (``megatron-bridge``, ``torchtitan``, ...; None: the generic step) sets the
    defaults the step runs with (``catalog/data/training_frameworks.yaml``), changed by
    ``framework_settings``; ``recompute`` names one of its policies (None: its default) and
    ``zero`` its sharding (None: its default). ``stage_layers`` (every stage's layers),
    ``first_stage_layers`` / ``last_stage_layers``
    (Megatron's ``--decoder-first/last-pipeline-num-layers``) or ``balance_stages`` lay the
    layers out over the pipeline stages (:func:`rackmath.analyses.training.stages.stage_layout`).
    ``mtp_layers``: multi-token-prediction modules trained beside the model (Megatron's
    ``--mtp-num-layers``; DeepSeek-V3 trains one), each a layer, a projection and the head again.
    """
    profile = (
        framework if isinstance(framework, TrainingFramework) else tf.framework(framework)
    ).with_settings(framework_settings or {})
    policy = profile.policy(None if recompute is None else str(getattr(recompute, "value", recompute)))
    zero = profile.default_zero if zero is None else zero
    if compute:
        compute = profile.gemm_recipe(str(getattr(compute, "value", compute)))
    if chips is not None and checks.whole("chips", chips, maximum=MAX_CHIPS) != plan.chips:
        raise InputError(
            "--chips", chips, f"the plan's tp x pp x dp x cp = {plan.chips} chips ({plan}); change one"
        )
    budget = f"a token budget of 1 to {MAX_TOKENS:g}, e.g. 15e12"
    checks.between("--tokens", tokens, 1, MAX_TOKENS, allowed=budget)
    check_plan_on_model(model, plan)
    seq, micro, batch = batch_shape(model, plan, seq_len, microbatch, global_batch)
    sched, v, defaulted_v = schedule_of(model, plan, schedule, virtual_stages, batch, micro)
    if batch * seq > tokens:
        raise InputError(
            "tokens", tokens, f"at least one step's {batch * seq:,} tokens ({batch} x {seq}); raise --tokens"
        )
    try:
        zero_stage = tr.ZeroStage(zero)
    except ValueError:
        raise InputError("zero", zero, "0, 1, 2 or 3") from None
    recipe = gemm_recipe(model, system, compute)
    if profile.fp8_attention and fp8_attention_format(profile, recipe) is None:
        raise InputError(
            "fp8_attention",
            True,
            f"only under an 8-bit GEMM recipe ({', '.join(r.value for r in FP8_ATTENTION_FORMATS)}; "
            f"this run computes in {recipe.value}): drop the setting or pass --compute fp8",
        )
    if profile.fused_grouped_mlp and (
        system.chip.id not in FUSED_GROUPED_MLP_CHIPS or recipe not in FUSED_GROUPED_MLP_RECIPES
    ):
        raise InputError(
            "fused_grouped_mlp",
            True,
            f"only on an SM100-class chip ({', '.join(FUSED_GROUPED_MLP_CHIPS)}) under an MXFP8 or "
            f"NVFP4 recipe (this run: {system.chip.id}, {recipe.value}): drop the setting",
        )
    precision = recipe.precision
    system.chip.peak_flops(precision)
    efficiency = rl.Efficiency.parse(efficiency)
    if ep_overlap_frac is not None:
        overlap = ep_overlap_frac
    else:
        overlap = 1.0 if sched is pl.Schedule.DUALPIPE or profile.ep_comm_overlap else 0.0
    checks.fraction("ep overlap", overlap, allowed="a fraction in [0, 1] (DualPipe hides all: 1)")
    checks.between(
        "routing skew", routing_skew, 1.0, 64.0, allowed="the busiest expert rank over the mean, in [1, 64]"
    )
    if bucket_bytes is not None:
        checks.at_least(
            "bucket bytes", bucket_bytes, 2**20, allowed="at least 1 MiB (e.g. 25e6, PyTorch DDP's default)"
        )
    stage_layers = stg.stage_layout(
        model.num_layers,
        plan.pp,
        first_stage_layers,
        last_stage_layers,
        balance=balance_stages,
        stated=stage_layers,
    )
    checks.whole(
        "mtp layers", mtp_layers, minimum=0, maximum=MAX_MTP_LAYERS,
        allowed=f"0 (none) to {MAX_MTP_LAYERS} MTP modules, e.g. 1 as DeepSeek-V3 trains",
    )  # fmt: skip
    if ep_max_domains is not None:
        checks.whole(
            "ep max nodes",
            ep_max_domains,
            maximum=4096,
            allowed="a whole number of nodes >= 1 (DeepSeek-V3 routes to 4)",
        )
    price = system.chip.price_usd_per_chip_hour.value_usd if usd_per_chip_hour is None else usd_per_chip_hour
    checks.positive("price per chip-hour", price, allowed="a positive number")
    checks.fraction("memory reserve", memory_reserve_frac, one=False)
    notes = []
    if defaulted_v:
        notes.append("interleaved with no --virtual-stages: 2 model chunks per stage assumed.")
    if stage_layers is None and model.num_layers % plan.pp:
        notes.append(
            f"{model.num_layers} layers over {plan.pp} stages: the fullest stage has "
            f"{math.ceil(model.num_layers / plan.pp)} and sets the pace."
        )
    deployment = Deployment(
        model=model,
        system=system,
        plan=plan,
        # the 16-bit activations attention reads (FP16 runs stay FP16), GEMMs at the recipe's format
        precisions=Precisions(
            weights=precision,
            kv=Precision.FP16 if precision is Precision.FP16 else Precision.BF16,
            compute=precision,
        ),
        usd_per_chip_hour=float(price),
        efficiency=efficiency,
        memory_reserve_frac=memory_reserve_frac,
    )
    return TrainingSetup(
        deployment=deployment,
        tokens=float(tokens),
        seq_len=seq,
        global_batch=batch,
        microbatch=micro,
        schedule=sched,
        virtual_stages=v,
        recompute=tr.Recompute.parse(policy.memory),
        optimizer=tr.Optimizer.parse(optimizer),
        zero=zero_stage,
        sequence_parallel=sequence_parallel,
        notes=tuple(notes),
        recipe=recipe,
        ep_overlap_frac=float(overlap),
        ep_overlap_paired=ep_overlap_frac is None
        and profile.ep_comm_overlap
        and sched is not pl.Schedule.DUALPIPE,
        routing_skew=float(routing_skew),
        bucket_bytes=bucket_bytes,
        ep_max_domains=ep_max_domains,
        ep_dispatch_fp8=bool(ep_dispatch_fp8),
        framework=profile,
        recompute_policy=policy,
        stage_layers=stage_layers,
        mtp_layers=int(mtp_layers),
        attention_backward=tf.attention_backward_efficiency(
            system.chip.id, fp8_attention_format(profile, recipe) or "bf16"
        ),
        attention_kernel=tf.attention_kernel_ratio(system.chip.id, profile.attention_kernel, seq / plan.cp),
        split_accumulation=(
            tf.split_accumulation(system.chip.id, recipe.value) if profile.fp8_split_accumulation else None
        ),
    )


#: Chips whose FP8 GEMMs take both operands K-major (Hopper, and Ada's L40S), so the backward's
#: column-wise use of a quantised tensor is a physically transposed copy (Transformer Engine,
#: docs/features/low_precision_training/performance_considerations.rst, "Handling transposes":
#: "Hopper: ... columnwise tensors need to be physically transposed in memory"; "Blackwell:
#: supports columnwise access natively, so no transpose is needed").
FP8_TRANSPOSE_CHIPS = ("h100-sxm", "h800", "h200", "h100-pcie", "h100-nvl", "l40s")

#: Where Transformer Engine's fused grouped MLP runs: compute capability 10 (its
#: ``is_supported``: ``get_device_compute_capability()[0] == 10``) and a block-scaled recipe
#: (TE: "under te.autocast with an MXFP8/NVFP4 recipe").
FUSED_GROUPED_MLP_CHIPS = ("b200", "b300", "gb200", "gb300")
FUSED_GROUPED_MLP_RECIPES = (GemmRecipe.MXFP8, GemmRecipe.NVFP4)

#: GEMM recipes under which Transformer Engine's FP8 dot-product attention runs, and the
#: format its attention core computes in (an MXFP8 recipe scales the core by blocks of 32).
FP8_ATTENTION_FORMATS = {
    GemmRecipe.FP8: "fp8",
    GemmRecipe.FP8_CURRENT: "fp8",
    GemmRecipe.FP8_BLOCK: "fp8",
    GemmRecipe.MXFP8: "mxfp8",
}


def fp8_attention_format(profile: TrainingFramework, recipe: GemmRecipe) -> str | None:
    """The attention core's 8-bit format when the framework runs FP8 dot-product attention
    (``profile.fp8_attention``) under an 8-bit GEMM recipe; None otherwise (16-bit attention)."""
    return FP8_ATTENTION_FORMATS.get(recipe) if profile.fp8_attention else None


def check_plan_on_model(model: ModelSpec, plan: ParallelPlan) -> None:
    """Refuse a plan the model cannot be split by: tp not dividing the heads, more stages than
    layers, EP over a dense model or not dividing the experts."""
    heads = model.attention.num_heads
    if heads % plan.tp:
        raise InputError("plan tp", plan.tp, f"a divisor of the {heads} attention heads")
    if plan.pp > model.num_layers:
        raise InputError("plan pp", plan.pp, f"at most the {model.num_layers} layers")
    if plan.ep > 1:
        if not model.is_moe or model.moe is None:
            raise InputError("plan ep", plan.ep, "1 for a dense model (it has no experts to shard)")
        if model.moe.num_experts % plan.ep:
            raise InputError("plan ep", plan.ep, f"a divisor of the {model.moe.num_experts} experts")


def batch_shape(
    model: ModelSpec, plan: ParallelPlan, seq_len: int | None, microbatch: int, global_batch: int | None
) -> tuple[int, int, int]:
    """(sequence length, micro-batch, global batch) checked against the plan: the sequence a
    multiple of ``cp``, the batch a multiple of ``dp x microbatch`` (default: about
    :data:`DEFAULT_GLOBAL_BATCH_TOKENS` tokens a step, rounded to that multiple)."""
    seq = min(DEFAULT_SEQ_LEN, model.max_context or DEFAULT_SEQ_LEN) if seq_len is None else seq_len
    seq = checks.whole("seq-len", seq, maximum=MAX_CONTEXT)
    if seq % plan.cp:
        raise InputError("seq-len", seq, f"a multiple of cp = {plan.cp}")
    micro = checks.whole("microbatch", microbatch)
    unit = plan.dp * micro
    if global_batch is None:
        global_batch = max(1, round(DEFAULT_GLOBAL_BATCH_TOKENS / seq / unit)) * unit
    batch = checks.whole("batch", global_batch)
    if batch % unit:
        raise InputError("batch", batch, f"a multiple of dp x microbatch = {unit} sequences")
    return seq, micro, batch


def schedule_of(
    model: ModelSpec,
    plan: ParallelPlan,
    schedule: pl.Schedule | str,
    virtual_stages: int,
    batch: int,
    microbatch: int,
) -> tuple[pl.Schedule, int, bool]:
    """The pipeline schedule, its model chunks per stage and whether 2 were assumed: interleaving
    needs the micro-batches in multiples of ``pp`` and at most the layers per stage as chunks;
    DualPipe an even number of stages (it feeds both ends)."""
    sched = pl.Schedule.parse(schedule)
    v = checks.whole("virtual stages", virtual_stages)
    defaulted = False
    if sched is pl.Schedule.INTERLEAVED:
        if v < 2:
            v, defaulted = 2, True
        if (batch // (plan.dp * microbatch)) % plan.pp:
            raise InputError("batch", batch, f"{plan.pp} x dp x microbatch multiples for interleaving")
        if math.ceil(model.num_layers / plan.pp) < v:
            raise InputError("virtual stages", v, "at most the layers per stage")
    elif v != 1:
        raise InputError("virtual stages", v, "1 unless --schedule interleaved")
    if sched is pl.Schedule.DUALPIPE and (plan.pp < 2 or plan.pp % 2):
        raise InputError(
            "plan pp", plan.pp, "an even number of stages >= 2 for DualPipe (it feeds both ends)"
        )
    return sched, v, defaulted


def gemm_recipe(
    model: ModelSpec, system: SystemSpec, compute: Precision | GemmRecipe | str | None
) -> GemmRecipe:
    """The GEMM recipe a run states, else BF16 where the chip has a BF16 peak (the model's
    native format otherwise, when it names a recipe)."""
    if compute:
        return GemmRecipe.parse(compute)
    chip = system.chip
    native = Precision.BF16 if Precision.BF16 in chip.peak_flops_per_s else model.native_weight_precision
    return GemmRecipe.parse(native) if native.value in {r.value for r in GemmRecipe} else GemmRecipe.BF16


def parse_ep_dispatch(text: str) -> bool:
    """``--ep-dispatch``: ``"fp8"`` (dispatch in FP8, combine in BF16, as DeepSeek-V3) -> True,
    ``"bf16"`` -> False (``make_training``'s ``ep_dispatch_fp8``)."""
    key = text.strip().lower()
    if key not in ("bf16", "fp8"):
        raise InputError("--ep-dispatch", text, "bf16 or fp8 (fp8: dispatch in FP8, combine in BF16)")
    return key == "fp8"


#: Every GEMM recipe :func:`make_training` knows (``compute``), whatever the chip.
GEMM_RECIPES: tuple[str, ...] = tuple(r.value for r in GemmRecipe)


def gemm_recipes(system: SystemSpec) -> tuple[str, ...]:
    """The GEMM recipes :func:`make_training` accepts on ``system`` (its ``compute``): those
    whose peak the chip's catalog entry states (``tf32`` is not a recipe; ``nvfp4`` needs an
    fp4 peak)."""
    peaks = system.chip.peak_flops_per_s
    return tuple(r.value for r in GemmRecipe if r.precision.compute_class in peaks)
