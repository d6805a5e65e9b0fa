"""A served console (`replaylog console --serve`) as a real subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from conftest import ROOT, cli_env, wait_for


@dataclass
class Served:
    """A running console server: its address and, once stopped, everything it printed."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]
    output: list[str] = field(default_factory=list)


def free_port() -> int:
    """A TCP port nobody listens on at this moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def served_console(db: Path | str, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """Serve the console of `db` until the block ends; `output` holds its stdout and stderr afterwards."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaylog", "--db", str(db), "console", "--serve", "--port", str(port), *args],
        env=env or cli_env(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", port, proc)
    try:
        assert wait_for(lambda: proc.poll() is not None or _listening(port), timeout=60), "the server never listened"
        assert proc.poll() is None, f"the server exited: {proc.communicate()[0].decode(errors='replace')}"
        yield served
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        served.output.append(out.decode(errors="replace"))
