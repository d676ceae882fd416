"""The key service against real Cassandra: data keys made once, sealed text opened by any process,
an erasure that leaves nothing readable (parley/keys.py), and `parley keys rotate-kek`, after which a
wrapped key copied before the rotation (an old SSTable, a backup) opens no more (parley/kek_rotation.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from typer.testing import CliRunner

from parley.keys import KeyService
from parley.kms import AwsKms, LocalKms, WrappedKeyRefused
from schemas import sealing
from tests.fixtures.aws_kms import REGION, KmsServer, kms_server
from tools.cli import app

#: Where the values of these tests are sealed for (schemas/sealing.py: a field or cell and its row).
AT = sealing.cell_at("messages", "content", "00000000-0000-0000-0000-0000000000a1")


@pytest.fixture
def kms(tmp_path: Path) -> LocalKms:
    return LocalKms(tmp_path / "kms" / "kek.json")


def _service(cassandra, keyspace: str, kms: LocalKms, **kwargs) -> KeyService:  # type: ignore[no-untyped-def]
    return KeyService(cassandra, kms, keyspace, **kwargs)  # the run's keyspace (the session's may be moved by other tests)


def test_what_one_process_seals_another_opens_and_an_erasure_ends_for_every_process(cassandra, cassandra_settings, kms: LocalKms) -> None:
    ks = cassandra_settings.keyspace
    user = f"u_{uuid.uuid4().hex[:16]}"
    writer, reader = _service(cassandra, ks, kms), _service(cassandra, ks, kms, cache_s=0.0)
    value = writer.seal(user, "the canary sentence", at=AT)
    assert sealing.is_sealed(value) and "canary" not in value and sealing.owner_of(value) == user
    assert reader.open(value, at=AT) == "the canary sentence"
    assert writer.seal(user, "same", at=AT, deterministic=True) == reader.seal(user, "same", at=AT, deterministic=True)
    assert writer.seal(user, "same", at=AT) != writer.seal(user, "same", at=AT)  # events: a fresh nonce each time
    assert writer.blind(user, "canary") == reader.blind(user, "canary") != writer.blind(f"{user}x", "canary")

    writer.erase(user)
    assert reader.open(value, at=AT) == sealing.ERASED  # within its cache bound (0 here) every process
    assert writer.open(value, at=AT) == sealing.ERASED  # the eraser at once
    assert reader.seal(user, "after", at=AT) == sealing.ERASED  # no new key is ever made for an erased user
    rows = cassandra.execute(f"SELECT version, wrapped FROM {ks}.data_keys WHERE user_id = %s", (user,)).all()
    assert [(r.version, r.wrapped) for r in rows] == [(0, None)]  # only the mark is left


def test_a_tampered_value_is_refused_not_misread(cassandra, cassandra_settings, kms: LocalKms) -> None:
    service = _service(cassandra, cassandra_settings.keyspace, kms)
    user = f"u_{uuid.uuid4().hex[:16]}"
    value = service.seal(user, "hello", at=AT)
    other = f"u_{uuid.uuid4().hex[:16]}"
    service.seal(other, "x", at=AT)  # the other user has a key too
    with pytest.raises(sealing.Unopenable):
        service.open(value.replace(user, other, 1), at=AT)  # bound to its owner: moving it to another user fails


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
    value = up.seal(user, "held", at=AT)
    away = KeyService(lambda: connect(closed, connect_timeout=1.0), kms, cassandra_settings.keyspace)
    event = MessagePosted(conversation_id=str(uuid.uuid4()), user_id=user, message_id=str(uuid.uuid4()), content="x", client_message_id="c")
    held = sealing.installed()
    try:
        with pytest.raises(KeyUnavailable) as raised:
            away.open(value, at=AT)
        assert isinstance(raised.value, StoreUnavailable) and not isinstance(raised.value, codec.CodecError)
        sealing.install(up)
        data = codec.encode(event)
        sealing.install(away)
        for attempt in (lambda: away.seal(user, "x", at=AT), lambda: codec.decode(data), lambda: asyncio.run(codec.decode_async(data))):
            with pytest.raises(KeyUnavailable):
                attempt()
        sealing.install(up)
        assert asyncio.run(codec.decode_async(data)) == event  # where the key is held, nothing changes
    finally:
        sealing.install(held)
        away.close()
        up.close()


# ---------------------------------------------------------------- parley keys rotate-kek


@pytest.fixture(scope="module")
def keys_keyspace(cassandra, cassandra_settings) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A data_keys of the rotation tests' own: a rotation reads every row of its table, and the run's
    shared one holds rows of other tests, wrapped under other key files."""
    from parley.migrate import migrate

    name = f"{cassandra_settings.keyspace}_kek"
    migrate(cassandra, name, cassandra_settings.replication)
    yield name
    cassandra.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)


@pytest.fixture
def keyspace(cassandra, keys_keyspace: str) -> str:  # type: ignore[no-untyped-def]
    cassandra.execute(f"TRUNCATE {keys_keyspace}.data_keys", timeout=60)
    return keys_keyspace


def _user() -> str:
    return f"u_{uuid.uuid4().hex[:16]}"


def _wrapped(cassandra, keyspace: str, user: str) -> tuple[str, bytes]:  # type: ignore[no-untyped-def]
    """(kek_id, wrapped) of the user's data key, as an SSTable or a backup would hold it."""
    row = cassandra.execute(f"SELECT kek_id, wrapped FROM {keyspace}.data_keys WHERE user_id = %s AND version = 1", (user,)).one()
    return row.kek_id, row.wrapped


def _rotate_kek(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["keys", "rotate-kek", *args], env=env)


def test_after_rotate_kek_a_key_copied_before_opens_no_more_and_live_content_still_opens(cassandra, keyspace: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "kek.json"
    service = KeyService(cassandra, LocalKms(path), keyspace)
    live, erased, late = _user(), _user(), _user()
    value, gone = service.seal(live, "live text", at=AT), service.seal(erased, "erased text", at=AT)
    copied = {u: _wrapped(cassandra, keyspace, u) for u in (live, erased)}  # before the rotation: a backup
    service.erase(erased)
    LocalKms(path).begin_rotation()  # a rotation that stopped after making its KEK...
    late_value = service.seal(late, "made during the rotation", at=AT)  # ...while a process wrapped a new key under it
    late_row = _wrapped(cassandra, keyspace, late)
    assert late_row[0] == "kek-2"

    result = _rotate_kek({"PARLEY_KMS": "local", "PARLEY_KMS_KEY_FILE": str(path), "PARLEY_KEYS_KEYSPACE": keyspace})
    assert result.exit_code == 0, result.output
    assert "retired (removed from the key file): kek-1" in result.output
    assert json.loads(path.read_text())["keys"].keys() == {"kek-2"}  # resumed under its KEK, not begun again
    assert _wrapped(cassandra, keyspace, late) == late_row  # already under the new KEK: left as it was
    assert _wrapped(cassandra, keyspace, live)[0] == "kek-2"

    fresh = KeyService(cassandra, LocalKms(path), keyspace, cache_s=0.0)
    assert fresh.open(value, at=AT) == "live text" and fresh.open(late_value, at=AT) == "made during the rotation"
    assert service.open(value, at=AT) == "live text"  # the data key is unchanged: keys held in caches go on working
    for user in (live, erased):
        with pytest.raises(WrappedKeyRefused):
            LocalKms(path).unwrap(user, *copied[user])  # the copy from before the rotation opens no more
    assert fresh.open(gone, at=AT) == sealing.ERASED  # the erased user's key stays destroyed: only the mark is left
    rows = cassandra.execute(f"SELECT version, wrapped FROM {keyspace}.data_keys WHERE user_id = %s", (erased,)).all()
    assert [(r.version, r.wrapped) for r in rows] == [(0, None)]

    cassandra.execute(  # a backup of the row restored over it
        f"UPDATE {keyspace}.data_keys SET kek_id = %s, wrapped = %s WHERE user_id = %s AND version = 1", (*copied[live], live)
    )
    with pytest.raises(WrappedKeyRefused):
        KeyService(cassandra, LocalKms(path), keyspace, cache_s=0.0).open(value, at=AT)


def test_rotate_kek_on_aws_moves_every_key_to_the_new_kms_key_and_names_the_old_one_to_retire(
    cassandra, keyspace: str, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    """Against moto's KMS server: keys wrapped under an old KMS key, and under the local key file a
    deployment ran before AWS KMS (--from-key-file), all end under the new key."""
    with kms_server() as aws:
        old_arn, new_arn = aws.create_key(), aws.create_key()
        key_file = tmp_path / "kek.json"
        on_file = KeyService(cassandra, LocalKms(key_file), keyspace)
        on_old = KeyService(cassandra, AwsKms(old_arn, region=REGION, endpoint_url=aws.endpoint_url), keyspace)
        a, b = _user(), _user()
        value_a, value_b = on_file.seal(a, "under the key file", at=AT), on_old.seal(b, "under the old KMS key", at=AT)
        assert _wrapped(cassandra, keyspace, b)[0] == old_arn

        env = {
            "PARLEY_KMS": "aws",
            "PARLEY_KMS_KEY_ID": new_arn,
            "PARLEY_KMS_REGION": REGION,
            "PARLEY_KMS_ENDPOINT_URL": aws.endpoint_url,
            "PARLEY_KEYS_KEYSPACE": keyspace,
        }
        refused = _rotate_kek(env)  # without the key file, the key it wrapped cannot be moved: nothing is retired
        assert refused.exit_code == 1 and "would not unwrap the data keys of 1 users" in refused.output, refused.output
        assert "schedule-key-deletion" not in refused.output
        c = _user()
        value_c = on_old.seal(c, "wrapped by a process not yet moved to the new key", at=AT)  # as during a rollout
        result = _rotate_kek(env, "--from-key-file", str(key_file))  # resumed: b's row is under the new key already
        assert result.exit_code == 0, result.output
        assert f"aws kms schedule-key-deletion --key-id {old_arn} --pending-window-in-days 7" in result.output
        assert "Retire every earlier generation of the tenancy key" in result.output
        assert {_wrapped(cassandra, keyspace, u)[0] for u in (a, b, c)} == {new_arn}
        fresh = KeyService(cassandra, AwsKms(new_arn, region=REGION, endpoint_url=aws.endpoint_url), keyspace, cache_s=0.0)
        assert fresh.open(value_a, at=AT) == "under the key file" and fresh.open(value_b, at=AT) == "under the old KMS key"
        assert fresh.open(value_c, at=AT) == "wrapped by a process not yet moved to the new key"
