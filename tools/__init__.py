"""The operator's and analyst's tools: the `parley` CLI, ops, audit, analysts, the
supervisor and the isolated stacks tests and benchmarks start.

The top layer: it may import every package below it, and no service imports it.
"""
