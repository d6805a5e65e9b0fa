"""Finding workflows: the filter fields `list`, the bulk actions, the client and the console share.

A filter is a set of named fields (`status`, `workflow`, `error_text`, …) plus search
attributes (KEY=VALUE, ctx.upsert_search_attributes), every one of which must hold. They
are read here, once, into a `WorkflowFilter` the store turns into SQL; a field this
module does not know is refused in one line naming the fields it does. The console's
filter box writes the same fields as words: `status:failed workflow:charge customer=c-42`
(`parse_query`).
"""

from __future__ import annotations

import re
import shlex
import time
import typing
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from replaylog.engine.core import ErrorKind
from replaylog.engine.errors import StoreError
from replaylog.engine.store import STATUSES, WorkflowFilter

# Each field, and what it takes.
FIELDS: dict[str, str] = {
    "status": "statuses, comma-separated",
    "workflow": "workflow names, comma-separated",
    "queue": "queue names, comma-separated (`start --queue`)",
    "parent": "the id of the workflow that started it (ctx.call_workflow)",
    "forked_from": "the id of the workflow it was forked from",
    "created_after": "an age (2h, 7d: that long ago) or an ISO time",
    "created_before": "an age or an ISO time",
    "updated_after": "an age or an ISO time",
    "updated_before": "an age or an ISO time",
    "error_kind": "what failed it: " + ", ".join(typing.get_args(ErrorKind)),
    "error_text": "words that all occur in its error (full-text search)",
}
ERROR_KINDS: tuple[str, ...] = typing.get_args(ErrorKind)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_ATTRIBUTE = re.compile(r"^([^=\s]+)=(.*)$", re.S)


def is_duration(text: str) -> bool:
    """Whether `text` is an age: a number and a unit, s m h d or w."""
    return _DURATION.match(text) is not None


def parse_duration(text: str, what: str = "a duration") -> float:
    """Seconds in `text`: a number and a unit, s m h d or w ("30d", "12h"); StoreError naming `what` if not."""
    match = _DURATION.match(text)
    if match is None:
        raise StoreError(f"{what} {text!r} is not a duration: write a number and a unit, s, m, h, d or w (30d, 12h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_time(value: str | float | datetime | timedelta, now: float, what: str) -> float:
    """Epoch seconds from an age ("2h", a timedelta: that long before `now`), an ISO date or time
    (UTC unless it names a zone), a datetime or epoch seconds; StoreError naming `what` if none of them."""
    if isinstance(value, timedelta):
        return now - value.total_seconds()
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, int | float):
        return float(value)
    if is_duration(value):
        return now - parse_duration(value, what)
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise StoreError(f"{what} {value!r} is neither an age (30d, 12h, 90m) nor an ISO date or time"
                         " (2026-01-31, 2026-01-31T12:00)") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.strip() for v in (value.split(",") if isinstance(value, str) else value)
                               if v.strip()))


def _choices(field: str, value: str | Iterable[str], allowed: Iterable[str]) -> tuple[str, ...]:
    names, known = _names(value), tuple(allowed)
    wrong = [n for n in names if n not in known]
    if wrong or not names:
        raise StoreError(f"{field} {','.join(wrong) or repr('')} is not one of {', '.join(known)}")
    return names


def attribute_pairs(attributes: Mapping[str, Any] | Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Search attributes as (key, value text): from a dict, or from KEY=VALUE strings (the CLI's --attr)."""
    if isinstance(attributes, Mapping):
        items = list(attributes.items())
    else:
        items = []
        for pair in attributes:
            match = _ATTRIBUTE.match(pair)
            if match is None:
                raise StoreError(f"search attribute {pair!r} is not KEY=VALUE")
            items.append((match.group(1), match.group(2)))
    # Values are indexed as text: true/false as JSON spells them, numbers as written.
    return tuple((str(k), "true" if v is True else "false" if v is False else str(v)) for k, v in items)


def workflow_filter(fields: Mapping[str, Any], attributes: Mapping[str, Any] | Iterable[str] = (),
                    now: float | None = None) -> WorkflowFilter:
    """A WorkflowFilter from named fields (None values left out); an unknown field is refused in one line."""
    given = {k: v for k, v in fields.items() if v is not None and v != () and v != []}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise StoreError(f"unknown filter field {unknown[0]!r}: filter on {', '.join(FIELDS)},"
                         " or a search attribute KEY=VALUE")
    at = time.time() if now is None else now
    times = {f: parse_time(given[f], at, f"--{f.replace('_', '-')}")
             for f in ("created_after", "created_before", "updated_after", "updated_before") if f in given}
    return WorkflowFilter(
        statuses=_choices("status", given["status"], STATUSES) if "status" in given else (),
        workflows=_names(given.get("workflow", ())), queues=_names(given.get("queue", ())),
        parent=given.get("parent"), forked_from=given.get("forked_from"),
        created_after=times.get("created_after"), created_before=times.get("created_before"),
        updated_after=times.get("updated_after"), updated_before=times.get("updated_before"),
        error_kinds=_choices("error_kind", given["error_kind"], ERROR_KINDS) if "error_kind" in given else (),
        error_text=given.get("error_text"), attributes=attribute_pairs(attributes))


def parse_query(text: str, now: float | None = None) -> tuple[WorkflowFilter, str]:
    """The console's filter box: `field:value` words and `KEY=VALUE` search attributes make the filter;
    the other words, joined, are the text an id or a workflow name must hold. Quotes group words
    (`error_text:"card declined"`). StoreError for an unknown field or an unmatched quote."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise StoreError(f"filter {text!r}: {exc}") from None
    fields: dict[str, str] = {}
    attributes: list[str] = []
    rest: list[str] = []
    for word in words:
        field, colon, value = word.partition(":")
        if colon and re.fullmatch(r"[a-z_]+", field):
            fields[field] = value
        elif _ATTRIBUTE.match(word):
            attributes.append(word)
        else:
            rest.append(word)
    return workflow_filter(fields, attributes, now), " ".join(rest)
