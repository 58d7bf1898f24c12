"""A causal prefill past the chip's L2 reads its operands again from DRAM (``spill_passes``).

A prefill's query tiles re-read the keys and values before them; while a call's operands fit in
the L2 those re-reads hit it. On the L40S's TensorRT-LLM tables the calls beyond its 96 MiB run
about 1.5x a curve fitted without the term, at every head count and prompt length, and the
term takes the step out (:func:`rackmath.core.efficiency.spill_bytes_of`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.kernels import fit as kf
from rackmath.analyses.kernels import tables as et
from rackmath.analyses.kernels.rows import fit_groups
from rackmath.catalog import kernel_efficiency as ke
from rackmath.catalog import kernel_tables as kt
from rackmath.catalog.loader import chip
from rackmath.core.chip_rates import pooled_caches
from rackmath.core.efficiency import operator_timing, spill_bytes_of
from rackmath.specs.efficiency import OpClass, OpEfficiency

L2 = 100e6
SPILLING = OpEfficiency(spill_bytes=L2, spill_passes=1.5)


def test_the_bytes_beyond_the_l2_are_read_spill_passes_more_times() -> None:
    """The docstring's worked numbers: 200 MB in one call past 100 MB, 1.5 passes -> 150 MB;
    a call of 80 MB -> 0; two calls of 150 MB each (300 MB, 200 MB of L2) -> 150 MB."""
    assert spill_bytes_of(SPILLING, np.float64(200e6), np.float64(1.0)) == pytest.approx(150e6)
    assert spill_bytes_of(SPILLING, np.float64(80e6), np.float64(1.0)) == 0.0
    assert spill_bytes_of(SPILLING, np.float64(300e6), np.float64(2.0)) == pytest.approx(150e6)
    grid = spill_bytes_of(SPILLING, np.array([50e6, 100e6, 400e6]), np.float64(1.0))
    np.testing.assert_allclose(grid, [0.0, 0.0, 450e6])


def test_the_spill_is_memory_traffic_at_the_curves_bandwidth() -> None:
    """1 GFLOP and 200 MB on a 1 PFLOP/s, 1 TB/s chip: compute 1 us; memory (200 + 150) MB at
    1 TB/s = 350 us; without the term 200 us. The alternative-free curve keeps its compute."""
    compute, memory, time, _, _ = operator_timing(SPILLING, 1e9, 200e6, 1e15, 1e12, rows=1e4)
    assert compute == pytest.approx(1e-6)
    assert memory == pytest.approx(350e-6)
    assert time == pytest.approx(350e-6)
    plain = operator_timing(OpEfficiency(), 1e9, 200e6, 1e15, 1e12, rows=1e4, pure=False)
    assert plain[1] == pytest.approx(200e-6)


def test_a_pool_of_chips_holds_each_chips_l2() -> None:
    """The ideal pooled chip of 8 L40S holds 8 x 96 MiB; a chip's own curve is unchanged."""
    pooled = pooled_caches(SPILLING, 8.0)
    assert pooled.spill_bytes == 8 * L2 and pooled.spill_passes == SPILLING.spill_passes
    assert pooled_caches(OpEfficiency(), 8.0) == OpEfficiency()


def test_the_catalog_fits_a_spill_where_it_states_the_l2_and_nowhere_else() -> None:
    """The L40S's and the RTX PRO 6000's prefill curves spill past their own L2 (96 and 128 MiB,
    chips.yaml); no curve of a chip without a stated L2 does, and no other class anywhere."""
    stated = {"l40s": 96 * 2**20, "rtx-pro-6000": 128 * 2**20}
    for chip_id, l2 in stated.items():
        assert chip(chip_id).l2_cache_bytes == l2
    for chip_id in ke.known_chips():
        for entry in ke.op_entries(chip_id):
            e = et.op_from_entry(entry)
            if not e.spill_passes:
                assert e.spill_bytes == 0.0
                continue
            assert chip_id in stated, chip_id
            assert entry["op_class"] == OpClass.ATTENTION_PREFILL.value
            assert e.spill_bytes == stated[chip_id] and 0.01 <= e.spill_passes <= 100.0
    l40s = [et.op_from_entry(x) for x in ke.op_entries("l40s") if x["op_class"] == "attention_prefill"]
    assert l40s and all(e.spill_passes > 0.0 for e in l40s)


def test_a_long_prompt_on_an_l40s_reads_its_attention_past_the_l2() -> None:
    """Llama-3.1-8B on one L40S: the step's prefill attention moves its bytes plus
    ``spill_passes x (bytes - layers x L2)`` at the curve's bandwidth, recomputed here from the
    operator's own fields; a 512-token prompt (8 MB a layer) moves its bytes alone."""
    dep = rm.deployment("llama-3.1-8b", "l40s-8", chips=1)
    layers = dep.model.num_layers
    for batch, length, spills in ((4, 8192, True), (1, 512, False)):
        op = next(
            o
            for o in dep.prefill([batch], [length]).step.operators
            if o.op_class is OpClass.ATTENTION_PREFILL
        )
        moved = float(op.weight_bytes + op.activation_bytes + op.kv_read_bytes + op.kv_write_bytes)
        curve = dep.rates.curve(OpClass.ATTENTION_PREFILL, op.curve_key[0], "gqa", 128).efficiency
        assert curve.spill_bytes == chip("l40s").l2_cache_bytes
        extra = curve.spill_passes * max(0.0, moved - layers * curve.spill_bytes)
        assert (extra > 0.0) is spills
        assert float(op.memory_s) == pytest.approx(
            (moved + extra) / float(op.bandwidth_bytes_per_s), rel=1e-12
        )


@pytest.mark.skipif(
    kt.package_data_dir() is None, reason="aiconfigurator-core is not installed (the `kernels` extra)"
)
def test_l40s_prefill_calls_past_the_l2_run_slower_and_the_term_takes_it_out() -> None:
    """The data fact, on the installed L40S TensorRT-LLM context-attention table (bf16, head
    64): fitted without the term, the calls of 190 MB or more run at least 1.3x the curve
    (median) and those of 67 MB or less at most 0.97x; fitted with it, both within 7% of 1 and
    the median error falls (docs/calibration.md prints the figures). The rows are read cold here,
    as the term was first fitted: read as replayed (``tests/test_warm_tables.py``) the table's
    warm replays take part of the same step."""
    peaks = kf.ChipPeaks.of("l40s")
    every = kf.load_package_chip("l40s", kinds=("context_attention",)).ops[OpClass.ATTENTION_PREFILL]
    rows = every.take(next(m for d, k, h, m in fit_groups(every) if (d, k, h) == ("bfloat16", "gqa", 64)))
    rows = dataclasses.replace(rows, warm_bytes=None)
    call_bytes = rows.work.bytes / rows.work.calls
    small, large = call_bytes <= 67e6, call_bytes >= 190e6
    assert small.sum() > 1000 and large.sum() > 1000
    peak = peaks.peak_flops_per_s[kf.curve_precision("bfloat16", peaks)]
    errors = []
    for cache in (0.0, peaks.cache_bytes):
        e = kf.fit_op(rows, peak, peaks.hbm_bytes_per_s, cache)
        ratio = rows.latency_s / kf.predict(e, rows, peak, peaks.hbm_bytes_per_s)
        if cache == 0.0:
            assert e.spill_passes == 0.0
            assert np.median(ratio[large]) >= 1.3 and np.median(ratio[small]) <= 0.97
        else:
            assert e.spill_passes > 0.5
            assert abs(np.median(ratio[large]) - 1) <= 0.07 and abs(np.median(ratio[small]) - 1) <= 0.07
        errors.append(np.median(np.abs(1 / ratio - 1)))
    assert errors[1] < errors[0]
