"""Every Python and shell example in README.md and the docs that teach (DOCUMENTS) runs, so none can rot.

The convention, for whoever writes the docs:

- A ```python block must start with a `# file: NAME.py` line: it is written to that file
  in the document's folder, and the shell blocks after it use it (`--app NAME`). A
  ```python block without that line fails this test: there is no Python example a
  reader can copy that the suite does not load.
- A ```sh block runs, in the order the document gives it, with `bash -e -u -o pipefail`
  in one temporary folder per document (files and the database carry over from block
  to block; shell variables do not). `replaylog` is this checkout's (the venv's bin
  first on PATH), the database is `replaylog.db` in that folder through `$REPLAYLOG_DB`,
  and `$REPLAYLOG_APP` is unset. A block that exits non-zero fails the test, naming the
  document and the line its block starts on. A command that is meant to fail is written
  so that the block still succeeds (`replaylog check x || echo "diverged"`).
- A block that is not meant to run says so in its info string: ```sh no-run (it renders
  as shell; use it for `make demo`, a long-running worker, a console) or ```text (output,
  usage lines).
- Other info strings (```json, ```text, ```sql …) are never run.

The examples use a worker with `--until-idle`, never a long-running one, so the whole
README runs in seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", "docs/tutorial.md", "docs/workflows.md", "docs/client.md", "docs/testing.md",
             "docs/async.md", "docs/flow-control.md"]
FENCE = re.compile(r"^```(\S*)(.*)$")
FILE_LINE = re.compile(r"^# file: (\S+\.py)\s*$")
# One block's time limit: a worker --until-idle on a workflow or two takes about a second.
BLOCK_TIMEOUT = 120


@dataclass
class Block:
    """One fenced block: its language, extra info words, first line number (1-based) and text."""

    lang: str
    info: str
    line: int
    text: str


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order (nested fences are not used in our docs)."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if m is None:
            i += 1
            continue
        start, lang, info = i + 1, m.group(1), m.group(2).strip()
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{path.name}:{start}: a ``` block that is never closed")
        # An indented fence (inside a list item) keeps its indentation in the lines: take it off.
        indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
        out.append(Block(lang, info, start, "\n".join(line[indent:] for line in body) + "\n"))
        i += 1
    return out


def runnable(block: Block) -> bool:
    """Whether the test runs (sh) or writes (python) this block."""
    return block.lang in ("python", "sh") and "no-run" not in block.info.split()


def run_document(doc: str, folder: Path) -> None:
    """Write the document's Python files and run its shell blocks in order, in `folder`."""
    path = ROOT / doc
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYLOG_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["REPLAYLOG_DB"] = str(folder / "replaylog.db")
    env["COLUMNS"] = "120"
    for block in filter(runnable, blocks(path)):
        where = f"{doc}:{block.line}"
        if block.lang == "python":
            m = FILE_LINE.match(block.text.splitlines()[0])
            assert m, f"{where}: a ```python block must start with '# file: NAME.py' (or be ```python no-run)"
            target = folder / m.group(1)
            target.write_text(block.text, encoding="utf-8")
            # Loaded here too, so an example that does not even import fails at its own line.
            check = subprocess.run([sys.executable, "-c", f"import {target.stem}"], cwd=folder, env=env,
                                   capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
            assert check.returncode == 0, f"{where}: {target.name} does not import:\n{check.stderr}"
            continue
        done = subprocess.run(["bash", "-e", "-u", "-o", "pipefail", "-c", block.text], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
        assert done.returncode == 0, (
            f"{where}: the shell block exited {done.returncode}\n--- block\n{block.text}"
            f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_every_example_in_the_document_runs(doc: str, tmp_path: Path) -> None:
    """The document's examples run in order against a real store and exit 0."""
    assert any(runnable(b) and b.lang == "sh" for b in blocks(ROOT / doc)), f"{doc} has no shell example to run"
    run_document(doc, tmp_path)


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_every_code_block_is_marked(doc: str) -> None:
    """A fence without a language is a block nobody decided about: run it (sh, python) or say it is text."""
    bare = [b.line for b in blocks(ROOT / doc) if not b.lang]
    assert not bare, f"{doc}: blocks without an info string at lines {bare} (use sh, python, text, …)"


def test_a_failing_block_is_reported_with_its_line(tmp_path: Path) -> None:
    """The runner itself: a shell block that fails names its document and the line it starts on."""
    doc = tmp_path / "doc.md"
    doc.write_text("# t\n\n```sh\ntrue\n```\n\ntext\n\n```sh\nreplaylog show no-such-id\n```\n", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    rel = os.path.relpath(doc, ROOT)
    with pytest.raises(AssertionError, match=re.escape(f"{rel}:9: the shell block exited 1")):
        run_document(rel, work)
