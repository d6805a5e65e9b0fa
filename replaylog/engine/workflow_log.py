"""`ctx.logger`: a standard `logging` logger for workflow code that is silent while history replays.

Workflow code runs again on every resumption, so a plain `logging` call in it writes the
same line once per replay. `WorkflowLog` writes only while the run is live (see
`Context.is_replaying`), and every record carries the workflow's id as the `workflow_id`
attribute, for a handler's format (`%(workflow_id)s`) or a filter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

# The logger every workflow's lines go to: configure it (level, handlers) like any other.
# `replaylog worker` shows its INFO lines and above on stderr.
WORKFLOW_LOGGER = "replaylog.workflow"


class WorkflowLog(logging.LoggerAdapter[logging.Logger]):
    """The logger `ctx.logger` returns: writes nothing while recorded slots replay.

    Every method of a `logging.Logger` that writes (debug … critical, exception, log)
    is there; `isEnabledFor` answers False while the run replays, so nothing is
    formatted then either. Each record has a `workflow_id` attribute and a `slot` one (the
    slot the code's next command takes), and keeps any `extra=` of the call's own.
    """

    def __init__(self, workflow_id: str, replaying: Callable[[], bool], slot: Callable[[], int] = lambda: 0) -> None:
        super().__init__(logging.getLogger(WORKFLOW_LOGGER), {"workflow_id": workflow_id})
        self._replaying = replaying
        self._slot = slot

    def isEnabledFor(self, level: int) -> bool:
        """Whether a record of `level` would be written now: never while history replays."""
        return not self._replaying() and self.logger.isEnabledFor(level)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        """Add the workflow id and the slot to the record, beside the call's own `extra`."""
        kwargs["extra"] = {**(kwargs.get("extra") or {}), **(self.extra or {}), "slot": self._slot()}
        return msg, kwargs
