"""A document's status, as ``documents.status`` holds it (streams/document_status.py writes it from docs.events)."""

PROCESSING = "processing"  # uploaded; pages 1..pages_ready are searchable so far
READY = "ready"  # every page is indexed
FAILED = "failed"  # refused or not processable; nothing of it is served
DELETED = "deleted"  # a mark, not a removal: told apart from "not written yet"

#: What readers show: a row with another status (deleted, or none: cells of a page batch that raced the
#: upload's first write) is no document.
VISIBLE = frozenset({PROCESSING, READY, FAILED})
