"""The PostgreSQL backend of the log store: the same protocols as the SQLite one, for workers on many hosts.

Modules, one concern each: `url` (which locations are ours, redacting passwords),
`schema` (the replaylog schema and its version), `connection` (the connection, retries
across faults, LISTEN/NOTIFY), `reads` (what is in flight), `operations` (inserting a
workflow row), `leases` (claims, renewals, start marks), `commit` (group commit),
`workers`, `store` (the class made of them). The reads and operator writes themselves
are the shared ones (engine.store.shared_reads, engine.store.shared_operations).
"""

from replaylog.engine.store.postgres.url import is_postgres_url, redact_url

__all__ = ["is_postgres_url", "redact_url"]
