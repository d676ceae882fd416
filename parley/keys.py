"""Envelope encryption of content: a data key per user, wrapped by a key-encryption key (DESIGN.md §12).

- The **KMS** (``parley/kms.py``) holds the key-encryption key (KEK) and only ever
  wraps and unwraps data keys, bound to their owner: ``LocalKms`` (a 0600 file
  under the data dir) or ``AwsKms`` (``PARLEY_KMS=aws``: a KMS key that never
  leaves AWS KMS). ``parley keys rotate-kek`` (``parley/kek_rotation.py``)
  re-wraps every live data key under a new KEK and retires the old one.
- A user's **data key** (AES-256) is made on first use and stored wrapped in
  ``data_keys``. Erasing the user deletes it and leaves a mark: content sealed
  under it, in the log, archives, rows or replay files, can never be read again.
- The **key service** (``KeyService``) is ``schemas.sealing.Keys``: it seals and
  opens text, keeping unwrapped keys for ``cache_s`` in a bounded LRU: an erasure
  is complete on every process within that bound (while Cassandra is down, a key
  a process holds goes on working until it answers again). Keys are read on its
  own threads, one read per user in flight; code on an event loop awaits
  ``prefetch`` first, so no loop waits on Cassandra. A key that cannot be read
  raises ``KeyUnavailable``, a ``StoreUnavailable``: retry, it is not bad input.

Sealing is AES-GCM under a sub-key of the data key (HKDF), with the owner, the
key version and the value's place (``schemas.sealing.field_at``/``cell_at``: the
field or cell and its row) as associated data, so a value opens only where it
was sealed for. A random nonce for events; for projected cells a nonce derived
from the associated data and the text under another sub-key (SIV-style: the
same text in the same cell gives the same value, so replays and write-throughs
agree; equal text in two cells, or two rows, does not). Values of the first
format (``\\x00s1:``: the data key itself, the owner and version as associated
data, no place) still open.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import PreparedStatement
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from parley.cassandra import DRIVER_ERRORS
from parley.errors import StoreUnavailable
from parley.kms import AwsKms, Kms, LocalKms
from parley.lru import LRU
from parley.settings import env, from_env
from schemas import sealing

#: ``data_keys.kek_id`` of the mark an erasure leaves (version 0, no key).
ERASED_MARK = "erased"
NONCE = 12


@dataclass(frozen=True)
class KeySettings:
    encryption: bool = env(
        "PARLEY_ENCRYPTION", True, "Seal content (message text, memory, summaries, documents) under per-user data keys"
    )
    kms: str = env("PARLEY_KMS", "local", "Key-encryption key store: local (a key file) or aws (AWS KMS)")
    key_file: str = env(
        "PARLEY_KMS_KEY_FILE", "", "The local KMS's key file (default: <PARLEY_DATA_DIR>/kms/kek.json, made 0600 on first use)"
    )
    key_id: str = env("PARLEY_KMS_KEY_ID", "", "PARLEY_KMS=aws: the KMS key that wraps data keys (ARN, key id or alias/…)")
    region: str = env("PARLEY_KMS_REGION", "", "PARLEY_KMS=aws: the key's region (default: the SDK's, AWS_REGION)")
    endpoint_url: str = env(
        "PARLEY_KMS_ENDPOINT_URL", "", "PARLEY_KMS=aws: another KMS endpoint (a VPC or FIPS endpoint; default: the region's)"
    )
    keyspace: str = env(
        "PARLEY_KEYS_KEYSPACE", "", "Keyspace of the data_keys table (default: PARLEY_KEYSPACE; the test stacks share one)"
    )
    cache_s: float = env(
        "PARLEY_KEYS_CACHE_S", 60.0, "Seconds an unwrapped data key is kept: the bound on an erasure reaching every process"
    )
    seal_format: int = env(
        "PARLEY_SEAL_FORMAT",
        2,
        "Format of what is sealed: 2 binds each value to its place; 1 (the first format) only while a rolling "
        "upgrade still runs processes that read only format 1 (docs/operations.md)",
    )


@dataclass(frozen=True)
class _Statements:
    """The key rows' statements, prepared once, each at ``CONSISTENCY``."""

    session: Session
    select: PreparedStatement
    insert: PreparedStatement
    destroy: PreparedStatement
    mark: PreparedStatement

    @classmethod
    def prepare(cls, session: Session, keyspace: str) -> _Statements:
        made = [
            session.prepare(f"SELECT version, wrapped, kek_id FROM {keyspace}.data_keys WHERE user_id = ?"),
            session.prepare(
                f"INSERT INTO {keyspace}.data_keys (user_id, version, wrapped, kek_id, created_at) VALUES (?, 1, ?, ?, ?) IF NOT EXISTS"
            ),
            session.prepare(f"DELETE FROM {keyspace}.data_keys WHERE user_id = ?"),
            session.prepare(f"INSERT INTO {keyspace}.data_keys (user_id, version, kek_id, created_at) VALUES (?, 0, ?, ?)"),
        ]
        for statement in made:
            statement.consistency_level = CONSISTENCY
        made[1].serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
        return cls(session, *made)


@dataclass(frozen=True)
class DataKey:
    version: int
    aead: AESGCM  # seals (and opens) the current format: a sub-key, never the data key itself
    nonce_key: bytes  # derives deterministic nonces
    blind_key: bytes  # keys the search index's terms and the ids derived from content
    legacy: AESGCM  # opens the first format (``\x00s1:``), which sealed under the data key itself
    legacy_nonce_key: bytes  # the first format's deterministic nonces (PARLEY_SEAL_FORMAT=1)


def _subkey(raw: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"parley " + purpose).derive(raw)


def _data_key(version: int, raw: bytes) -> DataKey:
    return DataKey(
        version,
        AESGCM(_subkey(raw, b"s2 seal")),
        _subkey(raw, b"s2 nonce"),
        # Unchanged since the first format: postings and ids already on disk were keyed with it.
        hmac.new(raw, b"parley blind key", hashlib.sha256).digest(),
        AESGCM(raw),
        hmac.new(raw, b"parley nonce key", hashlib.sha256).digest(),
    )


def _associated(user_id: str, version: int | str, at: str) -> bytes:
    """The associated data of the current format: owner, key version and place, unambiguously joined."""
    return b"s2" + json.dumps([user_id, str(version), at]).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class KeyUnavailable(StoreUnavailable):
    """A data key could not be read or made because Cassandra (or the KMS) does not answer, and this process holds
    none for the user: transient (retry, with backoff), never bad input, never a ``CodecError``."""


#: Every key row is read and written at LOCAL_QUORUM: a read quorum overlaps the quorum that wrote the
#: erasure's tombstone and mark, so on a replicated cluster a destroyed key stays destroyed (a read at
#: ONE could reach a replica that missed the delete and bring the key back). A key's LWT create is
#: serialised at LOCAL_SERIAL (the same quorum, Paxos).
CONSISTENCY = ConsistencyLevel.LOCAL_QUORUM
#: After a failed read, the same user's key is not asked for again for this long: the held key (if any)
#: serves, else ``KeyUnavailable`` at once, so an outage does not make every call wait on the driver.
RETRY_S = 2.0
#: Threads that run key reads: no caller's event loop ever waits on Cassandra through them.
FETCHERS = 4


@dataclass(frozen=True)
class _Held:
    at: float  # monotonic time of the read that found it (-inf: never read)
    key: DataKey | None  # None: no key (never had one, or erased)
    erased: bool = False  # the erasure mark: final, cached for good
    failed_at: float = float("-inf")  # the last read that failed (RETRY_S)

    def serves(self, create: bool) -> bool:
        return self.key is not None or self.erased or not create


class KeyService:
    """``schemas.sealing.Keys`` over ``data_keys``. ``seal=False``: opens what is sealed but seals nothing
    new (PARLEY_ENCRYPTION=false).

    Unwrapped keys are kept in a bounded LRU for ``cache_s`` (the bound on an erasure reaching this
    process); a key used in the second half of that time is read again in the background, so a user in
    use never waits. A miss is read on a fetcher thread, one read in flight per user whoever asks. Async
    callers ``await prefetch(user_ids)`` before the synchronous codec and sealing calls, which then hit
    the cache; a synchronous caller (the CLI, a consumer thread) waits for the read itself.
    ``session``: a session, or a function that connects one (called on first use, off the loop)."""

    def __init__(
        self,
        session: Session | Callable[[], Session],
        kms: Kms,
        keyspace: str,
        *,
        cache_s: float = 60.0,
        capacity: int = 100_000,
        seal: bool = True,
        seal_format: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = (lambda: session) if isinstance(session, Session) else session
        self.keyspace = keyspace
        self._kms = kms
        self._cache_s = cache_s
        self.sealing = seal
        if seal_format not in (1, 2):
            raise ValueError(f"PARLEY_SEAL_FORMAT={seal_format}: set 2 (values bound to their place) or 1 (during an upgrade from it)")
        self._format = seal_format
        self._clock = clock
        self._lock = threading.Lock()  # guards the cache and the flights; never held across I/O
        self._cache: LRU[str, _Held] = LRU(capacity)
        self._flights: dict[str, Future[_Held]] = {}  # user → the read in flight
        self._fetchers = ThreadPoolExecutor(FETCHERS, thread_name_prefix="parley-keys")
        self._connecting = threading.Lock()
        self._statements: _Statements | None = None

    # ------------------------------------------------------------ Cassandra

    def _cql(self) -> _Statements:
        with self._connecting:
            if self._statements is None:
                self._statements = _Statements.prepare(self._connect(), self.keyspace)
            return self._statements

    def _read(self, user_id: str, at: float) -> _Held:
        """What ``data_keys`` holds for the user, stamped ``at`` (when the read began: the cache bound
        counts from before the rows were read)."""
        cql = self._cql()
        rows = cql.session.execute(cql.select, (user_id,)).all()
        if any(r.kek_id == ERASED_MARK for r in rows):
            return _Held(at, None, erased=True)  # the mark wins over a key made in a race with it
        if not rows:
            return _Held(at, None)
        row = rows[0]  # the newest version
        return _Held(at, _data_key(row.version, self._kms.unwrap(user_id, row.kek_id, row.wrapped)))

    def _make(self, user_id: str, at: float) -> _Held:
        cql = self._cql()
        raw = os.urandom(32)
        kek_id, wrapped = self._kms.wrap(user_id, raw)
        applied = cql.session.execute(cql.insert, (user_id, wrapped, kek_id, datetime.now(timezone.utc))).one()
        if applied[0]:
            return _Held(at, _data_key(1, raw))
        held = self._read(user_id, at)  # another process made it first (or erased the user meanwhile)
        if not held.serves(create=True):
            raise KeyUnavailable("the data key was made by another process but cannot be read back yet")
        return held

    def _fetch(self, user_id: str, create: bool, before: _Held | None) -> _Held:
        """On a fetcher thread: read (and make) the key, cache what was found; on failure keep the key held
        before, or raise ``KeyUnavailable``."""
        at = self._clock()
        try:
            held = self._read(user_id, at)
            if create and not held.serves(create):
                held = self._make(user_id, at)
        except (StoreUnavailable, *DRIVER_ERRORS) as exc:  # StoreUnavailable: connect failed
            now = self._clock()
            failed = _Held(before.at, before.key, before.erased, now) if before else _Held(float("-inf"), None, failed_at=now)
            with self._lock:
                current = self._cache.get(user_id)
                if current is not None and current.erased:
                    return current  # erased while this read was in flight: the erasure wins
                self._cache.put(user_id, failed)
            if failed.key is not None:
                return failed  # Cassandra is down: a key this process held goes on working; asked again after RETRY_S
            raise KeyUnavailable(f"the data key of a user cannot be read: Cassandra or the KMS does not answer ({type(exc).__name__})") from exc
        with self._lock:
            current = self._cache.get(user_id)
            if current is not None and current.erased:
                return current  # erased while this read was in flight: the erasure wins
            self._cache.put(user_id, held)
        return held

    def _flight(self, user_id: str, create: bool, before: _Held | None) -> Future[_Held] | None:
        """The read in flight for ``user_id``, started if there is none (one per user); None when a read
        landed since the caller looked at ``before`` (look again)."""
        with self._lock:
            flying = self._flights.get(user_id)
            if flying is not None and not flying.done():
                return flying  # if it only reads and finds no key, a caller that must create asks again
            if self._cache.get(user_id) is not before:
                return None
            future = self._fetchers.submit(self._fetch, user_id, create, before)
            self._flights[user_id] = future
        future.add_done_callback(lambda _: self._landed(user_id, future))
        return future

    def _landed(self, user_id: str, future: Future[_Held]) -> None:
        with self._lock:
            if self._flights.get(user_id) is future:
                del self._flights[user_id]

    def _held(self, user_id: str, create: bool, *, stale_ok: bool = False) -> tuple[_Held | None, _Held | None]:
        """(what serves now, or None: a read is needed; what is held, expired or not). ``stale_ok``: an
        expired key serves while it is read again (for a synchronous call on an event loop)."""
        if not user_id:
            raise ValueError("content without an owner cannot be sealed, blinded or opened")
        now = self._clock()
        with self._lock:
            held = self._cache.get(user_id)
        if held is None:
            return None, None
        if held.erased:
            return held, held
        age, failed = now - held.at, now - held.failed_at < RETRY_S
        if age <= self._cache_s and held.serves(create):
            if age > self._cache_s / 2 and not failed:
                self._flight(user_id, False, held)  # read again ahead of expiry; this call does not wait
            return held, held
        if failed:
            if held.key is None:
                raise KeyUnavailable("the data key of a user cannot be read: Cassandra did not answer just now")
            return held, held  # expired, but Cassandra is down: the key held goes on working
        if stale_ok and held.key is not None:
            self._flight(user_id, False, held)  # the loop does not wait: the key serves for one read's time more
            return held, held
        return None, held

    def _key(self, user_id: str, *, create: bool) -> DataKey | None:
        """The key, waiting on this thread for a read if none is held (the path for code without a loop;
        on a loop, only a key never prefetched is waited for)."""
        on_loop = _on_loop()
        while True:
            held, before = self._held(user_id, create, stale_ok=on_loop)
            if held is None:
                flight = self._flight(user_id, create, before)
                if flight is None:
                    continue
                held = flight.result()
            if held.serves(create):
                return held.key

    async def prefetch(self, user_ids: Iterable[str], *, create: bool = False) -> None:
        """Have the keys of ``user_ids`` held, so that the synchronous calls that follow do not wait on
        Cassandra; the reads run on fetcher threads and this awaits them. ``create``: make missing keys
        (before sealing). Raises ``KeyUnavailable`` when a key cannot be read and none is held."""
        # Held keys answer here, with no task and no turn of the loop: this runs before every event a
        # process decodes or encodes, and the keys are nearly always held.
        missing = [u for u in {u for u in user_ids if u} if not self._serving(u, create)]
        if len(missing) == 1:
            await self._ready(missing[0], create)
        elif missing:
            await asyncio.gather(*(self._ready(u, create) for u in missing))

    def _serving(self, user_id: str, create: bool) -> bool:
        held, _ = self._held(user_id, create)
        return held is not None and held.serves(create)

    async def _ready(self, user_id: str, create: bool) -> None:
        while True:
            held, before = self._held(user_id, create)
            if held is None:
                flight = self._flight(user_id, create, before)
                if flight is None:
                    continue
                held = await asyncio.wrap_future(flight)
            if held.serves(create):
                return

    def erase(self, user_id: str) -> None:
        """Destroy the user's data key, leave the mark that stops a new one being made, and drop it
        from this process's cache (other processes drop theirs within ``cache_s``)."""
        try:
            cql = self._cql()
            cql.session.execute(cql.destroy, (user_id,))
            cql.session.execute(cql.mark, (user_id, ERASED_MARK, datetime.now(timezone.utc)))
        except DRIVER_ERRORS as exc:
            raise KeyUnavailable(f"the data key cannot be destroyed: Cassandra does not answer ({type(exc).__name__})") from exc
        with self._lock:
            self._cache.put(user_id, _Held(self._clock(), None, erased=True))

    def close(self) -> None:
        self._fetchers.shutdown(wait=False, cancel_futures=True)

    # -------------------------------------------------- sealing.Keys

    def seal(self, user_id: str, text: str, *, at: str, deterministic: bool = False) -> str:
        if not self.sealing:
            return text
        key = self._key(user_id, create=True)
        if key is None:
            return sealing.ERASED  # the user is erased: nothing of theirs is written any more
        data = text.encode()
        if self._format == 1:
            nonce = hmac.new(key.legacy_nonce_key, data, hashlib.sha256).digest()[:NONCE] if deterministic else os.urandom(NONCE)
            sealed = key.legacy.encrypt(nonce, data, f"{user_id}:{key.version}".encode())
            return f"{sealing.LEGACY_PREFIX}{user_id}:{key.version}:{_b64(nonce + sealed)}"
        ad = _associated(user_id, key.version, at)
        # The associated data is JSON (no raw NUL), so ad | NUL | text is unambiguous.
        nonce = hmac.new(key.nonce_key, ad + b"\x00" + data, hashlib.sha256).digest()[:NONCE] if deterministic else os.urandom(NONCE)
        return f"{sealing.PREFIX}{user_id}:{key.version}:{_b64(nonce + key.aead.encrypt(nonce, data, ad))}"

    def blind(self, user_id: str, term: str) -> str:
        if not self.sealing:
            return term
        key = self._key(user_id, create=True)
        if key is None:
            return ""  # erased: nothing of theirs is indexed or found
        return "b:" + hmac.new(key.blind_key, term.encode(), hashlib.sha256).hexdigest()[:32]

    def seal_bytes(self, user_id: str, data: bytes, *, at: str) -> bytes:
        if not self.sealing:
            return data
        key = self._key(user_id, create=True)
        if key is None:
            raise ValueError("the user is erased: nothing of theirs is stored")
        nonce = os.urandom(NONCE)
        if self._format == 1:
            owner = f"{user_id}:{key.version}".encode()
            return sealing.LEGACY_BYTES_PREFIX + owner + b":" + nonce + key.legacy.encrypt(nonce, data, owner)
        head = sealing.BYTES_PREFIX + f"{user_id}:{key.version}:".encode()
        return head + nonce + key.aead.encrypt(nonce, data, _associated(user_id, key.version, at))

    def open_bytes(self, data: bytes, *, at: str) -> bytes:
        head = len(sealing.BYTES_PREFIX)  # either format's
        try:
            user_id, version, _ = data[head : head + 200].split(b":", 2)
        except ValueError:
            raise ValueError("a sealed file that does not parse") from None
        body = data[head + len(user_id) + len(version) + 2 :]
        key = self._key(user_id.decode(), create=False)
        if key is None or str(key.version) != version.decode():
            raise ValueError("the file's owner was erased: it can never be opened")
        if data.startswith(sealing.LEGACY_BYTES_PREFIX):
            return _decrypt(key.legacy, body, user_id + b":" + version)
        return _decrypt(key.aead, body, _associated(user_id.decode(), version.decode(), at))

    def open(self, value: str, *, at: str) -> str:
        try:
            user_id, version, body = value[len(sealing.PREFIX) :].split(":", 2)  # either format's prefix
            raw = _unb64(body)
        except ValueError:
            raise ValueError("a sealed value that does not parse") from None
        key = self._key(user_id, create=False)
        if key is None or str(key.version) != version:
            return sealing.ERASED
        if value.startswith(sealing.LEGACY_PREFIX):
            return _decrypt(key.legacy, raw, f"{user_id}:{version}".encode()).decode()
        return _decrypt(key.aead, raw, _associated(user_id, version, at)).decode()


def _decrypt(aead: AESGCM, sealed: bytes, ad: bytes) -> bytes:
    try:
        return aead.decrypt(sealed[:NONCE], sealed[NONCE:], ad)
    except InvalidTag:
        raise sealing.Unopenable("a sealed value does not open here: sealed for another field or row, or altered") from None


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def kms_from(settings: KeySettings, data_dir: Path) -> Kms:
    if settings.kms == "local":
        return LocalKms(Path(settings.key_file) if settings.key_file else data_dir / "kms" / "kek.json")
    if settings.kms == "aws":
        return AwsKms(settings.key_id, region=settings.region, endpoint_url=settings.endpoint_url)
    raise ValueError(f"PARLEY_KMS={settings.kms!r}: set `local` (a key file) or `aws` (AWS KMS, PARLEY_KMS_KEY_ID)")


def kms_from_env() -> Kms:
    """The KMS the environment names (PARLEY_KMS and its settings)."""
    return kms_from(from_env(KeySettings), _data_dir())


def _data_dir() -> Path:
    """Where local state lives: infra/local/settings.py's PARLEY_DATA_DIR (this layer cannot import it)."""
    return Path(os.environ.get("PARLEY_DATA_DIR") or Path(__file__).resolve().parents[1] / ".data")


def install_from_env(session: Session | None = None) -> KeyService:
    """Build the process's key service from the environment and install it for the codec and the
    projections (``schemas.sealing``). Every service calls this at start; ``session``: reuse one."""
    from parley.cassandra import connect
    from parley.settings import CassandraSettings

    settings = from_env(KeySettings)
    cassandra = from_env(CassandraSettings)
    service = KeyService(
        session or (lambda: connect(cassandra)),  # connected on the first key read: a process starts with Cassandra away
        kms_from(settings, _data_dir()),
        settings.keyspace or cassandra.keyspace,
        cache_s=settings.cache_s,
        seal=settings.encryption,
        seal_format=settings.seal_format,
    )
    sealing.install(service)
    return service
