"""One description of each operator's work: the kernel fit and the step charge the same FLOPs
and bytes (issue "Kernel grounding that cannot drift", item 1).

Two checks. (1) Every row the fit keeps, walked through the physics written out here from the
table's own columns, carries the FLOPs and bytes the fit used. (2) A real model's step,
built by ``pass_operators``, describes the operator the table timed with the same work: the
GEMM, grouped-GEMM, GQA and MLA decode calls of Llama-3.1-70B and DeepSeek-V3 at a shape
the tables hold.
"""

from __future__ import annotations

import numpy as np
import pytest

from rackmath.analyses.kernels import attention_rows
from rackmath.analyses.kernels import rows as kr
from rackmath.analyses.kernels.op_rows import OpRows
from rackmath.catalog import kernel_tables as kt
from rackmath.catalog.loader import model as load_model
from rackmath.core import loads
from rackmath.core import operators as ops
from rackmath.core import sharding as shard
from rackmath.core.chip_rates import ChipRates
from rackmath.specs.efficiency import OpClass
from rackmath.specs.precision import Precision, kernel_format

pytestmark = pytest.mark.skipif(kt.package_data_dir() is None, reason="needs the kernels extra")

CHIPS = ("gb200", "h100-sxm")
KINDS = ("gemm", "moe", "generation_attention", "context_attention", "generation_mla", "context_mla")


def _rows(chip: str, kind: str) -> tuple[object, dict[OpClass, OpRows]]:
    ref = kt.primary(kt.discover(), chip, kind)
    assert ref is not None, (chip, kind)
    df = kt.read_table(ref.path, kind)
    return df, kr.table_rows(df, hbm_bytes_per_s=0.0, physical=False)


def _bytes(dtypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fmts = [kernel_format(str(d)) for d in dtypes]
    return np.array([f.weight_bytes for f in fmts]), np.array([f.activation_bytes for f in fmts])


@pytest.mark.parametrize("chip", CHIPS)
def test_every_gemm_row_carries_2mnk_and_its_operands(chip: str) -> None:
    df, rows = _rows(chip, "gemm")
    r = rows[OpClass.GEMM]
    m, n, k = (df[c].to_numpy(float) for c in ("m", "n", "k"))
    w, a = _bytes(df["gemm_dtype"].astype(str).to_numpy())
    np.testing.assert_allclose(r.flops, 2 * m * n * k, rtol=1e-12)
    np.testing.assert_allclose(r.bytes, n * k * w + m * k * a + 2 * m * n, rtol=1e-12)
    # the format table's scales reach the rows: NVFP4 weights 4.5 bits, fp8-block activations 8.25
    assert kernel_format("nvfp4").weight_bytes == 0.5625
    assert kernel_format("fp8_block").activation_bytes == 1.03125


@pytest.mark.parametrize("chip", CHIPS)
def test_every_kept_moe_row_carries_its_pairs_and_the_experts_it_hits(chip: str) -> None:
    df, _ = _rows(chip, "moe")
    kept = kr._fastest_kernel(df[df["distribution"].astype(str) == "balanced"])
    r = kr._moe_rows(kept)
    tok, h, inter, topk, e, tp, ep = (
        kept[c].to_numpy(float)
        for c in (
            "num_tokens",
            "hidden_size",
            "inter_size",
            "topk",
            "num_experts",
            "moe_tp_size",
            "moe_ep_size",
        )
    )
    mats = np.where(kept["kernel_source"].astype(str).str.contains("nongated").to_numpy(), 2.0, 3.0)
    pairs = tok * topk * kr._pairs_factor(kept, ep, topk) / ep
    width = inter / tp
    w, a = _bytes(kept["moe_dtype"].astype(str).to_numpy())
    np.testing.assert_allclose(r.flops, 2 * mats * h * width * pairs, rtol=1e-12)
    hit = np.minimum(e, tok * topk) / ep
    moved = hit * mats * h * width * w + pairs * ((h + width) * a + ((mats - 1) * width + h) * 2)
    np.testing.assert_allclose(r.bytes, moved, rtol=1e-12)


@pytest.mark.parametrize("chip", CHIPS)
def test_every_decode_row_reads_its_cache_once_per_kv_head(chip: str) -> None:
    df, rows = _rows(chip, "generation_attention")
    r = rows[OpClass.ATTENTION_DECODE]
    b, heads, kvh, hd, win = (
        df[c].to_numpy(float)
        for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim", "window_size")
    )
    ctx = df["isl"].to_numpy(float) + df["step"].to_numpy(float)
    ctx = np.where(win > 0, np.minimum(ctx, win), ctx)
    _, kv = _bytes(df["kv_cache_dtype"].astype(str).to_numpy())
    read = np.where(attention_rows.unshared_group(df, heads / kvh), heads, kvh)
    np.testing.assert_allclose(r.flops, 4 * b * heads * hd * ctx, rtol=1e-12)
    np.testing.assert_allclose(r.bytes, b * ctx * 2 * read * hd * kv + 4 * b * heads * hd, rtol=1e-12)
    np.testing.assert_allclose(r.rows, b * read)  # a thread block per sequence and KV head


@pytest.mark.parametrize("chip", CHIPS)
def test_every_mla_decode_row_reads_one_latent_for_all_heads(chip: str) -> None:
    df, rows = _rows(chip, "generation_mla")
    r = rows[OpClass.ATTENTION_DECODE]
    b, heads = df["batch_size"].to_numpy(float), df["num_heads"].to_numpy(float)
    ctx = df["isl"].to_numpy(float) + df["step"].to_numpy(float)
    _, kv = _bytes(df["kv_cache_dtype"].astype(str).to_numpy())
    # absorbed MLA: scores against 512 + 64, values of 512: 2 x (576 + 512) FLOPs per head and key
    np.testing.assert_allclose(r.flops, 2 * b * heads * (576 + 512) * ctx, rtol=1e-12)
    np.testing.assert_allclose(r.bytes, b * ctx * 576 * kv + 2 * b * heads * (576 + 512), rtol=1e-12)
    assert set(r.kind) == {"mla"}
    np.testing.assert_allclose(r.cols, heads)  # every head is a row of the one latent's tile


def test_gb200_mla_row_of_the_issue_is_59_percent_of_hbm() -> None:
    """GB200, 128 sequences at 4,096 tokens, 128 heads, bf16 KV: 127.9 us per layer measured;
    604 MB of latent in that time is 4.72 TB/s, 59% of 8 TB/s."""
    df, rows = _rows("gb200", "generation_mla")
    r = rows[OpClass.ATTENTION_DECODE]
    at = (
        (df["batch_size"] == 128)
        & (df["step"] == 4095)
        & (df["num_heads"] == 128)
        & (df["tp_size"] == 1)
        & (df["kv_cache_dtype"] == "bfloat16")
    ).to_numpy()
    assert at.sum() == 1
    assert r.latency_s[at][0] == pytest.approx(127.9e-6, abs=0.1e-6)
    kv = 128 * 4096 * 576 * 2
    assert r.work.kv_read_bytes[at][0] == pytest.approx(kv)
    assert kv / r.latency_s[at][0] / 8e12 == pytest.approx(0.59, abs=0.01)


def _one_layer(model_id: str, weights: Precision, kv: Precision, batch: float, context: float, tp: int = 1):
    m = load_model(model_id)
    sm = shard.shardable(m, weights)
    rates = ChipRates.uniform(1e15, 1e12)
    rates = ChipRates(rates.peak_flops_per_s, 1e12, compute=weights.compute_class, kv=kv)
    load = loads.decode_load(m, batch, context, kv.bytes_per_element)
    operators = ops.pass_operators(sm.operators, load, rates, tp=tp, pp=1, dp=1, ep=1)
    return m, {op.name: op for op in operators}


def test_the_step_describes_deepseek_mla_decode_as_the_table_row_does() -> None:
    """DeepSeek-V3's decode attention on one chip is 61 calls of the table's 128-head MLA row."""
    m, step = _one_layer("deepseek-v3", Precision.FP8_BLOCK, Precision.BF16, 128.0, 4096.0)
    df, rows = _rows("gb200", "generation_mla")
    r = rows[OpClass.ATTENTION_DECODE]
    at = ((df["batch_size"] == 128) & (df["step"] == 4095) & (df["num_heads"] == 128)).to_numpy()
    at = at & (df["kv_cache_dtype"] == "bfloat16").to_numpy() & (df["tp_size"] == 1).to_numpy()
    op = step["attention"]
    layers = m.num_layers
    assert op.flops / layers == pytest.approx(r.flops[at][0], rel=1e-12)
    assert op.kv_read_bytes / layers == pytest.approx(r.work.kv_read_bytes[at][0], rel=1e-12)
    assert op.activation_bytes / layers == pytest.approx(r.work.activation_bytes[at][0], rel=1e-12)
    assert op.kernel.kind == "mla" and op.kernel.fmt == "bfloat16"


def test_the_step_describes_a_llama_projection_as_the_gemm_table_does() -> None:
    """Llama-3.1-70B's output projection at 16 tokens under TP 8 is the table's GEMM of
    16 x 8192 x 1024 in bf16, once per layer."""
    m, step = _one_layer("llama-3.1-70b", Precision.BF16, Precision.BF16, 16.0, 1024.0, tp=8)
    op = step["attention_out"]
    layers = m.num_layers
    mm, n, k = 16.0, 8192.0, 64 * 128 / 8
    assert op.flops / layers == pytest.approx(2 * mm * n * k, rel=1e-12)
    assert (op.weight_bytes + op.activation_bytes) / layers == pytest.approx(n * k * 2 + mm * (k * 2 + n * 2))
