"""The Training page's state: one job and a pipeline schedule drawn on its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rackmath.analyses.training.setup import GEMM_RECIPES
from rackmath.errors import RackmathError
from rackmath.specs.plan import ParallelPlan
from rackmath.web.state.common import (
    MAX_CONTEXT,
    QueryParams,
    bounded,
    choice,
    parse_model_id,
    parse_model_page,
    parse_positive,
    parse_system_id,
    state_query,
    whole,
)

#: every schedule the simulator lays out (DualPipe needs P even and m >= 2P)
PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe")
TRAIN_SCHEDULES = PIPELINE_SCHEDULES


RECOMPUTE_MODES = ("none", "selective", "full", "sqrt", "reversible")


OPTIMIZERS = ("adam-mixed", "adam-fp32", "adam-bf16", "sgd-mixed")


EFFICIENCIES = ("kernel", "pure", "calibrated")


#: Largest pipeline the timeline draws (ops = 2-3 x stages x micro-batches x chunks).
MAX_PIPE_STAGES = 32


MAX_PIPE_MICROBATCHES = 128


@dataclass(frozen=True)
class TrainingState:
    """The Training page: one job (sidebar) and a pipeline schedule drawn on its own."""

    model: str = "llama-3.1-405b"
    config: str | None = None
    system: str = "h100-hgx"
    plan: str = "tp=8,pp=16,dp=64"
    chips: int | None = None  # None: the plan's product
    trillion_tokens: float = 15.6  # token budget, in 1e12 tokens
    seq_len: int = 8192
    global_batch: int = 2048  # sequences per step
    microbatch: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "selective"
    optimizer: str = "adam-mixed"
    zero: int = 2
    compute: str | None = None  # a GEMM recipe; None: bf16 where the chip has it
    usd_per_chip_hour: float | None = None
    efficiency: str = "kernel"  # "pure": the roofline; "calibrated": it at the fitted flops_frac
    pipe_schedule: str = "1f1b"
    pipe_stages: int = 4
    pipe_microbatches: int = 8
    pipe_virtual_stages: int = 2  # model chunks per stage (interleaved only)


def _plan_text(key: str, text: str) -> str:
    return str(ParallelPlan.parse(text))


_TRAINING_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "model": parse_model_id,
    "system": parse_system_id,
    "plan": _plan_text,
    "chips": whole(1, 10_000_000),
    "trillion_tokens": parse_positive,
    "seq_len": whole(1, MAX_CONTEXT),
    "global_batch": whole(1, 10_000_000),
    "microbatch": whole(1, 1_000_000),
    "schedule": choice(TRAIN_SCHEDULES),
    "virtual_stages": whole(1, 64),
    "recompute": choice(RECOMPUTE_MODES),
    "optimizer": choice(OPTIMIZERS),
    "zero": whole(0, 3),
    "compute": choice(GEMM_RECIPES),
    "usd_per_chip_hour": parse_positive,
    "efficiency": choice(EFFICIENCIES),
    "pipe_schedule": choice(PIPELINE_SCHEDULES),
    "pipe_stages": whole(1, MAX_PIPE_STAGES),
    "pipe_microbatches": whole(1, MAX_PIPE_MICROBATCHES),
    "pipe_virtual_stages": whole(2, 8),
}


def parse_training_query(params: QueryParams) -> tuple[TrainingState, list[RackmathError]]:
    return parse_model_page(params, _TRAINING_PARSERS, TrainingState)


def training_query(state: TrainingState) -> dict[str, str]:
    return state_query(state)


bounded("training", _TRAINING_PARSERS)
