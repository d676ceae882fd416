"""``python -m streams {context,router,materializer,usage} [faust worker args]``.

With no faust arguments the processor runs as ``worker -l warn`` (web server off).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from parley.errors import ConfigError
from streams.processors import PROCESSORS, run


def main(args: Sequence[str]) -> None:
    if not args or args[0] not in PROCESSORS:
        sys.exit(f"usage: python -m streams {{{','.join(PROCESSORS)}}} [faust args]")
    try:
        run(args[0], args[1:])
    except ConfigError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
