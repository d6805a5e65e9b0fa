"""Parameters as PostgreSQL reads them, for the statements sent to libpq past psycopg.

A lone workflow's slot statement and its start mark are sent prepared, their parameters
already encoded (PGConnection._execute_raw, _send_unanswered): text, but for times, which
go in binary (`float8`). What a claim holds for its whole run (its id, owner and lease
epoch) is encoded once per claim here, not once per slot.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

from replaylog.engine.store.rows import Claim

# Trick "binary times": a time is a float of ~1.8e9 seconds with a fraction, and its text
# (float.__repr__, the shortest digits that read back as the same float) takes 17
# significant digits, which CPython's float-to-text works out with big-number arithmetic:
# ~7,000 CPU instructions each, three a lone slot (its time, its lease's expiry, its start
# mark's), a sixth of all the worker spent on one. In PostgreSQL's binary float8 format
# (8 bytes, IEEE 754 in network order) it costs ~150 and is exact. Counted under callgrind,
# one workflow in an in-process worker: ~121,000 -> ~98,000 instructions a slot (marks on).
float8 = struct.Struct("!d").pack


# Arrays in PostgreSQL's binary format (array_recv): a header (one dimension, the
# has-nulls flag, which the server does not trust, the element type's OID, the length, the
# lower bound 1), then each element as its length and its bytes (-1: NULL). A batch of
# slots goes as one array a column (engine.store.postgres.commit, "one statement a batch"):
# no quoting to get right, and nothing for the server to parse.
_ARRAY_HEAD = struct.Struct("!iiIii").pack
_NULL = b"\xff\xff\xff\xff"
_SIZE = struct.Struct("!i").pack


def _array(oid: int, element: Callable[[Any], bytes], items: Sequence[Any]) -> bytes:
    """A one-dimensional array of type `oid` in binary format, each item as `element` packs it; None is NULL.

    A value out of its type's range (an int past int's) raises OverflowError.
    """
    try:
        return _ARRAY_HEAD(1, 1, oid, len(items), 1) + b"".join(
            _NULL if item is None else element(item) for item in items)
    except struct.error as exc:
        raise OverflowError(f"an array element out of range: {exc}") from None


def _text(item: bytes) -> bytes:
    return _SIZE(len(item)) + item


text_array = functools.partial(_array, 25, _text)  # text[]: bytes (None: NULL)
int8_array = functools.partial(_array, 20, functools.partial(struct.Struct("!iq").pack, 8))  # bigint[]
int4_array = functools.partial(_array, 23, functools.partial(struct.Struct("!ii").pack, 4))  # int[]
float8_array = functools.partial(_array, 701, functools.partial(struct.Struct("!id").pack, 8))  # double precision[]
bool_array = functools.partial(_array, 16, functools.partial(struct.Struct("!i?").pack, 1))  # boolean[]


def formats(count: int, binary: Sequence[int]) -> tuple[int, ...]:
    """libpq's parameter formats for `count` parameters: binary (1) at the 0-based positions `binary`, else text (0)."""
    return tuple(1 if i in binary else 0 for i in range(count))

# Claim id -> (its lease epoch and owner, then the claim's id, owner and epoch as text). A
# claim of the same workflow under another lease replaces its entry; a worker runs at most
# a few thousand workflows between two clears.
_CLAIMS: dict[str, tuple[int, str, tuple[bytes, bytes, bytes]]] = {}
_CLAIMS_KEPT = 4096


# The claim asked for last and its text: a lone workflow asks twice a slot (its slot and its
# start mark) with the very same Claim object, a named tuple, so never changed; one
# assignment of a tuple, so threads see the pair whole (~20 bytecodes a call fewer, ~1,000
# CPU instructions a slot).
_LAST: tuple[Claim | None, tuple[bytes, bytes, bytes]] = (None, (b"", b"", b""))


def claim_text(claim: Claim) -> tuple[bytes, bytes, bytes]:
    """`claim`'s id, owner and lease epoch as PostgreSQL reads them in text."""
    global _LAST
    last = _LAST
    if last[0] is claim:
        return last[1]
    kept = _CLAIMS.get(claim.id)
    if kept is not None and kept[0] == claim.epoch and kept[1] == claim.owner:
        text = kept[2]
    else:
        if len(_CLAIMS) >= _CLAIMS_KEPT:
            _CLAIMS.clear()
        text = (claim.id.encode(), claim.owner.encode(), b"%d" % claim.epoch)
        _CLAIMS[claim.id] = (claim.epoch, claim.owner, text)
    _LAST = (claim, text)
    return text
