"""`make postgres`: a local PostgreSQL server for a newcomer, and the URL it prints works as printed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from conftest import ROOT, cli_env, run_cli

# Starts a server with pgserver (skipped where it is not installed: tests/conftest.py).
pytestmark = pytest.mark.pgserver


def test_make_postgres_starts_a_server_whose_printed_url_replaylog_uses_and_stop_stops_it() -> None:
    # Not pytest's 0700 temp folder: run as root, pgserver starts the server as another user.
    base = Path(tempfile.mkdtemp(prefix="replaylog-devpg-"))
    base.chmod(0o755)
    folder = base / "postgres"

    def helper(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bench.pg_server", *args, str(folder)], capture_output=True,
                              text=True, timeout=180, cwd=ROOT, env=cli_env())

    try:
        started = helper("start")
        assert started.returncode == 0, started.stderr
        (export,) = [line for line in started.stdout.splitlines() if "export REPLAYLOG_DB=" in line]
        url = export.split("=", 1)[1].strip().strip("'")
        assert url.startswith("postgresql://") and str(folder.resolve()) in url
        # The server outlives the command that started it, and the URL is the one to use.
        wid = run_cli(url, "start", "refund", "42").stdout.strip()
        assert run_cli(url, "worker", "--until-idle", "--quiet").returncode == 0
        assert wid in run_cli(url, "list").stdout
        again = helper("start")  # a second run finds it running and prints the same URL
        assert again.returncode == 0 and export in again.stdout
        stopped = helper("stop")
        assert stopped.returncode == 0 and "stopped the PostgreSQL server" in stopped.stdout
        try:
            psycopg.connect(url, connect_timeout=5).close()
        except psycopg.OperationalError:
            pass
        else:
            raise AssertionError("the server still answers after stop")
        assert "no PostgreSQL server running" in helper("stop").stdout
    finally:
        helper("stop")
        shutil.rmtree(base, ignore_errors=True)
