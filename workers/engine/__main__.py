"""``python -m workers.engine [--backend synthetic --port N ...]``."""

import sys

from workers.engine.server import main

sys.exit(main())
