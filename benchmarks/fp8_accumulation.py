"""Hopper FP8 GEMMs with and without fast accumulation, at training shapes (needs a CUDA GPU).

    python benchmarks/fp8_accumulation.py OUT.csv

On Hopper the FP8 tensor cores accumulate in reduced precision; a GEMM asked for full
precision (``use_fast_accum=False`` in ``torch._scaled_mm``, cuBLASLt's ``FAST_ACCUM`` off)
promotes its partial sums to FP32 every few k-steps, which costs time. Training recipes run
the forward GEMM with fast accumulation and the two backward GEMMs (dgrad, wgrad) without it
(docs/training.md says which, with their sources). This script times each m x n x k of a grid
in bf16 and in FP8 both ways, with per-tensor scales, on the timer of ``rackmath measure
--kernels`` (operands past the L2, CUDA-graph replay, CUDA events), and writes one row per
shape and mode: ``m, n, k, mode, latency`` (ms). Bounded: 4 x 5 x 5 shapes x 3 modes.
"""

from __future__ import annotations

import sys
from pathlib import Path

MS = (2048, 4096, 8192, 16384)
NS = (2048, 4096, 8192, 16384, 28672)
KS = (2048, 4096, 8192, 16384, 28672)
MODES = ("bfloat16", "fp8-fast-accum", "fp8-split-accum")


def main(out: Path) -> None:
    import pandas as pd
    import torch

    from rackmath.measure.kernels import KernelTimer

    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.manual_seed(0)
    timer = KernelTimer(torch, True, repeats=5)
    one = torch.ones((), device="cuda")
    rows = []
    for m in MS:
        for n in NS:
            for k in KS:
                a16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b16 = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
                a8 = a16.to(torch.float8_e4m3fn)
                b8 = b16.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt takes it
                calls = {
                    "bfloat16": lambda a=a16, b=b16: torch.matmul(a, b),
                    "fp8-fast-accum": lambda a=a8, b=b8: torch._scaled_mm(
                        a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
                    ),
                    "fp8-split-accum": lambda a=a8, b=b8: torch._scaled_mm(
                        a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=False
                    ),
                }
                for mode in MODES:
                    s, timing = timer.seconds([calls[mode]])
                    rows.append({"m": m, "n": n, "k": k, "mode": mode, "latency": s * 1e3, "timing": timing})
                del a16, b16, a8, b8, calls
    frame = pd.DataFrame(rows)
    frame.insert(0, "device", torch.cuda.get_device_name(0))
    frame.to_csv(out, index=False)
    wide = frame.pivot_table(index=["m", "n", "k"], columns="mode", values="latency")
    ratio = wide["fp8-split-accum"] / wide["fp8-fast-accum"]
    spread = f"p10 {ratio.quantile(0.1):.3f}, p90 {ratio.quantile(0.9):.3f}"
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}: split / fast accumulation, "
          f"median {ratio.median():.3f}, {spread}")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
