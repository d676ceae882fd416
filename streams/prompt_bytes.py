"""How many bytes a prompt takes on Kafka once sealed, measured without sealing it.

Consumers read no record over ``parley.consumer.DEFAULT_MAX_EVENT_BYTES``
(512 KiB; the broker refuses 1 MiB): a larger one is dead-lettered, and its
turn would never end. A prompt travels in full twice, in the InferenceRequested
on ``chat.inference`` and again inside the router's InferenceRouted on
``chat.inference.<pool>`` (docs/design.md §4 says why it is not a reference), so the
context builder holds every InferenceRequested to the limit less
``ROUTED_BYTES``, what routing adds around it. Sealing (``schemas.sealing``)
turns each content string into base64 of its ciphertext, about 4/3 of its
UTF-8 bytes plus a prefix that names the owner and key; the counts here are
upper bounds of that, so a prompt that passes here passes the consumers.
"""

from __future__ import annotations

import io
import math

import fastavro

from schemas import codec, sealing
from schemas.events import Event, PromptMessage
from schemas.records import to_record

#: What an InferenceRouted adds to the request it carries: its own ids, pool, model, partition and reasons.
ROUTED_BYTES = 8 * 1024
#: Most digits of a data key's version in a sealed value.
_VERSION_DIGITS = 20
#: AES-GCM's nonce and tag around the ciphertext (parley/keys.py).
_NONCE, _TAG = 12, 16


def _varint(n: int) -> int:
    """Bytes of Avro's zig-zag varint length prefix for ``n``."""
    return max(1, math.ceil((n * 2).bit_length() / 7))


def sealed_bytes(text: str, owner: str) -> int:
    """Most bytes ``text`` takes as an Avro string once sealed for ``owner`` (its length prefix included)."""
    n = len(text.encode())
    if n == 0:
        return 1  # empty text is not sealed
    size = len(sealing.PREFIX) + len(owner.encode()) + 1 + _VERSION_DIGITS + 1 + 4 * math.ceil((_NONCE + n + _TAG) / 3)
    return size + _varint(size)


def message_bytes(message: PromptMessage, owner: str) -> int:
    """Most bytes one prompt message takes in an InferenceRequested: its role and its sealed content."""
    return 1 + len(message.role) + sealed_bytes(message.content, owner)


def wire_bytes(event: Event) -> int:
    """Most bytes ``event`` takes as a record once sealed: its plain encoding, each sealed value grown to its
    sealed size. No key is needed, so it runs anywhere (the builder's counting thread)."""
    _, parsed = codec.default_schemas().current[type(event).__name__]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, to_record(event))
    owner = str(getattr(event, "user_id", ""))
    growth = sum(sealed_bytes(v, owner) - len(v.encode()) for v in sealing.sealed_values(event) if v)
    return codec.HEADER_LEN + buf.tell() + growth
