"""Cache faults (issue 14): a damaged, foreign, read-only, deleted, re-keyed or contended cache
never crashes a process and never gives a wrong answer.

Each scenario runs in its own process (forked from one server that has imported torch, see
cache_child.py): it compiles the same small functions with the codegen backend against a copy
of one cache built once per module, and checks them against eager. A damaged artifact must
cost exactly one CacheWarning and one rebuild, after which the file verifies again (the next
process loads it silently). Before issue 14 a truncated kernel or guard library killed every
later process with SIGBUS, overwritten bytes with SIGILL, swapped libraries with SIGSEGV.
"""
import glob
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import warnings

import pytest

from codegen import codecache
from pydynamo import config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHILD = os.path.join(HERE, "cache_child.py")


class Server:
    """A scenario server (`python CHILD --server`, cache_child.py's `serve`); test_warm_start.py
    starts one on warm_child.py."""

    def __init__(self, child=CHILD):
        self.proc = subprocess.Popen([sys.executable, child, "--server"], cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, request: dict, parallel: int = 1):
        """Each of `parallel` children's answer to `request` (the answer itself for one)."""
        self.proc.stdin.write(json.dumps(dict(request, parallel=parallel)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the scenario server died"
        answers = json.loads(line)
        return answers if parallel > 1 else answers[0]

    def run(self, cache, modes=(), config=None, options=None, parallel=1):
        return self.ask({"cache": str(cache), "modes": list(modes), "config": config or {},
                         "options": options or {}}, parallel)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


def check(answer, warnings=0, compiles=None):
    """The scenario ran to the end, every compiled result equals eager, nothing fell back to
    eager, and the cache said exactly `warnings` things."""
    assert answer["status"] == "exit 0", answer
    rep = answer["report"]
    assert rep["ok"], rep
    assert rep["eager_graphs"] == 0, rep
    assert len(rep["cache_warnings"]) == warnings, rep["cache_warnings"]
    if compiles is not None:
        assert rep["compiles"] == compiles, rep
    return rep


def test_harness_reports_a_crashing_child_and_keeps_serving(server, tmp_path):
    assert server.run(tmp_path, modes=["crash"]) == {"status": "signal SIGBUS", "report": None}
    with pytest.raises(AssertionError):
        check(server.run(tmp_path, modes=["crash"]))


@pytest.fixture(scope="module")
def base(server, tmp_path_factory):
    """One cache (two kernel libraries, two wrappers, the guard extension, the libmvec marker),
    built once; tests damage copies of it."""
    d = tmp_path_factory.mktemp("base") / "cache"
    _seed_guard_extension(d)
    rep = check(server.run(d), compiles=2)
    assert rep["guards"]
    assert len(kernel_libs(d)) == 2 and len(guard_libs(d)) == 1
    check(server.run(d), compiles=0)         # warm: verified, silent, nothing built
    return d


def _seed_guard_extension(d):
    """The guard extension (~10 s to build) from this process's own cache, when it is there
    and verifies (the test run's cache: other tests load it too); else the base run builds it."""
    from pydynamo import tensor_check
    for p in guard_libs(codecache.cache_dir()):
        if tensor_check._key()[:32] in p and verified(p):
            os.makedirs(os.path.join(d, "guards"))
            shutil.copy(p, os.path.join(d, "guards"))


@pytest.fixture
def cache(base, tmp_path):
    d = tmp_path / "cache"
    shutil.copytree(base, d)
    return d


def kernel_libs(d):
    return sorted(glob.glob(os.path.join(d, "cpp", "*", "*.so")))


def guard_libs(d):
    return sorted(glob.glob(os.path.join(d, "guards", "*.so")))


def verified(path):
    """What the next process checks before loading: the trailer's key and the content hash."""
    blob = open(path, "rb").read()
    n, _ = struct.unpack_from("<Q8s", blob, len(blob) - 16)
    key = json.loads(blob[len(blob) - 16 - n:len(blob) - 16])["key"]
    payload, reason = codecache._unseal(blob, key)
    return payload is not None and os.path.basename(path).find(key[:32]) >= 0


def text_section(path):
    """(offset, size) of .text in an ELF64 file."""
    b = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    sec = [struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize) for i in range(shnum)]
    strtab = sec[shstrndx][4]
    for name, _, _, _, off, size in sec:
        if b[strtab + name:b.index(b"\0", strtab + name)] == b".text":
            return off, size
    raise AssertionError("no .text")


def truncate(p):
    os.truncate(p, os.path.getsize(p) // 2)


def flip_text(p):
    """Every instruction of .text becomes ud2: SIGILL for any process that runs it unverified
    (a few flipped bytes may sit in code the test never runs)."""
    off, size = text_section(p)
    with open(p, "r+b") as f:
        f.seek(off)
        f.write(b"\x0f\x0b" * (size // 2))


def zero_length(p):
    open(p, "wb").close()


def garbage(p):
    with open(p, "wb") as f:
        f.write(hashlib.sha256(b"garbage").digest() * 500)


def tamper_key(p):
    """The trailer claims another key (as if built by another toolchain version)."""
    blob = bytearray(open(p, "rb").read())
    i = blob.rindex(b'"key": "') + len(b'"key": "')
    blob[i] = ord("0") if blob[i] != ord("0") else ord("1")
    open(p, "wb").write(bytes(blob))


@pytest.mark.parametrize("damage", [truncate, flip_text, zero_length, garbage, tamper_key],
                         ids=lambda d: d.__name__)
def test_damaged_kernel_library_is_rebuilt_with_one_warning(server, cache, damage):
    lib = kernel_libs(cache)[0]
    damage(lib)
    rep = check(server.run(cache), warnings=1, compiles=1)
    assert lib in rep["cache_warnings"][0] and rep["repairs"] == 1
    assert verified(lib)
    if damage is truncate:                   # the next process: verified, silent, no build
        check(server.run(cache), compiles=0)


def test_swapped_kernel_libraries_are_both_rebuilt(server, cache):
    a, b = kernel_libs(cache)
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    rep = check(server.run(cache), warnings=2, compiles=2)
    assert all("built for key" in w for w in rep["cache_warnings"])
    assert verified(a) and verified(b)


def test_library_copied_over_another_name_is_rebuilt(server, cache):
    a, b = kernel_libs(cache)
    shutil.copyfile(a, b)                    # a valid library, sealed, but for another key
    check(server.run(cache), warnings=1, compiles=1)
    assert verified(b) and open(a, "rb").read() != open(b, "rb").read()


def test_truncated_guard_extension_is_rebuilt(server, cache):
    ext, = guard_libs(cache)
    truncate(ext)
    rep = check(server.run(cache), warnings=1, compiles=0)
    assert rep["guards"] and "guard extension" in rep["cache_warnings"][0]
    assert verified(ext)
    rep = check(server.run(cache), compiles=0)      # the next process loads it silently
    assert rep["guards"]


def test_damaged_wrapper_is_rewritten(server, cache):
    check(server.run(cache), compiles=0)     # wrappers name their library's path: new ones
    wrappers = [p for p in glob.glob(os.path.join(cache, "wrappers", "*", "*.py"))
                if str(cache) in open(p).read()]
    assert len(wrappers) == 2
    w = wrappers[0]
    text = open(w).read()
    open(w, "w").write(text.replace("def call(", "def call_(", 1) + "\nraise SystemExit(3)\n")
    rep = check(server.run(cache), warnings=1, compiles=0)
    assert "wrapper" in rep["cache_warnings"][0]
    assert hashlib.sha256(open(w, "rb").read()).hexdigest() == os.path.basename(w)[:-3]


@pytest.mark.parametrize("damage", [zero_length, garbage, tamper_key], ids=lambda d: d.__name__)
def test_damaged_libmvec_marker_is_probed_again(server, cache, damage):
    markers = glob.glob(os.path.join(cache, "cpp", "libmvec-*"))
    if not markers:
        pytest.skip("libmvec is probed on x86-64 Linux only")
    damage(markers[0])
    rep = check(server.run(cache), warnings=1, compiles=0)
    assert "libmvec" in rep["cache_warnings"][0]
    assert codecache._unseal(open(markers[0], "rb").read(),
                             _sealed_key(open(os.path.join(markers[0]), "rb").read()))[0] in (b"0", b"1")


def _sealed_key(blob):
    n, _ = struct.unpack_from("<Q8s", blob, len(blob) - 16)
    return json.loads(blob[len(blob) - 16 - n:len(blob) - 16])["key"]


def test_libraries_deleted_while_running_keep_working_and_are_rebuilt(server, cache):
    check(server.run(cache, modes=["delete"]), compiles=0)
    assert kernel_libs(cache) == []
    check(server.run(cache), compiles=2)         # a cold miss: rebuilt without a warning
    assert len(kernel_libs(cache)) == 2 and all(verified(p) for p in kernel_libs(cache))


def test_toolchain_change_builds_new_libraries_silently(server, cache):
    before = kernel_libs(cache)
    check(server.run(cache, options={"vector_width": "256"}), compiles=2)
    after = kernel_libs(cache)
    assert len(after) == 4 and set(before) < set(after)


def test_read_only_cache_serves_verified_entries_and_builds_elsewhere(server, cache):
    a, b = kernel_libs(cache)
    os.unlink(b)                             # one library must be built
    for d, dirs, files in os.walk(cache):
        for n in dirs + files:
            p = os.path.join(d, n)
            os.chmod(p, os.stat(p).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    os.chmod(cache, 0o555)
    try:
        modes = ["extra"] + (["no_capabilities"] if os.geteuid() == 0 else [])
        rep = check(server.run(cache, modes=modes), warnings=1, compiles=2)  # g's and h's: elsewhere
        assert "cannot write" in rep["cache_warnings"][0] and rep["guards"]
        assert kernel_libs(cache) == [a]
    finally:
        for d, dirs, files in os.walk(cache):
            os.chmod(d, 0o755)


def test_two_processes_racing_on_a_cold_cache_both_succeed(server, tmp_path):
    d = tmp_path / "cache"
    answers = server.run(d, config={"c_tensor_guards": False}, parallel=2)
    for a in answers:
        check(a)
    libs = kernel_libs(d)
    assert len(libs) == 2 and all(verified(p) for p in libs)
    leftovers = [p for p in glob.glob(os.path.join(d, "**", "*"), recursive=True)
                 if p.endswith(".tmp")]
    assert leftovers == []


# ------------------------------------------------------------------ keys and text artifacts

def test_source_key_covers_the_toolchain(monkeypatch):
    src = "extern \"C\" int f() { return 1; }"
    k = codecache.source_key(src)
    monkeypatch.setattr(codecache, "compiler_version", lambda: "g++ (other) 99.1")
    k_compiler = codecache.source_key(src)
    monkeypatch.undo()
    monkeypatch.setattr(codecache, "target_id", lambda: "x86_64:othercpu glibc 2.99")
    k_target = codecache.source_key(src)
    monkeypatch.undo()
    k_flags = codecache.source_key(src, codecache.cxxflags("256"))
    assert len({k, k_compiler, k_target, k_flags}) == 4


def test_guard_extension_key_covers_torch_python_and_compiler(monkeypatch):
    import torch
    from pydynamo import tensor_check
    k = tensor_check._key()
    changed = []
    for target, name, value in [(torch, "__version__", "0.0.1"), (sys, "version", "3.99.0"),
                                (codecache, "compiler_version", lambda: "g++ 99")]:
        monkeypatch.setattr(target, name, value)
        changed.append(tensor_check._key())
        monkeypatch.undo()
    monkeypatch.setattr(codecache, "CXX", "clang++")
    changed.append(tensor_check._key())
    assert len(set(changed + [k])) == 5


def test_damaged_triton_module_is_rewritten_before_import(monkeypatch, tmp_path):
    """The generated Triton module is imported from its file: the file must hold the text."""
    from codegen import triton_launch
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    src = "VALUE = 41 + 1\n"
    monkeypatch.setattr(triton_launch, "_modules", {})
    mod, path = triton_launch.load_module(src)
    assert mod.VALUE == 42
    open(path, "w").write("VALUE = 0\n")
    monkeypatch.setattr(triton_launch, "_modules", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod, path2 = triton_launch.load_module(src)
    assert mod.VALUE == 42 and path2 == path and open(path).read() == src
    assert len(_cache_warnings(caught)) == 1


def _cache_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, codecache.CacheWarning)]


def test_verified_file_that_fails_to_load_is_rebuilt_once(monkeypatch, tmp_path):
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))
    builds, loads = [], []

    def build(tmp):
        builds.append(tmp)
        open(tmp, "wb").write(b"payload")

    def load(path):
        loads.append(path)
        if len(loads) == 2:                  # the second process: the loader refuses it once
            raise OSError("undefined symbol: pd_missing")
        return open(path, "rb").read()[:7]
    assert codecache.load_binary("x/a.bin", "k" * 64, build, load, "test artifact")[0] == b"payload"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, path = codecache.load_binary("x/a.bin", "k" * 64, build, load, "test artifact")
    assert out == b"payload" and len(builds) == 2 and len(loads) == 3
    assert len(_cache_warnings(caught)) == 1 and "fails to load" in _cache_warnings(caught)[0]


def test_file_where_the_cache_dir_should_be_falls_back_to_a_temp_dir(monkeypatch, tmp_path):
    (tmp_path / "notadir").write_text("x")
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "notadir"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p1 = codecache.write_wrapper("A = 1\n")
        p2 = codecache.write_wrapper("B = 2\n")
    assert open(p1).read() == "A = 1\n" and open(p2).read() == "B = 2\n"
    assert not p1.startswith(str(tmp_path))
    assert len(_cache_warnings(caught)) == 1 and "cannot write" in _cache_warnings(caught)[0]
    assert codecache.write_wrapper("A = 1\n") == p1     # found again in the fallback
