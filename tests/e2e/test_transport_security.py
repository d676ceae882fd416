"""Transport security on the real stack: a Kafka that speaks SASL_SSL (SCRAM-SHA-512) only and a Cassandra that
wants a password over TLS, both also wanting a client certificate of the local CA, refuse clients in the
clear, without the password, the certificate or trust in the CA; and a whole chat turn runs through them with
nothing but the PARLEY_* settings: every service of the topology joins its group, and the reply is streamed,
stored and read back.

The module starts its OWN Kafka and Cassandra in infra/local's secure mode (free ports, a data dir under
tmp; the shared ones stay plain for everyone else's tests), then a whole Parley on them (isolated.start).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from infra.local import secure
from infra.local import stack as local_stack
from infra.local.cassandra import DEFAULT_ROLE
from infra.local.settings import LocalInfraSettings
from parley.cassandra import connect
from parley.consumer import EventConsumer
from parley.errors import StoreUnavailable
from parley.kafka import EventProducer
from parley.ops import Ops
from parley.settings import CassandraSettings, KafkaSettings, from_env
from parley.transport_security import kafka_config
from schemas.events import TokenChunk
from tests.e2e.conftest import E2E_ENV
from tools import isolated
from tools.supervisor import free_ports
from tools.client import ParleyClient
from tools.topology import SERVICES

#: What a refused Kafka client is given to find out (librdkafka retries until then).
REFUSAL_S = 4.0


@dataclass
class SecureStack:
    infra: LocalInfraSettings
    kafka: KafkaSettings  # the stack's: the secure infra's client settings, under its topic prefix
    inner: isolated.IsolatedStack
    log_dir: Path


@pytest.fixture(scope="module")
def secure_infra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalInfraSettings]:
    """A secure Kafka and Cassandra of this module only; stopped and deleted at its end."""
    kafka_port, controller_port, cassandra_port, storage_port = free_ports(4)
    cfg = replace(
        from_env(LocalInfraSettings),
        data_dir=tmp_path_factory.mktemp("secure-infra"),
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        cassandra_port=cassandra_port,
        cassandra_storage_port=storage_port,
        cassandra_heap="768m",
        secure=True,
    )
    try:
        began = time.monotonic()
        local_stack.up(cfg, echo=lambda s: None)
        print(f"\nsecure Kafka + Cassandra healthy after {time.monotonic() - began:.1f}s")
        yield cfg
    finally:
        local_stack.down(cfg, echo=lambda s: None)
        shutil.rmtree(cfg.data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def secure_stack(secure_infra: LocalInfraSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    env = secure.client_env(secure_infra)
    began = time.monotonic()
    kafka, cassandra = isolated.prepare(from_env(KafkaSettings, env), from_env(CassandraSettings, env), "secure")
    log_dir = tmp_path_factory.mktemp("secure-stack-logs")
    # The run's shared keys keyspace (tests/conftest.py) lives on the shared Cassandra: here the data keys
    # stay in the stack's own keyspace, which isolated.prepare migrated.
    inner = isolated.start(kafka, cassandra, log_dir, {**env, **E2E_ENV, "PARLEY_KEYS_KEYSPACE": ""})
    print(f"\nParley on it (topics, migrations, every service) ready after {time.monotonic() - began:.1f}s")
    try:
        yield SecureStack(secure_infra, kafka, inner, log_dir)
    finally:
        inner.stop()


# ------------------------------------------------------------------ refused


def _kafka_refusal(config: dict[str, object]) -> set[int]:
    """The error codes librdkafka reported for a metadata request that must fail (AssertionError if it did not)."""
    errors: list[KafkaError] = []
    quiet = logging.getLogger(f"refused-{uuid.uuid4().hex[:6]}")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    client = AdminClient({**config, "error_cb": errors.append, "logger": quiet})
    try:
        client.list_topics(timeout=REFUSAL_S)
    except KafkaException:
        client.poll(0.5)  # serves the error callbacks
        return {e.code() for e in errors}
    raise AssertionError(f"Kafka answered a client it should refuse: {sorted(k for k in config if 'password' not in k)}")


def test_kafka_refuses_clients_in_the_clear_or_without_the_password_the_ca_or_a_certificate(secure_infra: LocalInfraSettings) -> None:
    kafka, _ = secure.client_settings(secure_infra)
    listener = kafka.bootstrap
    controller = f"127.0.0.1:{secure_infra.kafka_controller_port}"
    attempts = {
        "plaintext": kafka_config(KafkaSettings(bootstrap=listener)),
        "wrong password": kafka_config(replace(kafka, sasl_password="not-the-password", sasl_password_file="")),
        "no trust in the local CA": kafka_config(replace(kafka, ssl_ca="")),
        "the password but no client certificate": kafka_config(replace(kafka, ssl_cert="", ssl_key="")),
        "controller in the clear": kafka_config(KafkaSettings(bootstrap=controller)),
        "controller without a client certificate": kafka_config(
            KafkaSettings(bootstrap=controller, security_protocol="SSL", ssl_ca=kafka.ssl_ca)
        ),
    }
    with ThreadPoolExecutor(len(attempts)) as pool:  # each waits out REFUSAL_S: together, not in turn
        refused = dict(zip(attempts, pool.map(_kafka_refusal, attempts.values())))
    assert KafkaError._AUTHENTICATION in refused["wrong password"]
    assert KafkaError._SSL in refused["no trust in the local CA"]
    assert KafkaError._TRANSPORT in refused["the password but no client certificate"]  # "alert bad certificate"
    # The settings themselves get through, at the same address.
    assert AdminClient(kafka_config(kafka)).list_topics(timeout=30).brokers


def test_cassandra_refuses_clients_in_the_clear_without_a_login_a_certificate_or_as_the_default_superuser(
    secure_infra: LocalInfraSettings,
) -> None:
    _, cassandra = secure.client_settings(secure_infra)
    attempts = {
        "in the clear, with the password": (
            replace(cassandra, ssl=False, ssl_ca="", ssl_cert="", ssl_key=""),
            "PARLEY_CASSANDRA_SSL=1",
        ),
        "TLS, no login": (replace(cassandra, username="", password_file=""), "requires a login"),
        "TLS, the default superuser": (
            replace(cassandra, username=DEFAULT_ROLE, password=DEFAULT_ROLE, password_file=""),
            "refused the login",
        ),
        "TLS, a wrong password": (replace(cassandra, password="not-the-password", password_file=""), "refused the login"),
        "no trust in the local CA": (replace(cassandra, ssl_ca=""), "TLS handshake failed"),
        "the password but no client certificate": (replace(cassandra, ssl_cert="", ssl_key=""), "TLS handshake failed"),
        # The node's certificate names localhost and 127.0.0.1: checked against another name, it is refused.
        "a server name the certificate does not hold": (replace(cassandra, ssl_server_name="cassandra.example"), "TLS handshake failed"),
    }
    for what, (settings, says) in attempts.items():
        with pytest.raises(StoreUnavailable, match=says):
            connect(settings).cluster.shutdown()
            pytest.fail(f"Cassandra took a client {what}")
    for accepted in (cassandra, replace(cassandra, ssl_server_name="localhost")):  # the address, or a name it holds
        session = connect(accepted)
        try:
            assert session.execute("SELECT release_version FROM system.local").one()
        finally:
            session.cluster.shutdown()


# ------------------------------------------------------------------ real traffic with the settings


def test_events_go_through_parleys_producer_and_consumer_over_sasl_ssl(secure_stack: SecureStack) -> None:
    kafka = secure_stack.kafka
    producer = EventProducer(kafka)
    consumer = EventConsumer(kafka, f"{kafka.topic_prefix}secure-probe", ["chat.tokens"], producer)
    cid = str(uuid.uuid4())
    sent = TokenChunk(conversation_id=cid, user_id="u", request_id=f"r-{cid}", seq=0, text="over TLS ")
    try:
        producer.produce_sync(sent, timeout=30)
        deadline = time.monotonic() + 30
        got = []
        while not got and time.monotonic() < deadline:
            got = [d.event for d in consumer.poll(timeout=0.5) if getattr(d.event, "conversation_id", None) == cid]
        assert got == [sent]
    finally:
        consumer.close()
        producer.close()


async def test_a_chat_turn_runs_through_every_service_on_the_secure_infra(secure_stack: SecureStack) -> None:
    inner, kafka = secure_stack.inner, secure_stack.kafka
    _, key = inner.create_user("secure-user", "plus")
    client = ParleyClient(inner.url, key)
    try:
        cid = await client.create_conversation("over TLS")
        reply = await client.send(cid, "Hello, is this line secure?")
        assert reply.final is not None and reply.final.event == "done" and reply.text
        deadline = time.monotonic() + 60
        while True:  # the materializer stored it in Cassandra, read back through the gateway
            stored = {m["role"]: m for m in (await client.conversation(cid))["messages"]}
            if stored.get("assistant", {}).get("status") not in (None, "streaming") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert stored["user"]["content"] == "Hello, is this line secure?"
        assert stored["assistant"]["content"] == reply.text
    finally:
        await client.close()

    # Every processor and worker of the topology is a member of its group, asked over SASL_SSL.
    wanted = {kafka.topic_prefix + s.group for s in SERVICES if s.group}
    ops = Ops(kafka)
    deadline = time.monotonic() + 60
    while True:
        joined = {g.group for g in await asyncio.to_thread(ops.groups, sorted(wanted)) if g.members}
        if joined == wanted or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert joined == wanted

    # No password in any log: the stack's, Kafka's or Cassandra's.
    material = secure.material(secure_stack.infra)
    secrets = [material.kafka_password.read_text().strip(), material.cassandra_password.read_text().strip()]
    service_logs = [secure_stack.infra.data_dir / name / "logs" for name in ("kafka", "cassandra")]
    logs = [p for d in (secure_stack.log_dir, *service_logs) for p in d.rglob("*") if p.is_file()]
    leaked = [str(p) for p in logs if any(s in p.read_text(errors="replace") for s in secrets)]
    assert logs and leaked == []
