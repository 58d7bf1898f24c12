"""The ``rackmath`` command: a thin Typer app. Each command lives in its own module and
registers itself on :data:`app`; this module only wires them and turns expected errors
into one-line messages.

Commands load lazily: :data:`COMMANDS` names each command's module and one-line summary,
so ``rackmath --help`` imports no command module (no NumPy, no catalogs) and
``rackmath plan ...`` imports only ``deploy_cmds``. A test checks the summaries against
the commands' docstrings.

Exit codes: 0 success; 1 bad input, a bad option value or an infeasible request (one line
on stderr); 2 an unknown command or option, or a missing one (one line too). Set
``RACKMATH_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

try:  # Typer >= 0.2x vendors Click as typer._click; older Typer uses Click itself
    from typer import _click as click
    from typer._click import exceptions as cx
except ImportError:  # pragma: no cover
    import click  # type: ignore[no-redef]
    from click import exceptions as cx  # type: ignore[no-redef]

from rackmath.errors import RackmathError

#: command -> (module that registers it, one-line summary shown by ``rackmath --help``).
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": (
        "rackmath.cli.sweep_cmds",
        "Evaluate every combination of a spec (each batch x context grid in one vectorized call).",
    ),
    "explain": (
        "rackmath.cli.explain_cmd",
        "Where the time of a forward pass goes, the balance batch, and what a token costs.",
    ),
    "plan": (
        "rackmath.cli.deploy_cmds",
        "The cheapest deployment that meets the SLOs, runners-up, and why the others failed.",
    ),
    "simulate": (
        "rackmath.cli.simulate_cmds",
        "Requests through a replica under a runtime's caps: TTFT, TPOT, ITL, SLO attainment, goodput.",
    ),
    "pareto": (
        "rackmath.cli.deploy_cmds",
        "Tokens/s per chip against tokens/s per user: the frontier over plans and batches.",
    ),
    "layout": (
        "rackmath.cli.deploy_cmds",
        "The lecture's layout arguments (D13-D24) for a model on a system.",
    ),
    "train": (
        "rackmath.cli.train_cmds",
        "Step time, MFU, memory per chip and the cost of a token budget under a parallel plan.",
    ),
    "pipeline": (
        "rackmath.cli.train_cmds",
        "Lay out a pipeline schedule: bubble fraction (simulated and closed form), timeline.",
    ),
    "prices": (
        "rackmath.cli.econ_cmds",
        "What API prices reveal: output/input, long-context tiers, prompt caches, fast modes.",
    ),
    "fleet": (
        "rackmath.cli.scale_cmds",
        "Replicas, chips and dollars for a traffic; batching as a train; a simulation under load.",
    ),
    "overtrain": (
        "rackmath.cli.scale_cmds",
        "How far past Chinchilla to pre-train a model that will serve heavy traffic.",
    ),
    "sparsity": (
        "rackmath.cli.scale_cmds",
        "What a sparser MoE buys (quality) and costs (batch, memory, traffic) on a system.",
    ),
    "validate": (
        "rackmath.cli.reality_cmds",
        "Predict every published measurement; show the error of the pure roofline, of the "
        "kernel-grounded model, and of it with the end-to-end correction (in-sample and "
        "leave-one-source-out).",
    ),
    "calibrate": (
        "rackmath.cli.reality_cmds",
        "Fit the physical parameters per chip family, and report leave-one-source-out error.",
    ),
    "measure": (
        "rackmath.cli.reality_cmds",
        "Measure this machine's matmul FLOP/s and copy bandwidth, time real decode steps of a "
        "random-weight transformer, and predict them with rackmath.",
    ),
    "models": (
        "rackmath.cli.catalog_cmds",
        "List the catalog's models with their parameter counts and KV bytes per token.",
    ),
    "hardware": (
        "rackmath.cli.catalog_cmds",
        "List chips and systems with their peaks, memory, links and dated prices.",
    ),
    "web": (
        "rackmath.cli.web_cmds",
        "Start the web explorer on http://localhost:PORT (Ctrl-C stops it).",
    ),
}


class LazyGroup(TyperGroup):
    """A Typer group that imports a command's module only when that command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(dict.fromkeys([*COMMANDS, *self.commands]))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        importlib.import_module(COMMANDS[cmd_name][0])
        for info in app.registered_commands:
            if info.name == cmd_name:
                command = typer.main.get_command_from_info(
                    info, pretty_exceptions_short=True, rich_markup_mode=None
                )
                self.commands[cmd_name] = command
                return command
        return None  # pragma: no cover - COMMANDS names a module that does not register it

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, summary) for name, (_, summary) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="rackmath",
    help="First-principles math of LLM serving and training: rooflines, deployments, economics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain Click help: fits 80 columns and needs no Rich import
    cls=LazyGroup,
)


def _version(value: bool) -> None:
    if value:
        from rackmath import __version__

        typer.echo(f"rackmath {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """rackmath: turn the blackboard math of LLM economics into numbers.

    Numbers take 1e3, 4k, 1M, 2.5G; durations 250ms, 30s, 5min, 1h, 2d.
    """


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _rackmath_cause(exc: BaseException) -> RackmathError | None:
    """The RackmathError an option parser raised, through Click's and Pydantic's wrappers."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, RackmathError):
            return seen
        errors = getattr(seen, "errors", None)  # pydantic.ValidationError keeps the original
        if callable(errors):
            try:
                inner = (errors()[0].get("ctx") or {}).get("error")
            except Exception:
                inner = None
            if isinstance(inner, RackmathError):
                return inner
        seen = seen.__cause__ or seen.__context__
    return None


def _usage_message(exc: cx.ClickException) -> tuple[str, int]:
    """(one line, exit code) for a Click error: a bad value exits 1, a bad command line 2."""
    cause = _rackmath_cause(exc)
    if isinstance(exc, cx.BadParameter) and cause is not None:
        return str(cause), 1
    if isinstance(exc, cx.BadParameter) and not isinstance(exc, cx.MissingParameter):
        return exc.format_message(), 1
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message += f" (see `{ctx.command_path} --help`)"
    return message, 2


def run(args: list[str] | None = None) -> int:
    """Run the command line in ``args`` (default ``sys.argv[1:]``); return the exit code."""
    command = typer.main.get_command(app)
    try:
        result: Any = command.main(args=args, prog_name="rackmath", standalone_mode=False)
    except cx.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return 0
    except cx.ClickException as exc:
        if os.environ.get("RACKMATH_DEBUG"):
            raise
        message, code = _usage_message(exc)
        typer.echo(f"error: {_one_line(message)}", err=True)
        return code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except RackmathError as exc:
        if os.environ.get("RACKMATH_DEBUG"):
            raise
        typer.echo(f"error: {_one_line(str(exc))}", err=True)
        return 1
    return result if isinstance(result, int) else 0


def main() -> None:
    """Entry point: every expected error is one line on stderr and a non-zero exit."""
    code = run()
    if code:
        sys.exit(code)


if __name__ == "__main__":
    # Run as a script this file is ``__main__``, a second module beside the ``rackmath.cli.main``
    # that command modules register on; delegate to that one so every command is there.
    from rackmath.cli import main as registered

    registered.main()
