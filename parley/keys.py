"""Envelope encryption of content: a data key per user, wrapped by a key-encryption key (DESIGN.md §12).

- The **KMS** holds the key-encryption key (KEK) and only ever wraps and unwraps
  data keys. ``LocalKms`` keeps its KEKs in a file under the data dir (0600);
  a cloud KMS adapter implements the same two methods (docs/operations.md).
- A user's **data key** (AES-256) is made on first use and stored wrapped in
  ``data_keys``. Erasing the user deletes it and leaves a mark: content sealed
  under it, in the log, archives, rows or replay files, can never be read again.
- The **key service** (``KeyService``) is ``schemas.sealing.Keys``: it seals and
  opens text, keeping unwrapped keys for ``cache_s``: an erasure is complete on
  every process within that bound (while Cassandra is down, a key a process holds
  goes on working until it answers again).

Sealing is AES-GCM with the owner and key version as associated data. A random
nonce for events; for projected cells a nonce derived from the text (SIV-style:
the same text gives the same cell, so replays and write-throughs agree, at the
cost of showing that two cells of one user hold equal text).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from cassandra.cluster import Session
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from parley.cassandra import DRIVER_ERRORS
from parley.errors import StoreUnavailable
from parley.settings import env
from schemas import sealing

#: ``data_keys.kek_id`` of the mark an erasure leaves (version 0, no key).
ERASED_MARK = "erased"
NONCE = 12


@dataclass(frozen=True)
class KeySettings:
    encryption: bool = env(
        "PARLEY_ENCRYPTION", True, "Seal content (message text, memory, summaries, documents) under per-user data keys"
    )
    kms: str = env("PARLEY_KMS", "local", "Key-encryption key store: local (a key file)")
    key_file: str = env(
        "PARLEY_KMS_KEY_FILE", "", "The local KMS's key file (default: <PARLEY_DATA_DIR>/kms/kek.json, made 0600 on first use)"
    )
    keyspace: str = env(
        "PARLEY_KEYS_KEYSPACE", "", "Keyspace of the data_keys table (default: PARLEY_KEYSPACE; the test stacks share one)"
    )
    cache_s: float = env(
        "PARLEY_KEYS_CACHE_S", 60.0, "Seconds an unwrapped data key is kept: the bound on an erasure reaching every process"
    )


class Kms(Protocol):
    def wrap(self, user_id: str, key: bytes) -> tuple[str, bytes]:
        """(kek_id, wrapped) of a data key."""
        ...

    def unwrap(self, user_id: str, kek_id: str, wrapped: bytes) -> bytes: ...


class LocalKms:
    """KEKs in a JSON file ``{"active": id, "keys": {id: base64}}``, 0600. Made on first use by
    whichever process comes first (an exclusive create: all agree on one KEK)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._keks = self._load()

    def _load(self) -> dict[str, object]:
        if not self._path.exists():
            self._path.parent.mkdir(parents=True, exist_ok=True)
            body = json.dumps({"active": "kek-1", "keys": {"kek-1": base64.b64encode(os.urandom(32)).decode()}})
            try:
                fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(body)
        for _ in range(50):  # another process may be between its create and its write
            text = self._path.read_text()
            if text:
                return json.loads(text)
            time.sleep(0.02)
        raise RuntimeError(f"the KMS key file {self._path} is empty")

    def _kek(self, kek_id: str) -> AESGCM:
        keys: dict[str, str] = self._keks["keys"]  # type: ignore[assignment]
        if kek_id not in keys:
            raise KeyError(f"the KMS has no key-encryption key {kek_id!r}")
        return AESGCM(base64.b64decode(keys[kek_id]))

    def wrap(self, user_id: str, key: bytes) -> tuple[str, bytes]:
        kek_id = str(self._keks["active"])
        nonce = os.urandom(NONCE)
        return kek_id, nonce + self._kek(kek_id).encrypt(nonce, key, user_id.encode())

    def unwrap(self, user_id: str, kek_id: str, wrapped: bytes) -> bytes:
        return self._kek(kek_id).decrypt(wrapped[:NONCE], wrapped[NONCE:], user_id.encode())


@dataclass(frozen=True)
class DataKey:
    version: int
    aead: AESGCM
    nonce_key: bytes  # derives deterministic nonces; never the encryption key itself
    blind_key: bytes  # keys the search index's terms


def _data_key(version: int, raw: bytes) -> DataKey:
    return DataKey(
        version,
        AESGCM(raw),
        hmac.new(raw, b"parley nonce key", hashlib.sha256).digest(),
        hmac.new(raw, b"parley blind key", hashlib.sha256).digest(),
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class KeyService:
    """``schemas.sealing.Keys`` over ``data_keys`` (sync driver: a miss blocks for one read, then the key
    is cached). ``seal=False``: opens what is sealed but seals nothing new (PARLEY_ENCRYPTION=false)."""

    def __init__(self, session: Session, kms: Kms, keyspace: str, *, cache_s: float = 60.0, seal: bool = True) -> None:
        self._session = session
        self.keyspace = keyspace
        self._kms = kms
        self._cache_s = cache_s
        self.sealing = seal
        self._cache: dict[str, tuple[float, DataKey | None]] = {}  # None: erased (or never had one)
        self._lock = threading.Lock()
        self._select = session.prepare(f"SELECT version, wrapped, kek_id FROM {keyspace}.data_keys WHERE user_id = ? LIMIT 1")
        self._mark = session.prepare(f"SELECT kek_id FROM {keyspace}.data_keys WHERE user_id = ? AND version = 0")
        self._insert = session.prepare(
            f"INSERT INTO {keyspace}.data_keys (user_id, version, wrapped, kek_id, created_at) VALUES (?, 1, ?, ?, ?) IF NOT EXISTS"
        )

    # ------------------------------------------------------------ keys

    def _lookup(self, user_id: str) -> DataKey | None:
        row = self._session.execute(self._select, (user_id,)).one()
        if row is None or row.kek_id == ERASED_MARK:
            return None
        return _data_key(row.version, self._kms.unwrap(user_id, row.kek_id, row.wrapped))

    def _key(self, user_id: str, *, create: bool) -> DataKey | None:
        if not user_id:
            raise ValueError("content without an owner cannot be sealed, blinded or opened")
        now = time.monotonic()
        hit = self._cache.get(user_id)
        if hit is not None and now - hit[0] <= self._cache_s and (hit[1] is not None or not create):
            return hit[1]
        with self._lock:
            try:
                key = self._lookup(user_id)
                if key is None and create and not self._erased(user_id):
                    raw = os.urandom(32)
                    kek_id, wrapped = self._kms.wrap(user_id, raw)
                    applied = self._session.execute(self._insert, (user_id, wrapped, kek_id, datetime.now(timezone.utc))).one()
                    key = _data_key(1, raw) if applied[0] else self._lookup(user_id)  # another process made it first
            except DRIVER_ERRORS as exc:
                if hit is not None and hit[1] is not None:
                    return hit[1]  # Cassandra is down: a key this process held goes on working; asked again next time
                raise StoreUnavailable("the data keys cannot be read: Cassandra does not answer") from exc
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[user_id] = (now, key)
            return key

    def _erased(self, user_id: str) -> bool:
        row = self._session.execute(self._mark, (user_id,)).one()
        return row is not None and row.kek_id == ERASED_MARK

    def erase(self, user_id: str) -> None:
        """Destroy the user's data key, leave the mark that stops a new one being made, and drop it
        from this process's cache (other processes drop theirs within ``cache_s``)."""
        with self._lock:
            self._session.execute(f"DELETE FROM {self.keyspace}.data_keys WHERE user_id = %s", (user_id,))
            self._session.execute(
                f"INSERT INTO {self.keyspace}.data_keys (user_id, version, kek_id, created_at) VALUES (%s, 0, %s, %s)",
                (user_id, ERASED_MARK, datetime.now(timezone.utc)),
            )
            self._cache[user_id] = (time.monotonic(), None)

    # -------------------------------------------------- sealing.Keys

    def seal(self, user_id: str, text: str, *, deterministic: bool = False) -> str:
        if not self.sealing:
            return text
        key = self._key(user_id, create=True)
        if key is None:
            return sealing.ERASED  # the user is erased: nothing of theirs is written any more
        data = text.encode()
        nonce = hmac.new(key.nonce_key, data, hashlib.sha256).digest()[:NONCE] if deterministic else os.urandom(NONCE)
        sealed = key.aead.encrypt(nonce, data, f"{user_id}:{key.version}".encode())
        return f"{sealing.PREFIX}{user_id}:{key.version}:{_b64(nonce + sealed)}"

    def blind(self, user_id: str, term: str) -> str:
        if not self.sealing:
            return term
        key = self._key(user_id, create=True)
        if key is None:
            return ""  # erased: nothing of theirs is indexed or found
        return "b:" + hmac.new(key.blind_key, term.encode(), hashlib.sha256).hexdigest()[:32]

    def seal_bytes(self, user_id: str, data: bytes) -> bytes:
        if not self.sealing:
            return data
        key = self._key(user_id, create=True)
        if key is None:
            raise ValueError("the user is erased: nothing of theirs is stored")
        nonce = os.urandom(NONCE)
        head = sealing.BYTES_PREFIX + f"{user_id}:{key.version}:".encode()
        return head + nonce + key.aead.encrypt(nonce, data, f"{user_id}:{key.version}".encode())

    def open_bytes(self, data: bytes) -> bytes:
        try:
            user_id, version, _ = data[len(sealing.BYTES_PREFIX) : len(sealing.BYTES_PREFIX) + 200].split(b":", 2)
        except ValueError:
            raise ValueError("a sealed file that does not parse") from None
        body = data[len(sealing.BYTES_PREFIX) + len(user_id) + len(version) + 2 :]
        key = self._key(user_id.decode(), create=False)
        if key is None or str(key.version) != version.decode():
            raise ValueError("the file's owner was erased: it can never be opened")
        return key.aead.decrypt(body[:NONCE], body[NONCE:], user_id + b":" + version)

    def open(self, value: str) -> str:
        try:
            user_id, version, body = value[len(sealing.PREFIX) :].split(":", 2)
            raw = _unb64(body)
        except ValueError:
            raise ValueError("a sealed value that does not parse") from None
        key = self._key(user_id, create=False)
        if key is None or str(key.version) != version:
            return sealing.ERASED
        return key.aead.decrypt(raw[:NONCE], raw[NONCE:], f"{user_id}:{version}".encode()).decode()


def kms_from(settings: KeySettings, data_dir: Path) -> Kms:
    if settings.kms != "local":
        raise ValueError(f"PARLEY_KMS={settings.kms!r}: only `local` is built in (see docs/operations.md for a cloud KMS)")
    return LocalKms(Path(settings.key_file) if settings.key_file else data_dir / "kms" / "kek.json")


def _data_dir() -> Path:
    """Where local state lives: infra/local/settings.py's PARLEY_DATA_DIR (this layer cannot import it)."""
    return Path(os.environ.get("PARLEY_DATA_DIR") or Path(__file__).resolve().parents[1] / ".data")


def install_from_env(session: Session | None = None) -> KeyService:
    """Build the process's key service from the environment and install it for the codec and the
    projections (``schemas.sealing``). Every service calls this at start; ``session``: reuse one."""
    from parley.cassandra import connect
    from parley.settings import CassandraSettings, from_env

    settings = from_env(KeySettings)
    cassandra = from_env(CassandraSettings)
    if session is None:
        session = connect(cassandra)
    service = KeyService(
        session,
        kms_from(settings, _data_dir()),
        settings.keyspace or cassandra.keyspace,
        cache_s=settings.cache_s,
        seal=settings.encryption,
    )
    sealing.install(service)
    return service
