"""The page's own words for what the analyses' messages call by a CLI flag.

The analyses refuse bad input with one message that names the field the way the CLI spells
it (``--tokens``, ``--mtp``, ``--slo``). A web page has no flags: :func:`in_page_words` turns
each flag into the name of the control (or the thing) the page shows, so an error box reads
"the token budget: ..." and never "--tokens: ...". A flag with no entry here reads as its
words (``--max-seqs`` -> ``max seqs``); ``tests/test_web_wording.py`` checks that every flag
an analysis message names has an entry.
"""

from __future__ import annotations

import re

#: CLI flag -> what the pages call it.
FLAG_WORDS: dict[str, str] = {
    "--acceptance": "Acceptance rate",
    "--amortization": "Amortization",
    "--as-of": "the date prices are aged to",
    "--attainment": "Attainment",
    "--batch": "Batch",
    "--chips": "Chips",
    "--compute": "the compute precision (Compute; on the training page, GEMM precision)",
    "--context": "Context",
    "--disaggregated": "Disaggregation (prefill and decode replicas)",
    "--efficiency": "Efficiency",
    "--ep-dispatch": "the expert-parallel dispatch precision",
    "--from": "a kernel table file",
    "--hardware": "Systems searched",
    "--host-cache": "the host memory for offloaded KV",
    "--host-link": "the chip's host link",
    "--input": "Prompt lengths",
    "--input-len": "Prompt tokens",
    "--kv": "KV cache precision",
    "--loads": "Loads",
    "--max-candidates": "the search's candidate budget",
    "--max-chips": "Most chips per replica",
    "--max-cp": "the most context-parallel ranks searched",
    "--max-points": "the number of points",
    "--max-seqs": "the runtime's sequence cap",
    "--max-sim-requests": "the simulated requests",
    "--max-sim-steps": "the simulated steps",
    "--max-tokens": "the runtime's token budget per step",
    "--measurements": "the measurements file",
    "--model": "Model",
    "--mtp": "MTP draft tokens",
    "--on": "System",
    "--output": "Output lengths",
    "--output-len": "Output tokens",
    "--output-tokens": "Output tokens",
    "--params-active": "Active parameters",
    "--plan": "Parallel plan",
    "--precision": "Precision",
    "--prefix-hit": "Prefix-cache hit rate",
    "--prices": "Priced model",
    "--pue": "Facility PUE",
    "--rate": "Arrival rate",
    "--redundant-experts": "Redundant expert slots",
    "--requests": "Requests",
    "--retention": "Retentions",
    "--runtime": "Runtime",
    "--schedule": "Schedule",
    "--scheduler": "Scheduler",
    "--skew": "Routing skew",
    "--slo": "the TTFT and TPOT limits",
    "--sparsity": "Sparsities N_total / N_active",
    "--spec": "Speculative decoding",
    "--step": "Step time",
    "--tbo": "Two-batch overlap",
    "--tokens": "the token budget",
    "--trace": "the trace file",
    "--traffic": "Traffic",
    "--virtual-stages": "Virtual stages",
}

_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


def flag_words(flag: str) -> str:
    """``--tokens`` -> ``the token budget``; a flag without an entry -> its words."""
    return FLAG_WORDS.get(flag, flag.removeprefix("--").replace("-", " "))


def in_page_words(message: str) -> str:
    """``message`` with every CLI flag replaced by what the page calls it."""
    return _FLAG.sub(lambda m: flag_words(m.group(0)), message)
