"""Process-wide settings. Plain module attributes so `pydynamo.config.x = y` just works.

The one module that reads pydynamo's environment variables, each once, at import, into the
attribute beside it (user-facing settings, documented in docs/USER_GUIDE.md; a value that cannot
be used warns at import and the default stands); tests and
programs set the attributes. A compile's own choices are codegen options (codegen/options.py),
not settings. A leaf (imports nothing of the project), so codegen may read it.
"""
import os
import warnings


def _int_env(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    try:
        return int(text) if text.strip() else default
    except ValueError:
        warnings.warn(f"pydynamo: {name}={text!r} is not an integer; using {default}", stacklevel=3)
        return default


# Per code object: how many compiled entries before new inputs run eagerly (existing entries keep
# serving; nothing good is discarded).
recompile_limit: int = _int_env("PYDYNAMO_RECOMPILE_LIMIT", 8)

# Where generated code (wrappers, kernels, shared libraries, the guard extension) is written,
# readable and runnable.
cache_dir: str = os.environ.get("PYDYNAMO_CACHE_DIR", os.path.expanduser("~/.cache/pydynamo"))

# Internal tracebacks in user-facing errors only when asked for.
verbose: bool = os.environ.get("PYDYNAMO_VERBOSE", "0") not in ("", "0")

# The log channels (pydynamo/logs.py): graph breaks with reasons and user lines; why a call
# recompiled (each failing guard); every guard of a new entry; each captured FX graph's code;
# the output (replacement) bytecode; the Python source of the code that calls the graphs and
# kernels; the training path's joint/forward/backward graphs; compile times and per-call times.
LOG_CHANNELS = ("graph_breaks", "recompiles", "guards", "graph_code", "bytecode", "output_code",
                "aot", "perf")
_checked_logs: dict = {}


def log_channels(text: str) -> frozenset:
    """The channels a PYDYNAMO_LOGS / `logs` value names ("all": every one); an unknown name
    warns once per value, naming the valid ones."""
    found = _checked_logs.get(text)
    if found is None:
        names = {c.strip() for c in text.split(",") if c.strip()}
        unknown = sorted(names - set(LOG_CHANNELS) - {"all"})
        if unknown:
            warnings.warn(f"pydynamo: unknown log channel(s) {', '.join(unknown)} in PYDYNAMO_LOGS / "
                          f"pydynamo.config.logs; valid: {', '.join(LOG_CHANNELS)}, all", stacklevel=3)
        found = _checked_logs[text] = frozenset(LOG_CHANNELS if "all" in names else names & set(LOG_CHANNELS))
    return found


# Comma-separated log channels (LOG_CHANNELS, or "all"), checked at import.
logs: str = os.environ.get("PYDYNAMO_LOGS", "")
log_channels(logs)


def _dir_env(name: str):
    """A directory named by `name` (None: unset). It may not exist yet (it is made when written);
    a path that is a file, or under one that cannot be written, warns and is None."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    path = os.path.abspath(os.path.expanduser(text))
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        why = "is not a directory" if not os.path.isdir(existing) else "cannot be written"
        warnings.warn(f"pydynamo: {name}={text!r}: {existing} {why}; ignored", stacklevel=3)
        return None
    return path


# The compile report (pydynamo/report.py): a directory that gets one HTML page per process,
# written at exit (pydynamo.write_report() writes one on demand); None: nothing is recorded.
report_dir: "str | None" = _dir_env("PYDYNAMO_REPORT")

# Warm start (pydynamo/warm_cache.py): compiled frames are stored under cache_dir and a new
# process loads them instead of tracing and compiling ($PYDYNAMO_WARM_START=1).
warm_start: bool = os.environ.get("PYDYNAMO_WARM_START", "0") not in ("", "0")

# The C++ compiler for kernel libraries and the guard extension ($CXX, the usual spelling).
cxx: str = os.environ.get("CXX", "g++")

# Guards check tensors with the compiled C++ extension (pydynamo/tensor_check.py); False
# (PYDYNAMO_C_TENSOR_GUARDS=0): the Python conditions, same answers, slower cache hits.
c_tensor_guards: bool = os.environ.get("PYDYNAMO_C_TENSOR_GUARDS", "1") != "0"

# Under DistributedDataParallel, graphs are split at DDP's gradient buckets so each bucket's
# all-reduce overlaps the rest of the backward (pydynamo/distributed.py); False: compiled whole.
optimize_ddp: bool = True

# Ranks check with one all-gather per call of a compiled frame that they take the same guard
# outcome, raising distributed.GuardDivergence instead of diverging (pydynamo/distributed.py).
distributed_guard_check: bool = False

# Region templates (pydynamo/executor/regions.py): a module's forward traced once per frame and
# its graph nodes reused for every other instance of the class called the same way (the layers
# of a transformer), guarded on what differs; False: every call is traced.
region_templates: bool = True
