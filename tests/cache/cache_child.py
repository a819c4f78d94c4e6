"""The process side of test_cache_faults.py: compile small functions against a cache dir, check
them against eager, report what the cache did.

    python cache_child.py CACHE_DIR [MODE ...]   one scenario in this process; the JSON report
                                                 is the last line of stdout
    python cache_child.py --server               import torch/pydynamo/codegen once, then for each
                                                 request line on stdin fork one child per
                                                 scenario and answer one JSON line

Requests: {"cache": dir, "modes": [...], "config": {pydynamo.config attribute: value},
"options": {codegen option: value}, "parallel": n} (n children started at once, for the race). Answers: [{"status": "exit 0" | "exit N" | "signal SIGBUS", "report":
{...} | None}, ...]. A child killed by a damaged library is an answer, not a dead test run.
The server itself only imports (no threads, no kernels run, no cache read), so forking it is
safe; forking saves each scenario the ~4 s of importing torch, sympy and the compiler.

Modes: "extra" also compiles a function no base cache holds (forces a build); "delete" deletes
every kernel library after the first calls, then calls again and compiles a twin of `f`;
"no_capabilities" drops root's capabilities first (a read-only folder is then read-only to it);
"crash" dies by SIGBUS at once (checks that a crash is reported as one).
"""
import json
import os
import signal
import sys
import traceback
import warnings

import torch

import pydynamo
import codegen
from codegen import codecache
from pydynamo import tensor_check
import codegen.graph  # noqa: F401  (imported before forking: the children share it)


def f(x, y):
    return (x * y + 1).sin().sum(0) + y.cos()


def g(x):
    return torch.relu(x) * 2 - x.exp()


def f_twin(x, y):           # same graph as f: the same kernel library (a memory hit)
    return (x * y + 1).sin().sum(0) + y.cos()


def h(x, y):
    return torch.tanh(x - y) * 3


def scenario(cache: str, modes, config=None, options=None) -> dict:
    if "crash" in modes:                  # the harness's own check: a signal is reported
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signal.SIGBUS)
    if "no_capabilities" in modes:
        _drop_capabilities()
    pydynamo.config.cache_dir = cache
    tensor_check.prefer_installed = False   # these scenarios test the cache dir's build of it
    for name, value in (config or {}).items():
        setattr(pydynamo.config, name, value)
    torch.manual_seed(0)
    x, y = torch.randn(8, 5), torch.randn(5)
    ok = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fns = [(f, (x, y)), (g, (x,))] + ([(h, (x, y))] if "extra" in modes else [])
        compiled = [(fn, pydynamo.optimize(fn, backend="codegen", options=options), args)
                    for fn, args in fns]
        for fn, c, args in compiled:
            ok.append(bool(torch.allclose(c(*args), fn(*args), atol=1e-5)))
        if "delete" in modes:
            for d, _, names in os.walk(os.path.join(cache, "cpp")):
                for n in names:
                    if n.endswith(".so"):
                        os.unlink(os.path.join(d, n))
            for fn, c, args in compiled:             # loaded libraries keep working
                ok.append(bool(torch.allclose(c(*args), fn(*args), atol=1e-5)))
            twin = pydynamo.optimize(f_twin, backend="codegen", options=options)
            ok.append(bool(torch.allclose(twin(x, y), f(x, y), atol=1e-5)))
    return {
        "ok": all(ok), "results": ok,
        "cache_warnings": [str(w.message) for w in caught
                           if issubclass(w.category, codecache.CacheWarning)],
        "other_warnings": [f"{w.category.__name__}: {w.message}" for w in caught
                           if not issubclass(w.category, codecache.CacheWarning)],
        "compiles": codecache.stats["compiles"], "disk_hits": codecache.stats["disk_hits"],
        "memory_hits": codecache.stats["memory_hits"], "repairs": codecache.stats["repairs"],
        "eager_graphs": codegen.counters["eager_fallback_graphs"],
        "guards": tensor_check.module() is not None,
    }


def _drop_capabilities():
    """From here on permission bits bind this process even as root (which otherwise writes into
    a read-only folder through CAP_DAC_OVERRIDE): no effective or permitted capabilities."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)    # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                   # effective, permitted, inheritable (x2): none
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _fork(req, run) -> tuple:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                          # the child: one scenario, report on the pipe
        os.close(r)
        signal.alarm(300)                 # a hung child is reported (SIGALRM), not a hung test
        code = 0
        try:
            out = json.dumps(run(req)).encode()
            with os.fdopen(w, "wb") as fw:
                fw.write(out)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(w)
    return pid, r


def _answer(pid, r) -> dict:
    with os.fdopen(r, "rb") as fr:
        data = fr.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        desc = f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        desc = f"exit {os.WEXITSTATUS(status)}"
    return {"status": desc, "report": json.loads(data) if data else None}


def _preload():
    """What each scenario would import on its first compile (~2 s of a child), done once before
    forking: pydynamo's executor and codegen modules, torch.utils.cpp_extension (the guard
    build's include paths), and what torch imports itself on its first meta-tensor ops. Nothing
    here reads a cache, loads a library or starts a thread."""
    import importlib
    for name in ("pydynamo.convert_frame", "pydynamo.executor.translator", "pydynamo.guards",
                 "codegen.cpp", "codegen.scheduler", "codegen.wrapper", "codegen.gpu_wrapper",
                 "torch.utils.cpp_extension"):
        importlib.import_module(name)
    (torch.ones(2, 3, device="meta") * 2 + 1).sin().sum(0)


def _run_request(req) -> dict:
    return scenario(req["cache"], req.get("modes", []), req.get("config"), req.get("options"))


def serve(run=_run_request):
    """Answer request lines on stdin, each scenario `run(request)` in forked children (the warm
    start tests' warm_child.py serves its own scenarios through this)."""
    _preload()
    for line in sys.stdin:
        req = json.loads(line)
        children = [_fork(req, run) for _ in range(req.get("parallel", 1))]
        sys.stdout.write(json.dumps([_answer(pid, r) for pid, r in children]) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--server":
        serve()
    else:
        print(json.dumps(scenario(sys.argv[1], sys.argv[2:])))
