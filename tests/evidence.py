"""Evidence test apps leave outside the database: ledger lines, and a process killed once."""

from __future__ import annotations

import os
import signal


def append_line(path: str | None, line: str) -> None:
    """Append one line to the file at `path` (nothing if None): one O_APPEND write, atomic across processes."""
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def kill_once(marker: str) -> None:
    """SIGKILL this process the first time any process gets here with `marker` (a file it creates)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)
