"""Parameters in PostgreSQL's text format, for the statements sent to libpq past psycopg.

A lone workflow's slot statement and its start mark are sent prepared, their parameters
already text (PGConnection._execute_raw, _send_unanswered). What a claim holds for its
whole run (its id, owner and lease epoch) is encoded once per claim here, not
once per slot.
"""

from __future__ import annotations

from replaylog.engine.store.rows import Claim

# Claim id -> (its lease epoch and owner, then the claim's id, owner and epoch as text). A
# claim of the same workflow under another lease replaces its entry; a worker runs at most
# a few thousand workflows between two clears.
_CLAIMS: dict[str, tuple[int, str, tuple[bytes, bytes, bytes]]] = {}
_CLAIMS_KEPT = 4096


def claim_text(claim: Claim) -> tuple[bytes, bytes, bytes]:
    """`claim`'s id, owner and lease epoch as PostgreSQL reads them in text."""
    kept = _CLAIMS.get(claim.id)
    if kept is not None and kept[0] == claim.epoch and kept[1] == claim.owner:
        return kept[2]
    if len(_CLAIMS) >= _CLAIMS_KEPT:
        _CLAIMS.clear()
    text = (claim.id.encode(), claim.owner.encode(), b"%d" % claim.epoch)
    _CLAIMS[claim.id] = (claim.epoch, claim.owner, text)
    return text
