"""The SQLite store: one file shared by the processes of one host (`store.SQLiteStore`).

One mixin per concern over one connection: `connection` (opening, WAL, transactions,
upkeep), `schema` (version 1 and taking the shared migrations), `operations` (inserting a
workflow row), `leases` (claims, renewals, hand-backs), `commit` (group commit) with
`fence` (the commit fence, a speed trick), `inflight` (folding start marks), `workers`
(a worker's row). The reads and operator writes are the shared ones
(`engine.store.shared`).
"""
