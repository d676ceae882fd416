"""The key service against real Cassandra: data keys made once, sealed text opened by any process,
and an erasure that leaves nothing readable (parley/keys.py)."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from parley.keys import KeyService, LocalKms
from schemas import sealing


@pytest.fixture
def kms(tmp_path: Path) -> LocalKms:
    return LocalKms(tmp_path / "kms" / "kek.json")


def _service(cassandra, keyspace: str, kms: LocalKms, **kwargs) -> KeyService:  # type: ignore[no-untyped-def]
    return KeyService(cassandra, kms, keyspace, **kwargs)  # the run's keyspace (the session's may be moved by other tests)


def test_the_key_file_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "kms" / "kek.json"
    first = LocalKms(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    wrapped = first.wrap("u1", b"k" * 32)
    assert LocalKms(path).unwrap("u1", *wrapped) == b"k" * 32  # a second process reads the same KEK
    with pytest.raises(InvalidTag):
        LocalKms(path).unwrap("u2", *wrapped)  # a wrapped key is bound to its user


def test_what_one_process_seals_another_opens_and_an_erasure_ends_for_every_process(cassandra, cassandra_settings, kms: LocalKms) -> None:
    ks = cassandra_settings.keyspace
    user = f"u_{uuid.uuid4().hex[:16]}"
    writer, reader = _service(cassandra, ks, kms), _service(cassandra, ks, kms, cache_s=0.0)
    value = writer.seal(user, "the canary sentence")
    assert sealing.is_sealed(value) and "canary" not in value and sealing.owner_of(value) == user
    assert reader.open(value) == "the canary sentence"
    assert writer.seal(user, "same", deterministic=True) == reader.seal(user, "same", deterministic=True)
    assert writer.seal(user, "same") != writer.seal(user, "same")  # events: a fresh nonce each time
    assert writer.blind(user, "canary") == reader.blind(user, "canary") != writer.blind(f"{user}x", "canary")

    writer.erase(user)
    assert reader.open(value) == sealing.ERASED  # within its cache bound (0 here) every process
    assert writer.open(value) == sealing.ERASED  # the eraser at once
    assert reader.seal(user, "after") == sealing.ERASED  # no new key is ever made for an erased user
    rows = cassandra.execute(f"SELECT version, wrapped FROM {ks}.data_keys WHERE user_id = %s", (user,)).all()
    assert [(r.version, r.wrapped) for r in rows] == [(0, None)]  # only the mark is left


def test_a_tampered_value_is_refused_not_misread(cassandra, cassandra_settings, kms: LocalKms) -> None:
    service = _service(cassandra, cassandra_settings.keyspace, kms)
    user = f"u_{uuid.uuid4().hex[:16]}"
    value = service.seal(user, "hello")
    other = f"u_{uuid.uuid4().hex[:16]}"
    service.seal(other, "x")  # the other user has a key too
    with pytest.raises(InvalidTag):
        service.open(value.replace(user, other, 1))  # bound to its owner: moving it to another user fails


def test_with_cassandra_unreachable_a_key_read_fails_as_the_typed_transient_error(
    cassandra, cassandra_settings, kms: LocalKms
) -> None:
    """The real driver against a port nothing listens on: every way in (sync seal and open, the async
    prefetch, the codec) raises KeyUnavailable, a StoreUnavailable, never a CodecError or a driver error;
    a process starts without Cassandra (the session is made on first use); a key held goes on working."""
    import asyncio
    import socket
    from dataclasses import replace

    from parley.cassandra import connect
    from parley.errors import StoreUnavailable
    from parley.keys import KeyUnavailable
    from schemas import codec
    from schemas.events import MessagePosted

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = replace(cassandra_settings, hosts="127.0.0.1", port=s.getsockname()[1])
    user = f"u_{uuid.uuid4().hex[:16]}"
    up = _service(cassandra, cassandra_settings.keyspace, kms)
    value = up.seal(user, "held")
    away = KeyService(lambda: connect(closed, connect_timeout=1.0), kms, cassandra_settings.keyspace)
    event = MessagePosted(conversation_id=str(uuid.uuid4()), user_id=user, message_id=str(uuid.uuid4()), content="x", client_message_id="c")
    held = sealing.installed()
    try:
        with pytest.raises(KeyUnavailable) as raised:
            away.open(value)
        assert isinstance(raised.value, StoreUnavailable) and not isinstance(raised.value, codec.CodecError)
        sealing.install(up)
        data = codec.encode(event)
        sealing.install(away)
        for attempt in (lambda: away.seal(user, "x"), lambda: codec.decode(data), lambda: asyncio.run(codec.decode_async(data))):
            with pytest.raises(KeyUnavailable):
                attempt()
        sealing.install(up)
        assert asyncio.run(codec.decode_async(data)) == event  # where the key is held, nothing changes
    finally:
        sealing.install(held)
        away.close()
        up.close()
