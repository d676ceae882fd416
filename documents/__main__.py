"""``python -m documents``: run one document worker (see documents/worker.py)."""

from documents.worker import main

main()
