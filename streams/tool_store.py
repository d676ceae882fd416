"""The permission broker's state in Cassandra (schemas/cql/0018_tool_calls.cql): the turns that offered
Parley's tools, each call's decision and ending, and the calls waiting for an answer.

The broker is the only writer. Arguments and results are sealed for the conversation's owner, each bound
to its cell and call (``tool_calls.arguments/<call_id>``), so an erasure shreds them with the rest.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

from parley.cassandra import AsyncCql
from schemas import codec, sealing
from schemas.events import GenerationRequested
from streams.tool_rows import Ask, CallRow

#: The one partition of tool_asks: pending answers are few.
ASKS_SHARD = 0


def _at(column: str, call_id: str) -> str:
    return sealing.cell_at("tool_calls", column, call_id)


class ToolStore:
    def __init__(self, cql: AsyncCql, sealer: sealing.Sealer) -> None:
        self._cql, self._sealer = cql, sealer

    async def org_rules(self, org_id: str) -> object:
        """An organisation's own tool rules as stored (JSON), None when it set none."""
        rows = await self._cql.run("SELECT rules FROM {ks}.org_tool_rules WHERE org_id = ?", (org_id,))
        return json.loads(rows[0].rules) if rows and rows[0].rules else None

    async def keep_turn(self, turn: GenerationRequested) -> None:
        blob = await codec.encode_async(turn)
        await self._cql.run(
            "INSERT INTO {ks}.tool_turns (conversation_id, request_id, turn) VALUES (?, ?, ?)",
            (uuid.UUID(turn.conversation_id), uuid.UUID(turn.request_id), blob),
        )

    async def turn(self, conversation_id: str, request_id: str) -> GenerationRequested | None:
        rows = await self._cql.run(
            "SELECT turn FROM {ks}.tool_turns WHERE conversation_id = ? AND request_id = ?",
            (uuid.UUID(conversation_id), uuid.UUID(request_id)),
        )
        if not rows:
            return None
        event = await codec.decode_async(rows[0].turn)
        return event if isinstance(event, GenerationRequested) else None

    async def token_offset(self, conversation_id: str, request_id: str) -> int | None:
        rows = await self._cql.run(
            "SELECT token_offset FROM {ks}.tool_turns WHERE conversation_id = ? AND request_id = ?",
            (uuid.UUID(conversation_id), uuid.UUID(request_id)),
        )
        return rows[0].token_offset if rows and rows[0].token_offset is not None else None

    async def keep_token_offset(self, conversation_id: str, request_id: str, offset: int) -> None:
        await self._cql.run(
            "UPDATE {ks}.tool_turns SET token_offset = ? WHERE conversation_id = ? AND request_id = ?",
            (offset, uuid.UUID(conversation_id), uuid.UUID(request_id)),
        )

    async def calls(self, conversation_id: str, request_id: str | None = None) -> list[CallRow]:
        """The reply's calls in the order the reply made them (None: every reply's of the conversation)."""
        where, values = "conversation_id = ?", (uuid.UUID(conversation_id),)
        if request_id is not None:
            where, values = f"{where} AND request_id = ?", (*values, uuid.UUID(request_id))
        rows = await self._cql.run(
            "SELECT request_id, call_id, position, user_id, name, arguments, decision, rule, reason, state, settled_by, "
            f"outcome, result, error FROM {{ks}}.tool_calls WHERE {where}",
            values,
        )
        out = [
            CallRow(
                str(r.request_id), r.call_id, r.position or 0, r.user_id or "", r.name or "",
                sealing.open_text(r.arguments, at=_at("arguments", r.call_id)) or "",
                r.decision or "", r.rule or "", r.reason or "", r.state or "", r.settled_by or "", r.outcome or "",
                sealing.open_text(r.result, at=_at("result", r.call_id)) or "", r.error or "",
            )
            for r in rows
        ]
        return sorted(out, key=lambda c: (c.request_id, c.position))

    async def put(self, conversation_id: str, row: CallRow) -> None:
        seal = self._sealer.seal
        await self._cql.run(
            "INSERT INTO {ks}.tool_calls (conversation_id, request_id, call_id, position, user_id, name, arguments, "
            "decision, rule, reason, state, settled_by, outcome, result, error, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                uuid.UUID(conversation_id), uuid.UUID(row.request_id), row.call_id, row.position, row.user_id, row.name,
                seal(row.user_id, row.arguments, at=_at("arguments", row.call_id), deterministic=True),
                row.decision, row.rule, row.reason, row.state, row.settled_by, row.outcome,
                seal(row.user_id, row.result, at=_at("result", row.call_id), deterministic=True), row.error,
                datetime.now(timezone.utc),
            ),
        )

    async def ask(self, conversation_id: str, row: CallRow, asked_at: datetime) -> None:
        await self._cql.run(
            "INSERT INTO {ks}.tool_asks (shard, conversation_id, call_id, request_id, user_id, asked_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (ASKS_SHARD, uuid.UUID(conversation_id), row.call_id, uuid.UUID(row.request_id), row.user_id, asked_at),
        )

    async def answered(self, conversation_id: str, call_id: str) -> None:
        await self._cql.run(
            "DELETE FROM {ks}.tool_asks WHERE shard = ? AND conversation_id = ? AND call_id = ?",
            (ASKS_SHARD, uuid.UUID(conversation_id), call_id),
        )

    async def asks(self) -> list[Ask]:
        rows = await self._cql.run(
            "SELECT conversation_id, call_id, request_id, user_id, asked_at FROM {ks}.tool_asks WHERE shard = ?",
            (ASKS_SHARD,),
        )
        return [
            Ask(str(r.conversation_id), r.call_id, str(r.request_id), r.user_id or "", r.asked_at.replace(tzinfo=timezone.utc))
            for r in rows
        ]
