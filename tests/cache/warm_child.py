"""The process side of test_warm_start.py: compile functions with the warm-start cache on against
a cache dir, check them against eager, report what the cache did (how many frames were traced).

    python warm_child.py --server      cache_child.py's fork server, with these scenarios

Requests: {"cache": dir, "fns": [name, ...], "backend": "codegen" | "eager", "modes": [...],
"parallel": n}. Function names: "f" (a small function), "demo" (the demo transformer, inference),
"local_fn" (a closure over a lambda: found again by its code), "getter_fn" (a guard on an
object with no identity another process shares: never cached),
"file:PATH" (`fn(x)` of the module at PATH: tests edit it between processes). Modes:
"versions:TAG" (pretend other pydynamo/torch versions), "no_capabilities" (root's capabilities
dropped: a read-only folder is read-only), "save:PATH" / "load:PATH" (save_artifacts() after
the calls into PATH / load_artifacts() of PATH before them), "shapes" (each function also runs
on a second input shape: one more entry), "reset" (pydynamo.reset() after each call, then the
call again), "patch_helper" (the file's `helper` replaced by another function after import),
"setattr:NAME=EXPR" (the file's global NAME set to EXPR after import), "count_guard_compiles"
(report how often guard source was compiled: a warm hit reuses the entry's compiled code).
"""
import importlib.util
import json
import logging
import operator
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cache_child  # noqa: E402
import codegen  # noqa: E402
import pydynamo  # noqa: E402
from codegen import codecache  # noqa: E402
from pydynamo import convert_frame, guards, warm_cache, warm_store  # noqa: E402
from pydynamo.demo.model import build_model, example_inputs  # noqa: E402


def f(x, y):
    return (x * y + 1).sin().sum(0) + y.cos()


def _make_local():
    act = lambda t: t * 3     # noqa: E731  (a <locals> function: no name finds it, its code does)

    def local_fn(x):
        return act(x) + 1
    return local_fn


local_fn = _make_local()
SECOND = operator.itemgetter(1)     # guarded by identity, and no process but this one has it


def getter_fn(x):
    return SECOND((x, x * 2)) + 1


def _cases(name, shape_index, modes=()):
    """(eager function, compile target, inputs) for `name`."""
    torch.manual_seed(shape_index)
    x, y = torch.randn(8 + shape_index, 5), torch.randn(5)
    if name == "f":
        return f, f, (x, y)
    if name == "local_fn":
        return local_fn, local_fn, (x,)
    if name == "getter_fn":
        return getter_fn, getter_fn, (x,)
    if name == "demo":
        model = build_model()
        return model, model, (example_inputs(seq=16 + 4 * shape_index),)
    if name.startswith("file:"):
        spec = importlib.util.spec_from_file_location("warm_user_module", name[5:])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod              # as `import` does: its functions have a name
        spec.loader.exec_module(mod)
        if "patch_helper" in modes:            # monkeypatched after import, as a user might
            mod.helper = lambda t: t * 5
        for m in modes:                         # "setattr:NAME=EXPR": a module global changed
            if m.startswith("setattr:"):        # after import (the file itself is unchanged)
                attr, expr = m[8:].split("=", 1)
                setattr(mod, attr, eval(expr, {"torch": torch}))
        return mod.fn, mod.fn, (x,)
    raise ValueError(name)


def scenario(req) -> dict:
    modes = req.get("modes", [])
    if "no_capabilities" in modes:
        cache_child._drop_capabilities()
    pydynamo.config.cache_dir = req["cache"]
    pydynamo.config.warm_start = True
    for m in modes:
        if m.startswith("versions:"):
            warm_cache._versions[:] = [m]
        if m.startswith("load:"):
            with open(m[5:], "rb") as fh:
                warm_store.load_artifacts(fh.read())
    guard_compiles = []
    if "count_guard_compiles" in modes:     # the guard source compiled (not reused) in this child
        guards.compile = lambda *a: guard_compiles.append(1) or compile(*a)
    translations = []
    real_translate = convert_frame.translate

    def counting_translate(code, *args, **kwargs):
        translations.append(code.co_qualname)
        return real_translate(code, *args, **kwargs)
    convert_frame.translate = counting_translate
    logs = []

    class Keep(logging.Handler):
        def emit(self, record):
            logs.append(record.getMessage())
    logging.getLogger("pydynamo.warm_cache").addHandler(Keep())
    logging.getLogger("pydynamo.warm_cache").setLevel(logging.INFO)
    ok = []
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for shape_index in range(2 if "shapes" in modes else 1):
            for name in req["fns"]:
                eager, target, args = _cases(name, shape_index, modes)
                want = eager(*args)
                got = pydynamo.optimize(target, backend=req.get("backend", "codegen"))(*args)
                ok.append(bool(torch.allclose(got, want, atol=1e-5)))
                if "reset" in modes:           # reset() drops the loaded entry: it loads again
                    pydynamo.reset()
                    got = pydynamo.optimize(target, backend=req.get("backend", "codegen"))(*args)
                    ok.append(bool(torch.allclose(got, want, atol=1e-5)))
    for m in modes:
        if m.startswith("save:"):
            with open(m[5:], "wb") as fh:
                fh.write(warm_store.save_artifacts())
    return {
        "ok": all(ok), "results": ok, "translations": translations,
        "hits": warm_cache.stats["hits"], "stores": warm_cache.stats["stores"],
        "stale": warm_cache.stats["stale"], "uncacheable": warm_cache.stats["uncacheable"],
        "cache_warnings": [str(w.message) for w in caught
                           if issubclass(w.category, codecache.CacheWarning)],
        "graphs_compiled": codegen.counters["graphs_compiled"],
        "eager_graphs": codegen.counters["eager_fallback_graphs"],
        "kernel_compiles": codecache.stats["compiles"], "logs": logs,
        "guard_compiles": len(guard_compiles),
    }


if __name__ == "__main__":
    assert sys.argv[1] == "--server"
    # pydynamo's own files are keyed by name, size and mtime: in a tree being edited the key
    # would change between scenarios; every child keeps the one read here, before forking
    warm_cache.versions()
    cache_child.serve(scenario)
