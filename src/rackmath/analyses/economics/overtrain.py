"""Over-training: how many tokens to pre-train a model that will serve a lot of traffic (D25-D29).

The lecture's chain, every input changeable: a model serving 50M tokens/s for 60 days
serves ``D_inf = 2.6e14`` tokens; equalising pre-training (6ND), RL (3ND at 1/3 efficiency)
and inference (2ND at 1/3 efficiency) gives ``D_pre = D_inf = 1.5 D_RL``; at 100B active that
is ~130x Chinchilla's 20 tokens per parameter. Beside it, the exact optimum of the same
lifetime cost at the same loss under the Chinchilla fit (Hoffmann et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rackmath.core import scaling_laws as sl
from rackmath.numbers import check_range
from rackmath.specs import checks
from rackmath.units import SECONDS_PER_DAY

#: The lifecycle coefficients and Chinchilla's tokens per parameter, named here so that the
#: faces need not import the core.
ComputeCoefficients = sl.ComputeCoefficients
CHINCHILLA_TOKENS_PER_PARAM = sl.CHINCHILLA_TOKENS_PER_PARAM

LECTURE_PARAMS_ACTIVE = 100e9
LECTURE_TOKENS_PER_S = 50e6
LECTURE_DAYS = 60.0

#: Input ranges (physical, and where the Chinchilla fit stays finite in float64):
#: 1M to 1P parameters; 1 to 1e12 tokens/s; up to a century of serving; 1 to 1e6 tokens
#: per parameter; 0.1 to 100 FLOPs per parameter-token for RL.
PARAMS_RANGE = (1e6, 1e15)
TOKENS_PER_S_RANGE = (1.0, 1e12)
DURATION_RANGE_S = (1.0, 100 * 365 * SECONDS_PER_DAY)
TOKENS_PER_PARAM_RANGE = (1.0, 1e6)
RL_FLOPS_RANGE = (0.1, 100.0)
#: RL and inference hardware efficiency relative to pre-training: 0.1% to 100%.
EFFICIENCY_RANGE = (1e-3, 1.0)


@dataclass(frozen=True)
class Overtraining:
    params: float
    tokens_per_s: float
    duration_s: float
    coefficients: sl.ComputeCoefficients
    fit: sl.LossFit
    inference_tokens: float
    pretrain_tokens: float
    rl_tokens: float
    chinchilla_tokens: float
    loss: float
    frontier_params: float  # compute-optimal at the same pre-training compute
    frontier_tokens: float
    frontier_loss: float
    optimum_params: float  # minimum lifetime compute at the same loss
    optimum_pretrain_tokens: float

    @property
    def overtraining_factor(self) -> float:
        return self.pretrain_tokens / self.chinchilla_tokens

    def _phases(self, params: float, pretrain_tokens: float) -> tuple[float, float, float]:
        c = sl.lifecycle_compute_flops(
            params, pretrain_tokens, self.rl_tokens, self.inference_tokens, self.coefficients
        )
        return float(c[0]), float(c[1]), float(c[2])

    @property
    def heuristic_compute(self) -> tuple[float, float, float]:
        return self._phases(self.params, self.pretrain_tokens)

    @property
    def optimum_compute(self) -> tuple[float, float, float]:
        return self._phases(self.optimum_params, self.optimum_pretrain_tokens)

    @property
    def local_exponent(self) -> float:
        """``q = -d ln(N D(N)) / d ln N`` on the iso-loss curve at the optimum (pre-training ~ N^-q)."""
        n = self.optimum_params * np.array([1 - 1e-4, 1 + 1e-4])
        d = sl.tokens_for_loss(n, self.loss, self.fit)
        return float(-np.diff(np.log(n * d))[0] / np.diff(np.log(n))[0])

    def to_dict(self) -> dict[str, Any]:
        h, o = self.heuristic_compute, self.optimum_compute
        q = self.local_exponent
        return {
            "params_active": self.params,
            "tokens_per_s": self.tokens_per_s,
            "duration_s": self.duration_s,
            "coefficients": {
                "pretrain_flops_per_param_token": self.coefficients.pre,
                "rl_flops_per_param_token": self.coefficients.rl,
                "rl_efficiency_frac": self.coefficients.rl_efficiency,
                "inference_flops_per_param_token": self.coefficients.inference,
                "inference_efficiency_frac": self.coefficients.inference_efficiency,
            },
            "loss_fit": {
                **{k: getattr(self.fit, k) for k in ("E", "A", "B", "alpha", "beta")},
                "source": self.fit.source,
            },
            "inference_tokens": self.inference_tokens,
            "pretrain_tokens": self.pretrain_tokens,
            "rl_tokens": self.rl_tokens,
            "pretrain_over_rl": self.pretrain_tokens / self.rl_tokens,
            "chinchilla_tokens": self.chinchilla_tokens,
            "overtraining_factor": self.overtraining_factor,
            "loss": self.loss,
            "equal_thirds_compute_flops": {"pretrain": h[0], "rl": h[1], "inference": h[2]},
            "compute_optimal_at_same_pretrain_compute": {
                "params": self.frontier_params,
                "tokens": self.frontier_tokens,
                "tokens_per_param": self.frontier_tokens / self.frontier_params,
                "loss": self.frontier_loss,
            },
            "exact_optimum_at_same_loss": {
                "params": self.optimum_params,
                "pretrain_tokens": self.optimum_pretrain_tokens,
                "compute_flops": {"pretrain": o[0], "rl": o[1], "inference": o[2]},
                "pretrain_share_frac": o[0] / sum(o),
                "local_exponent_q": q,
                "power_law_pretrain_share_frac": float(sl.power_law_optimal_share(q, 1.0)),
                "equal_thirds_excess_frac": sum(h) / sum(o) - 1.0,
            },
        }


def overtrain(
    *,
    params: float = LECTURE_PARAMS_ACTIVE,
    tokens_per_s: float = LECTURE_TOKENS_PER_S,
    duration_s: float = LECTURE_DAYS * SECONDS_PER_DAY,
    coefficients: sl.ComputeCoefficients | None = None,
    fit: sl.LossFit = sl.CHINCHILLA_FIT,
    tokens_per_param: float = sl.CHINCHILLA_TOKENS_PER_PARAM,
) -> Overtraining:
    for name, value, (lo, hi) in (
        ("--params", params, PARAMS_RANGE),
        ("--tokens-per-s", tokens_per_s, TOKENS_PER_S_RANGE),
        ("--duration (s)", duration_s, DURATION_RANGE_S),
        ("--tokens-per-param", tokens_per_param, TOKENS_PER_PARAM_RANGE),
    ):
        check_range(float(value), name, minimum=lo, maximum=hi)
    k = coefficients or sl.ComputeCoefficients()
    check_range(float(k.rl), "--rl-flops", minimum=RL_FLOPS_RANGE[0], maximum=RL_FLOPS_RANGE[1])
    for name, value in (
        ("pre-training FLOPs per parameter-token", k.pre),
        ("RL FLOPs per parameter-token", k.rl),
        ("inference FLOPs per parameter-token", k.inference),
    ):
        checks.positive(name, value, allowed="a positive number")
    lo, hi = EFFICIENCY_RANGE
    efficiencies = (("--rl-efficiency", k.rl_efficiency), ("--inference-efficiency", k.inference_efficiency))
    for name, value in efficiencies:
        check_range(float(value), name, minimum=lo, maximum=hi)
    d_inf = float(sl.lifetime_tokens(tokens_per_s, duration_s))
    d_pre, d_rl = (float(x) for x in sl.equal_cost_tokens(d_inf, k))
    loss = float(sl.loss(params, d_pre, fit))
    n_f, d_f = sl.compute_optimal(k.pre * params * d_pre, fit)
    n_opt, d_opt = sl.iso_loss_optimum(loss, d_rl, d_inf, k, fit)
    return Overtraining(
        params=params,
        tokens_per_s=tokens_per_s,
        duration_s=duration_s,
        coefficients=k,
        fit=fit,
        inference_tokens=d_inf,
        pretrain_tokens=d_pre,
        rl_tokens=d_rl,
        chinchilla_tokens=float(sl.chinchilla_tokens(params, tokens_per_param)),
        loss=loss,
        frontier_params=float(n_f),
        frontier_tokens=float(d_f),
        frontier_loss=float(sl.loss(n_f, d_f, fit)),
        optimum_params=n_opt,
        optimum_pretrain_tokens=d_opt,
    )
