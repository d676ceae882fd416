"""``bench.chaos --tools``: every turn makes the model call a side-effecting tool, and the audit counts effects.

The tools are this process's own HTTP service on loopback, like a payment API (the e2e stack's,
tests/e2e/tool_service.py):

- ``add_expense`` honours ``Idempotency-Key`` (the operator declares it ``idempotent``): a key seen before
  gets the first answer and no second effect;
- ``charge_card`` does not: every request that arrives is an effect, so a call run twice shows as two.

Both are allowed by the operator's rules (no one has to approve), and each answer scripts the model's next
reply (the synthetic engine's ``[[reply:…]]``), so a turn ends after one round unless the model is told the
outcome is unknown, when it calls again (a new call; ``max_rounds`` 2 ends it).

After the storm, for every call of every conversation (GET /v1/conversations/{id}/tool-calls): a call
``ok`` took exactly one effect, ``unknown`` at most one, ``error`` none; none is left unfinished; no effect
arrived under a key that is no call's.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.tool_service import SCHEMA, Effects, scripted, serve

TOOLS = ("add_expense", "charge_card")


def config(effects: Effects) -> dict[str, Any]:
    """The operator's tools file for the stack: both tools allowed, two rounds at most."""
    return {
        "tools": [
            {"name": "add_expense", "url": f"{effects.url}/expense", "idempotent": True, "parameters": SCHEMA},
            {"name": "charge_card", "url": f"{effects.url}/charge", "parameters": SCHEMA},
        ],
        "rules": [{"name": f"allow-{t}", "effect": "allow", "tool": t} for t in TOOLS],
        "max_rounds": 2,
    }


def write_config(effects: Effects, path: Path) -> Path:
    path.write_text(json.dumps(config(effects)))
    return path


def turn_text(i: int, n: int) -> tuple[str, list[str]]:
    """The message of conversation ``i``'s turn ``n``: the model calls one of the tools (alternating)."""
    tool = TOOLS[(i + n) % 2]
    call = json.dumps({"name": tool, "arguments": {"amount": n + 1, "item": f"conversation {i} turn {n}"}})
    return scripted(f"<tool_call>\n{call}\n</tool_call>"), [tool]


async def audit(urls: list[str], key: str, conversations: list[str], effects: Effects, wait_s: float = 180.0) -> Counter[str]:
    """The counts of the table, once no call is waiting to run (or after ``wait_s``)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=urls[0], headers=headers, timeout=30) as http:
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            calls = []
            for cid in conversations:
                response = await http.get(f"/v1/conversations/{cid}/tool-calls")
                response.raise_for_status()
                calls += response.json()["tool_calls"]
            unfinished = [c for c in calls if c["state"] != "finished"]
            if not unfinished or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(2)
    found: Counter[str] = Counter()
    ids = {c["id"] for c in calls}
    for c in calls:
        found[f"calls {c['outcome'] or c['state']}"] += 1
        took = effects.effects[c["id"]]
        if c["state"] != "finished":
            found["unfinished"] += 1
        elif c["outcome"] == "ok" and took != 1:
            found["ok without exactly one effect"] += 1
        elif c["outcome"] == "unknown" and took > 1:
            found["unknown with more than one effect"] += 1
        elif c["outcome"] in ("error", "denied", "rejected", "expired") and took:
            found["not run, yet an effect"] += 1
        if effects.asked[c["id"]] > 1:
            found[f"asked again with the same key ({c['name']})"] += 1
    found["effects under no call's key"] = sum(n for k, n in effects.effects.items() if k not in ids)
    return found
