"""The roofline of this machine: measured ceilings and decode steps beside rackmath's prediction.

The torch side (:mod:`rackmath.measure.torch_bench`, imported lazily by the faces) times a
dense matmul, a large copy and real decode steps of a Hugging Face model with random weights;
it returns the plain data classes below. This module turns the measured ceilings into a
:class:`~rackmath.specs.hardware.SystemSpec` for "this machine", the model's config dict
into a :class:`~rackmath.specs.model.ModelSpec` (:func:`rackmath.specs.hf_config.model_from_config`,
the same dict the benchmark built its model from), and predicts every measured step with
:meth:`rackmath.analyses.serving.deployment.Deployment.decode`. No I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rackmath.analyses.serving import pooled
from rackmath.core import architecture as arch
from rackmath.core import reality
from rackmath.core import roofline as rl
from rackmath.errors import InputError
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import ChipSpec, DatedPrice, SystemSpec
from rackmath.specs.hf_config import model_from_config
from rackmath.specs.model import ModelSpec
from rackmath.specs.precision import Precision

#: Stated tolerance of the pure-roofline prediction, from the measured ceilings, of the
#: measured decode step at the largest batch (past the knee): within this factor either way.
#: Framework overhead and cache effects make small-batch steps slower than the roofline,
#: so those are judged with the one-point overhead (see :func:`compare`). On this project's
#: 2-core CPU machine the largest-batch step measures 2-3.5x the roofline when idle and up to
#: ~5x with another process competing for the cores, hence 6.
PREDICTION_FACTOR = 6.0


@dataclass(frozen=True)
class Ceilings:
    """What this machine does at best: dense matmul FLOP/s per precision, copy bandwidth."""

    device: str  # 'cpu' or the CUDA device name
    matmul_flops_per_s: tuple[tuple[str, float], ...]  # (precision, FLOP/s)
    copy_bandwidth_bytes_per_s: float  # (read + write bytes) / time of a large copy
    memory_capacity_bytes: float
    threads: int
    matmul_size: int
    copy_bytes: float

    def peak(self, precision: str) -> float:
        return dict(self.matmul_flops_per_s)[precision]


@dataclass(frozen=True)
class DecodePoint:
    batch: int
    context: int
    step_s: float  # median over repeats
    spread_s: float  # interquartile range over repeats
    repeats: int


@dataclass(frozen=True)
class MeasuredRun:
    ceilings: Ceilings
    config: Mapping[str, Any]  # the Hugging Face config dict the model was built from
    dtype: str  # precision the decode ran in
    points: tuple[DecodePoint, ...]
    versions: tuple[tuple[str, str], ...] = field(default=())
    #: (context, batch) of the sweep not timed: more memory than the device has
    skipped: tuple[tuple[int, int], ...] = field(default=())


#: Link latency of the one-device "system": unused (one chip never communicates), but the
#: spec requires a positive figure. 1 us, the order of one NVLink hop.
_UNUSED_LINK_LATENCY_S = 1e-6


def machine_system(c: Ceilings) -> SystemSpec:
    """This machine as a one-chip system whose peaks are the measured ceilings."""
    peaks = {Precision.parse(p): f for p, f in c.matmul_flops_per_s}
    chip = ChipSpec(
        id="this-machine",
        name=f"this machine ({c.device})",
        vendor="local",
        peak_flops_per_s=peaks,
        hbm_capacity_bytes=c.memory_capacity_bytes,
        hbm_bandwidth_bytes_per_s=c.copy_bandwidth_bytes_per_s,
        price_usd_per_chip_hour=DatedPrice(
            value_usd=1.0, date="n/a", source="none", note="not applicable: this machine is not rented"
        ),
        confidence="exact",
        date="measured",
        source=["rackmath measure (dense matmul and large-copy timings on this machine)"],
    )
    return SystemSpec(
        id="this-machine",
        name=chip.name,
        chip=chip,
        scale_up_domain_chips=1,
        scale_up_fabric="none (one device)",
        scale_up_latency_s=_UNUSED_LINK_LATENCY_S,
        scale_out_fabric="none",
        scale_out_latency_s=_UNUSED_LINK_LATENCY_S,
        default_chips=1,
        confidence="exact",
        date="measured",
        source=["rackmath measure"],
        notes="Link latencies are nominal: one device has no links to cross.",
    )


def model_spec(config: Mapping[str, Any]) -> ModelSpec:
    return model_from_config(config, model_id="measure-model", name="random-weight benchmark model")


#: A decode point is timed only if its estimated memory (:func:`decode_memory_bytes`) is at
#: most this share of the device's: the allocator's fragmentation and the framework's own
#: buffers take the rest.
MEMORY_SHARE = 0.7


def decode_memory_bytes(config: Mapping[str, Any], dtype: str, context: int, batch: int) -> float:
    """Bytes one decode step of the benchmark model ``config`` in ``dtype`` holds at ``context``
    x ``batch``, estimated: its weights (:func:`rackmath.core.architecture.param_counts`), the
    static cache of ``context + 1`` tokens a sequence
    (:func:`~rackmath.core.architecture.kv_bytes_per_sequence`) and, twice, one layer's K and V
    expanded to every query head (transformers' SDPA path repeats the KV heads before the
    kernel: on an H100 the CUDA sweep's 4,096 x 512 point ran out of its 80 GB on that copy).
    Worked number (``tests/test_measured_hopper.py``): that point, 104.8 GB."""
    model = model_spec(config)
    a = model.attention
    if a is None:
        raise InputError("model config", "no attention", "a decoder with attention layers")
    elt = Precision.parse(dtype).bytes_per_element
    cache = batch * float(arch.kv_bytes_per_sequence(model, context + 1, elt))
    expanded = 2.0 * cache / model.num_layers * a.num_heads / a.num_kv_heads
    return float(arch.param_counts(model).total * elt + cache + expanded)


@dataclass(frozen=True)
class MeasureResult:
    run: MeasuredRun
    model: ModelSpec
    system: SystemSpec
    predicted_step_s: tuple[float, ...]  # pure roofline from the measured ceilings
    with_overhead_step_s: tuple[float, ...]  # plus the one fixed overhead below
    overhead_s: float  # measured minus predicted at the smallest batch and context
    bottleneck: tuple[str, ...]
    balance_batch: tuple[float, ...]  # per context: rackmath's knee (compute = memory)
    measured_knee_batch: tuple[float, ...]  # per context: from the measured curve
    contexts: tuple[int, ...]

    @property
    def ratios(self) -> np.ndarray:
        """measured / predicted (pure roofline), per point."""
        return np.array([p.step_s for p in self.run.points]) / np.array(self.predicted_step_s)

    def to_dict(self) -> dict[str, Any]:
        c = self.run.ceilings
        return {
            "device": c.device,
            "threads": c.threads,
            "dtype": self.run.dtype,
            "versions": dict(self.run.versions),
            "ceilings": {
                "matmul_flops_per_s": dict(c.matmul_flops_per_s),
                "copy_bandwidth_bytes_per_s": c.copy_bandwidth_bytes_per_s,
                "memory_capacity_bytes": c.memory_capacity_bytes,
                "matmul_size": c.matmul_size,
                "copy_bytes": c.copy_bytes,
            },
            "model_config": dict(self.run.config),
            "skipped": [{"context": c, "batch": b} for c, b in self.run.skipped],
            "params": int(arch.param_counts(self.model).total),
            "overhead_s": self.overhead_s,
            "prediction_factor": PREDICTION_FACTOR,
            "knee": [
                {"context": ctx, "balance_batch": _finite(b), "measured_knee_batch": _finite(k)}
                for ctx, b, k in zip(self.contexts, self.balance_batch, self.measured_knee_batch, strict=True)
            ],
            "points": [
                {
                    "batch": p.batch,
                    "context": p.context,
                    "measured_step_s": p.step_s,
                    "measured_spread_s": p.spread_s,
                    "repeats": p.repeats,
                    "predicted_step_s": pred,
                    "predicted_with_overhead_step_s": with_o,
                    "ratio_measured_over_predicted": p.step_s / pred,
                    "bottleneck": b,
                }
                for p, pred, with_o, b in zip(
                    self.run.points,
                    self.predicted_step_s,
                    self.with_overhead_step_s,
                    self.bottleneck,
                    strict=True,
                )
            ],
        }


def _finite(x: float) -> float | None:
    """JSON has no NaN: an unknown knee is ``None``."""
    return float(x) if np.isfinite(x) else None


def compare(run: MeasuredRun) -> MeasureResult:
    """Predict every measured step from the measured ceilings and the model's architecture.

    ``predicted_step_s`` is the pure roofline
    (:meth:`~rackmath.analyses.serving.deployment.Deployment.decode`) with the machine's
    measured matmul peak and copy bandwidth. ``with_overhead_step_s`` adds one
    fixed per-step overhead, fitted on a single point (the smallest batch at the smallest
    context: measured minus predicted, at least 0) and stated as such.
    """
    if not run.points:
        raise InputError("measure points", 0, "at least one measured decode step")
    model = model_spec(run.config)
    system = machine_system(run.ceilings)
    dep = pooled.make_deployment(
        model, system, chips=1, weights=run.dtype, kv=run.dtype, compute=run.dtype, efficiency="pure"
    )
    batches = np.array([p.batch for p in run.points], float)
    contexts = np.array([p.context for p in run.points], float)
    measured = np.array([p.step_s for p in run.points], float)
    grid = dep.decode(batches, contexts)  # outer grid; take the diagonal
    idx = np.arange(len(run.points))
    predicted = grid.step_s[idx, idx]
    bottleneck = grid.step.bottleneck[idx, idx]
    first = int(np.lexsort((batches, contexts))[0])
    overhead = max(0.0, float(measured[first] - predicted[first]))
    on_roofline = rl.Efficiency(overhead_s=overhead, mode=EfficiencyMode.PURE)
    with_overhead = replace(dep, efficiency=on_roofline).decode(batches, contexts).step_s[idx, idx]
    ctx_values = sorted({int(c) for c in contexts})
    balance = pooled.balance(dep, ctx_values).balance_batch_with_kv
    knees = []
    for ctx in ctx_values:
        sel = contexts == ctx
        knees.append(float(reality.knee_batch(batches[sel], measured[sel])))
    return MeasureResult(
        run=run,
        model=model,
        system=system,
        predicted_step_s=tuple(float(x) for x in predicted),
        with_overhead_step_s=tuple(float(x) for x in with_overhead),
        overhead_s=overhead,
        bottleneck=tuple(str(b) for b in bottleneck),
        balance_batch=tuple(float(b) for b in balance),
        measured_knee_batch=tuple(knees),
        contexts=tuple(ctx_values),
    )
