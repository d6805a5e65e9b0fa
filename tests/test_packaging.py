"""The distribution installs one import name: `replaylog` (nothing called `engine` or `console`)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT


def test_the_wheel_holds_only_the_replaylog_package(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("replaylog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"replaylog"}
    # What the installed package needs besides its modules: the console's stylesheet and
    # the PEP 561 marker, so a user's type checker reads the authoring API's types.
    assert {"replaylog/console/app.tcss", "replaylog/py.typed", "replaylog/samples/__init__.py"} <= set(names)
