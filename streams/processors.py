"""The stream processors by name, and how to run one (what each reads and writes is its ``Wiring``;
tools/topology.py is checked against it).

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
from streams.wiring import Wiring


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


def _context(kafka: KafkaSettings) -> Wiring:
    from streams import context
    from streams.store import Store

    return context.wiring(kafka, from_env(ContextSettings), Store(from_env(CassandraSettings)))


def _router(kafka: KafkaSettings) -> Wiring:
    from streams import router_wiring

    return router_wiring.wiring(kafka, from_env(RouterSettings))


def _materializer(kafka: KafkaSettings) -> Wiring:
    from streams import materializer
    from streams.store import Store

    return materializer.wiring(from_env(MaterializerSettings), Store(from_env(CassandraSettings)))


def _usage(kafka: KafkaSettings) -> Wiring:
    from streams import usage

    return usage.wiring(from_env(UsageSettings), usage.UsageStore(from_env(CassandraSettings)))


#: The processors, by the name the command line uses (group ``streams.<name>``): each a core module's
#: ``wiring`` from its settings. Adding a processor is its module and a row here.
PROCESSORS: dict[str, Callable[[KafkaSettings], Wiring]] = {
    "context": _context,
    "router": _router,
    "materializer": _materializer,
    "usage": _usage,
}


def wiring(processor: str) -> Wiring:
    try:
        factory = PROCESSORS[processor]
    except KeyError:
        raise ConfigError(f"unknown processor {processor!r}; choose one of {sorted(PROCESSORS)}") from None
    return factory(from_env(KafkaSettings))


def build(processor: str) -> faust.App:
    """``processor``'s faust App, run by the one runner (``streams.app.wired_app``)."""
    from streams.app import wired_app

    return wired_app(from_env(StreamsSettings), from_env(KafkaSettings), processor, wiring(processor))


def run(processor: str, argv: Sequence[str] = ()) -> None:
    """Run ``processor`` as a faust worker until stopped (faust's CLI handles signals)."""
    from parley import metrics

    app = build(processor)
    if metrics.serve_from_env(f"streams.{processor}") is not None:
        metrics.register_lag(from_env(KafkaSettings), [from_env(StreamsSettings).group(processor)])
    sys.argv = [f"streams {processor}", *worker_args(argv)]
    app.main()
