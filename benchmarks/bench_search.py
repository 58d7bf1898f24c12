"""Benchmark the deployment search: candidates per second, and a full DeepSeek-V3 search
across six systems (the issue's targets: >= 10,000 candidates/s; < 2 s for the search).

Run: .venv/bin/python benchmarks/bench_search.py  (writes benchmarks/results/search.json)
"""

from __future__ import annotations

import json
from pathlib import Path

from rackmath.analyses.deploy import candidates
from rackmath.analyses.deploy import search as srch
from rackmath.analyses.deploy.candidates import DEFAULT_SYSTEMS, Workload
from rackmath.catalog.loader import resolve_model, system
from timing import machine, timed  # benchmarks/timing.py: the scripts run from this folder

REPEATS = 7
OUT = Path(__file__).parent / "results" / "search.json"


def main() -> None:
    model = resolve_model("deepseek-v3")
    systems = [system(s) for s in DEFAULT_SYSTEMS]
    work = Workload(traffic_tokens_per_s=1_000_000, input_len=1024, output_len=1024, ttft_s=2.0, tpot_s=0.05)

    one = system("gb200-nvl72")
    t_eval, cands = timed(lambda: candidates.evaluate(model, one, "native", work, max_chips=256), REPEATS)
    n_eval = cands.size  # type: ignore[attr-defined]

    t_search, result = timed(
        lambda: srch.search(model, systems, work, precisions=("native", "fp8", "fp4")), REPEATS
    )
    n_search = result.candidates_evaluated  # type: ignore[attr-defined]
    best = result.best  # type: ignore[attr-defined]

    report = {
        "machine": machine(),
        "repeats": REPEATS,
        "statistic": "median wall time after one burn-in run",
        "single_system": {
            "model": model.id,
            "system": one.id,
            "candidates": n_eval,
            "wall_s": t_eval,
            "candidates_per_s": n_eval / t_eval,
        },
        "six_system_search": {
            "model": model.id,
            "systems": list(DEFAULT_SYSTEMS),
            "precision_families": ["native", "fp8", "fp4"],
            "candidates": n_search,
            "wall_s": t_search,
            "candidates_per_s": n_search / t_search,
            "best": best.to_dict() if best else None,
        },
        "targets": {"candidates_per_s_min": 10_000, "six_system_search_wall_s_max": 2.0},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print("machine:", ", ".join(f"{k}={v}" for k, v in report["machine"].items()))  # type: ignore[union-attr]
    print(
        f"one system ({one.id}): {n_eval:,} candidates in {t_eval * 1e3:.1f} ms = {n_eval / t_eval:,.0f} /s"
    )
    print(
        f"DeepSeek-V3 across six systems, three precision families: {n_search:,} candidates in "
        f"{t_search * 1e3:.1f} ms = {n_search / t_search:,.0f} /s"
    )
    if best:
        print(
            f"best: {best.replicas} x {best.chips} {best.system} {best.plan_text} batch {best.batch}, "
            f"${best.fleet_usd_per_million_output_tokens:.4f} per million output tokens"
        )
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
