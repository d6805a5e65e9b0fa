"""A small web service that runs its workflows itself: the standard library's http.server, no framework.

    python examples/web_app.py --db orders.db --port 8000
    curl -X POST localhost:8000/orders -d '{"items": ["mug", "lamp"]}'      # {"id": "wf-…"}
    curl localhost:8000/orders/wf-…                                          # status, events, result
    curl -X POST localhost:8000/orders/wf-…/approve -d '{"by": "grace"}'
    curl 'localhost:8000/orders/wf-…?wait=30'                                # waits up to 30 s for the result

One `Client` serves every request thread (it is thread-safe); the workflows run in the
same process, in a `Worker` that lives as long as the server (`with` both, as a web
framework's lifespan would). SIGTERM or ctrl-c stop the server, then the worker, as
SIGTERM stops `replaylog worker`: current slots finish, nothing runs twice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from replaylog import (
    Client,
    Context,
    ReplaylogError,
    SignalTimeout,
    UnknownWorkflowError,
    Worker,
    WorkflowFailed,
    activity,
    workflow,
)


@activity
def pack(item: str) -> str:
    """Pack one item (stands in for a warehouse call)."""
    return f"packed {item}"


@workflow
def order(ctx: Context, request: dict[str, Any]) -> dict[str, Any]:
    """Pack every item, publishing progress; then wait up to a day for a manager's approval."""
    items = list(request["items"])
    for i, item in enumerate(items):
        ctx.call_activity(pack, item)
        ctx.set_event("progress", {"packed": i + 1, "of": len(items)})
    ctx.set_event("stage", "waiting for approval")
    try:
        approval = ctx.wait_signal("approval", timeout=86400)
    except SignalTimeout:
        return {"status": "expired", "items": items}
    ctx.set_event("stage", "shipped")
    return {"status": "shipped", "items": items, "approved_by": approval.get("by")}


APP = [order, pack]


class Handler(BaseHTTPRequestHandler):
    """POST /orders, GET /orders/ID[?wait=SECONDS], POST /orders/ID/approve."""

    client: Client  # set on the class by serve()

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def do_POST(self) -> None:
        parts = urlsplit(self.path).path.strip("/").split("/")
        try:
            body = self._body()
            if parts == ["orders"]:
                handle = self.client.start(order, body)
                self._send(201, {"id": handle.id})
            elif len(parts) == 3 and parts[0] == "orders" and parts[2] == "approve":
                self.client.signal(parts[1], "approval", body or {})
                self._send(202, {"id": parts[1]})
            else:
                self._send(404, {"error": "no such route"})
        except json.JSONDecodeError as exc:
            self._send(400, {"error": f"the body is not JSON: {exc.msg}"})
        except UnknownWorkflowError as exc:
            self._send(404, {"error": str(exc)})
        except ReplaylogError as exc:  # a refused input or signal: nothing was written
            self._send(400, {"error": str(exc)})

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "orders":
            self._send(404, {"error": "no such route"})
            return
        handle = self.client.get_handle(parts[1])
        try:
            wait = float(parse_qs(url.query).get("wait", ["0"])[0])
            if wait > 0:
                # Woken by the store, not by polling; a timeout or a failure: the state below says it.
                with contextlib.suppress(TimeoutError, WorkflowFailed):
                    handle.result(timeout=wait)
            info = handle.describe()
            self._send(200, {"id": info.id, "status": info.status, "events": handle.events(),
                             "result": info.result, "error": info.error})
        except ValueError:
            self._send(400, {"error": "wait must be a number of seconds"})
        except UnknownWorkflowError as exc:
            self._send(404, {"error": str(exc)})

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would drown the example's output."""


def serve(db: str, port: int) -> None:
    """Serve on 127.0.0.1:`port` (0: any free port) until SIGTERM or ctrl-c."""

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    with Client(db) as client, Worker(db, app=APP, concurrency=8):
        Handler.client = client
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    print("stopped", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="orders.db", help="database file or postgresql:// URL")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    serve(args.db, args.port)
    sys.exit(0)
