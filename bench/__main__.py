"""Run every benchmark: `make bench` (each prints its figure next to an in-process baseline)."""

from bench import codec

codec.main()
