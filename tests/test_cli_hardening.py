"""The command line refuses bad input in one line, bounds its work and says true things.

Each test is one finding of the hardening review: it failed (traceback, runaway work, a
wrong sentence or a usage box) on the code before the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rackmath.errors import InputError

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


# ------------------------------------------------------------------ the number grammar
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1024", 1024.0),
        ("1e3", 1000.0),
        ("2.5e12", 2.5e12),
        ("1k", 1e3),
        ("4K", 4e3),
        ("1M", 1e6),
        ("500M", 5e8),
        ("2.5G", 2.5e9),
        ("100B", 1e11),
        ("3T", 3e12),
        ("1_000_000", 1e6),
        ("1/3", 1 / 3),
        (" 7 ", 7.0),
    ],
)
def test_number_grammar(text: str, value: float) -> None:
    from rackmath.numbers import fmt_bound, parse_duration, parse_int, parse_list, parse_number  # noqa: F401

    assert parse_number(text, "--x") == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text", ["", "nan", "inf", "-inf", "1e400", "1x", "k", "1kk", "1/0", "--1", "0x10"])
def test_number_grammar_refuses(text: str) -> None:
    from rackmath.numbers import fmt_bound, parse_duration, parse_int, parse_list, parse_number  # noqa: F401

    with pytest.raises(InputError, match="--x"):
        parse_number(text, "--x")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("30s", 30), ("5min", 300), ("5m", 300), ("1h", 3600), ("2d", 172800), ("1w", 604800),
     ("1y", 365 * 86400), ("42", 42)],
)  # fmt: skip
def test_duration_grammar(text: str, seconds: float) -> None:
    from rackmath.numbers import fmt_bound, parse_duration, parse_int, parse_list, parse_number  # noqa: F401

    assert parse_duration(text, "--d") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0s", "-1h", "5x", "1e400s", "h", ""])
def test_duration_grammar_refuses(text: str) -> None:
    from rackmath.numbers import fmt_bound, parse_duration, parse_int, parse_list, parse_number  # noqa: F401

    with pytest.raises(InputError, match="--d"):
        parse_duration(text, "--d")


def test_ranges_and_lists() -> None:
    from rackmath.numbers import fmt_bound, parse_duration, parse_int, parse_list, parse_number  # noqa: F401

    assert parse_int("1e3", "--n", minimum=1, maximum=1000) == 1000
    with pytest.raises(InputError, match="from 1 to 1,000"):
        parse_int("1001", "--n", minimum=1, maximum=1000)
    with pytest.raises(InputError, match="whole number"):
        parse_int("1.5", "--n")
    assert parse_list("1,2k, 3M", "--l") == [1.0, 2000.0, 3e6]
    with pytest.raises(InputError, match="at most 2 values"):
        parse_list("1,2,3", "--l", most=2)
    assert fmt_bound(65536) == "65,536" and fmt_bound(1e15) == "1e15" and fmt_bound(0.5) == "0.5"


# ------------------------------------------------------------------ tracebacks
def test_overtrain_tiny_params_is_refused_not_inf_json(cli) -> None:
    code, out, err = cli("overtrain", "--params", "1e-30", "--json")
    _one_line_error(code, err, "--params", "1,000,000")
    assert out == ""


def test_overtrain_json_at_the_range_ends_is_finite(cli) -> None:
    for params in ("1M", "1e15"):
        code, out, err = cli("overtrain", "--params", params, "--json")
        assert code == 0, err
        text = out.lower()
        assert "nan" not in text and "infinity" not in text
        assert json.loads(out)["params_active"] == {"1M": 1e6, "1e15": 1e15}[params]


def _write_config(tmp_path: Path, base: str, **changes: object) -> Path:
    config = json.loads((HF_CONFIGS / base).read_text())
    config.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_more_experts_per_token_than_experts_is_refused(cli, tmp_path: Path) -> None:
    path = _write_config(tmp_path, "deepseek_v3.json", num_experts_per_tok=300, n_routed_experts=256)
    for extra in ((), ("--json",)):
        code, out, err = cli("explain", str(path), "--on", "gb200-nvl72", *extra)
        _one_line_error(code, err, "num_experts_per_tok", "256", "300")
        assert "nan" not in out


def test_a_billion_layers_is_refused_at_once(cli, tmp_path: Path) -> None:
    path = _write_config(tmp_path, "llama.json", num_hidden_layers=10**9)
    code, _, err = cli("explain", str(path), "--on", "h100-hgx")
    _one_line_error(code, err, "num_hidden_layers", "1,024")


def test_binary_config_and_prices_files_are_refused(cli, tmp_path: Path) -> None:
    binary = tmp_path / "config.json"
    binary.write_bytes(b"\x00\xff\xfe\x80binary")
    code, _, err = cli("explain", str(binary), "--on", "h100-hgx")
    _one_line_error(code, err, "UTF-8")
    code, _, err = cli("prices", "--prices", str(binary))
    _one_line_error(code, err, "--prices", "UTF-8")


def test_deeply_nested_json_is_refused(cli, tmp_path: Path) -> None:
    deep = tmp_path / "config.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = cli("explain", str(deep), "--on", "h100-hgx")
    _one_line_error(code, err, "nested too deeply")
    nested_yaml = tmp_path / "prices.yaml"
    nested_yaml.write_text("prices: " + "[" * 20_000 + "]" * 20_000)
    code, _, err = cli("prices", "--prices", str(nested_yaml))
    assert code == 1 and "Traceback" not in err and "--prices" in err


# ------------------------------------------------------------------ runaway work
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("fleet", "--loads", "2000000"), ("--loads", "2")),
        (("fleet", "--batch", "1000000"), ("--batch", "65,536")),
        (("fleet", "--output-tokens", "100000"), ("simulated decode steps", "--max-sim-steps")),
        (("fleet", "--batch", "65536"), ("simulated requests", "--max-sim-requests")),
        (("plan", "llama-3.1-8b", "--traffic", "1M", "--max-chips", "100000"), ("--max-chips", "16,384")),
        (("plan", "deepseek-v3", "--traffic", "1M", "--max-chips", "16384"), ("budget", "--max-candidates")),
        (("explain", "llama-3.1-8b", "--on", "gb200-nvl72", "--chips", "1000000"), ("--chips",)),
    ],
)
def test_work_beyond_the_budget_is_refused_with_the_way_to_raise_it(cli, args, needles) -> None:
    code, _, err = cli(*args)
    _one_line_error(code, err, *needles)


def test_hub_lookups_give_up_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import types

    from rackmath.errors import ConfigError
    from rackmath.specs import hf_config

    release = threading.Event()

    def hangs(*args: object, **kwargs: object) -> str:  # an offline client retrying
        release.wait(30)
        raise OSError("offline")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=hangs))
    try:
        with pytest.raises(ConfigError, match=r"within 0\.2 s"):
            hf_config.load_config_from_hub("org/model", timeout_s=0.2)
    finally:
        release.set()
    assert hf_config.HUB_TIMEOUT_S <= 5


# ------------------------------------------------------------------ wrong or misleading words
def test_explain_reading_names_the_first_batch_shown(cli) -> None:
    code, out, err = cli("explain", "deepseek-v3", "--on", "gb200-nvl72", "--batch", "64,128")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "At batch 64 a step takes" in flat and "At batch 1 a step" not in flat
    assert "cheaper than batch 64" in flat


def test_explain_reading_does_not_name_a_fitting_batch_when_none_fits(cli) -> None:
    code, out, err = cli(
        "explain", "deepseek-v3", "--on", "gb200-nvl72", "--batch", "100000", "--context", "100k"
    )
    assert code == 0, err
    flat = " ".join(out.split())
    assert "cheapest that fits" not in flat and "None of the batches shown fits" in flat


def test_plan_with_a_precision_no_system_has_says_so(cli) -> None:
    args = ("plan", "llama-3.1-8b", "--traffic", "1000", "--precision", "fp4", "--hardware", "h100-hgx")
    code, _, err = cli(*args)
    _one_line_error(code, err, "--precision", "h100-hgx has native, fp8")
    assert "max-chips" not in err


def test_prices_without_a_write_price_prints_no_negative_premium(cli) -> None:
    code, out, err = cli("prices", "--cache-model", "gpt-4.1")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "premium of $-" not in flat and "-$" not in flat
    assert "no separate write price" in flat


def test_prices_as_of_before_the_prices_is_refused(cli) -> None:
    code, _, err = cli("prices", "--as-of", "1900-01-01")
    _one_line_error(code, err, "--as-of", "on or after")


def test_training_that_does_not_fit_exits_1(cli) -> None:
    code, out, err = cli("train", "llama-3.1-70b", "--on", "h100-hgx", "--chips", "1", "--tokens", "1e12")
    assert code == 1 and "does not fit" in err and "short by" in err
    assert "short by" in out  # the report still shows which modes would fit


def test_context_beyond_the_models_window_is_refused(cli) -> None:
    code, _, err = cli("explain", "llama-3.1-8b", "--on", "h100-hgx", "--context", "1M")
    _one_line_error(code, err, "--context", "131,072")
    code, _, err = cli("layout", "llama-3.1-8b", "--on", "h100-hgx", "--context", "200k")
    _one_line_error(code, err, "--context", "131,072")


def test_chips_beyond_the_system_need_a_plan(cli) -> None:
    code, _, err = cli("explain", "llama-3.1-8b", "--on", "gb200-nvl72", "--chips", "1000")
    _one_line_error(code, err, "--chips", "72", "--plan")


def test_one_replica_is_singular(cli) -> None:
    code, out, err = cli("fleet", "--traffic", "1000", "--loads", "0.5", "--requests", "100")
    assert code == 0, err
    assert "1 replica x" in out and "1 replicas" not in out


def test_plot_into_a_missing_folder_is_refused_and_creates_nothing(cli, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "dir" / "x.png"
    code, _, err = cli("overtrain", "--plot", str(target))
    _one_line_error(code, err, "--plot", "existing folder")
    assert not (tmp_path / "missing").exists()


def test_repeated_hardware_is_searched_once(cli) -> None:
    once = cli("plan", "llama-3.1-8b", "--traffic", "1M", "--hardware", "h100-hgx", "--json")
    twice = cli("plan", "llama-3.1-8b", "--traffic", "1M", "--hardware", "h100-hgx,h100-hgx", "--json")
    assert once[0] == twice[0] == 0
    a, b = json.loads(once[1]), json.loads(twice[1])
    assert b["systems"] == ["h100-hgx"] and b["candidates_evaluated"] == a["candidates_evaluated"]


# ------------------------------------------------------------------ consistent parsing
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("layout", "llama-3.1-8b", "--on", "h100-hgx", "--batch", "nan"), ("--batch", "nan")),
        (("explain", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "abc"), ("--chips", "abc")),
        (("plan", "llama-3.1-8b", "--traffic", "fast"), ("--traffic",)),
        (("fleet", "--step", "5x"), ("--step", "duration")),
    ],
)
def test_type_errors_are_one_line_and_exit_1(cli, args, needles) -> None:
    code, _, err = cli(*args)
    _one_line_error(code, err, *needles)
    assert "Usage:" not in err and "╭" not in err


def test_suffixes_work_everywhere(cli) -> None:
    code, out, err = cli("plan", "llama-3.1-8b", "--traffic", "1M", "--hardware", "h100-hgx", "--json")
    assert code == 0, err and json.loads(out)["workload"]["traffic_tokens_per_s"] == 1e6
    code, out, err = cli("explain", "llama-3.1-8b", "--on", "h100-hgx", "--chips", "1e0", "--json")
    assert code == 0, err and json.loads(out)["deployment"]["chips"] == 1
    code, out, err = cli("fleet", "--traffic", "500M", "--requests", "1k", "--loads", "0.5", "--json")
    assert code == 0, err and json.loads(out)["traffic_tokens_per_s"] == 5e8


def test_a_chip_id_where_a_system_is_wanted_names_the_systems(cli) -> None:
    code, _, err = cli("explain", "llama-3.1-8b", "--on", "h100-sxm")
    _one_line_error(code, err, "h100-sxm is a chip", "h100-hgx")


def test_ep_alone_suggests_a_plan_that_works(cli) -> None:
    code, _, err = cli("explain", "deepseek-v3", "--on", "gb200-nvl72", "--plan", "ep=8")
    _one_line_error(code, err, "try --plan dp=8,ep=8")


def test_unknown_options_are_one_line(cli) -> None:
    code, _, err = cli("plan", "llama-3.1-8b", "--trafic", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--traffic" in err


# ------------------------------------------------------------------ help
def test_help_shows_no_bool_metavar_and_readable_defaults(cli) -> None:
    code, out, _ = cli("overtrain", "--help")
    assert code == 0
    assert "<bool>" not in out and "0.3333" not in out and "[default: 1/3]" in out


def test_hardware_fits_80_columns(monkeypatch: pytest.MonkeyPatch, cli) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("hardware")
    assert code == 0 and "h100-sxm" in out and "gb200-nvl72" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out and "a100-80gb" in out and "1,979" in out  # nothing cut short


def test_help_summaries_match_the_commands() -> None:
    import importlib
    import inspect

    from rackmath.cli.main import COMMANDS, app

    for _, (module, _) in COMMANDS.items():
        importlib.import_module(module)
    docs = {info.name: inspect.getdoc(info.callback) for info in app.registered_commands}
    for name, (_, summary) in COMMANDS.items():
        first = " ".join((docs[name] or "").split("\n\n")[0].split())
        assert summary == first, name


def test_help_imports_no_command_module_and_no_numpy() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from rackmath.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert run(['--help']) == 0\n"
        "heavy = [m for m in ('numpy', 'pydantic', 'yaml', 'matplotlib', 'rackmath.cli.deploy_cmds') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
