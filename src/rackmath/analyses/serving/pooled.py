"""The lecture's ideal chip: ``chips`` chips as one pooled chip, and what only it answers.

:func:`make_deployment` builds the pooled :class:`~rackmath.analyses.serving.deployment.Deployment`
(``tp = N`` over one chip with ``N`` times the FLOP/s, bandwidth and capacity, communication
off): the same class and the same operators every planned deployment runs
(:func:`rackmath.analyses.serving.planned.plan_deployment`), one rank of the pool. Weights are
assumed sharded evenly over all chips. The balance batch, the latency floor and the HBM drain
time are the lecture's closed forms on that chip.

Efficiency: a deployment runs on the chip's fitted kernel curves by default (``"kernel"``,
:data:`rackmath.core.roofline.KERNEL_GROUNDED`; chips without measured tables take a donor's
curves scaled by their own peaks and say ``transferred``); ``"pure"`` (or
:data:`~rackmath.core.roofline.PURE_ROOFLINE`) is the lecture's pure roofline, and an explicit
:class:`~rackmath.core.roofline.Efficiency` keeps its scalars on its mode's curves. See
:mod:`rackmath.analyses.kernels.tables`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.parts import (
    DEFAULT_MEMORY_RESERVE_FRAC,
    FloatArray,
    Precisions,
    default_precisions,
)
from rackmath.core import architecture as arch
from rackmath.core import roofline as rl
from rackmath.errors import DoesNotFitError
from rackmath.frames import Col, Layout, Tabular
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_CHIPS, MAX_USD_PER_CHIP_HOUR
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec, parse_weight_classes
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision


def precisions_of(
    model: ModelSpec,
    system: SystemSpec,
    weights: Precision | str | None = None,
    kv: Precision | str | None = None,
    compute: Precision | str | None = None,
) -> Precisions:
    """The user's precisions, each default from the model and the chip; refuses a compute
    precision the chip has no peak for."""
    defaults = default_precisions(model, system)
    precisions = Precisions(
        weights=Precision.parse(weights, "weights precision") if weights else defaults.weights,
        kv=Precision.parse(kv, "kv precision") if kv else defaults.kv,
        compute=Precision.parse(compute, "compute precision") if compute else defaults.compute,
    )
    system.chip.peak_flops(precisions.compute)  # refuses a precision the chip lacks
    return precisions


def price_of(system: SystemSpec, usd_per_chip_hour: float | None) -> float:
    """The chip's catalog price per chip-hour, or the user's (above 0, at most
    :data:`~rackmath.specs.bounds.MAX_USD_PER_CHIP_HOUR`)."""
    if usd_per_chip_hour is None:
        return system.chip.price_usd_per_chip_hour.value_usd
    return checks.between("price per chip-hour", usd_per_chip_hour, 0, MAX_USD_PER_CHIP_HOUR, low_open=True)


def with_weight_classes(
    model: ModelSpec,
    weights: Precision | str | None,
    weight_classes: str | Mapping[str, str | Precision] | None,
) -> tuple[ModelSpec, Precision | str | None]:
    """The model as stored with ``weight_classes`` (``"experts=nvfp4,attention=fp8"``,
    :func:`rackmath.specs.model.parse_weight_classes`), the other classes in ``weights``
    (default: as shipped), and the weights precision left to its default; unchanged without."""
    if weight_classes is None:
        return model, weights
    classes = parse_weight_classes(weight_classes)
    base = Precision.parse(weights, "weights precision") if weights else None
    return model.with_weight_precisions(classes, base), None


def make_deployment(
    model: ModelSpec,
    system: SystemSpec,
    *,
    chips: int | None = None,
    weights: Precision | str | None = None,
    kv: Precision | str | None = None,
    compute: Precision | str | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC,
    weight_classes: str | Mapping[str, str | Precision] | None = None,
) -> Deployment:
    """The pooled ideal chip: validate the user's choices once and fill defaults from the
    model and the catalog.

    ``efficiency``: ``"kernel"`` (default: fitted kernel curves), ``"pure"`` (the roofline) or
    an :class:`~rackmath.core.roofline.Efficiency`. ``weight_classes``: weights per tensor
    class (``"experts=nvfp4,attention=fp8"``, :func:`rackmath.specs.model.parse_weight_classes`),
    the other classes in ``weights`` (default: as shipped); the deployment then serves the
    model as so stored (:meth:`ModelSpec.with_weight_precisions`)."""
    model, weights = with_weight_classes(model, weights, weight_classes)
    n_chips = system.default_chips if chips is None else checks.whole("chips", chips, maximum=MAX_CHIPS)
    checks.fraction("memory reserve", memory_reserve_frac, one=False)
    notes = []
    if n_chips > system.scale_up_domain_chips:
        notes.append(
            f"{n_chips} chips exceed one {system.id} scale-up domain of "
            f"{system.scale_up_domain_chips}; communication is not modelled here."
        )
    return Deployment(
        model=model,
        system=system,
        plan=ParallelPlan(tp=n_chips),
        precisions=precisions_of(model, system, weights, kv, compute),
        usd_per_chip_hour=price_of(system, usd_per_chip_hour),
        efficiency=rl.Efficiency.parse(efficiency),
        memory_reserve_frac=memory_reserve_frac,
        pooled=True,
        notes=tuple(notes),
    )


def require_weights_fit(deployment: Deployment) -> Deployment:
    """Refuse a deployment whose weights alone overflow each chip's usable memory (after the
    reserve): no batch of it runs, so no step time or cost of it means anything. The one rule
    behind ``explain``, ``prices`` (its reference deployment) and the web pages."""
    d = deployment
    if not d.weights_fit:
        raise DoesNotFitError(
            f"{d.model.id} ({d.precisions.weights.value} weights) on {d.chips} x {d.system.chip.id}",
            d.weight_bytes_per_chip,
            d.usable_bytes_per_chip,
        )
    return d


@dataclass(frozen=True)
class BalancePoint(Tabular):
    """Where weight fetch (and KV) time equals compute time; as a table, one row per context
    of the exact balance batch, the closed forms repeated."""

    frame_layout = Layout(
        columns=(
            Col("flop_per_byte", "flop_per_byte", "FLOP/byte"),
            Col("dense_balance_batch", "dense_balance_batch", "sequences"),
            Col("sparsity", "sparsity", "1"),
            Col("balance_batch", "balance_batch", "sequences"),
            Col("balance_batch_with_kv", "balance_batch_with_kv", "sequences"),
        ),
        dims=("context",),
    )

    flop_per_byte: float  # the chip's ridge point, FLOP/s over bytes/s
    dense_balance_batch: float  # the lecture's "~300": F * bytes_per_weight / (2 BW)
    sparsity: float  # N_total / N_active
    balance_batch: float  # closed form: dense_balance_batch * sparsity
    balance_batch_with_kv: FloatArray  # exact, per context; NaN where KV keeps every batch memory-bound


def balance(deployment: Deployment, context: ArrayLike) -> BalancePoint:
    d = deployment
    c = np.atleast_1d(np.asarray(context, float))
    bytes_per_weight = d.precisions.weights.bytes_per_element
    always, expert, experts, per_token = d.moe_split
    return BalancePoint(
        flop_per_byte=float(rl.flop_per_byte(d.peak_flops_per_s, d.bandwidth_bytes_per_s)),
        dense_balance_batch=float(
            rl.dense_balance_batch(d.peak_flops_per_s, d.bandwidth_bytes_per_s, bytes_per_weight)
        ),
        sparsity=d.params.total / d.params.active,
        balance_batch=float(
            rl.balance_batch(
                d.params.total,
                d.params.active,
                d.peak_flops_per_s,
                d.bandwidth_bytes_per_s,
                bytes_per_weight,
            )
        ),
        balance_batch_with_kv=rl.balance_batch_exact(
            flops_per_token=arch.decode_flops_per_token(d.model, c),
            kv_bytes_per_sequence=d.kv_bytes_per_sequence(c),
            always_read_bytes=always,
            expert_bytes=expert,
            experts=experts,
            experts_per_token=per_token,
            peak_flops_per_s=d.peak_flops_per_s,
            bandwidth_bytes_per_s=d.bandwidth_bytes_per_s,
            efficiency=d.efficiency,
        ),
    )


def latency_floor_bytes(deployment: Deployment) -> float:
    """Weight bytes a step reads when every expert is touched (the input embedding is a
    lookup of a few rows, so it is left out)."""
    d = deployment
    always, expert, experts, _ = d.moe_split
    return always + expert * experts


def latency_floor_s(deployment: Deployment) -> float:
    """All weights read once over all chips (every expert touched)."""
    d = deployment
    return float(
        rl.latency_floor_s(latency_floor_bytes(d), d.bandwidth_bytes_per_s * d.efficiency.bandwidth_frac)
    )


def hbm_drain_time_s(deployment: Deployment) -> float:
    chip = deployment.system.chip
    return float(rl.hbm_drain_time_s(chip.hbm_capacity_bytes, chip.hbm_bandwidth_bytes_per_s))
