"""The compat corpus: functions and nn.Modules written for this project, one job each.

Importing this package registers every case in compat_case.REGISTRY (in module order). Each
module covers one area of the executor's variable list; names are `<module>.<function/class>`.
"""
from compat_corpus import c_functions, c_layouts, c_modules, c_python, c_state, c_tensors

MODULES = [c_tensors, c_python, c_functions, c_modules, c_state, c_layouts]
