"""``rackmath web``: start the web explorer (Streamlit) on localhost."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from types import FrameType

import typer

from rackmath.cli.main import app
from rackmath.errors import RackmathError

#: Seconds the Streamlit server gets to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0
#: The signals that stop ``rackmath web`` and, with it, the Streamlit server it started
#: (SIGHUP: the terminal closed; POSIX only).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)


class MissingExtraError(RackmathError):
    """An optional dependency group that this command needs is not installed."""


def streamlit_command(port: int, address: str = "localhost") -> list[str]:
    """The ``streamlit run`` command line for the explorer (also used by the browser tests).

    Tracebacks of unexpected errors stay in the server log, not on the page, unless
    ``RACKMATH_DEBUG`` is set; expected errors are shown by the pages as one message.
    """
    # Locate the app's entry script without importing the web face: the CLI runs it as a
    # separate Streamlit process, it never calls into it.
    spec = importlib.util.find_spec("rackmath.web.app")
    if spec is None or spec.origin is None:
        raise MissingExtraError("the web explorer's app.py is missing from this install: reinstall rackmath")
    details = "full" if os.environ.get("RACKMATH_DEBUG") else "none"
    return [
        sys.executable, "-m", "streamlit", "run", spec.origin,
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--client.showErrorDetails", details,
        "--client.toolbarMode", "minimal",
    ]  # fmt: skip


class _Stopped(Exception):
    """A stop signal arrived while the server ran."""


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server, then SIGKILL if it has not exited within :data:`STOP_TIMEOUT_S`."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def serve(command: list[str]) -> int:
    """Run the server as a child process until it exits or a stop signal arrives.

    A signal that stops this process (Ctrl-C, ``kill``, a closed terminal) stops the server
    too: a plain ``subprocess.call`` would leave it serving the port when this process is
    sent SIGTERM. Returns the server's exit code, or 0 when stopped by a signal.
    """

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Stopped(signum)

    child = subprocess.Popen(command)
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        return child.wait()
    except (_Stopped, KeyboardInterrupt):
        return 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stop(child)


@app.command("web")
def web_command(
    port: int = typer.Option(8501, "--port", min=1, max=65535, help="TCP port on localhost."),
) -> None:
    """Start the web explorer on http://localhost:PORT (Ctrl-C stops it)."""
    missing = [name for name in ("streamlit", "plotly") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"the web explorer needs {' and '.join(missing)}: pip install 'rackmath[web]'"
        )
    typer.echo(f"rackmath web explorer on http://localhost:{port} (Ctrl-C stops it)", err=True)
    raise typer.Exit(serve(streamlit_command(port)))
