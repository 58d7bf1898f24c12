"""Benchmark the request-level simulation: 10^5 requests through one replica (issue 13's target:
<= 10 s), at a light and a heavy load, and one max-rate search under p99 SLOs (the attainment
curve and its halvings, each probe a steady-state run).

Run: .venv/bin/python benchmarks/bench_simulate.py  (writes benchmarks/results/simulate.json)
"""

from __future__ import annotations

import json
from pathlib import Path

from rackmath.analyses.deploy import rate_search, slo
from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
from rackmath.catalog.runtimes import runtime
from rackmath.core import requests as rq
from rackmath.core import roofline as rl
from rackmath.specs.workload import LengthDist
from timing import machine, timed  # benchmarks/timing.py: the scripts run from this folder

REPEATS = 3
REQUESTS = 100_000
OUT = Path(__file__).parent / "results" / "simulate.json"


def main() -> None:
    model, sys_ = resolve_model("llama-3.1-70b"), system("h100-hgx")
    dep = plan_deployment(model, sys_, "tp=8", efficiency=rl.PURE_ROOFLINE)
    i, o = LengthDist.parse("lognormal:2000", "--input"), LengthDist.parse("500", "--output")
    t_table, rep = timed(
        lambda: sim.replica(
            dep, runtime("vllm"), max_context=i.max_tokens + o.max_tokens, mean_context=i.mean + o.mean
        ),
        REPEATS,
    )
    capacity = sim.capacity_rate_per_s(rep, i.mean, o.mean)
    loads = {}
    for name, rate in (("light_5_per_s", 5.0), ("heavy_0.8_capacity", 0.8 * capacity)):
        reqs = rq.poisson_requests(rate, REQUESTS, i, o, seed=0)
        wall, res = timed(lambda reqs=reqs, rate=rate: sim.run(rep, reqs, rate), REPEATS)
        loads[name] = {
            "rate_per_s": rate,
            "wall_s": wall,
            "requests_per_s_simulated": REQUESTS / wall,
            "steps": res.steps,
            "mean_decode_batch": res.mean_decode_batch,
            "ttft_p99_s": res.metrics["ttft_p99"],
            "tpot_p99_s": res.metrics["tpot_p99"],
        }
    limits = slo.Slo.parse("ttft_p99=2s,tpot_p99=50ms")
    fleet = slo.Fleet(model, sys_, "tp=8", efficiency="pure")
    work = slo.Workload(1.0, REQUESTS, i, o, 0)
    t_search, found = timed(lambda: rate_search.search(fleet, work, limits), 1)
    payload = {
        "model": model.id,
        "system": sys_.id,
        "plan": "tp=8",
        "runtime": "vllm",
        "requests": REQUESTS,
        "input": str(i),
        "output": str(o),
        "table_s": t_table,
        "loads": loads,
        "max_rate_search": {
            "slo_s": limits.to_dict()["limits_s"],
            "wall_s": t_search,
            "probes": len(found.points),
            "measured_requests_per_probe": [p.attainment.requests for p in found.points],
            "max_rate_per_s": found.max_rate_per_s,
        },
        "machine": machine(),
    }
    OUT.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
