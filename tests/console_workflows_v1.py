"""Version 1 of `fulfil`: it waited for "go" and read the clock before weighing."""

from __future__ import annotations

from console_workflows import pick, weigh

from replaylog import Context, workflow


@workflow(name="fulfil")
def fulfil_v1(ctx: Context, items: int) -> float:
    """Pick every item, read the clock, wait for "go", weigh."""
    for i in range(items):
        ctx.call_activity(pick, i)
    ctx.now()
    ctx.wait_signal("go")
    return ctx.call_activity(weigh, items)
