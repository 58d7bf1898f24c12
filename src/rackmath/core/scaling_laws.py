"""Scaling laws: Chinchilla's loss fit, over-training for inference, routed (MoE) models.

Sources
-------
* Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (Chinchilla),
  arXiv:2203.15556. Approach 3 (eq. 10) fits ``L(N, D) = E + A/N^alpha + B/D^beta`` with
  E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28; its compute-optimal frontier
  under ``C = 6ND`` is eq. 4. The rule of thumb "20 tokens per parameter" is their Table 3
  (approaches 1 and 2); approach 3's own frontier gives fewer tokens per parameter.
* Clark et al. 2022, "Unified Scaling Laws for Routed Language Models", ICML,
  arXiv:2202.01169: ``log L(N, E) = a log N + b log Ê + c log N log Ê + d`` (eq. 1) with a
  saturating expert count Ê, and the effective (dense-equivalent) parameter count that
  solves ``L(N_eff, 1) = L(N, E)``.
* The lecture (Pope 2026), D25-D29: balancing pre-training, RL and inference compute.

All functions are pure and broadcast over NumPy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

#: Chinchilla's rule of thumb: compute-optimal tokens per parameter (Hoffmann et al. 2022, Table 3).
CHINCHILLA_TOKENS_PER_PARAM = 20.0
#: FLOPs per parameter per training token, forward + backward (Kaplan et al. 2020, §2.1).
TRAIN_FLOPS_PER_PARAM_TOKEN = 6.0
#: FLOPs per parameter per inference token, forward only.
INFERENCE_FLOPS_PER_PARAM_TOKEN = 2.0


@dataclass(frozen=True)
class LossFit:
    """``L(N, D) = E + A / N^alpha + B / D^beta`` (nats per token)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    source: str


#: Hoffmann et al. 2022, approach 3 (eq. 10 and §3.3).
CHINCHILLA_FIT = LossFit(
    E=1.69,
    A=406.4,
    B=410.7,
    alpha=0.34,
    beta=0.28,
    source="Hoffmann et al. 2022 (arXiv:2203.15556), approach 3 parametric fit",
)


def chinchilla_tokens(
    params: ArrayLike, tokens_per_param: ArrayLike = CHINCHILLA_TOKENS_PER_PARAM
) -> FloatArray:
    """D29: Chinchilla-optimal training tokens, ``20 N`` (100e9 -> 2e12)."""
    return np.asarray(params, float) * np.asarray(tokens_per_param, float)


def loss(params: ArrayLike, tokens: ArrayLike, fit: LossFit = CHINCHILLA_FIT) -> FloatArray:
    """Hoffmann et al. 2022 eq. 2: ``L(N, D) = E + A N^-alpha + B D^-beta``, nats per token.

    ``N`` parameters, ``D`` training tokens; the fit holds near compute-optimal training of
    dense transformers on MassiveText. Chinchilla (70e9, 1.4e12) -> 1.937.
    """
    n, d = np.asarray(params, float), np.asarray(tokens, float)
    return np.asarray(fit.E + fit.A * n**-fit.alpha + fit.B * d**-fit.beta, dtype=float)


def compute_optimal(compute_flops: ArrayLike, fit: LossFit = CHINCHILLA_FIT) -> tuple[FloatArray, FloatArray]:
    """Hoffmann et al. eq. 4: the (N, D) minimising the loss at ``C = 6 N D``.

    ``N_opt = G (C/6)^a``, ``D_opt = G^-1 (C/6)^b`` with ``G = (alpha A / (beta B))^(1/(alpha+beta))``,
    ``a = beta/(alpha+beta)``, ``b = alpha/(alpha+beta)``.
    """
    c6 = np.asarray(compute_flops, float) / TRAIN_FLOPS_PER_PARAM_TOKEN
    s = fit.alpha + fit.beta
    g = (fit.alpha * fit.A / (fit.beta * fit.B)) ** (1.0 / s)
    return g * c6 ** (fit.beta / s), c6 ** (fit.alpha / s) / g


def tokens_for_loss(params: ArrayLike, target_loss: ArrayLike, fit: LossFit = CHINCHILLA_FIT) -> FloatArray:
    """Training tokens a model of ``N`` parameters needs to reach ``target_loss``.

    ``D = (B / (L - E - A N^-alpha))^(1/beta)``; infinite where ``N`` alone cannot reach it.
    """
    n = np.asarray(params, float)
    room = np.asarray(target_loss, float) - fit.E - fit.A * n**-fit.alpha
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (fit.B / room) ** (1.0 / fit.beta)
    return np.where(room > 0, d, np.inf)


def lifetime_tokens(tokens_per_s: ArrayLike, duration_s: ArrayLike) -> FloatArray:
    """D28: tokens a model serves in its life: 50e6 tokens/s x 60 days = 2.59e14."""
    return np.asarray(tokens_per_s, float) * np.asarray(duration_s, float)


@dataclass(frozen=True)
class ComputeCoefficients:
    """FLOPs per (parameter x token) of each phase, and its hardware efficiency (D26).

    ``C_pre = pre N D_pre``; ``C_RL = rl N D_RL / rl_efficiency``;
    ``C_inf = inference N D_inf / inference_efficiency``. Efficiencies are relative to
    pre-training's (RL and inference run at ~1/3 of its MFU in the lecture).
    """

    pre: float = TRAIN_FLOPS_PER_PARAM_TOKEN
    rl: float = 3.0
    rl_efficiency: float = 1.0 / 3.0
    inference: float = INFERENCE_FLOPS_PER_PARAM_TOKEN
    inference_efficiency: float = 1.0 / 3.0

    @property
    def rl_per_token(self) -> float:
        return self.rl / self.rl_efficiency

    @property
    def inference_per_token(self) -> float:
        return self.inference / self.inference_efficiency


def equal_cost_tokens(inference_tokens: ArrayLike, k: ComputeCoefficients) -> tuple[FloatArray, FloatArray]:
    """D27: (D_pre, D_RL) that make pre-training and RL cost as much as inference.

    ``pre D_pre = rl/eff D_RL = inf/eff D_inf``: with 6, 3/(1/3) = 9, 2/(1/3) = 6 this is
    ``D_pre = D_inf`` and ``D_pre = 1.5 D_RL``. ``N`` cancels.
    """
    per_param = np.asarray(inference_tokens, float) * k.inference_per_token
    return per_param / k.pre, per_param / k.rl_per_token


def power_law_optimal_share(p: ArrayLike, q: ArrayLike) -> FloatArray:
    """D25: at the minimum of ``A(x) + B(x)`` with ``A ~ x^p``, ``B ~ x^-q``: ``p A = q B``.

    So ``A`` takes ``q / (p + q)`` of the total (1/2 only when ``p = q``).
    """
    p_, q_ = np.asarray(p, float), np.asarray(q, float)
    return q_ / (p_ + q_)


def equal_split_excess(p: ArrayLike, q: ArrayLike) -> FloatArray:
    """Relative excess cost of the "make them equal" heuristic over the exact optimum.

    With ``u = x / x_equal``, total ~ ``u^p + u^-q``; the optimum is at
    ``u* = (q/p)^(1/(p+q))``, so the excess is ``2 / (u*^p + u*^-q) - 1`` (0 when p = q).
    """
    p_, q_ = np.asarray(p, float), np.asarray(q, float)
    u = (q_ / p_) ** (1.0 / (p_ + q_))
    return 2.0 / (u**p_ + u**-q_) - 1.0


def lifecycle_compute_flops(
    params: ArrayLike,
    pretrain_tokens: ArrayLike,
    rl_tokens: ArrayLike,
    inference_tokens: ArrayLike,
    k: ComputeCoefficients,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(C_pre, C_RL, C_inf) in pre-training-equivalent FLOPs (D26)."""
    n = np.asarray(params, float)
    return (
        k.pre * n * np.asarray(pretrain_tokens, float),
        k.rl_per_token * n * np.asarray(rl_tokens, float),
        k.inference_per_token * n * np.asarray(inference_tokens, float),
    )


def iso_loss_optimum(
    target_loss: float,
    rl_tokens: float,
    inference_tokens: float,
    k: ComputeCoefficients,
    fit: LossFit = CHINCHILLA_FIT,
    *,
    points: int = 4001,
) -> tuple[float, float]:
    """(N, D_pre) minimising lifetime compute at a fixed loss, RL and inference demand.

    Minimises ``N (pre D(N) + rl/eff D_RL + inf/eff D_inf)`` along the iso-loss curve
    ``D(N) = tokens_for_loss(N, L)``: a larger model needs fewer pre-training tokens but
    costs more per served token. Log-spaced grid over ``N`` then one refinement around the
    best point (relative resolution ~1e-6).
    """
    n_min = (fit.A / (target_loss - fit.E)) ** (1.0 / fit.alpha)  # D -> infinity below this
    lo, hi = np.log(n_min * (1 + 1e-9)), np.log(n_min * 1e6)
    for _ in range(2):
        n = np.exp(np.linspace(lo, hi, points))
        d = tokens_for_loss(n, target_loss, fit)
        total = n * (k.pre * d + k.rl_per_token * rl_tokens + k.inference_per_token * inference_tokens)
        i = int(np.nanargmin(total))
        step = (hi - lo) / (points - 1)
        lo, hi = np.log(n[max(i - 1, 0)]), np.log(n[min(i + 1, points - 1)])
        if step < 1e-9:
            break
    return float(n[i]), float(d[i])


@dataclass(frozen=True)
class RoutedFit:
    """Clark et al. 2022 eq. 1: ``log10 L = a log10 N + b log10 Ê + c log10 N log10 Ê + d``.

    ``N`` is the dense base model's parameter count (~ active parameters), ``E`` the number
    of experts, ``Ê`` the saturating transform of ``E`` (:func:`saturated_experts`).
    """

    a: float
    b: float
    c: float
    d: float
    e_start: float
    e_max: float
    source: str


#: S-BASE coefficients of Clark et al. 2022, Table 3 (eq. 1 solutions), as quoted in a
#: public literature review (github code corpus, "Table 3 (Eq. 1 solutions): S-BASE a = -0.082,
#: b = -0.108, c = 0.009, d = 1.104, E_start = 1.847, E_max = 314.478"). Checks, both
#: secondhand: the same review's "N = 5M with E = 128 ~ dense 55M" (this fit: 51.8M) and the
#: lecture's "64 experts x 370M ~ 1.3B dense" (this fit: 1.37B).
CLARK_SBASE_FIT = RoutedFit(
    a=-0.082,
    b=-0.108,
    c=0.009,
    d=1.104,
    e_start=1.847,
    e_max=314.478,
    source="Clark et al. 2022 (arXiv:2202.01169) Table 3, S-BASE (quoted secondhand)",
)


def saturated_experts(experts: ArrayLike, fit: RoutedFit = CLARK_SBASE_FIT) -> FloatArray:
    """Ê: the saturating expert count of Clark et al. eq. 1.

    ``1/Ê = 1 / (E - 1 + (1/E_start - 1/E_max)^-1) + 1/E_max``. A dense model (``E = 1``)
    gets ``Ê = E_start``; ``Ê -> E_max`` as ``E -> inf``.
    """
    e = np.asarray(experts, float)
    offset = 1.0 / (1.0 / fit.e_start - 1.0 / fit.e_max)
    return np.asarray(1.0 / (1.0 / (e - 1.0 + offset) + 1.0 / fit.e_max), dtype=float)


def routed_log10_loss(params: ArrayLike, experts: ArrayLike, fit: RoutedFit = CLARK_SBASE_FIT) -> FloatArray:
    """Clark et al. 2022 eq. 1: ``log10 L = a log10 N + b log10 Ê + c log10 N log10 Ê + d``.

    ``N`` the dense base model's parameters, ``E`` the experts (``Ê`` from
    :func:`saturated_experts`); ``L`` the validation loss in nats per token. Returns
    ``log10 L``. 370e6 parameters with 64 experts match 1.37e9 dense (both 0.348).
    """
    log_n = np.log10(np.asarray(params, float))
    log_e = np.log10(saturated_experts(experts, fit))
    return np.asarray(fit.a * log_n + fit.b * log_e + fit.c * log_n * log_e + fit.d, dtype=float)


def effective_params(params: ArrayLike, experts: ArrayLike, fit: RoutedFit = CLARK_SBASE_FIT) -> FloatArray:
    """Dense-equivalent parameters of a routed model (Clark et al.'s effective parameter count).

    ``N_eff`` solves ``L(N_eff, E = 1) = L(N, E)`` in eq. 1. With ``x = log10 N``,
    ``y = log10 Ê(E)`` and ``y1 = log10 Ê(1) = log10 E_start``:
    ``log10 N_eff = (a x + b y + c x y - b y1) / (a + c y1)``. The gain shrinks as ``N`` grows
    (``c > 0``). 370M active with 64 experts gives 1.37B; 5M with 128 experts gives 52M.
    """
    x = np.log10(np.asarray(params, float))
    y = np.log10(saturated_experts(experts, fit))
    y1 = np.log10(saturated_experts(1.0, fit))
    return np.asarray(
        10.0 ** ((fit.a * x + fit.b * y + fit.c * x * y - fit.b * y1) / (fit.a + fit.c * y1)), dtype=float
    )
