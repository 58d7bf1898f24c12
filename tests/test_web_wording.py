"""What the pages say: the Reading follows the sliders, numbers carry units, and an error names
the page's control, never a CLI flag. Each test here fails on 1de8042, where the Reading
described batch 1 whatever the sliders said, the operator table showed raw FLOPs and bytes,
and error boxes quoted ``--tokens``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

from streamlit.testing.v1 import AppTest

from rackmath.api import deployment
from rackmath.views import fmt

SRC = Path(__file__).resolve().parents[1] / "src" / "rackmath"


def run_page(page: str, **query: str) -> AppTest:
    script = f"""
from rackmath.web.pages import guarded
from rackmath.web.page_{page} import render_{page}_page
guarded(render_{page}_page)()
"""
    at = AppTest.from_string(script, default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def shown_table(at: AppTest, index: int) -> list[dict[str, str]]:
    """The cells of a table as the page shows them (the Styler's display values)."""
    styler = at.dataframe[index].proto.arrow_data.styler
    frame = pa.ipc.open_stream(styler.display_values).read_all().to_pandas()
    return list(frame.to_dict("records"))


def test_the_reading_describes_the_batch_and_context_the_sliders_chose() -> None:
    at = run_page("serving", model="llama-3.1-70b", system="h100-hgx", chips="8", batch="256", context="8192")
    assert not at.exception
    dep = deployment("llama-3.1-70b", "h100-hgx", chips=8)
    p = dep.decode([256], [8192])
    [text] = [m.value for m in at.markdown if m.value.startswith("At batch")]
    assert text.startswith(
        f"At batch 256 a step takes {fmt.seconds(float(p.step_s[0, 0]))} and is bound by "
        f"{p.step.bottleneck[0, 0]}; a million output tokens cost "
        f"{fmt.usd(float(p.usd_per_million_output_tokens[0, 0]))}."
    )
    assert "8,192 tokens of context" in text
    assert "--efficiency", "pure" not in text  # the page's own switch is named instead


def test_a_batch_that_does_not_fit_is_said_in_the_reading() -> None:
    query = {"model": "llama-3.1-70b", "system": "h100-hgx", "chips": "8", "batch": "65536"}
    query["context"] = "8192"
    at = run_page("serving", **query)
    [text] = [m.value for m in at.markdown if m.value.startswith("At batch")]
    assert text.startswith("At batch 65,536 ")
    assert "Batch 65,536 does not fit at 8,192 tokens of context" in text


def test_the_operator_table_shows_flops_and_bytes_with_units() -> None:
    at = run_page("serving", model="llama-3.1-70b", system="h100-hgx", chips="8", batch="64", context="8192")
    dep = deployment("llama-3.1-70b", "h100-hgx", chips=8)
    ops = dep.decode([64], [8192]).step.breakdown_at((0, 0))["operators"]
    rows = shown_table(at, -1)
    assert [r["name"] for r in rows] == [o["name"] for o in sorted(ops, key=lambda o: -o["time_s"])]
    by_name = {o["name"]: o for o in ops}
    for row in rows:
        op = by_name[row["name"]]
        assert row["flops"] == fmt.si(op["flops"], "FLOP")
        assert row["bytes_read"] == fmt.nbytes(op["bytes_read"])
        assert row["bytes_written"] == fmt.nbytes(op["bytes_written"])
        assert re.fullmatch(r"[\d.]+ (µs|ms|s)", row["time_s"]), row["time_s"]


def test_fmt_column_reads_flops_and_bytes_columns_by_name() -> None:
    assert fmt.column("flops", 1.43e11) == "143 GFLOP"
    assert fmt.column("bytes_read", 7.03e10) == "70.3 GB"
    assert fmt.column("hbm_bytes_per_s", 3.35e12) == "3.35 TB/s"
    assert fmt.money(48_334_800.56) == "$48.3 M" and fmt.money(489.32) == "$489.32"


def test_an_error_names_the_pages_control_not_a_cli_flag() -> None:
    at = run_page("training", trillion_tokens="1e-06")  # less than one step's 16.8 M tokens
    assert not at.exception
    [error] = [e.value for e in at.error]
    assert "--" not in error
    assert "raise the token budget" in error


def _raises_input_error(call: ast.Call) -> bool:
    """``InputError(...)``, or one of the checks that raise it (``checks.whole("--mtp", ...)``)."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == "InputError"
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "checks"


def _flags_in_messages() -> set[str]:
    """Every ``--flag`` written in a string inside an InputError(...) call (or a
    ``specs/checks.py`` call) of the layers the web calls (analyses, specs, catalog, core)."""
    flags: set[str] = set()
    for folder in ("analyses", "specs", "catalog", "core"):
        for path in (SRC / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and _raises_input_error(node):
                    for sub in ast.walk(node):
                        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                            flags |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", sub.value))
    return flags


def test_every_flag_an_analysis_message_names_has_the_pages_words() -> None:
    from rackmath.web.wording import FLAG_WORDS, in_page_words

    flags = _flags_in_messages()
    assert {"--tokens", "--mtp", "--slo", "--requests"} <= flags  # the scan finds them
    assert not flags - set(FLAG_WORDS), sorted(flags - set(FLAG_WORDS))
    assert in_page_words("--slo ttft_p99: got 'x'; allowed: 2s; raise --tokens") == (
        "the TTFT and TPOT limits ttft_p99: got 'x'; allowed: 2s; raise the token budget"
    )
