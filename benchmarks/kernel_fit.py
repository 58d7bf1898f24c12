"""Benchmark the kernel-efficiency fit on the measured tables.

    .venv/bin/python benchmarks/kernel_fit.py   # prints, writes benchmarks/results/kernel_fit.json

Measures (a) the wall time of `rackmath calibrate kernels`' fit for every chip with tables
(reading the parquet tables included), the aim being under 60 s on 2 cores; (b) the wall time
of the kernel-level validation (20% shape split and held-out values for every chip, held-out
chips and versions; its report is docs/data/kernel_validation.json, written by
benchmarks/kernel_validation_report.py);
(c) the catalog growth: the size in bytes of the fitted kernel_efficiency.yaml.
Needs the `kernels` extra (aiconfigurator-core).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from rackmath.analyses.kernels import calibrate, validation
from rackmath.catalog import kernel_efficiency, kernel_tables

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    if kernel_tables.package_data_dir() is None:
        raise SystemExit("needs aiconfigurator-core (pip install -e '.[kernels]')")
    start = time.perf_counter()
    doc = calibrate.calibrate_kernels()
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    report = validation.validate_kernels()
    validate_s = time.perf_counter() - start
    fitted_rows = sum(o["rows_used"] for c in doc["chips"].values() for o in c["ops"])
    results = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "chips_fitted": len(doc["chips"]),
        "operator_fits": sum(len(c["ops"]) for c in doc["chips"].values()),
        "table_rows": fitted_rows,
        "fit_all_chips_s": fit_s,
        "validate_kernels_s": validate_s,
        "catalog_bytes": kernel_efficiency.DATA_PATH.stat().st_size,
        "catalog_bytes_if_rewritten": len(calibrate.catalog_text(doc).encode()),
        "by_op": report["kernels"]["by_op"],
    }
    print(
        f"fit {results['chips_fitted']} chips, {results['operator_fits']} operator fits over "
        f"{fitted_rows} rows: {fit_s:.1f} s; validation {validate_s:.1f} s; "
        f"catalog {results['catalog_bytes']} bytes"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kernel_fit.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
