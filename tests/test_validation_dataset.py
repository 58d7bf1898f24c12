"""The validation dataset: every row of shared/reference/measurements.csv is kept, with its
provenance, either as a scenario (units converted in the data, checked here against the CSV)
or listed unsupported with a reason. Coverage may grow, never shrink."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rackmath.catalog import loader as catalog
from rackmath.catalog.measurements import measurements
from rackmath.specs.scenario import Metric, Phase

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "measurements.csv"
#: Rows expressed when this test was written; fewer means coverage shrank.
MIN_EXPRESSED = 34


def _csv_rows() -> dict[int, dict[str, str]]:
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} is not beside the checkout")
    with REFERENCE.open() as fh:
        return {int(r["id"]): r for r in csv.DictReader(fh)}


def test_every_reference_row_is_kept_once_with_its_provenance() -> None:
    rows = _csv_rows()
    data = measurements()
    kept = [s.provenance for s in data.scenarios] + [u.provenance for u in data.unsupported]
    assert sorted(p.row_id for p in kept) == sorted(rows)
    problems = []
    for p in kept:
        ref = rows[p.row_id]
        for name in ("source", "url", "quote", "confidence", "notes"):
            if getattr(p, name) != ref[name]:
                problems.append(f"row {p.row_id}: {name} differs from the CSV")
    assert not problems, problems


def test_coverage_does_not_shrink_and_unsupported_rows_say_why() -> None:
    data = measurements()
    assert len(data.scenarios) >= MIN_EXPRESSED
    assert all(len(u.reason) > 20 for u in data.unsupported)
    assert data.total == len(data.scenarios) + len(data.unsupported)


def test_scenarios_name_catalog_entries_and_training_runs() -> None:
    from rackmath.catalog.training_runs import training_runs

    runs = {r.id: r for r in training_runs()}
    for s in measurements().scenarios:
        if s.phase is Phase.TRAINING:
            run = runs[s.training_run]
            assert run.measurement_id == s.row_id
            if (
                s.metric is not Metric.TRAINING_HFU_FLOPS_PER_S_PER_CHIP
                or run.metric.value == "hfu_flops_per_chip"
            ):
                assert run.value == pytest.approx(s.value)
        else:
            catalog.model(s.model_id)
            chip = catalog.system(s.system_id).chip
            assert s.compute is not None
            chip.peak_flops(s.compute)  # raises if the chip lacks the precision


# Conversions recomputed from the CSV: (row, factor applied to the published value, why)
CONVERSIONS = [
    (14, 2.0, "547 out tokens/s per GPU, TP2 -> the 2-GPU group"),
    (41, 4.0, "input tokens/s per 8-GPU node, 32 GPUs -> 4 nodes"),
    (16, 1e-3, "ms -> s"),
    (19, 1e-3, "ms -> s"),
    (28, 1e-3, "ITL ms -> s"),
    (60, 1e-3, "ms per token -> s"),
    (63, 1e-2, "percent -> fraction"),
    (71, 1e-2, "percent -> fraction"),
    (65, 1e12, "TFLOP/s -> FLOP/s"),
    (12, 1.0, "per GPU on 1 GPU"),
    (22, 1.0, "whole TP group"),
]


@pytest.mark.parametrize(("row_id", "factor", "why"), CONVERSIONS)
def test_units_are_converted_in_the_dataset(row_id: int, factor: float, why: str) -> None:
    published = float(_csv_rows()[row_id]["value"].replace(",", ""))
    scenario = {s.row_id: s for s in measurements().scenarios}[row_id]
    assert scenario.value == pytest.approx(published * factor, rel=1e-9), why


def test_two_batch_overlap_is_stated_only_where_the_source_says_so() -> None:
    # row 41's published parallelism: 'Prefill: EP32, DP attention, PD-disaggregated, two-batch overlap'
    rows = measurements().scenarios
    assert {s.row_id for s in rows if s.two_batch_overlap} == {41}
