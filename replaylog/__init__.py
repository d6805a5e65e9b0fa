"""replaylog: durable workflows for Python, re-derived by replaying a log of outcomes.

The public package. Write workflows with what `__all__` names::

    from replaylog import Context, activity, workflow

It holds the authoring API, the errors workflow code and its callers catch, and the
in-memory runner for testing workflows without a database. The command line
(`replaylog …`, `python -m replaylog`) lives in `replaylog.cli`, the one module that
knows both the engine and the console. `engine` and `console` are the implementation
packages: what is not named here may change without notice.
"""

from replaylog.engine.core import (
    ActivityInfo,
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

# Left out on purpose (they stay in `engine`): the history records (CommandRecord,
# SignalRecord) and dry_replay, which serve the worker and `replaylog check`;
# WorkflowBlocked and LeaseLostError, control flow that workflow code must never catch;
# the store's refusals (StoreError …) and UnknownWorkflowError, which reach operators
# through the command line, not workflow code. DuplicateWorkflowIdError is the exception:
# ctx.call_workflow raises it into workflow code when a child's id is taken.
__all__ = [
    "ActivityError",
    "ActivityInfo",
    "ChildWorkflowError",
    "Context",
    "Diagnostic",
    "DuplicateWorkflowIdError",
    "NonDeterministicError",
    "Outcome",
    "ParallelError",
    "ReplaylogError",
    "RunResult",
    "SignalTimeout",
    "Task",
    "UnknownActivityError",
    "ValueNotJSONError",
    "WorkflowCancelled",
    "WorkflowState",
    "activity",
    "current_activity",
    "idempotency_key",
    "run",
    "signal",
    "workflow",
]
