"""Energy per token beside dollars per token: a step's joules from its operators
(:mod:`rackmath.core.energy`) and the chip's power envelope (:mod:`rackmath.catalog.power`).

Works on any step the per-operator model produced: the ideal chip's decode grid, a planned
deployment's grid, a speculative verification step (pass the tokens it yields).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.catalog.power import ChipPower, chip_power
from rackmath.core import energy as en
from rackmath.core.chip_rates import ChipRates
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.hardware import ChipSpec

FloatArray = NDArray[np.float64]

DEFAULT_PUE = en.DEFAULT_PUE

#: Highest PUE accepted: even an air-cooled enterprise room rarely exceeds 2.5.
MAX_PUE = 3.0


def check_pue(pue: object) -> float:
    try:
        value = float(pue)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError("--pue", pue, f"a number from 1 to {MAX_PUE:g}, e.g. {en.DEFAULT_PUE}") from None
    return checks.between(
        "--pue",
        value,
        1.0,
        MAX_PUE,
        allowed=f"a number from 1 to {MAX_PUE:g} (facility over IT power), e.g. {en.DEFAULT_PUE}",
        given=pue,
    )


@dataclass(frozen=True)
class EnergyGrid:
    """Energy of a step over a grid: IT joules per step, facility joules per token, and
    tokens/s per MW of facility power."""

    power: ChipPower
    pue: float
    step_energy_j: FloatArray  # IT energy of one step, all chips
    tokens_per_step: FloatArray
    step_s: FloatArray

    @property
    def joules_per_token(self) -> FloatArray:
        return en.joules_per_token(self.step_energy_j, self.tokens_per_step, self.pue)

    @property
    def tokens_per_s_per_mw(self) -> FloatArray:
        return en.tokens_per_s_per_megawatt(self.joules_per_token)

    @property
    def it_power_w(self) -> FloatArray:
        """IT power all chips draw on average over the step (chips x between floor and TDP)."""
        return np.asarray(self.step_energy_j / self.step_s)

    def at(self, index: tuple[int, ...], chips: int) -> dict[str, float]:
        return {
            "joules_per_token": float(self.joules_per_token[index]),
            "tokens_per_s_per_mw": float(self.tokens_per_s_per_mw[index]),
            "average_power_w_per_chip": float(self.it_power_w[index]) / chips,
        }

    def summary(self) -> dict[str, Any]:
        p = self.power
        return {
            "idle_w_per_chip": p.idle_w,
            "max_w_per_chip": p.max_w,
            "idle_estimate": p.idle_estimate,
            "idle_source": p.idle_source,
            "pue": self.pue,
        }


def step_energy(
    chip: ChipSpec,
    step: PlanStep,
    rates: ChipRates,
    chips: ArrayLike,
    tokens_per_step: ArrayLike,
    pue: float = en.DEFAULT_PUE,
) -> EnergyGrid | None:
    """Energy of ``step`` (its operators timed at ``rates``) on ``chips`` chips; None when
    the chip has no published TDP."""
    power = chip_power(chip)
    if power is None:
        return None
    pue = check_pue(pue)
    scale = np.asarray(step.pp * step.imbalance, float)
    joules = en.step_energy_j(
        step.operators,
        rates,
        scale=scale,
        step_s=step.step_s,
        idle_w=power.idle_w,
        max_w=power.max_w,
        chips=chips,
    )
    shape = np.shape(step.step_s)
    return EnergyGrid(
        power=power,
        pue=pue,
        step_energy_j=np.broadcast_to(joules, shape),
        tokens_per_step=np.broadcast_to(np.asarray(tokens_per_step, float), shape),
        step_s=np.asarray(step.step_s),
    )


def decode_energy(
    grid: Any, pue: float = en.DEFAULT_PUE, tokens_per_sequence: float = 1.0
) -> EnergyGrid | None:
    """Energy of a decode grid: its step's operators on one rank's rates (the pool's, or one
    chip's with every chip alike). ``tokens_per_sequence``: what a step yields per sequence
    (speculative: the expected tokens per step)."""
    d = grid.deployment
    return step_energy(d.system.chip, grid.step, d.rates, d.chips, grid.batch * tokens_per_sequence, pue)
