"""replaylog: durable workflows for Python, re-derived by replaying a log of outcomes.

The implementation package: users import from `replaylog` (the public package, which
re-exports the authoring API from here). These exports keep `from engine import …` working.
"""

from engine.core import (
    ActivityInfo,
    CommandRecord,
    Context,
    DryReplay,
    Outcome,
    RunResult,
    SignalRecord,
    Task,
    WorkflowBlocked,
    WorkflowState,
    activity,
    current_activity,
    dry_replay,
    idempotency_key,
    run,
    signal,
    workflow,
)
from engine.errors import (
    ActivityError,
    ChildWorkflowError,
    Diagnostic,
    LeaseLostError,
    NonDeterministicError,
    ParallelError,
    ReplaylogError,
    StoreError,
    UnknownActivityError,
    UnknownWorkflowError,
    ValueNotJSONError,
)

__all__ = [
    "ActivityError",
    "ActivityInfo",
    "ChildWorkflowError",
    "CommandRecord",
    "Context",
    "Diagnostic",
    "DryReplay",
    "LeaseLostError",
    "NonDeterministicError",
    "Outcome",
    "ParallelError",
    "ReplaylogError",
    "RunResult",
    "SignalRecord",
    "StoreError",
    "Task",
    "UnknownActivityError",
    "UnknownWorkflowError",
    "ValueNotJSONError",
    "WorkflowBlocked",
    "WorkflowState",
    "activity",
    "current_activity",
    "dry_replay",
    "idempotency_key",
    "run",
    "signal",
    "workflow",
]
