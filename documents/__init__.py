"""Documents: files a user uploads, made into searchable pages that answers cite (docs/design.md §10).

Cores (no Kafka, no Cassandra): ``sniff`` and ``safety`` check untrusted files,
``extract`` and ``pages`` read them page by page (OCR where a page has no text
layer), ``chunking`` cuts pages into chunks with provenance, ``terms`` and
``embedding`` make them searchable, ``retrieval`` fuses keyword and vector
search, ``citations`` finds what a reply drew on. Shells: ``blobs`` (the
originals), ``index`` (the Cassandra tables), ``worker`` (the extraction pool's
consumer of ``docs.events``).
"""
