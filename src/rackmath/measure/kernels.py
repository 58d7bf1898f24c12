"""``rackmath measure --kernels``: time kernels on this machine into the measured-table schema.

Times, with torch (CUDA when present, CPU otherwise), four tables that
``rackmath calibrate kernels --from`` reads (the columns of aiconfigurator-core's tables;
latency in ms):

- ``gemm_perf``: ``torch.matmul`` over m x n x k, bf16, and per-tensor-scaled FP8
  (``torch._scaled_mm``, e4m3 inputs, bf16 output) on chips with FP8 tensor cores;
- ``generation_attention_perf``: decode attention, one query token per sequence, by batch and
  context (``scaled_dot_product_attention`` with grouped KV heads, 32 query / 8 KV heads of
  128, Llama-3-8B's shape);
- ``context_attention_perf``: causal prefill attention of the same heads by batch and length;
- ``memcpy_perf`` (``bytes, latency``): a device copy.

How a CUDA point is timed: the call runs back to back over enough copies of its operands to
exceed twice the L2 cache (each call streams its weights or KV from HBM, as a model's layers
do, not from a warm L2), enough passes to make a run of at least 1 ms, captured in one CUDA
graph (so the host's launch cost is not in the figure; eager launches where capture fails,
said in the ``timing`` column), timed by CUDA events; a point is the median of ``repeats``
runs divided by the calls in one. Attention runs on a fused SDPA kernel (flash, memory
efficient or cuDNN; never the unfused math path): with shared KV heads where the kernel takes
them (``kernel_source`` ``sdpa-gqa``), else with the KV expanded to every head (``sdpa-mha``,
its ``num_key_value_heads`` then equal to the heads). A shape a kernel refuses is left out.
On a CPU every call is timed alone by the wall clock (``quick`` is the small CI sweep).
Bounded: at most 8 x 3 x 3 GEMMs per format, 4 x 5 decode and 2 x 4 prefill shapes (decode
points whose KV exceeds 16 GiB are skipped) and 4 copies.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackmath.errors import InputError
from rackmath.progress import progress

#: The tables written, in order (``<name>.csv`` each).
TABLES = ("gemm_perf", "generation_attention_perf", "context_attention_perf", "memcpy_perf")

#: A CUDA point's operands are copied until they exceed this many times the L2 cache.
L2_FLUSH_FACTOR = 2
MAX_OPERAND_COPIES = 64
#: A CUDA point's timed run lasts at least this long (passes over the copies).
MIN_RUN_S = 1e-3
MAX_PASSES = 256


@dataclass(frozen=True)
class KernelSweep:
    ms: tuple[int, ...]
    ns: tuple[int, ...]
    ks: tuple[int, ...]
    gemm_formats: tuple[str, ...]  # "fp8": per-tensor-scaled e4m3; else a torch dtype name
    attention_dtype: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_batches: tuple[int, ...]
    prefill_lengths: tuple[int, ...]
    heads: int
    kv_heads: int
    head_dim: int
    max_kv_bytes: int
    copy_bytes: tuple[int, ...]
    repeats: int

    @property
    def shapes(self) -> int:
        gemms = len(self.ms) * len(self.ns) * len(self.ks) * len(self.gemm_formats)
        attention = len(self.batches) * len(self.contexts) + len(self.prefill_batches) * len(
            self.prefill_lengths
        )
        return gemms + attention + len(self.copy_bytes)


def default_sweep(quick: bool, cuda: bool, fp8: bool = False) -> KernelSweep:
    """The sweep for this machine: ``quick`` the CI one (float32, tiny), else the CUDA one
    (bf16 and, with ``fp8`` tensor cores, FP8) or a small float32 one on a CPU."""
    if quick:
        return KernelSweep(
            ms=(1, 16, 64),
            ns=(64, 128),
            ks=(64, 256),
            gemm_formats=("float32",),
            attention_dtype="float32",
            batches=(1, 2, 4),
            contexts=(64, 256, 1024),
            prefill_batches=(1,),
            prefill_lengths=(64, 128),
            heads=4,
            kv_heads=2,
            head_dim=32,
            max_kv_bytes=1 << 30,
            copy_bytes=(1 << 12, 1 << 16, 1 << 20, 1 << 22),
            repeats=3,
        )
    if not cuda:
        return KernelSweep(
            ms=(1, 64, 512),
            ns=(256, 512, 1024),
            ks=(256, 512, 1024),
            gemm_formats=("float32",),
            attention_dtype="float32",
            batches=(1, 8),
            contexts=(256, 1024, 2048),
            prefill_batches=(1,),
            prefill_lengths=(256, 1024),
            heads=32,
            kv_heads=8,
            head_dim=128,
            max_kv_bytes=1 << 30,
            copy_bytes=(1 << 16, 1 << 20, 1 << 24, 1 << 25),
            repeats=5,
        )
    return KernelSweep(
        ms=(1, 4, 16, 64, 256, 1024, 4096, 16384),
        ns=(1024, 4096, 8192),
        ks=(1024, 4096, 8192),
        gemm_formats=("bfloat16", "fp8") if fp8 else ("bfloat16",),
        attention_dtype="bfloat16",
        batches=(1, 8, 32, 128),
        contexts=(256, 1024, 4096, 16384, 65536),
        prefill_batches=(1, 4),
        prefill_lengths=(512, 2048, 8192, 16384),
        heads=32,
        kv_heads=8,
        head_dim=128,
        max_kv_bytes=16 << 30,
        copy_bytes=(1 << 16, 1 << 20, 1 << 24, 1 << 28),
        repeats=5,
    )


class KernelTimer:
    """Seconds of one call of a kernel (module docstring: how a point is timed)."""

    def __init__(self, torch: Any, cuda: bool, repeats: int) -> None:
        self.torch, self.cuda, self.repeats = torch, cuda, repeats
        props = torch.cuda.get_device_properties(0) if cuda else None
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)

    def copies(self, operand_bytes: float) -> int:
        """Operand copies a CUDA point cycles through (1 on a CPU)."""
        if not self.cuda or operand_bytes <= 0:
            return 1
        need = math.ceil(L2_FLUSH_FACTOR * self.l2_bytes / operand_bytes)
        return max(1, min(MAX_OPERAND_COPIES, need))

    def seconds(self, calls: Sequence[Callable[[], Any]]) -> tuple[float, str]:
        """Median seconds of one call and how it was timed (``cuda-graph``, ``eager`` or
        ``wall-clock``); ``calls`` holds the same kernel on each copy of its operands."""
        if not self.cuda:
            return self._wall(calls[0]), "wall-clock"
        torch = self.torch

        def once() -> None:
            for c in calls:
                c()

        once()
        torch.cuda.synchronize()
        one_pass = self._events(once)
        passes = max(1, min(MAX_PASSES, math.ceil(MIN_RUN_S / max(one_pass, 1e-9))))

        def run() -> None:
            for _ in range(passes):
                once()

        graph = self._graph(run)
        timing = "cuda-graph" if graph is not None else "eager"
        run_once = graph if graph is not None else run
        run_once()
        torch.cuda.synchronize()
        runs = [self._events(run_once) for _ in range(self.repeats)]
        return statistics.median(runs) / (passes * len(calls)), timing

    def _events(self, fn: Callable[[], Any]) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e-3

    def _graph(self, run: Callable[[], Any]) -> Callable[[], Any] | None:
        """``run`` captured in a CUDA graph (its replay), None where capture fails."""
        torch = self.torch
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()  # allocations and kernel choice settle outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            return graph.replay
        except RuntimeError:
            torch.cuda.synchronize()
            return None

    def _wall(self, fn: Callable[[], Any]) -> float:
        fn()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)


def run(quick: bool = False) -> dict[str, Any]:
    """Time the sweep; returns ``{table name: list of row dicts}`` plus ``device`` and ``meta``."""
    try:
        import torch
    except ImportError as exc:
        raise InputError("torch", "not installed", "pip install rackmath[torch]") from exc
    cuda = bool(torch.cuda.is_available())
    device_name = torch.cuda.get_device_name(0) if cuda else "cpu"
    fp8 = cuda and torch.cuda.get_device_capability(0) >= (8, 9) and hasattr(torch, "_scaled_mm")
    sw = default_sweep(quick, cuda, fp8)
    torch.manual_seed(0)
    timer = KernelTimer(torch, cuda, sw.repeats)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    with progress("Timing kernels", total=sw.shapes) as advance:
        sweep = _Sweep(torch, "cuda" if cuda else "cpu", device_name, sw, timer, advance)
        sweep.gemms(rows["gemm_perf"])
        sweep.attention(rows["generation_attention_perf"], rows["context_attention_perf"])
        sweep.copies(rows["memcpy_perf"])
    meta = {
        "device": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "capability": list(torch.cuda.get_device_capability(0)) if cuda else None,
        "l2_bytes": timer.l2_bytes,
        "quick": quick,
    }
    return {"device": device_name, "meta": meta, **rows}


def _element_bytes(torch: Any, fmt: str) -> int:
    return 1 if fmt == "fp8" else int(torch.tensor([], dtype=getattr(torch, fmt)).element_size())


class _Sweep:
    """Each table's shapes, timed into row dicts (one ``advance`` per shape, skipped or not)."""

    def __init__(
        self, torch: Any, dev: str, device_name: str, sw: KernelSweep, timer: KernelTimer, advance: Any
    ) -> None:
        self.torch, self.dev, self.device_name, self.sw, self.timer = torch, dev, device_name, sw, timer
        self.advance = advance

    def gemms(self, out: list[dict[str, Any]]) -> None:
        torch, sw = self.torch, self.sw
        for fmt in sw.gemm_formats:
            for m in sw.ms:
                for n in sw.ns:
                    for k in sw.ks:
                        copies = self.timer.copies((m + n) * k * _element_bytes(torch, fmt))
                        calls = [self._gemm(fmt, m, n, k) for _ in range(copies)]
                        try:
                            s, timing = self.timer.seconds(calls)
                        except RuntimeError:  # a shape the library refuses (FP8 alignment)
                            s = None
                        if s is not None:
                            out.append(
                                {"device": self.device_name, "gemm_dtype": fmt, "m": m, "n": n, "k": k,
                                 "latency": s * 1e3, "timing": timing}
                            )  # fmt: skip
                        self.advance(1)

    def _gemm(self, fmt: str, m: int, n: int, k: int) -> Callable[[], Any]:
        torch, dev = self.torch, self.dev
        if fmt == "fp8":
            e4m3 = torch.float8_e4m3fn
            a = torch.randn(m, k, device=dev).to(e4m3)
            b = torch.randn(n, k, device=dev).to(e4m3).t()  # column-major, as cuBLASLt takes it
            one = torch.ones((), device=dev)
            return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        dt = getattr(torch, fmt)
        a, b = torch.randn(m, k, device=dev, dtype=dt), torch.randn(k, n, device=dev, dtype=dt)
        return lambda: torch.matmul(a, b)

    def attention(self, decode: list[dict[str, Any]], prefill: list[dict[str, Any]]) -> None:
        sw = self.sw
        elt = _element_bytes(self.torch, sw.attention_dtype)
        for b in sw.batches:
            for ctx in sw.contexts:
                kv_bytes = 2 * b * sw.kv_heads * ctx * sw.head_dim * elt
                if kv_bytes <= sw.max_kv_bytes:
                    row = self._attention(b, 1, ctx, causal=False, copies=self.timer.copies(kv_bytes))
                    if row is not None:
                        decode.append({**row, "step": ctx - 1})
                self.advance(1)
        for b in sw.prefill_batches:
            for s in sw.prefill_lengths:
                qkv_bytes = b * s * (sw.heads + 2 * sw.kv_heads) * sw.head_dim * elt
                row = self._attention(b, s, s, causal=True, copies=self.timer.copies(qkv_bytes))
                if row is not None:
                    prefill.append(row)
                self.advance(1)

    def _attention(self, b: int, q_len: int, kv_len: int, causal: bool, copies: int) -> dict[str, Any] | None:
        """One attention shape on a fused SDPA kernel, grouped KV heads where it takes them."""
        torch, sw = self.torch, self.sw
        from torch.nn.attention import SDPBackend, sdpa_kernel

        fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
        dt = getattr(torch, sw.attention_dtype)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        for kv_heads, source in ((sw.kv_heads, "sdpa-gqa"), (sw.heads, "sdpa-mha")):
            calls = []
            for _ in range(copies):
                q = torch.randn(b, sw.heads, q_len, sw.head_dim, device=self.dev, dtype=dt)
                k = torch.randn(b, kv_heads, kv_len, sw.head_dim, device=self.dev, dtype=dt)
                v = torch.randn_like(k)

                def call(q: Any = q, k: Any = k, v: Any = v, gqa: bool = kv_heads != sw.heads) -> Any:
                    with sdpa_kernel(fused):
                        return sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)

                calls.append(call)
            try:
                s, timing = self.timer.seconds(calls)
            except RuntimeError:  # no fused kernel takes this head grouping: expand the KV
                continue
            return {
                "device": self.device_name, "batch_size": b, "isl": q_len, "num_heads": sw.heads,
                "num_key_value_heads": kv_heads, "head_dim": sw.head_dim, "window_size": 0,
                "attn_dtype": sw.attention_dtype, "kv_cache_dtype": sw.attention_dtype,
                "latency": s * 1e3, "kernel_source": source, "timing": timing,
            }  # fmt: skip
        return None

    def copies(self, out: list[dict[str, Any]]) -> None:
        torch = self.torch
        for nbytes in self.sw.copy_bytes:
            calls = []
            for _ in range(self.timer.copies(2 * nbytes)):
                src = torch.empty(nbytes, dtype=torch.uint8, device=self.dev)
                dst = torch.empty_like(src)
                calls.append(lambda src=src, dst=dst: dst.copy_(src))
            s, timing = self.timer.seconds(calls)
            out.append({"device": self.device_name, "bytes": nbytes, "latency": s * 1e3, "timing": timing})
            self.advance(1)


def write(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write each table as CSV under ``out_dir`` (and ``measured.json``: the device, torch and
    CUDA versions, the L2 size); returns the tables' paths."""
    import json

    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in TABLES:
        p = out_dir / f"{name}.csv"
        pd.DataFrame(result[name]).to_csv(p, index=False)
        paths.append(p)
    (out_dir / "measured.json").write_text(json.dumps(result["meta"], indent=1) + "\n", encoding="utf-8")
    return paths
