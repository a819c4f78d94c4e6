"""The graph-break corpus: functions that torch.compile cannot capture in one graph, one job each.

Importing this package registers every case in compat_case.REGISTRY (the compat harness's
vocabulary is reused unchanged: tests/compat/compat_case.py). Names are `<module>.<function>`.
"""
from breaks_corpus import b_blocks, b_classic, b_contexts, b_loops, b_multi, b_nested, b_straight

MODULES = [b_straight, b_classic, b_loops, b_blocks, b_contexts, b_nested, b_multi]
