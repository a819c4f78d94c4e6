"""TritonLauncher (codegen/triton_launch.py): the direct launch repeats Triton's own final
call, and a call Triton would compile differently (alignment, an int's value 1, divisibility,
width) never reuses another specialization's compiled kernel. A fake kernel stands in for
Triton's JITFunction, so this runs on CPU; test_gpu.py runs the real thing."""
import torch

from codegen import triton_launch
from codegen.triton_launch import TritonLauncher, specialization_key


class FakeCompiled:
    def __init__(self, log, tag):
        self.function, self.packed_metadata, self.log, self.tag = f"fn{tag}", f"meta{tag}", log, tag

    @property
    def run(self):
        return lambda *a: self.log.append(("direct", self.tag) + a)


class FakeJit:
    """`fn[grid](*args, XBLOCK=, num_warps=)` as Triton's: compiles (a new tag) and launches."""

    def __init__(self):
        self.log, self.compiles = [], 0

    def __getitem__(self, grid):
        def launch(*args, XBLOCK, num_warps):
            self.compiles += 1
            self.log.append(("generic", grid, args, XBLOCK, num_warps))
            return FakeCompiled(self.log, self.compiles)
        return launch


def launcher(monkeypatch, kinds):
    monkeypatch.setattr(triton_launch, "fast_launch_available", lambda fn: True)
    monkeypatch.setattr(triton_launch, "_hooks_set", lambda: False)
    fn = FakeJit()
    return TritonLauncher(fn, 128, 4, kinds), fn


def test_direct_launch_repeats_tritons_final_call(monkeypatch):
    lt, fn = launcher(monkeypatch, "ttif")
    a, b = torch.randn(64), torch.randn(64)
    lt("s0", (3, 1, 1), a, b, 40, 0.5)
    assert fn.log[-1] == ("generic", (3, 1, 1), (a, b, 40, 0.5), 128, 4)
    lt("s1", (5, 2, 1), a, b, 40, 0.25)
    # grid, stream, function, packed metadata, no launch metadata or hooks, args (tensors as
    # their data pointers: Triton's launcher then skips the driver's pointer check), XBLOCK
    assert fn.log[-1] == ("direct", 1, 5, 2, 1, "s1", "fn1", "meta1", None, None, None,
                          a.data_ptr(), b.data_ptr(), 40, 0.25, 128)
    assert fn.compiles == 1
    lt.launch("s2", (1, 1, 1), a, b, 40, 0.25)       # what a wrapper binds: the same call
    assert fn.log[-1][5] == "s2" and fn.compiles == 1


def test_direct_launch_looks_kernels_up_by_the_specialization_key(monkeypatch):
    """The hot path computes the key from the data pointers it passes; it must equal
    specialization_key's for every argument kind, or a call would take another
    specialization's kernel (or never hit)."""
    kinds = "tifti"
    key = specialization_key(kinds)
    t = torch.randn(64)
    for args in [(t, 16, 1.0, t[1:], 1), (t[4:], 2 ** 31, 2.5, t, 33), (t[2:], -3, 0.0, t, 0)]:
        lt, fn = launcher(monkeypatch, kinds)
        lt(None, (1, 1, 1), *args)
        assert list(lt.compiled) == [key(*args)]
        lt(None, (1, 1, 1), *args)
        assert fn.compiles == 1 and fn.log[-1][0] == "direct"


def test_a_new_specialization_compiles_again(monkeypatch):
    lt, fn = launcher(monkeypatch, "ti")
    base = torch.randn(64)
    lt(None, (1, 1, 1), base, 32)
    lt(None, (1, 1, 1), base[4:], 48)        # 16 bytes further: same alignment class, /16
    assert fn.compiles == 1 and fn.log[-1][0] == "direct"
    lt(None, (1, 1, 1), base[1:], 32)        # 4-byte offset: not 16-byte aligned
    assert fn.compiles == 2
    lt(None, (1, 1, 1), base, 33)            # not divisible by 16
    lt(None, (1, 1, 1), base, 1)             # Triton folds 1 into the kernel
    lt(None, (1, 1, 1), base, 2 ** 31)       # past int32
    assert fn.compiles == 5
    lt(None, (1, 1, 1), base[1:], 32)        # the misaligned one is kept too
    assert fn.compiles == 5 and fn.log[-1][:2] == ("direct", 2)


def test_key_separates_what_triton_specializes():
    key = specialization_key("tif")
    t = torch.randn(8)
    assert key(t, 16, 1.0) == key(t, 32, 2.5)
    assert key(t, 16, 1.0) != key(t[1:], 16, 1.0)
    assert key(t, 16, 1.0) != key(t, 1, 1.0) != key(t, 17, 1.0)
    assert key(t, 16, 1.0) != key(t, 16, 1)     # an int where a float was: another signature


def test_hooks_or_interpreter_keep_tritons_path(monkeypatch):
    fn = FakeJit()
    monkeypatch.setattr(triton_launch, "interpreting", lambda: True)
    lt = TritonLauncher(fn, 64, 2, "t")
    a = torch.randn(4)
    lt(None, (1, 1, 1), a)
    lt(None, (1, 1, 1), a)
    assert [e[0] for e in fn.log] == ["generic", "generic"]
    monkeypatch.setattr(triton_launch, "fast_launch_available", lambda fn: True)
    monkeypatch.setattr(triton_launch, "_hooks_set", lambda: True)
    lt = TritonLauncher(fn, 64, 2, "t")
    lt(None, (1, 1, 1), a)
    lt(None, (1, 1, 1), a)
    assert [e[0] for e in fn.log] == ["generic"] * 4


def test_tritons_own_hook_chains_count_as_set_only_when_they_hold_a_call():
    from triton import knobs
    assert not triton_launch._hooks_set()
    knobs.runtime.launch_enter_hook.add(print)
    try:
        assert triton_launch._hooks_set()
    finally:
        knobs.runtime.launch_enter_hook.remove(print)
    assert not triton_launch._hooks_set()


def test_installed_triton_ends_its_launch_with_the_call_we_repeat():
    """The direct launch copies the last call of JITFunction.run; for every Triton version the
    launcher accepts, that call must still read the same (3.6 on the GPU machine, 3.7 and 3.9
    in CI)."""
    import inspect
    import re
    import triton
    from triton.runtime.jit import JITFunction
    ver = tuple(int(x) for x in triton.__version__.split(".")[:2])
    lo, hi = triton_launch.FAST_LAUNCH_VERSIONS
    if not lo <= ver <= hi:
        assert not triton_launch.fast_launch_available(JITFunction.__new__(JITFunction))
        return
    src = re.sub(r"\s+", " ", inspect.getsource(JITFunction.run))
    assert ("kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, "
            "launch_metadata, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, "
            "*bound_args.values())") in src
    from triton.compiler.compiler import CompiledKernel
    assert isinstance(inspect.getattr_static(CompiledKernel, "run"), property)


def test_triton_kernels_on_cpu_tensors_without_the_interpreter_run_eagerly(monkeypatch):
    """backend_kernels="triton" on CPU tensors where Triton compiles for real (a GPU host
    without TRITON_INTERPRET): the launch raised "Pointer argument cannot be accessed from
    Triton" where eager returns; the graph now runs eagerly, with one warning saying why."""
    import warnings
    import pydynamo
    monkeypatch.setenv("TRITON_INTERPRET", "0")

    def f(x):
        return (x.t() * 2).sum(0)
    x = torch.randn(5, 3)
    opt = pydynamo.optimize(f, backend="codegen", options={"backend_kernels": "triton"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = opt(x)
    torch.testing.assert_close(got, f(x))
    said = [str(w.message) for w in caught if "Triton kernels run on CUDA tensors" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]


def test_a_bound_launch_knows_its_launcher(monkeypatch):
    lt, _ = launcher(monkeypatch, "t")
    assert TritonLauncher.of(lt.launch) is lt
    slow = TritonLauncher(FakeJit(), 64, 2, None)          # no kinds: Triton's path
    assert TritonLauncher.of(slow.launch) is slow
    assert TritonLauncher.of(print) is None and TritonLauncher.of(lambda: 0) is None


class FlatLauncher:
    """Triton 3.6's CudaLauncher.__call__ (the GPU machine's), the part the direct launch skips:
    scratch allocation, then the C launch with everything flat."""

    def __init__(self, log, scratch=0):
        self.log, self.global_scratch_size, self.profile_scratch_size = log, scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.launch = lambda *a: self.log.append(("c-launch",) + a)

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        global_scratch = profile_scratch = None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    global_scratch, profile_scratch, *args)


class TupleLauncher:
    """Triton 3.7's: the kernel's arguments as one tuple after their annotations."""

    def __init__(self, log):
        self.log, self.global_scratch_size, self.profile_scratch_size = log, 0, 0
        self.launch_cooperative_grid, self.launch_pdl = False, False
        self.arg_annotations, self.kernel_signature = "ann", "sig"
        self.launch = lambda *a: self.log.append(("c-launch",) + a)

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook,
                 launch_exit_hook, *args):
        global_scratch = profile_scratch = None
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, global_scratch,
                    profile_scratch, self.arg_annotations, self.kernel_signature, args)


class LauncherJit(FakeJit):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def __getitem__(self, grid):
        def launch(*args, XBLOCK, num_warps):
            self.compiles += 1
            ck = FakeCompiled(self.log, self.compiles)
            run = self.make(self.log)
            ck.__class__ = type("CK", (FakeCompiled,), {"run": run})
            self.log.append(("generic", grid, args, XBLOCK, num_warps))
            return ck
        return launch


def _launch_twice(monkeypatch, make):
    monkeypatch.setattr(triton_launch, "fast_launch_available", lambda fn: True)
    monkeypatch.setattr(triton_launch, "_hooks_set", lambda: False)
    fn = LauncherJit(make)
    lt = TritonLauncher(fn, 128, 4, "tti")
    a, b = torch.randn(8), torch.randn(8)
    lt.launch("s", (2, 1, 1), a, b, 7)
    lt.launch("s", (3, 1, 1), a, b, 7)
    return fn.log[-1], a.data_ptr(), b.data_ptr()


def test_direct_launch_calls_the_c_launch_of_a_36_style_launcher(monkeypatch):
    call, pa, pb = _launch_twice(monkeypatch, FlatLauncher)
    # what FlatLauncher.__call__ would have passed for run(3, 1, 1, "s", fn1, meta1, None x3, ...)
    assert call == ("c-launch", 3, 1, 1, "s", "fn1", False, True, None, None, "meta1", None, None,
                    None, pa, pb, 7, 128)


def test_direct_launch_calls_the_c_launch_of_a_37_style_launcher(monkeypatch):
    call, pa, pb = _launch_twice(monkeypatch, TupleLauncher)
    assert call == ("c-launch", 3, 1, 1, "s", "fn1", False, False, "meta1", None, None, None,
                    None, None, "ann", "sig", (pa, pb, 7, 128))


def test_a_launcher_with_scratch_or_another_text_keeps_its_call(monkeypatch):
    call, pa, pb = _launch_twice(monkeypatch, lambda log: FlatLauncher(log, scratch=64))
    assert call[0] == "c-launch" and call[8] is None     # through __call__, as Triton runs it

    class Other(FlatLauncher):
        def __call__(self, gridX, gridY, gridZ, stream, function, *args):
            self.launch(gridX, gridY, gridZ, stream, function, "other", *args)
    call, pa, pb = _launch_twice(monkeypatch, Other)
    assert call[:7] == ("c-launch", 3, 1, 1, "s", "fn1", "other")


def test_installed_tritons_launcher_has_a_known_form():
    """A new Triton whose CudaLauncher.__call__ reads differently keeps working (through
    `run`) but loses the shortcut: this says so."""
    import triton
    from triton.backends.nvidia.driver import CudaLauncher
    ver = tuple(int(x) for x in triton.__version__.split(".")[:2])
    form = triton_launch.launcher_form(CudaLauncher.__new__(CudaLauncher))
    assert form == ("flat" if ver <= (3, 6) else "tuple"), (triton.__version__, form)


def test_an_armed_launcher_takes_its_shortcut_only_for_the_same_specialization(monkeypatch):
    """After its first aligned hit the launch function is recompiled with that kernel bound:
    a later call with aligned pointers and the same int values (float types) calls it at
    once; a misaligned pointer, another int value or a float given as an int goes through the
    key and compiles or finds its own specialization, as before arming."""
    lt, fn = launcher(monkeypatch, "tif")
    base = torch.randn(64)
    lt(None, (1, 1, 1), base, 32, 0.5)           # compiles (1)
    lt(None, (1, 1, 1), base, 32, 0.5)           # hit: arms with kernel 1
    code = lt.launch.__code__
    lt(None, (2, 1, 1), base[4:], 32, 0.25)      # aligned, same int, a float: the shortcut
    assert lt.launch.__code__ is code
    assert fn.log[-1] == ("direct", 1, 2, 1, 1, None, "fn1", "meta1", None, None, None,
                          base[4:].data_ptr(), 32, 0.25, 128)
    lt(None, (1, 1, 1), base[1:], 32, 0.5)       # misaligned: another specialization
    lt(None, (1, 1, 1), base, 48, 0.5)           # 48: the same key as 32 (both /16)
    assert fn.compiles == 2 and fn.log[-1][:2] == ("direct", 1)
    lt(None, (1, 1, 1), base, 33, 0.5)           # not divisible by 16: compiles
    lt(None, (1, 1, 1), base, 32, 1)             # an int where the float was: compiles
    assert fn.compiles == 4
    lt(None, (1, 1, 1), base, 32, 0.5)
    assert fn.log[-1][:2] == ("direct", 1)
