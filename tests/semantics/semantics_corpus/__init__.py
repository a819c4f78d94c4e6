"""The semantics corpus (issue 17): Python and library constructs that real model code uses
(the transformers zoo's helpers, PyTorch's own test idioms), one job each, written here.

Importing this package registers every case in compat_case.REGISTRY (the compat harness's
vocabulary: tests/compat/compat_case.py). Names are `<module>.<function>`.
"""
from semantics_corpus import s_configs, s_containers, s_library, s_more, s_objects, s_resume, s_transforms

MODULES = [s_library, s_containers, s_objects, s_more, s_resume, s_configs, s_transforms]
