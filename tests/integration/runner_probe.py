"""A processor for tests/integration/test_faust.py, run by the one runner (``streams.app.wired_app``).

It answers each GenerationCancelRequested on chat.control with an empty TokenChunk on chat.tokens.
The first two tries of request ``flaky`` raise ``StoreUnavailable``, as an outage would, and request
``bad`` raises ``ValueError``, as bad input does. Run as ``python runner_probe.py worker``; the
PARLEY_* environment names the broker, topic prefix, group prefix and datadir.
"""

from collections.abc import Sequence

from parley.errors import StoreUnavailable
from parley.settings import KafkaSettings, from_env
from schemas.events import Event, GenerationCancelRequested, TokenChunk
from streams.app import wired_app
from streams.settings import StreamsSettings
from streams.wiring import Agent, Wiring

outages = [StoreUnavailable("the probe's outage")] * 2


async def answer(event: Event) -> Sequence[Event]:
    assert isinstance(event, GenerationCancelRequested)
    if event.request_id == "flaky" and outages:
        raise outages.pop()
    if event.request_id == "bad":
        raise ValueError("the probe's bad input")
    return [TokenChunk(conversation_id=event.conversation_id, user_id=event.user_id, request_id=event.request_id, seq=0, text="")]


wiring = Wiring(agents=[Agent("chat.control", {GenerationCancelRequested: answer})], writes=("chat.tokens",))
app = wired_app(from_env(StreamsSettings), from_env(KafkaSettings), "probe", wiring)

if __name__ == "__main__":
    app.main()
