"""The KMSs (parley/kms.py): a wrapped data key opens only for its owner and only while its KEK lives; the
local key file's rotation; the AWS adapter against a real KMS-speaking HTTP server (moto's, with boto3),
its errors translated into the two the key service knows. Rotation over real Cassandra:
tests/integration/test_keys.py."""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.errors import StoreUnavailable
from parley.kek_rotation import Pass, settled
from parley.keys import KeySettings, kms_from
from parley.kms import AwsKms, KmsUnavailable, LocalKms, WrappedKeyRefused
from parley.settings import from_env
from tests.fixtures.aws_kms import REGION, KmsServer, kms_server

KEY = b"k" * 32


def test_a_local_wrapped_key_opens_only_for_its_user(tmp_path: Path) -> None:
    path = tmp_path / "kms" / "kek.json"
    first = LocalKms(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kek_id, wrapped = first.wrap("u1", KEY)
    assert kek_id == first.active() == "kek-1"
    assert LocalKms(path).unwrap("u1", kek_id, wrapped) == KEY  # a second process reads the same KEK
    with pytest.raises(WrappedKeyRefused):
        LocalKms(path).unwrap("u2", kek_id, wrapped)  # bound to its user (associated data)
    with pytest.raises(WrappedKeyRefused):
        first.unwrap("u1", "kek-9", wrapped)  # a KEK the file does not hold


def test_a_local_rotation_reaches_every_process_resumes_and_retires_the_old_kek(tmp_path: Path) -> None:
    path = tmp_path / "kek.json"
    rotating, other = LocalKms(path), LocalKms(path)
    old = other.wrap("u1", KEY)
    assert rotating.begin_rotation() == "kek-2"
    assert rotating.begin_rotation() == "kek-2"  # a rotation under way is resumed, not begun again
    assert other.wrap("u2", KEY)[0] == "kek-2"  # the other process sees the new KEK at its next wrap
    assert other.unwrap("u1", *old) == KEY  # and the old one still unwraps until it is retired
    assert rotating.retire_others() == ["kek-1"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["keys"].keys() == {"kek-2"}
    with pytest.raises(WrappedKeyRefused):
        other.unwrap("u1", *old)  # a copy wrapped before the rotation (an SSTable, a backup) is useless now
    assert rotating.begin_rotation() == "kek-3"  # the next rotation makes a new KEK again


def test_a_rotation_settles_only_when_a_pass_found_every_key_under_the_target() -> None:
    assert settled([Pass("kek-2", rewrapped=3), Pass("kek-2", already=3)])
    assert not settled([Pass("kek-2", rewrapped=3)])  # a process may have wrapped under the old KEK meanwhile
    assert not settled([Pass("kek-2", already=2, refused=["u9"])])  # a key the old KEK would not open: kept


@pytest.fixture(scope="module")
def aws() -> Iterator[KmsServer]:
    with kms_server() as server:
        yield server


def _aws(server: KmsServer, key: str) -> AwsKms:
    return AwsKms(key, region=REGION, endpoint_url=server.endpoint_url)


def test_aws_wraps_under_the_key_with_the_user_as_encryption_context(aws: KmsServer) -> None:
    arn = aws.create_key()
    kms = _aws(aws, arn)
    kek_id, wrapped = kms.wrap("u1", KEY)
    assert kek_id == arn == kms.active() and KEY not in wrapped
    assert _aws(aws, arn).unwrap("u1", kek_id, wrapped) == KEY
    with pytest.raises(WrappedKeyRefused):
        kms.unwrap("u2", kek_id, wrapped)  # another user's context: KMS refuses
    with pytest.raises(WrappedKeyRefused):
        kms.unwrap("u1", aws.create_key(), wrapped)  # asked under another key than the one that wrapped it
    key_id = arn.rsplit("/", 1)[1]
    assert _aws(aws, key_id).active() == arn  # a bare key id is resolved to the ARN rows name


def test_aws_unreachable_is_transient_and_a_missing_key_id_is_refused_by_name(aws: KmsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    away = AwsKms(aws.create_key(), region=REGION, endpoint_url=closed)
    with pytest.raises(KmsUnavailable) as raised:
        away.wrap("u1", KEY)
    assert isinstance(raised.value, StoreUnavailable)  # the key service retries it as a Cassandra outage
    monkeypatch.setenv("PARLEY_KMS", "aws")
    with pytest.raises(ValueError, match="PARLEY_KMS_KEY_ID"):
        kms_from(from_env(KeySettings), Path("."))


def test_the_kms_is_chosen_by_name(aws: KmsServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    arn = aws.create_key()
    for name, value in {"PARLEY_KMS": "aws", "PARLEY_KMS_KEY_ID": arn, "PARLEY_KMS_REGION": REGION, "PARLEY_KMS_ENDPOINT_URL": aws.endpoint_url}.items():
        monkeypatch.setenv(name, value)
    kms = kms_from(from_env(KeySettings), tmp_path)
    assert isinstance(kms, AwsKms) and kms.wrap("u1", KEY)[0] == arn
    monkeypatch.setenv("PARLEY_KMS", "vault")
    with pytest.raises(ValueError, match="PARLEY_KMS='vault'"):
        kms_from(from_env(KeySettings), tmp_path)
    monkeypatch.setenv("PARLEY_KMS", "local")
    assert isinstance(kms_from(from_env(KeySettings), tmp_path), LocalKms)
