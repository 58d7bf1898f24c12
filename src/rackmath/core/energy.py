"""Energy of a step, operator by operator, from a chip's power floor and ceiling.

Each operator draws, for its ``time_s``, a power between the chip's hot-idle floor and its
board power (TDP), linear in how busy the operator keeps the resource that bounds it::

    u_op = max(flops / (peak_flops * time_s), bytes / (peak_bandwidth * time_s))   in [0, 1]
    P_op = P_idle + (P_max - P_idle) * u_op
    E_step = chips * ( sum_op P_op t_op + P_idle (t_step - sum_op t_op) )       (J)

Time outside the operators (exposed communication, per-step overhead) is charged at the
floor. The facility multiplies by its PUE (power usage effectiveness: facility power over
IT power), and ``J per token = PUE E_step / tokens per step``; ``tokens/s per MW = 1e6 /
(J per token)``. Under the pure roofline every operator saturates its bound resource
(``u = 1``), so a step draws TDP: the upper bound; measured efficiencies bring ``u`` below 1.

Assumptions: power linear in utilisation of the bound resource (a first-order DVFS-free
model; memory-bound kernels in reality draw somewhat less than compute-bound ones at equal
utilisation); host CPUs, NICs and switches are not counted (PUE covers cooling and power
delivery only).

Worked number: one operator for 1 ms at ``u = 0.5`` on a 700 W chip with a 105 W floor
draws ``105 + 595 x 0.5 = 402.5`` W: 0.4025 J; at PUE 1.2, 0.483 J.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import operators as ops
from rackmath.core.chip_rates import ChipRates

FloatArray = NDArray[np.float64]

#: Default facility PUE: a modern liquid-cooled AI hall. Google reports a 1.10 fleet-wide
#: trailing-twelve-month PUE (2023 environmental report); the Uptime Institute's 2024 survey
#: average over all data centres is about 1.56. Pass your own.
DEFAULT_PUE = 1.2


def power_w(idle_w: float, max_w: float, utilisation: ArrayLike) -> FloatArray:
    """``P_idle + (P_max - P_idle) u`` with ``u`` clipped to [0, 1]."""
    u = np.clip(np.asarray(utilisation, float), 0.0, 1.0)
    return np.asarray(idle_w + (max_w - idle_w) * u)


def operator_utilisation(op: ops.Operator, rates: ChipRates) -> FloatArray:
    """How busy ``op`` keeps its bound resource over its time, against the peak its curve
    runs at (0 when idle)."""
    peak = op.peak_flops_per_s
    moved = op.weight_bytes + op.activation_bytes + op.kv_read_bytes + op.kv_write_bytes
    t = np.asarray(op.time_s, float)
    safe = np.where(t > 0, t, 1.0)
    u = np.maximum(op.flops / (peak * safe), moved / (rates.bandwidth_bytes_per_s * safe))
    return np.asarray(np.where(t > 0, u, 0.0))


def step_energy_j(
    operators: tuple[ops.Operator, ...],
    rates: ChipRates,
    *,
    scale: ArrayLike,
    step_s: ArrayLike,
    idle_w: float,
    max_w: float,
    chips: ArrayLike,
) -> FloatArray:
    """IT energy of one step over ``chips`` chips (J). ``operators`` are one chip's (or the
    pooled ideal chip's) for one pass, ``scale`` passes per step (``P x imbalance``);
    ``rates`` the rates they were timed at; time outside them is at the floor."""
    busy_j = sum(power_w(idle_w, max_w, operator_utilisation(op, rates)) * op.time_s for op in operators)
    busy_s = sum(np.asarray(op.time_s, float) for op in operators)
    s = np.asarray(scale, float)
    rest_s = np.maximum(np.asarray(step_s, float) - s * busy_s, 0.0)
    return np.asarray(np.asarray(chips, float) * (s * busy_j + idle_w * rest_s))


def joules_per_token(
    step_energy: ArrayLike, tokens_per_step: ArrayLike, pue: float = DEFAULT_PUE
) -> FloatArray:
    """Facility joules per token: ``PUE E_step / tokens``."""
    return np.asarray(pue * np.asarray(step_energy, float) / np.asarray(tokens_per_step, float))


def tokens_per_s_per_megawatt(joules_per_token_: ArrayLike) -> FloatArray:
    """Tokens a second one megawatt of facility power sustains: ``1e6 / (J per token)``."""
    return np.asarray(1e6 / np.asarray(joules_per_token_, float))
