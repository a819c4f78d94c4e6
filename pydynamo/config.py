"""Process-wide settings. Plain module attributes so `pydynamo.config.x = y` just works.

The one module that reads pydynamo's environment variables, each once, at import, into the
attribute beside it (they are user-facing settings, documented in docs/INTERNALS.md); tests and
programs set the attributes. A compile's own choices are codegen options (codegen/options.py),
not settings. A leaf (imports nothing of the project), so codegen may read it.
"""
import os

# Per code object: how many compiled entries before new inputs run eagerly (existing entries keep
# serving; nothing good is discarded).
recompile_limit: int = int(os.environ.get("PYDYNAMO_RECOMPILE_LIMIT", "8"))

# Where generated code (wrappers, kernels, shared libraries, the guard extension) is written,
# readable and runnable.
cache_dir: str = os.environ.get("PYDYNAMO_CACHE_DIR", os.path.expanduser("~/.cache/pydynamo"))

# Internal tracebacks in user-facing errors only when asked for.
verbose: bool = os.environ.get("PYDYNAMO_VERBOSE", "0") not in ("", "0")

# Comma-separated log channels: graph_breaks, recompiles, guards, graph_code, bytecode,
# output_code, perf.
logs: str = os.environ.get("PYDYNAMO_LOGS", "")

# The C++ compiler for kernel libraries and the guard extension ($CXX, the usual spelling).
cxx: str = os.environ.get("CXX", "g++")

# Guards check tensors with the compiled C++ extension (pydynamo/tensor_check.py); False
# (PYDYNAMO_C_TENSOR_GUARDS=0): the Python conditions, same answers, slower cache hits.
c_tensor_guards: bool = os.environ.get("PYDYNAMO_C_TENSOR_GUARDS", "1") != "0"
