"""Key-encryption keys (KEKs): the KMS that wraps and unwraps users' data keys (DESIGN.md §12).

A KMS only ever wraps and unwraps a data key, always bound to its owner: a key wrapped for one user
cannot be unwrapped for another (associated data locally, the ``user_id`` encryption context on AWS).

- ``LocalKms``: KEKs in a 0600 JSON file under the data dir, for ``make run`` and the tests. Rotating
  adds a key and makes it active; retiring removes the old one from the file.
- ``AwsKms``: a customer-managed AWS KMS key (``PARLEY_KMS=aws``); the KEK never leaves the KMS.
  Rotating is moving to another KMS key; retiring is scheduling the old key's deletion.

Exceptions::

    WrappedKeyRefused   the KMS will not unwrap this key: its KEK is retired (a row from before a rotation,
                        restored from a backup), or it was wrapped for another user. Final, not transient.
    KmsUnavailable      (a StoreUnavailable) the KMS does not answer or throttles: retry.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from parley.errors import StoreUnavailable

NONCE = 12


class WrappedKeyRefused(Exception):
    """The KMS refused to unwrap a data key (retired KEK, another user's key, no permission)."""


class KmsUnavailable(StoreUnavailable):
    """The KMS did not answer, or throttled: transient, as a Cassandra outage is for the key service."""


class Kms(Protocol):
    def wrap(self, user_id: str, key: bytes) -> tuple[str, bytes]:
        """(kek_id, wrapped) of a data key, under the active KEK."""
        ...

    def unwrap(self, user_id: str, kek_id: str, wrapped: bytes) -> bytes:
        """The data key; ``WrappedKeyRefused`` if ``kek_id`` is retired or the key is another user's."""
        ...

    def active(self) -> str:
        """The kek_id that ``wrap`` uses now (what a rotation re-wraps to)."""
        ...


class LocalKms:
    """KEKs in a JSON file ``{"active": id, "keys": {id: base64}}``, 0600. Made on first use by
    whichever process comes first (an exclusive create: all agree on one KEK). The file is read again
    whenever it changes on disk, so a rotation reaches every process at its next wrap or unwrap."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seen: tuple[int, int] | None = None  # (inode, mtime_ns) of the file last read
        self._keks: dict[str, Any] = {}
        self._load()

    def _load(self) -> None:
        if not self._path.exists():
            self._path.parent.mkdir(parents=True, exist_ok=True)
            body = json.dumps({"active": "kek-1", "keys": {"kek-1": _new_kek()}})
            try:
                fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(body)
        for _ in range(50):  # another process may be between its create and its write
            st = self._path.stat()
            text = self._path.read_text()
            if text:
                self._keks, self._seen = json.loads(text), (st.st_ino, st.st_mtime_ns)
                return
            time.sleep(0.02)
        raise RuntimeError(f"the KMS key file {self._path} is empty")

    def _current(self) -> dict[str, Any]:
        st = self._path.stat()
        if (st.st_ino, st.st_mtime_ns) != self._seen:
            self._load()
        return self._keks

    def active(self) -> str:
        return str(self._current()["active"])

    def _kek(self, kek_id: str) -> AESGCM:
        keys: dict[str, str] = self._current()["keys"]
        if kek_id not in keys:
            raise WrappedKeyRefused(f"the local KMS ({self._path}) has no key-encryption key {kek_id!r}: it was retired by a rotation, or this is another deployment's key file")
        return AESGCM(base64.b64decode(keys[kek_id]))

    def wrap(self, user_id: str, key: bytes) -> tuple[str, bytes]:
        kek_id = self.active()
        nonce = os.urandom(NONCE)
        return kek_id, nonce + self._kek(kek_id).encrypt(nonce, key, user_id.encode())

    def unwrap(self, user_id: str, kek_id: str, wrapped: bytes) -> bytes:
        try:
            return self._kek(kek_id).decrypt(wrapped[:NONCE], wrapped[NONCE:], user_id.encode())
        except InvalidTag:
            raise WrappedKeyRefused(f"the data key wrapped under {kek_id!r} does not open for this user") from None

    # ------------------------------------------------------------ rotation (parley keys rotate-kek)

    def begin_rotation(self) -> str:
        """Make a new KEK the active one and return its id; if a rotation is already under way (the file
        holds more than one key), return its KEK instead, so running the rotation again resumes it."""
        with self._locked() as keks:
            keys: dict[str, str] = keks["keys"]
            if len(keys) == 1:
                kek_id = f"kek-{max(_number(k) for k in keys) + 1}"
                keys[kek_id] = _new_kek()
                keks["active"] = kek_id
            return str(keks["active"])

    def retire_others(self) -> list[str]:
        """Remove every KEK but the active one from the file; returns the ids removed. Whatever is still
        wrapped under them (an old SSTable, a backup) can never be unwrapped again."""
        with self._locked() as keks:
            gone = sorted(k for k in keks["keys"] if k != keks["active"])
            for kek_id in gone:
                del keks["keys"][kek_id]
            return gone

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The key file's content to change, written back atomically under an exclusive lock (two
        rotations at once would otherwise each add a key); readers see the old file or the new one."""
        with open(self._path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._load()
            keks: dict[str, Any] = json.loads(json.dumps(self._keks))
            yield keks
            if keks != self._keks:
                temp = self._path.with_name(f".{self._path.name}.{os.getpid()}")
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(json.dumps(keks))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(temp, self._path)
                self._load()


def _new_kek() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def _number(kek_id: str) -> int:
    found = re.fullmatch(r"kek-(\d+)", kek_id)
    return int(found.group(1)) if found else 0


#: AWS error codes that mean "this key will not be unwrapped" (retired, disabled, pending deletion, no
#: permission, another user's context or a tampered blob): final. Any other failure is transient.
_REFUSALS = {
    "InvalidCiphertextException",
    "IncorrectKeyException",
    "NotFoundException",
    "DisabledException",
    "KMSInvalidStateException",
    "AccessDeniedException",
    "InvalidKeyUsageException",
}


class AwsKms:
    """A customer-managed AWS KMS key: ``Encrypt`` wraps and ``Decrypt`` unwraps, both with the owner's
    ``user_id`` as encryption context (the IAM policy refuses either call without one). kek_id is the
    key's ARN, as KMS reports it, so a row names the key that can open it. boto3 is imported here only:
    the local stack never needs the AWS SDK."""

    def __init__(self, key_id: str, *, region: str = "", endpoint_url: str = "") -> None:
        if not key_id:
            raise ValueError("PARLEY_KMS=aws needs PARLEY_KMS_KEY_ID (the tenancy key's ARN, id or alias)")
        import boto3
        from botocore.config import Config

        self._key_id = key_id
        self._arn = key_id if key_id.startswith("arn:") and ":key/" in key_id else ""
        config = Config(connect_timeout=2, read_timeout=5, retries={"mode": "standard", "max_attempts": 3})
        self._client = boto3.client("kms", region_name=region or None, endpoint_url=endpoint_url or None, config=config)

    def active(self) -> str:
        if not self._arn:
            self._arn = self._call("DescribeKey", KeyId=self._key_id)["KeyMetadata"]["Arn"]
        return self._arn

    def wrap(self, user_id: str, key: bytes) -> tuple[str, bytes]:
        made = self._call("Encrypt", KeyId=self._key_id, Plaintext=key, EncryptionContext={"user_id": user_id})
        return made["KeyId"], made["CiphertextBlob"]

    def unwrap(self, user_id: str, kek_id: str, wrapped: bytes) -> bytes:
        opened = self._call("Decrypt", KeyId=kek_id, CiphertextBlob=wrapped, EncryptionContext={"user_id": user_id})
        return bytes(opened["Plaintext"])

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        method = getattr(self._client, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower())
        try:
            return method(**kwargs)  # type: ignore[no-any-return]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _REFUSALS:
                raise WrappedKeyRefused(f"AWS KMS refused {operation} on {kwargs.get('KeyId')!r}: {code}") from None
            raise KmsUnavailable(f"AWS KMS {operation} failed: {code or 'no error code'}; retry") from exc
        except BotoCoreError as exc:
            raise KmsUnavailable(f"AWS KMS does not answer ({type(exc).__name__}); retry") from exc
