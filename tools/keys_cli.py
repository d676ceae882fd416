"""``parley keys rotate-kek``: re-wrap every live data key under a new key-encryption key, then retire the
old one, so a wrapped key left in an old SSTable or a backup can never be unwrapped (parley/kek_rotation.py;
docs/operations.md, "Rotating the key-encryption key").

Local KMS: a new KEK is added to the key file and made active; once every live key is under it the old
KEK is removed from the file. AWS KMS: the target is ``--to`` (default PARLEY_KMS_KEY_ID, which every
process should already wrap new keys with); the old KMS key's deletion is the operator's to schedule,
and the command prints how. Run it again at any point to resume.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from parley import errors, kek_rotation
from parley.kek_rotation import Pass, Unwrap
from parley.keys import KeySettings, kms_from_env
from parley.kms import AwsKms, LocalKms
from parley.settings import CassandraSettings, from_env

app = typer.Typer(help="Key-encryption keys (the KMS).", no_args_is_help=True)
out = Console(soft_wrap=True)  # an operator copies the commands it prints: never wrapped
err = Console(stderr=True, soft_wrap=True)


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)


@app.command("rotate-kek")
def rotate_kek(
    to: str = typer.Option("", "--to", help="PARLEY_KMS=aws: the new KMS key (ARN, id or alias; default PARLEY_KMS_KEY_ID)"),
    from_key_file: Path = typer.Option(
        None, "--from-key-file", help="Also unwrap rows under this local key file's KEKs (moving from PARLEY_KMS=local to aws)"
    ),
) -> None:
    """Re-wrap every live data key under a new KEK, then retire the old one (local: removed from the key
    file; AWS: printed for you to schedule its deletion). Idempotent: run it again to resume."""
    from parley.cassandra import connect

    settings = from_env(KeySettings)
    cassandra = from_env(CassandraSettings)
    keyspace = settings.keyspace or cassandra.keyspace
    kms = kms_from_env()
    source: Unwrap | None = None
    if isinstance(kms, LocalKms):
        if to or from_key_file:
            _fail("--to and --from-key-file are for PARLEY_KMS=aws; the local KMS makes its new KEK itself")
        target = kms.begin_rotation()
    else:
        if to and to != settings.key_id:
            err.print(f"[yellow]note:[/] processes wrap new users' keys under PARLEY_KMS_KEY_ID ({settings.key_id}), not {to}: "
                      "point them at the new key first, or run this again after you do")
        kms = AwsKms(to or settings.key_id, region=settings.region, endpoint_url=settings.endpoint_url)
        target = kms.active()
        if from_key_file:
            source = _either(LocalKms(from_key_file), kms)
    err.print(f"re-wrapping every live data key in {keyspace}.data_keys under {target}")
    try:
        session = connect(cassandra)
    except errors.Unavailable as exc:
        _fail(str(exc))
    try:
        passes = kek_rotation.rotate(session, keyspace, kms, unwrap=source, echo=err.print)
    except errors.Unavailable as exc:
        _fail(f"{exc}: nothing is lost, run the command again to resume")
    finally:
        session.cluster.shutdown()
    out.print(_table(passes))
    if passes[-1].refused:
        _fail(f"the KMS would not unwrap the data keys of {len(passes[-1].refused)} users (first: {', '.join(passes[-1].refused[:5])}): "
              "their old KEK is already gone or the row is not theirs; the old KEK is kept. Erase those users or restore their KEK, then run again")
    if not kek_rotation.settled(passes):
        _fail("keys were still being wrapped under an old KEK after the last pass: the old KEK is kept; run the command again")
    old = sorted(set().union(*(p.old_keks for p in passes)))
    if isinstance(kms, LocalKms):
        gone = kms.retire_others()
        out.print(f"every live data key is under {target}; retired (removed from the key file): {', '.join(gone) or 'none'}")
        return
    out.print(f"every live data key is under {target}.")
    if from_key_file:
        out.print(f"The local key file {from_key_file} wraps nothing live any more: delete it and every copy (Secret, backups).")
    for kek_id in (k for k in old if k.startswith("arn:")):  # the keys this run moved rows away from
        out.print(f"Retire the old KMS key: aws kms schedule-key-deletion --key-id {kek_id} --pending-window-in-days 7")
    out.print("Retire every earlier generation of the tenancy key (`terraform output tenancy_key_arns`: all but the last): "
              "terraform state rm it, drop it from tenancy_key_generations, apply, then schedule its deletion as above "
              "(infra/terraform/README.md). Until KMS deletes it, a copy wrapped under it opens for whoever may call Decrypt on it.")


def _either(local: LocalKms, aws: AwsKms) -> Unwrap:
    """Unwraps a row with the KMS that wrapped it: AWS's rows name a key ARN, the key file's ``kek-N``."""

    def unwrap(user_id: str, kek_id: str, wrapped: bytes) -> bytes:
        return (aws if kek_id.startswith("arn:") else local).unwrap(user_id, kek_id, wrapped)

    return unwrap


def _table(passes: list[Pass]) -> Table:
    table = Table("pass", "re-wrapped", "already under it", "erased", "changed meanwhile", "refused")
    for n, p in enumerate(passes, 1):
        table.add_row(str(n), str(p.rewrapped), str(p.already), str(p.erased), str(p.raced), str(len(p.refused)))
    return table
