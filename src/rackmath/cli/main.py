"""The ``rackmath`` command: a thin Typer app. Each command lives in its own module and
registers itself on :data:`app`; this module only wires them and turns expected errors
into one-line messages.

Exit codes: 0 success; 1 bad input or an infeasible request (with a message on stderr);
2 usage errors (Click's default). Set ``RACKMATH_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import os
import sys

import typer

from rackmath import __version__
from rackmath.errors import RackmathError

app = typer.Typer(
    name="rackmath",
    help="First-principles math of LLM serving and training: rooflines, deployments, economics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rackmath {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """rackmath: turn the blackboard math of LLM economics into numbers."""


# Command modules register themselves on `app` when imported.
from rackmath.cli import (  # noqa: E402,F401
    catalog_cmds,
    deploy_cmds,
    econ_cmds,
    explain_cmd,
    kernel_cmds,
    reality_cmds,
    train_cmds,
    web_cmds,
)


def main() -> None:
    """Entry point: Click handles usage errors (exit 2); expected errors become one line."""
    try:
        app()
    except RackmathError as exc:
        if os.environ.get("RACKMATH_DEBUG"):
            raise
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
