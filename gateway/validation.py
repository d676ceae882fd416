"""Request bodies: size, media type, JSON, field types. Each failure is the right 4xx."""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request

from gateway.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType, Unprocessable

MISSING = object()


async def json_body(request: Request, max_bytes: int, *, required: bool = True) -> dict[str, Any]:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await body_bytes(request, max_bytes, f"request body over {max_bytes} bytes")
    if not body:
        if required:
            raise BadRequest("a JSON body is required")
        return {}
    if media and media != "application/json":
        raise UnsupportedMediaType("send the body as application/json")
    data = parsed_json(body)
    if not isinstance(data, dict):
        raise Unprocessable("the body must be a JSON object")
    return data


async def body_bytes(request: Request, max_bytes: int, too_large: str) -> bytes:
    """The whole body, refused (413, ``too_large``) as soon as it is declared or read past ``max_bytes``."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(too_large)
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_bytes:
            raise PayloadTooLarge(too_large)
    return bytes(body)


def parsed_json(body: bytes) -> Any:
    """Any JSON value, or a 400 that says what is wrong with it (never quoting it)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the body is not valid UTF-8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:  # an integer of more digits than Python converts
        raise BadRequest("malformed JSON: a number too long to read") from None
    except RecursionError:  # `[[[[…` nested deeper than the parser's stack
        raise BadRequest("malformed JSON: nested too deeply") from None


def only(body: dict[str, Any], fields: set[str] | frozenset[str], what: str) -> None:
    """422 ``unknown_field`` naming the first field of ``body`` not among ``fields``."""
    unknown = sorted(set(body) - fields)
    if unknown:
        raise Unprocessable(f"`{unknown[0]}` is not a field of {what}; send {', '.join(sorted(fields))}", code="unknown_field")


def string(body: dict[str, Any], name: str, *, max_chars: int, required: bool = True, allow_empty: bool = False) -> Any:
    """A string field; MISSING when absent and not required; None when null and not required."""
    if name not in body:
        if required:
            raise Unprocessable(f"`{name}` is required", code="missing_field")
        return MISSING
    value = body[name]
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise Unprocessable(f"`{name}` must be a string")
    if not allow_empty and not value.strip():
        raise Unprocessable(f"`{name}` must not be empty")
    if len(value) > max_chars:
        raise PayloadTooLarge(f"`{name}` is longer than {max_chars} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape: not text
        raise Unprocessable(f"`{name}` is not valid Unicode text") from None
    if "\x00" in value:
        raise Unprocessable(f"`{name}` contains a NUL character")
    return value


def uuid_string(value: Any, name: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise Unprocessable(f"`{name}` is not a valid id") from None


#: How every reply id ends its derivation (parley/ids.py): a client key ending so would name another key's reply.
RESERVED_KEY_SUFFIX = ":reply"
#: The broker's keys for the tool messages and continuations it appends (streams/tool_broker.py), and the
#: keys of imported messages (gateway/imports.py).
IMPORT_KEY_PREFIX = "import:"
RESERVED_KEY_PREFIXES = ("tool:", IMPORT_KEY_PREFIX)


def client_key(body: dict[str, Any], max_chars: int) -> str:
    """``client_message_id``: a non-empty string that cannot derive another message's id (``k:reply`` as a
    message key is ``k``'s reply id)."""
    value: str = string(body, "client_message_id", max_chars=max_chars)
    if value.endswith(RESERVED_KEY_SUFFIX):
        raise Unprocessable(f"`client_message_id` must not end with `{RESERVED_KEY_SUFFIX}`", code="reserved_key")
    prefix = next((p for p in RESERVED_KEY_PREFIXES if value.startswith(p)), None)
    if prefix is not None:
        raise Unprocessable(f"`client_message_id` must not start with `{prefix}`", code="reserved_key")
    return value
