"""Presidio over a blank spaCy pipeline (patterns, no named entities): loaded once for the module, with the network shut."""

import socket

import pytest

from moderation.pii import PiiDetector


@pytest.fixture(scope="module")
def no_network():
    """Connections refused and counted (tldextract would swallow the error and fall back to its snapshot)."""
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network is off in this test: PiiDetector must not download anything")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket, "create_connection", refuse)
        yield attempts


@pytest.fixture(scope="module")
def pii(no_network) -> PiiDetector:
    detector = PiiDetector()
    detector.find("warm up")  # loads spaCy and the recognizers (and tldextract's suffix list) under no_network
    return detector


def test_finds_email_and_phone_once_each_and_no_names_without_a_trained_pipeline(pii):
    text = "I'm Alice Smith, write to alice.smith@example.com or call +44 20 7946 0958."
    kinds = [(e.kind, text[e.start : e.end]) for e in pii.find(text)]
    assert kinds == [("EMAIL_ADDRESS", "alice.smith@example.com"), ("PHONE_NUMBER", "+44 20 7946 0958")]


def test_finds_card_numbers_by_checksum(pii):
    assert [e.kind for e in pii.find("card 4111 1111 1111 1111")] == ["CREDIT_CARD"]
    assert [e.kind for e in pii.find("card 4111 1111 1111 1112")] == []


def test_redact_replaces_entities_with_their_type(pii):
    text = "Mail bob@example.org, card 4111-1111-1111-1111, server 10.2.3.4."
    assert pii.redact(text) == "Mail <EMAIL_ADDRESS>, card <CREDIT_CARD>, server <IP_ADDRESS>."


def test_ordinary_text_has_no_personal_data(pii):
    text = "The meeting moved to 3pm on Tuesday; bring the Q3 roadmap."
    assert pii.find(text) == []
    assert pii.redact(text) == text


def test_email_check_reads_the_bundled_suffix_list(pii, no_network):
    import tldextract.tldextract

    assert [e.kind for e in pii.find("x@mail.co.uk")] == ["EMAIL_ADDRESS"]
    assert tldextract.tldextract.TLD_EXTRACTOR.suffix_list_urls == ()
    assert no_network == []  # not one connection tried, loading included
