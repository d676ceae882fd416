"""Re-wrapping every live data key under a new key-encryption key (``parley keys rotate-kek``).

Why: a data key that erasure destroyed lives on, wrapped, in SSTables until compaction, in snapshots
and in backups. Once every live key is wrapped under a new KEK and the old KEK is gone, those copies
can never be unwrapped again: a rotation closes the window that a backup leaves open.

The pass is idempotent and resumable: a row already under the target KEK is skipped, each re-wrap is a
lightweight transaction that applies only while the row still holds the KEK it was read with (so it
never brings back a key that an erasure deleted meanwhile, nor overwrites a concurrent pass), and keys
are read and written at the key service's consistency. The data key itself never changes, so content
sealed under it, and every process's cached key, go on working throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import SimpleStatement

from parley.keys import CONSISTENCY, ERASED_MARK
from parley.kms import Kms, WrappedKeyRefused

#: (user_id, kek_id, wrapped) -> the data key: ``Kms.unwrap``.
Unwrap = Callable[[str, str, bytes], bytes]
#: Rows read per page of the scan.
PAGE = 500


@dataclass
class Pass:
    """What one pass over ``data_keys`` found and did."""

    target: str  # the kek_id every live key is wrapped under afterwards
    rewrapped: int = 0
    already: int = 0  # under the target already (a resumed rotation)
    erased: int = 0  # erasure marks: no key to re-wrap
    raced: int = 0  # changed between the read and the write (erased, or re-wrapped by another pass)
    old_keks: set[str] = field(default_factory=set)  # kek_ids re-wrapped away from
    refused: list[str] = field(default_factory=list)  # users whose key the KMS would not unwrap


def rewrap(
    session: Session,
    keyspace: str,
    kms: Kms,
    *,
    unwrap: Unwrap | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> Pass:
    """Wrap every live data key in ``keyspace.data_keys`` under ``kms.active()``; ``unwrap`` opens the
    old rows (default: ``kms.unwrap``; another for a move between KMSs, e.g. the local key file to AWS)."""
    unwrap = unwrap or kms.unwrap
    done = Pass(kms.active())
    scan = SimpleStatement(f"SELECT user_id, version, kek_id, wrapped FROM {keyspace}.data_keys", fetch_size=PAGE)
    scan.consistency_level = CONSISTENCY
    update = session.prepare(
        f"UPDATE {keyspace}.data_keys SET wrapped = ?, kek_id = ? WHERE user_id = ? AND version = ? IF kek_id = ?"
    )
    update.consistency_level = CONSISTENCY
    update.serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
    for row in session.execute(scan):
        if row.kek_id == ERASED_MARK or row.wrapped is None:
            done.erased += 1
            continue
        if row.kek_id == done.target:
            done.already += 1
            continue
        try:
            raw = unwrap(row.user_id, row.kek_id, row.wrapped)
        except WrappedKeyRefused:
            done.refused.append(row.user_id)
            continue
        kek_id, wrapped = kms.wrap(row.user_id, raw)
        if kek_id != done.target:
            raise RuntimeError(f"the KMS's active KEK changed during the rotation ({done.target!r} → {kek_id!r}): run it again")
        if session.execute(update, (wrapped, kek_id, row.user_id, row.version, row.kek_id)).one()[0]:
            done.rewrapped += 1
            done.old_keks.add(row.kek_id)
        else:
            done.raced += 1
        if (done.rewrapped + done.raced) % 1000 == 0:
            echo(f"{done.rewrapped} re-wrapped so far")
    return done


def rotate(
    session: Session,
    keyspace: str,
    kms: Kms,
    *,
    unwrap: Unwrap | None = None,
    passes: int = 3,
    echo: Callable[[str], None] = lambda _: None,
) -> list[Pass]:
    """Passes of ``rewrap`` until one finds nothing left to re-wrap (a process that had not yet seen the
    new KEK may wrap a new user's key under the old one during the first pass; the next finds it).
    The caller retires the old KEK only when the last pass re-wrapped nothing and was refused nothing."""
    done = [rewrap(session, keyspace, kms, unwrap=unwrap, echo=echo)]
    while (done[-1].rewrapped or done[-1].raced) and len(done) < passes:
        done.append(rewrap(session, keyspace, kms, unwrap=unwrap, echo=echo))
    return done


def settled(passes: list[Pass]) -> bool:
    """The old KEK can go: the last pass found every live key under the target already."""
    last = passes[-1]
    return not (last.rewrapped or last.raced or last.refused)
