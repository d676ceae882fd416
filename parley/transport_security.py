"""How every client reaches Kafka and Cassandra: addresses, SASL/SCRAM, TLS and passwords, in one place.

Each client library gets its part from one function here, built from the same
settings (``KafkaSettings``, ``CassandraSettings``), so no client can be the one
left talking in the clear:

* ``kafka_config``: every confluent-kafka client (producers, consumers, admin
  clients) starts its librdkafka configuration from it;
* ``kafka_tls``: the TLS context of faust's aiokafka clients (``streams.app``
  wraps it in faust's credentials with the SCRAM user);
* ``cassandra_options``: the login and TLS arguments of every ``Cluster``.

TLS always verifies the server: its certificate must chain to the configured CA
(or the system's) and name the host the client dialled.
"""

from __future__ import annotations

import ssl
from typing import Any

from cassandra.auth import PlainTextAuthProvider

from parley.settings import CassandraSettings, KafkaSettings


def kafka_config(settings: KafkaSettings) -> dict[str, Any]:
    """librdkafka's connection settings: the brokers and how to reach them (the rest is each client's own)."""
    config: dict[str, Any] = {"bootstrap.servers": settings.bootstrap, "security.protocol": settings.security_protocol}
    if settings.uses_sasl:
        config["sasl.mechanism"] = settings.sasl_mechanism
        config["sasl.username"] = settings.sasl_username
        config["sasl.password"] = settings.sasl_secret
    if settings.uses_tls:
        # "probe": the system's CA bundle, wherever this distribution keeps it (the wheel's OpenSSL
        # does not know the local default paths). Hostname verification is librdkafka's default.
        config["ssl.ca.location"] = settings.ssl_ca or "probe"
        if settings.ssl_cert:
            config["ssl.certificate.location"] = settings.ssl_cert
            config["ssl.key.location"] = settings.ssl_key
    return config


def kafka_tls(settings: KafkaSettings) -> ssl.SSLContext | None:
    """The TLS context of Python's Kafka clients (aiokafka) with SSL or SASL_SSL; None without TLS."""
    return tls_context(settings.ssl_ca, settings.ssl_cert, settings.ssl_key) if settings.uses_tls else None


def cassandra_options(settings: CassandraSettings) -> dict[str, Any]:
    """``Cluster`` keyword arguments for the login (``auth_provider``) and TLS (``ssl_context``), as configured."""
    options: dict[str, Any] = {}
    if settings.username:
        options["auth_provider"] = PlainTextAuthProvider(settings.username, settings.secret)
    if settings.ssl:
        # The driver checks each node's certificate against the address it dialled when the context asks
        # for hostname checks (it does: PYTHON-1186), and it dials the nodes it discovers by IP. Where the
        # certificates name a DNS name instead, every node is checked against that one name.
        options["ssl_context"] = tls_context(settings.ssl_ca, settings.ssl_cert, settings.ssl_key)
        if settings.ssl_server_name:
            options["ssl_options"] = {"server_hostname": settings.ssl_server_name}
    return options


def tls_context(ca: str, cert: str, key: str) -> ssl.SSLContext:
    """A client context that verifies the server (``ca``: a PEM bundle; empty: the system's CAs) and, with
    ``cert`` and ``key``, presents a client certificate. TLS 1.2 at least (the ssl module's floor)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca or None)
    if cert:
        context.load_cert_chain(cert, key)
    return context
