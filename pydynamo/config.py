"""Process-wide settings. Plain module attributes so `pydynamo.config.x = y` just works.

Every setting has an environment-variable spelling read once at import; tests set attributes.
"""
import os

# Per code object: how many compiled entries before new inputs run eagerly (existing entries keep
# serving; nothing good is discarded).
recompile_limit: int = int(os.environ.get("PYDYNAMO_RECOMPILE_LIMIT", "8"))

# Where generated code (wrappers, kernels, shared libraries) is written, readable and runnable.
cache_dir: str = os.environ.get("PYDYNAMO_CACHE_DIR", os.path.expanduser("~/.cache/pydynamo"))

# Internal tracebacks in user-facing errors only when asked for.
verbose: bool = os.environ.get("PYDYNAMO_VERBOSE", "0") not in ("", "0")

# Comma-separated log channels: graph_breaks, recompiles, guards, graph_code, bytecode,
# output_code, perf.
logs: str = os.environ.get("PYDYNAMO_LOGS", "")
