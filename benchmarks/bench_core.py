"""Benchmark the roofline core and `rackmath explain`.

    .venv/bin/python benchmarks/bench_core.py          # prints a table, writes benchmarks/results/core.json

Measures (a) decode-step evaluations per second over a 1,000 x 1,000 batch-by-context grid,
through the same `analyses.serving.decode` users call (step time, cost, MFU and fit for every
point), on one core; (b) the wall time of one `rackmath explain` as a user runs it (a fresh
process, so imports and catalog loading count).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the aim states

import rackmath as rm
from rackmath.analyses import serving

RESULTS = Path(__file__).parent / "results"


def grid_points_per_s(model: str, system: str, repeats: int = 5) -> float:
    dep = rm.deployment(model, system)
    batches = np.arange(1, 1001, dtype=float)
    contexts = np.linspace(128, 131072, 1000)
    serving.decode(dep, batches, contexts)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        g = serving.decode(dep, batches, contexts)
        # force every output a user reads
        _ = (g.step_s, g.usd_per_million_output_tokens, g.mfu, g.fits, g.times.bottleneck)
        best = min(best, time.perf_counter() - start)
    return batches.size * contexts.size / best


def explain_wall_s(repeats: int = 5) -> float:
    exe = Path(sys.executable).with_name("rackmath")
    cmd = [str(exe), "explain", "deepseek-v3", "--on", "gb200-nvl72", "--json"]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    results = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "decode_points_per_s": {
            "llama-3.1-70b on h100-hgx": grid_points_per_s("llama-3.1-70b", "h100-hgx"),
            "deepseek-v3 on gb200-nvl72": grid_points_per_s("deepseek-v3", "gb200-nvl72"),
            "gemma-3-27b on tpu-v5p-pod": grid_points_per_s("gemma-3-27b", "tpu-v5p-pod"),
        },
        "explain_wall_s_median": explain_wall_s(),
    }
    for name, rate in results["decode_points_per_s"].items():
        print(f"decode grid 1000x1000, {name}: {rate / 1e6:.2f} M points/s")
    wall = results["explain_wall_s_median"]
    print(f"rackmath explain deepseek-v3 --on gb200-nvl72 (fresh process): {wall:.2f} s")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "core.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
