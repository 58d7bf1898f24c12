"""Scaling laws and over-training: Chinchilla (Hoffmann et al. 2022), the lecture's chain
(D25-D29), and the routed-model law (Clark et al. 2022)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackmath.analyses.economics import overtrain
from rackmath.core import scaling_laws as sl
from rackmath.errors import InputError


def test_the_lectures_over_training_chain() -> None:
    r = overtrain.overtrain()
    # D28: 50M tokens/s x 60 days = 2.592e14 (~ "200T")
    assert r.inference_tokens == pytest.approx(50e6 * 60 * 86400)
    assert r.inference_tokens == pytest.approx(2.6e14, rel=0.01)
    # D27: 1/3 efficiency -> D_pre = 1.5 D_RL = D_inf (6 D_pre = 9 D_RL = 6 D_inf)
    assert r.pretrain_tokens == pytest.approx(r.inference_tokens)
    assert r.pretrain_tokens == pytest.approx(1.5 * r.rl_tokens)
    pre, rl, inf = r.heuristic_compute
    assert pre == pytest.approx(rl) and rl == pytest.approx(inf)
    # D29: 100B active, Chinchilla 20 x 100B = 2T -> ~100x over-trained (129.6x exactly)
    assert r.chinchilla_tokens == pytest.approx(2e12)
    assert r.overtraining_factor == pytest.approx(2.592e14 / 2e12)
    assert 100 <= r.overtraining_factor < 200


def test_every_input_changes_the_answer() -> None:
    base = overtrain.overtrain()
    assert overtrain.overtrain(tokens_per_s=100e6).pretrain_tokens == pytest.approx(2 * base.pretrain_tokens)
    assert overtrain.overtrain(duration_s=120 * 86400).pretrain_tokens == pytest.approx(
        2 * base.pretrain_tokens
    )
    # full efficiency: inference costs 2ND, so D_pre = D_inf / 3
    eff = overtrain.overtrain(coefficients=sl.ComputeCoefficients(inference_efficiency=1.0))
    assert eff.pretrain_tokens == pytest.approx(base.inference_tokens / 3)
    assert overtrain.overtrain(params=50e9).overtraining_factor == pytest.approx(2 * base.overtraining_factor)


@pytest.mark.parametrize("kwargs", [{"params": -1.0}, {"tokens_per_s": 0.0}, {"duration_s": float("nan")}])
def test_bad_overtrain_inputs(kwargs) -> None:
    with pytest.raises(InputError):
        overtrain.overtrain(**kwargs)


def test_bad_efficiency() -> None:
    with pytest.raises(InputError, match="efficiency"):
        overtrain.overtrain(coefficients=sl.ComputeCoefficients(rl_efficiency=1.5))


def test_chinchilla_fit_constants_and_frontier() -> None:
    fit = sl.CHINCHILLA_FIT
    assert (fit.E, fit.A, fit.B, fit.alpha, fit.beta) == (1.69, 406.4, 410.7, 0.34, 0.28)
    c = 5.76e23  # Chinchilla's own training compute
    n, d = sl.compute_optimal(c)
    assert 6 * n * d == pytest.approx(c)
    # a minimum along the iso-compute line
    for f in (0.8, 1.25):
        assert sl.loss(n, d) < sl.loss(n * f, d / f)
    # approach 3 puts fewer tokens per parameter than the rule of thumb (Hoffmann et al. Table 3)
    assert 40e9 > n > 25e9


@given(n=st.floats(1e8, 1e12), d=st.floats(1e9, 1e15))
def test_tokens_for_loss_inverts_the_loss(n: float, d: float) -> None:
    target = float(sl.loss(n, d))
    assert sl.tokens_for_loss(n, target) == pytest.approx(d, rel=1e-6)


def test_power_law_optimum_beside_equal_split() -> None:
    # D25: minimise A + B with A ~ x^p, B ~ x^-q -> p A = q B
    assert sl.power_law_optimal_share(1.0, 1.0) == pytest.approx(0.5)
    assert sl.equal_split_excess(1.0, 1.0) == pytest.approx(0.0)
    # brute force: p = 1, q = 3 -> A takes 3/4
    x = np.geomspace(1e-3, 1e3, 200_001)
    a, b = x, x**-3.0
    i = np.argmin(a + b)
    assert a[i] / (a[i] + b[i]) == pytest.approx(sl.power_law_optimal_share(1.0, 3.0), rel=1e-3)
    assert (2 * 1.0) / (a[i] + b[i]) - 1 == pytest.approx(sl.equal_split_excess(1.0, 3.0), rel=1e-3)


def test_exact_optimum_matches_the_power_law_reading() -> None:
    # Two derivations: the numeric minimum of lifetime compute at fixed loss, and p A = q B
    # with the local exponent of pre-training compute along the iso-loss curve.
    d = overtrain.overtrain().to_dict()["exact_optimum_at_same_loss"]
    assert d["pretrain_share_frac"] == pytest.approx(d["power_law_pretrain_share_frac"], rel=1e-3)
    # equal thirds is close to optimal (the lecture's heuristic), but not exactly
    assert 0 < d["equal_thirds_excess_frac"] < 0.05


def test_routed_scaling_law() -> None:
    # a dense model is its own equivalent
    assert sl.effective_params(370e6, 1) == pytest.approx(370e6, rel=1e-9)
    eff = sl.effective_params(370e6, [1, 8, 64, 256])
    assert np.all(np.diff(eff) > 0)
    # the lecture (D11): 64 experts x 370M ~ 1.3B dense; this fit gives 1.37B
    assert sl.effective_params(370e6, 64) == pytest.approx(1.3e9, rel=0.06)
    # a literature review of Clark et al.: "N = 5M with E = 128 ~ dense 55M"; this fit: 51.8M
    assert sl.effective_params(5e6, 128) == pytest.approx(55e6, rel=0.07)
    # the defining identity: L(N, E) = L(N_eff, E = 1)
    fit = sl.CLARK_SBASE_FIT
    n_eff = float(sl.effective_params(370e6, 64))
    assert sl.routed_log10_loss(370e6, 64) == pytest.approx(float(sl.routed_log10_loss(n_eff, 1)), rel=1e-12)
    # saturation: a dense model sits at E_start, and E_hat -> E_max
    assert sl.saturated_experts(1) == pytest.approx(fit.e_start)
    assert sl.saturated_experts(1e9) == pytest.approx(fit.e_max, rel=1e-3)


def test_chinchilla_loss_worked_number() -> None:
    # Hoffmann et al. eq. 2 with approach 3's fit at Chinchilla's (70e9, 1.4e12)
    by_hand = 1.69 + 406.4 / 70e9**0.34 + 410.7 / 1.4e12**0.28
    assert sl.loss(70e9, 1.4e12) == pytest.approx(by_hand, rel=1e-12)
    assert sl.loss(70e9, 1.4e12) == pytest.approx(1.937, abs=5e-4)
