"""faust's clients get the same SASL/SCRAM and TLS as every other client (streams/app.py over
parley/transport_security.py), in the form faust's aiokafka driver hands to each consumer and producer."""

from __future__ import annotations

import ssl

from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from parley.settings import KafkaSettings
from streams.app import broker_credentials, make_app

SCRAM = {"sasl_username": "parley", "sasl_password": "hunter2"}


def test_sasl_ssl_becomes_scram_with_a_verifying_context() -> None:
    settings = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", **SCRAM)
    auth = credentials_to_aiokafka_auth(broker_credentials(settings))
    context = auth.pop("ssl_context")
    assert auth == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "parley",
        "sasl_plain_password": "hunter2",
    }
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert "hunter2" not in repr(broker_credentials(settings))


def test_each_protocol_reaches_aiokafka_as_itself() -> None:
    protocols = {
        "PLAINTEXT": KafkaSettings(),
        "SSL": KafkaSettings(security_protocol="SSL"),
        "SASL_PLAINTEXT": KafkaSettings(security_protocol="SASL_PLAINTEXT", **SCRAM),
    }
    for protocol, settings in protocols.items():
        assert credentials_to_aiokafka_auth(broker_credentials(settings))["security_protocol"] == protocol


def test_every_app_carries_the_credentials() -> None:
    app = make_app("probe", KafkaSettings(security_protocol="SASL_SSL", **SCRAM))
    assert app.conf.broker_credentials.username == "parley"


def test_every_app_refreshes_its_metadata_within_fifteen_seconds() -> None:
    """aiokafka's fetcher retries a ListOffsets on a stale leader until the next metadata refresh."""
    app = make_app("probe", KafkaSettings())
    assert app.conf.consumer_metadata_max_age_ms == 15_000
    assert app.conf.producer_metadata_max_age_ms == 15_000
