"""``rackmath measure --kernels``: time kernels on this machine into the measured-table schema.

Times, with torch (CUDA when present, CPU otherwise), a GEMM sweep over m, n, k and dtypes,
decode attention by context length (``torch.nn.functional.scaled_dot_product_attention``, one
query token per sequence) and a device memory copy, and writes them as the tables
``rackmath calibrate kernels --from`` reads (same columns as aiconfigurator-core's
``gemm_perf`` / ``generation_attention_perf``; latency in ms; ``memcpy_perf`` has
``bytes, latency``). Each point is the median of ``repeats`` timed calls after a warm-up.
Bounded: the default sweep is 3 x 3 x 3 GEMM shapes per dtype, 3 batches x 4 contexts and 4 copies;
``quick`` is a smaller one for CI.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackmath.errors import InputError
from rackmath.progress import progress


@dataclass(frozen=True)
class KernelSweep:
    ms: tuple[int, ...]
    ns: tuple[int, ...]
    ks: tuple[int, ...]
    dtypes: tuple[str, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    heads: int
    kv_heads: int
    head_dim: int
    copy_bytes: tuple[int, ...]
    repeats: int


def default_sweep(quick: bool, cuda: bool) -> KernelSweep:
    if quick:
        return KernelSweep(
            (1, 16, 64),
            (64, 128),
            (64, 256),
            ("float32",),
            (1, 2, 4),
            (64, 256, 1024),
            4,
            2,
            32,
            (1 << 12, 1 << 16, 1 << 20, 1 << 22),
            3,
        )
    dtypes = ("bfloat16", "float16") if cuda else ("float32",)
    big = 4096 if cuda else 512
    return KernelSweep(
        (1, 64, big),
        (256, 1024, big),
        (256, 1024, big),
        dtypes,
        (1, 8, 32),
        (256, 1024, 4096, 16384 if cuda else 2048),
        32,
        8,
        128,
        (1 << 16, 1 << 20, 1 << 24, 1 << 28 if cuda else 1 << 25),
        5,
    )


def _timer(torch: Any, cuda: bool, fn: Any, repeats: int) -> float:
    """Median seconds of one call of ``fn`` (synchronised on CUDA)."""
    fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(quick: bool = False) -> dict[str, Any]:
    """Time the sweep; returns ``{table name: list of row dicts}`` plus ``device``."""
    try:
        import torch
    except ImportError as exc:
        raise InputError("torch", "not installed", "pip install rackmath[torch]") from exc
    cuda = bool(torch.cuda.is_available())
    dev = "cuda" if cuda else "cpu"
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    sw = default_sweep(quick, cuda)
    torch.manual_seed(0)
    gemm: list[dict[str, Any]] = []
    attn: list[dict[str, Any]] = []
    copy: list[dict[str, Any]] = []
    shapes = len(sw.ms) * len(sw.ns) * len(sw.ks) + len(sw.batches) * len(sw.contexts)
    with progress("Timing kernels", total=len(sw.dtypes) * shapes + len(sw.copy_bytes)) as advance:
        _sweep(torch, cuda, dev, device_name, sw, gemm, attn, copy, advance)
    return {"device": device_name, "gemm_perf": gemm, "generation_attention_perf": attn, "memcpy_perf": copy}


def _sweep(
    torch: Any,
    cuda: bool,
    dev: str,
    device_name: str,
    sw: Any,
    gemm: list[dict[str, Any]],
    attn: list[dict[str, Any]],
    copy: list[dict[str, Any]],
    advance: Any,
) -> None:
    """Time every shape of ``sw`` into the three row lists (one ``advance`` per shape)."""
    for dt in sw.dtypes:
        tdt = getattr(torch, dt)
        for m in sw.ms:
            for n in sw.ns:
                for k in sw.ks:
                    a = torch.randn(m, k, device=dev, dtype=tdt)
                    b = torch.randn(k, n, device=dev, dtype=tdt)
                    s = _timer(torch, cuda, lambda a=a, b=b: torch.matmul(a, b), sw.repeats)
                    gemm.append(
                        {"device": device_name, "gemm_dtype": dt, "m": m, "n": n, "k": k, "latency": s * 1e3}
                    )
                    advance(1)
        for bsz in sw.batches:
            for ctx in sw.contexts:
                q = torch.randn(bsz, sw.heads, 1, sw.head_dim, device=dev, dtype=tdt)
                kk = torch.randn(bsz, sw.heads, ctx, sw.head_dim, device=dev, dtype=tdt)
                v = torch.randn(bsz, sw.heads, ctx, sw.head_dim, device=dev, dtype=tdt)
                f = torch.nn.functional.scaled_dot_product_attention
                s = _timer(torch, cuda, lambda q=q, kk=kk, v=v, f=f: f(q, kk, v), sw.repeats)
                # SDPA here reads full K/V per head: kv heads = heads (no GQA sharing)
                attn.append(
                    {
                        "device": device_name,
                        "batch_size": bsz,
                        "isl": 1,
                        "num_heads": sw.heads,
                        "num_key_value_heads": sw.heads,
                        "head_dim": sw.head_dim,
                        "window_size": 0,
                        "attn_dtype": dt,
                        "kv_cache_dtype": dt,
                        "step": ctx - 1,
                        "latency": s * 1e3,
                    }
                )
                advance(1)
    for nbytes in sw.copy_bytes:
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        s = _timer(torch, cuda, lambda src=src, dst=dst: dst.copy_(src), sw.repeats)
        copy.append({"device": device_name, "bytes": nbytes, "latency": s * 1e3})
        advance(1)


def write(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write each table as CSV under ``out_dir``; returns the paths."""
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("gemm_perf", "generation_attention_perf", "memcpy_perf"):
        p = out_dir / f"{name}.csv"
        pd.DataFrame(result[name]).to_csv(p, index=False)
        paths.append(p)
    return paths
