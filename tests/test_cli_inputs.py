"""What a capacity planner types, checked (issue 24): every file input guarded the same way,
no side effect that was not asked for, inputs checked for meaning in the CLI and the Python
API alike, and progress on long work that never reaches stdout.

Each test names the behaviour of main 1de8042 it replaces.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import rackmath as rm
from rackmath import userfiles
from rackmath.cli.main import run
from rackmath.errors import DoesNotFitError, InputError

BINARY = bytes(range(256)) * 4  # byte 0x80 is not UTF-8
DEEP = "a: " + "[" * 5000 + "]" * 5000 + "\n"  # 5,000 levels: RecursionError on main


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(list(args))
    return code, out.getvalue(), err.getvalue()


def _refused(code: int, err: str, *needles: str) -> None:
    """Exit 1 with one line on stderr naming each of ``needles`` (no traceback)."""
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"binary": tmp_path / "binary.yaml", "deep": tmp_path / "deep.yaml"}
    paths["binary"].write_bytes(BINARY)
    paths["deep"].write_text(DEEP)
    return paths


# --- 3. every file input guarded the same way (main: UnicodeDecodeError, RecursionError) ---


@pytest.mark.parametrize("kind", ["binary", "deep"])
@pytest.mark.parametrize(
    "command",
    [
        lambda f, tmp: ("sweep", str(f), "--out", str(tmp / "x.csv")),
        lambda f, tmp: ("validate", "--measurements", str(f)),
        lambda f, tmp: ("prices", "--prices", str(f)),
    ],
    ids=["sweep", "validate", "prices"],
)
def test_a_binary_or_deeply_nested_yaml_is_one_line(
    files: dict[str, Path], tmp_path: Path, kind: str, command: Callable[[Path, Path], tuple[str, ...]]
) -> None:
    code, _, err = _run(*command(files[kind], tmp_path))
    _refused(code, err, files[kind].name, "UTF-8 text" if kind == "binary" else "nested at most 32 levels")


def test_a_binary_trace_is_one_line(files: dict[str, Path]) -> None:
    code, _, err = _run(
        "simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--trace", str(files["binary"])
    )
    _refused(code, err, "--trace", "UTF-8 text")


def test_a_text_file_with_nul_bytes_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"models: [llama-3.1-8b]\x00\n")
    with pytest.raises(InputError) as err:
        userfiles.load_yaml(path, "SPEC")
    assert "byte 0x00 at offset 22" in str(err.value)


def test_libyaml_never_sees_a_nesting_that_would_crash_it(tmp_path: Path) -> None:
    """200,000 nested brackets crash libyaml's composer (a segfault, not an exception); the
    nesting check refuses the file before it is composed. Run apart, so a crash is a failure."""
    path = tmp_path / "crash.yaml"
    path.write_text("a: " + "[" * 200_000 + "]" * 200_000)
    code = (
        "import sys\n"
        "from rackmath.userfiles import load_yaml\n"
        "from rackmath.errors import InputError\n"
        "try:\n"
        f"    load_yaml({str(path)!r}, 'SPEC')\n"
        "except InputError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert "nested at most 32 levels deep (level 33 at line 1)" in done.stdout


def test_the_loader_is_libyamls_and_errors_say_where(tmp_path: Path) -> None:
    assert userfiles._LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    path = tmp_path / "bad.yaml"
    path.write_text("models: [a\n  b: [")
    with pytest.raises(InputError) as err:
        userfiles.load_yaml(path, "SPEC")
    assert "valid YAML" in str(err.value) and "at line 2, column" in str(err.value)


def test_a_malformed_scheduler_address_is_refused_before_any_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """main 1de8042: ValueError from inside Dask after a 20 s connection timeout."""
    from rackmath.analyses.deploy import sweep as sw

    def no_work(*_: Any, **__: Any) -> None:
        raise AssertionError("the sweep ran before the address was checked")

    monkeypatch.setattr(sw, "run", no_work)
    spec = Path(__file__).parents[1] / "examples" / "sweep-small.yaml"
    for address in ("tcp://foo:bar", "tcp://host:70000", "host:8786", "tcp://:8786", "tcp://a b:1"):
        code, _, err = _run("sweep", str(spec), "--out", str(tmp_path / "x.csv"), "--scheduler", address)
        _refused(code, err, "--scheduler", "PROTOCOL://HOST:PORT")
    assert sw.check_scheduler(" tcp://127.0.0.1:8786 ") == "tcp://127.0.0.1:8786"
    assert sw.check_scheduler("tcp://[::1]:8786") == "tcp://[::1]:8786"
    monkeypatch.undo()
    with pytest.raises(InputError, match="PROTOCOL://HOST:PORT"):  # the Python API refuses it too
        sw.run([], scheduler="tcp://foo:bar")


# --- 4. bounded work from files (main: 58.5 s and 880 MB for a 2.7 MB spec) ---


def test_an_oversized_yaml_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("batch: [" + ", ".join(["1"] * 400_000) + "]\n")  # 1.2 MB
    code, _, err = _run("sweep", str(path), "--out", str(tmp_path / "x.csv"))
    _refused(code, err, "at most 1,000,000 bytes", f"this one has {path.stat().st_size:,}")


def test_a_measurements_file_is_bounded_in_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.yaml"
    path.write_text("measurements:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(1001)))
    code, _, err = _run("validate", "--measurements", str(path))
    _refused(code, err, "--measurements", "1,001 entries", "at most 1,000 measurements")


def test_one_large_grid_is_chunked_inside_itself() -> None:
    """One combination of 60 x 5 = 300 points at chunk_points=100: chunks of at most 100
    points along the batch axis, and the same rows as one unchunked evaluation."""
    pytest.importorskip("pandas")
    from rackmath.analyses.deploy import sweep as sw

    spec = sw.parse_spec(
        {
            "models": ["llama-3.1-8b"],
            "systems": ["h100-hgx"],
            "batch": list(range(1, 61)),
            "context": [512, 1024, 2048, 4096, 8192],
        }
    )
    chunks = sw.make_chunks(spec, chunk_points=100)
    assert [c.points for c in chunks] == [100, 100, 100]
    assert [c.batch[0] for c in chunks] == [1, 21, 41]
    one = sw.run(sw.make_chunks(spec)).frame
    assert len(sw.make_chunks(spec)) == 1
    split = sw.run(chunks).frame
    keys = ["batch", "context_tokens"]
    assert split.sort_values(keys).reset_index(drop=True).equals(one.sort_values(keys).reset_index(drop=True))
    # a single batch row larger than a chunk splits its contexts too
    wide = sw.parse_spec({**spec.model_dump(), "batch": [1], "context": list(range(1, 251))})
    assert [c.points for c in sw.make_chunks(wide, chunk_points=100)] == [100, 100, 50]


# --- 5. no side effects (main: folders made up to the root; a folder named cpu.csv) ---


def test_sweep_out_into_a_missing_folder_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    spec = Path(__file__).parents[1] / "examples" / "sweep-small.yaml"
    target = tmp_path / "missing" / "deeper" / "x.parquet"
    code, _, err = _run("sweep", str(spec), "--out", str(target))
    _refused(code, err, "--out", "existing folder")
    assert not (tmp_path / "missing").exists()


def test_measure_kernels_out_that_names_a_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _run("measure", "--kernels", "--quick", "--out", "cpu.csv")
    _refused(code, err, "--out", "cpu.csv names a file")
    assert not (tmp_path / "cpu.csv").exists()
    code, _, err = _run("measure", "--kernels", "--quick", "--out", str(tmp_path / "no" / "tables"))
    _refused(code, err, "--out", "does not exist")
    assert not (tmp_path / "no").exists()


def test_calibrate_kernels_out_into_a_missing_folder_is_refused_before_the_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """main 1de8042 fitted every table (minutes), then failed to write with a traceback."""
    from rackmath.analyses.kernels import calibrate

    def no_fit(*_: Any, **__: Any) -> None:
        raise AssertionError("the fit started before --out was checked")

    monkeypatch.setattr(calibrate, "calibrate_kernels", no_fit)
    code, _, err = _run("calibrate", "kernels", "--out", str(tmp_path / "missing" / "fit.yaml"))
    _refused(code, err, "--out", "existing folder")
    code, _, err = _run("calibrate", "kernels", "--out", str(tmp_path / "fit.json"))
    _refused(code, err, "--out", ".yaml or .yml")


# --- 6. inputs checked for meaning, CLI and API alike ---


def test_a_trickle_of_traffic_is_refused_by_plan_and_by_the_search() -> None:
    """main 1de8042: `plan llama-3.1-8b --traffic 1e-30` priced a million tokens at $6e32."""
    from rackmath.analyses.deploy import candidates

    code, out, err = _run("plan", "llama-3.1-8b", "--traffic", "1e-30")
    _refused(code, err, "--traffic", "at least 1 output token/s")
    assert "$" not in out
    with pytest.raises(InputError, match="at least 1 output token/s"):
        candidates.Workload(traffic_tokens_per_s=1e-30)
    assert candidates.Workload(traffic_tokens_per_s=1.0).traffic_tokens_per_s == 1.0


def test_a_sweep_skips_contexts_beyond_the_models_window() -> None:
    """main 1de8042 wrote rows for llama-3.1-8b at 200,000 tokens (its window is 131,072)."""
    pytest.importorskip("pandas")
    from rackmath.analyses.deploy import sweep as sw

    result = sw.sweep(
        {
            "models": ["llama-3.1-8b", "deepseek-v3"],
            "systems": ["gb200-nvl72"],
            "batch": [1, 8],
            "context": [4096, 150_000, 200_000],
        }
    )
    f = result.frame
    assert sorted(f[f.model == "llama-3.1-8b"].context_tokens.unique()) == [4096]
    assert sorted(f[f.model == "deepseek-v3"].context_tokens.unique()) == [4096, 150_000]
    reasons = {c.model: why for c, why in result.skipped}
    assert "at most 131,072 tokens (llama-3.1-8b's context window)" in reasons["llama-3.1-8b"]
    assert "200,000 tokens" in reasons["llama-3.1-8b"]
    assert "at most 163,840 tokens (deepseek-v3's context window)" in reasons["deepseek-v3"]
    with pytest.raises(InputError, match="traffic_tokens_per_s"):
        sw.parse_spec(
            {"models": ["a"], "systems": ["b"], "batch": [1], "context": [1], "traffic_tokens_per_s": [0.5]}
        )


def test_the_api_refuses_the_contexts_the_cli_refuses() -> None:
    dep = rm.deployment("llama-3.1-8b", "h100-hgx", chips=1)
    code, _, err = _run("explain", "llama-3.1-8b", "--on", "h100-hgx", "--context", "200k")
    _refused(code, err, "--context", "at most 131,072 tokens")
    for call in (
        lambda: rm.decode(dep, [1], [4096, 200_000]),
        lambda: rm.prefill(dep, [1], [200_000]),
        lambda: rm.explain(dep, contexts=[200_000]),
    ):
        with pytest.raises(InputError, match=r"at most 131,072 tokens \(llama-3.1-8b's context window\)"):
            call()
    assert rm.decode(dep, [1], [131_072]).step_s.shape == (1, 1)


def test_an_infeasible_plan_prints_no_empty_table_and_its_reason_once() -> None:
    code, out, err = _run(
        "plan",
        "llama-3.1-70b",
        "--traffic",
        "1000",
        "--hardware",
        "h100-hgx",
        "--max-chips",
        "16",
        "--tpot-ms",
        "0.01",
    )
    _refused(code, err, "no deployment meets the SLOs", "above the 0.01 ms SLO")
    assert "weights/compute" not in out and "┃" not in out  # no table header
    assert (out + err).count("the best achievable TPOT is") == 1
    assert "Rejected" in out and "best achievable TPOT" in out


def test_a_training_job_that_does_not_fit_quotes_no_cost() -> None:
    code, out, err = _run("train", "llama-3.1-70b", "--on", "h100-hgx", "--chips", "1", "--tokens", "1e12")
    assert code == 1 and "does not fit" in err
    head = out.splitlines()[:4]
    assert any("does not fit" in line and "no cost is quoted" in line for line in head), head
    assert "chip-hours" not in out and "/chip-hour" not in out
    est = rm.train("llama-3.1-70b", "h100-hgx", "tp=1", tokens=1e12, chips=1)
    assert not est.memory.fits
    with pytest.raises(DoesNotFitError, match="short by"):
        rm.train("llama-3.1-70b", "h100-hgx", "tp=1", tokens=1e12, chips=1, require_fit=True)
    fits = rm.train("llama-3.1-8b", "h100-hgx", "tp=8", tokens=1e12, require_fit=True)
    assert fits.memory.fits and fits.cost_usd > 0


# --- 7. progress on long work: stderr only, never in --json stdout ---


def test_the_rate_search_reports_each_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackmath.analyses.deploy import rate_search

    seen: list[float] = []

    class Probe:
        def __init__(self, rate: float) -> None:
            self.rate_per_s = rate
            self.attainment = type("A", (), {"meets_slo": rate <= 10.0})()

    def at(rate: float) -> Any:
        seen.append(rate)
        return Probe(rate)

    _made, best = rate_search.bisect_rates(at, 100.0, 10, 6)
    assert len(seen) == 16 and best is not None and best.rate_per_s <= 10.0
    assert best.rate_per_s == pytest.approx(10.0, rel=0.04)  # 6 halvings of the 10-20 bracket in log
    _, none = rate_search.bisect_rates(lambda r: Probe(r + 1e9), 100.0, 4, 2)
    assert none is None


def test_simulate_slo_json_stdout_stays_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKMATH_PROGRESS", "1")  # bars forced on: they still go to stderr
    from rackmath.analyses.deploy import rate_search

    monkeypatch.setattr(rate_search, "MIN_MEASURED", 100)
    monkeypatch.setattr(rate_search, "CURVE_POINTS", 3)
    monkeypatch.setattr(rate_search, "SEARCH_PROBES", 1)
    code, out, err = _run(
        "simulate", "llama-3.1-8b", "--on", "h100-hgx", "--plan", "tp=1", "--output", "50",
        "--slo", "ttft_p99=2s", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["curve"]
    assert "Probing rates against the SLO" in err


def test_the_kernel_fit_and_validation_report_progress_per_chip(monkeypatch: pytest.MonkeyPatch) -> None:
    """`calibrate kernels` fits chip by chip under a bar; `validate --kernels` advances a bar in
    its chip loop. Stand-ins replace the fits (minutes of work)."""
    from rackmath.analyses.kernels import calibrate, validation
    from rackmath.catalog import kernel_tables as kt

    monkeypatch.setenv("RACKMATH_PROGRESS", "1")
    monkeypatch.setattr(kt, "discover", lambda: ["table"])
    fitted: list[str] = []

    def fake_fit(chip_id: str, refs: Any, committed: Any = ()) -> tuple[None, None, None]:
        fitted.append(chip_id)
        return None, None, None

    monkeypatch.setattr(calibrate, "fit_package_chip", fake_fit)
    monkeypatch.setattr(calibrate, "fit_to_dict", lambda fit, date, held: {"ops": [], "collectives": {}})
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        doc = calibrate.calibrate_kernels(["h100-sxm", "b200"])
    assert fitted == ["h100-sxm", "b200"] and list(doc["chips"]) == ["h100-sxm", "b200"]
    assert "Fitting kernel efficiencies" in err.getvalue()

    monkeypatch.setattr(validation, "load_package_chip", lambda chip, refs: type("D", (), {"rejected": {}})())
    monkeypatch.setattr(validation, "fit_chip", lambda *a, **k: None)
    monkeypatch.setattr(validation, "hash_split", lambda *a, **k: None)
    monkeypatch.setattr(validation, "_class_errors", lambda *a, **k: {})
    monkeypatch.setattr(validation, "_rejected_errors", lambda *a, **k: {})
    no_values = type("V", (), {"by_class": lambda self: {}})()
    monkeypatch.setattr(validation.kb, "held_out_value_bands", lambda *a, **k: no_values)
    monkeypatch.setattr(validation, "held_out_version", lambda *a, **k: ({}, []))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        report = validation.validate_kernels(["h100-sxm", "b200"])
    assert list(report["kernels"]["by_chip"]) == ["b200", "h100-sxm"]  # sorted
    assert "Validating kernels" in err.getvalue()
