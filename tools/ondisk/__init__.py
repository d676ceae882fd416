"""Readers of what the stores leave on disk: Kafka log segments, Cassandra SSTables and commit logs,
Avro archive files, and common containers (zip, gzip, PDF streams), each decoded to the bytes a
search for plaintext must see. ``tools.erasure_scan`` walks a data dir with them.
"""
