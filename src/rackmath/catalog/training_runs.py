"""Published training runs (``data/training_runs.yaml``) as frozen specs, for validation.

Each run names a model (a catalog id, or a GPT shape given inline as its source states
it), a system, a parallel plan, batch and sequence, and one published metric in SI units.
Read and validated once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

import yaml

from rackmath.catalog.loader import CatalogError, model, system
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import (
    AttentionKind,
    AttentionSpec,
    DenseMlpSpec,
    LayerSpec,
    MlpKind,
    ModelSpec,
)
from rackmath.specs.plan import ParallelPlan


class RunMetric(StrEnum):
    MFU = "mfu"  # model FLOPs utilisation, a fraction
    HFU_FLOPS_PER_CHIP = "hfu_flops_per_chip"  # achieved FLOP/s per chip, recomputation counted
    STEP_S = "step_s"  # seconds per optimizer step
    CHIP_HOURS = "chip_hours"  # chip-hours for the whole token budget
    TOKENS_PER_S_PER_CHIP = "tokens_per_s_per_chip"  # training tokens per second per chip


@dataclass(frozen=True)
class MfuConventionSpec:
    """How a source states utilisation: ``flops`` "model" or "hardware" (recomputation
    counted), with or without attention FLOPs, against the "bf16" peak or the "compute"
    precision's peak."""

    flops: str = "model"
    attention: bool = True
    peak: str = "bf16"

    def __post_init__(self) -> None:
        if self.flops not in ("model", "hardware"):
            raise ValueError(f"convention flops must be model or hardware, got {self.flops!r}")
        if self.peak not in ("bf16", "compute"):
            raise ValueError(f"convention peak must be bf16 or compute, got {self.peak!r}")

    @property
    def label(self) -> str:
        return f"{self.flops} FLOPs, {'with' if self.attention else 'without'} attention, {self.peak} peak"


@dataclass(frozen=True)
class TrainingRun:
    id: str
    measurement_id: int | None
    source: str
    model: ModelSpec
    system: SystemSpec
    plan: ParallelPlan
    seq_len: int
    global_batch: int
    microbatch: int
    #: the framework's recompute policy (None: the framework's default)
    recompute: str | None
    #: ZeRO stage (None: the framework's default; FSDP = 3)
    zero: int | None
    schedule: str
    #: model chunks per pipeline stage; > 1 only with the interleaved schedule, whose bubble
    #: is ``(P-1)/(v m)`` of the ideal time (Narayanan et al. 2021 §2.2.2)
    virtual_stages: int
    compute: str
    tokens: float | None
    metric: RunMetric
    value: float
    assumed: tuple[str, ...]
    #: the utilisation convention the source uses (every row states it)
    convention: MfuConventionSpec = MfuConventionSpec()
    #: share of the expert all-to-all hidden under compute (None: the schedule's default)
    ep_overlap_frac: float | None = None
    #: node-limited routing (most nodes per token) and FP8 dispatch, where the source says so
    ep_max_nodes: int | None = None
    ep_dispatch_fp8: bool = False
    #: the framework the run states (catalog/data/training_frameworks.yaml; None: generic) and
    #: the settings it changes from that framework's defaults
    framework: str | None = None
    framework_settings: tuple[tuple[str, Any], ...] = ()
    #: layers on the first and last pipeline stages where stated (Megatron's
    #: --decoder-first/last-pipeline-num-layers), or the stages balanced by the tool
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    balance_stages: bool = False
    stage_layers: tuple[int, ...] | None = None
    #: multi-token-prediction modules the run trains beside the model (DeepSeek-V3: 1)
    mtp_layers: int = 0
    #: precision as the source names it (e.g. "FP8-CS", "MXFP8"), for tables
    precision_label: str = ""
    #: the source's release or publication date, and what it states beyond the plan
    date: str = ""
    stated: tuple[str, ...] = ()
    #: held out of every fit (held_out section): scored, never tuned on
    held_out: bool = False


def gpt_model(run_id: str, hidden: int, layers: int, heads: int, vocab: int) -> ModelSpec:
    """A GPT-2/3-shaped decoder: MHA, a 4h GELU MLP with biases, tied embeddings, two
    LayerNorms per layer (Brown et al. 2020; Narayanan et al. 2021 count the same shape)."""
    head_dim = hidden // heads
    return ModelSpec(
        id=f"gpt-{run_id}",
        name=f"GPT (h={hidden}, L={layers}, a={heads})",
        family="gpt",
        hidden_size=hidden,
        vocab_size=vocab,
        tie_word_embeddings=True,
        attention=AttentionSpec(
            kind=AttentionKind.MHA,
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=head_dim,
            v_head_dim=head_dim,
            qkv_bias=True,
            output_bias=True,
        ),
        layers=tuple(LayerSpec(window=None, mlp=MlpKind.DENSE) for _ in range(layers)),
        dense_mlp=DenseMlpSpec(intermediate_size=4 * hidden, gated=False, bias=True),
        moe=None,
    )


def _schedule(raw: dict[str, Any]) -> tuple[str, int]:
    """The run's pipeline schedule and virtual stages, checked against each other (the
    schedule name itself is parsed by ``analyses.training.estimate.make_training``)."""
    schedule = str(raw.get("schedule", "1f1b")).strip().lower()
    v = raw.get("virtual_stages", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"virtual_stages must be a whole number >= 1, got {v!r}")
    if v > 1 and schedule != "interleaved":
        raise ValueError(f"virtual_stages {v} needs schedule: interleaved (got {schedule})")
    return schedule, v


def _run(raw: dict[str, Any], held_out: bool = False) -> TrainingRun:
    run_id = str(raw["id"])
    schedule, virtual_stages = _schedule(raw)
    if "gpt" in raw:
        g = raw["gpt"]
        spec = gpt_model(run_id, int(g["hidden"]), int(g["layers"]), int(g["heads"]), int(g["vocab"]))
    else:
        spec = model(str(raw["model"]))
    tokens = raw.get("tokens")
    return TrainingRun(
        id=run_id,
        measurement_id=raw.get("measurement_id"),
        source=str(raw["source"]),
        model=spec,
        system=system(str(raw["system"])),
        plan=ParallelPlan.parse(str(raw["plan"])),
        seq_len=int(raw["seq_len"]),
        global_batch=int(raw["global_batch"]),
        microbatch=int(raw.get("microbatch", 1)),
        recompute=None if raw.get("recompute") is None else str(raw["recompute"]),
        zero=None if raw.get("zero") is None else int(raw["zero"]),
        schedule=schedule,
        virtual_stages=virtual_stages,
        compute=str(raw.get("compute", "bf16")),
        tokens=None if tokens is None else float(tokens),
        metric=RunMetric(raw["metric"]),
        value=float(raw["value"]),
        assumed=tuple(raw.get("assumed") or ()),
        convention=MfuConventionSpec(**(raw.get("convention") or {})),
        ep_overlap_frac=None if raw.get("ep_overlap_frac") is None else float(raw["ep_overlap_frac"]),
        ep_max_nodes=None if raw.get("ep_max_nodes") is None else int(raw["ep_max_nodes"]),
        ep_dispatch_fp8=str(raw.get("ep_dispatch", "bf16")) == "fp8",
        framework=raw.get("framework"),
        framework_settings=tuple(sorted((raw.get("framework_settings") or {}).items())),
        first_stage_layers=raw.get("first_stage_layers"),
        last_stage_layers=raw.get("last_stage_layers"),
        balance_stages=bool(raw.get("balance_stages", False)),
        stage_layers=None if raw.get("stage_layers") is None else tuple(int(n) for n in raw["stage_layers"]),
        mtp_layers=int(raw.get("mtp_layers", 0)),
        precision_label=str(raw.get("precision", raw.get("compute", "bf16"))),
        date=str(raw.get("date", "")),
        stated=tuple(raw.get("stated") or ()),
        held_out=held_out,
    )


@cache
def training_runs() -> tuple[TrainingRun, ...]:
    return _section("runs")


@cache
def held_out_runs() -> tuple[TrainingRun, ...]:
    """Published FP8 and MoE training runs added after the model was built: they test it,
    never enter a fit (not in :func:`training_runs`, so no calibration sees them)."""
    return _section("held_out")


def _section(key: str) -> tuple[TrainingRun, ...]:
    text = resources.files("rackmath.catalog").joinpath("data", "training_runs.yaml").read_text()
    data = yaml.safe_load(text)
    runs = []
    for raw in data.get(key) or []:
        try:
            runs.append(_run(raw, held_out=key == "held_out"))
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"training_runs.yaml entry {raw.get('id')!r}: {exc}") from exc
    return tuple(runs)
