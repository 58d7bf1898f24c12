"""Prefix reuse under load: the prefix cache's hits, LRU eviction and host tier traced by hand,
the multi-turn worked example recounted from its trace, the max-throughput path's tokens per
step with a hit rate, the host links' catalog, and bad input refused in one line."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from rackmath.analyses.deploy import simulate as sim
from rackmath.analyses.deploy import slo
from rackmath.analyses.deploy.candidates import Workload as PlanWorkload
from rackmath.catalog.loader import chip as catalog_chip
from rackmath.catalog.loader import model as catalog_model
from rackmath.catalog.loader import system as catalog_system
from rackmath.catalog.offload import host_link, host_links
from rackmath.cli.main import run
from rackmath.core import loads
from rackmath.core import requests as rq
from rackmath.errors import InputError
from rackmath.specs.workload import (
    LengthDist,
    check_block_trace,
    check_trace,
    parse_trace_text,
    with_hit_rate,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
S = 0.01  # a step's fixed part, seconds
PER_TOKEN = 1e-4  # and its part per prompt token
#: a step of S + PER_TOKEN x (prompt tokens), whatever the decode batch and the context
LINEAR = rq.StepTable(np.zeros(1), np.array([0.0, 1e6]), np.ones(1), np.array([[[S], [S + 1e6 * PER_TOKEN]]]))
ROOMY = rq.Limits(max_seqs=64, max_tokens=10**5, chunk_tokens=10**5, kv_tokens=1e6)


def step(prompt_tokens: float) -> float:
    return S + PER_TOKEN * prompt_tokens


# ----------------------------------------------------------------------------- the cache by hand


def test_tiny_trace_by_hand() -> None:
    # blocks of 4 tokens; A = [0, 1] (8 tokens) at 0 s, B = [0, 1, 2] (10 tokens) at 1 s, after A
    # finished: B finds 0 and 1, 8 of its 10 tokens, and prefills 2. Hit rate 8 / 18 = 0.444.
    reqs = check_block_trace([0, 1000], [8, 10], [2, 2], [[0, 1], [0, 1, 2]], block_tokens=4)
    run = rq.simulate(reqs, LINEAR, ROOMY)
    assert run.hit_tokens is not None and run.hit_tokens.tolist() == [0, 8]
    assert run.ttft_s == pytest.approx([step(8), step(2)])
    assert run.hit_tokens.sum() / reqs.input_tokens.sum() == pytest.approx(8 / 18)


def test_a_full_hit_still_runs_the_last_prompt_token() -> None:
    # B's prompt is A's, every block cached: 7 of 8 tokens skipped, the last one runs (vLLM)
    reqs = check_block_trace([0, 1000], [8, 8], [2, 2], [[0, 1], [0, 1]], block_tokens=4)
    run = rq.simulate(reqs, LINEAR, ROOMY)
    assert run.hit_tokens is not None and run.hit_tokens.tolist() == [0, 7]
    assert run.ttft_s[1] == pytest.approx(step(1))


def _evicting(host: rq.HostTier | None) -> rq.RequestRun:
    # a pool of 20 slots, blocks of 4, one-token outputs, each request alone in the replica:
    # A = [0, 1] (8 + 1 slots; on release its blocks are evictable, last block first: 1 then 0)
    # C = [5, 6, 7] needs 13 slots, 12 free: the least recently used cached block (1) goes
    # D = [0, 1]: block 0 is still in HBM; block 1 only in the host tier, if there is one
    reqs = check_block_trace([0, 1000, 2000], [8, 12, 8], [1, 1, 1], [[0, 1], [5, 6, 7], [0, 1]], 4)
    return rq.simulate(reqs, LINEAR, rq.Limits(8, 100, 100, 20), host=host)


def test_lru_eviction_keeps_the_prefix_and_drops_the_suffix() -> None:
    run = _evicting(None)
    assert run.hit_tokens is not None and run.hit_tokens.tolist() == [0, 0, 4]
    assert run.ttft_s == pytest.approx([step(8), step(12), step(4)])


def test_a_host_hit_waits_for_its_load_over_the_host_link() -> None:
    # the evicted block 1 went to host memory: D finds 8 tokens (4 from the host tier), runs
    # the last one, and its prompt starts once the 4 tokens' KV is back: 4 x 1 ms
    load = 1e-3
    run = _evicting(rq.HostTier(tokens=100, load_s_per_token=load))
    assert run.hit_tokens is not None and run.hit_tokens.tolist() == [0, 0, 7]
    assert run.host_hit_tokens is not None and run.host_hit_tokens.tolist() == [0, 0, 4]
    assert run.ttft_s[2] == pytest.approx(4 * load + step(1))


def test_a_stated_hit_rate_skips_that_share_of_each_prompt() -> None:
    reqs = check_trace([0.0, 1.0, 2.0], [2000, 2000, 2000], [2, 2, 2])
    half = rq.simulate(with_hit_rate(reqs, 0.5), LINEAR, ROOMY)
    assert half.hit_tokens is not None and half.hit_tokens.tolist() == [1000] * 3
    assert half.ttft_s == pytest.approx([step(1000)] * 3)
    full = with_hit_rate(reqs, 1.0)
    assert full.prefix_tokens is not None and full.prefix_tokens.tolist() == [1999] * 3


def test_the_multiturn_worked_example_by_hand() -> None:
    # examples/multiturn-tiny.jsonl: a 1,024-token system prompt (blocks 0, 1); user A asks at
    # 0 s (1,536 tokens, [0, 1, 2]), B at 10 s (1,300, [0, 1, 3]), A again at 20 s (2,048,
    # [0, 1, 2, 4]), B at 30 s (2,048, [0, 1, 5, 6]): B finds the system prompt (1,024), A's
    # second turn its first prompt (1,536), B's second the system prompt only (its first turn
    # ended inside block 3, so block 3 changed): 3,584 of 6,932 prompt tokens, 51.7 %
    reqs = parse_trace_text((EXAMPLES / "multiturn-tiny.jsonl").read_text())
    assert reqs.arrival_s.tolist() == [0.0, 10.0, 20.0, 30.0]
    run = rq.simulate(reqs, LINEAR, ROOMY)
    hits = [0, 1024, 1536, 1024]
    assert run.hit_tokens is not None and run.hit_tokens.tolist() == hits
    assert run.hit_tokens.sum() / reqs.input_tokens.sum() == pytest.approx(3584 / 6932)
    assert run.ttft_s == pytest.approx([step(i - h) for i, h in zip(reqs.input_tokens, hits, strict=True)])


def test_the_multiturn_session_trace_reuses_each_previous_turn() -> None:
    # examples/multiturn-trace.jsonl: count the hits a cache that never evicts finds (every block
    # seen before, from each prompt's first, up to the first new one; at most I - 1) and hold
    # the simulator to it on the 8B model's real replica (its pool holds the whole trace)
    text = (EXAMPLES / "multiturn-trace.jsonl").read_text()
    assert len(text) < 8000  # example data stays small
    rows = [json.loads(line) for line in text.splitlines()]
    seen: set[int] = set()
    expected = []
    for r in rows:
        n = 0
        for i in r["hash_ids"]:
            if i not in seen:
                break
            n += 1
        got = sum(min(512, r["input_length"] - 512 * k) for k in range(n))
        expected.append(min(got, r["input_length"] - 1))
        seen.update(r["hash_ids"])
    fleet = slo.Fleet(catalog_model("llama-3.1-8b"), catalog_system("h100-hgx"), "tp=1")
    ran = slo.serve(fleet, slo.Workload(rate_per_s=None, trace=parse_trace_text(text)))
    assert ran.times.hit_tokens is not None and ran.times.hit_tokens.tolist() == expected
    total = sum(r["input_length"] for r in rows)
    assert ran.result.prefix_hit_frac == pytest.approx(sum(expected) / total)
    # the same requests without their block ids: no reuse, and every TTFT at least as long
    plain = slo.serve(
        fleet,
        slo.Workload(rate_per_s=None, trace=parse_trace_text((EXAMPLES / "multiturn-trace.csv").read_text())),
    )
    assert plain.result.prefix_hit_frac is None
    assert np.all(ran.times.ttft_s <= plain.times.ttft_s + 1e-12)


# ----------------------------------------------------------------------------- the max-throughput path


def test_a_hit_rate_cuts_the_prompt_tokens_of_a_mixed_step() -> None:
    # B = 64 decoding at I = 2000, O = 500: B / O = 0.128 new prompts a step; h = 0.5 runs 1,000
    # tokens of each: 64 + 0.128 x 1000 = 192 tokens a step (320 without the cache)
    m = catalog_model("llama-3.1-8b")
    cold = loads.mixed_load(m, 64, 2000, 500, 2.0)
    warm = loads.mixed_load(m, 64, 2000, 500, 2.0, 0.5)
    assert float(cold.tokens) == pytest.approx(64 + 64 / 500 * 2000)
    assert float(warm.tokens) == pytest.approx(192.0)
    # the decode side is untouched: the same KV held per sequence
    assert float(warm.decode_kv_read_bytes) == pytest.approx(float(cold.decode_kv_read_bytes))


# ----------------------------------------------------------------------------- host links


def test_host_links_are_sourced_and_per_direction() -> None:
    links = host_links()
    for chip_id, link in links.items():
        catalog_chip(chip_id)  # every entry names a catalog chip
        assert link.source and link.date
    # PCIe Gen5 x16: vendors quote 128 GB/s for both directions, 64e9 each way (the signalling,
    # 32 GT/s x 16 lanes x 128/130 / 8 bits, carries 63.0e9 of data)
    for chip_id, link in links.items():
        if link.link == "PCIe Gen5 x16":
            assert link.bandwidth_bytes_per_s_per_direction == pytest.approx(64e9), chip_id
    assert host_link("h100-sxm") is links["h100-sxm"]
    # NVLink-C2C: 450e9 a direction per Grace, shared by the superchip's two GPUs
    gb = host_link("gb200")
    assert gb is not None and gb.bandwidth_bytes_per_s_per_direction == 450e9 / 2
    assert gb.confidence == "derived"


def test_the_host_tier_is_priced_with_the_chips_link() -> None:
    fleet = slo.Fleet(
        catalog_model("llama-3.1-8b"), catalog_system("h100-hgx"), "tp=1", host_cache_bytes=64e9
    )
    work = slo.Workload(1.0, 10, LengthDist.parse("2000", "i"), LengthDist.parse("100", "o"))
    rep = slo.build(fleet, work).replica
    per_token = sim.kv_bytes_per_token_per_chip(rep.deployment, 2100.0, rep.runtime.max_tokens)
    assert per_token == pytest.approx(32 * 8 * 128 * 2 * 2)  # layers x KV heads x head dim x K,V x BF16
    assert rep.host is not None
    assert rep.host.load_s_per_token == pytest.approx(per_token / 64e9)
    assert rep.host.tokens == pytest.approx(64e9 / per_token)
    assert rep.host_link == "PCIe Gen5 x16"


# ----------------------------------------------------------------------------- bad input


def _refused(args: list[str], *needles: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args)
    lines = err.getvalue().strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err.getvalue()
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan])
def test_hit_rates_outside_zero_to_one_are_refused(bad: float) -> None:
    with pytest.raises(InputError, match="--prefix-hit"):
        with_hit_rate(check_trace([0.0], [100], [10]), bad)
    with pytest.raises(InputError, match="--prefix-hit"):
        PlanWorkload(traffic_tokens_per_s=1e5, prefix_hit=bad)


def test_a_hit_rate_on_the_command_line_is_refused_in_one_line() -> None:
    base = ["simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--requests", "10"]
    _refused([*base, "--prefix-hit", "1.5"], "--prefix-hit")
    _refused(
        ["plan", "llama-3.1-8b", "--on", "h100-hgx", "--prefix-hit", "-0.5", "--efficiency", "pure"],
        "--prefix-hit",
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # times not sorted
        ('{"timestamp": 10, "input_length": 8, "output_length": 1, "hash_ids": [0]}\n'
         '{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [0]}', "sorted"),
        # block 1 first came after block 0; here it follows block 2: not the block it named
        ('{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [0, 1]}\n'
         '{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [2, 1]}', "unknown block 1"),
        # more ids than the prompt has blocks
        ('{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [0, 1]}', "at most"),
        # negative and repeated ids
        ('{"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [-1]}', ">= 0"),
        ('{"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [0, 0]}', "twice"),
    ],
)  # fmt: skip
def test_bad_block_traces_are_refused_in_one_line(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(InputError, match="trace"):
        parse_trace_text(text)
    path = tmp_path / "bad.jsonl"
    path.write_text(text + "\n")
    _refused(
        ["simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--trace", str(path)],
        "trace",
        needle,
    )


# ----------------------------------------------------------------------------- runtime profiles


def test_an_unchunked_engine_refuses_a_long_prompt_and_names_the_chunked_profile() -> None:
    # TensorRT-LLM 1.4.0rc4 ships chunked prefill off with an 8,192-token budget: a 10,000-token
    # prompt is refused in one line naming the profile (and the option) that chunks it
    base = ["simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--requests", "5"]
    _refused([*base, "--runtime", "trtllm", "--input", "10000", "--output", "10"], "trtllm-chunked", "8,192")
    # the chunked profile runs it in ceil(10,000 / 8,192) = 2 prefill steps: 8,192 then 1,808 tokens
    fleet = slo.Fleet(
        catalog_model("llama-3.1-8b"), catalog_system("h100-hgx"), "tp=1", runtime="trtllm-chunked"
    )
    ran = slo.serve(fleet, slo.Workload(rate_per_s=None, trace=check_trace([0.0], [10_000], [10])))
    table = slo.build(
        fleet, slo.Workload(rate_per_s=None, trace=check_trace([0.0], [10_000], [10]))
    ).replica.table
    by_hand = float(table(0, 8192, 0.0)) + float(table(0, 10_000 - 8192, 0.0))
    assert ran.times.ttft_s[0] == pytest.approx(by_hand, rel=1e-9)


def test_engines_that_chunk_by_default_are_profiled_chunked_and_every_profile_is_dated() -> None:
    from rackmath.catalog.runtimes import runtime

    for engine in ("vllm", "sglang", "trtllm-chunked"):
        assert runtime(engine).chunked_prefill, engine
    trt = runtime("trtllm")
    assert not trt.chunked_prefill and trt.chunked_variant == "trtllm-chunked"
    for engine in ("vllm", "sglang", "trtllm", "trtllm-chunked", "trtllm-0.18"):
        r = runtime(engine)
        assert r.version and r.date and r.source, engine


def test_the_xpyd_prefill_pool_skips_the_cached_share_of_each_prompt() -> None:
    """The disaggregated fleet's prefill pool runs each prompt's uncached suffix, as the
    aggregated search does: at hit h a prompt of L tokens puts (1 - h) L tokens through the
    layers, so the fleet's TTFT falls as h rises (Llama-3.1-70B on H100 HGX, 8,192 in / 256 out,
    pure roofline: 636 / 331 / 94 ms at h = 0 / 0.5 / 0.9 on 2026-11-26)."""
    from rackmath import api
    from rackmath.analyses.deploy.candidates import Workload, candidate_load
    from rackmath.analyses.deploy.plan_features import PlanFeatures
    from rackmath.catalog.loader import resolve_model

    m = resolve_model("llama-3.1-70b")
    for h in (0.0, 0.5, 0.9):
        work = Workload(traffic_tokens_per_s=1e5, input_len=8192, output_len=256, prefix_hit=h)
        load, _ = candidate_load(m, "prefill", work, np.array([4.0]), 2.0, PlanFeatures())
        assert float(np.sum(load.tokens)) == pytest.approx(4 * (1 - h) * 8192)
    ttft = [
        api.plan("llama-3.1-70b", traffic=1e5, input_len=8192, output_len=256, hardware=["h100-hgx"],
                 prefix_hit=h, efficiency="pure").disaggregated.to_dict()["ttft_s"]
        for h in (0.0, 0.5, 0.9)
    ]  # fmt: skip
    assert ttft[0] > ttft[1] > ttft[2]
