"""The audit: is Cassandra the projection of ``chat.events``, and did every turn end once?

Pure: ``audit(events, tables)`` takes the log (decoded events, in log order)
and the rows read back from the tables, and returns a ``Report``; reading them
is ``tools.audit_sources``'s job, the ``parley audit`` command renders it.

Rows. The log is folded with the materializer's own projection
(``streams.projection.writes_for`` over ``streams.tree.apply``), and the
writes are applied as Cassandra applies them: per cell, the write with the
highest timestamp wins. The result is compared with the rows read, column by
column, over the columns the projection writes (other writers' columns, such
as ``reply_readers``, are not its business). Cassandra keeps timestamps in
milliseconds, so times are compared at that precision.

In flight. A reply streaming while the audit reads has checkpoints (partial
text from ``chat.tokens``) in its row that the log cannot predict, and its
completion is not on the log yet: such a turn is counted ``in_flight``, and
its row's checkpointed columns are not compared. After quiescence an
in-flight turn is a lost one; the caller decides (``Report.ok(lost_ok=…)``).

Turns. An event appended twice (a retried producer, a processor that
re-delivered its input after a crash) is not a second turn: the same request
id, the same outcome. A duplicate is what a user would see twice: two
different replies to one client action (``duplicate_replies``), or two
different outcomes (finish reason or text) for one request id
(``conflicting_completions``). A reply whose text opens with the same passage
twice (a resumed generation that started over and kept its first try) is
``repeated_text``.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas import events as ev
from schemas import sealing
from streams.projection import PROJECTION, ROW_IDS, SEALED_CELLS, Write, writes_for
from streams.tree import Conversation, apply, empty

#: Primary key columns of every table the projection writes, in key order.
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "conversations": ("conversation_id",),
    "conversations_by_user": ("user_id", "created_at", "conversation_id"),
    "messages": ("conversation_id", "message_id"),
    "summaries": ("conversation_id", "summary_id"),
}
#: Columns a checkpoint writes (streams/checkpoint.py): unknown to the log while a reply streams.
CHECKPOINTED = frozenset({"content", "tokens", "updated_at"})
#: A reply is ``repeated_text`` when its opening passage of at least this many characters comes twice in a row.
MIN_REPEAT_CHARS = 24

#: (table, primary key values normalised by ``norm``).
RowKey = tuple[str, tuple[Any, ...]]
Row = dict[str, Any]


def norm(value: Any) -> Any:
    """A cell value as both sides can compare it: ids as text, times in UTC milliseconds, lists as tuples."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:  # the driver hands back naive UTC
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).replace(microsecond=value.microsecond // 1000 * 1000)
    if isinstance(value, (list, tuple)):
        return tuple(norm(v) for v in value)
    return value


def row_key(table: str, row: Mapping[str, Any]) -> RowKey:
    return table, tuple(norm(row[c]) for c in PRIMARY_KEYS[table])


# ------------------------------------------------------------------ the log's side


@dataclass
class _Cells:
    """One row being built from writes: per column, (timestamp, value) of the newest write."""

    key: Row
    cells: dict[str, tuple[int, Any]] = field(default_factory=dict)

    def apply(self, write: Write) -> None:
        for column, value in write.cells:
            held = self.cells.get(column)
            if held is None or write.timestamp >= held[0]:  # a tie is the same event replayed: same value
                self.cells[column] = (write.timestamp, norm(value))

    def row(self) -> Row:
        return {**self.key, **{c: v for c, (_, v) in self.cells.items()}}


@dataclass(frozen=True)
class Projection:
    """What the log says the tables hold, and the turns' states."""

    rows: dict[RowKey, Row]
    #: Columns the projection writes, per table (the only ones compared).
    columns: dict[str, frozenset[str]]
    conversations: dict[str, Conversation]
    #: Events whose ids no row can hold (the materializer dead-letters them).
    unprojectable: int = 0


def project(events: Iterable[ev.Event]) -> Projection:
    """Fold the log, conversation by conversation, into the rows the materializer writes."""
    states: dict[str, Conversation] = {}
    rows: dict[RowKey, _Cells] = {}
    columns: dict[str, set[str]] = defaultdict(set)
    bad = 0
    for event in events:
        if type(event) not in PROJECTION:
            continue
        cid = str(getattr(event, "conversation_id"))
        state = states.get(cid) or empty(cid)
        try:
            writes = writes_for(state, event, sealing.sealer())
        except ValueError:
            bad += 1
            continue
        for w in writes:
            key = dict((k, norm(v)) for k, v in w.key)
            if tuple(key) != PRIMARY_KEYS[w.table]:
                raise ValueError(f"projection writes {w.table} by {tuple(key)}; the audit expects {PRIMARY_KEYS[w.table]}")
            rk = (w.table, tuple(key.values()))
            rows.setdefault(rk, _Cells(key)).apply(w)
            columns[w.table].update(c for c, _ in w.cells)
        states[cid] = apply(state, event)
    return Projection(
        {k: c.row() for k, c in rows.items()}, {t: frozenset(c) for t, c in columns.items()}, states, bad
    )


# ------------------------------------------------------------------ turns


@dataclass(frozen=True)
class Turns:
    """What the log says of every generation asked for."""

    requested: int
    #: finish_reason → turns that ended with it (the last completion's).
    finished: dict[str, int]
    #: Requested, no completion on the log (yet).
    in_flight: list[str]
    #: (conversation, client action) answered by more than one reply id.
    duplicate_replies: list[tuple[str, str]]
    #: Request ids with two different outcomes (finish reason or text).
    conflicting_completions: list[str]
    #: Completions of a request never asked for.
    unrequested: list[str]
    #: Replies whose text opens with the same passage twice.
    repeated_text: list[str]
    #: Completions appended more than once with the same outcome (not a problem: re-deliveries).
    reappended: int


def repeated_opening(text: str, min_chars: int = MIN_REPEAT_CHARS) -> bool:
    """Whether ``text`` starts with some passage of ``min_chars`` or more written twice in a row."""
    for k in range(min_chars, len(text) // 2 + 1):
        if text[k : 2 * k] == text[:k]:
            return True
    return False


def turns(events: Iterable[ev.Event]) -> Turns:
    requested: dict[str, ev.GenerationRequested] = {}
    replies_by_action: dict[tuple[str, str], set[str]] = defaultdict(set)
    outcomes: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for e in events:
        if isinstance(e, ev.GenerationRequested):
            requested.setdefault(e.request_id, e)
            replies_by_action[(e.conversation_id, e.client_message_id)].add(e.request_id)
        elif isinstance(e, ev.GenerationCompleted):
            outcomes[e.request_id].append((e.finish_reason, e.content))
    finished: dict[str, int] = defaultdict(int)
    for rid, outs in outcomes.items():
        if rid in requested:
            finished[outs[-1][0]] += 1
    return Turns(
        requested=len(requested),
        finished=dict(finished),
        in_flight=sorted(rid for rid in requested if rid not in outcomes),
        duplicate_replies=sorted(action for action, rids in replies_by_action.items() if len(rids) > 1),
        conflicting_completions=sorted(rid for rid, outs in outcomes.items() if len(set(outs)) > 1),
        unrequested=sorted(rid for rid in outcomes if rid not in requested),
        repeated_text=sorted(rid for rid, outs in outcomes.items() if any(repeated_opening(t) for _, t in outs)),
        reappended=sum(len(outs) - len(set(outs)) for outs in outcomes.values()),
    )


# ------------------------------------------------------------------ comparing


@dataclass(frozen=True)
class Difference:
    key: RowKey
    column: str
    expected: Any
    found: Any


@dataclass(frozen=True)
class Report:
    conversations: int
    events: int
    rows_expected: int
    rows_found: int
    missing: list[RowKey]
    extra: list[RowKey]
    differing: list[Difference]
    turns: Turns
    unprojectable: int = 0

    @property
    def row_problems(self) -> int:
        """Rows that are not what the log says: missing, extra, or with differing columns."""
        return len(self.missing) + len(self.extra) + len({d.key for d in self.differing})

    @property
    def duplicates(self) -> int:
        t = self.turns
        return len(t.duplicate_replies) + len(t.conflicting_completions) + len(t.repeated_text)

    def ok(self, *, lost_ok: bool = True) -> bool:
        """No row problem, no duplicate, no completion of nothing; ``lost_ok=False``: no turn in flight either."""
        clean = self.row_problems == 0 and self.duplicates == 0 and not self.turns.unrequested
        return clean and (lost_ok or not self.turns.in_flight)


def _same(table: str, column: str, want: Row, have: Row) -> bool:
    """Whether a stored cell is what the log projects. A sealed cell written before its format bound
    values to their place (``\\x00s1:``) is not the value a projection writes now, but the same text:
    such cells are compared opened, at the cell's place."""
    mine, theirs = want.get(column), have.get(column)
    if mine == theirs:
        return True
    if column not in SEALED_CELLS.get(table, ()) or not (sealing.is_sealed(mine) and sealing.is_sealed(theirs)):
        return False
    at = sealing.cell_at(table, column, want[ROW_IDS[table]])
    try:
        return sealing.open_text(mine, at=at) == sealing.open_text(theirs, at=at)
    except sealing.Unopenable:
        return False  # sealed for another cell or row: not this row's value


def audit(events: list[ev.Event], tables: Mapping[str, Iterable[Mapping[str, Any]]]) -> Report:
    """Compare the rows read (``tables``: table → rows of the log's conversations) with the log's projection.

    ``tables`` must hold every row of those conversations (and, for
    conversations_by_user, the rows of their users that name them); rows of
    other conversations are not looked at.
    """
    projection = project(events)
    turn_view = turns(events)
    in_flight = set(turn_view.in_flight)
    seen = set(projection.conversations)
    found: dict[RowKey, Row] = {}
    for table, rows in tables.items():
        for row in rows:
            if str(row.get("conversation_id")) in seen:
                found[row_key(table, row)] = {c: norm(v) for c, v in row.items()}
    missing, differing = [], []
    for key, want in projection.rows.items():
        have = found.get(key)
        if have is None:
            missing.append(key)
            continue
        table = key[0]
        streaming = table == "messages" and str(want.get("message_id")) in in_flight
        for column in sorted(projection.columns.get(table, frozenset())):
            if streaming and column in CHECKPOINTED:
                continue
            if not _same(table, column, want, have):
                differing.append(Difference(key, column, want.get(column), have.get(column)))
    extra = [k for k in found if k not in projection.rows and k[0] in PRIMARY_KEYS]
    return Report(
        conversations=len(seen),
        events=len(events),
        rows_expected=len(projection.rows),
        rows_found=len(found),
        missing=sorted(missing, key=str),
        extra=sorted(extra, key=str),
        differing=differing,
        turns=turn_view,
        unprojectable=projection.unprojectable,
    )
