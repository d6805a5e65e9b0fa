"""PostgreSQL store locations: which strings name one, and how to show one without its password."""

from __future__ import annotations

import re

SCHEMES = ("postgresql://", "postgres://")
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:?#]*):[^@/?#]*@")
_PARAM_PASSWORD = re.compile(r"(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)")
HIDDEN = "***"


def is_postgres_url(location: object) -> bool:
    """Whether a store location is a PostgreSQL URL (postgresql:// or postgres://)."""
    return isinstance(location, str) and location.lower().startswith(SCHEMES)


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***: what output, errors and titles may show.

    Covers the password of the user part (`postgresql://user:secret@host/db`) and a
    `password=` parameter (`?password=secret`, or a key/value conninfo string).
    """
    url = _USERINFO_PASSWORD.sub(rf"\1:{HIDDEN}@", url)
    return _PARAM_PASSWORD.sub(rf"\1{HIDDEN}", url)


def redact_text(text: str, url: str) -> str:
    """A message (a driver's error, say) with the URL's password hidden wherever it appears."""
    secrets = [m.group(0).rsplit(":", 1)[-1][:-1] for m in [_USERINFO_PASSWORD.match(url)] if m]
    secrets += [m.group(2).strip("'") for m in _PARAM_PASSWORD.finditer(url)]
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
    return redact_url(text)
