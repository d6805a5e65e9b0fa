"""The traceback of a failure raised by workflow or activity code: the user's frames, as text.

A failure's traceback is recorded beside its error (a failed workflow's, a failed
activity slot's) so that `show`, the console and the worker log can say where it was
raised. The engine's own frames (the worker, the replay core) sit between the user's and
say nothing about the bug, so they are left out. A file under the worker's working
directory (the app's project, usually) is named relative to it, as a reader there would
type it, and the same on every machine the project is checked out on.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

from replaylog.engine.native import MODULES

# Frames of files under replaylog/engine/ are the engine's (the bundled sample app and the
# console are not on a workflow's call path, and the samples are user code to their reader).
_ENGINE_DIRS = tuple({str(Path(__file__).parent) + os.sep, str(Path(__file__).resolve().parent) + os.sep})
# A compiled module's frames (engine.native) name the file it was compiled from as setup.py
# gave it to mypyc, relative to the package's parent: the engine's too.
_COMPILED = frozenset(f"{name.replace('.', os.sep)}.py" for name in MODULES)


_ERRORS_MODULE = "replaylog.engine.errors."
# The standard library's frames are shown (json's decoder, say) but are nobody's code of their own.
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")})


def _engines(frame: traceback.FrameSummary) -> bool:
    return frame.filename.startswith(_ENGINE_DIRS) or frame.filename in _COMPILED


def user_traceback(exc: BaseException) -> str | None:
    """`exc`'s traceback as Python prints it, chained exceptions included, without the engine's frames.

    None when no frame of the user's (neither the engine's nor the standard library's) is
    in the chain (the engine raised it on its own): the error text then says all there is.
    """
    shown = traceback.TracebackException.from_exception(exc)  # reads the source lines: paths may change after
    try:
        here = os.getcwd() + os.sep
    except OSError:  # the working directory was removed: names stay absolute
        here = None
    user_frames = 0
    seen: set[int] = set()
    pending = [shown]
    while pending:
        one = pending.pop()
        if id(one) in seen:
            continue
        seen.add(id(one))
        kept = [frame for frame in one.stack if not _engines(frame)]
        user_frames += sum(not frame.filename.startswith(_STDLIB) for frame in kept)
        for frame in kept:
            if here is not None and frame.filename.startswith(here):
                frame.filename = frame.filename[len(here):]
        one.stack = traceback.StackSummary.from_list(kept)
        # The exceptions it is printed with: its cause, else its context unless suppressed (`from None`).
        chained = one.__cause__ or (None if one.__suppress_context__ else one.__context__)
        if chained is not None:
            pending.append(chained)
        pending.extend(getattr(one, "exceptions", None) or ())  # an exception group's members
    if not user_frames:
        return None
    # An exception's line (never indented) names replaylog's errors as the user imports them.
    lines = "".join(shown.format()).rstrip("\n").split("\n")
    return "\n".join(line if line[:1].isspace() else line.replace(_ERRORS_MODULE, "replaylog.") for line in lines)
