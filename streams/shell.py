"""What every processor's faust agent does besides calling its core:
produce an event and wait for the broker, dead-letter the record in hand.

``streams.app.decoded`` dead-letters what does not decode; ``dead_letter_current``
is for an event that decodes but that the processor cannot act on (an id that
is not a UUID, an event type that does not belong on the topic). Either way the
record lands on ``<topic>.dlq`` before its offset can be committed, and the
partition carries on.
"""

from __future__ import annotations


import os
import socket

import faust

from parley.settings import KafkaSettings
from schemas import codec
from schemas.events import Event
from streams.app import dead_letter, make_app
from streams.settings import StreamsSettings



def processor_app(streams: StreamsSettings, kafka: KafkaSettings, processor: str) -> tuple[faust.App, str]:
    """The faust App of ``processor`` and its consumer group, with a datadir of its own."""
    group = streams.group(processor)
    datadir = streams.datadir / group
    datadir.mkdir(parents=True, exist_ok=True)  # faust creates only the last level
    # After a crash (no LeaveGroup) its partitions stay with the dead member until the session times out:
    # faust's 60 s default would stall every conversation of those partitions for a minute.
    session = streams.session_timeout_s
    app = make_app(
        group,
        kafka,
        datadir=str(datadir),
        broker_session_timeout=session,
        broker_client_id=f"{group}@{socket.gethostname()}-{os.getpid()}",  # who is who in `parley ops groups`
        broker_heartbeat_interval=min(3.0, session / 3),
    )
    return app, group


async def send_event(topic: faust.TopicT, event: Event, *, partition: int | None = None) -> None:
    """Produce ``event`` keyed by its catalog key and wait for the acknowledgement.

    Waiting keeps "acked input ⇒ output on the broker": faust commits the
    input offset once the agent moves on, so nothing may still be in flight then.
    """
    pending = await topic.send(key=event.key, value=codec.encode(event), partition=partition)
    await pending


async def dead_letter_current(app: faust.App, stream: faust.StreamT, consumer: str, error: Exception) -> None:
    """Send the record ``stream`` is on to its topic's DLQ, with ``error`` as the cause."""
    current = stream.current_event
    if current is None:  # cannot happen inside the agent's loop; refuse to drop silently
        raise RuntimeError("no current record to dead-letter") from error
    await dead_letter(app, current, consumer, error)
