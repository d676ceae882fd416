"""EventProducer.send_nowait (parley/kafka.py): delivery reports reach their futures in bursts, failures included.

No broker here: one that cannot be reached fails every queued event at the delivery timeout, together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from parley.errors import BrokerUnavailable
from parley.kafka import EventProducer, ProduceFailed, QueueFull
from parley.settings import KafkaSettings
from schemas.events import TokenChunk


def chunk(seq: int) -> TokenChunk:
    return TokenChunk(conversation_id="c", user_id="u", request_id="r", seq=seq)


def count_wakeups(monkeypatch: pytest.MonkeyPatch) -> list[Callable[..., object]]:
    """The callbacks other threads hand to the running loop, from now to the end of the test."""
    loop = asyncio.get_running_loop()
    handed: list[Callable[..., object]] = []
    real = loop.call_soon_threadsafe

    def counting(callback: Callable[..., object], *args: object) -> asyncio.Handle:
        handed.append(callback)
        return real(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    return handed


async def test_failed_deliveries_fail_their_futures_with_a_wakeup_per_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = EventProducer(KafkaSettings(bootstrap="127.0.0.1:1"), **{"delivery.timeout.ms": 200})
    wakeups = count_wakeups(monkeypatch)
    try:
        futures = [producer.send_nowait(chunk(n)) for n in range(50)]
        outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 10)
    finally:
        producer.close(0)
    assert all(isinstance(o, ProduceFailed) and "timed out" in str(o) for o in outcomes)
    # One per record would be 50. librdkafka expires them in as many bursts as its timeout scans find them,
    # which a loaded machine spreads out (13 in one full run on two busy cores): bursts, not records.
    assert 1 <= len(wakeups) <= 25


async def test_a_cancelled_future_is_skipped_and_the_rest_resolve() -> None:
    producer = EventProducer(KafkaSettings(bootstrap="127.0.0.1:1"), **{"delivery.timeout.ms": 200})
    try:
        first, second = producer.send_nowait(chunk(0)), producer.send_nowait(chunk(1))
        first.cancel()
        with pytest.raises(ProduceFailed):
            await asyncio.wait_for(second, 10)
    finally:
        producer.close(0)
    assert first.cancelled()


#: A queue of one record that nothing drains for two minutes: every later event finds it full.
FULL_QUEUE = {"queue.buffering.max.messages": 1, "delivery.timeout.ms": 120_000}


@pytest.mark.timeout(30)  # the old produce path held the loop until the first record timed out (120 s)
async def test_send_nowait_on_a_full_queue_fails_at_once_with_a_transient_error() -> None:
    producer = EventProducer(KafkaSettings(bootstrap="127.0.0.1:1"), **FULL_QUEUE)
    try:
        first = producer.send_nowait(chunk(0))
        second = producer.send_nowait(chunk(1))
        assert second.done() and not first.done()
        with pytest.raises(QueueFull) as refused:
            second.result()
        assert isinstance(refused.value, BrokerUnavailable)  # what callers already retry
    finally:
        first.cancel()
        producer.close(0)


@pytest.mark.timeout(30)
async def test_send_awaits_room_in_a_full_queue_without_holding_the_loop() -> None:
    producer = EventProducer(KafkaSettings(bootstrap="127.0.0.1:1"), **FULL_QUEUE)
    try:
        first = producer.send_nowait(chunk(0))
        waiting = asyncio.create_task(producer.send(chunk(1)))
        for _ in range(5):
            await asyncio.sleep(0.01)  # the loop keeps running other work while send waits
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    finally:
        first.cancel()
        producer.close(0)


def test_a_transactional_producer_gives_up_a_request_within_its_transaction() -> None:
    from confluent_kafka import Producer

    from parley.kafka import SOCKET_TIMEOUT_MS, producer_config

    settings = KafkaSettings(bootstrap="127.0.0.1:1")
    assert producer_config(settings)["socket.timeout.ms"] == SOCKET_TIMEOUT_MS
    overrides = {"transactional.id": "t", "transaction.timeout.ms": 2000, "delivery.timeout.ms": 2000}  # as workers/transactions.py
    config = producer_config(settings, **overrides)
    assert config["socket.timeout.ms"] == 2100
    Producer(config).flush(0)  # librdkafka takes it


def test_the_atomic_appenders_producer_is_one_librdkafka_takes() -> None:
    """Its deliveries may not outlive its transactions (librdkafka refuses the producer otherwise)."""
    from confluent_kafka import Producer

    from parley.kafka import AtomicAppender

    for timeout_s in (60.0, 5.0):
        Producer(AtomicAppender(KafkaSettings(bootstrap="127.0.0.1:1"), "t", timeout_s=timeout_s)._config).flush(0)
