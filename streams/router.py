"""Router: InferenceRequested on ``chat.inference`` → InferenceRouted on ``chat.inference.<pool>``, or a shed turn.

Per turn, in this order (each step its own pure module):

1. **Pool** — a model the user selected is respected (an unknown one fails
   the turn, ``unknown_model``); then an experiment arm's pool (the turn's
   ``experiment``, ``streams.experiments``); otherwise ``classify`` scores the newest user
   message and the context size, and the cheapest pool that clears the bar,
   has the capabilities the turn needs and holds its tokens serves it. A
   conversation is sticky to its pool and only ever escalates (``escalate``):
   leaving a pool throws away the prefix its engines hold.
2. **Admission** — ``admission.admit`` on the pools' pressure from the fleet
   view and each pool's Kafka backlog (``route_backlog``): free turns are
   downgraded, queued or shed; paid tiers keep a share.
3. **Placement** — ``placement.Placement`` picks the partition whose worker
   holds the conversation's prefix, or moves it when that worker is hot or
   gone; with no live heartbeats for the pool, Kafka's hash of the id.

This module is the router's core (no Kafka, no faust: the gateway reads the
policy from it too); ``streams.router_app`` runs it as a faust agent.

The conversation → pool map and the homes are kept in memory (bounded LRU) and
are lost on restart: the next turn is classified afresh (it may de-escalate
once) and placed anew (one cache move). Nothing else depends on them. The
decision taken for each attempt is not lost: a second record of an attempt
gets the first one's, read back from the log after a restart
(``streams.route_memory``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from parley.lru import LRU
from parley.metrics import ADMISSION, POOL_BACKLOG, ROUTES
from parley.partitioning import partition_for
from schemas.catalog import TOPICS, inference_topic
from schemas.endings import CONTEXT_TOO_LONG, OVERLOADED, UNKNOWN_MODEL, ending, final_chunk
from schemas.events import ArmOverrides, Event, GenerationCompleted, InferenceRequested, InferenceRouted, WorkerHeartbeat
from streams.admission import AdmissionConfig, Admit, Load, Shed, admit
from streams.classify import RANKS, Thresholds, classify, escalate, features
from streams.fleet import Fleet, Offsets, Reading, fresh, pool_load, unread
from streams.placement import Placement, PlacementConfig
from streams.route_memory import Decided, RouteMemory, attempt_key
from streams.settings import RouterSettings

log = logging.getLogger(__name__)

#: InferenceRequested.model values that mean "let the router choose".
AUTO = frozenset({"", "auto"})
#: A pool missing from PARLEY_ROUTER_CAPABILITIES is trusted with everything.
ALL_CAPABILITIES = frozenset({"chat", "code", "math"})


@dataclass(frozen=True)
class Pool:
    name: str
    model: str
    context_tokens: int
    capabilities: frozenset[str]


@dataclass(frozen=True)
class Policy:
    pools: dict[str, Pool]  # configured pools, cheapest first
    default_pool: str  # the floor of a classified turn
    partitions: dict[str, int]  # pool → partitions of chat.inference.<pool>
    thresholds: Thresholds = Thresholds()
    admission: AdmissionConfig = AdmissionConfig()
    placement: PlacementConfig = PlacementConfig()
    conversations: int = 200_000
    heartbeat_expiry_s: float = 6.0
    backlog_every_s: float = 1.0
    backlog_stale_s: float = 5.0

    def pool_of_model(self, model: str) -> str | None:
        """The pool serving ``model`` (a model name, or a pool's own name)."""
        if model in self.pools:
            return model
        return next((p.name for p in self.pools.values() if p.model == model), None)


def policy_from(settings: RouterSettings) -> Policy:
    """The routing policy; a bad setting fails here, at start-up, naming its variable."""
    models = settings.pool_models()
    contexts, caps = settings.pool_context_tokens(), settings.pool_capabilities()
    default_context = max(contexts.values(), default=32768)
    pools = {
        name: Pool(name, models[name], contexts.get(name, default_context), caps.get(name, ALL_CAPABILITIES))
        for name in RANKS
        if name in models
    }
    return Policy(
        pools=pools,
        default_pool=settings.default_pool,
        partitions={name: TOPICS[inference_topic(name)].partitions for name in pools},
        thresholds=Thresholds(medium=settings.medium_score, frontier=settings.frontier_score),
        admission=AdmissionConfig(
            busy=settings.busy,
            queue_limit=settings.queue_limit,
            paid_limit=settings.paid_limit,
            retry_after_s=settings.retry_after_s,
        ),
        placement=PlacementConfig(
            balance_abs=settings.balance_abs, balance_rel=settings.balance_rel, max_conversations=settings.conversations
        ),
        conversations=settings.conversations,
        heartbeat_expiry_s=settings.heartbeat_expiry_s,
        backlog_every_s=settings.backlog_every_s,
        backlog_stale_s=settings.backlog_stale_s,
    )


@dataclass(frozen=True)
class Choice:
    pool: str
    reason: str  # user_selected | experiment | classifier | sticky | escalated


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str


def newest_user_text(request: InferenceRequested) -> str:
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")


def needed_tokens(request: InferenceRequested) -> int:
    """Context a turn needs: its prompt and its reply's cap (uncapped, 0: at least one token of reply)."""
    return request.prompt_tokens + max(request.max_tokens, 1)


def choose_pool(request: InferenceRequested, policy: Policy, current: str | None) -> Choice | Refusal:
    """The pool a turn needs, before admission; ``current`` is the conversation's pool so far."""
    tokens = needed_tokens(request)
    if (request.model or "") not in AUTO:
        pool = policy.pool_of_model(str(request.model))
        if pool is None:
            served = ", ".join(sorted(p.model for p in policy.pools.values()))
            return Refusal(UNKNOWN_MODEL, f"model {request.model!r} is not served here; choose one of: {served}")
        if tokens > policy.pools[pool].context_tokens:
            return _too_long(tokens, policy)
        return Choice(pool, "user_selected")
    arm = request.experiment.overrides if request.experiment is not None else None
    if arm is not None and arm.pool in policy.pools and tokens <= policy.pools[arm.pool].context_tokens:
        # The experiment's arm names the pool (a pool not served here, or too small for the turn: the router's choice).
        return Choice(arm.pool, "experiment")
    thresholds = policy.thresholds if arm is None else experiment_thresholds(policy.thresholds, arm)
    # Documents the turn searched count as hard work (comparing reports is, seed §4); none when it has none.
    searched = sum(1 for d in request.retrieval.documents if d.status != "missing") if request.retrieval else 0
    f = features(newest_user_text(request), context_tokens=request.prompt_tokens, documents=searched)
    wanted = escalate(policy.default_pool, classify(f, thresholds))
    if current in policy.pools:
        wanted = escalate(current, wanted)
    needs = {name for name, present in (("code", f.code), ("math", f.math)) if present}
    pool = _serving(policy, wanted, frozenset(needs), tokens)
    if pool is None:
        return _too_long(tokens, policy)
    if current is None or current not in policy.pools:
        return Choice(pool, "classifier")
    return Choice(pool, "escalated" if RANKS.index(pool) > RANKS.index(current) else "sticky")


def experiment_thresholds(thresholds: Thresholds, arm: ArmOverrides) -> Thresholds:
    """The classifier's bars under an experiment arm: each score the arm sets, else the router's own."""
    return Thresholds(
        medium=thresholds.medium if arm.medium_score is None else arm.medium_score,
        frontier=thresholds.frontier if arm.frontier_score is None else arm.frontier_score,
    )


def _serving(policy: Policy, floor: str, needs: frozenset[str], tokens: int) -> str | None:
    """The cheapest pool at or above ``floor`` that holds ``tokens`` and has ``needs``; if none has them, the
    cheapest at or above ``floor`` that holds ``tokens``; if ``floor`` is above every such pool, the most capable."""
    fitting = [p for p in policy.pools.values() if tokens <= p.context_tokens]
    if not fitting:
        return None
    above = [p for p in fitting if RANKS.index(p.name) >= RANKS.index(floor)]
    capable = [p for p in above if needs <= p.capabilities]
    return (capable or above or fitting[-1:])[0].name


def _too_long(tokens: int, policy: Policy) -> Refusal:
    most = max(p.context_tokens for p in policy.pools.values())
    return Refusal(
        CONTEXT_TOO_LONG,
        f"the prompt and reply need {tokens} tokens; the largest pool holds {most} (PARLEY_ROUTER_CONTEXT_TOKENS)",
    )


class Router:
    """The routing state (conversation pools, homes, the fleet) and what to emit per request; no Kafka in here."""

    def __init__(self, policy: Policy, fleet: Fleet | None = None) -> None:
        self.policy = policy
        self.fleet = fleet or Fleet(policy.heartbeat_expiry_s)
        self._pools: LRU[str, str] = LRU(policy.conversations)
        self._placements = {pool: Placement(policy.placement) for pool in policy.pools}
        self._mismatches: set[tuple[str, str]] = set()  # (pool, model) warned about once
        self._routed = dict.fromkeys(policy.pools, 0)  # turns routed to each pool, ever
        self._backlog: dict[str, Reading] = {}
        self._stale: set[str] = set()  # pools whose backlog reading went stale (warned once)
        #: What each recent attempt got. A second InferenceRequested of an attempt gets the same decision,
        #: so both records land on one partition and its worker generates the attempt once (workers skip a
        #: record of an attempt they hold or closed); across restarts the shell recalls it from the log.
        self.memory = RouteMemory(policy.conversations, TOPICS["chat.inference"].partitions)

    def heartbeat(self, beat: WorkerHeartbeat, now: float) -> None:
        if self.fleet.observe(beat, now) and beat.pool in self._placements:
            self._placements[beat.pool].heartbeat(beat.worker_id)  # the beat now counts what we placed before it
            configured = self.policy.pools[beat.pool].model
            if beat.model and beat.model != configured and (beat.pool, beat.model) not in self._mismatches:
                self._mismatches.add((beat.pool, beat.model))
                log.warning(
                    "a pool's engine serves another model than PARLEY_ROUTER_POOLS says; turns record what it serves",
                    extra={"pool": beat.pool, "configured": configured, "served": beat.model, "worker_id": beat.worker_id},
                )

    def backlog_mark(self, now: float) -> dict[str, tuple[float, int]]:
        """Taken just before a backlog reading begins: when, and how many turns each pool had been routed."""
        return {pool: (now, routed) for pool, routed in self._routed.items()}

    def backlog(self, mark: dict[str, tuple[float, int]], offsets: dict[str, Offsets]) -> None:
        """Take a backlog reading (``route_backlog.BacklogReader``) that began at ``mark``."""
        for pool, found in offsets.items():
            if pool in mark:
                at, routed = mark[pool]
                self._backlog[pool] = Reading(at, routed, found)
                self._stale.discard(pool)
                POOL_BACKLOG.labels(pool).set(unread(found, self.fleet.read_to(pool, at)))

    def waiting(self, pool: str, now: float) -> float | None:
        """Turns waiting in Kafka for ``pool``: its backlog at the last reading plus what this router routed
        there since; None with no fresh reading (PARLEY_ROUTER_BACKLOG_STALE_S)."""
        reading = self._backlog.get(pool)
        if not fresh(reading, now, self.policy.backlog_stale_s):
            if reading is not None and pool not in self._stale:
                self._stale.add(pool)
                log.warning("the pool's backlog reading is stale; admitting on heartbeats alone", extra={"pool": pool})
            return None
        assert reading is not None  # fresh() says so
        return unread(reading.offsets, self.fleet.read_to(pool, now)) + self._routed[pool] - reading.routed

    def loads(self, now: float, pools: list[str]) -> dict[str, Load]:
        """Pressure of ``pools``: what their workers hold plus what waits in Kafka for them; without a fresh
        backlog reading, what the workers reported plus this router's placements since each beat."""
        out = {}
        for pool in pools:
            replicas = self.fleet.replicas(pool, now)
            waiting = self.waiting(pool, now)
            if waiting is None:
                load = pool_load(replicas, {r.id: self._placements[pool].load(r) for r in replicas})
            else:
                load = pool_load(replicas, waiting=waiting)
            if load is not None:
                out[pool] = load
        return out

    def recall(self, since: float, records: Iterable[tuple[Event, float]]) -> None:
        """Take the decisions ``streams.route_recall`` read off the log from ``since`` on: the first
        InferenceRouted of an attempt, else its shed ending (repeated with its final chunk)."""
        found: dict[str, Decided] = {}
        for event, at in records:
            if isinstance(event, InferenceRouted):
                key = attempt_key(event.request.request_id, event.request.attempt)
                if key not in found or not isinstance(found[key].outs[0], InferenceRouted):
                    found[key] = Decided((without_prompt(event),), at)
            elif isinstance(event, GenerationCompleted):
                retry_after = self.policy.admission.retry_after_s
                found.setdefault(
                    attempt_key(event.request_id, event.attempt), Decided((event, final_chunk(event, retry_after)), at)
                )
        self.memory.recalled(since, found.items())

    def route(self, request: InferenceRequested, now: float, wall: float | None = None) -> list[Event]:
        """What to produce for ``request``: its InferenceRouted, or the events that end the turn; the
        decision taken for its attempt before, if the memory holds one (``now`` monotonic, ``wall`` epoch s)."""
        earlier = self.memory.decision(request)
        if earlier is not None:
            return [
                replace(o, request=self._capped(request, o.pool), repeat=True) if isinstance(o, InferenceRouted) else o
                for o in earlier.outs
            ]
        out = self._route(request, now)
        self.memory.decided(request, map(without_prompt, out), time.time() if wall is None else wall)
        return out

    def _route(self, request: InferenceRequested, now: float) -> list[Event]:
        cid = request.conversation_id
        choice = choose_pool(request, self.policy, self._pools.get(cid))
        if isinstance(choice, Refusal):
            return ending(request, "failed", choice.code, choice.message)
        self._pools.put(cid, choice.pool)
        # A user-selected model is never swapped for a smaller one; a classified turn may be, to a pool that holds it.
        tokens = needed_tokens(request)
        candidates = [
            p.name
            for p in self.policy.pools.values()
            if RANKS.index(p.name) <= RANKS.index(choice.pool) and tokens <= p.context_tokens
        ]
        if choice.reason == "user_selected":
            candidates = [choice.pool]
        loads = self.loads(now, candidates)
        decision = admit(request.tier, choice.pool, loads, self.policy.admission)
        if isinstance(decision, Shed):
            load = loads[decision.pool]  # a pool is shed only on a load
            why = {"pool": decision.pool, "tier": request.tier, "why": decision.reason,
                   "pressure": round(load.pressure, 2), "waiting": load.waiting}  # fmt: skip
            log.info("turn shed", extra={"conversation_id": cid, "request_id": request.request_id, **why})
            return shed(request, decision, self.policy.pools[decision.pool].model)
        return [self._place(request, choice, decision, now)]

    def _capped(self, request: InferenceRequested, pool: str) -> InferenceRequested:
        """``request`` with its cap resolved: uncapped (0, as sent) may use the rest of ``pool``'s context."""
        if request.max_tokens != 0 or pool not in self.policy.pools:
            return request
        return replace(request, max_tokens=max(1, self.policy.pools[pool].context_tokens - request.prompt_tokens))

    def _place(self, request: InferenceRequested, choice: Choice, admitted: Admit, now: float) -> InferenceRouted:
        pool = admitted.pool
        placed = self._placements[pool].place(request.conversation_id, self.fleet.replicas(pool, now))
        if placed is None:  # no live heartbeat from the pool: Kafka's hash keeps the conversation on one partition
            partition, replica, where = partition_for(request.conversation_id, self.policy.partitions[pool]), "", "hashed"
        else:
            partition, replica, where = placed.partition, placed.replica, placed.reason
        self._routed[pool] += 1
        reason = route_reason(choice.reason, where, downgraded=admitted.downgraded_from is not None)
        where_to = {"pool": pool, "partition": partition, "replica": replica, "queued": admitted.queued}
        log.debug("turn routed", extra={"request_id": request.request_id, "route_reason": reason, **where_to})
        request = self._capped(request, pool)
        return InferenceRouted(
            conversation_id=request.conversation_id,
            user_id=request.user_id,
            trace_id=request.trace_id,
            request=request,
            pool=pool,
            # What the placed worker's engine serves (its heartbeat says), not only what the pool is configured with.
            model=(replica and self.fleet.model_of(replica)) or self.policy.pools[pool].model,
            partition=partition,
            route_reason=reason,
            downgraded_from=admitted.downgraded_from,
        )


def without_prompt(event: Event) -> Event:
    """A decision as remembered: 200k remembered prompts would hold gigabytes."""
    if isinstance(event, InferenceRouted):
        return replace(event, request=replace(event.request, messages=[]))
    return event


def route_reason(pool_reason: str, placement_reason: str, *, downgraded: bool) -> str:
    """One word for InferenceRouted.route_reason: what changed, else why it stayed."""
    if downgraded:
        return "downgraded"
    if pool_reason in ("user_selected", "escalated", "experiment"):
        return pool_reason
    if placement_reason in ("moved_hot", "moved_gone"):
        return placement_reason
    if pool_reason == "classifier":  # the conversation's first turn here
        return "classifier"
    return placement_reason  # sticky | new (home forgotten) | hashed (no heartbeats)


def shed(request: InferenceRequested, decision: Shed, model: str) -> list[Event]:
    message = f"the {decision.pool} pool is overloaded; retry in {decision.retry_after_s:g} s"
    return ending(
        request, "rejected", OVERLOADED, message, retry_after=decision.retry_after_s, pool=decision.pool, model=model
    )


def count_verdicts(request: InferenceRequested, outs: list[Event]) -> None:
    """Routing and admission counters (parley/metrics.py) for one request's outcome."""
    for out in outs:
        if isinstance(out, InferenceRouted):
            ROUTES.labels(out.pool, out.route_reason).inc()
            verdict = "downgraded" if out.downgraded_from else "admitted"
            ADMISSION.labels("router", out.downgraded_from or out.pool, request.tier, verdict).inc()
        elif isinstance(out, GenerationCompleted) and out.finish_reason == "rejected":
            ADMISSION.labels("router", out.pool or "-", request.tier, out.error_code or "rejected").inc()
