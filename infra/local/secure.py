"""The local stack's secure mode (``PARLEY_INFRA_SECURE=1``): its keys, passwords, and the client settings that use them.

Generated once under ``PARLEY_DATA_DIR/secure`` (a 0700 directory, every file
0600): a certificate authority of this machine; the services' key and
certificate signed by it (for 127.0.0.1 and localhost); the clients' key and
certificate (both services require one: TLS client authentication on top of
the passwords); and the passwords of the ``parley`` Kafka SCRAM user and
Cassandra role. The CA's own key is dropped once it has signed, so nothing
else can be issued under it. The passwords live as long as the data they guard
(Kafka keeps the SCRAM user from the day its storage was formatted); the
certificates may be deleted to be issued anew.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import socket
import threading
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from infra.local.settings import LocalInfraSettings
from parley.settings import CassandraSettings, KafkaSettings
from parley.topics import replication_factor

#: The Kafka SCRAM user and the Cassandra superuser role every local client logs in as.
USER = "parley"
#: Kafka's mechanism on the local SASL_SSL listener.
MECHANISM = "SCRAM-SHA-512"
#: The certificates' lifetime; `rm PARLEY_DATA_DIR/secure/*.pem` issues new ones at the next start.
VALID_DAYS = 825


@dataclass(frozen=True)
class Material:
    """Where the secure mode's files are (``ensure`` creates them)."""

    root: Path

    @property
    def ca(self) -> Path:
        """The CA's certificate: what clients trust (PARLEY_*_SSL_CA)."""
        return self.root / "ca.pem"

    @property
    def server(self) -> Path:
        """The services' private key and certificate chain, in one PEM file (Kafka's and Cassandra's keystore)."""
        return self.root / "server.pem"

    @property
    def client_cert(self) -> Path:
        """The clients' certificate (and the CA): both services require one of the local CA."""
        return self.root / "client-cert.pem"

    @property
    def client_key(self) -> Path:
        return self.root / "client-key.pem"

    @property
    def kafka_password(self) -> Path:
        return self.root / "kafka.password"

    @property
    def cassandra_password(self) -> Path:
        return self.root / "cassandra.password"


def material(cfg: LocalInfraSettings) -> Material:
    return Material(cfg.data_dir / "secure")


#: Kafka's and Cassandra's preparations run at once (infra.local.stack) and both ensure these files: one
#: generates them, the other finds them (two wrote one .partial file and one rename failed: CI).
_ENSURING = threading.Lock()


def ensure(cfg: LocalInfraSettings) -> Material:
    """The secure mode's files, generated where missing."""
    with _ENSURING:
        return _ensure(cfg)


def _ensure(cfg: LocalInfraSettings) -> Material:
    m = material(cfg)
    m.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not all(p.exists() for p in (m.ca, m.server, m.client_cert, m.client_key)):
        issued = certificates()
        files = {m.ca: issued.ca, m.server: issued.server, m.client_cert: issued.client_cert, m.client_key: issued.client_key}
        for path, text in files.items():
            write_private(path, text)
    for password in (m.kafka_password, m.cassandra_password):
        if not password.exists():
            write_private(password, secrets.token_urlsafe(24) + "\n")  # [A-Za-z0-9_-]: safe in JAAS and CQL alike
    return m


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only, from its first byte on (then renamed into place)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    partial.replace(path)


@dataclass(frozen=True)
class Issued:
    """What ``certificates`` issues, as PEM text (EC P-256 keys; unencrypted PKCS#8, which Kafka's and
    Cassandra's PEM key stores read without a password)."""

    ca: str  # the CA's certificate
    server: str  # the services' key, certificate (127.0.0.1, localhost) and the CA
    client_cert: str  # the clients' certificate and the CA
    client_key: str


def certificates() -> Issued:
    """A new CA, and the server's and the clients' certificates under it; the CA's key is not kept."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Parley local CA ({socket.gethostname()})")])
    ca_cert = (
        _valid_now(x509.CertificateBuilder())
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = _pem(ca_cert)
    # clientAuth for the server too: the broker presents it to its own listeners, which require one.
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_key, server_cert = _leaf(ca_key, ca_name, "localhost", names, [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    client_key, client_cert = _leaf(ca_key, ca_name, USER, [x509.DNSName(USER)], [ExtendedKeyUsageOID.CLIENT_AUTH])
    return Issued(
        ca=ca_pem,
        server=_pem(server_key) + _pem(server_cert) + ca_pem,
        client_cert=_pem(client_cert) + ca_pem,
        client_key=_pem(client_key),
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    name: str,
    alt_names: list[x509.GeneralName],
    usages: list[x509.ObjectIdentifier],
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _valid_now(x509.CertificateBuilder())
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _valid_now(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _pem(item: x509.Certificate | ec.EllipticCurvePrivateKey) -> str:
    if isinstance(item, x509.Certificate):
        return item.public_bytes(serialization.Encoding.PEM).decode()
    return item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not cert_sign,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def client_settings(cfg: LocalInfraSettings) -> tuple[KafkaSettings, CassandraSettings]:
    """How a client reaches this local stack: its ports, and in secure mode the user, password files and CA."""
    kafka = KafkaSettings(bootstrap=",".join(f"{h}:{cfg.kafka_port}" for h in cfg.hosts))
    cassandra = CassandraSettings(hosts=",".join(cfg.hosts), port=cfg.cassandra_port)
    if cfg.replicated:  # a replicated cluster: topics and keyspaces on replicas too (no secure mode there)
        rf = replication_factor(cfg.replicas)
        kafka = replace(kafka, replication=rf)
        cassandra = replace(
            cassandra, replication=f"{{'class': 'NetworkTopologyStrategy', '{cassandra.local_dc}': {rf}}}"
        )
    if not cfg.secure:
        return kafka, cassandra
    m = material(cfg)
    kafka = KafkaSettings(
        bootstrap=kafka.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism=MECHANISM,
        sasl_username=USER,
        sasl_password_file=str(m.kafka_password),
        ssl_ca=str(m.ca),
        ssl_cert=str(m.client_cert),
        ssl_key=str(m.client_key),
    )
    cassandra = CassandraSettings(
        hosts=cassandra.hosts,
        port=cassandra.port,
        username=USER,
        password_file=str(m.cassandra_password),
        ssl=True,
        ssl_ca=str(m.ca),
        ssl_cert=str(m.client_cert),
        ssl_key=str(m.client_key),
    )
    return kafka, cassandra


def client_env(cfg: LocalInfraSettings) -> dict[str, str]:
    """``client_settings`` as the PARLEY_* variables a process reads (no secret in them: passwords are files)."""
    kafka, cassandra = client_settings(cfg)
    return {**_variables(kafka), **_variables(cassandra)}


def _variables(settings: Any) -> dict[str, str]:
    """The settings that differ from their defaults, as ``from_env`` reads them back."""
    out = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if value != f.default:
            out[f.metadata["env"]] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return out
