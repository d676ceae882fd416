"""The topic catalog: every topic, its key, events, partitions and configs.

One place for all of it: ``parley topics`` creates and verifies the broker
against this table, processors name topics through it, and the docs quote it.
Partition counts live here, not in per-service settings, because sticky
routing needs every service to agree on them; docs/operations.md says how to
size them for a target throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import events as ev

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
FOREVER = -1

POOLS = ("small", "medium", "frontier")


@dataclass(frozen=True)
class Topic:
    name: str
    key: str  # the event field used as the Kafka key
    events: tuple[type[ev.Event], ...]
    partitions: int
    retention_ms: int
    compacted: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def configs(self) -> dict[str, str]:
        """Topic configs as the broker reports them."""
        out = {
            "cleanup.policy": "compact" if self.compacted else "delete",
            "retention.ms": str(self.retention_ms),
        }
        out.update(self.extra)
        return out

    @property
    def dlq(self) -> str:
        return dlq_name(self.name)


def dlq_name(topic: str) -> str:
    return f"{topic}.dlq"


_MAIN: tuple[Topic, ...] = (
    Topic(
        "chat.events",
        "conversation_id",
        (
            ev.ConversationCreated,
            ev.MessagePosted,
            ev.GenerationRequested,
            ev.GenerationCompleted,
            ev.SummaryWritten,
            ev.LeafSelected,
            ev.ConversationRenamed,
            ev.ConversationArchived,
            ev.FeedbackGiven,
            ev.ConversationShared,
            ev.ShareRevoked,
            ev.ConversationDeleted,
            ev.GenerationModerated,
            ev.ToolCallDecided,
            ev.ToolCallAnswered,
            ev.ToolCallStarted,
            ev.ToolCallFinished,
        ),
        partitions=12,
        retention_ms=FOREVER,
    ),
    Topic("chat.inference", "conversation_id", (ev.InferenceRequested,), partitions=12, retention_ms=7 * DAY_MS),
    *(
        Topic(f"chat.inference.{pool}", "conversation_id", (ev.InferenceRouted,), partitions=6, retention_ms=DAY_MS)
        for pool in POOLS
    ),
    # Calls of Parley's tools cleared to run: the executor's queue, partitioned like chat.events.
    Topic("chat.tools", "conversation_id", (ev.ToolCallCleared,), partitions=12, retention_ms=7 * DAY_MS),
    Topic("chat.tokens", "conversation_id", (ev.TokenChunk,), partitions=12, retention_ms=DAY_MS),
    Topic("chat.control", "conversation_id", (ev.GenerationCancelRequested,), partitions=6, retention_ms=DAY_MS),
    # Every moderation check, for review and evals; a flag also goes to chat.events (GenerationModerated).
    Topic("chat.moderation", "conversation_id", (ev.ModerationResult,), partitions=12, retention_ms=30 * DAY_MS),
    Topic("chat.usage", "user_id", (ev.UsageRecorded,), partitions=6, retention_ms=90 * DAY_MS),
    Topic(
        "fleet.heartbeats",
        "worker_id",
        (ev.WorkerHeartbeat,),
        partitions=1,
        retention_ms=7 * DAY_MS,
        compacted=True,
        # Compact quickly so a restarted router reads few stale beats.
        extra={"segment.ms": str(HOUR_MS), "min.cleanable.dirty.ratio": "0.1"},
    ),
    Topic(
        "user.memory",
        "user_id",
        (ev.MemoryUpdated,),
        partitions=6,
        retention_ms=FOREVER,
        compacted=True,  # each update is the whole memory: the latest per user is all that matters
    ),
    # Operators' experiments (`parley experiments`): few records, each kept, so a reader rebuilds the running set.
    Topic("ops.experiments", "experiment", (ev.ExperimentStarted, ev.ExperimentStopped), partitions=1, retention_ms=FOREVER),
    Topic("user.erasures", "user_id", (ev.ErasureRequested, ev.UserErased), partitions=3, retention_ms=FOREVER),
    Topic(
        "docs.events",
        "document_id",
        (ev.DocumentUploaded, ev.DocumentPagesExtracted, ev.DocumentIndexed, ev.DocumentFailed, ev.DocumentDeleted),
        partitions=6,
        retention_ms=FOREVER,
    ),
)

_DLQS: tuple[Topic, ...] = tuple(
    Topic(t.dlq, "raw_key", (ev.DeadLetter,), partitions=1, retention_ms=30 * DAY_MS) for t in _MAIN
)

#: Not events: every writer's Avro schemas, keyed by fingerprint (``parley.schema_registry``), so a
#: reader older than a writer reads its records. Kept forever, the latest per fingerprint.
SCHEMAS = Topic("schemas", "fingerprint", (), partitions=1, retention_ms=FOREVER, compacted=True)

TOPICS: dict[str, Topic] = {t.name: t for t in (*_MAIN, *_DLQS, SCHEMAS)}


def topics_for(event_type: type[ev.Event]) -> list[Topic]:
    """The (non-DLQ) topics an event type may be produced to."""
    return [t for t in _MAIN if event_type in t.events]


def topic_name_for(event: ev.Event) -> str:
    """The catalog topic ``event`` is produced to (InferenceRouted: its pool's topic)."""
    if isinstance(event, ev.InferenceRouted):
        return inference_topic(event.pool)
    homes = topics_for(type(event))
    if len(homes) != 1:
        raise KeyError(f"{type(event).__name__} has no single home topic; name the topic explicitly")
    return homes[0].name


def inference_topic(pool: str) -> str:
    if pool not in POOLS:
        raise KeyError(f"unknown pool {pool!r}; pools are {POOLS}")
    return f"chat.inference.{pool}"
