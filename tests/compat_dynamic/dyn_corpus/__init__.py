"""The dynamic-shape corpus: functions run over sequences of input sizes (tests/compat_dynamic).

Importing this package registers every case in compat_case.REGISTRY, once per compile mode.
One module per area of issue 6's list; names are `<module>.<function>@<mode>`.
"""
from dyn_corpus import (d_build, d_conv, d_design, d_gpt2, d_loops, d_matmul, d_pointwise, d_pyarith,
                        d_reductions, d_slicing, d_views)

MODULES = [d_design, d_pointwise, d_views, d_reductions, d_matmul, d_build, d_slicing, d_pyarith,
           d_loops, d_conv, d_gpt2]
