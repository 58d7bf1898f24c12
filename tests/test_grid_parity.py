"""A grid is its points: the grid path's economies change no number.

A batch x context grid evaluates each quantity on the axes it varies along (a plan's factors
on their one value, per-token FLOPs on the context row), skips exact identities (a factor of
1, an addend of 0) and takes one power in the overlap's power mean. Each figure of a grid is
checked here against one-point calls of the same deployment (a separate arithmetic path:
NumPy scalars and Python floats) and against recomputations written out independently.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackmath as rm
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.core import efficiency as eff
from rackmath.core import numeric
from rackmath.core.step import BOTTLENECKS

BATCHES = [1.0, 7.0, 64.0, 333.0, 1000.0]
CONTEXTS = [128.0, 1000.0, 4096.0, 65536.0, 131072.0]


def _deployments():
    yield "llama-3.1-70b pooled, kernel-grounded", rm.deployment("llama-3.1-70b", "h100-hgx")
    yield "llama-3.1-70b pooled, pure", rm.deployment("llama-3.1-70b", "h100-hgx", efficiency="pure")
    yield "deepseek-v3 pooled, kernel-grounded", rm.deployment("deepseek-v3", "gb200-nvl72")
    # three stages of 80 layers: P x imbalance is not 1, so no identity is skipped
    yield (
        "llama-3.1-70b tp=2,pp=3",
        plan_deployment(resolve_model("llama-3.1-70b"), system("h100-hgx"), "tp=2,pp=3"),
    )
    yield (
        "deepseek-v3 dp=64,ep=64",
        plan_deployment(resolve_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64"),
    )


DEPLOYMENTS = dict(_deployments())


@pytest.fixture(scope="module", params=sorted(DEPLOYMENTS))
def grid_and_dep(request):
    dep = DEPLOYMENTS[request.param]
    return dep.decode(BATCHES, CONTEXTS), dep


def test_every_figure_of_a_grid_equals_the_one_point_call(grid_and_dep) -> None:
    grid, dep = grid_and_dep
    shares = grid.step.time_shares()
    bottleneck = grid.step.bottleneck
    for i, b in enumerate(BATCHES):
        for j, c in enumerate(CONTEXTS):
            one = dep.decode([b], [c])
            for name in ("step_s", "usd_per_million_output_tokens", "mfu", "mbu", "kv_bytes_per_chip"):
                assert float(getattr(one, name)[0, 0]) == pytest.approx(
                    float(getattr(grid, name)[i, j]), rel=1e-12
                ), name
            assert bool(one.fits[0, 0]) == bool(grid.fits[i, j])
            for key, share in one.step.time_shares().items():
                assert float(share[0, 0]) == pytest.approx(float(shares[key][i, j]), rel=1e-12, abs=1e-15), (
                    key
                )
            assert one.step.bottleneck[0, 0] == bottleneck[i, j]


def test_the_bottleneck_is_the_first_largest_share(grid_and_dep) -> None:
    """Recomputed by stacking the seven shares and taking NumPy's argmax (the first of a tie)."""
    grid, _ = grid_and_dep
    shares = grid.step.time_shares()
    stacked = np.stack([np.broadcast_to(shares[k], grid.step_s.shape) for k in BOTTLENECKS])
    np.testing.assert_array_equal(grid.step.bottleneck, BOTTLENECKS[np.argmax(stacked, axis=0)])
    assert grid.step.bottleneck.shape == grid.step_s.shape


def test_the_shares_add_up_to_the_step(grid_and_dep) -> None:
    grid, _ = grid_and_dep
    total = sum(np.broadcast_to(v, grid.step_s.shape) for v in grid.step.time_shares().values())
    np.testing.assert_allclose(total, grid.step_s, rtol=1e-12)


def test_the_step_is_p_stage_imbalance_plus_hops_and_host(grid_and_dep) -> None:
    """``step_s = P stage_s imbalance + hops_s + overhead_s`` written out in full, no term skipped."""
    s = grid_and_dep[0].step
    np.testing.assert_array_equal(s.step_s, s.pp * s.stage_s * s.imbalance + s.hops_s + s.overhead_s)
    np.testing.assert_array_equal(s.roofline_s, s.pp * s.imbalance * s.pass_s)


def test_decode_flops_on_the_context_row_equal_the_grid() -> None:
    model = resolve_model("deepseek-v3")
    c = np.linspace(128.0, 131072.0, 7)
    grid = np.broadcast_to(c[None, :], (5, 7))
    from rackmath.core import architecture as arch

    flops = arch.decode_flops_per_token(model, grid)
    assert flops.shape == (5, 7)
    for j, x in enumerate(c):
        assert float(flops[3, j]) == float(arch.decode_flops_per_token(model, x))


_TIMES = st.one_of(st.just(0.0), st.floats(1e-9, 10.0))


@settings(max_examples=300, deadline=None)
@given(compute=_TIMES, memory=_TIMES, power=st.sampled_from([1.0, 1.2, 1.5, 2.0, 3.0, 20.0]))
def test_the_power_mean_is_both_powers_summed(compute: float, memory: float, power: float) -> None:
    """``(c^p + m^p)^(1/p)`` as a grid computes it equals the two-power form written out (on the
    ratios to the longer time) and the one-point path; 0 stays 0."""
    c, m = np.array([compute, memory, compute]), np.array([memory, compute, compute])
    longer = np.maximum(c, m)
    scale = np.maximum(longer, 1e-300)
    both = longer * ((c / scale) ** power + (m / scale) ** power) ** (1.0 / power)
    got = eff.overlapped_s(c, m, longer, power)
    np.testing.assert_array_equal(got, both)
    one = eff.overlapped_s(np.float64(compute), np.float64(memory), np.float64(max(compute, memory)), power)
    assert float(one) == pytest.approx(float(got[0]), rel=1e-12, abs=0.0)
    if compute == memory == 0.0:
        assert float(got[0]) == 0.0


def test_the_power_mean_worked_number() -> None:
    got = eff.overlapped_s(np.array([3e-6]), np.array([4e-6]), np.array([4e-6]), 2.0)
    assert float(got[0]) == pytest.approx(5e-6, rel=1e-15)


def test_compact_drops_only_broadcast_axes() -> None:
    row = np.linspace(1.0, 2.0, 4)[None, :]
    view = np.broadcast_to(row, (3, 4))
    assert numeric.compact(view).shape == (1, 4)
    np.testing.assert_array_equal(np.broadcast_to(numeric.compact(view), (3, 4)), view)
    full = np.arange(12.0).reshape(3, 4)
    assert numeric.compact(full) is full
    assert numeric.compact(2.5) == 2.5
    assert numeric.constant(np.broadcast_to(np.float64(1.0), (3, 4))) == 1.0
    assert numeric.constant(view) is None and numeric.constant(full) is None
    assert numeric.constant(0.0) == 0.0 and numeric.constant(np.array([[7.0]])) == 7.0


def test_a_tie_goes_to_the_first_share_and_a_plan_constant_share_can_win() -> None:
    """Shares written out by hand over four points: compute 1 / comm 1 / hops 1 tie (compute,
    the first), comm 2 wins, compute 3 wins, hops 1 (one value for the plan) beats 0.5 and 0.5."""
    from rackmath.core import operators as ops
    from rackmath.core.step import PlanStep
    from rackmath.specs.efficiency import Kernel, OpClass

    rest, comm = np.array([1.0, 1.0, 3.0, 0.5]), np.array([1.0, 2.0, 0.0, 0.5])
    zero, one = np.zeros(4), np.ones(4)
    op = ops.Operator(
        "op", OpClass.GEMM, zero, zero, zero, zero, zero, rest, zero, rest, np.full(4, 1e12), zero, 1e15,
        Kernel("test", "bfloat16"),
    )  # fmt: skip
    step = PlanStep(
        operators=(op,),
        tp_comm_pass_s=comm,
        ep_comm_pass_s=zero,
        stage_s=rest + comm,
        hops=one,
        hops_s=np.broadcast_to(1.0, (4,)),
        pp=one,
        imbalance=one,
        overhead_s=0.5,
    )
    assert list(step.bottleneck) == ["compute", "comm", "compute", "hops"]
    shares = step.time_shares()
    assert [float(shares[k][3]) for k in ("compute", "comm", "hops", "host")] == [0.5, 0.5, 1.0, 0.5]


_OPERATOR_FIELDS = ("flops", "compute_s", "memory_s", "time_s", "latency_s", "bandwidth_bytes_per_s")


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_a_grid_in_blocks_of_rows_is_the_grid_whole(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large grid's attention and shares run in blocks of rows (:func:`numeric.by_rows`): the
    same bits as the whole grid at once, for every figure, blocks of uneven length included
    (37 rows in blocks of 4, the last of 5), whichever of the bottleneck and the shares is
    asked for first."""
    dep = DEPLOYMENTS[name]
    batches, contexts = np.arange(1.0, 38.0) * 3.0, np.linspace(128.0, 131072.0, 50)

    def figures(block_elements: int, shares_first: bool) -> dict[str, np.ndarray]:
        monkeypatch.setattr(numeric, "BLOCK_ELEMENTS", block_elements)
        g = dep.decode(batches, contexts)
        shares = g.step.time_shares() if shares_first else {}
        out = {"bottleneck": g.step.bottleneck, "step_s": g.step_s, "band": np.stack(g.step.step_band_s)}
        shares = shares or g.step.time_shares()
        out.update({f"share {k}": np.broadcast_to(v, g.step_s.shape) for k, v in shares.items()})
        for i, op in enumerate(g.step.operators):
            out.update(
                {
                    f"{i} {op.name} {f}": np.broadcast_to(getattr(op, f), g.step_s.shape)
                    for f in _OPERATOR_FIELDS
                }
            )
        return out

    assert numeric.grid_shape((np.zeros((37, 50)),)) is None  # the default block: the whole grid
    whole = figures(numeric.BLOCK_ELEMENTS, False)
    assert numeric.grid_shape((np.zeros((37, 50)),)) is None
    for shares_first in (False, True):
        blocked = figures(200, shares_first)
        assert numeric.grid_shape((np.zeros((37, 50)),)) == (37, 50)
        assert blocked.keys() == whole.keys()
        for key, value in whole.items():
            assert blocked[key].dtype == value.dtype, key
            np.testing.assert_array_equal(blocked[key], value, err_msg=key, strict=True)


def test_by_rows_slices_what_spans_the_rows_and_keeps_the_rest() -> None:
    """Rows in blocks (9 rows of 4 columns, 8 elements a block: blocks of 2 rows, the last of 3);
    a column (9 x 1) is sliced, a row (1 x 4) and a number passed whole; an output that does
    not span the rows is the first block's."""
    col, row = np.arange(9.0)[:, None], np.arange(4.0)[None, :]
    blocks: list[int] = []

    def fn(c: np.ndarray, r: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
        blocks.append(len(c))
        return c * r + k, r * k

    shape = (9, 4)
    old = numeric.BLOCK_ELEMENTS
    try:
        numeric.BLOCK_ELEMENTS = 8
        assert numeric.grid_shape((col, row, 2.0)) == shape
        grid, kept = numeric.by_rows(fn, (col, row, 2.0), shape)
    finally:
        numeric.BLOCK_ELEMENTS = old
    assert blocks == [2, 2, 2, 3]
    np.testing.assert_array_equal(grid, col * row + 2.0, strict=True)
    np.testing.assert_array_equal(kept, row * 2.0, strict=True)
    assert numeric.grid_shape((np.float64(1.0), 2.0)) is None


def test_by_rows_keeps_one_value_broadcast_and_assembles_it_where_it_changes() -> None:
    """An output every block gives as one value broadcast stays that value, broadcast (no grid
    of copies); one whose later block holds other values is assembled, the first rows with the
    first value: the same numbers as ``fn`` over the whole grid either way."""
    col = np.arange(9.0)[:, None]

    def fn(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = (len(c), 4)
        same = np.broadcast_to(np.float64(2.5), block)
        changes = np.broadcast_to(np.float64(1.0), block) if c[0, 0] < 4.0 else c * np.ones(4)
        return same, changes

    old = numeric.BLOCK_ELEMENTS
    try:
        numeric.BLOCK_ELEMENTS = 8  # blocks of rows 0-1, 2-3, 4-5, 6-8
        same, changes = numeric.by_rows(fn, (col,), (9, 4))
    finally:
        numeric.BLOCK_ELEMENTS = old
    assert same.shape == (9, 4) and not any(same.strides)
    np.testing.assert_array_equal(same, np.full((9, 4), 2.5))
    np.testing.assert_array_equal(changes, np.where(col < 4.0, 1.0, col * np.ones(4)), strict=True)
