"""The compiled parts, optional: the SQLite store's fast path (replaylog/engine/store/sqlite/speedups.py),
the mark file's writer (replaylog/engine/marks.py), and the per-slot modules mypyc compiles
(replaylog/engine/native.py says which and why).

Everything else is in pyproject.toml. Where no C compiler or Python headers are found (or,
for mypyc's modules, no mypy), the build goes on without them and replaylog runs its
pure-Python path (the same answers).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The modules mypyc compiles (replaylog.engine.native.MODULES names the same ones).
NATIVE = ["replaylog/engine/cursor.py", "replaylog/engine/worker/run.py", "replaylog/engine/worker/committer.py"]
# The shared library mypyc builds for them, inside the package (not a top-level module).
NATIVE_GROUP = "replaylog.engine._native"
# Beside the shared library: each source's SHA-256 as compiled (engine.native.MANIFEST).
MANIFEST = "_native_sources.txt"


def _pure() -> bool:
    return os.environ.get("REPLAYLOG_PURE_PYTHON", "") not in ("", "0")


def _native_extensions() -> list[Extension]:
    """mypyc's extensions for NATIVE, or none (said why on stderr) where they cannot be built here."""
    if _pure():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("replaylog: mypy is not installed here: the per-slot modules stay pure Python", file=sys.stderr)
        return []
    try:
        # The build environment holds mypy and setuptools only: the third-party imports of the
        # modules around these two are not there, and only these two are compiled.
        extensions: list[Extension] = mypycify(
            ["--ignore-missing-imports", "--follow-imports=silent", *NATIVE],
            opt_level="3", group_name=NATIVE_GROUP)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure leaves the pure-Python path
        print(f"replaylog: mypyc could not compile the per-slot modules ({exc}): they stay pure Python",
              file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True
    return extensions


class BuildExt(build_ext):
    """build_ext that records, beside mypyc's shared library, the sources its modules were compiled from."""

    def build_extension(self, ext: Any) -> None:
        super().build_extension(ext)  # raises if it failed (an optional one is then only warned of)
        self._built.add(ext.name)

    def run(self) -> None:
        self._built: set[str] = set()
        super().run()
        names = {path.removesuffix(".py").replace("/", ".") for path in NATIVE} | {f"{NATIVE_GROUP}__mypyc"}
        native = [ext for ext in self.extensions if ext.name in names]
        if not native:
            return
        directory = os.path.dirname(self.get_ext_fullpath(f"{NATIVE_GROUP}__mypyc"))
        manifest = os.path.join(directory, MANIFEST)
        if any(ext.name not in self._built for ext in native):
            # One failed (they are optional): none may run, since the modules import the shared
            # library, and no file of an earlier build may pass for this one's.
            for path in [self.get_ext_fullpath(ext.name) for ext in native] + [manifest]:
                if os.path.exists(path):
                    os.remove(path)
            return
        lines = []
        for path in NATIVE:
            with open(path, "rb") as f:
                lines.append(f"{path} {hashlib.sha256(f.read()).hexdigest()}\n")
        os.makedirs(directory, exist_ok=True)
        with open(manifest, "w", encoding="utf-8") as f:
            f.writelines(lines)


extensions: list[Any] = [
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
    *_native_extensions(),
]

setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
