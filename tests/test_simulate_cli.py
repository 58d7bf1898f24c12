"""`rackmath simulate`: JSON face, trace files, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BASE = ("simulate", "llama-3.1-70b", "--on", "h100-hgx", "--plan", "tp=8")


def test_simulate_json(cli) -> None:
    code, out, _ = cli(*BASE, "--rate", "2/s", "--requests", "500", "--output", "100", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["runtime"]["id"] == "vllm" and d["runtime"]["max_seqs"] == 1024
    r = d["result"]
    assert r["requests"] == 500 and r["rate_per_s"] == 2.0
    assert 0 < r["ttft_p50_s"] <= r["ttft_p90_s"] <= r["ttft_p99_s"]
    # output tokens/s: 100 tokens per request at ~2 requests/s served
    assert r["output_tokens_per_s"] == pytest.approx(100 * r["requests_per_s"], rel=1e-9)


def test_simulate_trace_file(cli, tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,200,20\n1.0,300,5\n")
    code, out, _ = cli(*BASE, "--trace", str(trace), "--json")
    assert code == 0
    assert json.loads(out)["result"]["requests"] == 3


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--rate", "0/s"), "--rate"),
        (("--rate", "-2/s"), "--rate"),
        (("--slo", "ttft_p99=1us"), "--slo"),
        (("--slo", "itl=2s"), "--slo"),
        (("--slo", "ttft=2s", "--attainment", "0"), "--attainment"),
        (("--slo", "ttft=2s", "--attainment", "1.5"), "--attainment"),
        (("--attainment", "0.9"), "--attainment"),
        (("--prefix-hit", "1.2"), "--prefix-hit"),
        (("--prefix-hit", "-0.1"), "--prefix-hit"),
        (("--input", "lognormal:0"), "--input"),
        (("--runtime", "vlm"), "vllm"),
    ],
)
def test_simulate_bad_input_is_one_line(cli, args: tuple[str, ...], field: str) -> None:
    code, _, err = cli(*BASE, "--requests", "200", "--output", "50", *args)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0]


def test_unsorted_and_negative_traces(cli, tmp_path: Path) -> None:
    for body, word in (("0,10,5\n-1,10,5\n", ">= 0"), ("1,10,5\n0.5,10,5\n", "sorted")):
        trace = tmp_path / "bad.csv"
        trace.write_text(body)
        code, _, err = cli(*BASE, "--trace", str(trace))
        assert code == 1 and word in err and len(err.strip().splitlines()) == 1
