"""Deterministic ids (DESIGN.md §5): a retried client action derives the same ids,
so its duplicate events land as no-ops.

Message ids are ``uuid5("<conversation>:<key>")`` and ``uuid5("<conversation>:<key>:reply")``:
the only two derivations of a message (tree node) id. A client key ending ``:reply`` would
name another key's reply, so the gateway refuses it (``gateway.validation.client_key``); the
other ``<conversation>:…`` derivations (summaries, the auto-title's event id) name rows of
other tables or event ids, never a message, so a key that spells one collides with nothing."""

from __future__ import annotations

import uuid

#: Namespace of every uuid5 Parley derives. Never change it: ids in the log depend on it.
NS = uuid.UUID("6b1f3c2e-9a4d-5e8f-b7c1-2d3e4f5a6b7c")


def new_conversation_id() -> str:
    return str(uuid.uuid4())


def user_message_id(conversation_id: str, client_message_id: str) -> str:
    return str(uuid.uuid5(NS, f"{conversation_id}:{client_message_id}"))


def reply_id(conversation_id: str, client_message_id: str) -> str:
    """The assistant message id, which is also the generation's request_id."""
    return str(uuid.uuid5(NS, f"{conversation_id}:{client_message_id}:reply"))


def engine_rid(request_id: str, attempt: int) -> str:
    """The engine's request id: unique per attempt, so an abort never hits a retry."""
    return f"{request_id}:{attempt}"
