"""Loading an APP: a dotted module or a .py file that holds @workflow / @activity functions."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from replaylog.engine.core import decorated_in, error_text, forget_decorated
from replaylog.engine.errors import ReplaylogError, UnknownWorkflowError
from replaylog.engine.queues import Queue, declared_in, forget_declared
from replaylog.engine.retry import RetryPolicy, app_default

DEFAULT_APP = "replaylog.samples"


class AppImportError(ReplaylogError):
    """The APP could not be imported."""


def _source(fn: Callable[..., Any]) -> str | None:
    """Where a function was written, as file:line (the path relative to the current folder when
    inside it, else the file's name); None where Python does not know (a builtin, say).

    Never the module's name: an app given as a file is imported under a made-up one
    (replaylog_app_…) that means nothing to its author.
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    path = Path(code.co_filename)
    try:
        shown = str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        shown = path.name
    return f"{shown}:{code.co_firstlineno}"


def _place(fn: Callable[..., Any]) -> str:
    """A function for a load error that names two of them: its Python name and file:line."""
    source = _source(fn)
    name = getattr(fn, "__qualname__", repr(fn))
    return f"{name} ({source})" if source else name


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """The function's parameters, or None where Python cannot tell (a builtin, say)."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def parameters_text(fn: Callable[..., Any]) -> str:
    """The parameter list as written, without annotations: `(ctx, order=None)`."""
    params = _parameters(fn)
    if params is None:
        return "(...)"
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in params]
    return str(inspect.Signature(bare))


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _input_params(fn: Callable[..., Any]) -> tuple[bool, bool] | None:
    """(takes an input, needs one) for a workflow called as fn(ctx) or fn(ctx, input); None if unknown."""
    params = _parameters(fn)
    if params is None:
        return None
    positional = [p for p in params if p.kind in _POSITIONAL]
    star = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    after_ctx = positional[1:]
    takes = bool(after_ctx) or star
    needs = bool(after_ctx) and after_ctx[0].default is inspect.Parameter.empty
    return takes, needs


def _signature_problem(name: str, fn: Callable[..., Any]) -> str | None:
    """Why a workflow function can never be called as fn(ctx) nor fn(ctx, input), if it cannot."""
    params = _parameters(fn)
    if params is None:
        return None
    positional = [p for p in params if p.kind in _POSITIONAL]
    star = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    source = _source(fn)
    head = f"workflow {name!r}{f' ({source})' if source else ''} takes {parameters_text(fn)}"
    if not positional and not star:
        return f"{head}: a workflow takes ctx as its first parameter"
    required = [p.name for p in positional[1:] if p.default is inspect.Parameter.empty]
    if len(required) > 1:
        return (f"{head}: a workflow receives one input value, so at most one parameter after ctx may lack"
                " a default (take one list or object instead)")
    kw = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty]
    if kw:
        return f"{head}: keyword-only parameter {kw[0]!r} has no default, and a workflow is never given one"
    return None


@dataclass
class Registry:
    """The workflows and activities an app defines, by recorded name."""

    spec: str
    workflows: dict[str, Callable[..., Any]] = field(default_factory=dict)
    activities: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # The queues the app declares (engine.queues), by name: its workers record them in the store.
    queues: dict[str, Queue] = field(default_factory=dict)
    # The app's default retry policy (engine.retry.default_retry in its module), if it set one.
    retry: RetryPolicy | None = None

    @classmethod
    def from_module(cls, module: ModuleType, spec: str | None = None) -> Registry:
        """Collect what a module decorated at its top level, and decorated functions its namespace holds.

        Registration is by recorded name: two functions with one Python name and two
        recorded names both register. AppImportError if two workflows (or two
        activities) share a recorded name, or a workflow can never be called.
        """
        # The namespace too: functions imported from other modules count, as they always did.
        reg = cls.from_functions([*decorated_in(module.__name__), *declared_in(module.__name__),
                                  *vars(module).values()], spec or module.__name__)
        reg.retry = app_default(module.__name__)
        return reg

    @classmethod
    def from_functions(cls, functions: Iterable[Any], spec: str) -> Registry:
        """Collect the @workflow and @activity functions and the Queues among `functions` (anything else is
        passed over).

        AppImportError as `from_module` raises it, and for two queues of one name with different limits.
        """
        reg = cls(spec)
        candidates: dict[int, Callable[..., Any]] = {}
        for value in functions:
            if isinstance(value, Queue):
                other_queue = reg.queues.setdefault(value.name, value)
                if other_queue != value:
                    raise AppImportError(f"app {reg.spec!r} declares queue {value.name!r} twice, with different"
                                         f" limits: {other_queue.limits_text()} and {value.limits_text()}")
            elif getattr(value, "_replaylog_kind", None) in ("workflow", "activity"):
                candidates.setdefault(id(value), value)
        for fn in candidates.values():
            kind, name = fn._replaylog_kind, fn._replaylog_name  # type: ignore[attr-defined]
            table = reg.workflows if kind == "workflow" else reg.activities
            other = table.get(name)
            if other is not None and other is not fn:
                raise AppImportError(
                    f"app {reg.spec!r} registers {kind} {name!r} twice: {_place(other)} and {_place(fn)}")
            table[name] = fn
        for name, fn in reg.workflows.items():
            problem = _signature_problem(name, fn)
            if problem is not None:
                raise AppImportError(f"app {reg.spec!r}: {problem}")
        return reg

    def workflow(self, name: str) -> Callable[..., Any]:
        """The workflow function of that name; UnknownWorkflowError if the app has none."""
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise UnknownWorkflowError(f"unknown workflow {name!r} in app {self.spec!r} (known: {known})") from None

    def input_refusal(self, name: str, given: bool) -> str | None:
        """Why workflow `name` cannot be started with (given=True) or without an input; None if it can."""
        fn = self.workflow(name)
        shape = _input_params(fn)
        if shape is None:
            return None
        takes, needs = shape
        if given and not takes:
            return f"workflow {name!r} takes no input {parameters_text(fn)}: start it without INPUT_JSON"
        if not given and needs:
            return f"workflow {name!r} needs an input {parameters_text(fn)}: give INPUT_JSON"
        return None

    @property
    def schedules(self) -> dict[str, str]:
        """The app's schedules: workflow name → cron expression, of each `@workflow(schedule=...)`."""
        return {name: fn._replaylog_schedule for name, fn in self.workflows.items()  # type: ignore[attr-defined]
                if getattr(fn, "_replaylog_schedule", None)}


def resolve_app_spec(spec: str | None) -> str:
    """--app, else $REPLAYLOG_APP, else the bundled replaylog.samples."""
    return spec or os.environ.get("REPLAYLOG_APP") or DEFAULT_APP


def load_app(spec: str | None = None) -> Registry:
    """Import an app by dotted name or file path; AppImportError with a one-line reason."""
    spec = resolve_app_spec(spec)
    try:
        if spec.endswith(".py") or os.sep in spec:
            path = Path(spec)
            if not path.is_file():
                raise AppImportError(f"app file {spec} does not exist")
            mod_name = f"replaylog_app_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(mod_name, path)
            if module_spec is None or module_spec.loader is None:
                raise AppImportError(f"app file {spec} cannot be imported")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[mod_name] = module
            forget_decorated(mod_name)  # the same file loaded again: only what it decorates now counts
            forget_declared(mod_name)
            # Let a file app import its siblings, as `python file.py` would.
            sys.path.insert(0, str(path.resolve().parent))
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(spec)
    except AppImportError:
        raise
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise AppImportError(f"app {spec!r} failed to import: {error_text(exc)}") from None
    return Registry.from_module(module, spec)
