"""Benchmark `rackmath sweep`: points per second per worker, in this process and on a
one-worker Dask LocalCluster (a separate worker process on loopback, so the figure includes
pickling the chunks and the frames back).

Run: .venv/bin/python benchmarks/bench_sweep.py  (writes benchmarks/results/sweep.json)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas

from rackmath.analyses.deploy import sweep as sw
from timing import machine, timed  # benchmarks/timing.py: the scripts run from this folder

REPEATS = 5
OUT = Path(__file__).parent / "results" / "sweep.json"

#: 3 models x 3 systems x 2 plans x 2 precisions x 64 batches x 32 contexts x 2 traffics.
SPEC = {
    "models": ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"],
    "systems": ["h100-hgx", "b200-hgx", "gb200-nvl72"],
    "plans": ["ideal", "tp=8"],
    "precisions": ["native", "fp8"],
    "batch": [float(b) for b in np.unique(np.geomspace(1, 4096, 64).round())],
    "context": [float(c) for c in np.geomspace(512, 131072, 32).round()],
    "traffic_tokens_per_s": [1e5, 1e6],
}


def main() -> None:
    from distributed import LocalCluster

    spec = sw.parse_spec(SPEC)
    chunks = sw.make_chunks(spec)
    t_local, local = timed(lambda: sw.run(chunks), REPEATS)
    n = local.points  # type: ignore[attr-defined]

    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        t_dask, remote = timed(lambda: sw.run(chunks, scheduler=address), REPEATS)
    assert remote.frame.equals(local.frame)  # type: ignore[attr-defined]

    report = {
        "machine": machine(pandas=pandas.__version__),
        "repeats": REPEATS,
        "statistic": "median wall time after one burn-in run",
        "spec": SPEC | {"batch": f"{len(spec.batch)} values", "context": f"{len(spec.context)} values"},
        "product_points": sw.count_points(spec),
        "evaluated_points": n,
        "skipped_combinations": len(local.skipped),  # type: ignore[attr-defined]
        "chunks": len(chunks),
        "local": {"workers": 1, "wall_s": t_local, "points_per_s_per_worker": n / t_local},
        "dask_local_cluster": {
            "workers": 1,
            "processes": True,
            "wall_s": t_dask,
            "points_per_s_per_worker": n / t_dask,
            "note": "the Client connects once per run (included); cluster start-up is not",
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print("machine:", ", ".join(f"{k}={v}" for k, v in report["machine"].items()))  # type: ignore[union-attr]
    print(f"{n:,} points ({len(chunks)} chunks)")
    print(f"local: {t_local:.3f} s = {n / t_local:,.0f} points/s per worker")
    print(f"dask, 1-worker LocalCluster: {t_dask:.3f} s = {n / t_dask:,.0f} points/s per worker")
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
