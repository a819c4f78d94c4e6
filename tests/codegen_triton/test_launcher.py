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
    # grid, stream, function, packed metadata, no launch metadata or hooks, args, XBLOCK
    assert fn.log[-1] == ("direct", 1, 5, 2, 1, "s1", "fn1", "meta1", None, None, None,
                          a, b, 40, 0.25, 128)
    assert fn.compiles == 1


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
