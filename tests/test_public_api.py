"""`replaylog` is the public package: a curated surface, documented, with one error root."""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points

import pytest

import replaylog
import replaylog.engine

# The authoring API, the client and the embedded worker, the errors workflow code and its
# callers catch, and the in-memory runner for testing workflows. Adding a name here is a
# promise to users: do it on purpose.
PUBLIC = [
    "ActivityError",
    "ActivityInfo",
    "ActivityTimeout",
    "AsyncChildHandle",
    "AsyncClient",
    "AsyncContext",
    "AsyncWorker",
    "AsyncWorkflowError",
    "AsyncWorkflowHandle",
    "ChildHandle",
    "ChildWorkflowClosedError",
    "ChildWorkflowError",
    "Client",
    "Context",
    "DedupIdTakenError",
    "Diagnostic",
    "DuplicateWorkflowIdError",
    "NonDeterministicError",
    "Outcome",
    "ParallelError",
    "Queue",
    "QueueError",
    "ReplaylogError",
    "RetryPolicy",
    "RunInfo",
    "RunResult",
    "SignalInfo",
    "SignalTimeout",
    "Slot",
    "Task",
    "UnknownActivityError",
    "UnknownWorkflowError",
    "ValueNotJSONError",
    "Worker",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowInfo",
    "WorkflowState",
    "WorkflowTerminated",
    "WorkflowView",
    "activity",
    "current_activity",
    "default_retry",
    "idempotency_key",
    "run",
    "signal",
    "workflow",
]


def test_the_public_surface_is_the_curated_list() -> None:
    assert sorted(replaylog.__all__) == PUBLIC
    missing = [name for name in replaylog.__all__ if not hasattr(replaylog, name)]
    assert missing == []  # `from replaylog import *` would raise on any of these


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_and_its_public_members_have_docstrings(name: str) -> None:
    obj = getattr(replaylog, name)
    assert (obj.__doc__ or "").strip(), f"replaylog.{name} has no docstring"
    if inspect.isclass(obj):
        for member, value in vars(obj).items():
            if member.startswith("_") or not (inspect.isfunction(value) or isinstance(value, property)):
                continue
            assert (value.__doc__ or "").strip(), f"replaylog.{name}.{member} has no docstring"


def test_every_public_error_has_the_one_root() -> None:
    errors = [getattr(replaylog, n) for n in PUBLIC if n.endswith("Error")]
    assert errors and all(issubclass(e, replaylog.ReplaylogError) for e in errors)


def test_the_replaylog_script_is_the_public_packages_command_line() -> None:
    (script,) = entry_points(group="console_scripts", name="replaylog")
    assert script.value == "replaylog.cli:main"
