"""The lecture's numbers (shared/reference/lecture-derivations.md), first with its own round
inputs through the plain-number core, then with real architectures and chips."""

from __future__ import annotations

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.serving import pooled
from rackmath.catalog import loader as catalog
from rackmath.core import roofline as rl
from rackmath.specs.precision import Precision

FP8 = Precision.FP8.bytes_per_element
FP4 = Precision.FP4.bytes_per_element


@pytest.mark.parametrize(
    ("chip_id", "precision", "tolerance"),
    [
        ("h100-sxm", Precision.FP8, 0.06),  # 1.979e15 * 1 / (2 * 3.35e12) = 295
        # The lecture's own B200 sum, 9e15 * 0.5 / (2 * 8e12) = 281.25, is 6.25% under 300:
        # the HGX B200 (1,000 W) datasheet figures cannot be bent to 6%, so this row allows 6.5%.
        ("b200", Precision.FP4, 0.065),
        ("gb200", Precision.FP4, 0.06),  # 10e15 * 0.5 / (2 * 8e12) = 312.5
        ("rubin", Precision.FP4, 0.06),  # 25e15 * 0.5 / (2 * 22e12) = 284
    ],
)
def test_dense_balance_batch_is_about_300(chip_id: str, precision: Precision, tolerance: float) -> None:
    chip = catalog.chip(chip_id)
    b = float(
        rl.dense_balance_batch(
            chip.peak_flops(precision), chip.hbm_bandwidth_bytes_per_s, precision.bytes_per_element
        )
    )
    assert b == pytest.approx(300, rel=tolerance)
    # ... and it is not the chip's FLOP/byte ratio, which is twice as large per byte-weight
    ratio = float(rl.flop_per_byte(chip.peak_flops(precision), chip.hbm_bandwidth_bytes_per_s))
    assert ratio * precision.bytes_per_element / 2 == pytest.approx(b)


def test_lecture_deepseek_balance_batch_2400() -> None:
    # "32 of 256 experts" -> sparsity 8; a chip whose dense balance batch is 300
    peak, bandwidth, bytes_per_weight = 600.0, 1.0, 1.0  # 600 * 1 / (2 * 1) = 300
    assert float(rl.balance_batch(256, 32, peak, bandwidth, bytes_per_weight)) == pytest.approx(2400)
    # the closed form is linear in the sparsity ratio
    assert float(rl.balance_batch(700e9, 37e9, peak, bandwidth, 1.0)) == pytest.approx(300 * 700 / 37)


def test_real_deepseek_v3_balance_batch_from_its_config() -> None:
    dep = rm.deployment("deepseek-v3", "gb200-nvl72", weights="fp4", compute="fp4", efficiency="pure")
    bal = pooled.balance(dep, [1.0])
    p = dep.params
    # 10e15 * 0.5 / (2 * 8e12) = 312.5 per chip, times N_total / N_active from the config
    assert bal.dense_balance_batch == pytest.approx(312.5)
    assert bal.sparsity == pytest.approx(p.total / p.active)
    assert 17 < bal.sparsity < 19  # 671B / 37.5B: routed 8 of 256, but much is always active
    assert bal.balance_batch == pytest.approx(312.5 * p.total / p.active)
    # with (almost) no KV, the exact root sits near the closed form; MoE routing touches all
    # experts long before B*, and attention adds little at 1 token of context
    assert float(bal.balance_batch_with_kv[0]) == pytest.approx(bal.balance_batch, rel=0.05)


def test_latency_floor_deepseek_v3_on_64_gb200() -> None:
    dep = rm.deployment("deepseek-v3", "gb200-nvl72", chips=64, weights="fp8", efficiency="pure")
    p = dep.params
    # fp8 converts the blocks' matmuls; the LM head, routers and norms stay bf16 (2 B)
    wide = p.lm_head + p.router + p.norms
    expected = ((p.total - p.embedding - wide) * 1.0 + wide * 2.0) / (64 * 8e12)
    assert pooled.latency_floor_s(dep) == pytest.approx(expected)
    # the lecture's round "0.7 TB on 64 B200s, about 1.4 ms"
    assert float(rl.latency_floor_s(0.7e12, 64 * 8e12)) == pytest.approx(1.37e-3, rel=0.01)
    assert pooled.latency_floor_s(dep) == pytest.approx(1.4e-3, rel=0.10)


def test_hbm_drain_times() -> None:
    # the lecture: "about 24 ms" for an H100, i.e. 80 GB / 3.35 TB/s = 23.9 ms
    assert float(rl.hbm_drain_time_s(80e9, 3.35e12)) == pytest.approx(0.0239, rel=0.001)
    # the catalog holds what NVML reports (81,559 MiB = 85,520,809,984 bytes): 25.5 ms, 7% above
    h100 = catalog.chip("h100-sxm")
    catalog_drain = float(rl.hbm_drain_time_s(h100.hbm_capacity_bytes, h100.hbm_bandwidth_bytes_per_s))
    assert catalog_drain == pytest.approx(81_559 * 2**20 / 3.35e12)
    assert catalog_drain == pytest.approx(0.024, rel=0.07)
    assert float(rl.hbm_drain_time_s(288e9, 20e12)) == pytest.approx(0.0144)  # the lecture's Rubin
    # GB200: NVML 189,471 MiB = 198,674,743,296 B (aiconfigurator-core 0.12.0 systems/gb200.yaml)
    # over 8 TB/s = 24.8 ms (the marketed "186 GB" gave 23.25 ms)
    gb200 = catalog.chip("gb200")
    assert gb200.hbm_capacity_bytes == 189_471 * 2**20 == 198_674_743_296
    assert float(rl.hbm_drain_time_s(gb200.hbm_capacity_bytes, 8e12)) == pytest.approx(0.024834, rel=1e-4)
    rubin = catalog.chip("rubin")  # announced 22 TB/s: 13.1 ms
    assert float(rl.hbm_drain_time_s(rubin.hbm_capacity_bytes, rubin.hbm_bandwidth_bytes_per_s)) == (
        pytest.approx(288e9 / 22e12)
    )


def test_cost_at_batch_one_over_cost_at_balance_equals_the_balance_batch() -> None:
    # Lecture inputs: 37e9 active, 700e9 total, fp8, GB200-like chip; KV ignored
    n_active, n_total, peak, bandwidth = 37e9, 700e9, 5e15, 8e12
    b_star = float(rl.balance_batch(n_total, n_active, peak, bandwidth, 1.0))
    batch = np.array([1.0, b_star])
    t = rl.step_times(
        flops=batch * 2 * n_active,
        weight_bytes=n_total * 1.0,
        kv_bytes=0.0,
        peak_flops_per_s=peak,
        bandwidth_bytes_per_s=bandwidth,
    )
    cost = rl.usd_per_million_tokens(t.step_s, batch, 1, 2.0)
    assert cost[0] / cost[1] == pytest.approx(b_star)  # ~"a thousand times worse"
    assert b_star > 1000


def test_mfu_halves_when_context_doubles_past_the_balanced_context() -> None:
    # KV-dominated regime: weights negligible against the batch's KV traffic
    n_active, kv_bytes_per_token, peak, bandwidth, batch = 100e9, 2048.0, 2.5e15, 8e12, 1000.0
    flops = batch * 2 * n_active
    # balanced context: compute time = KV time
    balanced = 2 * n_active * bandwidth / (peak * kv_bytes_per_token)
    contexts = np.array([balanced, 2 * balanced, 4 * balanced])
    t = rl.step_times(
        flops=flops,
        weight_bytes=0.0,
        kv_bytes=batch * contexts * kv_bytes_per_token,
        peak_flops_per_s=peak,
        bandwidth_bytes_per_s=bandwidth,
    )
    mfu = rl.utilization(flops, t.step_s, peak)
    assert mfu == pytest.approx([1.0, 0.5, 0.25])


def test_mfu_vs_context_for_a_real_model_levels_at_attention_intensity() -> None:
    """The lecture drops attention FLOPs, so its MFU halves with each doubling. A real model's
    attention FLOPs also grow with context, so MFU falls only to attention's own arithmetic
    intensity over the chip's ratio: 2 H (d_qk + d_v) / (2 H_kv d bytes) = 8 FLOP/byte for
    Llama-3.1-70B in bf16, against 295 for the H100: 2.7%."""
    dep = rm.deployment("llama-3.1-70b", "h100-hgx", efficiency="pure")
    result = rm.explain(dep, [256], [4096])
    mfu = result.mfu_at_balance_batch
    assert np.all(np.diff(mfu[result.mfu_contexts >= 8192]) < 0)  # falls with context...
    chip = dep.system.chip
    limit = (2 * 64 * 256 / (2 * 8 * 128 * 2)) / (
        chip.peak_flops(Precision.BF16) / chip.hbm_bandwidth_bytes_per_s
    )
    assert limit == pytest.approx(0.027, rel=0.02)
    assert mfu[-1] == pytest.approx(limit, rel=0.10)  # ...towards attention's intensity
    assert np.all(mfu > limit)


def test_crossover_context_bytes_per_token_1667() -> None:
    # D31: 100B active, boundary at 200K tokens, ratio 300 -> KV bytes per token
    n_active, ratio, boundary = 100e9, 300.0, 200e3
    assert n_active / (ratio * boundary) == pytest.approx(1667, rel=0.001)
