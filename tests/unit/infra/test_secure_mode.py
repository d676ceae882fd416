"""infra/local's secure mode without starting a JVM: the generated material, the configs that use it, and
the client settings that reach it (the e2e test tests/e2e/test_transport_security.py runs it for real)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID

from infra.local import cassandra, kafka, secure
from infra.local.jvm import InfraError
from infra.local.settings import LocalInfraSettings
from parley.settings import CassandraSettings, KafkaSettings, from_env


def _cfg(tmp_path: Path, secure_mode: bool = True) -> LocalInfraSettings:
    return LocalInfraSettings(data_dir=tmp_path / "data", kafka_port=19092, cassandra_port=19042, secure=secure_mode)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_material_is_private_and_made_once(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    m = secure.ensure(cfg)
    files = [m.ca, m.server, m.client_cert, m.client_key, m.kafka_password, m.cassandra_password]
    assert _mode(m.root) == 0o700 and all(_mode(f) == 0o600 for f in files)
    before = {f: f.read_text() for f in files}
    secure.ensure(cfg)
    assert {f: f.read_text() for f in files} == before
    # Certificates may be issued anew; the passwords stay (Kafka's storage keeps the SCRAM user).
    m.ca.unlink()
    secure.ensure(cfg)
    assert m.ca.read_text() != before[m.ca] and m.server.read_text() != before[m.server]
    assert m.kafka_password.read_text() == before[m.kafka_password]
    assert len(m.kafka_password.read_text().strip()) >= 32 and m.kafka_password.read_text() != m.cassandra_password.read_text()


def test_the_certificates_chain_to_the_ca_with_unencrypted_keys_for_what_each_side_does() -> None:
    issued = secure.certificates()
    ca = x509.load_pem_x509_certificate(issued.ca.encode())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    server, server_chain_ca = x509.load_pem_x509_certificates(issued.server.encode())
    client, client_chain_ca = x509.load_pem_x509_certificates(issued.client_cert.encode())
    for cert, chain_ca in ((server, server_chain_ca), (client, client_chain_ca)):
        cert.verify_directly_issued_by(ca)
        assert chain_ca == ca
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usages = {c: set(c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) for c in (server, client)}
    assert usages[server] == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert usages[client] == {ExtendedKeyUsageOID.CLIENT_AUTH}
    # Kafka's and Cassandra's PEM key stores, and the clients: keys without a password.
    assert load_pem_private_key(issued.server.encode(), password=None).public_key() == server.public_key()
    assert load_pem_private_key(issued.client_key.encode(), password=None).public_key() == client.public_key()


def test_client_env_names_files_not_secrets_and_reads_back_as_the_settings(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    m = secure.ensure(cfg)
    env = secure.client_env(cfg)
    kafka, cass = secure.client_settings(cfg)
    assert from_env(KafkaSettings, env) == kafka and from_env(CassandraSettings, env) == cass
    assert kafka.security_protocol == "SASL_SSL" and kafka.sasl_secret == m.kafka_password.read_text().strip()
    assert cass.ssl and cass.username == secure.USER and cass.secret == m.cassandra_password.read_text().strip()
    assert not any(m.kafka_password.read_text().strip() in v or m.cassandra_password.read_text().strip() in v for v in env.values())
    # Plain mode: only the ports.
    assert secure.client_env(_cfg(tmp_path, secure_mode=False)) == {
        "PARLEY_KAFKA_BOOTSTRAP": "127.0.0.1:19092",
        "PARLEY_CASSANDRA_PORT": "19042",
    }


def test_secure_kafka_listens_on_sasl_ssl_only_and_wants_client_certificates(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    m = secure.ensure(cfg)
    props = dict(
        line.split("=", 1) for line in kafka.server_properties(cfg, tmp_path).splitlines() if "=" in line and not line.startswith("#")
    )
    assert props["listeners"] == f"SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:{cfg.kafka_controller_port}"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["ssl.client.auth"] == props["listener.name.sasl_ssl.ssl.client.auth"] == "required"
    assert (props["ssl.keystore.type"], props["ssl.keystore.location"]) == ("PEM", str(m.server))
    assert m.kafka_password.read_text().strip() in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]


def test_plain_mode_configs_have_no_security_in_them(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, secure_mode=False)
    props = kafka.server_properties(cfg, tmp_path)
    assert "listeners=PLAINTEXT://127.0.0.1:19092," in props and "SSL" not in props and "sasl" not in props
    yaml = cassandra.cassandra_yaml(cfg)
    assert "authenticator" not in yaml and "client_encryption_options" not in yaml
    assert not (cfg.data_dir / "secure").exists()


def test_secure_cassandra_wants_a_password_and_tls_from_pem_files(tmp_path: Path) -> None:
    import yaml

    cfg = _cfg(tmp_path)
    m = secure.ensure(cfg)
    conf = yaml.safe_load(cassandra.cassandra_yaml(cfg))
    assert conf["authenticator"] == "PasswordAuthenticator" and conf["authorizer"] == "CassandraAuthorizer"
    tls = conf["client_encryption_options"]
    assert tls["enabled"] and not tls["optional"] and tls["keystore"] == str(m.server)
    assert tls["require_client_auth"] and tls["truststore"] == str(m.ca)
    assert tls["ssl_context_factory"]["class_name"].endswith("PEMBasedSslContextFactory")


def test_a_storage_formatted_in_plain_mode_is_refused_in_secure_mode(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    data = cfg.data_dir / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("formatted without --add-scram\n")
    with pytest.raises(InfraError, match="PARLEY_INFRA_SECURE"):
        kafka.prepare(cfg, tmp_path / "no-jars-needed")
    assert _mode(cfg.data_dir / "kafka" / "server.properties") == 0o600  # it holds the broker's password
