"""Warm start (issue 20): a new process loads the frames an earlier one compiled instead of
tracing them (pydynamo/warm_cache.py), and a damaged, truncated, foreign, re-versioned, stale,
read-only, shared or contended cache never crashes a process nor gives a wrong answer; what it
costs is counted (frames traced again, one CacheWarning per damaged entry).

Each scenario runs in its own process, forked from one server that imported torch and pydynamo
(warm_child.py on cache_child.py's server); every compiled result is checked against eager there.
What a hit imports, and frames with graph breaks (resume functions), are checked in fresh
interpreters (FRESH below): a forked child has the server's modules already.
"""
import glob
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fresh  # noqa: E402
import test_cache_faults  # noqa: E402  (its scenario server)

CHILD = os.path.join(HERE, "warm_child.py")


class Server(test_cache_faults.Server):
    def run(self, cache, fns=("f",), backend="codegen", modes=(), parallel=1):
        return self.ask({"cache": str(cache), "fns": list(fns), "backend": backend,
                         "modes": list(modes)}, parallel)


@pytest.fixture(scope="module")
def server():
    s = Server(CHILD)
    yield s
    s.close()


def check(answer, traced, warnings=0, hits=None):
    """The scenario ran to the end, every result equals eager, nothing ran eagerly for lack of
    a compiler, `traced` frames were traced (the rest loaded), and `warnings` CacheWarnings."""
    assert answer["status"] == "exit 0", answer
    rep = answer["report"]
    assert rep["ok"], rep
    assert rep["eager_graphs"] == 0, rep
    assert len(rep["translations"]) == traced, rep
    assert len(rep["cache_warnings"]) == warnings, rep["cache_warnings"]
    if hits is not None:
        assert rep["hits"] == hits, rep
    return rep


def entries(cache):
    return sorted(glob.glob(os.path.join(cache, "frames", "*", "*", "*.pkl")))


@pytest.fixture(scope="module")
def base(server, tmp_path_factory):
    """A warm cache holding f's entry (codegen, C++ kernels), built once."""
    d = tmp_path_factory.mktemp("warm") / "cache"
    rep = check(server.run(d), traced=1, hits=0)
    assert rep["stores"] == 1 and rep["graphs_compiled"] == 1
    assert len(entries(d)) == 1
    assert stat.S_IMODE(os.stat(d / "frames").st_mode) == 0o700
    return d


@pytest.fixture
def cache(base, tmp_path):
    d = tmp_path / "cache"
    shutil.copytree(base, d)
    return d


def test_a_new_process_loads_instead_of_tracing(server, cache):
    rep = check(server.run(cache), traced=0, hits=1)
    assert rep["graphs_compiled"] == 0 and rep["kernel_compiles"] == 0 and rep["stores"] == 0


def test_demo_transformer_warm_start_with_both_backends(server, tmp_path):
    for backend in ("codegen", "eager"):
        d = tmp_path / backend
        check(server.run(d, fns=["demo"], backend=backend), traced=1, hits=0)
        rep = check(server.run(d, fns=["demo"], backend=backend), traced=0, hits=1)
        assert rep["graphs_compiled"] == 0


def test_an_entry_loads_again_after_reset(server, cache):
    check(server.run(cache, modes=["reset"]), traced=0, hits=2)


def test_entries_are_per_backend(server, cache):
    """The eager backend's entry is not codegen's: a miss, then its own entry."""
    check(server.run(cache, backend="eager"), traced=1, hits=0)
    check(server.run(cache, backend="eager"), traced=0, hits=1)


def test_another_input_shape_is_a_new_entry_beside_the_first(server, cache):
    check(server.run(cache, modes=["shapes"]), traced=1, hits=1)
    assert len(entries(cache)) == 2
    check(server.run(cache, modes=["shapes"]), traced=0, hits=2)


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "empty", "garbage"])
def test_damaged_entry_is_retraced_with_one_warning_then_silent(server, cache, damage):
    (path,) = entries(cache)
    blob = open(path, "rb").read()
    with open(path, "wb") as fh:
        if damage == "truncate":
            fh.write(blob[:len(blob) // 2])
        elif damage == "overwrite":
            mid = len(blob) // 2
            fh.write(blob[:mid] + bytes(b ^ 0xFF for b in blob[mid:mid + 64]) + blob[mid + 64:])
        elif damage == "garbage":
            fh.write(os.urandom(len(blob)))
    rep = check(server.run(cache), traced=1, warnings=1, hits=0)
    assert "damaged" in rep["cache_warnings"][0] and rep["stores"] == 1
    check(server.run(cache), traced=0, hits=1)       # repaired: the next process is silent


def test_foreign_entry_under_this_name_is_not_used(server, cache, tmp_path):
    """Another frame's entry copied over this one's file: its trailer names another key."""
    other = tmp_path / "other"
    check(server.run(other, fns=["file:" + _user_file(tmp_path, 2)], backend="eager"), traced=1)
    (theirs,) = entries(other)
    (ours,) = entries(cache)
    shutil.copy(theirs, ours)
    rep = check(server.run(cache), traced=1, warnings=1, hits=0)
    assert "built for key" in rep["cache_warnings"][0]


def test_changed_versions_miss_silently(server, cache):
    rep = check(server.run(cache, modes=["versions:other torch"]), traced=1, hits=0)
    assert rep["stores"] == 1 and len(entries(cache)) == 2   # one per version, side by side
    check(server.run(cache), traced=0, hits=1)


def _user_file(tmp_path, factor) -> str:
    path = tmp_path / "user_model.py"
    path.write_text(f"import torch\n\n\ndef helper(x):\n    return x * {factor}\n\n\n"
                    f"def fn(x):\n    return helper(x).sin() + 1\n")
    return str(path)


def test_edited_source_file_makes_the_entry_stale(server, tmp_path):
    """The frame's code is unchanged but a function it inlines was edited: never the old graph."""
    d = tmp_path / "cache"
    path = _user_file(tmp_path, 2)
    check(server.run(d, fns=["file:" + path]), traced=1)
    check(server.run(d, fns=["file:" + path]), traced=0, hits=1)
    _user_file(tmp_path, 3)                       # same fn, helper now multiplies by 3
    rep = check(server.run(d, fns=["file:" + path]), traced=1, hits=0)
    assert rep["stale"] == 1 and any("changed" in m for m in rep["logs"]), rep


def test_monkeypatched_function_is_not_taken_for_the_stored_one(server, tmp_path):
    """The name the entry's guard resolves now denotes another function: re-traced (the result
    is checked against eager, which calls the patched one), never the stored graph."""
    d = tmp_path / "cache"
    path = _user_file(tmp_path, 2)
    check(server.run(d, fns=["file:" + path]), traced=1)
    rep = check(server.run(d, fns=["file:" + path], modes=["patch_helper"]), traced=1, hits=0)
    assert rep["stale"] == 1 and any("now names" in m for m in rep["logs"]), rep["logs"]


def _globals_file(tmp_path) -> str:
    path = tmp_path / "globals_model.py"
    path.write_text("import torch\n\nACT = torch.sin\nSCALE = 2\n\n\n"
                    "def fn(x):\n    return ACT(x) * SCALE + 1\n")
    return str(path)


@pytest.mark.parametrize("change", ["ACT=torch.cos", "SCALE=3", "SCALE=2.0"])
def test_a_warm_entry_never_runs_where_its_guards_do_not_hold(server, tmp_path, change):
    """The guard function a warm entry carries compiled (its ids and values are constants, not
    text) checks this process's objects: a global now bound to another object (ID_MATCH on
    torch.sin) or another value (EQUALS_MATCH: 3, or 2.0 of another type) misses and is traced
    again, the result equal to eager's (the child checks); the unchanged process still hits."""
    d, path = tmp_path / "cache", _globals_file(tmp_path)
    check(server.run(d, fns=["file:" + path]), traced=1)
    check(server.run(d, fns=["file:" + path]), traced=0, hits=1)
    check(server.run(d, fns=["file:" + path], modes=["setattr:" + change]), traced=1, hits=0)
    check(server.run(d, fns=["file:" + path]), traced=0, hits=1)


def test_a_hit_reuses_the_guard_code_the_entry_carries(server, tmp_path):
    """The guard source holds no per-process value (ids are constants), so the entry carries its
    compiled code and a hit compiles none."""
    d, path = tmp_path / "cache", _globals_file(tmp_path)
    cold = check(server.run(d, fns=["file:" + path], modes=["count_guard_compiles"]), traced=1)
    assert cold["guard_compiles"] >= 1, cold
    warm = check(server.run(d, fns=["file:" + path], modes=["count_guard_compiles"]),
                 traced=0, hits=1)
    assert warm["guard_compiles"] == 0, warm
    # another value: the loaded code (its text is the same: values are constants) rejects it
    check(server.run(d, fns=["file:" + path], modes=["setattr:SCALE=4"]), traced=1, hits=0)


def test_guard_on_an_object_without_a_name_is_not_cached_and_says_so(server, tmp_path):
    d = tmp_path / "cache"
    rep = check(server.run(d, fns=["getter_fn"]), traced=1)
    assert rep["uncacheable"] == 1 and rep["stores"] == 0
    assert any("not cached" in m and "no stable identity" in m for m in rep["logs"]), rep["logs"]
    check(server.run(d, fns=["getter_fn"]), traced=1, hits=0)


def test_closure_over_a_lambda_is_found_again_by_its_code(server, tmp_path):
    d = tmp_path / "cache"
    check(server.run(d, fns=["local_fn"]), traced=1, hits=0)
    check(server.run(d, fns=["local_fn"]), traced=0, hits=1)


def test_read_only_cache_dir_serves_and_stores_elsewhere(server, cache):
    modes = ["no_capabilities"] if os.geteuid() == 0 else []
    for d, _, files in os.walk(cache):
        os.chmod(d, 0o555)
    try:
        check(server.run(cache, modes=modes), traced=0, hits=1)
        rep = check(server.run(cache, modes=modes, backend="eager"), traced=1, warnings=1)
        assert "cannot write" in rep["cache_warnings"][0]
    finally:
        for d, _, _ in os.walk(cache):
            os.chmod(d, 0o755)
    assert len(entries(cache)) == 1                 # nothing was written into it


def test_frames_folder_open_to_others_is_not_read(server, cache):
    os.chmod(cache / "frames", 0o777)
    rep = check(server.run(cache), traced=1, warnings=1, hits=0)
    assert "not private" in rep["cache_warnings"][0]


def test_two_processes_racing_on_one_entry(server, tmp_path):
    """10 rounds of two processes starting together on a cache without the entry: each traces
    and publishes the same entry, the last rename wins, and no process ever reads a partial one;
    a third process then loads it."""
    d = tmp_path / "cache"
    traced = 0
    for _ in range(10):
        shutil.rmtree(d / "frames", ignore_errors=True)
        for a in server.run(d, parallel=2):
            traced += len(check(a, traced=1, hits=0)["translations"])
        check(server.run(d), traced=0, hits=1)
    assert traced == 20


def test_racing_on_a_warm_entry(server, cache):
    for _ in range(10):
        for a in server.run(cache, parallel=2):
            check(a, traced=0, hits=1)


def test_save_and_load_artifacts_move_a_warm_cache(server, cache, tmp_path):
    blob = tmp_path / "artifacts.zip"
    check(server.run(cache, modes=[f"save:{blob}"]), traced=0, hits=1)
    fresh = tmp_path / "fresh"
    rep = check(server.run(fresh, modes=[f"load:{blob}"]), traced=0, hits=1)
    assert rep["kernel_compiles"] == 0 and rep["graphs_compiled"] == 0


def test_source_files_outside_torch_pydynamo_and_stdlib_are_hashed():
    """Regression: files under the checkout (a venv inside it holds transformers) were taken for
    pydynamo's own and not hashed, so an edited model file there would have kept its entries."""
    import torch
    import transformers.models.gpt2.modeling_gpt2 as gpt2
    from pydynamo import warm_cache, warm_store
    files = {}
    for path in (gpt2.__file__, torch.nn.functional.__file__, os.__file__, warm_cache.__file__,
                 warm_store.__file__, __file__):
        warm_store._add_file(files, path)
    assert sorted(files) == sorted([gpt2.__file__, __file__])


# A fresh interpreter (not the fork server, which imported more): compiles `fn` of the module at
# argv[1] against the cache dir argv[2] with the version key pinned to argv[3] (pydynamo's files
# change under a tree being edited) with backend argv[4], and reports what it traced, loaded and
# imported. argv[5] "dynamic": dynamic=True, called on three sizes (one entry serves them), then
# on a size its shape guards refuse under the "fail_on_recompile" stance (the error's text).
FRESH = fresh.PRELUDE + """
dynamic = sys.argv[5:] == ["dynamic"]
compiled = pydynamo.optimize(mod.fn, backend=sys.argv[4], dynamic=dynamic or None)
refused = None
with torch.no_grad():
    ok = True
    for n in ((8, 11, 13) if dynamic else (8,)):
        x = torch.randn(n, 5)
        ok = ok and bool(torch.allclose(compiled(x), mod.fn(x), atol=1e-5))
    heavy = [m for m in stages.HEAVY if m in sys.modules]
    if dynamic:
        try:
            with pydynamo.set_stance("fail_on_recompile"):
                compiled(torch.randn(1, 5))
        except pydynamo.exc.RecompileError as e:
            refused = str(e)
print(json.dumps({"traced": traced, "hits": warm_cache.stats["hits"], "ok": ok, "heavy": heavy,
                  "origins": origins, **({"refused": refused} if dynamic else {})}))
"""


def _fresh(path, cache, backend, env=None, mode=()) -> dict:
    r = subprocess.run([sys.executable, "-c", FRESH, str(path), str(cache), "pinned-" + str(cache),
                        backend, *mode], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["codegen", "eager"])
def test_a_hit_in_a_fresh_interpreter_imports_no_tracing_training_or_lowering(tmp_path, backend):
    """What makes a small model's warm first call cheap: a hit runs guards, the warm cache and
    the compiled code's runtime only (pydynamo/stages.py): not the executor, sympy, aot nor
    codegen's pipeline. The cold process traces and stores; the warm one loads and imports none
    of them, and its result equals eager."""
    path, cache = _user_file(tmp_path, 2), tmp_path / "cache"
    cold = _fresh(path, cache, backend)
    assert cold["ok"] and cold["traced"] == ["fn"] and cold["hits"] == 0, cold
    assert "pydynamo.executor.translator" in cold["heavy"]     # (what the check looks for)
    warm = _fresh(path, cache, backend)
    assert warm == {"traced": [], "hits": 1, "ok": True, "heavy": [], "origins": []}, warm


def _break_file(tmp_path) -> str:
    """fn with two graph breaks (three frames: fn and two resume functions); the second piece
    reads SCALE, which only its own guards pin (set from $WARM_SCALE when the module loads)."""
    path = tmp_path / "user_breaks.py"
    path.write_text("import os\n\nimport torch\n\nimport pydynamo\n\n"
                    "SCALE = float(os.environ.get('WARM_SCALE', '2'))\n\n\n"
                    "def fn(x):\n"
                    "    y = (x * 2).sin()\n"
                    "    pydynamo.graph_break()\n"
                    "    z = y.cos() * SCALE\n"
                    "    pydynamo.graph_break()\n"
                    "    return z * y + 1\n")
    return str(path)


RESUMED = ["fn (resumed at user_breaks.py:12)", "fn (resumed at user_breaks.py:14)"]


@pytest.mark.parametrize("backend", ["codegen", "eager"])
def test_graph_breaks_load_every_piece_in_a_fresh_interpreter(tmp_path, backend):
    """A frame with graph breaks: its entry holds the break functions' code, and each resume
    function has its own entry, found by its code's content; the warm process traces nothing,
    loads all three, imports no tracing stage, and equals eager."""
    path, cache = _break_file(tmp_path), tmp_path / "cache"
    cold = _fresh(path, cache, backend)
    assert cold["ok"] and cold["traced"] == ["fn"] + RESUMED and cold["hits"] == 0, cold
    warm = _fresh(path, cache, backend)
    assert warm == {"traced": [], "hits": 3, "ok": True, "heavy": [], "origins": []}, warm


def test_a_loaded_resume_function_traced_again_knows_its_origin(tmp_path):
    """The first piece and the last load; the middle one's guard (SCALE) fails, so its loaded
    resume code is traced in the new process: it must still be known as the rest of fn (where
    it may break, its name in messages), and the result equals eager."""
    path, cache = _break_file(tmp_path), tmp_path / "cache"
    assert _fresh(path, cache, "codegen")["hits"] == 0
    warm = _fresh(path, cache, "codegen", env={"WARM_SCALE": "3"})
    assert warm["ok"] and warm["traced"] == RESUMED[:1] and warm["hits"] == 2, warm
    assert warm["origins"] == ["fn"], warm
    again = _fresh(path, cache, "codegen", env={"WARM_SCALE": "3"})   # its entry beside the first
    assert again["ok"] and again["traced"] == [] and again["hits"] == 3, again


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_damaged_piece_of_a_frame_with_breaks_is_retraced_alone(server, tmp_path, which):
    """Damage one of the three entries (fn's or a resume function's): that frame is traced again
    with one warning, the other two still load, the result equals eager; then all load again."""
    d = tmp_path / "cache"
    fns = ["file:" + _break_file(tmp_path)]
    check(server.run(d, fns=fns), traced=3, hits=0)
    path = entries(d)[which]
    blob = open(path, "rb").read()
    with open(path, "wb") as fh:
        fh.write(blob[:len(blob) // 2])
    rep = check(server.run(d, fns=fns), traced=1, warnings=1, hits=2)
    assert "damaged" in rep["cache_warnings"][0]
    check(server.run(d, fns=fns), traced=0, hits=3)


@pytest.mark.parametrize("backend", ["codegen", "eager"])
def test_dynamic_shapes_entry_serves_other_sizes_in_a_fresh_interpreter(tmp_path, backend):
    """dynamic=True: the entry's SHAPE_ENV guard is stored as its check function's source (plain
    Python) and its texts; the warm process runs three sizes on the one loaded entry, traces
    nothing, imports no tracing stage, equals eager; a size the relations refuse is explained
    from the stored texts (no ShapeEnv in that process) under "fail_on_recompile"."""
    path, cache = tmp_path / "user_dyn.py", tmp_path / "cache"
    path.write_text("import torch\n\n\ndef fn(x):\n    return (x * 2).sin().sum(0) + x.shape[0]\n")
    cold = _fresh(path, cache, backend, mode=["dynamic"])
    assert cold["ok"] and cold["traced"] == ["fn"] and cold["hits"] == 0, cold
    warm = _fresh(path, cache, backend, mode=["dynamic"])
    assert warm["ok"] and warm["traced"] == [] and warm["hits"] == 1 and warm["heavy"] == [], warm
    assert "SHAPE_ENV" in warm["refused"] and "2 <= L['x'].size()[0]" in warm["refused"], warm


@pytest.mark.parametrize("backend", ["codegen", "eager"])
def test_vmap_graphs_load_in_a_fresh_interpreter(tmp_path, backend):
    """torch.vmap over traced functions, nested: the graph calls the tracer's vmap target, a
    per-trace object pickle cannot name (the entry was not stored: ObjNotFoundError). It is
    stored by value (warm_cache.VmapTarget with its sub-graph, an attribute of the pickled graph
    and, for a C++ wrapper, its extern); the warm process traces nothing, imports no tracing
    stage, and equals eager."""
    path, cache = tmp_path / "user_vmap.py", tmp_path / "cache"
    path.write_text("import torch\n\n\ndef fn(x):\n    y = x.view(2, 4, 5)\n"
                    "    inner = lambda m: torch.vmap(lambda r: (r.sin() * 2).sum())(m)\n"
                    "    return torch.vmap(lambda m: inner(m) + m.cos().mean())(y) + 1\n")
    cold = _fresh(path, cache, backend)
    assert cold["ok"] and cold["traced"] == ["fn"] and cold["hits"] == 0, cold
    warm = _fresh(path, cache, backend)
    assert warm == {"traced": [], "hits": 1, "ok": True, "heavy": [], "origins": []}, warm
