"""Imported conversations, read from the files other systems export (DESIGN.md §7, import).

Pure: a parsed JSON document in, ``Imported`` conversations out, or ``Refused`` naming what is wrong and where
(a path of keys and indexes, never a value: titles and texts are the user's content). Two formats:

- **ChatGPT's data export** (``conversations.json``: a list of conversations, or one of them). A
  conversation's ``mapping`` is a tree of nodes by id, each with its ``parent``; a node's ``message`` has an
  ``author.role``, ``create_time`` (seconds, may be null) and ``content`` (``content_type`` ``text`` or
  ``multimodal_text`` with string ``parts``); ``current_node`` is the selected leaf. Kept: the user's and the
  assistant's visible text. Dropped: the root, system and tool nodes, hidden ones (custom instructions),
  an assistant's calls of its tools (``recipient`` other than ``all``), code, browsing and reasoning displays,
  and nodes with no text; a dropped node's children hang from its nearest kept ancestor, so every branch stays.
- **Parley's own** ``parley.conversation/1`` (``GET /v1/conversations/{id}/export?format=json``), or
  ``{"conversations": [...]}`` of them.

Every node is checked before anything is built; one bad node refuses the whole file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: Most conversations one import may hold (a larger export is imported in parts).
MAX_CONVERSATIONS = 2_000
#: Most messages (kept or dropped nodes) of one conversation.
MAX_NODES = 20_000
#: Most messages kept in one import: one Kafka transaction and the rows written through before the answer.
MAX_MESSAGES = 100_000
#: Longest message kept, in UTF-8 bytes: an event carries it sealed and readers take records up to 512 KiB.
MAX_MESSAGE_BYTES = 256 * 1024
#: Longest title kept, in characters (as a rename allows).
MAX_TITLE_CHARS = 200
#: Longest source id (ids derive Parley's, and a row keeps them).
MAX_ID_CHARS = 200
#: Times before this (2000-01-01) or more than a day ahead of the import are not a real conversation's.
EARLIEST_US = 946_684_800_000_000

PARLEY_FORMAT = "parley.conversation/1"
ROLES = ("user", "assistant")
#: ChatGPT content types whose ``parts`` are the message's text.
_TEXT_TYPES = ("text", "multimodal_text")


class Refused(ValueError):
    """The file cannot be imported: ``code`` for programs, the message for people, ``where`` the JSON path."""

    def __init__(self, message: str, *, where: str = "", code: str = "invalid_export") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.code = code
        self.where = where


@dataclass(frozen=True)
class ImportedMessage:
    source_id: str
    parent_source_id: str | None  # the nearest kept ancestor; None: a root
    role: str  # user | assistant
    content: str
    created_us: int
    model: str | None = None  # the model that wrote a reply, as the file names it


@dataclass(frozen=True)
class Imported:
    """One conversation as a file holds it: messages parents first, times as it kept them."""

    source: str  # chatgpt | parley
    source_id: str
    title: str
    created_us: int
    archived: bool
    messages: tuple[ImportedMessage, ...]
    leaf_source_id: str | None
    dropped: int = 0  # nodes of the file not kept (system, tool, hidden, empty)
    updated_us: int = field(default=0)


def parse(document: Any, *, now_us: int) -> list[Imported]:
    """The conversations of ``document`` (a parsed JSON value), or ``Refused``."""
    if isinstance(document, dict) and document.get("format") == PARLEY_FORMAT:
        items, source, where = [document], "parley", None
    elif isinstance(document, dict) and isinstance(document.get("conversations"), list):
        items, source, where = document["conversations"], "parley", "conversations"
    elif isinstance(document, dict) and "mapping" in document:
        items, source, where = [document], "chatgpt", None
    elif isinstance(document, list):
        items, source, where = document, "chatgpt", ""
    else:
        raise Refused(
            "not an export Parley reads: send ChatGPT's conversations.json or a Parley conversation export",
            code="unknown_format",
        )
    if not items:
        raise Refused("the export holds no conversation", code="empty_export")
    if len(items) > MAX_CONVERSATIONS:
        raise Refused(f"more than {MAX_CONVERSATIONS} conversations; import the export in parts", code="too_many_conversations")
    read = _chatgpt if source == "chatgpt" else _parley
    paths = [f"{where}[{i}]" if where is not None else "" for i in range(len(items))]
    out = [read(item, path, now_us) for item, path in zip(items, paths)]
    if sum(len(c.messages) for c in out) > MAX_MESSAGES:
        raise Refused(f"more than {MAX_MESSAGES} messages in one import; import the export in parts", code="too_many_messages")
    seen: set[str] = set()
    for c, path in zip(out, paths):
        if c.source_id in seen:
            raise Refused("a conversation appears twice", where=f"{path}.id")
        seen.add(c.source_id)
    return out


# ------------------------------------------------------------------ ChatGPT


def _chatgpt(item: Any, where: str, now_us: int) -> Imported:
    if not isinstance(item, dict):
        raise Refused("a conversation must be an object", where=where)
    source_id = _id(item.get("conversation_id", item.get("id")), f"{where}.id")
    mapping = item.get("mapping")
    if not isinstance(mapping, dict) or not mapping:
        raise Refused("`mapping` must be an object of nodes", where=f"{where}.mapping")
    if len(mapping) > MAX_NODES:
        raise Refused(f"more than {MAX_NODES} messages in one conversation", where=f"{where}.mapping", code="too_many_messages")
    created = _seconds(item.get("create_time"), f"{where}.create_time", now_us, required=False)
    parents: dict[str, str | None] = {}
    kept: dict[str, tuple[str, str, int | None, str | None]] = {}  # node → (role, text, time, model)
    for key, node in mapping.items():
        at = f"{where}.mapping.{_safe(key)}"
        if not isinstance(node, dict):
            raise Refused("a node must be an object", where=at)
        node_id = _id(node.get("id", key), f"{at}.id")
        if node_id != key:
            raise Refused("a node's `id` differs from its key", where=at)
        parent = node.get("parent")
        parents[key] = None if parent is None else _id(parent, f"{at}.parent")
        message = node.get("message")
        if message is None:
            continue
        if not isinstance(message, dict):
            raise Refused("`message` must be an object or null", where=f"{at}.message")
        visible = _chatgpt_text(message, f"{at}.message")
        if visible is not None:
            at_us = _seconds(message.get("create_time"), f"{at}.message.create_time", now_us, required=False)
            kept[key] = (*visible, at_us, _model((message.get("metadata") or {}).get("model_slug")))
    for key, parent in parents.items():
        if parent is not None and parent not in parents:
            raise Refused("`parent` names no node of the conversation", where=f"{where}.mapping.{_safe(key)}.parent")
    order = _parents_first(parents, where)
    current = item.get("current_node")
    if current is not None:
        current = _id(current, f"{where}.current_node")
        if current not in parents:
            raise Refused("`current_node` names no node of the conversation", where=f"{where}.current_node")
    messages = _kept_tree(order, parents, kept, created)
    if not messages:
        raise Refused("the conversation has no message with text", where=where, code="empty_conversation")
    leaf = _nearest_kept(current, parents, kept) if current is not None else None
    first = messages[0].created_us
    return Imported(
        "chatgpt",
        source_id,
        _title(item.get("title"), f"{where}.title"),
        created if created is not None else first,
        _flag(item.get("is_archived"), f"{where}.is_archived"),
        tuple(messages),
        leaf if leaf is not None else messages[-1].source_id,
        dropped=len(parents) - len(messages),
        updated_us=max(m.created_us for m in messages),
    )


def _chatgpt_text(message: dict[str, Any], where: str) -> tuple[str, str] | None:
    """(role, text) of a message a person saw, else None."""
    author = message.get("author")
    if not isinstance(author, dict) or not isinstance(author.get("role"), str):
        raise Refused("`author.role` must be a string", where=f"{where}.author")
    role = author["role"]
    metadata = message.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise Refused("`metadata` must be an object", where=f"{where}.metadata")
    if role not in ROLES or metadata.get("is_visually_hidden_from_conversation") is True:
        return None
    if message.get("recipient", "all") != "all":  # the model calling one of its tools
        return None
    content = message.get("content")
    if not isinstance(content, dict) or not isinstance(content.get("content_type"), str):
        raise Refused("`content.content_type` must be a string", where=f"{where}.content")
    if content["content_type"] not in _TEXT_TYPES:
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise Refused("`content.parts` must be a list", where=f"{where}.content.parts")
    # Images and files are pointers into the export's other files: their text is not here.
    texts = [p for p in parts if isinstance(p, str)]
    text = "\n\n".join(t for t in texts if t.strip())
    if not text.strip():
        return None
    return role, _text(text, f"{where}.content.parts")


# ------------------------------------------------------------------ Parley


def _parley(item: Any, where: str, now_us: int) -> Imported:
    if not isinstance(item, dict) or item.get("format") != PARLEY_FORMAT:
        raise Refused(f"not a `{PARLEY_FORMAT}` conversation", where=where)
    source_id = _id(item.get("id"), f"{where}.id")
    raw = item.get("messages")
    if not isinstance(raw, list) or not raw:
        raise Refused("`messages` must be a non-empty list", where=f"{where}.messages")
    if len(raw) > MAX_NODES:
        raise Refused(f"more than {MAX_NODES} messages in one conversation", where=f"{where}.messages", code="too_many_messages")
    parents: dict[str, str | None] = {}
    kept: dict[str, tuple[str, str, int | None, str | None]] = {}
    for i, m in enumerate(raw):
        at = f"{where}.messages[{i}]"
        if not isinstance(m, dict):
            raise Refused("a message must be an object", where=at)
        mid = _id(m.get("id"), f"{at}.id")
        if mid in parents:
            raise Refused("a message id appears twice", where=f"{at}.id")
        parent = m.get("parent_id")
        parents[mid] = None if parent is None else _id(parent, f"{at}.parent_id")
        role = m.get("role")
        if not isinstance(role, str):
            raise Refused("`role` must be a string", where=f"{at}.role")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise Refused("`content` must be a string or null", where=f"{at}.content")
        if role in ROLES and content and content.strip():
            kept[mid] = (role, _text(content, f"{at}.content"), _iso(m.get("created_at"), f"{at}.created_at", now_us), _model(m.get("model")))
    for i, (mid, parent) in enumerate(parents.items()):
        if parent is not None and parent not in parents:
            raise Refused("`parent_id` names no message of the conversation", where=f"{where}.messages[{i}].parent_id")
    order = _parents_first(parents, where)
    created = _iso(item.get("created_at"), f"{where}.created_at", now_us)
    messages = _kept_tree(order, parents, kept, created)
    if not messages:
        raise Refused("the conversation has no message with text", where=where, code="empty_conversation")
    leaf = item.get("selected_leaf_id")
    if leaf is not None:
        leaf = _id(leaf, f"{where}.selected_leaf_id")
        if leaf not in parents:
            raise Refused("`selected_leaf_id` names no message of the conversation", where=f"{where}.selected_leaf_id")
        leaf = _nearest_kept(leaf, parents, kept)
    return Imported(
        "parley",
        source_id,
        _title(item.get("title"), f"{where}.title"),
        created if created is not None else messages[0].created_us,
        _flag(item.get("archived"), f"{where}.archived"),
        tuple(messages),
        leaf if leaf is not None else messages[-1].source_id,
        dropped=len(parents) - len(messages),
        updated_us=max(m.created_us for m in messages),
    )


# ------------------------------------------------------------------ the tree


def _parents_first(parents: dict[str, str | None], where: str) -> list[str]:
    """Every node after its parent; a cycle (which no tree has) refuses the file."""
    children: dict[str | None, list[str]] = {}
    for node, parent in parents.items():
        children.setdefault(parent, []).append(node)
    order: list[str] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children.get(node, [])))
    if len(order) != len(parents):
        raise Refused("the messages' parents form a cycle", where=where, code="invalid_tree")
    return order


def _kept_tree(
    order: list[str], parents: dict[str, str | None], kept: dict[str, tuple[str, str, int | None, str | None]], created: int | None
) -> list[ImportedMessage]:
    """The kept nodes, each under its nearest kept ancestor, parents first. A time the file lacks (or one
    before its parent's) becomes 1 µs after the parent's, so a branch reads in order and siblings sort."""
    times: dict[str, int] = {}
    out: list[ImportedMessage] = []
    for node in order:
        if node not in kept:
            continue
        role, text, at, model = kept[node]
        parent = _nearest_kept(parents[node], parents, kept)
        floor = times[parent] + 1 if parent is not None else (created or EARLIEST_US)
        times[node] = at if at is not None and at >= floor else floor
        out.append(ImportedMessage(node, parent, role, text, times[node], model if role == "assistant" else None))
    return out


def _nearest_kept(node: str | None, parents: dict[str, str | None], kept: dict[str, Any]) -> str | None:
    seen: set[str] = set()
    while node is not None and node not in kept and node not in seen:
        seen.add(node)
        node = parents.get(node)
    return node if node is not None and node in kept else None


# ------------------------------------------------------------------ values


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS or not value.isprintable():
        raise Refused(f"an id must be a printable string of 1 to {MAX_ID_CHARS} characters", where=where)
    return value


def _model(value: Any) -> str | None:
    """A model's name as the file gives it, if it is one (never refused: it only labels a reply)."""
    return value if isinstance(value, str) and 0 < len(value) <= 100 and value.isprintable() else None


def _safe(key: Any) -> str:
    """A node key fit for an error's path (ids are not content, but a hostile file may put anything there)."""
    return key if isinstance(key, str) and len(key) <= MAX_ID_CHARS and key.isprintable() else "<key>"


def _text(value: str, where: str) -> str:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise Refused("a message is not valid Unicode text", where=where) from None
    if size > MAX_MESSAGE_BYTES:
        raise Refused(f"a message is over {MAX_MESSAGE_BYTES} bytes", where=where, code="message_too_large")
    if "\x00" in value:
        raise Refused("a message contains a NUL character", where=where)
    return value


def _title(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Refused("`title` must be a string or null", where=where)
    value = value.strip()[:MAX_TITLE_CHARS]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("`title` is not valid Unicode text", where=where) from None
    return value.replace("\x00", "")


def _flag(value: Any, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Refused("must be true, false or null", where=where)
    return value


def _seconds(value: Any, where: str, now_us: int, *, required: bool) -> int | None:
    """ChatGPT's times: seconds since the epoch, fractional; null when it did not keep one."""
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Refused("a time must be seconds since 1970 (a number) or null", where=where)
    return _bounded(round(value * 1_000_000), where, now_us)


def _iso(value: Any, where: str, now_us: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise Refused("a time must be an ISO 8601 string or null", where=where)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise Refused("a time must be an ISO 8601 string or null", where=where) from None
    if parsed.tzinfo is None:
        raise Refused("a time must name its offset (e.g. +00:00)", where=where)
    return _bounded(round(parsed.timestamp() * 1_000_000), where, now_us)


def _bounded(us: int, where: str, now_us: int) -> int:
    if not EARLIEST_US <= us <= now_us + 86_400_000_000:
        raise Refused("a time before 2000 or in the future", where=where)
    return us
