"""Option parsing shared by every command: one number grammar, bounds, output.

Every numeric option is declared with :func:`count`, :func:`number` or :func:`duration`;
they parse with :mod:`rackmath.numbers` (``1e3``, ``4k``, ``1M``, ``2.5G``, ``30s``, ``5min``)
and check the option's range while Click reads the command line, so a bad value is one
line naming the option, what was typed and what is allowed (exit 1; see ``main``).
Comma lists go through :func:`number_list`. The bounds the options declare are the
analyses' (:mod:`rackmath.specs.bounds`), which refuse the same values from the Python API.
Nothing here imports NumPy: ``rackmath --help`` and the light commands stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rackmath.cli.output import console
from rackmath.errors import InputError
from rackmath.numbers import fmt_bound, parse_duration, parse_number
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_BATCH


def _field(decls: tuple[str, ...]) -> str:
    return next((d for d in decls if d.startswith("--")), decls[0] if decls else "value")


def _default(value: Any) -> Any:
    """A float default as people write it (``3`` not ``3.0``); Click shows it unquoted."""
    if isinstance(value, float):
        return fmt_bound(value)
    return value


def count(
    default: Any,
    *decls: str,
    help: str,
    minimum: int = 1,
    maximum: float = MAX_BATCH,
    why: str = "",
) -> Any:
    """A whole-number option (``--chips 1k``) within ``[minimum, maximum]``."""
    field = _field(decls)

    def parse(value: Any) -> int | None:
        if value is None:
            return None
        return int(parse_number(value, field, minimum=minimum, maximum=maximum, integer=True, why=why))

    return typer.Option(_default(default), *decls, help=help, parser=parse, metavar="N")


def number(
    default: Any,
    *decls: str,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    why: str = "",
) -> Any:
    """A real-number option (``--traffic 500M``) within ``[minimum, maximum]``.

    ``positive`` refuses zero as well (for rates and prices where 0 would divide).
    """
    field = _field(decls)

    def parse(value: Any) -> float | None:
        if value is None:
            return None
        x = parse_number(value, field, minimum=minimum, maximum=maximum, why=why)
        return checks.positive(field, x, allowed="a positive number", given=value) if positive else x

    return typer.Option(_default(default), *decls, help=help, parser=parse, metavar="X")


def duration(default: Any, *decls: str, help: str, maximum_s: float | None = None) -> Any:
    """A duration option (``--step 20ms``, ``--duration 60d``), returned in seconds."""
    field = _field(decls)

    def parse(value: Any) -> float | None:
        if value is None:
            return None
        return parse_duration(value, field, maximum_s=maximum_s)

    return typer.Option(_default(default), *decls, help=help, parser=parse, metavar="DURATION")


def plot_path(text: Any) -> Path | None:
    """``--plot FILE``: a .png/.svg/.pdf whose folder exists (no folders are created)."""
    if text is None:
        return None
    path = Path(text)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InputError("--plot", str(text), "a file name ending in .png, .svg or .pdf")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError("--plot", str(text), f"a file in an existing folder ({parent} does not exist)")
    return path


def out_file(path: Path, field: str, suffixes: tuple[str, ...]) -> Path:
    """An output file (``--out results.parquet``): one of ``suffixes``, in a folder that exists
    (no folders are created), and not itself a folder. Checked before any work starts."""
    if path.suffix.lower() not in suffixes:
        raise InputError(field, str(path), f"a file name ending in {' or '.join(suffixes)}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(field, str(path), f"a file in an existing folder ({parent} does not exist)")
    if path.is_dir():
        raise InputError(field, str(path), "a file name (this is a folder)")
    return path


def out_folder(path: Path, field: str, *, writes: str) -> Path:
    """An output folder (``--out tables``): an existing folder, or a new one in an existing
    folder; a name that looks like a file (``cpu.csv``) is refused, not made a folder."""
    if path.suffix.lower() in (".csv", ".parquet", ".json", ".yaml", ".yml", ".png", ".svg", ".pdf"):
        raise InputError(field, str(path), f"a folder to write {writes} into ({path.name} names a file)")
    if path.exists() and not path.is_dir():
        raise InputError(field, str(path), f"a folder to write {writes} into (this is a file)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(field, str(path), f"a folder inside an existing one ({parent} does not exist)")
    return path


def plot_option(help: str = "Write a figure (PNG/SVG/PDF).") -> Any:
    return typer.Option(None, "--plot", help=help, parser=plot_path, metavar="FILE")


def efficiency_mode(text: str) -> str:
    """``--efficiency``: ``kernel`` or ``pure`` (:class:`rackmath.specs.efficiency.EfficiencyMode`)."""
    from rackmath.specs.efficiency import EfficiencyMode

    return EfficiencyMode.parse(text, "--efficiency").value


def efficiency_option() -> Any:
    """``--efficiency kernel|pure``: the one efficiency switch of every command (default kernel)."""
    return typer.Option(
        "kernel",
        "--efficiency",
        help="kernel: each operator on the chip's fitted kernel curves (default); "
        "pure: the lecture's roofline.",
        parser=efficiency_mode,
        metavar="kernel|pure",
    )


def one(text: str, field: str, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    """One positive number from a text option (``"500M"``)."""
    value = parse_number(text, field, minimum=minimum, maximum=maximum)
    return checks.positive(field, value, allowed="a positive number", given=text)


def names(text: str, field: str) -> list[str]:
    """``"a, b,a"`` -> ``["a", "b"]``: a comma list of ids, repeats dropped."""
    items = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not items:
        raise InputError(field, text, "a comma list of ids")
    return list(dict.fromkeys(items))


def positive(value: float | None, field: str) -> float | None:
    return None if value is None else checks.positive(field, value)


def dump_json(payload: Any) -> str:
    """Strict JSON (:func:`rackmath.views.fmt.to_json`): NaN and infinities become null."""
    from rackmath.views import fmt  # NumPy comes with it: loaded when a command prints, not for --help

    return fmt.to_json(payload)


def plural(n: float, word: str) -> str:
    """``1 replica``, ``3 replicas``, ``1,200 chips``."""
    return f"{n:,.0f} {word}" + ("" if n == 1 else "s")


def emit(result: Any, as_json: bool, plot: Path | None, draw: Any, render: Any) -> None:
    """A command's output: the figure to ``plot`` (``draw(result, plot)``) when asked, then
    either the result's ``to_dict()`` as JSON or ``render(result, console)``."""
    if plot is not None:
        draw(result, plot)
    if as_json:
        typer.echo(dump_json(result.to_dict()))
        return
    render(result, console())
    if plot is not None:
        typer.echo(f"plot written to {plot}")
