"""The fold's decoder: a record's body as the dict codec.decode builds its event from, the same errors,
and heads that read only the leading fields."""

from __future__ import annotations

import dataclasses
import random

import pytest

from schemas import codec
from schemas import events as ev
from schemas.records import to_record
from tools.analysts import records, replay, sample, turns
from tools.analysts.logread import Raw


def _log() -> list[bytes]:
    return [codec.encode(s.event) for s in sample.session(40, 5, seed=3)]


def test_every_record_reads_into_the_record_of_its_event() -> None:
    decode = records.Decoder(turns.NEEDED)
    for value in _log():
        event = codec.decode(value)
        got = decode(value)
        if type(event).__name__ not in turns.NEEDED:
            assert got is None
        else:
            assert got == (type(event).__name__, to_record(event))


def test_a_head_holds_its_fields_and_the_whole_record_reads_later() -> None:
    decode = records.Decoder(turns.NEEDED, heads=replay.HEADS)
    seen = 0
    for value in _log():
        event = codec.decode(value)
        if not isinstance(event, ev.InferenceRequested):
            continue
        name, head = decode(value)  # type: ignore[misc]
        assert isinstance(head, records.Head) and name == "InferenceRequested"
        assert dict(head) == {k: getattr(event, k) for k in replay.HEADS["InferenceRequested"]}
        assert decode.whole(head) == to_record(event)
        seen += 1
    assert seen


def test_the_events_rules_and_broken_bodies_raise_as_codec_decode_does() -> None:
    bad_role = codec.encode(ev.MessagePosted(conversation_id="c", user_id="u", message_id="m", client_message_id="x", content="hi"))
    # Rewrite the role in place: the encoder would refuse an invalid event.
    bad_role = bad_role.replace(b"\x08user", b"\x08oops")
    decode = records.Decoder(turns.NEEDED, heads=replay.HEADS)
    for value in (bad_role, _log()[2][:-3], _log()[2] + b"\x00", b"\x00\x00" + _log()[2][2:]):
        with pytest.raises(codec.CodecError) as expected:
            codec.decode(value)
        with pytest.raises(type(expected.value)):
            decode(value)
    assert decode(codec.encode(ev.ConversationCreated(conversation_id="c", user_id="u"))) is None
    assert decode(b"\xc3\x01" + b"\xff" * 8 + b"body") is None  # unknown schema: skipped like other types
    assert decode(None) is None


def test_an_event_type_with_a_rule_the_decoder_does_not_repeat_goes_the_long_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(records.RULES, ev.MessagePosted)
    value = _log()[1]
    assert codec.decode(value).__class__ is ev.MessagePosted
    assert records.Decoder(turns.NEEDED)(value) == ("MessagePosted", to_record(codec.decode(value)))


def test_every_needed_type_with_a_post_init_rule_has_it_repeated() -> None:
    with_rules = {t for t in ev.EVENT_TYPES.values() if t.__name__ in turns.NEEDED and "__post_init__" in t.__dict__}
    assert with_rules == set(records.RULES)


def _raws(values: list[bytes]) -> list[Raw]:
    return [Raw("chat.events", 0, i, 0, None, v) for i, v in enumerate(values)]


def test_a_replay_fold_equals_the_event_fold_shuffled_with_repeats_and_a_corrupt_unrouted_prompt() -> None:
    sent = sample.session(60, 5, seed=11)
    events = [s.event for s in sent]
    expected = turns.fold(events)
    values = [codec.encode(e) for e in events]
    values += random.Random(1).sample(values, 50)  # redelivered
    random.Random(2).shuffle(values)
    result = replay.Result([], replay.timeline.TimelineStats())
    assert replay._fold(_raws(values), replay.Query(), result) == expected
    assert result.undecodable == 0

    # A shed turn's prompt comes from its InferenceRequested: corrupt it, and that turn loses its prompt
    # as it would had the record been skipped at once.
    shed = next(t for t in expected if t.shed)
    broken = [
        v[:-1] if isinstance(e, ev.InferenceRequested) and e.request_id == shed.request_id else v
        for e, v in zip(events, (codec.encode(e) for e in events))
    ]
    result = replay.Result([], replay.timeline.TimelineStats())
    got = {t.request_id: t for t in replay._fold(_raws(broken), replay.Query(), result)}
    assert result.undecodable == 1 and result.decoded == len(events) - 1 - sum(isinstance(e, ev.ConversationCreated) for e in events)
    assert got[shed.request_id] == dataclasses.replace(shed, prompt=[], prompt_tokens_estimate=0, budget_tokens=0,
                                                      max_tokens=0, requested_model=None)
