"""The stream processors by name, and how to run one (what each reads and writes: tools/topology.py).

``run(name)`` runs a processor as a faust worker (``python -m streams NAME``
and ``parley streams NAME`` both come here).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import faust

from parley.errors import ConfigError
from parley.settings import CassandraSettings, KafkaSettings, from_env
from streams.settings import ContextSettings, MaterializerSettings, RouterSettings, StreamsSettings, UsageSettings


DEFAULT_ARGS = ("worker", "-l", "warn")


def worker_args(argv: Sequence[str]) -> list[str]:
    """``argv`` for faust, with its web server off unless asked for.

    faust's ``worker`` command turns the web server on by default whatever the
    app's ``web_enabled`` says, and every worker on a host would then fight
    over port 6066.
    """
    args = list(argv or DEFAULT_ARGS)
    if args[:1] == ["worker"] and not any(a in ("--with-web", "--without-web") for a in args):
        args.insert(1, "--without-web")
    return args


def _context() -> faust.App:
    from streams import context
    from streams.store import Store

    return context.build_app(
        from_env(StreamsSettings), from_env(KafkaSettings), from_env(ContextSettings), Store(from_env(CassandraSettings))
    )


def _router() -> faust.App:
    from streams import router_app

    return router_app.build_app(from_env(StreamsSettings), from_env(KafkaSettings), from_env(RouterSettings))


def _materializer() -> faust.App:
    from streams import materializer
    from streams.store import Store

    return materializer.build_app(
        from_env(StreamsSettings),
        from_env(KafkaSettings),
        from_env(MaterializerSettings),
        Store(from_env(CassandraSettings)),
    )


def _usage() -> faust.App:
    from streams import usage

    return usage.build_app(
        from_env(StreamsSettings), from_env(KafkaSettings), from_env(UsageSettings), usage.UsageStore(from_env(CassandraSettings))
    )


#: The processors, by the name the command line uses.
PROCESSORS: dict[str, Callable[[], faust.App]] = {
    "context": _context,
    "router": _router,
    "materializer": _materializer,
    "usage": _usage,
}


def build(processor: str) -> faust.App:
    try:
        factory = PROCESSORS[processor]
    except KeyError:
        raise ConfigError(f"unknown processor {processor!r}; choose one of {sorted(PROCESSORS)}") from None
    return factory()


def run(processor: str, argv: Sequence[str] = ()) -> None:
    """Run ``processor`` as a faust worker until stopped (faust's CLI handles signals)."""
    from parley import metrics

    app = build(processor)
    if metrics.serve_from_env(f"streams.{processor}") is not None:
        metrics.register_lag(from_env(KafkaSettings), [from_env(StreamsSettings).group(processor)])
    sys.argv = [f"streams {processor}", *worker_args(argv)]
    app.main()
