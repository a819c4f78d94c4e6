"""TENSOR_MATCH in C++: the hot guard path's tensor check, built on first use against torch.

A cache hit checks every tensor the frame reads (inputs and each parameter). Done in Python
that is about 390 ns a tensor (shape, stride(), is_neg(), _version, dtype, ... each a getter
call that allocates): 7.8 µs of guard for 20 tensors (benchmarks/bench_guards.py). This
module compiles a small CPython extension against torch's headers (torch ships them) that
checks one tensor against a prebuilt spec in ~35 ns (0.7 µs for the same 20 tensors).

Invariants:
  * `check(t, spec)` is the same predicate as the Python conditions guards.py emits for a
    TensorSpec (exact class, dtype, device, sizes/strides with None = any, requires_grad,
    inference, conj for complex, neg for floating/complex); any C++ exception is a miss.
  * Optional: no compiler, no headers, a failed build or config.c_tensor_guards False
    ($PYDYNAMO_C_TENSOR_GUARDS=0) give `checker() is None`, and guards.py emits the Python
    conditions instead (logged once).
  * Built once per (source, torch, Python, compiler) into the cache dir through
    codegen.codecache.load_extension, the kernel libraries' helper: written atomically,
    verified (key and content hash) before it is imported, rebuilt with one warning when
    damaged; a warm process compiles nothing.
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
import threading

from codegen import codecache
from pydynamo import config

log = logging.getLogger("pydynamo.guards")

SOURCE = r"""
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/Dtype.h>
#include <vector>
#include <string>

namespace {

struct Spec {
  PyObject* cls;                 // borrowed: the capsule keeps a reference (see make_spec)
  c10::ScalarType dtype;
  bool cpu;
  c10::Device device{c10::kCPU};
  std::vector<int64_t> sizes, strides;   // -1: any (a symbolic dim, checked by SHAPE_ENV)
  bool requires_grad, inference;
  int conj, neg;                 // -1: not checked for this dtype
};

void free_spec(PyObject* cap) {
  auto* s = static_cast<Spec*>(PyCapsule_GetPointer(cap, "pydynamo.TensorSpec"));
  Py_XDECREF(s->cls);
  delete s;
}

bool ints(PyObject* seq, std::vector<int64_t>& out) {
  PyObject* fast = PySequence_Fast(seq, "sizes must be a sequence");
  if (!fast) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* o = PySequence_Fast_GET_ITEM(fast, i);
    if (o == Py_None) { out.push_back(-1); continue; }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return false; }
    out.push_back(v);
  }
  Py_DECREF(fast);
  return true;
}

// make_spec(cls, dtype, device_str, sizes, strides, requires_grad, inference, conj, neg)
PyObject* make_spec(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 9 || !THPDtype_Check(a[1]) || !PyUnicode_Check(a[2])) {
    PyErr_SetString(PyExc_TypeError, "make_spec(cls, dtype, device, sizes, strides, "
                    "requires_grad, inference, conj, neg)");
    return nullptr;
  }
  auto* s = new Spec();
  s->cls = a[0];
  Py_INCREF(s->cls);
  s->dtype = reinterpret_cast<THPDtype*>(a[1])->scalar_type;
  try {
    s->device = c10::Device(std::string(PyUnicode_AsUTF8(a[2])));
  } catch (const std::exception& e) {
    Py_DECREF(s->cls); delete s;
    PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  }
  s->cpu = s->device.is_cpu();
  s->requires_grad = PyObject_IsTrue(a[5]);
  s->inference = PyObject_IsTrue(a[6]);
  s->conj = PyLong_AsLong(a[7]);
  s->neg = PyLong_AsLong(a[8]);
  if (!ints(a[3], s->sizes) || !ints(a[4], s->strides) || PyErr_Occurred()) {
    Py_DECREF(s->cls); delete s;
    return nullptr;
  }
  PyObject* cap = PyCapsule_New(s, "pydynamo.TensorSpec", free_spec);
  if (!cap) { Py_DECREF(s->cls); delete s; }
  return cap;
}

bool same(c10::IntArrayRef got, const std::vector<int64_t>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != -1 && got[i] != want[i]) return false;
  return true;
}

// check(tensor, spec) -> bool
PyObject* check(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 2) { PyErr_SetString(PyExc_TypeError, "check(tensor, spec)"); return nullptr; }
  auto* s = static_cast<Spec*>(PyCapsule_GetPointer(a[1], "pydynamo.TensorSpec"));
  if (!s) return nullptr;
  PyObject* o = a[0];
  if (reinterpret_cast<PyObject*>(Py_TYPE(o)) != s->cls || !THPVariable_Check(o)) Py_RETURN_FALSE;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (t.scalar_type() != s->dtype) Py_RETURN_FALSE;
    if (s->cpu ? !t.is_cpu() : t.device() != s->device) Py_RETURN_FALSE;
    if (!same(t.sizes(), s->sizes) || !same(t.strides(), s->strides)) Py_RETURN_FALSE;
    if (t.requires_grad() != s->requires_grad || t.is_inference() != s->inference) Py_RETURN_FALSE;
    if (s->conj >= 0 && t.is_conj() != static_cast<bool>(s->conj)) Py_RETURN_FALSE;
    if (s->neg >= 0 && t.is_neg() != static_cast<bool>(s->neg)) Py_RETURN_FALSE;
  } catch (...) {   // sparse/nested layouts without strides, ...: a miss, as in Python
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

PyMethodDef methods[] = {
  {"make_spec", (PyCFunction)(void (*)(void))make_spec, METH_FASTCALL, "a TensorSpec capsule"},
  {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL, "tensor matches spec"},
  {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "pd_tensor_check", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_pd_tensor_check(void) { return PyModule_Create(&module); }
"""

_lock = threading.Lock()
_state: dict = {}            # "mod": the loaded module or None once decided


def _command(src: str, out: str) -> list:
    import torch
    from torch.utils import cpp_extension
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return ([codecache.CXX, "-O2", "-shared", "-fPIC", "-std=c++20", "-w",
             f"-D_GLIBCXX_USE_CXX11_ABI={abi}", src, "-o", out]
            + [f"-I{p}" for p in cpp_extension.include_paths()]
            + [f"-I{sysconfig.get_paths()['include']}"]
            + [f"-L{p}" for p in cpp_extension.library_paths()]
            + ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"])


def _key() -> str:
    """Every input of the build: the source, torch (version, build, headers and libraries: the
    paths in the command), Python's ABI (version, EXT_SUFFIX), the compiler and its version."""
    import torch
    return codecache.key_of(SOURCE, torch.__version__, str(torch.version.git_version),
                            sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "",
                            " ".join(_command("SRC", "OUT")), codecache.compiler_version())


def _load():
    """The extension from the cache through codecache.load_extension (the kernels' helper):
    verified before it is imported, a damaged or foreign file rebuilt with one warning."""
    import torch
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = _key()

    def load(path):
        loader = importlib.machinery.ExtensionFileLoader("pd_tensor_check", path)
        spec = importlib.util.spec_from_file_location("pd_tensor_check", path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    mod, _ = codecache.load_extension(
        os.path.join("guards", f"pd_tensor_check_{key[:32]}{suffix}"), key, SOURCE, _command,
        load, "C++ tensor guard extension", f"torch {torch.__version__}, Python "
        f"{sys.version.split()[0]}, {codecache.compiler_version()}")
    return mod


def module():
    """The compiled extension, or None (disabled, or it could not be built: logged once)."""
    if "mod" in _state:
        return _state["mod"]
    with _lock:
        if "mod" not in _state:
            mod = None
            if config.c_tensor_guards:
                try:
                    mod = _load()
                except Exception as e:      # no compiler/headers: the Python checks serve
                    log.warning("pydynamo: C++ tensor guard check unavailable, guards check "
                                "tensors in Python (slower cache hits): %s",
                                str(e).strip().splitlines()[-1] if str(e).strip() else e)
            _state["mod"] = mod
    return _state["mod"]


@contextlib.contextmanager
def disabled():
    """Guards compiled inside emit the Python conditions (benchmarks and tests compare both)."""
    module()
    saved = _state["mod"]
    _state["mod"] = None
    try:
        yield
    finally:
        _state["mod"] = saved


def make_spec(mod, s):
    """A capsule for guards.TensorSpec `s` (sizes/strides entries None = any)."""
    conj = int(s.is_conj) if s.dtype.is_complex else -1
    neg = int(s.is_neg) if (s.dtype.is_complex or s.dtype.is_floating_point) else -1
    return mod.make_spec(s.cls, s.dtype, str(s.device), tuple(s.shape), tuple(s.stride),
                         bool(s.requires_grad), bool(s.is_inference), conj, neg)
