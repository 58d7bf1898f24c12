"""DualPipe laid out by the pipeline simulator against DeepSeek-V3's Table 2.

Table 2 (DeepSeek-V3 report, §3.2.1): bubble ``(P/2 - 1)(F&B + B - 3W)`` with ``B`` the
full backward and, with no compute gain from pairing, ``F&B = F + B``; activations
``P + 1`` micro-batches. Hand numbers below use unit forward time.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackmath.core import pipeline as pl
from rackmath.errors import InputError


@pytest.mark.parametrize(
    ("stages", "microbatches", "t_b", "t_w", "idle"),
    [
        # X = (P/2 - 1)(t_f + 2 t_b - t_w): 4 stages -> 1 x (1 + 2 - 1) = 2
        (4, 8, 1.0, 1.0, 2.0),
        # 8 stages, W half a forward: 3 x (1 + 2 - 0.5) = 7.5
        (8, 16, 1.0, 0.5, 7.5),
        # 16 stages as DeepSeek-V3 ran (PP = 16), 40 micro-batches: 7 x 2 = 14
        (16, 40, 1.0, 1.0, 14.0),
        # 2 stages: P/2 - 1 = 0, no bubble at all
        (2, 4, 1.0, 1.0, 0.0),
    ],
)
def test_simulated_dualpipe_idles_as_table_2_says(stages, microbatches, t_b, t_w, idle):
    t = pl.simulate("dualpipe", stages, microbatches, t_f=1.0, t_b=t_b, t_w=t_w)
    work = microbatches * (1.0 + t_b + t_w)  # every rank runs each micro-batch's stage once
    assert t.makespan - work == pytest.approx(idle, abs=1e-9)
    # and each rank idles exactly that (the bubble is spread evenly, not piled on one rank)
    assert [t.makespan - t.busy(s) for s in range(stages)] == pytest.approx([idle] * stages, abs=1e-9)
    assert t.bubble_frac == pytest.approx(idle / (work + idle))
    assert t.bubble_frac == pytest.approx(
        pl.bubble_fraction("dualpipe", stages, microbatches, t_b=t_b, t_w=t_w), abs=1e-12
    )
    assert [t.peak_in_flight(s) for s in range(stages)] == [stages + 1] * stages  # Table 2: P + 1


@settings(max_examples=25, deadline=None)
@given(
    half=st.integers(1, 6),
    extra=st.integers(0, 8),
    t_w=st.floats(0.2, 1.0),
)
def test_layout_matches_the_closed_form_wherever_table_2_applies(half, extra, t_w):
    """t_b = t_f and t_w <= t_f (the table's setting): equal to rounding."""
    p, m = 2 * half, 4 * half + 2 * extra
    t = pl.simulate("dualpipe", p, m, t_w=t_w)
    assert t.bubble_frac == pytest.approx(pl.bubble_fraction("dualpipe", p, m, t_w=t_w), abs=1e-9)


def test_every_op_once_and_dependencies_kept():
    p, m = 6, 14
    t = pl.simulate("dualpipe", p, m, t_b=1.3, t_w=0.7)
    seen = {(o.stage, o.op.kind.value, o.op.microbatch, o.op.chunk) for o in t.ops}
    assert len(seen) == len(t.ops)
    # every stage runs F and B of all m/2 micro-batches in both directions
    for s in range(p):
        for kind in "FB":
            assert {
                (o.op.microbatch, o.op.chunk) for o in t.ops if o.stage == s and o.op.kind.value == kind
            } == {(i, d) for i in range(m // 2) for d in (0, 1)}
    end = {(o.stage, o.op.kind.value, o.op.microbatch, o.op.chunk): o.end for o in t.ops}
    for o in t.ops:  # forwards flow rank 0 -> P-1 in direction 0 and back in direction 1
        if o.op.kind.value == "F":
            prev = o.stage - 1 if o.op.chunk == 0 else o.stage + 1
            if 0 <= prev < p:
                assert o.start >= end[(prev, "F", o.op.microbatch, o.op.chunk)] - 1e-12
    # stages never run two ops at once
    for s in range(p):
        mine = sorted((o.start, o.end) for o in t.ops if o.stage == s)
        assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(mine))


def test_longer_backwards_part_layout_from_table():
    """t_b = 2 t_f: the layout hides part of the longer backward (X = 3 against 4)."""
    t = pl.simulate("dualpipe", 4, 8, t_b=2.0, t_w=1.0)
    assert t.makespan - 8 * 4.0 == pytest.approx(3.0)
    assert (4 / 2 - 1) * (1 + 2 * 2 - 1) == 4.0
    assert t.bubble_frac < pl.bubble_fraction("dualpipe", 4, 8, t_b=2.0, t_w=1.0)


def test_dualpipe_beats_zero_bubble_and_1f1b_at_deepseek_v3_pipeline_depth():
    p, m = 16, 32
    dual = pl.simulate("dualpipe", p, m).bubble_frac
    assert dual < pl.simulate("zb-h1", p, m).bubble_frac < pl.simulate("1f1b", p, m).bubble_frac
    assert dual == pytest.approx(14 / (32 * 3 + 14))


@pytest.mark.parametrize(
    ("stages", "microbatches", "field"), [(3, 8, "stages"), (4, 6, "microbatches"), (4, 9, "microbatches")]
)
def test_refusals_name_the_field(stages, microbatches, field):
    with pytest.raises(InputError, match=field):
        pl.simulate("dualpipe", stages, microbatches)


def test_drawing_beside_a_run_lays_out_dualpipe():
    from rackmath.analyses.training.pipeline import schedule_drawing

    d = schedule_drawing("dualpipe", 4, 64)
    assert d.timeline.schedule is pl.Schedule.DUALPIPE and d.timeline.microbatches == 8
    assert np.isclose(d.timeline.bubble_frac, 2 / 26)
    few = schedule_drawing("dualpipe", 4, 6)  # too few micro-batches to feed both ends
    assert few.timeline.schedule is pl.Schedule.ONE_F_ONE_B
