"""`rackmath measure` end to end on a tiny model, on the CPU (or a GPU when present).

No assertion compares two timings or bounds a timing from above (the suite runs on shared,
busy machines: under load batch 256 was once timed faster than batch 1). What is checked:
* every point of the quick sweep is timed once, for a positive time;
* rackmath's predicted step from the *measured* ceilings never falls with batch, is bound by
  the weights at batch 1, and has its knee inside the sweep (deterministic given ceilings);
* no largest-batch step beats that roofline by more than ``PREDICTION_FACTOR`` (6): load
  slows steps, so this direction holds on a busy machine;
* the model rackmath builds from the config has exactly torch's parameter count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from rackmath.analyses.reality import measure as ms
from rackmath.cli.main import main
from rackmath.core import architecture as arch
from rackmath.measure import torch_bench as tb

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    plot = tmp_path_factory.mktemp("measure") / "measure.png"
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["rackmath", "measure", "--quick", "--json", "--plot", str(plot)])
    import contextlib
    import io

    buf = io.StringIO()
    code = 0
    try:
        with contextlib.redirect_stdout(buf):
            main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        mp.undo()
    assert code == 0
    return json.loads(buf.getvalue()), plot


def test_ceilings_are_measured(measured: tuple[dict, Path]) -> None:
    data, plot = measured
    c = data["ceilings"]
    assert c["copy_bandwidth_bytes_per_s"] > 1e8 and c["matmul_flops_per_s"]["fp32"] > 1e8
    assert data["versions"]["transformers"] and plot.stat().st_size > 10_000


def test_every_point_is_timed_and_the_roofline_rises_past_the_knee(measured: tuple[dict, Path]) -> None:
    """Deterministic and physical, never a comparison of two timings (on a loaded machine
    batch 256 was once timed faster than batch 1): every (batch, context) of the quick sweep
    is timed once, for a positive time; rackmath's step, predicted from the measured
    ceilings, never falls as the batch grows and is bound by the weights at batch 1; at the
    shortest context its knee lies inside the sweep and the step past it is longer."""
    data, _ = measured
    cfg = tb.CI_CONFIG
    points = data["points"]
    assert sorted((p["batch"], p["context"]) for p in points) == sorted(
        (b, c) for b in cfg.batches for c in cfg.contexts
    )
    assert all(np.isfinite(p["measured_step_s"]) and p["measured_step_s"] > 0 for p in points)
    assert all(p["repeats"] == cfg.repeats for p in points)
    for ctx in cfg.contexts:
        pts = sorted((p for p in points if p["context"] == ctx), key=lambda p: p["batch"])
        predicted = [p["predicted_step_s"] for p in pts]
        assert predicted == sorted(predicted), (ctx, predicted)
        assert pts[0]["bottleneck"] == "weights"
    shortest = min(data["knee"], key=lambda k: k["context"])
    largest = max(cfg.batches)
    assert shortest["balance_batch"] is not None and 1 < shortest["balance_batch"] < largest
    at = {p["batch"]: p["predicted_step_s"] for p in points if p["context"] == shortest["context"]}
    assert at[largest] > at[min(cfg.batches)]


def test_largest_batch_steps_are_not_faster_than_the_roofline_allows(measured: tuple[dict, Path]) -> None:
    """A step cannot beat the roofline of the ceilings measured beside it by more than the
    stated factor; load only makes steps slower, so this direction holds on a busy machine
    (how close the prediction comes is the benchmarks' business, not a test's)."""
    data, _ = measured
    ratios = []
    for ctx in {p["context"] for p in data["points"]}:
        top = max((p for p in data["points"] if p["context"] == ctx), key=lambda p: p["batch"])
        ratios.append(top["ratio_measured_over_predicted"])
    assert all(r >= 1 / ms.PREDICTION_FACTOR for r in ratios), ratios


def test_rackmath_counts_the_parameters_torch_has() -> None:
    import transformers

    cfg = tb.CI_CONFIG.hf_config()
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"})
    )
    assert arch.param_counts(ms.model_spec(cfg)).total == sum(p.numel() for p in model.parameters())


def test_compare_on_synthetic_timings() -> None:
    """compare() without torch timings: a machine whose steps follow the roofline exactly
    plus 1 ms gets that 1 ms back as the overhead, and a measured knee near rackmath's."""
    ceilings = ms.Ceilings("synthetic", (("fp32", 1e11),), 1e10, 16e9, 1, 1024, 1e8)
    cfg = tb.CI_CONFIG.hf_config()
    probe = ms.MeasuredRun(
        ceilings, cfg, "fp32", tuple(ms.DecodePoint(b, 64, 1.0, 0.0, 1) for b in (1, 4, 16, 64, 256, 1024))
    )
    predicted = ms.compare(probe).predicted_step_s
    run = ms.MeasuredRun(
        ceilings,
        cfg,
        "fp32",
        tuple(
            ms.DecodePoint(p.batch, 64, t + 1e-3, 0.0, 1)
            for p, t in zip(probe.points, predicted, strict=True)
        ),
    )
    result = ms.compare(run)
    assert result.overhead_s == pytest.approx(1e-3, rel=1e-6)
    assert result.with_overhead_step_s == pytest.approx([p.step_s for p in run.points], rel=1e-9)
    assert result.measured_knee_batch[0] == pytest.approx(result.balance_batch[0], rel=0.5)
