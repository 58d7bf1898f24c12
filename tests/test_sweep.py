"""`rackmath sweep`: spec validation, the size bound, chunking, values recomputed point by
point through the analyses, CSV/parquet output, and the same chunks on a Dask cluster."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from rackmath.analyses.deploy import sweep as sw
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.errors import InputError, UnknownIdError

pd = pytest.importorskip("pandas")

EXAMPLE = Path(__file__).parents[1] / "examples" / "sweep-small.yaml"

SMALL = {
    "models": ["llama-3.1-70b", "deepseek-v3"],
    "systems": ["h100-hgx"],
    "plans": ["ideal", "tp=8", "dp=8,ep=8"],
    "precisions": ["native", "fp8"],
    "batch": [1, 32, 256],
    "context": [1024, 8192],
    "traffic_tokens_per_s": [1e5, 1e6],
}


@pytest.fixture(scope="module")
def local() -> sw.SweepResult:
    return sw.sweep(SMALL)


def test_point_count_and_skipped_combinations(local):
    spec = sw.parse_spec(SMALL)
    assert sw.count_points(spec) == 2 * 1 * 3 * 2 * 3 * 2 * 2 == 144
    # dp=8,ep=8 on the dense Llama cannot exist: 2 precisions skipped, 12 points each.
    assert len(local.skipped) == 2
    assert all(c.model == "llama-3.1-70b" and c.plan == "dp=8,ep=8" for c, _ in local.skipped)
    assert all("dense" in why for _, why in local.skipped)
    assert local.points == len(local.frame) == 144 - 2 * 12
    # a point that does not fit gets no fleet (no cost quoted for it); every other cell is a number
    fleet = ["replicas", "fleet_chips", "fleet_usd_per_day"]
    f = local.frame
    assert (~f.fits).sum() > 0 and f.fits.sum() > 0
    assert f.loc[~f.fits, fleet].isna().all().all()
    assert not f.loc[f.fits].isna().any().any()
    assert not f.drop(columns=fleet).isna().any().any()


def test_rows_match_the_analyses_point_by_point(local):
    f = local.frame
    model, sys_ = resolve_model("deepseek-v3"), system("h100-hgx")
    planned = plan_deployment(model, sys_, "dp=8,ep=8", weights="fp8", kv="fp8", compute="fp8")
    want = planned.decode([32], [8192])
    row = f[
        (f.model == "deepseek-v3")
        & (f.plan == "dp=8,ep=8")
        & (f.precision_family == "fp8")
        & (f.batch == 32)
        & (f.context_tokens == 8192)
        & (f.traffic_tokens_per_s == 1e6)
    ]
    assert len(row) == 1
    r = row.iloc[0]
    assert r.step_s == pytest.approx(float(want.step_s[0, 0]), rel=1e-12)
    assert r.chips == 8  # ep=8 spans the dp=8 chips: pp x dp x tp = 8
    # 671 GB of fp8 weights over 8 chips is 84 GB a chip, more than an H100's 77 GB usable:
    # the point is a row (marked) but gets no fleet and no fleet cost
    assert not r.fits and not bool(want.fits[0, 0])
    assert math.isnan(r.replicas) and math.isnan(r.fleet_usd_per_day)
    # fleet size recomputed by hand where it fits: ceil(traffic / (batch / step)), at least one
    row = f[
        (f.model == "llama-3.1-70b")
        & (f.plan == "tp=8")
        & (f.precision_family == "native")
        & (f.batch == 32)
        & (f.context_tokens == 8192)
        & (f.traffic_tokens_per_s == 1e6)
    ].iloc[0]
    assert row.fits
    assert row.replicas == max(1, math.ceil(1e6 / (32 / row.step_s))) > 1
    assert row.fleet_chips == row.replicas * 8

    ideal = make_deployment(resolve_model("llama-3.1-70b"), sys_).decode([256], [1024])
    row = f[(f.model == "llama-3.1-70b") & (f.plan == "ideal") & (f.precision_family == "native")]
    row = row[(row.batch == 256) & (row.context_tokens == 1024) & (row.traffic_tokens_per_s == 1e5)]
    assert row.iloc[0].usd_per_million_output_tokens == pytest.approx(
        float(ideal.usd_per_million_output_tokens[0, 0]), rel=1e-12
    )
    assert row.iloc[0].chips == sys_.default_chips


def test_chunking_does_not_change_the_table(local):
    spec = sw.parse_spec(SMALL)
    chunks = sw.make_chunks(spec, chunk_points=12)
    assert len(chunks) == 12  # one combination (12 points) per chunk
    assert sum(c.points for c in chunks) == sw.count_points(spec)
    pd.testing.assert_frame_equal(sw.run(chunks).frame, local.frame)


def test_size_bound_refuses_with_the_way_to_raise_it():
    with pytest.raises(InputError) as err:
        sw.sweep(SMALL, max_points=100)
    message = str(err.value)
    assert "144 points" in message and "--max-points 144" in message and "\n" not in message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"batch": [1, 0]}, "batch"),
        ({"context": []}, "context"),
        ({"traffic_tokens_per_s": [-5]}, "traffic_tokens_per_s"),
        ({"precisions": ["int3"]}, "precisions"),
        ({"plans": ["tp=two"]}, "plans"),
        ({"models": "llama-3.1-70b"}, "models"),
        ({"sytems": ["h100-hgx"]}, "sytems"),
    ],
)
def test_bad_spec_is_one_line_naming_the_field(change, field):
    spec = {**SMALL, **change}
    with pytest.raises(InputError) as err:
        sw.parse_spec(spec)
    assert err.value.field == f"sweep spec field {field}"
    assert "\n" not in str(err.value)


def test_missing_field_and_unknown_ids():
    spec = {k: v for k, v in SMALL.items() if k != "systems"}
    with pytest.raises(InputError, match="sweep spec field systems"):
        sw.parse_spec(spec)
    with pytest.raises(UnknownIdError, match=r"did you mean llama-3\.1-70b"):
        sw.make_chunks(sw.parse_spec({**SMALL, "models": ["lama-3.1-70b"]}))


def test_cli_writes_csv_and_parquet_that_read_back(cli, tmp_path, local):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(SMALL))
    for name in ("out.csv", "out.parquet"):
        code, out, err = cli("sweep", str(spec_file), "--out", str(tmp_path / name), "--json")
        assert code == 0, err
        summary = json.loads(out)
        assert summary["points"] == 120 and len(summary["skipped"]) == 2
    back = pd.read_parquet(tmp_path / "out.parquet")
    pd.testing.assert_frame_equal(back, local.frame, check_dtype=False)
    csv = pd.read_csv(tmp_path / "out.csv")
    assert np.allclose(csv.step_s, local.frame.step_s, rtol=1e-12)


def test_cli_refusals_are_one_line(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: [llama-3.1-70b]\nsystems: [h100-hgx]\nbatch: [0]\ncontext: [1024]\n")
    for args in (
        (str(bad), "--out", str(tmp_path / "x.csv")),
        (str(EXAMPLE), "--out", str(tmp_path / "x.txt")),
        (str(EXAMPLE), "--out", str(tmp_path / "x.csv"), "--max-points", "10"),
        (str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "x.csv")),
    ):
        code, _, err = cli("sweep", *args)
        assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, (args, err)
        assert "Traceback" not in err


def test_example_spec_runs(cli, tmp_path):
    code, out, err = cli("sweep", str(EXAMPLE), "--out", str(tmp_path / "small.csv"))
    assert code == 0, err
    assert "320 points" in out
    assert len(pd.read_csv(tmp_path / "small.csv")) == 320


def test_same_chunks_on_a_dask_local_cluster(cli, tmp_path, local):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp://",
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        spec = sw.parse_spec(SMALL)
        remote = sw.run(sw.make_chunks(spec, chunk_points=24), scheduler=address)
        assert remote.where == "dask" and remote.chunks == 6
        pd.testing.assert_frame_equal(remote.frame, local.frame)
        spec_file = tmp_path / "spec.yaml"
        spec_file.write_text(yaml.safe_dump(SMALL))
        out_file = str(tmp_path / "d.csv")
        code, out, err = cli("sweep", str(spec_file), "--out", out_file, "--scheduler", address)
        assert code == 0, err
        assert "(dask)" in out
        assert len(pd.read_csv(tmp_path / "d.csv")) == 120
