"""Parley's CPU engine: SGLang's native HTTP API served from CPU, so workers never know which they talk to.

Where things are: ``settings.py`` (EngineSettings), ``protocol.py`` (the wire
shapes), ``app.py`` (routes), ``batcher.py`` + ``torch_model.py`` (the torch
backend, continuous batching), ``synthetic.py`` + ``prefix_cache.py`` (the load
test backend), ``detokenize.py`` / ``tokenizer.py``, ``server.py`` (``serve``).
"""

from workers.engine.settings import EngineSettings


def serve(settings: EngineSettings) -> None:
    """Run the engine until interrupted (imported lazily: torch loads only when serving)."""
    from workers.engine.server import serve as _serve

    _serve(settings)


__all__ = ["EngineSettings", "serve"]
