"""The example web service (examples/web_app.py) runs: a real server process, real requests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from conftest import ROOT, cli_env


def _call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_web_example_starts_follows_approves_and_finishes_an_order(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "web_app.py"), "--db", str(tmp_path / "o.db"),
                             "--port", "0"], cwd=tmp_path, env=cli_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line + (proc.stderr.read() if proc.stderr else "")
        base = line.split()[-1]
        code, made = _call("POST", f"{base}/orders", {"items": ["mug", "lamp"]})
        assert code == 201
        order = f"{base}/orders/{made['id']}"
        code, shown = _call("GET", f"{order}?wait=0.5")  # it waits for the approval: not finished
        assert code == 200 and shown["status"] in ("pending", "running", "blocked")
        assert _call("POST", f"{order}/approve", {"by": "grace"})[0] == 202
        code, shown = _call("GET", f"{order}?wait=60")
        assert code == 200 and shown["status"] == "completed", shown
        assert shown["result"] == {"status": "shipped", "items": ["mug", "lamp"], "approved_by": "grace"}
        assert shown["events"] == {"progress": {"packed": 2, "of": 2}, "stage": "shipped"}
        assert _call("GET", f"{base}/orders/nope")[0] == 404
        bad = urllib.request.Request(f"{base}/orders", data=b"{not json", method="POST")
        try:
            urllib.request.urlopen(bad, timeout=60)
        except urllib.error.HTTPError as exc:
            assert exc.code == 400 and "not JSON" in json.loads(exc.read())["error"]
        else:
            raise AssertionError("a body that is not JSON was accepted")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped" in out
