"""The compiled parts, optional: the SQLite store's fast path (replaylog/engine/store/sqlite/speedups.py)
and the mark file's writer (replaylog/engine/marks.py).

Everything else is in pyproject.toml. Where no C compiler or Python headers are found, the
build goes on without it and replaylog runs its pure-Python path (the same answers).
"""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "replaylog.engine.store.sqlite._speedups",
            sources=["replaylog/engine/store/sqlite/_speedups.c"],
            # dlopen and dlsym: in libc itself from glibc 2.34, in libdl before.
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        Extension(
            "replaylog.engine._marks",
            sources=["replaylog/engine/_marks.c"],
            optional=True,
        ),
    ],
)
