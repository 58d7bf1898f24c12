"""A plan's load-free terms, kept on the chip rates, are the ones a fresh computation gives."""

from __future__ import annotations

import numpy as np

from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.core import loads
from rackmath.core import operators as ops
from rackmath.core.pass_plan import pass_plan

PLAN = {"tp": 1.0, "pp": 1.0, "dp": 64.0, "ep": 64.0}


def _deployment(model: str):
    return plan_deployment(
        resolve_model(model), system("gb200-nvl72"), "dp=64,ep=64" if "deepseek" in model else "tp=8"
    )


def test_a_plan_is_computed_once_per_rates_and_model() -> None:
    dep = _deployment("deepseek-v3")
    m = dep.shardable.operators
    first = pass_plan(m, dep.rates, **PLAN)
    assert pass_plan(m, dep.rates, **PLAN) is first
    fresh = pass_plan(m, dep.chip_rates(1.0), **PLAN)  # new rates: computed again, equal
    assert fresh is not first
    assert (
        fresh.qkv.work.flops_per_row == first.qkv.work.flops_per_row
        and fresh.moe is not None
        and first.moe is not None
    )
    assert fresh.moe.groups == first.moe.groups


def test_two_models_on_one_rates_do_not_share_a_plan() -> None:
    deepseek, llama = _deployment("deepseek-v3"), _deployment("llama-3.1-70b")
    rates = deepseek.rates
    mine = pass_plan(deepseek.shardable.operators, rates, **PLAN)
    theirs = pass_plan(llama.shardable.operators, rates, **PLAN)
    assert mine.moe is not None and theirs.moe is None
    # Llama-3.1-70B's QKV: (8192 + 2 x 8 x 128) x 8192 x 80 layers, all on one chip at tp = 1,
    # two FLOPs a parameter and token
    assert float(theirs.qkv.work.flops_per_row) == 2 * (8192 + 2 * 8 * 128) * 8192 * 80
    assert float(mine.qkv.work.flops_per_row) != float(theirs.qkv.work.flops_per_row)


def test_a_pass_on_cached_terms_equals_one_on_fresh_rates() -> None:
    dep = _deployment("deepseek-v3")
    m = dep.shardable.operators
    load = loads.decode_load(dep.model, np.float64(512.0), np.float64(4096.0), dep.kv_bytes_per_element)
    ops.pass_operators(m, load, dep.rates, **PLAN)  # fills the cache
    cached = ops.pass_operators(m, load, dep.rates, **PLAN)
    fresh = ops.pass_operators(m, load, dep.chip_rates(1.0), **PLAN)
    assert [op.name for op in cached] == [op.name for op in fresh]
    for a, b in zip(cached, fresh, strict=True):
        assert a.time_s == b.time_s and a.flops == b.flops and a.kernel == b.kernel, a.name


def test_a_plan_s_shape_terms_time_a_gemm_as_the_terms_computed_at_the_call() -> None:
    """The QKV projection timed on the plan's kept terms, and by :func:`ops.timed` (terms
    computed from the work's columns and depth at the call): the same times, to the bit."""
    dep = _deployment("deepseek-v3")
    rates = dep.rates
    g = pass_plan(dep.shardable.operators, rates, **PLAN).qkv
    assert g.terms.cols is not None  # the GB200 GEMM curve saturates in the columns
    for rows in (1.0, 8.0, 333.0, 4096.0):
        kept = ops.gemm_operator(g, np.float64(rows), rates.bandwidth_bytes_per_s)
        assert kept.work is not None
        at_call = ops.timed(g.name, kept.op_class, rates, kept.work, g.formats)
        for field in ("compute_s", "memory_s", "time_s", "bandwidth_bytes_per_s", "latency_s"):
            assert getattr(kept, field) == getattr(at_call, field), (rows, field)
