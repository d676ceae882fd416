"""Analysts: replay the log into turn records, report on them, re-run routing, archive and rebuild.

Pure cores (``turns``, ``report``, ``counterfactual``, ``digest``) are plain functions over
plain data; the shells (``timeline``, ``replay``, ``archive``, ``rebuild``, ``charts``,
``cli``) read Kafka, archives and Cassandra and write files. docs/analysts.md is the guide.
"""
