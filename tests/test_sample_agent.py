"""The sample support agent: a fake model, two tools at once, a child, an approval before the risky tool."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli


def test_the_sample_agent_waits_for_approval_then_calls_the_risky_tool_once(db: Path | str) -> None:
    wid = run_cli(db, "start", "support_agent", '"order-5"').stdout.strip().splitlines()[-1]
    assert run_cli(db, "worker", "--until-idle", "--quiet", timeout=120).returncode == 0
    shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert shown["status"] == "blocked" and shown["approval"]["action"] == "issue_refund"
    assert shown["approval"]["details"]["amount"] == 4200
    assert [(c["kind"], c["name"]) for c in shown["commands"]] == [
        ("activity", "ask_model"), ("activity", "lookup_order"), ("activity", "check_policy"),
        ("child", "summarise"), ("approval", "issue_refund")]
    assert run_cli(db, "approve", wid, "--note", "fine").returncode == 0
    assert run_cli(db, "worker", "--until-idle", "--quiet", timeout=120).returncode == 0
    done = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert done["status"] == "completed" and done["result"]["receipt"] == {"refunded": 4200, "key": f"{wid}:5"}
    assert run_cli(db, "check", wid).returncode == 0


ASYNC_APP = "replaylog.samples.async_agent"


def test_the_async_sample_agent_gathers_its_tools_waits_for_approval_and_checks(db: Path | str) -> None:
    wid = run_cli(db, "start", "async_support_agent", '"order-7"', "--app", ASYNC_APP).stdout.strip().splitlines()[-1]
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", ASYNC_APP, timeout=120).returncode == 0
    shown = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert shown["status"] == "blocked" and shown["approval"]["action"] == "issue_refund"
    assert [(c["kind"], c["name"]) for c in shown["commands"]] == [
        ("activity", "ask_model_async"), ("activity", "lookup_order_async"), ("activity", "check_policy_async"),
        ("child", "summarise_async"), ("event", "progress"), ("approval", "issue_refund")]
    assert run_cli(db, "check", wid, "--app", ASYNC_APP).returncode == 0  # the async code dry-replays
    assert run_cli(db, "approve", wid, "--note", "fine").returncode == 0
    assert run_cli(db, "worker", "--until-idle", "--quiet", "--app", ASYNC_APP, timeout=120).returncode == 0
    done = json.loads(run_cli(db, "show", wid, "--json").stdout)
    assert done["status"] == "completed" and done["result"]["receipt"] == {"refunded": 4200, "key": f"{wid}:6"}
    assert run_cli(db, "check", wid, "--app", ASYNC_APP).returncode == 0
