"""A training step's backward GEMMs in their own layouts, against the forward's (needs a CUDA GPU).

    python benchmarks/gemm_backward.py OUT_DIR

The training step times a GEMM's dgrad and wgrad on the forward's curve at their own
dimensions (``core/training_kernels.py``). This script measures whether the layouts those
GEMMs run in cost anything beyond that, and what a k-grouped expert wgrad costs against the
m-grouped forward, with PyTorch's bf16 kernels (cuBLAS; ``torch._grouped_mm``'s CUTLASS
grouped GEMM), on the timer of ``rackmath measure --kernels``:

* ``dense_layouts.csv``: for ``Y = X W^T`` (``X`` m x k tokens, ``W`` n x k, both row-major as
  a framework holds them) the forward ``X W^T``, the dgrad ``dY W`` (an m x k x n GEMM) and the
  wgrad ``dY^T X`` (n x k x m), each beside the same dimensions in the forward's layout
  (``A B^T``, both K-major): ``m, n, k, gemm, layout, M, N, K, latency`` (ms).
* ``grouped.csv``: ``G`` experts of ``T`` tokens each through an ``h x I`` projection, the
  forward m-grouped (each expert's tokens times its weight) and the wgrad k-grouped (each
  expert's gradient reduced over its own tokens): ``groups, tokens, h, i, kind, latency``.

Bounded: 3 x 6 dense shapes x 5 GEMMs and 2 x 3 x 3 grouped shapes x 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

TOKENS = (4096, 8192, 16384)
DENSE_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192), (8192, 28672))
GROUPS = (8, 32)
GROUP_TOKENS = (512, 2048, 8192)
GROUP_HI = ((2048, 768), (4096, 1536), (7168, 2048))


def dense(torch: Any, timer: Any) -> list[dict[str, Any]]:
    rows = []
    bf16 = torch.bfloat16

    def canonical(mm: int, nn: int, kk: int) -> float:
        a = torch.randn(mm, kk, device="cuda", dtype=bf16)
        b = torch.randn(nn, kk, device="cuda", dtype=bf16)
        return float(timer.seconds([lambda: torch.matmul(a, b.t())])[0])

    for m in TOKENS:
        for n, k in DENSE_NK:
            x = torch.randn(m, k, device="cuda", dtype=bf16)
            w = torch.randn(n, k, device="cuda", dtype=bf16)
            dy = torch.randn(m, n, device="cuda", dtype=bf16)
            native = {
                "forward": ((m, n, k), lambda x=x, w=w: torch.matmul(x, w.t())),
                "dgrad": ((m, k, n), lambda dy=dy, w=w: torch.matmul(dy, w)),
                "wgrad": ((n, k, m), lambda dy=dy, x=x: torch.matmul(dy.t(), x)),
            }
            for gemm, ((mm, nn, kk), call) in native.items():
                s = float(timer.seconds([call])[0])
                rows.append({"m": m, "n": n, "k": k, "gemm": gemm, "layout": "native", "M": mm, "N": nn,
                             "K": kk, "latency": s * 1e3})  # fmt: skip
                if gemm != "forward":
                    rows.append({"m": m, "n": n, "k": k, "gemm": gemm, "layout": "canonical", "M": mm,
                                 "N": nn, "K": kk, "latency": canonical(mm, nn, kk) * 1e3})  # fmt: skip
            del x, w, dy
    return rows


def grouped(torch: Any, timer: Any) -> list[dict[str, Any]]:
    rows = []
    bf16 = torch.bfloat16
    for g in GROUPS:
        for t in GROUP_TOKENS:
            for h, i in GROUP_HI:
                offs = torch.arange(t, g * t + 1, t, device="cuda", dtype=torch.int32)
                x = torch.randn(g * t, h, device="cuda", dtype=bf16)
                w = torch.randn(g, i, h, device="cuda", dtype=bf16).transpose(-2, -1)  # (g, h, i), K-major
                dy_t = torch.randn(i, g * t, device="cuda", dtype=bf16)  # dY^T, row-major
                x_t = torch.randn(h, g * t, device="cuda", dtype=bf16).t()  # X, K-major
                calls = {
                    "m-grouped": lambda x=x, w=w, offs=offs: torch._grouped_mm(x, w, offs=offs),
                    "k-grouped": lambda a=dy_t, b=x_t, offs=offs: torch._grouped_mm(a, b, offs=offs),
                }
                for kind, call in calls.items():
                    try:
                        s = float(timer.seconds([call])[0])
                    except RuntimeError as exc:  # a layout or chip the kernel refuses
                        print(f"grouped {kind} g={g} t={t} h={h} i={i}: {exc}".splitlines()[0])
                        continue
                    rows.append({"groups": g, "tokens": t, "h": h, "i": i, "kind": kind, "latency": s * 1e3})
                del x, w, dy_t, x_t
    return rows


def main(out: Path) -> None:
    import pandas as pd
    import torch

    from rackmath.measure.kernels import KernelTimer

    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.manual_seed(0)
    timer = KernelTimer(torch, True, repeats=5)
    out.mkdir(parents=True, exist_ok=True)
    d = pd.DataFrame(dense(torch, timer))
    d.to_csv(out / "dense_layouts.csv", index=False)
    wide = d.pivot_table(index=["m", "n", "k", "gemm"], columns="layout", values="latency").dropna()
    ratio = (wide["native"] / wide["canonical"]).groupby(level="gemm")
    for gemm, r in ratio:
        print(f"{gemm}: native / canonical layout, median {r.median():.3f}, "
              f"p10 {r.quantile(0.1):.3f}, p90 {r.quantile(0.9):.3f}")  # fmt: skip
    gr = pd.DataFrame(grouped(torch, timer))
    gr.to_csv(out / "grouped.csv", index=False)
    if len(gr):
        gw = gr.pivot_table(index=["groups", "tokens", "h", "i"], columns="kind", values="latency").dropna()
        if len(gw):
            r = gw["m-grouped"] / gw["k-grouped"]
            print(f"k-grouped wgrad throughput over m-grouped forward: median {r.median():.3f}, "
                  f"p10 {r.quantile(0.1):.3f}, p90 {r.quantile(0.9):.3f} ({len(gw)} shapes)")  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
