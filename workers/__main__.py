"""``python -m workers --pool small``: run one inference worker (see workers/worker.py)."""

from workers.worker import main

main()
