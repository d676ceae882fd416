"""The transport security settings (parley/settings.py) and the one place that turns them into every
client's configuration (parley/transport_security.py). No broker or node here: what each client library
is handed, and a real TLS handshake against the local CA's certificate (infra/local/secure.py)."""

from __future__ import annotations

from dataclasses import replace

import socket
import ssl
import threading
from dataclasses import fields
from pathlib import Path

import pytest
from cassandra.auth import PlainTextAuthProvider

from infra.local import secure
from parley.errors import ConfigError
from parley.settings import CassandraSettings, KafkaSettings, from_env
from parley.transport_security import cassandra_options, kafka_config, kafka_tls, tls_context


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    """The local CA's certificates and keys, as files (generated: no fixture keys in git)."""
    issued = secure.certificates()
    files = {
        "ca.pem": issued.ca,
        "server.pem": issued.server,
        "client-cert.pem": issued.client_cert,
        "client-key.pem": issued.client_key,
        "password": "s3cret-from-a-file\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return {name: str(tmp_path / name) for name in files}


# ------------------------------------------------------------------ settings: bad combinations fail at start


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"PARLEY_KAFKA_SECURITY_PROTOCOL": "TLS"}, "PARLEY_KAFKA_SECURITY_PROTOCOL"),
        ({"PARLEY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "PARLEY_KAFKA_SASL_USERNAME"),
        (
            {"PARLEY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "PARLEY_KAFKA_SASL_USERNAME": "u"},
            "PARLEY_KAFKA_SASL_PASSWORD or PARLEY_KAFKA_SASL_PASSWORD_FILE",
        ),
        (
            {"PARLEY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "PARLEY_KAFKA_SASL_USERNAME": "u",
             "PARLEY_KAFKA_SASL_PASSWORD": "p", "PARLEY_KAFKA_SASL_MECHANISM": "PLAIN"},
            "PARLEY_KAFKA_SASL_MECHANISM",
        ),  # fmt: skip
        ({"PARLEY_KAFKA_SASL_USERNAME": "u"}, "PARLEY_KAFKA_SASL_USERNAME is set, but PARLEY_KAFKA_SECURITY_PROTOCOL"),
        ({"PARLEY_KAFKA_SSL_CA": "/etc/hostname"}, "PARLEY_KAFKA_SSL_CA is set, but PARLEY_KAFKA_SECURITY_PROTOCOL"),
        ({"PARLEY_KAFKA_SECURITY_PROTOCOL": "SSL", "PARLEY_KAFKA_SSL_CA": "/nonexistent.pem"}, "PARLEY_KAFKA_SSL_CA"),
        ({"PARLEY_KAFKA_SECURITY_PROTOCOL": "SSL", "PARLEY_KAFKA_SSL_CERT": "/etc/hostname"}, "PARLEY_KAFKA_SSL_KEY"),
        (
            {"PARLEY_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "PARLEY_KAFKA_SASL_USERNAME": "u",
             "PARLEY_KAFKA_SASL_PASSWORD": "p", "PARLEY_KAFKA_SASL_PASSWORD_FILE": "/etc/hostname"},
            "keep one",
        ),  # fmt: skip
        ({"PARLEY_CASSANDRA_USERNAME": "u"}, "PARLEY_CASSANDRA_PASSWORD or PARLEY_CASSANDRA_PASSWORD_FILE"),
        ({"PARLEY_CASSANDRA_PASSWORD": "p"}, "PARLEY_CASSANDRA_PASSWORD is set, but PARLEY_CASSANDRA_USERNAME"),
        ({"PARLEY_CASSANDRA_SSL_CA": "/etc/hostname"}, "PARLEY_CASSANDRA_SSL_CA is set, but PARLEY_CASSANDRA_SSL is off"),
        (
            {"PARLEY_CASSANDRA_USERNAME": "u", "PARLEY_CASSANDRA_PASSWORD_FILE": "/nonexistent"},
            "PARLEY_CASSANDRA_PASSWORD_FILE",
        ),
        ({"PARLEY_CASSANDRA_SSL": "1", "PARLEY_CASSANDRA_SSL_KEY": "/etc/hostname"}, "PARLEY_CASSANDRA_SSL_CERT"),
    ],
)
def test_a_bad_combination_fails_at_start_naming_the_setting(env: dict[str, str], names: str) -> None:
    cls = KafkaSettings if any(k.startswith("PARLEY_KAFKA") for k in env) else CassandraSettings
    with pytest.raises(ConfigError, match=names):
        from_env(cls, env)


def test_the_defaults_stay_plaintext_without_a_login() -> None:
    kafka, cassandra = from_env(KafkaSettings, {}), from_env(CassandraSettings, {})
    assert kafka_config(kafka) == {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "PLAINTEXT"}
    assert kafka_tls(kafka) is None
    assert cassandra_options(cassandra) == {}


def test_passwords_are_marked_secret_and_kept_out_of_the_repr() -> None:
    secret = {f.metadata["env"] for cls in (KafkaSettings, CassandraSettings) for f in fields(cls) if f.metadata["secret"]}
    assert secret == {"PARLEY_KAFKA_SASL_PASSWORD", "PARLEY_CASSANDRA_PASSWORD"}
    kafka = KafkaSettings(security_protocol="SASL_SSL", sasl_username="u", sasl_password="hunter2-kafka")
    cassandra = CassandraSettings(username="u", password="hunter2-cassandra")
    assert "hunter2" not in repr(kafka) + repr(cassandra) + str(kafka) + str(cassandra)


# ------------------------------------------------------------------ what each client library is handed


def test_kafka_clients_get_scram_over_tls(pem: dict[str, str]) -> None:
    kafka = from_env(KafkaSettings, {
        "PARLEY_KAFKA_BOOTSTRAP": "b1:9094,b2:9094",
        "PARLEY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "PARLEY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "PARLEY_KAFKA_SASL_USERNAME": "parley",
        "PARLEY_KAFKA_SASL_PASSWORD_FILE": pem["password"],
        "PARLEY_KAFKA_SSL_CA": pem["ca.pem"],
        "PARLEY_KAFKA_SSL_CERT": pem["client-cert.pem"],
        "PARLEY_KAFKA_SSL_KEY": pem["client-key.pem"],
    })  # fmt: skip
    assert kafka_config(kafka) == {
        "bootstrap.servers": "b1:9094,b2:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "parley",
        "sasl.password": "s3cret-from-a-file",  # read from the file, newline dropped
        "ssl.ca.location": pem["ca.pem"],
        "ssl.certificate.location": pem["client-cert.pem"],
        "ssl.key.location": pem["client-key.pem"],
    }
    context = kafka_tls(kafka)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_tls_without_a_ca_trusts_the_systems_cas() -> None:
    kafka = KafkaSettings(security_protocol="SSL")
    assert kafka_config(kafka)["ssl.ca.location"] == "probe"
    assert "sasl.username" not in kafka_config(kafka)
    assert kafka_tls(kafka) is not None
    assert kafka_tls(KafkaSettings(security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password="p")) is None


def test_cassandra_sessions_get_a_login_and_a_verifying_tls_context(pem: dict[str, str]) -> None:
    options = cassandra_options(CassandraSettings(username="parley", password_file=pem["password"], ssl=True, ssl_ca=pem["ca.pem"]))
    auth = options["auth_provider"]
    assert isinstance(auth, PlainTextAuthProvider)
    assert (auth.username, auth.password) == ("parley", "s3cret-from-a-file")
    context = options["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_a_server_name_checks_every_node_against_that_name_instead_of_its_address(pem: dict[str, str]) -> None:
    settings = CassandraSettings(ssl=True, ssl_ca=pem["ca.pem"])
    assert "ssl_options" not in cassandra_options(settings)  # the driver checks the address it dialled
    named = cassandra_options(replace(settings, ssl_server_name="cassandra.parley.svc"))
    assert named["ssl_options"] == {"server_hostname": "cassandra.parley.svc"} and named["ssl_context"].check_hostname


def test_the_local_certificates_pass_a_mutual_handshake_on_127_0_0_1(pem: dict[str, str]) -> None:
    """What the services and their clients check: each side's chain to the CA, the address in the server's
    certificate, and (the services require it) a client certificate."""
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(pem["server.pem"])
    server_side.load_verify_locations(pem["ca.pem"])
    server_side.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    clients: list[str] = []

    def serve() -> None:
        for _ in range(2):  # the trusting client, then the one that refuses the server's certificate
            conn, _ = listener.accept()
            try:
                with server_side.wrap_socket(conn, server_side=True) as tls:
                    clients.append(dict(x[0] for x in tls.getpeercert()["subject"])["commonName"])
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = tls_context(pem["ca.pem"], pem["client-cert.pem"], pem["client-key.pem"])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.recv(2) == b"ok"
        assert clients == [secure.USER]
        with pytest.raises(ssl.SSLCertVerificationError):  # the system's CAs do not know the local one
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                tls_context("", "", "").wrap_socket(raw, server_hostname="127.0.0.1")
    finally:
        listener.close()
        thread.join(timeout=5)
