"""Roofline core: hand-computed values and physical invariants (Hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rackmath as rm
from rackmath.core import roofline as rl
from rackmath.errors import InputError

positive = st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False)
batches = st.floats(min_value=1, max_value=1e6)


def test_step_times_by_hand() -> None:
    t = rl.step_times(
        flops=2e12, weight_bytes=4e9, kv_bytes=1e9, peak_flops_per_s=1e15, bandwidth_bytes_per_s=1e12
    )
    assert float(t.compute_s) == pytest.approx(2e-3)
    assert float(t.weight_fetch_s) == pytest.approx(4e-3)
    assert float(t.kv_fetch_s) == pytest.approx(1e-3)
    assert float(t.step_s) == pytest.approx(5e-3)
    assert t.bottleneck.item() == "weights"


def test_efficiency_hooks_scale_and_add() -> None:
    eff = rl.Efficiency(flops_frac=0.5, bandwidth_frac=0.8, overhead_s=1e-4)
    t = rl.step_times(
        flops=1e12,
        weight_bytes=1e9,
        kv_bytes=0.0,
        peak_flops_per_s=1e15,
        bandwidth_bytes_per_s=1e12,
        efficiency=eff,
    )
    assert float(t.compute_s) == pytest.approx(2e-3)
    assert float(t.weight_fetch_s) == pytest.approx(1.25e-3)
    assert float(t.step_s) == pytest.approx(2.1e-3)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_efficiency_rejects_bad_fractions(bad: float) -> None:
    with pytest.raises(InputError, match="flops_frac"):
        rl.Efficiency(flops_frac=bad)


def test_expected_distinct_experts() -> None:
    assert float(rl.expected_distinct_experts(1, 256, 8)) == pytest.approx(8)
    assert float(rl.expected_distinct_experts(1e6, 256, 8)) == pytest.approx(256)
    # two tokens: 256 * (1 - (1 - 8/256)^2) = 15.75
    assert float(rl.expected_distinct_experts(2, 256, 8)) == pytest.approx(256 * (1 - (31 / 32) ** 2))


def test_balance_batch_exact_without_kv_or_routing_equals_closed_form() -> None:
    n_total, n_active, peak, bw = 70e9, 70e9, 1e15, 3.35e12
    exact = rl.balance_batch_exact(
        flops_per_token=2 * n_active,
        kv_bytes_per_sequence=0.0,
        always_read_bytes=n_total * 2,
        expert_bytes=0.0,
        experts=1,
        experts_per_token=1,
        peak_flops_per_s=peak,
        bandwidth_bytes_per_s=bw,
    )
    assert float(exact) == pytest.approx(float(rl.balance_batch(n_total, n_active, peak, bw, 2)), rel=1e-9)


def test_balance_batch_exact_is_nan_when_kv_alone_binds() -> None:
    exact = rl.balance_batch_exact(
        flops_per_token=1e9,
        kv_bytes_per_sequence=1e9,  # 1 FLOP per byte of KV, chip ratio 1000
        always_read_bytes=1e9,
        expert_bytes=0.0,
        experts=1,
        experts_per_token=1,
        peak_flops_per_s=1e15,
        bandwidth_bytes_per_s=1e12,
    )
    assert np.isnan(exact)


def test_max_batch_by_hand() -> None:
    # (100 GB * 0.9 - 40 GB) / 1 GB = 50
    assert (
        float(
            rl.max_batch(capacity_bytes=100e9, weight_bytes=40e9, kv_bytes_per_sequence=1e9, reserve_frac=0.1)
        )
        == 50
    )
    assert float(rl.max_batch(capacity_bytes=10e9, weight_bytes=40e9, kv_bytes_per_sequence=1e9)) == 0


def test_cost_per_million_tokens_by_hand() -> None:
    # 10 ms step, 100 tokens, 8 chips at $3.6/h = $0.001/s each: 0.01 * 8 * 0.001 / 100 * 1e6
    assert float(rl.usd_per_million_tokens(0.01, 100, 8, 3.6)) == pytest.approx(0.8)


@given(flops=positive, wbytes=positive, kv=positive, peak=positive, bw=positive, factor=st.floats(1, 100))
def test_more_bandwidth_never_slows_a_step(flops, wbytes, kv, peak, bw, factor) -> None:
    slow = rl.step_times(
        flops=flops, weight_bytes=wbytes, kv_bytes=kv, peak_flops_per_s=peak, bandwidth_bytes_per_s=bw
    )
    fast = rl.step_times(
        flops=flops,
        weight_bytes=wbytes,
        kv_bytes=kv,
        peak_flops_per_s=peak,
        bandwidth_bytes_per_s=bw * factor,
    )
    assert fast.step_s <= slow.step_s


@given(flops=positive, wbytes=positive, kv=positive, peak=positive, bw=positive, factor=st.floats(1, 100))
def test_more_flops_never_slows_a_step(flops, wbytes, kv, peak, bw, factor) -> None:
    slow = rl.step_times(
        flops=flops, weight_bytes=wbytes, kv_bytes=kv, peak_flops_per_s=peak, bandwidth_bytes_per_s=bw
    )
    fast = rl.step_times(
        flops=flops,
        weight_bytes=wbytes,
        kv_bytes=kv,
        peak_flops_per_s=peak * factor,
        bandwidth_bytes_per_s=bw,
    )
    assert fast.step_s <= slow.step_s


@given(flops=positive, wbytes=positive, kv=positive, peak=positive, bw=positive)
def test_step_lies_between_the_max_and_the_sum_of_its_parts(flops, wbytes, kv, peak, bw) -> None:
    t = rl.step_times(
        flops=flops, weight_bytes=wbytes, kv_bytes=kv, peak_flops_per_s=peak, bandwidth_bytes_per_s=bw
    )
    parts = np.array([t.compute_s, t.weight_fetch_s, t.kv_fetch_s])
    assert parts.max() <= t.step_s * (1 + 1e-12)
    assert t.step_s <= parts.sum() * (1 + 1e-12)


@given(batch=batches, context=st.floats(1, 1e6))
def test_throughput_never_beats_the_compute_bound(batch: float, context: float) -> None:
    dep = rm.deployment("mixtral-8x7b", "h100-hgx", efficiency="pure")
    g = dep.decode([batch], [context])
    bound = dep.peak_flops_per_s / (g.flops[0, 0] / batch)  # tokens/s if compute were all
    assert g.tokens_per_s[0, 0] <= bound * (1 + 1e-9)


@given(small=st.floats(1, 1e5), extra=st.floats(0, 1e5))
def test_kv_bytes_never_fall_as_context_grows(small: float, extra: float) -> None:
    for model_id in ("gemma-3-27b", "gpt-oss-20b", "deepseek-v3"):
        dep = rm.deployment(model_id, "h200-hgx", efficiency="pure")
        assert dep.kv_bytes_per_sequence(small + extra) >= dep.kv_bytes_per_sequence(small)


@given(sparsity=st.floats(1, 64), scale=st.floats(1.01, 10))
def test_balance_batch_scales_with_the_sparsity_ratio(sparsity: float, scale: float) -> None:
    base = rl.balance_batch(sparsity * 1e9, 1e9, 2e15, 8e12, 1.0)
    scaled = rl.balance_batch(sparsity * scale * 1e9, 1e9, 2e15, 8e12, 1.0)
    assert float(scaled / base) == pytest.approx(scale)


@given(a=batches, b=batches, e=st.integers(2, 512), k=st.integers(1, 16))
def test_distinct_experts_grow_with_batch_between_k_and_e(a: float, b: float, e: int, k: int) -> None:
    k = min(k, e)
    lo, hi = sorted((a, b))
    d_lo = float(rl.expected_distinct_experts(lo, e, k))
    d_hi = float(rl.expected_distinct_experts(hi, e, k))
    assert k - 1e-9 <= d_lo <= d_hi + 1e-9 <= e + 1e-9


def test_cost_per_token_does_not_rise_with_batch_until_memory_binds() -> None:
    for model_id, system in (("llama-3.1-8b", "h100-hgx"), ("deepseek-v3", "gb200-nvl72")):
        dep = rm.deployment(model_id, system, efficiency="pure")
        g = dep.decode(np.geomspace(1, 1e5, 200).round(), [2048])
        cost = g.usd_per_million_output_tokens[:, 0][g.fits[:, 0]]
        assert np.all(np.diff(cost) <= 1e-12 * cost[:-1])


def test_decode_grid_broadcasts_batch_by_context() -> None:
    dep = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1, efficiency="pure")
    g = dep.decode([1, 2, 4], [128, 1024])
    assert g.step_s.shape == (3, 2)
    single = dep.decode([2], [1024])
    assert single.step_s[0, 0] == pytest.approx(g.step_s[1, 1])


def test_mbu_counts_the_bytes_a_step_moves() -> None:
    dep = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1, efficiency="pure")
    g = dep.decode([1, 512], [1024])
    # the step reads the weights its batch touches and the batch's KV (the core's own count) ...
    weights_and_kv = dep.weight_bytes_read(g.batch) + g.batch * g.kv_bytes_per_sequence
    np.testing.assert_allclose(g.step.weight_bytes + g.step.kv_read_bytes, weights_and_kv, rtol=1e-12)
    # ... and moves activations beside them; MBU counts every byte it moves
    assert g.mbu == pytest.approx(g.step.bytes_moved / (g.step_s * dep.bandwidth_bytes_per_s))
    # batch 1 is bound by memory in every operator: the pure roofline saturates the bandwidth
    assert g.mbu[0, 0] == pytest.approx(1.0)
    assert np.all(g.mbu <= 1 + 1e-12)


def test_kv_cache_per_chip_is_the_batchs_cache_split_over_the_chips() -> None:
    # Llama 3.1 8B, bf16 KV: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 131,072 B/token
    dep = rm.deployment("llama-3.1-8b", "h100-hgx", chips=4, efficiency="pure")
    g = dep.decode([16], [1000])
    assert g.kv_bytes_per_chip[0, 0] == pytest.approx(16 * 1000 * 131_072 / 4)


def test_usable_bytes_worked_number() -> None:
    # 80 GB with the default 10% reserve leaves 72 GB for weights and KV
    assert rl.usable_bytes(80e9, 0.10) == pytest.approx(72e9, rel=1e-12)
    dep = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1, efficiency="pure")
    assert dep.usable_bytes_per_chip == pytest.approx(dep.system.chip.hbm_capacity_bytes * 0.9)
