"""The production fleet, declared once: GPU pools of SGLang engines and what runs them.

``spec`` reads a fleet spec (infra/fleet/example.yaml is the shipped one) into
frozen dataclasses and refuses impossible ones; ``sglang`` turns each pool into
its SGLang launch commands; ``kubernetes`` renders the manifests. docs/fleet.md
explains the fields and the pools chosen.
"""
