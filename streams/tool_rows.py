"""The permission broker's record of a call and of a call waiting for an answer: what the broker core
(streams/tool_broker.py) reads and writes through its store (streams/tool_store.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class CallRow:
    request_id: str
    call_id: str
    position: int
    user_id: str
    name: str
    arguments: str
    decision: str
    rule: str
    reason: str
    state: str  # decided (allow, deny) | asked | cleared | finished
    settled_by: str
    outcome: str = ""
    result: str = ""
    error: str = ""


@dataclass(frozen=True)
class Ask:
    conversation_id: str
    call_id: str
    request_id: str
    user_id: str
    asked_at: datetime
