"""DeepSeek sparse attention (DSA) as the kernels run it: the indexer's short-sequence fast path,
the absorbed sparse core, the head tile, and the DSA module tables read through the step's own
description (the module time minus the projections on the chip's GEMM curves)."""

from __future__ import annotations

import numpy as np
import pytest

from rackmath.catalog import loader as catalog
from rackmath.core import attention as attn
from rackmath.core import loads
from rackmath.core import operator_model as opm
from rackmath.core import operators as ops
from rackmath.core.chip_rates import ChipRates
from rackmath.core.efficiency import compute_frac_of
from rackmath.specs.efficiency import OpClass, OpEfficiency
from rackmath.specs.precision import Precision


def test_indexer_scores_only_beyond_top_k() -> None:
    a = catalog.model("deepseek-v3.2").attention
    assert float(attn.indexed_tokens(a, None, 2048)) == 0.0
    assert float(attn.indexed_tokens(a, None, 2049)) == 2049.0
    assert attn.indexed_tokens(a, None, np.array([100.0, 5000.0])).tolist() == [0.0, 5000.0]
    assert float(attn.indexer_pairs(a, None, 10_000)) == 50_005_000.0
    assert float(attn.indexer_pairs(a, None, 2048)) == 0.0
    assert attn.indexer_flops_per_key(a) == 2 * 64 * 128 == 16_384
    # without DSA: nothing
    dense = catalog.model("deepseek-v3").attention
    assert float(attn.indexed_tokens(dense, None, 100_000)) == 0.0


def test_dsa_prefill_runs_absorbed_one_latent_tiled_by_heads() -> None:
    om = opm.operator_model(catalog.model("deepseek-v3.2"), Precision.BF16)
    assert om.attention_kind == "dsa" and om.prefill_absorbed
    assert om.prefill_dims == (576.0, 512.0, 1.0)  # the decode dims, one shared latent
    # dense MLA prefills decompressed: 192-wide queries, 128-wide values, a KV head per head
    mla = opm.operator_model(catalog.model("deepseek-v3"), Precision.BF16)
    assert mla.prefill_dims == (192.0, 128.0, 128.0) and not mla.prefill_absorbed


def test_a_column_tile_counts_only_the_useful_columns() -> None:
    e = OpEfficiency(compute_frac=0.8, compute_tile_cols=64.0)
    assert float(compute_frac_of(e, 1000.0, 16.0)) == pytest.approx(0.8 * 16 / 64)
    assert float(compute_frac_of(e, 1000.0, 128.0)) == pytest.approx(0.8)
    assert float(compute_frac_of(e, 1000.0, 65.0)) == pytest.approx(0.8 * 65 / 128)


pd = pytest.importorskip("pandas")


def _table(op_name: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op_name": op_name,
            "model": "deepseek-ai/DeepSeek-V3.2",
            "mla_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16",
            "gemm_type": "bfloat16",
            "num_heads": [128, 16, 128],
            "batch_size": [8, 4, 1],
            "isl": [4096, 1024, 2048],
            "step": [0, 0, 0],
            "latency": [1.0, 1.0, 1.0],
        }
    )


def test_dsa_decode_rows_are_the_steps_operators_of_one_layer() -> None:
    """Each row's attention and its two projection companions carry the FLOPs and bytes the
    step's own pass gives one layer with the table's local heads."""
    from rackmath.analyses.kernels import dsa_rows

    r = dsa_rows.dsa_rows(_table("dsa_generation_module"), OpClass.ATTENTION_DECODE)
    assert len(r) == 3 and set(r.kind.tolist()) == {"dsa"} and set(r.dtype.tolist()) == {"bfloat16"}
    qkv, out = r.companions
    assert (qkv.name, out.name) == ("attention_qkv", "attention_out")
    rates = ChipRates.uniform(1e15, 1e12)
    for i, (heads, b, isl) in enumerate([(128, 8, 4096), (16, 4, 1024), (128, 1, 2048)]):
        m = dsa_rows.one_layer("deepseek-v3.2", heads)
        assert m.num_layers == 1 and m.attention.num_heads == heads
        load = loads.decode_load(m, float(b), float(isl), 2.0)
        step = {
            op.name: op
            for op in ops.pass_operators(
                opm.operator_model(m, Precision.BF16), load, rates, tp=1, pp=1, dp=1, ep=1
            )
        }
        assert r.work.flops[i] == pytest.approx(float(step["attention"].flops), rel=1e-12)
        assert r.work.kv_read_bytes[i] == pytest.approx(float(step["attention"].kv_read_bytes), rel=1e-12)
        assert qkv.work.flops[i] == pytest.approx(float(step["attention_qkv"].flops), rel=1e-12)
        assert out.work.flops[i] == pytest.approx(float(step["attention_out"].flops), rel=1e-12)
    # by hand: 4,096 tokens > top-k: the sparse core over 2,048 latents and the indexer over all
    per_token = 2 * 128 * (2 * 512 + 64) * 2048 + 2 * 64 * 128 * 4096
    assert r.work.flops[0] == pytest.approx(8 * per_token, rel=1e-12)
    # 2,048 tokens: the fast path, no indexer scoring
    assert r.work.flops[2] == pytest.approx(2 * 128 * (2 * 512 + 64) * 2048, rel=1e-12)


def test_a_prefill_kernel_that_gathers_every_top_k_slot() -> None:
    """On the chips whose DSA prefill kernel runs every query over all top-k slots (the H100
    and H200 tables: their time follows the prompt tokens, not the context), each row adds the
    pairs beyond the causal selection and every slot's latent, and the step on such a chip
    describes the row as the fit does. By hand, 16 heads, 4 x 1,024 tokens (bf16 latent):
    4 x (1,024 x 2,048 - 1,024 x 1,025 / 2) = 6,289,408 extra pairs at 2 x 16 x 1,088 FLOPs,
    4 x 1,024 x 2,048 slots of 576 values x 2 bytes."""
    from rackmath.analyses.kernels import dsa_rows
    from rackmath.specs.efficiency import EfficiencyTable

    table = _table("dsa_context_module")
    plain = dsa_rows.dsa_rows(table, OpClass.ATTENTION_PREFILL)
    gathers = dsa_rows.dsa_rows(table, OpClass.ATTENTION_PREFILL, gathers_top_k=True)
    extra_pairs = 4 * (1024 * 2048 - 1024 * 1025 / 2)
    assert extra_pairs == 6_289_408
    added = gathers.work.flops[1] - plain.work.flops[1]
    assert added == pytest.approx(extra_pairs * 2 * 16 * 1088, rel=1e-12)
    slots_bytes = 4 * 1024 * 2048 * 576 * 2.0
    read = gathers.work.kv_read_bytes[1] - plain.work.kv_read_bytes[1]
    assert read == pytest.approx(slots_bytes, rel=1e-12)
    # the projections are the same GEMMs either way
    assert np.array_equal(gathers.companions[0].work.flops, plain.companions[0].work.flops)
    # the step on a chip that gathers describes the row as the fit does
    rates = ChipRates.uniform(1e15, 1e12, EfficiencyTable(dsa_prefill_gathers_top_k=True))
    m = dsa_rows.one_layer("deepseek-v3.2", 16)
    load = loads.prefill_load(m, 4.0, 1024.0, 2.0)
    om = opm.operator_model(m, Precision.BF16)
    step = {op.name: op for op in ops.pass_operators(om, load, rates, tp=1, pp=1, dp=1, ep=1)}
    assert float(step["attention"].flops) == pytest.approx(gathers.work.flops[1], rel=1e-12)
    assert float(step["attention"].kv_read_bytes) == pytest.approx(gathers.work.kv_read_bytes[1], rel=1e-12)


def test_rows_of_a_model_the_catalog_lacks_are_left_out() -> None:
    from rackmath.analyses.kernels import dsa_rows

    df = _table("dsa_context_module")
    df.loc[0, "model"] = "zai-org/GLM-5"
    r = dsa_rows.dsa_rows(df, OpClass.ATTENTION_PREFILL)
    assert len(r) == 2 and len(r.companions[0].formats) == 2


DSA_CHIPS = ("h100-sxm", "h200", "b200", "b300", "gb200", "gb300")


@pytest.mark.parametrize("chip_id", DSA_CHIPS)
def test_deepseek_v32_attention_runs_on_its_chips_dsa_curves(chip_id: str) -> None:
    from rackmath.analyses.kernels.fit import ChipPeaks
    from rackmath.analyses.kernels.tables import efficiency_table

    peaks = ChipPeaks.of(chip_id)
    flops = {p.value: f for p, f in peaks.peak_flops_per_s.items()}
    rates = ChipRates(flops, peaks.hbm_bytes_per_s, efficiency_table(chip_id))
    for cls in (OpClass.ATTENTION_DECODE, OpClass.ATTENTION_PREFILL):
        kernel = rates.curve(cls, ("bfloat16",), "dsa").kernel
        assert kernel.kind == "dsa" and not kernel.fallback and "dsa_" in kernel.table
