"""`python -m gateway`: serve the gateway with uvicorn (also `parley gateway`)."""

from __future__ import annotations

import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings
from parley.logs import setup_logging
from parley.settings import CassandraSettings, KafkaSettings, from_env


def serve(settings: GatewaySettings | None = None) -> None:
    settings = settings or from_env(GatewaySettings)
    setup_logging("gateway")
    app = create_app(settings, from_env(KafkaSettings), from_env(CassandraSettings))
    # Access logs stay off: paths carry ids only, but one line per token stream adds nothing.
    uvicorn.run(app, host=settings.host, port=settings.port, access_log=False, log_config=None, timeout_graceful_shutdown=30)


if __name__ == "__main__":
    serve()
