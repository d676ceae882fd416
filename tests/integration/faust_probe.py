"""A faust worker for tests/integration/test_faust.py: relays decoded events from one topic to another.

Run as ``python faust_probe.py worker``; PROBE_IN / PROBE_OUT name the topics
(catalog-style names, prefixed by PARLEY_TOPIC_PREFIX), PROBE_GROUP the group.
"""

import os

from parley.settings import KafkaSettings, from_env
from schemas import codec
from streams.app import decoded_records, make_app, raw_topic

settings = from_env(KafkaSettings)
app = make_app(os.environ["PROBE_GROUP"], settings, datadir=os.environ.get("PROBE_DATADIR", "/tmp/parley-faust-probe"))
source = raw_topic(app, settings, os.environ["PROBE_IN"])
sink = raw_topic(app, settings, os.environ["PROBE_OUT"])


@app.agent(source)
async def relay(stream):
    async for _, event in decoded_records(app, stream, consumer=app.conf.id):
        await sink.send(key=event.key, value=codec.encode(event))


if __name__ == "__main__":
    app.main()
