"""replaylog: durable workflows for Python, re-derived by replaying a log of outcomes.

The public package. Write workflows with what `__all__` names, and run them from your
own code::

    from replaylog import Client, Context, Worker, activity, workflow

It holds the authoring API, the client (`Client`, `WorkflowHandle`) and the embedded
`Worker`, the errors workflow code and its callers catch, and the in-memory runner for
testing workflows without a database (`replaylog.testing` has the environment with a
store, a worker and a clock that skips time). The command line
(`replaylog …`, `python -m replaylog`) lives in `replaylog.cli`, the one module that
knows both the engine and the console. `engine` and `console` are the implementation
packages: what is not named here may change without notice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from replaylog.client import (
    Client,
    RunInfo,
    SignalInfo,
    Slot,
    UnknownWorkflowError,
    WorkflowFailed,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowTerminated,
    WorkflowView,
)
from replaylog.engine.core import (
    ActivityInfo,
    ChildHandle,
    Context,
    Outcome,
    RunResult,
    Task,
    WorkflowState,
    activity,
    current_activity,
    idempotency_key,
    run,
    signal,
    workflow,
)
from replaylog.engine.errors import (
    ActivityError,
    ActivityTimeout,
    AsyncWorkflowError,
    ChildWorkflowClosedError,
    ChildWorkflowError,
    Diagnostic,
    DuplicateWorkflowIdError,
    NonDeterministicError,
    ParallelError,
    ReplaylogError,
    SignalTimeout,
    UnknownActivityError,
    ValueNotJSONError,
    WorkflowCancelled,
)
from replaylog.engine.queues import DedupIdTakenError, Queue, QueueError
from replaylog.engine.retry import RetryPolicy, default_retry

if TYPE_CHECKING:
    from replaylog.async_client import AsyncClient, AsyncWorkflowHandle
    from replaylog.engine.aio import AsyncChildHandle, AsyncContext
    from replaylog.worker import AsyncWorker, Worker

# Loaded at first use (PEP 562 `__getattr__`), so that `import replaylog`, and every
# `replaylog` command (its modules sit in this package), skips asyncio (the async names)
# and the worker's machinery (`Worker`): together about a quarter of `import replaylog`
# under -X importtime. `from replaylog import AsyncClient` works as before.
_LAZY = {
    "AsyncChildHandle": "replaylog.engine.aio",
    "AsyncClient": "replaylog.async_client",
    "AsyncContext": "replaylog.engine.aio",
    "AsyncWorker": "replaylog.worker",
    "AsyncWorkflowHandle": "replaylog.async_client",
    "Worker": "replaylog.worker",
}


if not TYPE_CHECKING:  # hidden from type checkers: they keep refusing a misspelt name

    def __getattr__(name: str) -> Any:
        """A lazily loaded public name (`_LAZY`), imported on first access and kept."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's names, the lazily loaded ones included."""
    return sorted(set(globals()) | set(_LAZY))

# Left out on purpose (they stay in `engine`): the history records (CommandRecord,
# SignalRecord) and dry_replay, which serve the worker and `replaylog check`;
# WorkflowBlocked and LeaseLostError, control flow that workflow code must never catch;
# the store's refusals (StoreError …), which reach callers as ReplaylogError with one line.
# DuplicateWorkflowIdError is the exception: ctx.call_workflow raises it into workflow code
# when a child's id is taken, and Client.start when a workflow of that id exists.
__all__ = [
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
