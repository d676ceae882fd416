"""The stream processors: each a core module wired from its settings, one row each, and how to run one.

A row is a function ``(KafkaSettings) -> Wiring`` (streams/wiring.py): the
topics the processor reads in its group with the core's handler for each
event type, the topics it writes, and the tasks, timers and rebalance hooks it
needs. ``PROCESSORS`` names the rows; tools/topology.py is checked against
them. ``run(name)`` runs one as a faust worker through the one runner
(``streams.app.wired_app``): ``python -m streams NAME`` and ``parley streams
NAME`` both come here. The cores import no faust, Kafka or Cassandra client;
everything that touches one is here, in streams/app.py, or in the stores and
readers these rows hand to the cores.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import faust

from parley.consumer import DEFAULT_MAX_EVENT_BYTES
from parley.errors import BrokerUnavailable, ConfigError, Unavailable
from parley.retry import retrying
from parley.settings import CassandraSettings, KafkaSettings, from_env
from parley.metrics import MODERATION_ORG_POLICIES, MODERATION_ORG_READS
from schemas import sealing
from schemas.catalog import inference_topic
from schemas.events import (
    DocumentEvent, ErasureRequested, Event, InferenceRequested, MemoryUpdated, TokenChunk, UsageRecorded, UserErased,
)
from moderation.classifier import classifier_from
from moderation.policy import org_policies_from
from moderation.policy import policy_from as moderation_policy
from moderation.pii import PiiDetector
from moderation.settings import ModerationSettings
from documents.embedding import embedder_from, warm
from documents.index import DocumentIndex
from documents.retrieval import Retriever, reranker_from
from documents.settings import DocumentSettings
from streams.context import ContextBuilder
from streams.context_tokens import TokenCounter
from streams.document_search import DocumentSearch
from streams.erasure import ErasureJob
from streams.erasure_rows import ErasureRows
from streams.materializer import Checkpoints, Materializer
from streams.moderator import Checker, Moderator
from streams.readers import HeartbeatReader, MemoryReader
from streams.search_index import SearchIndex
from streams.search_indexer import SearchIndexer
from streams.route_backlog import BacklogReader
from streams.route_recall import read_decisions
from streams.router import Router, count_verdicts, policy_from
from streams.settings import (
    ContextSettings,
    MaterializerSettings,
    RouterSettings,
    StreamsSettings,
    TitlerSettings,
    UsageSettings,
)
from streams.store import Store, UsageStore
from streams.engine_writer import EngineWriter
from streams.summary_store import SummaryRows
from streams.titles import Titler, Untitled, Writer
from streams.usage import UsageFolder
from streams.wiring import Agent, Timer, Wiring, returning_nothing
from workers.settings import TemplateSettings
from workers.sglang import SGLangClient

log = logging.getLogger(__name__)

#: Longest a shutdown or rebalance waits for the last checkpoints (Cassandra may be down).
FINAL_FLUSH_S = 5.0

DEFAULT_ARGS = ("worker", "-l", "warn")


def worker_args(argv: Sequence[str]) -> list[str]:
    """``argv`` for faust, with its web server off unless asked for.

    faust's ``worker`` command turns the web server on by default whatever the
    app's ``web_enabled`` says, and every worker on a host would then fight
    over port 6066.
    """
    args = list(argv or DEFAULT_ARGS)
    if args[:1] == ["worker"] and not any(a in ("--with-web", "--without-web") for a in args):
        args.insert(1, "--without-web")
    return args


# ------------------------------------------------------------------ the rows: each core wired from its settings


def _context(kafka: KafkaSettings) -> Wiring:

    cfg = from_env(ContextSettings)
    templates = from_env(TemplateSettings)
    store = Store(from_env(CassandraSettings))
    summariser = None
    if cfg.summary_url:  # the small pool's engine
        engine = SGLangClient(cfg.summary_url, timeout_s=cfg.summary_timeout_s)
        summariser = EngineWriter(
            engine, timeout_s=cfg.summary_timeout_s, retry_s=cfg.summary_retry_s, template=templates.of("small")
        )
    memories = MemoryReader(kafka)
    docs = from_env(DocumentSettings)
    embedder = embedder_from(docs)
    if docs.embedder_warm:
        warm(embedder)  # before the consumer joins: see warm()
    retriever = Retriever(
        DocumentIndex(store.cql), embedder, reranker_from(docs), k=docs.retrieve_k, timeout_s=docs.search_timeout_s,
        alpha=docs.hybrid_alpha,
    )
    # Counted in the default pool's template: the pool is not chosen yet (streams/context_tokens.py).
    counter = TokenCounter.from_spec(cfg.tokenizer, templates.of(from_env(RouterSettings).default_pool))
    search = DocumentSearch(store, retriever, passages=docs.passages, passage_tokens=docs.passage_tokens, count=counter.segment)
    builder = ContextBuilder(
        cfg, store, stored=SummaryRows(store), summariser=summariser, memory=memories.of, documents=search, counter=counter,
        screen=_strict_screen(), record_bytes=DEFAULT_MAX_EVENT_BYTES,  # a prompt no consumer reads ends context_too_long
    )

    async def follow_memory() -> None:
        # The compacted user.memory topic, read whole into memory: a prompt never waits on Cassandra for it.
        while True:
            try:
                await asyncio.to_thread(memories.poll, 0.5)
            except Unavailable:
                await asyncio.sleep(1.0)

    return Wiring(
        agents=[Agent("chat.events", {Event: builder.handle})],
        writes=("chat.inference", "chat.tokens", "chat.events", "chat.moderation"),
        tasks=[follow_memory],
    )


def _strict_screen() -> Checker | None:
    """The input check the context builder runs first for tiers whose policy is strict (None: no tier is)."""
    cfg = from_env(ModerationSettings)
    policy = moderation_policy(cfg.policy)
    if not any(p.mode == "strict" for p in policy.tiers.values()):
        return None
    # Organisations' own thresholds: the moderation processor's.
    return Checker(classifier_from(cfg), policy, timeout_s=cfg.timeout_s, give_up_s=cfg.give_up_s)


def _router(kafka: KafkaSettings) -> Wiring:
    """``chat.inference`` in, each turn routed by ``streams.router``'s core.

    Beside the agent, a task reads every worker heartbeat (no group: each
    router instance needs them all), and another the pools' Kafka backlog every
    PARLEY_ROUTER_BACKLOG_EVERY_S (``streams.route_backlog``; 0: not read). On assignment and revocation of
    ``chat.inference`` partitions the core's memory of decisions is told, and
    before a turn older than that memory is routed, the decisions are read back
    from the log (``streams.route_recall``) — retried until the broker answers,
    since routing it without them could send one attempt to two workers.
    """
    policy = policy_from(from_env(RouterSettings))  # fail at start-up, naming the setting, not on the first event
    router = Router(policy)

    async def heartbeats() -> None:
        reader = await asyncio.to_thread(HeartbeatReader, kafka)
        try:
            while True:
                try:
                    beats = await asyncio.to_thread(reader.poll, 0.5)
                except BrokerUnavailable as exc:  # placement falls back to hashing once the beats expire
                    log.warning("reading fleet.heartbeats failed; retrying", extra={"error": str(exc)})
                    await asyncio.sleep(1.0)
                    continue
                for beat in beats:
                    router.heartbeat(beat, time.monotonic())
        finally:
            reader.close()

    async def backlog() -> None:
        reader = BacklogReader(kafka, policy.pools)
        while True:
            mark = router.backlog_mark(time.monotonic())
            try:
                router.backlog(mark, await asyncio.to_thread(reader.read))
            except BrokerUnavailable as exc:  # past PARLEY_ROUTER_BACKLOG_STALE_S admission uses heartbeats alone
                log.warning("reading the pools' backlog failed; retrying", extra={"error": str(exc)})
            await asyncio.sleep(policy.backlog_every_s)

    async def assigned(topic: str, partitions: set[int]) -> None:
        router.memory.assigned(partitions, time.time())

    async def revoked(topic: str, partitions: set[int]) -> None:
        router.memory.revoked(partitions)

    async def recall(since: float) -> None:
        # The request may have been decided by a router before this one: route it the same way or not at all.
        while True:
            try:
                records = await asyncio.to_thread(read_decisions, kafka, policy.pools, since)
            except Unavailable as exc:  # the broker, or the data keys that open the prompts (KeyUnavailable)
                log.warning("reading earlier routing decisions failed; retrying", extra={"error": str(exc)})
                await asyncio.sleep(1.0)
                continue
            router.recall(since, records)
            log.info("earlier routing decisions read", extra={"since": since, "records": len(records)})
            return

    async def route(event: Event) -> list[Event]:
        assert isinstance(event, InferenceRequested)  # the only type dispatched here
        since = router.memory.recall_from(event)
        if since is not None:
            await recall(since)
        outs = router.route(event, time.monotonic(), time.time())
        count_verdicts(event, outs)
        return outs

    return Wiring(
        agents=[Agent("chat.inference", {InferenceRequested: route})],
        writes=(*(inference_topic(pool) for pool in policy.pools), "chat.events", "chat.tokens"),
        tasks=[heartbeats, backlog] if policy.backlog_every_s > 0 else [heartbeats],
        on_assigned=[assigned],
        on_revoked=[revoked],
    )


def _materializer(kafka: KafkaSettings) -> Wiring:

    cfg = from_env(MaterializerSettings)
    store = Store(from_env(CassandraSettings), texts=False)
    materializer = Materializer(cfg, store, sealing.sealer())
    checkpoints = Checkpoints(cfg, store, sealing.sealer())

    async def write_memory(event: Event) -> list[Event]:
        assert isinstance(event, MemoryUpdated)  # the only type dispatched here
        await retrying("writing a user's memory", lambda: store.write_memory(event), cfg.retry_max_s)
        return []

    async def write_document(event: Event) -> list[Event]:
        assert isinstance(event, DocumentEvent)  # the only type dispatched here
        await retrying("writing a document's status", lambda: store.write_document(event), cfg.retry_max_s)
        return []

    async def flush_due() -> None:
        await checkpoints.flush()

    async def flush_all() -> None:
        # Offsets of the chunks taken are committed by now: write their text
        # before another instance (or this one, restarted) resumes from the row.
        try:
            await asyncio.wait_for(checkpoints.flush(force=True), FINAL_FLUSH_S)
        except asyncio.TimeoutError:
            log.warning("the last checkpoints were not written (Cassandra unavailable?)")

    async def flush_on_revoke(topic: str, partitions: set[int]) -> None:
        if topic == "chat.tokens":  # the checkpoints are of chunks; the other topics keep nothing back
            await flush_all()

    return Wiring(
        agents=[
            Agent("chat.events", {Event: returning_nothing(materializer.handle)}),
            Agent("chat.tokens", {TokenChunk: returning_nothing(checkpoints.handle)}),
            Agent("user.memory", {MemoryUpdated: write_memory}),
            Agent("docs.events", {DocumentEvent: write_document}),
        ],
        timers=[Timer(cfg.checkpoint_tick_s, flush_due)],
        on_revoked=[flush_on_revoke],
        on_stop=[flush_all],
        fetch_wait_ms=cfg.fetch_wait_ms,
    )


def _titler(kafka: KafkaSettings) -> Wiring:
    cfg = from_env(TitlerSettings)
    if not cfg.engine_url:
        writer: Writer = Untitled()
    else:
        engine = SGLangClient(cfg.engine_url, timeout_s=cfg.timeout_s)
        writer = EngineWriter(
            engine, timeout_s=cfg.timeout_s, retry_s=cfg.retry_s, purpose="title",
            template=from_env(TemplateSettings).of("small"),  # the small pool's engine
        )
    titler = Titler(cfg, writer)
    return Wiring(agents=[Agent("chat.events", {Event: titler.handle})], writes=("chat.events",))


def _search(kafka: KafkaSettings) -> Wiring:
    """Each text that changed on ``chat.events`` written to the user's keyed search index (streams/search_indexer.py)."""
    from parley.cassandra import AsyncCql

    indexer = SearchIndexer(SearchIndex(AsyncCql(from_env(CassandraSettings)), sealing.sealer()))
    return Wiring(agents=[Agent("chat.events", {Event: indexer.handle})], fetch_wait_ms=SEARCH_FETCH_WAIT_MS)


#: Off the reply's path: a fetch per batch, not per record (the materializer's reason).
SEARCH_FETCH_WAIT_MS = 100


def _moderation(kafka: KafkaSettings) -> Wiring:
    """Each turn's input and reply checked beside the generation (streams/moderator.py)."""
    cfg = from_env(ModerationSettings)
    if cfg.nice:
        os.nice(cfg.nice)  # beside the turn, never in front of it: the chat path's processes take the CPU first
    policy = moderation_policy(cfg.policy)  # a bad policy fails at start-up, by name
    retains = any(p.retain_flagged for p in policy.tiers.values())
    checker = Checker(
        classifier_from(cfg), policy, redact=PiiDetector().redact if retains else None, timeout_s=cfg.timeout_s,
        give_up_s=cfg.give_up_s,
    )
    store = Store(from_env(CassandraSettings))
    moderator = Moderator(checker, store.load, window_tokens=cfg.window_tokens, overlap_tokens=cfg.overlap_tokens)
    return Wiring(
        agents=[
            Agent("chat.events", {Event: moderator.on_event}),
            Agent("chat.tokens", {TokenChunk: moderator.on_chunk}),  # type: ignore[dict-item]
        ],
        writes=("chat.moderation", "chat.events", "chat.control"),
        timers=[_org_policies(checker, store, cfg.org_refresh_s)],
        fetch_wait_ms=cfg.fetch_wait_ms,
    )


def _org_policies(checker: Checker, store: Store, every_s: float) -> Timer:
    """Organisations' own moderation policies read again every ``every_s`` (an outage keeps the last read)."""

    async def refresh() -> None:
        try:
            checker.orgs = org_policies_from(await store.org_policies())
        except Unavailable:
            MODERATION_ORG_READS.labels("unavailable").inc()
            log.warning("organisations' moderation policies unreadable; keeping the last ones read")
            return
        MODERATION_ORG_POLICIES.set(len(checker.orgs))
        MODERATION_ORG_READS.labels("read").inc()  # a policy written before a read began is in force after it

    return Timer(every_s, refresh)


def _usage(kafka: KafkaSettings) -> Wiring:

    folder = UsageFolder(from_env(UsageSettings), UsageStore(from_env(CassandraSettings)))
    return Wiring(agents=[Agent("chat.usage", {UsageRecorded: returning_nothing(folder.handle)})])


def _erasure(kafka: KafkaSettings) -> Wiring:
    """``user.erasures`` in: each ErasureRequested carried out to the end (streams/erasure.py). The job appends
    its deletes and UserErased itself, each acknowledged before the next step, and returns only when done, so
    its request is committed then and not before; a Kafka or Cassandra outage is retried in place."""
    from parley import keys
    from parley.kafka import EventProducer

    from schemas import sealing

    installed = sealing.installed()  # run() installs the process's key service before wiring
    key_service = installed if isinstance(installed, keys.KeyService) else keys.install_from_env()
    producers: list[EventProducer] = []  # made on the first job, on the loop that awaits its acknowledgements

    async def append(events: Sequence[Event]) -> None:
        if not producers:
            producers.append(EventProducer(kafka))
        await asyncio.gather(*(producers[0].send(e) for e in events))  # queued in order; idempotent, so kept in order

    async def destroy_key(user_id: str) -> None:
        await asyncio.to_thread(key_service.erase, user_id)

    async def close() -> None:
        for producer in producers:
            await asyncio.to_thread(producer.close, 5)

    job = ErasureJob(ErasureRows(from_env(CassandraSettings)), append, destroy_key)
    return Wiring(
        agents=[Agent("user.erasures", {ErasureRequested: job.handle, UserErased: job.handle})],
        writes=("chat.events", "docs.events", "user.memory", "user.erasures"),  # the job's own appends, not the runner's
        on_stop=[close],
    )


def _tools(kafka: KafkaSettings) -> Wiring:
    """The permission broker (streams/tool_broker.py): calls of Parley's tools judged by the operator's rules,
    answers applied, results turned into the next turn. Its expiry timer appends ``expire`` answers, which it
    then handles in log order like any answer."""
    from parley import tool_registry
    from parley.cassandra import AsyncCql
    from parley.kafka import EventProducer
    from parley.org_tools import OrgTools
    from streams.tool_broker import OrgRules, PerOrg, ToolBroker
    from streams.tool_store import ToolStore

    from confluent_kafka import KafkaException, TopicPartition

    from parley.consumer import reader, watermarks
    from parley.partitioning import partition_for
    from schemas.catalog import TOPICS

    cfg = from_env(tool_registry.ToolSettings)
    tokens = reader(kafka, "tool-broker-ends")  # asked for end offsets only, never assigned
    ends_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="token-ends")

    def token_end_now(conversation_id: str) -> int:
        tp = TopicPartition(kafka.topic("chat.tokens"), partition_for(conversation_id, TOPICS["chat.tokens"].partitions))
        try:
            return watermarks(tokens, tp, 10.0)[1]
        except KafkaException as exc:
            raise BrokerUnavailable(f"chat.tokens' end offset: {exc}") from exc

    async def token_end(conversation_id: str) -> int:
        return await asyncio.get_running_loop().run_in_executor(ends_thread, token_end_now, conversation_id)

    cql = AsyncCql(from_env(CassandraSettings))
    store = ToolStore(cql, sealing.sealer())
    broker = ToolBroker(
        tool_registry.load(cfg.tools_file), store, token_end, org_rules=OrgRules(store.org_rules),
        org_tools=PerOrg(OrgTools(cql).specs),
    )
    producers: list[EventProducer] = []  # made on the timer's first tick, on the loop that awaits its acknowledgements

    async def expire() -> None:
        try:
            due = await broker.expire_due()
        except Unavailable:
            log.warning("the calls waiting for an answer are unreadable; expiry waits for the next tick")
            return
        if due:
            if not producers:
                producers.append(EventProducer(kafka))
            await asyncio.gather(*(producers[0].send(e) for e in due))

    async def close() -> None:
        for producer in producers:
            await asyncio.to_thread(producer.close, 5)
        await asyncio.get_running_loop().run_in_executor(ends_thread, tokens.close)

    return Wiring(
        agents=[Agent("chat.events", {Event: broker.handle})],
        writes=("chat.events", "chat.tools"),
        timers=[Timer(cfg.expiry_tick_s, expire)],
        on_stop=[close],
    )


#: The processors, by the name the command line uses (group ``streams.<name>``): each a core module
#: wired from its settings by the function above. Adding a processor is its core module and a row here.
PROCESSORS: dict[str, Callable[[KafkaSettings], Wiring]] = {
    "context": _context,
    "router": _router,
    "materializer": _materializer,
    "usage": _usage,
    "titler": _titler,
    "search": _search,
    "moderation": _moderation,
    "erasure": _erasure,
    "tools": _tools,
}


def wiring(processor: str) -> Wiring:
    try:
        factory = PROCESSORS[processor]
    except KeyError:
        raise ConfigError(f"unknown processor {processor!r}; choose one of {sorted(PROCESSORS)}") from None
    return factory(from_env(KafkaSettings))


def build(processor: str) -> faust.App:
    """``processor``'s faust App, run by the one runner (``streams.app.wired_app``)."""
    from streams.app import wired_app

    return wired_app(from_env(StreamsSettings), from_env(KafkaSettings), processor, wiring(processor))


def run(processor: str, argv: Sequence[str] = ()) -> None:
    """Run ``processor`` as a faust worker until stopped (faust's CLI handles signals)."""
    from parley import keys, metrics, ops, schema_registry

    keys.install_from_env()
    schema_registry.install(from_env(KafkaSettings))
    app = build(processor)
    if metrics.serve_from_env(f"streams.{processor}") is not None:
        ops.register_lag(from_env(KafkaSettings), [from_env(StreamsSettings).group(processor)])
    sys.argv = [f"streams {processor}", *worker_args(argv)]
    app.main()
