"""One schema per result: a flat record's ``to_dict()`` is its fields (``frames.Record``), and a
tabular result without a report of its own gives its declared columns (``frames.layout_dict``),
so the JSON, the frame and the dataclass never name a quantity differently."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import rackmath as rm
from rackmath.analyses.deploy.compare import Compared
from rackmath.analyses.deploy.disagg_search import Pool
from rackmath.analyses.deploy.slo import Attainment
from rackmath.analyses.deploy.systems_frontier import PublishedPoint
from rackmath.analyses.economics.fleet import LoadPoint, TrainCheck
from rackmath.analyses.economics.sparsity import SparsityRow
from rackmath.analyses.kernels.bands import Band
from rackmath.analyses.reality.report import GroupStats
from rackmath.analyses.reality.validation import FamilyParams
from rackmath.analyses.training.estimate import MfuConvention, RecomputeOption
from rackmath.frames import Record, Tabular

RECORDS = (
    Compared,
    Pool,
    Attainment,
    PublishedPoint,
    LoadPoint,
    TrainCheck,
    SparsityRow,
    FamilyParams,
    RecomputeOption,
    MfuConvention,
    Band,
    GroupStats,
)


@pytest.mark.parametrize("cls", RECORDS, ids=[c.__name__ for c in RECORDS])
def test_a_record_reports_its_fields_and_nothing_hand_written(cls: type) -> None:
    assert issubclass(cls, Record) and dataclasses.is_dataclass(cls)
    assert cls.to_dict is Record.to_dict, f"{cls.__name__} writes its own to_dict"
    for name in cls.derived_fields:
        assert isinstance(getattr(cls, name), property), name


def test_a_record_dict_holds_each_field_with_no_value_as_null() -> None:
    point = LoadPoint(0.5, 2.0, 100, 1.0, 0.1, float("nan"), 0.02, float("inf"), np.float64(3.5), 40.0)
    d = point.to_dict()
    assert list(d) == [f.name for f in dataclasses.fields(LoadPoint)]
    assert d["ttft_p99_s"] is None and d["tpot_p99_s"] is None
    assert d["mean_batch"] == 3.5 and type(d["mean_batch"]) is float
    json.dumps(d, allow_nan=False)


def test_a_record_names_an_enum_by_its_value() -> None:
    job = rm.train("llama-3.1-8b", "h100-hgx", "tp=8", tokens=1e12)
    options = [o.to_dict() for o in job.options]
    assert [o["mode"] for o in options] == [o.mode.value for o in job.options]
    assert all(isinstance(o["mode"], str) for o in options)
    json.dumps(options, allow_nan=False)


def test_a_records_derived_fields_are_computed_from_its_fields() -> None:
    row = rm.sparsity(levels=[1, 8]).rows[1]
    d = row.to_dict()
    assert list(d) == [*(f.name for f in dataclasses.fields(SparsityRow)), "memory_bytes", "users_needed"]
    assert d["memory_bytes"] == pytest.approx(row.weight_bytes + row.kv_bytes_at_balance, rel=1e-12)
    assert d["users_needed"] == row.balance_batch > 0


def test_a_grid_reports_its_declared_columns_over_batch_by_context() -> None:
    d = rm.deployment("llama-3.1-8b", "h100-hgx")
    grid = rm.decode(d, [1, 64], [1024, 8192])
    out = grid.to_dict()
    assert list(out) == [c.name for c in type(grid).frame_layout.columns]
    assert out["model"] == "llama-3.1-8b" and out["chips"] == d.chips
    assert out["batch"] == [[1, 1], [64, 64]] and out["context_tokens"] == [[1024, 8192], [1024, 8192]]
    step = np.asarray(out["step_s"])
    assert step.shape == (2, 2) and np.array_equal(step, grid.step_s)
    # the throughput columns are the batch over the step, cell by cell, and that over the chips
    tokens_per_s = np.asarray(out["tokens_per_s"])
    assert np.allclose(tokens_per_s, np.array([[1], [64]]) / step, rtol=1e-12)
    assert np.allclose(np.asarray(out["tokens_per_s_per_chip"]), tokens_per_s / d.chips, rtol=1e-12)
    json.dumps(out, allow_nan=False)


def test_a_tabular_result_with_no_report_of_its_own_writes_nan_as_null() -> None:
    d = rm.deployment("llama-3.1-8b", "h100-hgx")
    point = rm.balance(d, [1024, 1_000_000])
    out = point.to_dict()
    raw = np.asarray(point.balance_batch_with_kv, float)
    assert [v is None for v in out["balance_batch_with_kv"]] == [not math.isfinite(v) for v in raw]
    assert out["flop_per_byte"] == pytest.approx(d.peak_flops_per_s / d.bandwidth_bytes_per_s, rel=1e-12)
    assert type(point).to_dict is Tabular.to_dict
    json.dumps(out, allow_nan=False)
