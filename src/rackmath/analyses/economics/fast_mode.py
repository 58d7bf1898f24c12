"""Fast modes: what a higher price per token can buy through a smaller batch (D12).

Two views. The lecture's idealised roofline (weights only): a normal operating point at
``k`` times the balance batch runs ``k`` times the latency floor; a fast mode at ``B*/m``
runs at the floor, so it is ``k`` times faster for ``m`` times the price, and no price buys
more than ``k``. And the same question on a real deployment through
:meth:`rackmath.analyses.serving.deployment.Deployment.decode` (KV fetch and MoE routing included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.deployment import Deployment
from rackmath.core import economics as econ
from rackmath.specs import checks
from rackmath.specs.economics import ModelPrice

FloatArray = NDArray[np.float64]

#: The lecture's practice: serve at 2-3x the balance batch (D5); 2.5 reproduces "2.5x faster".
DEFAULT_NORMAL_OVER_BALANCE = 2.5
#: Anthropic's fast mode price multiple (Opus 4.6: $30/$150 vs $5/$25).
DEFAULT_PRICE_MULTIPLE = 6.0


@dataclass(frozen=True)
class IdealFastMode:
    normal_over_balance: float  # k
    price_multiple: float  # m
    fast_over_balance: float  # 1/m when m >= 1
    speedup: float
    price_multiple_check: float  # recomputed from the roofline at the fast batch
    ceiling_speedup: float  # t(B_n) / t_floor

    def to_dict(self) -> dict[str, Any]:
        return {
            "normal_batch_over_balance": self.normal_over_balance,
            "price_multiple": self.price_multiple,
            "fast_batch_over_balance": self.fast_over_balance,
            "speedup": self.speedup,
            "price_multiple_from_roofline": self.price_multiple_check,
            "ceiling_speedup": self.ceiling_speedup,
            "slow_mode_saving_frac": 0.0,  # cost per token is flat above B*
        }


def ideal(normal_over_balance: float, price_multiple: float) -> IdealFastMode:
    """Fast mode in the lecture's weights-only roofline (``B* = 1``, ``t_floor = 1``).

    A fast batch that costs ``m`` times per token is ``B_f = B*/m`` (cost per token below
    ``B*`` is ``t_floor / B``); it runs at the floor, so the speed-up is ``k`` whatever ``m``.
    """
    checks.at_least("normal batch / balance batch", normal_over_balance, 1)
    checks.at_least("price multiple", price_multiple, 1, allowed="a number >= 1 (a fast mode costs more)")
    fast = 1.0 / price_multiple
    speedup, price = econ.fast_mode_ideal(normal_over_balance, fast, 1.0)
    ceiling = float(econ.ideal_step_s(normal_over_balance, 1.0, 1.0) / econ.ideal_step_s(1e-12, 1.0, 1.0))
    return IdealFastMode(
        normal_over_balance=normal_over_balance,
        price_multiple=price_multiple,
        fast_over_balance=fast,
        speedup=float(speedup),
        price_multiple_check=float(price),
        ceiling_speedup=ceiling,
    )


@dataclass(frozen=True)
class DeploymentFastMode:
    """Speed-up against price multiple on a real deployment, from batch ``normal_batch`` down."""

    deployment: Deployment
    context: float
    balance_batch: float
    normal_batch: float
    batches: FloatArray  # ascending, 1 .. normal_batch
    speedups: FloatArray
    price_multiples: FloatArray
    requested_price_multiple: float
    fast_batch: float
    fast_speedup: float
    ceiling_speedup: float  # batch 1
    slow_batch: float
    slow_mode_saving_frac: float

    def to_dict(self) -> dict[str, Any]:
        d = self.deployment
        return {
            **d.labels(),
            "context": self.context,
            "balance_batch": self.balance_batch,
            "normal_batch": self.normal_batch,
            "requested_price_multiple": self.requested_price_multiple,
            "fast_batch": self.fast_batch,
            "fast_speedup": self.fast_speedup,
            "ceiling_speedup": self.ceiling_speedup,
            "slow_batch": self.slow_batch,
            "slow_mode_saving_frac": self.slow_mode_saving_frac,
            "curve": [
                {"batch": float(b), "speedup": float(s), "price_multiple": float(p)}
                for b, s, p in zip(self.batches, self.speedups, self.price_multiples, strict=True)
            ],
        }


def on_deployment(
    deployment: Deployment,
    *,
    context: float,
    normal_over_balance: float = DEFAULT_NORMAL_OVER_BALANCE,
    price_multiple: float = DEFAULT_PRICE_MULTIPLE,
    points: int = 240,
) -> DeploymentFastMode:
    """Sweep batches below the normal operating point ``k B*`` (``B*`` from the roofline with
    KV at ``context``, or the weights-only closed form when KV keeps every batch memory-bound).

    The fast batch for ``price_multiple`` is interpolated on that sweep; the slow mode is
    the cheapest batch above normal that still fits in memory (at most 8x normal).
    """
    checks.at_least("price multiple", price_multiple, 1, allowed="a number >= 1 (a fast mode costs more)")
    checks.positive("normal batch / balance batch", normal_over_balance, allowed="a positive number")
    bal = pooled.balance(deployment, [context])
    b_star = float(bal.balance_batch_with_kv[0])
    if not np.isfinite(b_star):
        b_star = bal.balance_batch
    fit_cap = float(deployment.max_concurrency([context])[0])
    b_normal = max(1.0, min(round(normal_over_balance * b_star), fit_cap)) if fit_cap >= 1 else 1.0
    below = np.unique(np.round(np.geomspace(1.0, b_normal, points)))
    grid = deployment.decode(below, [context])
    step = grid.step_s[:, 0]
    cost = grid.usd_per_million_output_tokens[:, 0]
    speedups = step[-1] / step
    multiples = cost / cost[-1]
    # cost falls with batch below normal: interpolate the batch at the requested multiple
    order = np.argsort(multiples)
    fast_batch = float(np.exp(np.interp(price_multiple, multiples[order], np.log(below[order]))))
    fast_grid = deployment.decode([fast_batch], [context])
    above = np.unique(np.round(np.geomspace(b_normal, max(b_normal, min(8 * b_normal, fit_cap)), 60)))
    slow = deployment.decode(above, [context]).usd_per_million_output_tokens[:, 0]
    j = int(np.argmin(slow))
    return DeploymentFastMode(
        deployment=deployment,
        context=float(context),
        balance_batch=b_star,
        normal_batch=b_normal,
        batches=below,
        speedups=speedups,
        price_multiples=multiples,
        requested_price_multiple=price_multiple,
        fast_batch=fast_batch,
        fast_speedup=float(step[-1] / fast_grid.step_s[0, 0]),
        ceiling_speedup=float(speedups[0]),
        slow_batch=float(above[j]),
        slow_mode_saving_frac=float(1.0 - slow[j] / cost[-1]),
    )


@dataclass(frozen=True)
class FastModeReport:
    ideal: IdealFastMode
    deployment: DeploymentFastMode | None
    price: ModelPrice | None

    def to_dict(self) -> dict[str, Any]:
        fm = self.price.fast_mode if self.price else None
        return {
            "ideal": self.ideal.to_dict(),
            "deployment": self.deployment.to_dict() if self.deployment else None,
            "published": (
                {
                    "priced_model": self.price.id if self.price else None,
                    "price_multiple": fm.output_usd_per_million_tokens
                    / self.price.base.output_usd_per_million_tokens,
                    "speedup_max": fm.speedup_max,
                    "date": fm.date,
                    "source": fm.source,
                }
                if fm and self.price
                else None
            ),
        }


def published_multiple(price: ModelPrice) -> tuple[float, float] | None:
    """(price multiple, stated speed-up) of a model's fast mode, if it has one."""
    fm = price.fast_mode
    if fm is None:
        return None
    return fm.output_usd_per_million_tokens / price.base.output_usd_per_million_tokens, fm.speedup_max


def report(
    deployment: Deployment | None,
    *,
    context: float,
    price: ModelPrice | None = None,
    normal_over_balance: float | None = None,
    price_multiple: float | None = None,
) -> FastModeReport:
    """The lecture's reading of a published fast mode, and the same lever on a deployment.

    Defaults come from the price's fast mode (stated speed-up -> ``k``, price ratio -> ``m``)
    or the lecture's 2.5 and 6.
    """
    published = published_multiple(price) if price else None
    k = normal_over_balance or (published[1] if published else DEFAULT_NORMAL_OVER_BALANCE)
    m = price_multiple or (published[0] if published else DEFAULT_PRICE_MULTIPLE)
    return FastModeReport(
        ideal=ideal(k, m),
        deployment=(
            on_deployment(deployment, context=context, normal_over_balance=k, price_multiple=m)
            if deployment
            else None
        ),
        price=price,
    )
