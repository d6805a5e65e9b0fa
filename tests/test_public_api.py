"""`replaylog` is the public package: a curated surface, documented, with one error root."""

from __future__ import annotations

import inspect
import subprocess
import sys
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


def _loaded_after(code: str, modules: list[str]) -> list[str]:
    """Which of `modules` a fresh interpreter has loaded after running `code`."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return out.split()


# The design: asyncio and the worker's machinery load only when an async name, `Worker`, or
# async workflow code is used, so `import replaylog` and every `replaylog` command (which
# runs the package's __init__ first) start faster. Each check fails if an eager import of
# them comes back, in replaylog/__init__.py, the engine core, or the command line.
def test_importing_replaylog_loads_neither_asyncio_nor_the_worker() -> None:
    heavy = ["asyncio", "replaylog.async_client", "replaylog.engine.aio", "replaylog.worker",
             "replaylog.engine.worker"]
    assert _loaded_after("import replaylog", heavy) == []
    assert _loaded_after("from replaylog import Client, Context, workflow", heavy) == []


def test_the_command_line_and_a_sync_workflow_run_without_asyncio() -> None:
    code = (
        "import replaylog.cli\n"
        "from replaylog import Context, WorkflowState, activity, run, workflow\n"
        "@activity\n"
        "def greet(name: str) -> str:\n"
        "    return 'hi ' + name\n"
        "@workflow\n"
        "def hello(ctx: Context) -> str:\n"
        "    return ctx.call_activity(greet, 'ann')\n"
        "result = run(hello, WorkflowState(has_input=False), clock=lambda: 0.0,\n"
        "             activities={'greet': greet})\n"
        "assert result.outcome.result == 'hi ann', result"
    )
    assert _loaded_after(code, ["asyncio"]) == []


def test_lazily_loaded_public_names_are_the_modules_own() -> None:
    from replaylog.async_client import AsyncClient
    from replaylog.engine.aio import AsyncContext
    from replaylog.worker import AsyncWorker, Worker

    assert (replaylog.AsyncClient, replaylog.AsyncContext) == (AsyncClient, AsyncContext)
    assert replaylog.Worker is Worker is AsyncWorker is replaylog.AsyncWorker
    assert set(replaylog.__all__) <= set(dir(replaylog))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        getattr(replaylog, "Nope")  # noqa: B009


def test_every_public_error_has_the_one_root() -> None:
    errors = [getattr(replaylog, n) for n in PUBLIC if n.endswith("Error")]
    assert errors and all(issubclass(e, replaylog.ReplaylogError) for e in errors)


def test_the_replaylog_script_is_the_public_packages_command_line() -> None:
    (script,) = entry_points(group="console_scripts", name="replaylog")
    assert script.value == "replaylog.cli:main"
