"""``rackmath web`` stops the Streamlit server it started: a signal to the parent (SIGTERM from
``kill``, SIGINT from Ctrl-C) leaves no child serving the port.

Real processes: the test starts ``rackmath web`` on a free port, waits for the server's
health endpoint, finds the Streamlit child, signals the parent and checks that the child is
gone and the port no longer answers. On 1de8042 ``rackmath web`` ran the server with
``subprocess.call`` and SIGTERM killed the parent alone, leaving the server up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")

if not Path("/proc/self/task").is_dir():
    pytest.skip("finds the server's process through /proc (Linux)", allow_module_level=True)

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(t) for t in text)
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_rackmath_web_stops_the_streamlit_server(signum: signal.Signals) -> None:
    port = _free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", "from rackmath.cli.main import main; main()", "web", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RACKMATH_DEBUG": ""},
    )
    children: list[int] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(port):
            assert parent.poll() is None, f"rackmath web exited with {parent.returncode}"
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.25)
        children = _children(parent.pid)
        assert children, "rackmath web runs the server as a child process"
        parent.send_signal(signum)
        parent.wait(timeout=STOP_TIMEOUT_S)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(c) for c in children), "the Streamlit server outlived rackmath web"
        assert not _answers(port), f"port {port} still answers"
        assert parent.returncode == 0
    finally:
        for pid in [parent.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait(timeout=STOP_TIMEOUT_S)
