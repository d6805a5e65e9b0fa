"""In-flight start marks in shared memory: one small file per worker process, beside the database.

Before an activity runs, its worker records that it started (slot, name, attempt
count), so that after a crash `show` and the console can mark the activity that
possibly ran. That mark is on every slot's path, and as a SQLite transaction it cost as
much as a fifth of the slot (a statement, a WAL page, more bytes for the next fsync) and,
with many workflows in one worker, a wait for the group commit. Here it is a few stores
into a memory-mapped file instead: no lock, no wait, no system call. Such a write
survives the death of the process (the pages belong to the kernel's page cache) though
not a power loss, which the mark is allowed to lose: it only ever says "possibly ran".

Layout: `<database>-inflight/<pid>-<tag>.marks`, one per worker process (the folder
0700, the files 0600). A header names the owner (the lease owner id the worker writes
under); then one fixed-size record per workflow thread, each holding that thread's
latest mark. A record is written as a seqlock: its sequence number turns odd, the body
is written, the number turns even; a reader copies the file twice and keeps a record
only where both copies hold the same even number, so it never sees a torn mark.

The marks of a dead worker are folded into the database's `inflight` table by the next
worker (the store's `fold_marks`), which then deletes the file. WAL needs every process
on one host anyway, so a pid says whether a file's writer is alive.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from replaylog.engine.compiled import PURE_ENV, path_name, pure_requested

MAGIC = b"RPLGMRK1"
_HEADER = struct.Struct("<8sII256s")  # magic, format version, record count, owner id (UTF-8, NUL-padded)
# 2: the fields are 8-byte words in the machine's own byte order (the file never leaves
# its host), written one by one through memoryviews. 3: a word more, the mark's lane.
_VERSION = 3
RECORD = 1024
_SEQ = struct.Struct("=Q")
# Room for any workflow id whole: the store allows 200 characters, at most 4 bytes each in
# UTF-8. (Readers match marks to workflows by id, so an id is never clipped; a name only
# labels the mark and is clipped to what is left.)
_ID_MAX = 800
# After the sequence number: epoch, slot, attempts, started_at, lane (one 8-byte word each,
# words 1-5 of the record), then len(workflow id), len(name), workflow id, name. The lane is
# the store's (0: the workflow's own thread; k: the k-th task of a parallel group).
_FIXED = "=qqqdqII"
_TEXT_AT = _SEQ.size + struct.calcsize("=qqqdq")
_NAME_MAX = RECORD - _SEQ.size - struct.calcsize(_FIXED) - _ID_MAX
_BODY = struct.Struct(f"{_FIXED}{_ID_MAX}s{_NAME_MAX}s")
_TEXTS = struct.Struct(f"=II{_ID_MAX}s{_NAME_MAX}s")
# How each format's records are read: (sequence number, body). Formats 1 and 2 (before
# 2 and 4 December 2026) are still read, so that the marks of a worker of an earlier
# version that died are kept by the next one (in lane 0).
_LAYOUTS = {
    1: (struct.Struct("<Q"), struct.Struct(f"<QqIdHH{_ID_MAX}s{RECORD - 8 - struct.calcsize('<QqIdHH') - _ID_MAX}s")),
    2: (_SEQ, struct.Struct(f"=qqqdII{_ID_MAX}s{RECORD - _SEQ.size - struct.calcsize('=qqqdII') - _ID_MAX}s")),
    _VERSION: (_SEQ, _BODY),
}
_FILE_RE = re.compile(r"^(\d+)-([0-9a-f]+)\.marks$")


def _compiled() -> tuple[ModuleType | None, str]:
    """The compiled writer (`_marks.c`), unless it was not built or REPLAYLOG_PURE_PYTHON is set (and why)."""
    if pure_requested():
        return None, f"{PURE_ENV} is set"
    try:
        from replaylog.engine import _marks
    except ImportError:
        return None, "the C file was not built: no C compiler or Python headers at install"
    return _marks, ""


# Where built, marks are written by `_marks.c`: the same bytes as `MarkBoard.writer`'s Python
# closure, ~3,100 CPU instructions a slot fewer (callgrind, one workflow of 2,000 and 6,000
# slots: 58,637 -> 55,512 a slot, where no marks at all cost 54,680).
COMPILED, _PURE_BECAUSE = _compiled()


def writer_path() -> str:
    """Which writer writes the start marks in this process: "compiled", or "pure Python (why)" (`--version`)."""
    return path_name(COMPILED, _PURE_BECAUSE)


@dataclass(frozen=True)
class Mark:
    """One started activity as a worker recorded it: it possibly ran if no outcome followed."""

    workflow_id: str
    epoch: int
    slot: int
    name: str
    attempts: int
    started_at: float
    owner: str
    lane: int = 0  # 0: the workflow's own thread; k: the k-th task of the parallel group running


def marks_dir(db_path: str | os.PathLike[str]) -> Path:
    """The folder beside the database that holds the workers' mark files."""
    return Path(f"{db_path}-inflight")


def board_path(db_path: str | os.PathLike[str], owner: str) -> Path | None:
    """The mark file of the worker with lease owner id `owner` ("host:pid:tag"), or None if it has none."""
    parts = owner.split(":")
    if len(parts) < 3 or not parts[-2].isdigit() or not re.fullmatch(r"[0-9a-f]+", parts[-1]):
        return None
    return marks_dir(db_path) / f"{parts[-2]}-{parts[-1]}.marks"


def _clip(text: str, limit: int) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return raw
    # Cut on a character boundary; a clipped name only labels the mark.
    return raw[:limit].decode("utf-8", "ignore").encode("utf-8")


class MarkBoard:
    """A worker's own mark file: `write` records a start in a thread's record, with no lock or wait."""

    def __init__(self, db_path: str | os.PathLike[str], owner: str, records: int) -> None:
        path = board_path(db_path, owner)
        if path is None:
            raise ValueError(f"owner id {owner!r} is not host:pid:tag")
        self.path = path
        self.owner = owner
        self.records = records
        size = _HEADER.size + records * RECORD
        for _ in range(3):
            path.parent.mkdir(mode=0o700, exist_ok=True)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
                break
            except FileNotFoundError:
                continue  # a worker that stopped just then removed the folder it found empty
        else:
            raise FileNotFoundError(f"cannot create {path}")
        try:
            os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._mm[:_HEADER.size] = _HEADER.pack(MAGIC, _VERSION, records, _clip(owner, 256))
        # The compiled writer's hold on the file (None: the Python writer writes).
        self._board = None if COMPILED is None else COMPILED.Board(self._mm, RECORD, _TEXT_AT, _ID_MAX, _NAME_MAX)
        # A mark is written as single words through these views: a struct.pack_into call
        # (argument parsing, a buffer export) cost ~800 CPU instructions, a word ~60, and
        # a mark is written before every activity (README, Performance).
        self._view = memoryview(self._mm)
        self._words = self._view.cast("q")
        self._floats = self._view.cast("d")
        self._names: dict[str, bytes] = {}

    def write(self, index: int, workflow_id: str, epoch: int, slot: int, name: str, attempts: int,
              started_at: float, lane: int = 0) -> None:
        """Record in record `index` (the calling thread's own) that an activity is about to run."""
        self.writer(index, workflow_id, epoch, lane)(slot, name, attempts, started_at)

    def writer(self, index: int, workflow_id: str, epoch: int,
               lane: int = 0) -> Callable[[int, str, int, float], None]:
        """A function that writes marks of one run (`workflow_id` under lease `epoch`, in `lane`) into record `index`.

        Called as `mark(slot, name, attempts, started_at)` before every activity of the
        run. The record's id and epoch are written once here and its name only when it
        changes; a mark then writes three words and a float under its sequence number
        (a struct.pack_into call cost ~800 CPU instructions, a word ~60).
        """
        wid = workflow_id.encode("utf-8")
        if len(wid) > _ID_MAX:
            raise ValueError(f"workflow id {workflow_id[:40]!r}… is longer than a mark can hold")
        clip = self._name_bytes
        if self._board is not None:
            written: Callable[[int, str, int, float], None] = self._board.writer(
                _HEADER.size + index * RECORD, wid, epoch, lane, clip)
            return written
        words, floats = self._words, self._floats
        at = (_HEADER.size + index * RECORD) >> 3  # the record's first word (both sizes are multiples of 8)
        last: list[str | None] = [None]  # the name this writer last wrote; its first mark writes epoch, id and name

        def mark(slot: int, name: str, attempts: int, started_at: float) -> None:
            # (The record's sequence number is read from the file: only this process writes it.)
            seq = words[at] + 1
            words[at] = seq  # odd: being written
            if name is not last[0]:  # the same str object, slot after slot, for one activity
                nm = clip(name)
                words[at + 1] = epoch
                words[at + 5] = lane
                _TEXTS.pack_into(self._mm, (at << 3) + _TEXT_AT, len(wid), len(nm), wid, nm)
                last[0] = name
            words[at + 2] = slot
            words[at + 3] = attempts
            floats[at + 4] = started_at
            words[at] = seq + 1  # even: whole

        return mark

    def _name_bytes(self, name: str) -> bytes:
        """An activity name as a record holds it (clipped), kept: a few names, written over and over."""
        raw = self._names.get(name)
        if raw is None:
            raw = self._names[name] = _clip(name, _NAME_MAX)
        return raw

    def read(self, index: int) -> Mark | None:
        """The mark in record `index` as this process last wrote it, or None if it never wrote one.

        For the thread that owns the record (its writes are all done when it reads).
        """
        if self._words[(_HEADER.size + index * RECORD) >> 3] == 0:
            return None
        return _decode(_BODY, self._mm, _HEADER.size + index * RECORD + _SEQ.size, self.owner)

    def marks(self) -> list[Mark]:
        """The marks in this board now."""
        return read_board(self.path) or []

    def close(self, *, remove: bool) -> None:
        """Unmap the file; with `remove`, delete it (its marks are folded or no longer matter)."""
        if self._board is not None:
            self._board.close()  # its writers refuse from now on
        for view in (self._words, self._floats, self._view):
            view.release()  # an mmap with views into it cannot be closed
        self._mm.close()
        if remove:
            self.path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: another worker has a file there
                self.path.parent.rmdir()


def _parse(data: bytes, again: bytes) -> tuple[str, list[Mark]] | None:
    if len(data) < _HEADER.size or data[:8] != MAGIC:
        return None
    _, version, records, raw_owner = _HEADER.unpack_from(data, 0)
    if version not in _LAYOUTS:
        return None
    seq_of, body_of = _LAYOUTS[version]
    owner = raw_owner.rstrip(b"\0").decode("utf-8", "replace")
    out = []
    for i in range(records):
        off = _HEADER.size + i * RECORD
        if off + RECORD > min(len(data), len(again)):
            break
        (seq,) = seq_of.unpack_from(data, off)
        if seq == 0 or seq & 1 or seq_of.unpack_from(again, off)[0] != seq:
            continue  # never written, being written, or rewritten while it was read
        mark = _decode(body_of, data, off + 8, owner)
        if mark is not None:
            out.append(mark)
    return owner, out


def _decode(body: struct.Struct, buf: bytes | mmap.mmap, off: int, owner: str) -> Mark | None:
    """The mark whose body (after its sequence number) starts at `off`; None if its lengths are impossible."""
    fields = body.unpack_from(buf, off)
    epoch, slot, attempts, started_at = fields[:4]
    lane = fields[4] if len(fields) == 9 else 0
    id_len, name_len, raw_id, raw_name = fields[-4:]
    if id_len > _ID_MAX or name_len > len(raw_name):
        return None
    wid, name = raw_id[:id_len].decode("utf-8", "replace"), raw_name[:name_len].decode("utf-8", "replace")
    return Mark(wid, epoch, slot, name, attempts, started_at, owner, lane)


def read_board(path: Path) -> list[Mark] | None:
    """The whole marks of one file, or None if it is missing or not a mark file.

    Read twice: a record is kept only if its sequence number is even and the same in
    both reads, so that a mark being written while it was read is skipped, never torn.
    """
    try:
        data = path.read_bytes()
        again = path.read_bytes()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        return None
    parsed = _parse(data, again)
    return None if parsed is None else parsed[1]


def board_owner(path: Path) -> str | None:
    """The lease owner id ("host:pid:tag") a mark file was written under, or None if unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
    except OSError:
        return None
    if len(head) < _HEADER.size or head[:8] != MAGIC:
        return None
    owner: bytes = _HEADER.unpack(head)[3]
    return owner.rstrip(b"\0").decode("utf-8", "replace")


def board_files(db_path: str | os.PathLike[str]) -> list[tuple[Path, int]]:
    """Every mark file beside the database, with the pid of the worker that wrote it."""
    try:
        names = os.listdir(marks_dir(db_path))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    out = []
    for name in names:
        m = _FILE_RE.match(name)
        if m:
            out.append((marks_dir(db_path) / name, int(m.group(1))))
    return out


def read_marks(db_path: str | os.PathLike[str], workflow_id: str | None = None) -> list[Mark]:
    """The marks in every worker's file (of one workflow, if given)."""
    out = []
    for path, _ in board_files(db_path):
        for mark in read_board(path) or []:
            if workflow_id is None or mark.workflow_id == workflow_id:
                out.append(mark)
    return out
