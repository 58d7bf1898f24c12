"""Published training runs against the training estimate: one run's metric predicted under
the convention the run states (``catalog/data/training_runs.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rackmath.analyses.training.setup import TrainingSetup, make_training
from rackmath.core import roofline as rl
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec


@dataclass(frozen=True)
class RunPrediction:
    """One published training run against the model's prediction of the same metric."""

    run_id: str
    measurement_id: int | None
    metric: str
    measured: float
    predicted: float
    predicted_mfu_frac: float
    flops_frac: float

    @property
    def error_frac(self) -> float:
        """``predicted / measured - 1``: positive when the model is optimistic for
        throughput metrics (mfu, flops) and pessimistic for time metrics."""
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "measurement_id": self.measurement_id,
            "metric": self.metric,
            "measured": self.measured,
            "predicted": self.predicted,
            "error_frac": self.error_frac,
            "predicted_mfu_frac": self.predicted_mfu_frac,
            "flops_frac": self.flops_frac,
        }


def run_setup(
    run: Any,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    system: SystemSpec | None = None,
) -> TrainingSetup:
    """The :class:`TrainingSetup` of a :class:`rackmath.catalog.training_runs.TrainingRun`
    (on ``system`` instead of the run's own, e.g. with a calibrated link latency)."""
    tokens = run.tokens if run.tokens else float(run.global_batch * run.seq_len)
    return make_training(
        run.model,
        run.system if system is None else system,
        run.plan,
        tokens=tokens,
        seq_len=run.seq_len,
        global_batch=run.global_batch,
        microbatch=run.microbatch,
        schedule=run.schedule,
        virtual_stages=run.virtual_stages,
        recompute=run.recompute,
        zero=run.zero,
        compute=run.compute,
        efficiency=efficiency,
        ep_overlap_frac=run.ep_overlap_frac,
        ep_max_domains=run.ep_max_nodes,
        ep_dispatch_fp8=run.ep_dispatch_fp8,
        framework=run.framework,
        framework_settings=dict(run.framework_settings),
        first_stage_layers=run.first_stage_layers,
        last_stage_layers=run.last_stage_layers,
        balance_stages=run.balance_stages,
        stage_layers=run.stage_layers,
        mtp_layers=run.mtp_layers,
    )


def predict_run(run: Any, efficiency: rl.Efficiency = rl.KERNEL_GROUNDED) -> RunPrediction:
    """Predict the run's published metric (MFU, FLOP/s per chip, step time or chip-hours)."""

    from rackmath.analyses.training.estimate import estimate

    e = estimate(run_setup(run, efficiency))
    predicted = predicted_metric(run, e)
    return RunPrediction(
        run_id=run.id,
        measurement_id=run.measurement_id,
        metric=run.metric.value,
        measured=run.value,
        predicted=predicted,
        predicted_mfu_frac=e.mfu,
        flops_frac=efficiency.flops_frac,
    )


def predicted_metric(run: Any, e: Any) -> float:
    """The estimate's value of the run's metric, under the MFU convention the run states
    (like with like: a source's MFU without attention FLOPs is compared with ours without)."""
    from rackmath.analyses.training.estimate import flops_per_token
    from rackmath.catalog.training_runs import RunMetric

    s = e.setup
    c = run.convention
    if run.metric in (RunMetric.MFU, RunMetric.HFU_FLOPS_PER_CHIP):
        peak = s.bf16_peak_flops_per_s if c.peak == "bf16" else s.peak_flops_per_s
        flops = "hardware" if run.metric is RunMetric.HFU_FLOPS_PER_CHIP else c.flops
        rate = s.tokens_per_step * flops_per_token(s, flops, c.attention) / e.step.step_s / s.chips
        return float(rate / peak) if run.metric is RunMetric.MFU else float(rate)
    if run.metric is RunMetric.TOKENS_PER_S_PER_CHIP:
        return float(e.tokens_per_s / s.chips)
    return float(e.step.step_s if run.metric is RunMetric.STEP_S else e.chip_hours)


def throughput_ratio(p: RunPrediction) -> float:
    """Measured over predicted throughput (time metrics inverted): below 1, the model is
    optimistic."""
    from rackmath.catalog.training_runs import RunMetric

    if p.metric in (RunMetric.STEP_S, RunMetric.CHIP_HOURS):
        return p.predicted / p.measured
    return p.measured / p.predicted


def calibrated_flops_frac(predictions: list[RunPrediction]) -> float:
    """One achievable-matmul fraction for all runs: the geometric mean of measured over
    pure-roofline throughput. Compute time scales as ``1 / flops_frac`` while communication
    does not, so this slightly under-corrects; :data:`CALIBRATED_TRAINING` holds the value
    for the shipped runs and a test recomputes it."""
    ratios = [throughput_ratio(p) for p in predictions]
    return float(np.exp(np.mean(np.log(ratios))))


@dataclass(frozen=True)
class RunScore:
    """One published run scored kernel-grounded (no end-to-end fit): the framework profile it
    ran under, its precision and kind, the prediction of its own metric and the error."""

    run_id: str
    #: the framework profile's id and its label (version, the settings the run changed)
    framework: str
    profile: str
    precision: str
    moe: bool
    metric: str
    measured: float
    predicted: float
    held_out: bool

    @property
    def error_frac(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def precision_group(self) -> str:
        """``16-bit`` (BF16, FP16) or ``8-bit or less`` (FP8 recipes, MXFP8, NVFP4)."""
        return "16-bit" if self.precision in ("bf16", "fp16") else "8-bit or less"


def score_runs(
    runs: Any = None, efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED
) -> tuple[RunScore, ...]:
    """Every training run of the catalog (the fitted set and the held-out rows), or ``runs``,
    predicted under ``efficiency`` (``kernel``, the default: the chips' kernel fits, fitted on
    microbenchmarks and never on these rows) and the framework profile each states."""
    from rackmath.analyses.training.estimate import estimate
    from rackmath.catalog.training_runs import held_out_runs, training_runs

    chosen = (*training_runs(), *held_out_runs()) if runs is None else tuple(runs)
    out = []
    for run in chosen:
        e = estimate(run_setup(run, efficiency))
        out.append(
            RunScore(
                run_id=run.id,
                framework=e.setup.profile.id,
                profile=e.setup.profile.label,
                precision=str(e.setup.recipe.value),
                moe=bool(run.model.is_moe),
                metric=run.metric.value,
                measured=float(run.value),
                predicted=predicted_metric(run, e),
                held_out=bool(run.held_out),
            )
        )
    return tuple(out)
