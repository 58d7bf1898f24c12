"""Analyses: prices, long-context tiers, prompt caches, fast modes and sparsity, checked
against independent recomputations through the serving roofline."""

from __future__ import annotations

import datetime as dt
from functools import cache

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.economics import caching, fast_mode, prices, sparsity
from rackmath.analyses.serving import cache_tiers
from rackmath.analyses.serving.deployment import Deployment
from rackmath.catalog import economics as ce
from rackmath.core import architecture as arch
from rackmath.core import loads
from rackmath.errors import InputError


@cache
def dsv3() -> Deployment:
    return rm.deployment("deepseek-v3", "gb200-nvl72", efficiency="pure")


@cache
def llama70() -> Deployment:
    return rm.deployment("llama-3.1-70b", "h100-hgx", efficiency="pure")


def test_survey_ages_and_roofline_ratio() -> None:
    d = dsv3()
    s = prices.survey(list(ce.prices().values()), d, as_of=dt.date(2026, 11, 22), batch=2000, context=8192)
    assert s.oldest_days == max(p.age_days(dt.date(2026, 11, 22)) for p in ce.prices().values())
    out = d.decode([2000], [8192]).usd_per_million_output_tokens[0, 0]
    inp = d.prefill([1], [8192]).usd_per_million_input_tokens[0, 0]
    assert s.roofline.output_over_input == pytest.approx(out / inp)
    # the roofline lands in the 3-8x band that list prices show (D34)
    assert 3 < s.roofline.output_over_input < 10
    # cost per token = FLOPs per token / (MFU x peak) x price: the ratio is the MFU ratio
    # times the FLOPs ratio (decode's absorbed-MLA attention does more FLOPs per token)
    # One 8,192-token prompt on 64 pooled chips: attention computes in bf16 (half the fp8
    # peak), and the routed experts are memory-bound: 8,192 tokens x 8 picks touch all 256
    # experts of all 58 MoE layers, 256 x 58 x 3 x 7168 x 2048 B = 654 GB over 512 TB/s = 1.28 ms
    pre = d.prefill([1], [8192])
    experts = next(op for op in pre.step.operators if op.name == "routed_experts")
    # block-scaled fp8 weights: one 4-byte scale per 128 x 128 block
    expert_bytes = 256 * 58 * 3 * 7168 * 2048 * (1.0 + 4 / (128 * 128))
    assert float(np.ravel(experts.weight_bytes)[0]) == pytest.approx(expert_bytes, rel=1e-6)
    assert float(np.ravel(experts.memory_s)[0]) > float(np.ravel(experts.compute_s)[0])
    f_attn = float(loads.prefill_attention_flops_per_sequence(d.model, 8192))
    f_all = float(arch.prefill_flops_per_sequence(d.model, 8192))
    assert s.roofline.prefill_mfu == pytest.approx(float(pre.mfu[0, 0]))
    assert s.roofline.prefill_mfu < f_all / (f_all + f_attn)  # below the compute-only bound
    f_dec = float(arch.decode_flops_per_token(d.model, 8192))
    f_pre = float(arch.prefill_flops_per_sequence(d.model, 8192)) / 8192
    ratio = (f_dec / s.roofline.decode_mfu) / (f_pre / s.roofline.prefill_mfu)
    assert s.roofline.output_over_input == pytest.approx(ratio, rel=1e-9)
    rows = s.to_dict()["prices"]
    opus = next(r for r in rows if r["id"] == "claude-opus-4.6")
    assert opus["implied_decode_utilization_frac"] == pytest.approx(0.2)
    assert opus["miss_over_hit"] == pytest.approx(10.0)


def test_long_context_gemini_over_deepseek() -> None:
    gem = ce.price("gemini-3.1-pro")
    lc = prices.long_context(gem, dsv3(), batch=64)
    # the tier boundary read with the lecture's inputs: ~1,667 bytes per token (D31)
    assert lc.boundary_implied_kv_bytes_per_token == pytest.approx((100e9 / (300 * 200_000),))
    # DeepSeek-V3's MLA cache: (512 + 64) x 61 layers x 2 bytes = 70,272 B/token
    assert lc.kv_bytes_per_token == 70_272
    # its own crossover: N_active x 1 B (fp8) / (312.5 x 70,272)
    assert lc.crossover_context_tokens == pytest.approx(dsv3().params.active / (312.5 * 70_272))
    # prices stay above this deployment's cost at every length, and the margin is right
    assert lc.above_cost_everywhere
    c = 1_000_000
    i = int(np.where(lc.contexts == c)[0][0])
    cost = dsv3().decode([64], [c]).usd_per_million_output_tokens[0, 0]
    assert lc.output_margin[i] == pytest.approx(18.0 / cost - 1)
    # the step in the price is at the boundary, whole-request repricing
    j = int(np.where(lc.contexts == 200_001)[0][0])
    assert lc.price_usd_per_million_output_tokens[j] == 18.0
    assert lc.price_usd_per_million_output_tokens[j - 1] == 12.0


def test_long_context_refuses_a_bad_batch() -> None:
    with pytest.raises(InputError, match="batch"):
        prices.long_context(ce.price("gemini-3.1-pro"), dsv3(), batch=0)


def _cache(price: str = "claude-opus-4.6") -> caching.CacheEconomics:
    d = dsv3()
    return caching.cache_economics(d, cache_tiers.default_tiers(d, ce.memory_tiers()), price=ce.price(price))


def test_cache_tiers_map_five_minutes_to_flash_and_an_hour_to_disk() -> None:
    c = _cache()
    # D36, with the catalog's 2026 devices and prices and a 3-year amortization
    assert c.cheapest_at(300.0) == "flash"
    assert c.cheapest_at(3600.0) == "disk"
    hbm = c.tiers[0]
    # GB200 as NVML reports it, 189,471 MiB = 198,674,743,296 B: 24.8 ms, the lecture's ~20 ms
    assert hbm.drain_time_s == pytest.approx(189_471 * 2**20 / 8e12)
    # independent recomputation of one number: flash hit after 5 minutes, per token
    flash = ce.memory_tier("flash")
    usd_s = flash.price.value * flash.capacity_bytes / (3 * 365 * 86400)
    expected = 70_272 / flash.capacity_bytes * usd_s * 300 + 70_272 / flash.bandwidth_bytes_per_s * usd_s
    j = list(c.retentions_s).index(300.0)
    assert c.hit_usd_per_token[2, j] == pytest.approx(expected)
    # a hit is far cheaper than recomputing, which is what the 10x discount passes on
    d = c.to_dict()["pricing"]
    assert d["miss_over_hit"] == pytest.approx(10.0)
    assert d["cost_recompute_over_hit_5m"] > 10


def test_cache_retention_property_on_the_catalog() -> None:
    # A longer retention never makes a slower tier relatively worse than a faster one.
    d = dsv3()
    c = caching.cache_economics(
        d, cache_tiers.default_tiers(d, ce.memory_tiers()), retentions_s=list(np.geomspace(1e-3, 1e7, 60))
    )
    hit = c.hit_usd_per_token
    for fast in range(len(c.tiers)):
        for slow in range(fast + 1, len(c.tiers)):
            ratio = hit[slow] / hit[fast]
            assert np.all(np.diff(ratio) <= 1e-12 * ratio[:-1])


def test_amortization_is_explicit() -> None:
    d = dsv3()
    three = cache_tiers.default_tiers(d, ce.memory_tiers(), 3 * 365 * 86400)
    six = cache_tiers.default_tiers(d, ce.memory_tiers(), 6 * 365 * 86400)
    assert six[2].device_usd_per_s == pytest.approx(three[2].device_usd_per_s / 2)
    assert six[0].device_usd_per_s == three[0].device_usd_per_s  # HBM: rental, no amortization
    with pytest.raises(InputError, match="amortization"):
        cache_tiers.purchased_tier(ce.memory_tier("disk"), -1.0)
    with pytest.raises(InputError, match="retention"):
        caching.cache_economics(d, three, retentions_s=[-5.0])


def test_fast_mode_ideal_and_published() -> None:
    r = fast_mode.report(None, context=4096, price=ce.price("claude-opus-4.6"))
    assert r.ideal.speedup == pytest.approx(2.5)
    assert r.ideal.price_multiple_check == pytest.approx(6.0)
    assert r.ideal.fast_over_balance == pytest.approx(1 / 6)
    assert r.ideal.ceiling_speedup == pytest.approx(2.5)
    # paying 100x buys nothing more
    assert fast_mode.ideal(2.5, 100.0).speedup == pytest.approx(2.5)
    with pytest.raises(InputError, match="price multiple"):
        fast_mode.ideal(2.5, 0.5)


def test_fast_mode_on_a_dense_deployment() -> None:
    d = llama70()
    f = fast_mode.on_deployment(d, context=4096, price_multiple=6.0)
    # the fast batch really costs 6x the normal one per token (independent decode calls)
    cost = d.decode([f.fast_batch, f.normal_batch], [4096]).usd_per_million_output_tokens[:, 0]
    assert cost[0] / cost[1] == pytest.approx(6.0, rel=0.02)
    # no batch is faster than batch 1: the ceiling bounds every speed-up
    assert np.all(f.speedups <= f.ceiling_speedup + 1e-9)
    assert 1 < f.fast_speedup <= f.ceiling_speedup
    assert 0 <= f.slow_mode_saving_frac < 0.05


def test_sparsity_is_a_pure_win_until_users_run_out() -> None:
    study = sparsity.sparsity_study(dsv3(), sparsities=[1, 4, 16, 64], users=2000)
    rows = study.rows
    # GB200 fp8: 5e15 x 1.000244 / (2 x 8e12) (block-scaled fp8 holds a 4-byte scale per 128 x 128)
    r = dsv3().params.active and 312.5 * (1.0 + 4 / (128 * 128))
    assert [row.balance_batch for row in rows] == pytest.approx([r * s for s in (1, 4, 16, 64)])
    # at the balance batch the cost per token is the same for every sparsity
    at_balance = [row.usd_per_million_tokens_at_balance for row in rows]
    assert at_balance == pytest.approx([at_balance[0]] * 4, rel=1e-9)
    # quality rises, memory grows, and past the users' batch the cost rises
    assert np.all(np.diff([row.effective_params for row in rows]) > 0)
    assert np.all(np.diff([row.memory_bytes for row in rows]) > 0)
    at_users = [row.usd_per_million_tokens_at_users for row in rows]
    assert np.all(np.diff(at_users) >= -1e-12)
    assert at_users[-1] > 2 * at_users[0]
    with pytest.raises(InputError, match="sparsity"):
        sparsity.sparsity_study(dsv3(), sparsities=[0.5])


def test_cached_prompt_bytes_honour_sliding_windows() -> None:
    # Gemma 3 27B (catalog config): 62 layers, sliding_window_pattern 6 -> layers 6, 12, ..., 60
    # are global (10), the other 52 slide over 1024 tokens; 16 KV heads x head_dim 128, K and V,
    # bf16: 2 x 16 x 128 x 2 B = 8,192 B per token per layer.
    # An 8,192-token prompt: 8,192 x (10 x 8,192 + 52 x 1,024) = 1,107,296,256 B in all,
    # 135,168 B per cached token; every layer holding every token would be 62 x 8,192 = 507,904 B.
    d = rm.deployment("gemma-3-27b", "h100-hgx", efficiency="pure")
    per_layer = 2 * 16 * 128 * 2
    expected = per_layer * (10 * 8192 + 52 * 1024) / 8192
    assert expected == 135_168
    c = caching.cache_economics(d, cache_tiers.default_tiers(d, ce.memory_tiers()), prompt_tokens=8192)
    assert c.kv_bytes_per_token == pytest.approx(expected, rel=1e-12)
    assert arch.kv_bytes_per_token(d.model, 2) == 62 * per_layer == 507_904  # the old, window-blind figure
    # the hold cost scales with the bytes: HBM for an hour, per token, by hand
    hbm = c.tiers[0]
    hour = list(c.retentions_s).index(3600.0)
    assert c.hold_usd_per_token[0, hour] == pytest.approx(
        expected / hbm.capacity_bytes * hbm.device_usd_per_s * 3600, rel=1e-12
    )
    # a prompt within the window: every layer holds every token
    short = caching.cache_economics(d, cache_tiers.default_tiers(d, ce.memory_tiers()), prompt_tokens=1000)
    assert short.kv_bytes_per_token == pytest.approx(507_904, rel=1e-12)
    with pytest.raises(InputError):
        caching.cache_economics(d, cache_tiers.default_tiers(d, ce.memory_tiers()), prompt_tokens=0)
