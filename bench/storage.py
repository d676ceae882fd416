"""Bytes on disk per stored message: the sample log projected into Cassandra, flushed, its SSTables measured.

The sample log (``tools.analysts.sample``) twice in one run, each in an
isolated namespace of its own (tools/isolated.py): once as it is (replies of
5-64 words), once with every reply padded to ``--reply-tokens`` tokens (seed
004's 500; ``CHARS_PER_TOKEN`` characters a token). Each goes through
``parley rebuild`` (the materializer's projection: its rows, cells and write
timestamps) into the namespace's keyspace, content sealed under its users' data
keys as production writes it (DESIGN.md §12; the key service on a keyspace of
this run). Each keyspace is flushed (``nodetool flush``) and the files of its
projected tables (SSTables and their SAI indexes) are summed on disk: bytes per
posted message (its user message, its replies, its share of the conversation
rows) at two reply lengths give a fixed part and a part per reply token, which
``bench/results/storage.json`` keeps for ``parley capacity``.

The baseline is the text itself: the plain UTF-8 bytes of the content each
posted message brought (its words and its replies'). On disk ÷ plain is what
ids, timestamps, sealing (base64 AES-GCM does not compress), clustering and
SSTable framing cost. One node, replication factor 1, Cassandra's default LZ4
compression; compaction has not run.

Run: `python -m bench.storage [--conversations N] [--turns T] [--reply-tokens R]` with Kafka and Cassandra up.
"""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass, replace

from bench.replay import produce
from bench.results import record, this_command
from infra.local import nodetool
from infra.local.settings import LocalInfraSettings
from parley import keys
from parley.settings import CassandraSettings, KafkaSettings, from_env
from schemas import events as ev
from tools import isolated
from tools.analysts import rebuild, sample
from tools.analysts.digest import PROJECTED
from tools.capacity.model import CHARS_PER_TOKEN


@dataclass(frozen=True)
class Stored:
    posted: int  # MessagePosted in the log
    plain_bytes: float  # UTF-8 bytes of every content field written (user messages and replies)
    reply_tokens: float  # reply characters ÷ CHARS_PER_TOKEN
    disk_bytes: int  # the projected tables' files after a flush


def padded(sent: list[sample.Sent], reply_tokens: int, seed: int = 11) -> list[sample.Sent]:
    """``sent`` with every reply that has text made ``reply_tokens`` tokens long (random words: sealed, it
    would not compress whatever it said)."""
    rng = random.Random(seed)
    target = int(reply_tokens * CHARS_PER_TOKEN)
    out = []
    for s in sent:
        e = s.event
        if isinstance(e, ev.GenerationCompleted) and e.content:
            text = ""
            while len(text) < target:
                text += f"w{rng.randrange(10_000)} "
            e = replace(e, content=text[:target])
        out.append(sample.Sent(s.topic, e))
    return out


def table_bytes(cfg: LocalInfraSettings, keyspace: str) -> int:
    """Bytes of the projected tables' files (every SSTable component, SAI indexes included; no snapshots)."""
    root = cfg.data_dir / "cassandra" / "data" / "data" / keyspace
    total = 0
    for table in PROJECTED:
        for folder in root.glob(f"{table}-*"):
            total += sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return total


def store(sent: list[sample.Sent], kafka: KafkaSettings, cassandra: CassandraSettings) -> Stored:
    """``sent`` on the namespace's topics, rebuilt into its keyspace, flushed and measured."""
    produce(kafka, sent)
    report = rebuild.rebuild(kafka, cassandra)
    cfg = from_env(LocalInfraSettings)
    nodetool.flush(cfg, cassandra.keyspace)
    events = [s.event for s in sent if s.topic == "chat.events"]
    replies = sum(len(e.content.encode()) for e in events if isinstance(e, ev.GenerationCompleted))
    asked = sum(len(e.content.encode()) for e in events if isinstance(e, ev.MessagePosted))
    posted = sum(isinstance(e, ev.MessagePosted) for e in events)
    print(f"{cassandra.keyspace}: {report.events:,} events → {report.writes:,} writes; {posted:,} posted messages", flush=True)
    return Stored(posted, replies + asked, replies / CHARS_PER_TOKEN, table_bytes(cfg, cassandra.keyspace))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--reply-tokens", type=int, default=500)
    args = parser.parse_args()
    sent = sample.session(args.conversations, args.turns)
    namespaces: list[tuple[KafkaSettings, CassandraSettings]] = []

    def namespace(name: str) -> tuple[KafkaSettings, CassandraSettings]:
        namespaces.append(isolated.prepare(from_env(KafkaSettings), from_env(CassandraSettings), name))
        return namespaces[-1]

    try:
        os.environ["PARLEY_KEYS_KEYSPACE"] = namespace("benchkeys")[1].keyspace  # the data keys are no message's rows
        keys.install_from_env()
        short = store(sent, *namespace("benchstore"))
        long = store(padded(sent, args.reply_tokens), *namespace("benchstorelong"))
        per_token = (long.disk_bytes - short.disk_bytes) / (long.reply_tokens - short.reply_tokens)
        fixed = short.disk_bytes / short.posted - per_token * short.reply_tokens / short.posted
        for label, s in (("sample replies", short), (f"replies of {args.reply_tokens} tokens", long)):
            print(f"{label}: {s.disk_bytes / s.posted:,.0f} bytes on disk per posted message, plain content "
                  f"{s.plain_bytes / s.posted:,.0f} bytes: on disk / plain ratio {s.disk_bytes / s.plain_bytes:.2f}")
        print(f"per posted message: {fixed:,.0f} bytes + {per_token:.2f} bytes per reply token")
        record(
            "storage",
            {
                "disk_bytes_per_message": fixed, "disk_bytes_per_reply_token": per_token,
                "disk_bytes_per_message_at_reply_tokens": long.disk_bytes / long.posted, "reply_tokens": args.reply_tokens,
                "posted_messages": long.posted,
            },
            baseline={"plain_bytes_per_message_at_reply_tokens": long.plain_bytes / long.posted,
                      "plain_bytes_per_reply_token": CHARS_PER_TOKEN},
            command=this_command(),
        )
    finally:
        for kafka, cassandra in namespaces:
            isolated.drop(kafka, cassandra)


if __name__ == "__main__":
    main()
