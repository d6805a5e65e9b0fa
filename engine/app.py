"""Loading an APP: a dotted module or a .py file that holds @workflow / @activity functions."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.core import error_text
from engine.errors import ReplaylogError, UnknownWorkflowError

DEFAULT_APP = "sample_workflows"


class AppImportError(ReplaylogError):
    """The APP could not be imported."""


@dataclass
class Registry:
    """The workflows and activities an app defines, by recorded name."""

    spec: str
    workflows: dict[str, Callable[..., Any]] = field(default_factory=dict)
    activities: dict[str, Callable[..., Any]] = field(default_factory=dict)

    @classmethod
    def from_module(cls, module: ModuleType, spec: str | None = None) -> Registry:
        """Collect the decorated functions in a module's namespace (imported ones count too)."""
        reg = cls(spec or module.__name__)
        for value in list(vars(module).values()):
            kind = getattr(value, "_replaylog_kind", None)
            if kind == "workflow":
                reg.workflows[value._replaylog_name] = value
            elif kind == "activity":
                reg.activities[value._replaylog_name] = value
        return reg

    def workflow(self, name: str) -> Callable[..., Any]:
        """The workflow function of that name; UnknownWorkflowError if the app has none."""
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise UnknownWorkflowError(f"unknown workflow {name!r} in app {self.spec!r} (known: {known})") from None


def resolve_app_spec(spec: str | None) -> str:
    """--app, else $REPLAYLOG_APP, else the bundled sample_workflows."""
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
