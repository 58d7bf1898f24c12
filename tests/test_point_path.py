"""The one-point path's shortcuts give what the formulas they skip give, to the bit.

A plan point (``benchmarks/bench_core.py``'s ``plan_point_s``) runs each formula once on Python
floats (the same IEEE arithmetic as NumPy's float64, at a third of a NumPy scalar's cost); what
it keeps from point to point (a GEMM's rows-free terms, a plan's dimensions as floats), what it
computes once for two uses (a split-KV call's splits) and the cached property without a lock
must change no number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.core import efficiency as eff
from rackmath.core import work as wk
from rackmath.core.lazy import cached_property
from rackmath.specs.efficiency import OpEfficiency

#: A decode curve that splits long contexts (split-KV) and charges each thread block.
SPLIT_KV = OpEfficiency(
    compute_frac=0.9, compute_half_rows=16.0, bandwidth_frac=0.7, bandwidth_half_rows=6.8,
    split_tokens=5610.0, split_max=33.0, split_fill=5957.0, block_bytes=62234.0, floor_s=1e-5,
    compute_half_cols=75.0, compute_half_depth=340.0, overlap_power=20.0,
)  # fmt: skip


def test_a_gemm_of_kept_terms_is_the_formula_of_its_rows() -> None:
    """A plan keeps a projection's rows-free terms (``gemm_shape``); its work at any rows is the
    formula written out, to the bit: ``flops = 2 m P`` (``m (2 P)``: doubling is exact),
    weights ``P w``, activations ``m calls (in a + out o)``, inputs ``m calls in``."""
    params, w, a, k, n, calls = 7168.0 * 2112.0, 1.0625, 1.0, 7168.0, 2112.0, 61.0
    shape = wk.gemm_shape(
        params, n, k, weight_bytes_per_param=w, activation_bytes=a, in_values=k, out_values=n, calls=calls
    )
    for m in (np.float64(3.0), np.float64(8.0 / 3.0), np.array([1.0, 7.0, 333.0, 1e5])):
        work = wk.gemm_rows(m, shape)
        assert np.array_equal(work.flops, 2.0 * m * params)
        assert work.weight_bytes == params * w
        assert np.array_equal(work.activation_bytes, m * calls * (k * a + n * wk.OUTPUT_BYTES))
        assert np.array_equal(work.input_values, m * calls * k)
        assert (work.rows is m, work.cols, work.depth, work.calls) == (True, n, k, calls)
    # the worked number of work.gemm: 16 x 7168 x 2048 in bf16 -> 0.470 GFLOP, 29.36 MB of weights
    bf16 = wk.gemm(16.0, 7168.0 * 2048.0, 2048.0, 7168.0, weight_bytes_per_param=2.0, activation_bytes=2.0,
                   in_values=2048.0, out_values=7168.0)  # fmt: skip
    assert float(bf16.flops) == pytest.approx(0.470e9, rel=1e-3)
    assert float(bf16.weight_bytes) == pytest.approx(29.36e6, rel=1e-3)


def _work(flops, moved, rows, cols, depth, number=np.float64) -> wk.Work:  # type: ignore[no-untyped-def]
    zero = number(0.0)
    return wk.Work(flops, zero, moved, zero, zero, rows, number(cols), depth, number(61.0))


@pytest.mark.parametrize("rows", [0.4, 1.0, 8.0, 640.0])
@pytest.mark.parametrize("depth", [100.0, 4096.0, 131072.0])
def test_both_fractions_in_one_pass_are_each_one_alone(rows: float, depth: float) -> None:
    """``fractions_of`` against the two fractions computed apart (:func:`achieved_compute_frac`
    splits the rows as given, :func:`achieved_bandwidth_frac` the rows floored at one): the same
    bits below one row (two splits) and above (one split, shared)."""
    compute, bandwidth = eff.fractions_of(SPLIT_KV, np.float64(rows), 4.0, depth)
    # by hand: a row is split about every 5,610 tokens, into at most 33 splits and no more than
    # make 5,957 blocks; compute saturates in the split rows as given, bandwidth in them floored at 1
    splits = min(max(depth / 5610.0, 1.0), max(5957.0 / max(rows, 1.0), 1.0), 33.0)
    r_compute, r_bandwidth = rows * splits, max(rows, 1.0) * splits
    shape = 4.0 / (4.0 + 75.0) * depth / (depth + 340.0)
    assert compute == pytest.approx(0.9 * r_compute / (r_compute + 16.0) * shape, rel=1e-12)
    assert bandwidth == pytest.approx(0.7 * r_bandwidth / (r_bandwidth + 6.8), rel=1e-12)
    assert compute == eff.achieved_compute_frac(SPLIT_KV, rows, 4.0, depth)
    assert bandwidth == eff.achieved_bandwidth_frac(SPLIT_KV, rows, depth, 4.0)


def test_a_split_kv_point_is_timed_as_inside_a_grid() -> None:
    """One point on the split-KV curve (its splits computed once for both fractions and the
    thread blocks) and the same point inside a batch x context grid (the splits of a column of
    rows; below one row, none shared): the same five numbers, from Python floats (the plan
    point's) and NumPy scalars (a caller's) alike."""
    batch, context = np.array([[0.5], [1.0], [8.0], [64.0]]), np.array([[512.0, 4096.0, 131072.0]])
    flops, moved = 1e9 * batch * context / 4096.0, 2e6 * batch * context / 4096.0
    at_grid = eff.timing_of(SPLIT_KV, _work(flops, moved, batch, 4.0, context), moved, 2.5e15, 8e12, False)
    for i in range(4):
        for j in range(3):
            for number in (float, np.float64):
                f, m, b, c = (number(x) for x in (flops[i, j], moved[i, j], batch[i, 0], context[0, j]))
                one = eff.timing_of(SPLIT_KV, _work(f, m, b, 4.0, c, number), m, 2.5e15, 8e12, False)
                for a, g in zip(one, at_grid, strict=True):
                    assert a == np.broadcast_to(g, (4, 3))[i, j], (i, j, number)


def test_a_deployment_keeps_its_plan_dimensions_as_floats() -> None:
    dep = plan_deployment(resolve_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64")
    d = dep.dims
    assert type(d.dp) is float and d.dp == 64 and d.ep == 64 and d.tp == 1 and d.cp == 1
    assert d.cp_comm == dep.plan.cp_comm  # words stay words


_OPERATOR_NUMBERS = (
    "flops", "weight_bytes", "activation_bytes", "kv_read_bytes", "kv_write_bytes", "compute_s",
    "memory_s", "time_s", "bandwidth_bytes_per_s", "latency_s",
)  # fmt: skip


@pytest.mark.parametrize(
    "plan", ["dp=64,ep=64", "attn_dp=32,ep=32,redundant_experts=32,skew=1.3,tbo=on", "tp=4,pp=2"]
)
def test_a_plan_point_runs_on_floats_from_its_entry_to_its_operators(plan: str) -> None:
    """Every number of a one-point step's operators and collectives is a Python float: a NumPy
    scalar anywhere on the way would make each operation after it ~2-3x dearer (no number
    changes, so only this finds it). The same numbers as that point of a grid, to within a few
    units in the last place (NumPy's vectorized loops may round a last bit differently)."""
    dep = plan_deployment(resolve_model("deepseek-v3"), system("gb200-nvl72"), plan)
    one, grid = dep.decode([512], [4096]).step, dep.decode([512, 1], [4096]).step
    assert one.operators and one.collectives
    for op, at_grid in zip(one.operators + one.collectives, grid.operators + grid.collectives, strict=True):
        for name in _OPERATOR_NUMBERS:
            x = getattr(op, name)
            assert type(x) is float, (op.name, name, type(x))
            at = np.broadcast_to(getattr(at_grid, name), (2, 1))[0, 0]
            assert x == pytest.approx(at, rel=1e-15, abs=0.0), (op.name, name)


def test_the_cached_property_computes_once_and_keeps_the_value() -> None:
    calls = []

    @dataclass(frozen=True)
    class Step:
        x: float

        @cached_property
        def doubled(self) -> float:
            """Twice x."""
            calls.append(self.x)
            return 2.0 * self.x

    s = Step(3.0)
    assert s.doubled == 6.0 and s.doubled == 6.0 and calls == [3.0]
    assert vars(s)["doubled"] == 6.0  # kept on the instance, as functools.cached_property does
    assert Step.doubled.__doc__ == "Twice x."  # the class reads the descriptor
