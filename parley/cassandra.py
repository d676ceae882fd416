"""Cassandra sessions, and CQL as awaitables, with driver errors translated into ``StoreUnavailable``.

``AsyncCql`` is the one async adapter every service's store uses (the gateway's,
the processors'): prepared statements, every page of a result, and errors that
name the settings to check.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from cassandra import AuthenticationFailed, ConsistencyLevel, DriverException, OperationTimedOut, RequestExecutionException
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, ResponseFuture, Session
from cassandra.policies import ConstantSpeculativeExecutionPolicy, DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from parley.errors import StoreUnavailable
from parley.settings import CassandraSettings
from parley.transport_security import cassandra_options

#: Longest pause between attempts to reach a node that went down.
RECONNECT_MAX_S = 5.0


#: Seconds the control connection waits for the schema read it does at connect.
CONTROL_TIMEOUT_S = 15.0

#: Every statement's level unless it says otherwise (the driver's own default is LOCAL_ONE). A quorum
#: of the local data centre's replicas writes, and a quorum reads, so every read overlaps the last
#: acknowledged write: read-your-writes across processes (a turn the materializer stored, a revoked API
#: key, an erased user's tombstones), and one replica of three may be down. The exceptions override
#: it where they are: SAI ANN searches at ONE (documents/index.py), which Cassandra allows no other way.
CONSISTENCY = ConsistencyLevel.LOCAL_QUORUM
#: Lightweight transactions (IF NOT EXISTS) run their Paxos round in the local data centre too.
SERIAL_CONSISTENCY = ConsistencyLevel.LOCAL_SERIAL
#: A read whose coordinator has not answered within this is sent to the next node as well, and the first
#: answer wins: a coordinator that hangs (paused, or swapping) costs a read 2 s, not the 10 s request
#: timeout and an error. Only reads: the driver speculates only on statements marked idempotent, and
#: ``AsyncCql`` marks its SELECTs (a write may append to a list or be an LWT, which must not run twice).
SPECULATE_AFTER_S = 2.0


def connect(settings: CassandraSettings, keyspace: str | None = None, connect_timeout: float = 5.0) -> Session:
    """A session on ``keyspace`` (none: no keyspace). Close it with ``session.cluster.shutdown()``."""
    cluster = Cluster(
        settings.contact_points,
        port=settings.port,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=DCAwareRoundRobinPolicy(local_dc=settings.local_dc),
                consistency_level=CONSISTENCY,
                serial_consistency_level=SERIAL_CONSISTENCY,
                speculative_execution_policy=ConstantSpeculativeExecutionPolicy(SPECULATE_AFTER_S, max_attempts=1),
            )
        },
        connect_timeout=connect_timeout,
        # The control connection reads every keyspace's schema when it connects; the driver's 2 s for
        # that fails a busy node (CI: a node sharing two cores with a second Cassandra starting).
        control_connection_timeout=CONTROL_TIMEOUT_S,
        protocol_version=5,
        # A statement is prepared on the node that runs it first, and on each other node when that node
        # first answers "unprepared" (the driver re-prepares and retries): not on every node at once,
        # which waits out the request timeout for each new statement while one node hangs.
        prepare_on_all_hosts=False,
        # The driver's default backs off to 10 minutes between reconnection attempts: after an
        # outage of a minute, clients would stay down for minutes more. Cap it at a few seconds, and
        # never give up: the driver's default stops after 64 attempts (5 minutes here), and a node that
        # came back after that would never be used again by this process.
        reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=RECONNECT_MAX_S, max_attempts=None),
        **cassandra_options(settings),
    )
    try:
        return cluster.connect(keyspace)
    except NoHostAvailable as exc:
        cluster.shutdown()
        raise StoreUnavailable(f"cannot reach Cassandra at {settings.hosts}:{settings.port}: {_refusal(settings, exc)}") from exc


def _refusal(settings: CassandraSettings, exc: NoHostAvailable) -> str:
    """Why no node took the connection, in the words of the settings to check (the driver's own errors
    per host say only "AuthenticationFailed", an OpenSSL code or "connection reset")."""
    errors = list(exc.errors.values())
    if any(isinstance(e, AuthenticationFailed) for e in errors):
        if not settings.username:
            return "it requires a login: set PARLEY_CASSANDRA_USERNAME and PARLEY_CASSANDRA_PASSWORD(_FILE)"
        return (
            f"it refused the login of PARLEY_CASSANDRA_USERNAME={settings.username!r}: "
            "check PARLEY_CASSANDRA_PASSWORD / PARLEY_CASSANDRA_PASSWORD_FILE"
        )
    tls = [str(e) for e in errors if isinstance(e, ssl.SSLError) or "[SSL" in str(e)]  # the driver rewraps some
    if tls:
        return (
            f"the TLS handshake failed; is the node's certificate issued for {settings.hosts} by a CA of "
            "PARLEY_CASSANDRA_SSL_CA (empty: the system's), and does the node want a client certificate "
            f"(PARLEY_CASSANDRA_SSL_CERT / PARLEY_CASSANDRA_SSL_KEY)? {tls[0]}"
        )
    if not settings.ssl and any(isinstance(e, ConnectionResetError) for e in errors):
        return "it hung up on the first request; if the node speaks TLS only, set PARLEY_CASSANDRA_SSL=1"
    return "is it running, at PARLEY_CASSANDRA_HOSTS / PARLEY_CASSANDRA_PORT? `make run` starts a local one"


#: What the driver raises when Cassandra cannot answer (each caller turns it into StoreUnavailable).
DRIVER_ERRORS = (NoHostAvailable, RequestExecutionException, DriverException, OSError)
_ERRORS = DRIVER_ERRORS


class AsyncCql:
    """CQL on one session as awaitables. ``{ks}`` in a statement stands for the keyspace of ``settings``.

    Without a ``session`` it connects on first use (off the event loop: connecting blocks).
    ``deadline_s``: the most one statement may take whole, its first prepare included, before it fails as
    StoreUnavailable (None: the driver's own bounds). A statement new to a process meets a paused node twice,
    once to prepare and once to run (up to ~14 s and 10 s on a single node): the gateway, which must answer
    a reader, bounds the two together (bench.chaos saw a read answered after 30 s).
    """

    def __init__(self, settings: CassandraSettings, session: Session | None = None, deadline_s: float | None = None) -> None:
        self.settings = settings
        self._deadline_s = deadline_s
        self._session = session
        self._connecting = asyncio.Lock()  # concurrent first queries share one connection
        self._prepared: dict[str, PreparedStatement] = {}

    async def session(self) -> Session:
        async with self._connecting:
            if self._session is None:
                self._session = await asyncio.to_thread(connect, self.settings, self.settings.keyspace)
            return self._session

    async def _statement(self, session: Session, cql: str) -> PreparedStatement:
        statement = self._prepared.get(cql)
        if statement is None:
            text = cql.replace("{ks}", self.settings.keyspace)
            statement = await prepare(session, text)
            statement.is_idempotent = text.lstrip()[:6].upper() == "SELECT"  # may be speculated (SPECULATE_AFTER_S)
            self._prepared[cql] = statement
        return statement

    async def run(
        self, cql: str, values: tuple[Any, ...] = (), *, consistency: int | None = None, paged: bool = True
    ) -> list[Any]:
        """Every row ``cql`` answers (all pages), as a prepared statement. ``consistency`` overrides the
        session's level and ``paged=False`` asks for one unpaged result, for the statements that allow no
        other (SAI ANN queries: consistency ONE, and a second page would be a second, different search)."""
        return await self._bounded(self._run(cql, values, consistency, paged))

    async def _bounded(self, step: Any) -> Any:
        if self._deadline_s is None:
            return await step
        try:
            return await asyncio.wait_for(step, self._deadline_s)
        except asyncio.TimeoutError as exc:  # the driver's future is left to end on its own; its answer unused
            raise self._unavailable(TimeoutError(f"no answer within {self._deadline_s:.0f}s")) from exc

    async def _run(self, cql: str, values: tuple[Any, ...], consistency: int | None, paged: bool) -> list[Any]:
        try:
            session = await self.session()
            statement = await self._statement(session, cql)
            if consistency is None and paged:
                return await _all_pages(session.execute_async(statement, values))
            bound = statement.bind(values)
            if consistency is not None:
                bound.consistency_level = consistency
            if not paged:
                bound.fetch_size = None
            return await _all_pages(session.execute_async(bound))
        except StoreUnavailable:
            raise
        except _ERRORS as exc:
            raise self._unavailable(exc) from exc

    async def run_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Writes as one unlogged batch of prepared statements: one request, and for statements of one
        partition key one mutation, applied together (no batch log: a batch of several partitions is
        not atomic across them)."""
        await self._bounded(self._run_batch(statements))

    async def _run_batch(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        try:
            session = await self.session()
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for cql, values in statements:
                batch.add(await self._statement(session, cql), values)
            await _all_pages(session.execute_async(batch))
        except StoreUnavailable:
            raise
        except _ERRORS as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        s = self.settings
        return StoreUnavailable(
            f"Cassandra at {s.hosts}:{s.port} (keyspace {s.keyspace}; PARLEY_CASSANDRA_HOSTS, "
            f"PARLEY_CASSANDRA_PORT, PARLEY_KEYSPACE) failed: {type(exc).__name__}: {exc}"
        )

    def close(self) -> None:
        if self._session is not None:
            self._session.cluster.shutdown()
            self._session = None


async def prepare(session: Session, text: str, attempts: int = 3) -> PreparedStatement:
    """``text`` prepared by one node (``prepare_on_all_hosts`` is off), speculatively as reads are: while
    no attempt has answered, another starts every ``SPECULATE_AFTER_S`` (the load balancer's round robin
    sends it to the next node), up to ``attempts``, and the first answer wins (a prepare may run any
    number of times). One after another, three attempts that met a paused node (sockets open, nothing
    answers) cost a request 30 s: bench.chaos --replicas 3 saw a gateway read answer after that."""
    running: set[asyncio.Future[PreparedStatement]] = set()
    started, failure = 0, None
    while True:
        if started < attempts:
            running.add(asyncio.ensure_future(asyncio.to_thread(session.prepare, text)))
            started += 1
        if not running:
            assert failure is not None
            raise failure
        done, running = await asyncio.wait(
            running, timeout=SPECULATE_AFTER_S if started < attempts else None, return_when=asyncio.FIRST_COMPLETED
        )
        for attempt in done:
            if attempt.exception() is None:
                for late in running:  # a thread cannot be stopped: let it finish, its answer unused
                    late.add_done_callback(lambda f: f.exception())
                return attempt.result()
            failure = attempt.exception()
            if not isinstance(failure, OperationTimedOut):
                raise failure


def _all_pages(future: ResponseFuture) -> asyncio.Future[list[Any]]:
    loop = asyncio.get_running_loop()
    out: asyncio.Future[list[Any]] = loop.create_future()
    rows: list[Any] = []

    def settle(result: Any, exc: BaseException | None) -> None:
        if out.done():
            return
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(result)

    def on_rows(page: list[Any] | None) -> None:  # on the driver's thread
        rows.extend(page or ())
        if future.has_more_pages:
            future.start_fetching_next_page()
        else:
            loop.call_soon_threadsafe(settle, rows, None)

    def on_error(exc: BaseException) -> None:
        loop.call_soon_threadsafe(settle, None, exc)

    future.add_callbacks(on_rows, on_error)
    return out
