"""Instructions one plan point executes: a measure of the point's work that a shared machine's load
does not move (wall time on a shared 2-core host moves by 1.5x from run to run).

    .venv/bin/python benchmarks/count_instructions.py [SRC]     # needs valgrind; ~2 min

Runs `bench_core.py`'s plan point (DeepSeek-V3, ``dp=64,ep=64`` on a GB200 NVL72, one decode
point and its step time, price and fit) under valgrind's callgrind in two fresh processes, one
evaluating 300 points after a warm-up and one evaluating none, and prints the difference per
point: imports, catalog loading and the warm-up cancel. ``SRC`` (default: this checkout's
``src``) is the package tree to count, so two trees compare on one machine. Prints nothing
useful without valgrind (the suite does not run it). Writes ``benchmarks/results/instructions.json``
when it counts this checkout's ``src`` (the README's benchmark table shows it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from timing import machine  # benchmarks/timing.py, beside this script

POINTS = 300

#: One process's work: the warm-up, then ``argv[1]`` points.
CHILD = """
import sys
from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog.loader import resolve_model, system
dep = plan_deployment(resolve_model("deepseek-v3"), system("gb200-nvl72"), "dp=64,ep=64")
for _ in range(20 + int(sys.argv[1])):
    g = dep.decode([512], [4096])
    _ = (g.step_s, g.usd_per_million_output_tokens, g.fits)
"""


def instructions(src: Path, points: int) -> int:
    """Instructions callgrind counts for one child process evaluating ``points`` points."""
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.devnull}"]
    command = [*valgrind, sys.executable, "-c", CHILD]
    run = subprocess.run(
        [*command, str(points)],
        env=_env(src),
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def _env(src: Path) -> dict[str, str]:
    # one hash seed: string hashes (and so dict probes and set orders) the same in every run
    return {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def main() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this count needs it (apt install valgrind)")
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src"
    # one run outside valgrind first: a module changed since its last import is compiled there,
    # not inside the first counted child only (that added ~70k to the next count per point)
    subprocess.run([sys.executable, "-c", CHILD, "0"], env=_env(src), capture_output=True, check=True)
    per_point = (instructions(src, POINTS) - instructions(src, 0)) / POINTS
    print(f"one plan point: {per_point / 1e3:,.0f}k instructions ({src})")
    here = Path(__file__).resolve().parent
    if src.resolve() == here.parent / "src":  # this checkout: the README's figure
        result = {"plan_point_instructions": round(per_point), "points": POINTS, "machine": machine()}
        (here / "results" / "instructions.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
