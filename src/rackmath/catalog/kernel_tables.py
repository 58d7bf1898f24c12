"""Measured kernel latency tables: where they are, what columns they need, and reading them.

The ground truth for the per-operator efficiency fit is the set of kernel latency tables that
NVIDIA ships in the PyPI package ``aiconfigurator-core`` (Apache-2.0), under
``aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/<table>.parquet``.
Only facts are taken from it (the measured latencies, with their source); nothing of its code.

Units in those tables (checked against physics, see docs/calibration.md):

* ``latency`` is milliseconds of GPU time for one kernel call (no CPU launch cost);
* GEMM ``m, n, k``: output rows, output columns, reduction depth;
* MoE ``num_tokens`` counts tokens over the whole expert-parallel group (per-GPU tokens give
  5.7 PFLOP/s on an H200, 5.7x its peak; group tokens give 0.71 PFLOP/s);
* NCCL / custom all-reduce ``message_size`` counts elements, not bytes (as elements of
  2 bytes an 8-GPU H200 all-reduce of 256 Mi elements reaches 460 GB/s bus bandwidth, the
  NVLink 4 figure; as bytes it would be half that);
* DeepEP ``*_avg_t_us`` (low-latency) and ``*_transmit_us`` (normal) are microseconds.

Any parquet or CSV with the same columns (``rackmath measure --kernels`` writes them) reads
the same way. A table with a missing column, an unknown dtype, or a zero / negative / non-finite
latency is refused with one line naming the file, the column and the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rackmath.errors import RackmathError
from rackmath.specs.precision import ALIASES, FORMATS

PACKAGE = "aiconfigurator-core"
#: The column ``rackmath measure --kernels`` writes (how a point was timed: ``cuda-graph``,
#: ``eager`` or ``wall-clock``; measure/kernels.py spells it itself, since it runs on bare GPU
#: images without the catalog). Such a table cycled its operands through copies larger than
#: the L2, so its calls were timed cold; a table without it (the package's collector) replayed
#: each call warm (:func:`rackmath.analyses.kernels.fit.table_bytes`).
MEASURED_TIMING_COLUMN = "timing"
PACKAGE_VERSION = "0.12.0"  # the version the shipped catalog was fitted on

# Package directory -> catalog chip id (src/rackmath/catalog/data/chips.yaml).
CHIP_DIRS: dict[str, str] = {
    "a100_sxm": "a100-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}

#: Chips whose DSA prefill kernel runs every query over all ``top_k`` slots of its index list,
#: the selected tokens and the padding alike, gathering each slot's latent from the cache for
#: that query (no short-sequence fast path): the measured ``dsa_context_module`` tables say so.
#: On the H100 (TensorRT-LLM 1.3.0rc20, DeepSeek-V3.2, 16 heads, bf16) 1,024 prompt tokens as 1 x
#: 1,024, 2 x 512, 4 x 256 and 8 x 128 take 1.64, 1.63, 1.64 and 1.63 ms: the time follows the
#: tokens, not the context they attend (the H200 likewise); on the B200 the same four take
#: 0.29, 0.25, 0.23 and 0.21 ms, falling with the context as a causal selection does.
#: :func:`rackmath.core.attention.top_k_gather` is the work such a kernel does.
DSA_PREFILL_GATHERS_TOP_K = frozenset({"h100-sxm", "h200"})

#: Chips on which TensorRT-LLM decodes MLA with its SM120 XQA kernel where the KV cache is
#: :data:`XQA_MLA_FORMAT` and a rank holds :data:`XQA_MLA_HEADS` query heads (one query token
#: each), and with a generic kernel at every other shape (``kSM120_MLA``, NVIDIA/TensorRT-LLM
#: cpp/kernels/xqa/mla_sm120.cu: math in the cache's FP8; FlashInfer's wrapper of the same
#: kernel refuses other head counts and formats). The RTX PRO 6000's table (1.3.0rc20, 16
#: sequences at 131,072 tokens) takes 9.0-9.3 ms at 1-64 heads and 2.2 ms at 128 with an FP8
#: cache, 11.9-12.0 ms at every head count with a bf16 one. The fit gives that kernel a curve of
#: its own, dispatched at that shape only (``OpEfficiency.only_cols``).
SM120_XQA_MLA = frozenset({"rtx-pro-6000"})
XQA_MLA_FORMAT = "fp8"
XQA_MLA_HEADS = 128.0
XQA_MLA_KERNEL = "xqa_mla_sm120"

#: Chips whose tables were measured on a PCIe host (8 GPUs a host, no NVLink:
#: aiconfigurator-core 0.12.0 ``systems/l40s.yaml`` and ``systems/rtx_pro_6000_server.yaml``).
#: There a rank's bandwidth falls with the group (a pair under one switch, a larger group's ring
#: through the CPU's host bridge and the socket link), which NCCL's curves fit as their group
#: power (:class:`rackmath.specs.efficiency.CollectiveEfficiency`). On the NVSwitch hosts of the
#: other chips a free power fits to 0 (docs/calibration.md).
PCIE_HOSTS = frozenset({"l40s", "rtx-pro-6000"})

#: Tables committed with the catalog for chips the package does not cover, one folder per
#: catalog chip id (``catalog/data/kernel_tables/<chip>/*.csv``, each folder's README gives the
#: source of every row). ``calibrate kernels`` fits them beside the package's tables
#: (:func:`committed_chips`, :func:`committed_tables`).
COMMITTED_DIR = Path(__file__).parent / "data" / "kernel_tables"

_DSA_MODULE = (
    "model",
    "mla_dtype",
    "kv_cache_dtype",
    "gemm_type",
    "num_heads",
    "batch_size",
    "isl",
    "step",
    "latency",
)
# Table kind -> required columns (beyond these, columns are ignored).
REQUIRED: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm_dtype", "m", "n", "k", "latency"),
    "moe": (
        "moe_dtype",
        "num_tokens",
        "hidden_size",
        "inter_size",
        "topk",
        "num_experts",
        "moe_tp_size",
        "moe_ep_size",
        "distribution",
        "latency",
    ),
    "generation_attention": (
        "batch_size",
        "isl",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "window_size",
        "attn_dtype",
        "kv_cache_dtype",
        "step",
        "latency",
    ),
    "context_attention": (
        "batch_size",
        "isl",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "window_size",
        "attn_dtype",
        "kv_cache_dtype",
        "latency",
    ),
    "generation_mla": ("mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step", "latency"),
    "context_mla": ("mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step", "latency"),
    # a whole DSA attention module (projections, indexer, top-k, sparse MLA, output) per row
    "dsa_generation_module": _DSA_MODULE,
    "dsa_context_module": _DSA_MODULE,
    "nccl": ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"),
    "custom_allreduce": ("kernel_source", "allreduce_dtype", "num_gpus", "message_size", "latency"),
    "deepep_ll": (
        "node_num",
        "hidden_size",
        "num_token",
        "num_topk",
        "num_experts",
        "combine_avg_t_us",
        "dispatch_avg_t_us",
    ),
    "deepep_normal": (
        "node_num",
        "hidden_size",
        "num_token",
        "num_topk",
        "num_experts",
        "dispatch_sms",
        "dispatch_transmit_us",
        "combine_transmit_us",
    ),
    "memcpy": ("bytes", "latency"),  # written by `rackmath measure --kernels`
}
LATENCY_COLUMNS: dict[str, tuple[str, ...]] = {
    "deepep_ll": ("combine_avg_t_us", "dispatch_avg_t_us"),
    "deepep_normal": ("combine_transmit_us", "dispatch_transmit_us"),
}
DTYPE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm_dtype",),
    "moe": ("moe_dtype",),
    "generation_attention": ("attn_dtype", "kv_cache_dtype"),
    "context_attention": ("attn_dtype", "kv_cache_dtype"),
    "generation_mla": ("mla_dtype", "kv_cache_dtype"),
    "context_mla": ("mla_dtype", "kv_cache_dtype"),
    "dsa_generation_module": ("mla_dtype", "kv_cache_dtype", "gemm_type"),
    "dsa_context_module": ("mla_dtype", "kv_cache_dtype", "gemm_type"),
    "nccl": ("nccl_dtype",),
    "custom_allreduce": ("allreduce_dtype",),
}
#: Every dtype name a table may use: the one format table's names and their aliases
#: (:data:`rackmath.specs.precision.FORMATS`, ``ALIASES``; bytes per element come from there).
DTYPE_NAMES: tuple[str, ...] = (*FORMATS, *ALIASES)

# The primary table per chip and kind: (op dir, framework, version, file stem).
# TensorRT-LLM 1.3.0rc20 is the one framework version every Hopper/Blackwell chip has for GEMM,
# MoE, attention and its custom all-reduce; A100 only has 1.0.0. NCCL and DeepEP (SGLang): the
# newest version per chip, as the table's own ``version`` column says (:func:`primary`).
_PRIMARY_TRTLLM = "1.3.0rc20"


class KernelTableError(RackmathError):
    """A kernel table that cannot be used (one line: file, column, row, what is wrong)."""

    def __init__(self, path: str, column: str, row: int | None, problem: str) -> None:
        where = f"row {row}" if row is not None else "header"
        super().__init__(f"{path}: column {column!r}, {where}: {problem}")


@dataclass(frozen=True)
class TableRef:
    """One measured table: chip, kind, framework, version and where it lies."""

    chip_id: str
    kind: str
    framework: str
    version: str
    path: Path

    @property
    def source(self) -> str:
        rel = self.path.as_posix()
        cut = rel.find("aiconfigurator_core/")
        return f"{PACKAGE}=={PACKAGE_VERSION} {rel[cut:] if cut >= 0 else self.path.name}"


def package_data_dir() -> Path | None:
    """The installed package's ``systems/data`` folder, or None when it is not installed."""
    try:
        import aiconfigurator_core
    except ImportError:
        return None
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    return root if root.is_dir() else None


def _kind_of_stem(stem: str) -> str | None:
    return {
        "gemm_perf": "gemm",
        "moe_perf": "moe",
        "generation_attention_perf": "generation_attention",
        "context_attention_perf": "context_attention",
        "generation_mla_perf": "generation_mla",
        "context_mla_perf": "context_mla",
        "dsa_generation_module_perf": "dsa_generation_module",
        "dsa_context_module_perf": "dsa_context_module",
        "nccl_perf": "nccl",
        "custom_allreduce_perf": "custom_allreduce",
        "wideep_deepep_ll_perf": "deepep_ll",
        "wideep_deepep_normal_perf": "deepep_normal",
    }.get(stem)


def discover(root: Path | None = None) -> list[TableRef]:
    """Every usable table of a catalog chip in the package, sorted (deterministic)."""
    root = root or package_data_dir()
    if root is None:
        return []
    refs: list[TableRef] = []
    for gpu_dir, chip_id in CHIP_DIRS.items():
        for path in sorted((root / gpu_dir).glob("*/*/*/*.parquet")):
            kind = _kind_of_stem(path.stem)
            if kind is None:
                continue
            framework, version = path.parent.parent.name, path.parent.name
            refs.append(TableRef(chip_id, kind, framework, version, path))
    return refs


def committed_chips(root: Path | None = None) -> list[str]:
    """Catalog chips with committed tables (a folder under :data:`COMMITTED_DIR` holding CSVs)."""
    root = root or COMMITTED_DIR
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and any(d.glob("*.csv")))


#: The order a chip's committed tables are read in: NCCL before a custom all-reduce (its rows
#: say where the custom kernel ran, as in the package), then by name (deterministic).
_COMMITTED_ORDER = {"nccl_perf": 0, "custom_allreduce_perf": 1}


def committed_tables(chip_id: str, root: Path | None = None) -> list[Path]:
    """The committed CSV tables of ``chip_id``, in the order the fit reads them."""
    folder = (root or COMMITTED_DIR) / chip_id
    return sorted(folder.glob("*.csv"), key=lambda p: (_COMMITTED_ORDER.get(p.stem, 2), p.name))


def committed_source(path: Path) -> str:
    """How a committed table is named in the catalog (``rackmath catalog/data/kernel_tables/
    mi300x/gemm_perf.csv``); the folder's README says where its rows come from."""
    return f"rackmath catalog/data/kernel_tables/{path.parent.name}/{path.name} (see its README)"


def version_key(v: str) -> tuple[Any, ...]:
    parts = []
    for token in v.replace("rc", ".").replace("post", ".").split("."):
        parts.append(int(token) if token.isdigit() else 0)
    return tuple(parts)


def content_version(ref: TableRef) -> str:
    """The version a table's rows say they were measured with (its ``version`` column, the
    most frequent value), else its directory's. They differ in places: ``h100_sxm/comm/nccl/
    2.27.3`` and ``gb200/comm/nccl/2.23`` hold NCCL 2.29.2 rows (several shapes 2-5 times),
    ``comm/sglang/0.5.6.post2`` DeepEP tables hold SGLang 0.5.0's."""
    import pandas as pd

    try:
        v = pd.read_parquet(ref.path, columns=["version"])["version"].astype(str)
    except (KeyError, ValueError, OSError, ImportError):
        return ref.version
    return str(v.mode().iloc[0]) if len(v) else ref.version


def primary(refs: list[TableRef], chip_id: str, kind: str) -> TableRef | None:
    """The table the catalog fit uses for a chip and kind.

    GEMM / MoE / attention / custom all-reduce: TensorRT-LLM 1.3.0rc20 where present (else the
    newest TensorRT-LLM); NCCL: the NCCL folder with the newest measured version; DeepEP
    (low-latency and normal): SGLang's newest. "Newest" reads the version the rows carry
    (:func:`content_version`); among folders holding the same version, the one whose name says
    so (a real version, not a copy), then the newest folder name (deterministic).
    """
    cands = [r for r in refs if r.chip_id == chip_id and r.kind == kind]
    if kind in ("nccl", "deepep_ll", "deepep_normal"):
        framework = "nccl" if kind == "nccl" else "sglang"
        cands = [r for r in cands if r.framework == framework]
        if not cands:
            return None

        def newest(r: TableRef) -> tuple[Any, ...]:
            measured = content_version(r)
            return (version_key(measured), measured == r.version, version_key(r.version))

        return max(cands, key=newest)
    cands = [r for r in cands if r.framework == "trtllm"]
    exact = [r for r in cands if r.version == _PRIMARY_TRTLLM]
    if exact:
        return exact[0]
    if not cands:
        return None
    return max(cands, key=lambda r: version_key(r.version))


def detect_kind(columns: list[str]) -> str | None:
    """The table kind whose required columns are all present (most specific first)."""
    cols = set(columns)
    for kind in ("deepep_ll", "deepep_normal", "moe", "gemm", "nccl", "custom_allreduce", "memcpy"):
        if set(REQUIRED[kind]) <= cols:
            return kind
    if set(REQUIRED["dsa_generation_module"]) <= cols and "op_name" in cols:
        return "dsa"  # a DSA module table, generation or context by op_name
    if set(REQUIRED["generation_mla"]) <= cols:
        return "mla"  # generation or context, resolved per row by op_name
    if set(REQUIRED["context_attention"]) <= cols:
        if "op_name" in cols:
            return "attention"  # resolved per row by op_name
        return "generation_attention" if "step" in cols else "context_attention"
    return None


def read_table(path: Path, kind: str | None = None) -> Any:
    """Read and check one table (parquet or CSV); returns a pandas DataFrame.

    Raises :class:`KernelTableError` naming file, column and row for a missing column, an
    unknown dtype, or a latency that is not a finite positive number.
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise KernelTableError(str(path), "-", None, "no such file")
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # a corrupt or non-table file: one line, no traceback
        raise KernelTableError(str(path), "-", None, f"cannot be read as a table ({exc})") from exc
    kind = kind or detect_kind(list(df.columns))
    if kind is None:
        # Name the first missing column of the closest kind.
        best = min(REQUIRED, key=lambda k: len(set(REQUIRED[k]) - set(df.columns)))
        missing = [c for c in REQUIRED[best] if c not in df.columns]
        raise KernelTableError(str(path), missing[0], None, f"missing (a {best} table needs {missing})")
    check_kind = {
        "attention": "context_attention",
        "mla": "generation_mla",
        "dsa": "dsa_generation_module",
    }.get(kind, kind)
    for col in REQUIRED[check_kind]:
        if col not in df.columns:
            raise KernelTableError(str(path), col, None, f"missing (a {check_kind} table needs it)")
    for col in LATENCY_COLUMNS.get(check_kind, ("latency",)):
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise KernelTableError(
                str(path), col, i, f"latency {df[col].iloc[i]!r} is not a positive finite number"
            )
    for col in DTYPE_COLUMNS.get(check_kind, ()):
        values = df[col].astype(str).to_numpy()
        unknown = ~np.isin(values, list(DTYPE_NAMES))
        if unknown.any():
            i = int(np.argmax(unknown))
            raise KernelTableError(
                str(path), col, i, f"unknown dtype {values[i]!r}; known: {', '.join(sorted(DTYPE_NAMES))}"
            )
    df.attrs["kind"] = kind
    return df
