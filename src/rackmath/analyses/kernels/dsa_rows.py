"""DeepSeek sparse attention (DSA) module tables as operator rows (``dsa_generation_module``,
``dsa_context_module``).

What a row times is the whole attention module of one layer (TensorRT-LLM's
``DeepseekV32Attention.forward`` with dummy weights, aiconfigurator's collector
``collect_mla_module.py``): the fused ``q_a``/``kv_a`` projection, the latent norms, ``q_b``, the
indexer (its projections, FP8 key cache, MQA logits, top-k), the absorption BMMs, the sparse
MLA core over the selected latents and ``o_proj``. The step describes that module as three
operators, and every row here is those three, built from the catalog's DeepSeek-V3.2 with the
table's ``num_heads`` local heads on one layer through the step's own description
(:func:`rackmath.core.opm.operator_model`, :func:`rackmath.core.loads.decode_load` /
:func:`~rackmath.core.loads.prefill_load`, :mod:`rackmath.core.work`):

* ``attention_qkv`` and ``attention_out``: GEMMs of ``b`` tokens (decode) or ``b x isl`` (a
  prompt) in the row's ``gemm_type``, the format the step runs those weights in
  (:meth:`rackmath.core.chip_rates.ChipRates.gemm`). They are the row's companions
  (:class:`~rackmath.analyses.kernels.op_rows.Companion`): the fit times them on the chip's
  own fitted GEMM curves;
* ``attention`` (family ``dsa``, format the KV cache's): the indexer's scoring of the held
  FP8 keys once more than ``top_k`` are held, the top-k, and the absorbed sparse MLA over
  ``min(context, top_k)`` latents (:mod:`rackmath.core.attention`). Its curve is what the
  module's time leaves after the projections, with a floor that stands for the module's other
  kernels (norms, RoPE, quantization, cache writes, the BMMs, top-k).

Why one operator for the indexer's scoring and the sparse core: the tables time them only
together, in one module, so only their sum is measured; the indexer's projections are GEMMs
and run on the GEMM curves with the other projections (inside ``attention_qkv``).

Attended context = ``isl + step`` (``step`` the cached tokens, as the collector logs them; the
new token is appended and attended too). The tables also time GLM-5 (``zai-org/GLM-5``), whose
shape the catalog does not hold: those rows are left out.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

from rackmath.analyses.kernels.op_rows import Companion, OpRows, floats, op_rows_of, shape_hash
from rackmath.core import loads
from rackmath.core import operator_model as opm
from rackmath.core import work as wk
from rackmath.core.chip_rates import ChipRates
from rackmath.specs.efficiency import OpClass
from rackmath.specs.model import ModelSpec
from rackmath.specs.precision import Precision, kernel_format

#: The tables' model -> the catalog model whose description the rows take.
DSA_TABLE_MODELS = {"deepseek-ai/DeepSeek-V3.2": "deepseek-v3.2"}
#: The kernel family of DSA's attention curves (:data:`rackmath.core.opm.ATTENTION_FAMILY`).
DSA_KIND = "dsa"
#: One call's shape in a DSA module table (the shape hash of the hold-out split).
DSA_SHAPE = ["model", "mla_dtype", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size", "isl", "step"]


@lru_cache(maxsize=32)
def one_layer(model_id: str, heads: int) -> ModelSpec:
    """The catalog model ``model_id`` cut to one layer with ``heads`` query heads (the table's
    local heads: the collector sets ``num_attention_heads`` and runs TP 1, so the replicated
    projections stay whole and the head-split ones shrink)."""
    from rackmath.catalog.loader import model

    m = model(model_id)
    a = replace(m.attention, num_heads=heads, num_kv_heads=heads)
    return replace(m, attention=a, layers=m.layers[-1:])


def _rates(gemm_type: str, kv_dtype: str) -> ChipRates:
    """The compute and KV precision a row ran (they pick the step's kernel formats)."""
    weights, kv = kernel_format(gemm_type), kernel_format(kv_dtype)
    return ChipRates({}, 1.0, compute=weights.compute, kv=kv.weights)


def dsa_rows(df: Any, cls: OpClass, gathers_top_k: bool = False) -> OpRows:
    """The rows of a DSA module table (decode: ``dsa_generation_module``; prefill:
    ``dsa_context_module``) as the ``attention`` operator of family ``dsa`` with its two
    projection GEMMs as companions (module docstring). Rows of models the catalog lacks are
    dropped. ``gathers_top_k``: the chip's prefill kernel runs every query over all top-k
    slots (:data:`rackmath.catalog.kernel_tables.DSA_PREFILL_GATHERS_TOP_K`), as the step
    describes it on that chip."""
    df = df[df["model"].astype(str).isin(list(DSA_TABLE_MODELS))]
    n = len(df)
    b, isl, step = (floats(df, c) for c in ("batch_size", "isl", "step"))
    decode = cls is OpClass.ATTENTION_DECODE
    works = [[np.zeros(n) for _ in wk.Work._fields] for _ in range(3)]  # attention, qkv, out
    gemm_formats = np.empty(n, dtype=object)
    kv_formats = np.empty(n, dtype=object)
    keys = df[["model", "num_heads", "gemm_type", "kv_cache_dtype"]].astype(str).agg("|".join, axis=1)
    keys = keys.to_numpy() if n else np.zeros(0, dtype=str)
    for key in sorted(set(keys.tolist())):
        at = keys == key
        model_name, heads, gemm_type, kv_dtype = key.split("|")
        m = one_layer(DSA_TABLE_MODELS[model_name], int(float(heads)))
        rates = _rates(gemm_type, kv_dtype)
        weights = kernel_format(gemm_type).weights
        *group, formats = _module_works(
            m, weights, rates, b[at], isl[at], step[at], kv_dtype, decode, gathers_top_k
        )
        for into, work in zip(works, group, strict=True):
            for i, value in enumerate(work):
                if value is not None:
                    into[i][at] = value
        for row in np.flatnonzero(at):  # a tuple per row (an object array cannot broadcast one)
            gemm_formats[row] = formats
        kv_formats[at] = rates.attention_formats[0]
    attention = _work(works[0], sequence_heads=not decode)
    qkv, out = _work(works[1]), _work(works[2])
    companions = (
        Companion("attention_qkv", OpClass.GEMM, gemm_formats, qkv),
        Companion("attention_out", OpClass.GEMM, gemm_formats, out),
    )
    dims = {"context": isl + step, "batch": b} if decode else {"isl": isl}
    dt = kv_formats.astype(str)
    return op_rows_of(cls, dt, DSA_KIND, attention, df, shape_hash(df, DSA_SHAPE), dims, companions)


def _work(fields: list[np.ndarray], sequence_heads: bool = False) -> wk.Work:
    """A work from its fields over the rows: the optional MoE and input fields stay None, and
    the prefill attention's ``sequence_heads`` is kept where asked."""
    named: dict[str, np.ndarray | None] = dict(zip(wk.Work._fields, fields, strict=True))
    for optional in ("routed", "tokens", "ep", "input_values"):
        named[optional] = None
    if not sequence_heads:
        named["sequence_heads"] = None
    return wk.Work(**named)  # type: ignore[arg-type]


def _module_works(
    m: ModelSpec,
    weights: Precision,
    rates: ChipRates,
    batch: np.ndarray,
    isl: np.ndarray,
    step: np.ndarray,
    kv_dtype: str,
    decode: bool,
    gathers_top_k: bool = False,
) -> tuple[wk.Work, wk.Work, wk.Work, tuple[str, ...]]:
    """The attention, QKV and output works of one layer (``m`` has one) for ``batch``
    sequences, as :func:`rackmath.core.operators.pass_operators` builds them on one chip (TP,
    PP, DP 1), and the GEMMs' kernel formats."""
    om = opm.operator_model(m, weights)
    formats, act_bytes = rates.gemm(om.weight_precision["attention_qkv"])
    kv_bytes = kernel_format(kv_dtype).weights.bytes_per_element
    h = float(om.hidden)
    qkv_w, out_w = om.qkv_out_widths
    if decode:
        load = loads.decode_load(m, batch, isl + step, kv_bytes)
        tokens = batch
        qk, v = om.decode_dims
        attention = wk.decode_attention(
            batch,
            om.heads,
            float(om.kv_heads),
            qk,
            v,
            load.decode_context,
            flops=batch * load.decode_attention_flops,
            kv_read_bytes=batch * load.decode_kv_read_bytes,
            kv_write_bytes=batch * load.decode_kv_write_bytes,
        )
    else:
        load = loads.prefill_load(m, batch, isl + step, kv_bytes, cached=step)
        tokens = batch * load.prefill_length
        qk, v, kv_heads = om.prefill_dims
        att_format = rates.attention_formats[0]
        flops, kv_read = batch * load.prefill_attention_flops, batch * load.prefill_kv_read_bytes
        if gathers_top_k:  # one layer (``m`` has one), the table's heads on the chip
            extra, gathered = opm.top_k_gather_work(om, load.prefill_length, om.heads, kv_bytes)
            flops, kv_read = flops + batch * extra, kv_read + batch * gathered
        attention = wk.prefill_attention(
            tokens,
            om.heads,
            kv_heads,
            qk,
            v,
            load.prefill_length,
            flops=flops,
            kv_read_bytes=kv_read,
            kv_write_bytes=batch * load.prefill_kv_write_bytes,
            input_bytes=kernel_format(att_format).activation_bytes,
            shared_heads=om.prefill_absorbed,
        )
    qkv = wk.gemm(
        tokens,
        om.params["attention_qkv"],
        qkv_w,
        h,
        weight_bytes_per_param=om.bytes_per_param["attention_qkv"],
        activation_bytes=act_bytes,
        in_values=h,
        out_values=qkv_w,
    )
    out = wk.gemm(
        tokens,
        om.params["attention_out"],
        h,
        out_w,
        weight_bytes_per_param=om.bytes_per_param["attention_out"],
        activation_bytes=act_bytes,
        in_values=out_w,
        out_values=h,
    )
    return attention, qkv, out, formats
