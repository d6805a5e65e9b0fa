"""The tests' PostgreSQL server: the one the benchmarks start too (bench/pg_server.py)."""

from bench.pg_server import PGServer

__all__ = ["PGServer"]
