"""A signal-sending process for the signal storm: `python -m fault_sender DB PLAN ACKS [PAUSE]`.

PLAN is a JSON list of [workflow id, signal name, index]; each signal is sent through
the real store, and only after `send_signal` returned (the signal is acknowledged) is a
line appended to ACKS. A refusal or error is appended as an "error" line, never raised,
so the test sees every one of them. PAUSE (seconds) spaces the sends out at random, so
the storm lasts long enough for the workers to be killed under it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from replaylog.engine.core import error_text
from replaylog.engine.store import open_store


def main(db: str, plan_path: str, acks_path: str, pause: str = "0") -> None:
    """Send every planned signal in plan order; record each acknowledgement."""
    with open(plan_path) as fh:
        plan = json.load(fh)
    sender = os.getpid()
    store = open_store(db)
    with open(acks_path, "a") as acks:
        for wid, name, index in plan:
            time.sleep(random.uniform(0, float(pause)))
            try:
                seq = store.send_signal(wid, name, {"name": name, "i": index, "sender": sender})
            except Exception as exc:
                line = {"wid": wid, "name": name, "i": index, "error": error_text(exc)}
            else:
                line = {"wid": wid, "name": name, "i": index, "seq": seq}
            acks.write(json.dumps(line) + "\n")
            acks.flush()
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
