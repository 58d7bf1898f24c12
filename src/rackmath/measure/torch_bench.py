"""Timings on this machine with torch: dense matmul, a large copy, real decode steps.

The decode model is a Hugging Face ``LlamaForCausalLM`` built from a config dict with random
weights (nothing is downloaded). Each step decodes one token per sequence against a
``StaticCache`` of ``context`` cached tokens (preallocated, written in place, so a repeat
times the same work; the cache's values are zeros, which costs the same as real ones).
Timing: ``warmup`` untimed calls, then ``repeats`` timed calls, each bracketed by a device
synchronisation on CUDA; the median is reported with the interquartile range. Decode steps are
timed in a forward and a reverse pass over the sweep, keeping each point's lower median.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rackmath.analyses.reality.measure import (
    MEMORY_SHARE,
    Ceilings,
    DecodePoint,
    MeasuredRun,
    decode_memory_bytes,
)
from rackmath.errors import InputError, RackmathError
from rackmath.progress import progress
from rackmath.specs import checks
from rackmath.specs.precision import FORMATS


class MeasureUnavailableError(RackmathError):
    """torch or transformers is not installed."""


def _imports() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MeasureUnavailableError(
            f"rackmath measure needs torch and transformers ({exc.name} is missing); "
            "install them with: pip install 'rackmath[measure]'"
        ) from None
    return torch, transformers


@dataclass(frozen=True)
class BenchConfig:
    """Model shape and sweep. ``dtype`` is a rackmath precision name (fp32, bf16, fp16)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    dtype: str = "fp32"
    repeats: int = 15
    warmup: int = 3
    matmul_size: int = 2048
    copy_bytes: int = 512 * 2**20

    def hf_config(self) -> dict[str, Any]:
        """The Hugging Face config dict (model_type llama) both torch and rackmath read."""
        return {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.hidden // self.heads,
            "vocab_size": self.vocab,
            "max_position_embeddings": max(self.contexts) + 1,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "hidden_act": "silu",
            "torch_dtype": _TORCH_DTYPES[self.dtype],
        }


#: CI: a 16M-parameter model (64 MB in fp32, past the CPU's last-level cache) over a few
#: batches and two contexts; about fifteen seconds on two cores.
CI_CONFIG = BenchConfig(
    hidden=512,
    layers=4,
    heads=8,
    kv_heads=4,
    intermediate=1408,
    vocab=4096,
    batches=(1, 4, 16, 64, 256),
    contexts=(64, 256),
    repeats=5,
    warmup=3,
    matmul_size=1024,
    copy_bytes=128 * 2**20,
)
#: The CPU default: about 100M parameters (0.4 GB in fp32), batch 1 to 256, two contexts.
CPU_CONFIG = BenchConfig(
    hidden=1024,
    layers=8,
    heads=16,
    kv_heads=4,
    intermediate=2816,
    vocab=8192,
    batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    contexts=(128, 1024),
    repeats=7,
    warmup=2,
)
#: A CUDA device: about 1B parameters in bf16, batch 1 to 512, three contexts.
CUDA_CONFIG = BenchConfig(
    hidden=2048,
    layers=16,
    heads=16,
    kv_heads=4,
    intermediate=5632,
    vocab=32000,
    batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    contexts=(256, 1024, 4096),
    dtype="bf16",
    repeats=20,
    warmup=5,
    matmul_size=8192,
    copy_bytes=2 * 2**30,
)

#: Precision -> torch dtype name, for the wide formats torch runs here: the kernel tables' names
#: in the one format table (``specs.precision.FORMATS``: ``bf16`` -> ``bfloat16``).
_TORCH_DTYPES = {FORMATS[n].weights.value: n for n in ("float32", "bfloat16", "float16")}


#: Timed repeats per point: the median needs a few; a thousand is minutes per point.
REPEATS_RANGE = (3, 1000)


def config(quick: bool = False, repeats: int | None = None) -> BenchConfig:
    """:func:`default_config` with ``repeats`` timed repeats per point (3 to 1,000) when given."""
    if repeats is not None:
        checks.whole("--repeats", repeats, minimum=REPEATS_RANGE[0], maximum=REPEATS_RANGE[1],
                     allowed="3 or more (the median needs a few), at most 1,000")  # fmt: skip
    cfg = default_config(quick)
    return cfg if repeats is None else replace(cfg, repeats=repeats)


def default_config(quick: bool = False) -> BenchConfig:
    torch, _ = _imports()
    if quick:
        return CI_CONFIG
    return CUDA_CONFIG if torch.cuda.is_available() else CPU_CONFIG


def _timer(torch: Any, device: str) -> Callable[[Callable[[], Any], int, int], tuple[float, float]]:
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def run(fn: Callable[[], Any], warmup: int, repeats: int) -> tuple[float, float]:
        for _ in range(warmup):
            fn()
        sync()
        times = []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
        return statistics.median(times), q[2] - q[0]

    return run


def _memory_bytes(torch: Any, device: str) -> float:
    if device == "cuda":
        return float(torch.cuda.get_device_properties(0).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def measure_ceilings(cfg: BenchConfig, precisions: tuple[str, ...] = ("fp32", "bf16")) -> Ceilings:
    """Dense ``n x n`` matmul FLOP/s (``2 n^3`` FLOPs) per precision, and copy bandwidth:
    ``2 * bytes / time`` (each byte read once and written once, STREAM's convention)."""
    torch, _ = _imports()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    timer = _timer(torch, device)
    n = cfg.matmul_size
    peaks = []
    for name in precisions:
        dt = getattr(torch, _TORCH_DTYPES[name])
        a = torch.randn(n, n, device=device, dtype=dt)
        b = torch.randn(n, n, device=device, dtype=dt)

        def matmul(a: Any = a, b: Any = b) -> Any:
            return a @ b

        t, _ = timer(matmul, 2, max(5, cfg.repeats // 2))
        peaks.append((name, 2.0 * n**3 / t))
    elements = cfg.copy_bytes // 4
    src = torch.ones(elements, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    t, _ = timer(lambda: dst.copy_(src), 2, max(5, cfg.repeats // 2))
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return Ceilings(
        device=name,
        matmul_flops_per_s=tuple(peaks),
        copy_bandwidth_bytes_per_s=2.0 * elements * 4 / t,
        memory_capacity_bytes=_memory_bytes(torch, device),
        threads=torch.get_num_threads(),
        matmul_size=n,
        copy_bytes=float(elements * 4),
    )


def measure_decode(cfg: BenchConfig) -> tuple[tuple[DecodePoint, ...], tuple[tuple[int, int], ...]]:
    """Median decode-step time for every (context, batch) of the sweep that fits this device's
    memory; returns the points and the (context, batch) pairs skipped (estimated above
    :data:`~rackmath.analyses.reality.measure.MEMORY_SHARE` of the memory,
    :func:`~rackmath.analyses.reality.measure.decode_memory_bytes`, or out of memory when run)."""
    torch, transformers = _imports()
    from transformers.cache_utils import StaticCache

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, _TORCH_DTYPES[cfg.dtype])
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.hf_config().items() if k != "torch_dtype"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    timer = _timer(torch, device)
    budget = MEMORY_SHARE * _memory_bytes(torch, device)
    every = [(context, batch) for context in cfg.contexts for batch in cfg.batches]
    grid = [key for key in every if decode_memory_bytes(cfg.hf_config(), cfg.dtype, *key) <= budget]
    skipped = [key for key in every if key not in grid]

    def time_one(context: int, batch: int, warmup: int) -> tuple[float, float]:
        cache = StaticCache(config=config, max_cache_len=context + 1)
        tokens = torch.randint(0, cfg.vocab, (batch, 1), device=device)
        position = torch.tensor([context], device=device)
        mask = torch.ones(batch, context + 1, dtype=torch.long, device=device)

        def step() -> Any:
            return model(
                input_ids=tokens,
                past_key_values=cache,
                use_cache=True,
                cache_position=position,
                attention_mask=mask,
            )

        return timer(step, warmup, cfg.repeats)  # the cache is freed when this returns

    # Two passes, forward then reverse, and the lower median of the two for each point: a
    # cold start (thread pools, allocator, kernel selection) or a burst of load from another
    # process then lands on one pass of a point, not on both, and cannot bend the curve.
    def timed(key: tuple[int, int], warmup: int) -> tuple[float, float] | None:
        try:
            return time_one(*key, warmup)
        except torch.OutOfMemoryError:  # the estimate was short: skip the point, free the cache
            if device == "cuda":
                torch.cuda.empty_cache()
            return None

    with torch.inference_mode(), progress("Timing decode steps (two passes)", total=2 * len(grid)) as advance:
        forward, backward = {}, {}
        for key in grid:
            forward[key] = timed(key, cfg.warmup)
            advance(1)
        for key in reversed(grid):
            backward[key] = timed(key, 1) if forward[key] is not None else None
            advance(1)
    skipped += [key for key in grid if forward[key] is None or backward[key] is None]
    points = []
    for key in (k for k in grid if k not in skipped):
        a, b = forward[key], backward[key]
        assert a is not None and b is not None  # both passes ran: not skipped
        (median_a, spread_a), (median_b, spread_b) = a, b
        median, spread = (median_a, spread_a) if median_a <= median_b else (median_b, spread_b)
        points.append(DecodePoint(key[1], key[0], median, spread, cfg.repeats))
    return tuple(points), tuple(sorted(skipped))


def run(cfg: BenchConfig) -> MeasuredRun:
    torch, transformers = _imports()
    if cfg.dtype not in _TORCH_DTYPES:
        raise InputError("dtype", cfg.dtype, ", ".join(_TORCH_DTYPES))
    if torch.cuda.is_available() and cfg.dtype == "fp32":
        precisions: tuple[str, ...] = ("fp32", "bf16")
    else:
        precisions = ("fp32", "bf16") if cfg.dtype in ("fp32", "bf16") else ("fp32", cfg.dtype)
    if cfg.dtype not in precisions:
        precisions = (*precisions, cfg.dtype)
    # Decode first: on CPUs with AMX, steps timed right after the bf16 matmul ran ~30x
    # slower for a few seconds (seen on this project's machine), so the ceilings come last.
    points, skipped = measure_decode(cfg)
    ceilings = measure_ceilings(cfg, precisions)
    return MeasuredRun(
        ceilings=ceilings,
        config=cfg.hf_config(),
        dtype=cfg.dtype,
        points=points,
        versions=(("torch", torch.__version__), ("transformers", transformers.__version__)),
        skipped=skipped,
    )
