"""Training analysis: a model, a system and a parallel plan -> step time, memory, cost, MFU.

The pieces live by responsibility: :mod:`rackmath.analyses.training.setup` (the validated
job), :mod:`rackmath.analyses.training.step` (the step per operator and the one memory
account), :mod:`rackmath.analyses.training.runs` (published runs),
:mod:`rackmath.analyses.training.pipeline` (a schedule alone). This module chooses the
recomputation, states MFU under every convention and assembles the estimate.

MFU conventions (:class:`MfuConvention`; sources differ, so every published row says
which it uses): the numerator is *model* FLOPs (``6 N`` + causal attention, PaLM
appendix B) or *hardware* FLOPs (plus what recomputation re-runs, Korthikanti et al. 2022
§5 / Narayanan et al. 2021 eq. 3), with or without the attention core's FLOPs; the
denominator is the chips' BF16 peak or the peak of the precision the GEMMs compute at
(FP8 runs: the FP8 peak is twice BF16's, so the same run shows half the MFU).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rackmath.analyses.kernels.tables import describe as describe_efficiency
from rackmath.analyses.serving.parts import MemoryPerChip
from rackmath.analyses.training.comm import overlap_ratio
from rackmath.analyses.training.setup import TrainingSetup
from rackmath.analyses.training.step import StepBreakdown, memory_per_chip, step_breakdown
from rackmath.core import roofline as rl
from rackmath.core import training as tr
from rackmath.errors import DoesNotFitError
from rackmath.frames import Col, Layout, Record, Tabular
from rackmath.units import SECONDS_PER_DAY, SECONDS_PER_HOUR


# ---------------------------------------------------------------------------- recompute choice
@dataclass(frozen=True)
class RecomputeOption(Record):
    mode: tr.Recompute
    activations_bytes: float
    total_bytes: float
    extra_flops_frac: float  # recomputed FLOPs over model FLOPs
    step_s: float
    fits: bool


def recompute_options(s: TrainingSetup, budget_bytes: float | None = None) -> list[RecomputeOption]:
    """Every recomputation mode for this job: memory per chip, extra FLOPs, step time."""
    budget = memory_per_chip(s).usable_bytes if budget_bytes is None else budget_bytes
    model_flops = float(tr.model_flops_per_token(s.model, s.seq_len, s.mtp_layers))
    out = []
    for mode in tr.Recompute:
        mem = memory_per_chip(s, mode)
        out.append(
            RecomputeOption(
                mode=mode,
                activations_bytes=mem.activation_bytes,
                total_bytes=mem.total_bytes,
                extra_flops_frac=float(tr.recompute_flops_per_token(s.model, s.seq_len, mode, s.mtp_layers))
                / model_flops,
                step_s=step_breakdown(s, mode).step_s,
                fits=mem.total_bytes <= budget,
            )
        )
    return out


def choose_recompute(s: TrainingSetup, budget_bytes: float | None = None) -> RecomputeOption:
    """The fastest mode whose memory fits ``budget_bytes`` per chip (default: usable HBM).

    Raises :class:`DoesNotFitError` naming the leanest mode when none fits.
    """
    options = recompute_options(s, budget_bytes)
    fitting = [o for o in options if o.fits]
    if fitting:
        return min(fitting, key=lambda o: (o.step_s, o.total_bytes))
    leanest = min(options, key=lambda o: o.total_bytes)
    budget = memory_per_chip(s).usable_bytes if budget_bytes is None else budget_bytes
    raise DoesNotFitError(
        f"{s.model.id} with plan {s.plan} under any recomputation (leanest: {leanest.mode.value})",
        leanest.total_bytes,
        budget,
    )


# ---------------------------------------------------------------------------- MFU conventions
@dataclass(frozen=True)
class MfuConvention(Record):
    """One way to state utilisation: ``flops`` "model" or "hardware" (recompute counted),
    with or without the attention core's FLOPs, against the ``peak`` of "bf16" or of the
    GEMMs' precision."""

    flops: str
    attention: bool
    peak: str
    value: float

    @property
    def label(self) -> str:
        return f"{self.flops} FLOPs, {'with' if self.attention else 'without'} attention, {self.peak} peak"


def flops_per_token(s: TrainingSetup, flops: str, attention: bool) -> float:
    """Training FLOPs per token under a convention (see :class:`MfuConvention`):
    model with attention ``6 N + 3 A_f``; without, ``6 N``; hardware adds the recomputed
    forward (selective: ``A_f``; full: ``2 N + A_f``), without attention ``A_f`` dropped."""
    with_attn = float(tr.model_flops_per_token(s.model, s.seq_len, s.mtp_layers))
    attn_fwd = float(tr.forward_attention_flops_per_token(s.model, s.seq_len, s.mtp_layers))
    total = with_attn if attention else with_attn - tr.FORWARD_BACKWARD_PASSES * attn_fwd
    if flops == "hardware":
        extra = float(tr.recompute_flops_per_token(s.model, s.seq_len, s.recompute, s.mtp_layers))
        if not attention and s.recompute is not tr.Recompute.NONE:
            extra -= attn_fwd
        total += extra
    return total


def mfu_conventions(s: TrainingSetup, step_s: float) -> tuple[MfuConvention, ...]:
    """Utilisation under all eight conventions (model/hardware x attention x peak)."""
    peaks = {s.attention_precision.value: s.bf16_peak_flops_per_s, s.compute.value: s.peak_flops_per_s}
    out = []
    for flops in ("model", "hardware"):
        for attention in (True, False):
            work = s.tokens_per_step * flops_per_token(s, flops, attention)
            for name, peak in peaks.items():
                value = float(rl.utilization(work, step_s, s.chips * peak))
                out.append(MfuConvention(flops, attention, name, value))
    return tuple(out)


# ---------------------------------------------------------------------------- the estimate
@dataclass(frozen=True)
class TrainingEstimate(Tabular):
    frame_layout = Layout(
        columns=(
            Col("setup.model.id", "model"),
            Col("setup.system.id", "system"),
            Col("setup.chips", "chips", "chips"),
            Col("setup.plan", "plan"),
            Col("setup.schedule", "schedule"),
            Col("setup.recompute", "recompute"),
            Col("setup.compute", "compute_precision"),
            Col("setup.efficiency_label", "efficiency"),
            Col("setup.seq_len", "seq_len_tokens", "tokens"),
            Col("setup.global_batch", "global_batch_sequences", "sequences"),
            Col("setup.tokens", "tokens", "tokens"),
            Col("step.step_s", "step_s", "s"),
            Col("step.bubble_frac", "bubble_frac", "1"),
            Col("tokens_per_s", "tokens_per_s", "tokens/s"),
            Col("mfu", "mfu_frac", "1"),
            Col("hfu", "hfu_frac", "1"),
            Col("memory.total_bytes", "memory_bytes_per_chip", "bytes"),
            Col("memory.fits", "fits"),
            Col("total_days", "total_days", "days"),
            Col("chip_hours", "chip_hours", "chip-hours"),
            Col("cost_usd", "cost_usd", "USD"),
        )
    )

    setup: TrainingSetup
    step: StepBreakdown
    memory: MemoryPerChip
    model_flops_per_token: float
    recompute_flops_per_token: float
    options: tuple[RecomputeOption, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.setup.tokens_per_step / self.step.step_s

    @property
    def steps(self) -> float:
        return self.setup.tokens / self.setup.tokens_per_step

    @property
    def total_s(self) -> float:
        return self.steps * self.step.step_s

    @property
    def total_days(self) -> float:
        return self.total_s / SECONDS_PER_DAY

    @property
    def chip_hours(self) -> float:
        return self.total_s * self.setup.chips / SECONDS_PER_HOUR

    @property
    def cost_usd(self) -> float:
        return self.chip_hours * self.setup.usd_per_chip_hour

    @property
    def mfu(self) -> float:
        s = self.setup
        work = s.tokens_per_step * self.model_flops_per_token
        return float(rl.utilization(work, self.step.step_s, s.chips * s.peak_flops_per_s))

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: recomputed FLOPs count too."""
        s = self.setup
        work = s.tokens_per_step * (self.model_flops_per_token + self.recompute_flops_per_token)
        return float(rl.utilization(work, self.step.step_s, s.chips * s.peak_flops_per_s))

    @property
    def conventions(self) -> tuple[MfuConvention, ...]:
        """MFU under every convention, side by side."""
        return mfu_conventions(self.setup, self.step.step_s)

    @property
    def total_flops(self) -> float:
        return self.setup.tokens * self.model_flops_per_token

    def require_fit(self) -> TrainingEstimate:
        """This estimate when its memory per chip fits the chip; else :class:`DoesNotFitError`
        (``rackmath train`` exits 1 with it after its report; ``rm.train(...,
        require_fit=True)`` raises it), so no cost is quoted for a job that cannot run."""
        mem, s = self.memory, self.setup
        if not mem.fits:
            raise DoesNotFitError(
                f"{s.model.id} training on {s.chips} x {s.system.chip.id} ({s.plan}, recompute "
                f"{s.recompute.value}, ZeRO-{int(s.zero)})",
                mem.total_bytes,
                mem.usable_bytes,
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        s = self.setup
        overlap = overlap_ratio(s)
        return {
            "model": s.model.id,
            "system": s.system.id,
            "chip": s.system.chip.id,
            "chips": s.chips,
            "plan": {"tp": s.plan.tp, "pp": s.plan.pp, "dp": s.plan.dp, "ep": s.plan.ep, "cp": s.plan.cp},
            "schedule": s.schedule.value,
            "virtual_stages": s.virtual_stages,
            "recompute": s.recompute.value,
            "framework": s.profile.to_dict(),
            "recompute_policy": None if s.recompute_policy is None else s.recompute_policy.name,
            "stage_layers": None if s.stage_layers is None else list(s.stage_layers),
            "mtp_layers": s.mtp_layers,  # MTP modules trained on the last stage (in the FLOPs too)
            "optimizer": s.optimizer.value,
            "zero_stage": int(s.zero),
            "compute_precision": s.compute.value,
            "gemm_recipe": s.recipe.value,
            "efficiency": describe_efficiency(s.system.chip.id, s.efficiency),
            "ep_overlap_frac": s.ep_overlap_frac,
            "ep_overlap_paired": s.ep_overlap_paired,
            "routing_skew": s.routing_skew,
            # compute slowed beside hidden DP, EP, CP and PP traffic (None: not charged)
            "overlap_compute_slowdown": None if overlap is None else overlap._asdict(),
            "seq_len_tokens": s.seq_len,
            "global_batch_sequences": s.global_batch,
            "microbatch_sequences": s.microbatch,
            "microbatches": s.microbatches,
            "tokens_per_step": s.tokens_per_step,
            "tokens": s.tokens,
            "flops_frac": s.efficiency.flops_frac,
            "model_flops_per_token": self.model_flops_per_token,
            "recompute_flops_per_token": self.recompute_flops_per_token,
            "total_model_flops": self.total_flops,
            "step": self.step.to_dict(),
            "operators": self.step.operator_rows(),
            "step_s": self.step.step_s,
            "bubble_fraction": self.step.bubble_frac,
            "tokens_per_s": self.tokens_per_s,
            "mfu_frac": self.mfu,
            "hfu_frac": self.hfu,
            "mfu_conventions": [c.to_dict() | {"label": c.label} for c in self.conventions],
            "steps": self.steps,
            "total_s": self.total_s,
            "total_days": self.total_days,
            "chip_hours": self.chip_hours,
            "usd_per_chip_hour": s.usd_per_chip_hour,
            "cost_usd": self.cost_usd,
            "memory_per_chip": self.memory.to_dict(),
            "recompute_options": [o.to_dict() for o in self.options],
            "notes": list(s.notes),
        }


def estimate(s: TrainingSetup) -> TrainingEstimate:
    """Step time, MFU, memory per chip and the cost of the token budget."""
    return TrainingEstimate(
        setup=s,
        step=step_breakdown(s),
        memory=memory_per_chip(s),
        model_flops_per_token=float(tr.model_flops_per_token(s.model, s.seq_len, s.mtp_layers)),
        recompute_flops_per_token=float(
            tr.recompute_flops_per_token(s.model, s.seq_len, s.recompute, s.mtp_layers)
        ),
        options=tuple(recompute_options(s)),
    )


def with_efficiency(s: TrainingSetup, efficiency: rl.Efficiency) -> TrainingSetup:
    return replace(s, deployment=replace(s.deployment, efficiency=efficiency))
