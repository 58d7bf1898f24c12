"""Each operator's kernel-grounded time against the measured tables at real deployments' shapes
(issue "Kernel grounding that cannot drift", must show).

DeepSeek-V3, Llama-3.1-70B, gpt-oss-120b and Qwen3-235B on H100, H200, B200 and GB200, decode
at a deployment's batch and context: each operator of the step (per layer, on one chip) against
aiconfigurator-core's own estimate for the same kernel call, which is the measured table's value
at a table point and its interpolation between points (``aiconfigurator_core.sdk.engine``; the
oracle, not something rackmath uses). A gated MLP is two GEMMs there (gate/up, then down).

What holds and what does not, stated: 53 of the 59 comparisons lie within 15% (the test asks
85%) and every one within 65%. The six beyond are points where the table itself jumps between
neighbouring row counts, tile and tactic changes no smooth curve follows: Hopper's fp8-block
GEMMs at 64 rows (H200, n = 7,168, k = 16,384: 40 us at 64 rows, 72 us at 65, 52 us at 32; the
curve gives 56 us), and Blackwell's bf16 GEMMs at exactly 16 rows (GB200, n = 3,072, k = 4,096:
7.9 us at 15 rows, 10.9 us at 16, 8.7 us at 17).
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest

from rackmath.analyses.serving.planned import plan_deployment
from rackmath.catalog import kernel_tables as kt
from rackmath.catalog.loader import model as load_model
from rackmath.catalog.loader import system as load_system
from rackmath.core import loads

pytestmark = pytest.mark.skipif(kt.package_data_dir() is None, reason="needs the kernels extra")

DIRS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200"}
SYSTEMS = {"h100-sxm": "h100-hgx", "h200": "h200-hgx", "b200": "b200-hgx", "gb200": "gb200-nvl72"}

CASES = [
    *(("llama-3.1-70b", c, "tp=4", 64, 4096) for c in ("h100-sxm", "h200", "b200", "gb200")),
    *(("llama-3.1-70b", c, "tp=8", 8, 8192) for c in ("h100-sxm", "h200")),
    *(("deepseek-v3", c, "dp=8,ep=8", 512, 4096) for c in ("h200", "b200", "gb200")),
    *(("qwen3-235b-a22b", c, "tp=4,ep=4", 64, 4096) for c in ("h100-sxm", "h200", "b200")),
    *(("gpt-oss-120b", c, "tp=1", 16, 4096) for c in ("b200", "gb200")),
]


class Oracle:
    """aiconfigurator-core's per-op estimate (ms per call, one layer), quiet."""

    def __init__(self) -> None:
        from aiconfigurator_core.sdk import common, perf_database
        from aiconfigurator_core.sdk import operations as aic
        from aiconfigurator_core.sdk.engine import _evaluate_single_op

        self.common, self.perf_database, self.aic, self.evaluate = (
            common,
            perf_database,
            aic,
            _evaluate_single_op,
        )
        self.dbs: dict[str, object] = {}

    def db(self, chip: str) -> object:
        if chip not in self.dbs:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self.dbs[chip] = self.perf_database.get_database(DIRS[chip], "trtllm", "1.3.0rc20")
        return self.dbs[chip]

    def seconds(self, chip: str, op: object, **kw: object) -> float:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return float(self.evaluate(self.db(chip), op, **kw)) * 1e-3


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    pytest.importorskip("aiconfigurator_core.sdk.engine")
    return Oracle()


def _comparisons(
    o: Oracle, model_id: str, chip: str, plan: str, batch: int, ctx: int
) -> list[tuple[str, float, float]]:
    """(operator, rackmath seconds per layer, table seconds per layer) of one decode step."""
    d = plan_deployment(load_model(model_id), load_system(SYSTEMS[chip]), plan, communication=False)
    step = d.step(loads.decode_load(d.model, float(batch), float(ctx), d.kv_bytes_per_element), decode=True)
    by = {op.name: op for op in step.operators}
    m, p, a = d.model, d.plan, d.model.attention
    q, kv = o.common.GEMMQuantMode, o.common.KVCacheQuantMode
    rank_batch = int(np.ceil(batch / p.dp))
    at = {"is_context": False, "batch_size": rank_batch, "s": ctx}
    fmt = by["attention_out"].kernel.fmt

    def gemm(n: int, k: int) -> float:
        return o.seconds(chip, o.aic.GEMM("g", 1, int(n), int(k), getattr(q, fmt)), x=rank_batch, **at)

    h, tp, layers = m.hidden_size, p.tp, m.num_layers
    out = [
        (
            "attention_out",
            float(by["attention_out"].time_s) / layers,
            gemm(h, a.num_heads * a.v_head_dim // tp),
        )
    ]
    if a.kind.value in ("MLA", "DSA"):
        ref = o.seconds(chip, o.aic.GenerationMLA("a", 1, a.num_heads // tp, kv.bfloat16), **at)
    else:
        qkv_n = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim // tp
        out.append(("attention_qkv", float(by["attention_qkv"].time_s) / layers, gemm(qkv_n, h)))
        kv_heads = max(a.num_kv_heads // tp, 1)

        def attention(s: int) -> float:
            op = o.aic.GenerationAttention(
                "a", 1, a.num_heads // tp, kv_heads, kv.bfloat16, head_size=a.head_dim
            )
            return o.seconds(chip, op, is_context=False, batch_size=rank_batch, s=s)

        # each layer at what it reads: its window or the whole context (gpt-oss alternates)
        ref = float(np.mean([attention(min(ctx, layer.window or ctx)) for layer in m.layers]))
    out.append(("attention", float(by["attention"].time_s) / layers, ref))
    if m.dense_mlp is not None and m.num_dense_mlp_layers:
        i = m.dense_mlp.intermediate_size // tp
        out.append(
            ("dense_mlp", float(by["dense_mlp"].time_s) / m.num_dense_mlp_layers, gemm(2 * i, h) + gemm(h, i))
        )
    if m.is_moe and m.moe is not None:
        moe, moe_layers = m.moe, m.num_moe_layers
        quant = getattr(o.common.MoEQuantMode, by["routed_experts"].kernel.fmt)
        experts = o.aic.MoE(
            "m", 1, h, moe.expert_intermediate_size, moe.experts_per_token, moe.num_experts, 1, p.ep, quant,
            "balanced", p.dp,
        )  # fmt: skip
        ref = o.seconds(chip, experts, x=rank_batch, **at)
        out.append(("routed_experts", float(by["routed_experts"].time_s) / moe_layers, ref))
        if moe.shared_intermediate_size:
            i = moe.shared_intermediate_size // tp
            t = float(by["shared_experts"].time_s) / moe_layers
            out.append(("shared_experts", t, gemm(2 * i, h) + gemm(h, i)))
    return out


def test_each_operator_lies_near_the_measured_table(oracle: Oracle) -> None:
    rows = []
    for case in CASES:
        for name, ours, table in _comparisons(oracle, *case):
            rows.append((case, name, ours, table, ours / table - 1))
    errors = np.array([abs(r[-1]) for r in rows])
    report = "\n".join(
        f"{c[0]:16} {c[1]:9} {c[2]:10} b={c[3]:<4} {n:15} {ours * 1e6:8.1f} us vs {t * 1e6:8.1f} us {e:+.0%}"
        for c, n, ours, t, e in rows
    )
    assert len(rows) >= 50, report
    assert np.mean(errors <= 0.15) >= 0.85, report
    assert errors.max() <= 0.65, report
    assert np.median(errors) <= 0.06, report
