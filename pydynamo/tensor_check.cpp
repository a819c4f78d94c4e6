// The C++ TENSOR_MATCH check (pydynamo/tensor_check.py says what it is for and how it is loaded).
// Built at install time by CMakeLists.txt through pydynamo/tensor_check_build.py into
// pydynamo/_tensor_check; built on first use into the cache dir when no installed build matches
// the running torch. One source for both: the module is named pydynamo._tensor_check either way.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/Dtype.h>
#include <ATen/core/grad_mode.h>
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

// entry(tensors, specs, grad) -> int: a generated wrapper's entry check of all its tensor
// inputs in one call (codegen/wrapper.py; runtime.entry_check is the same predicate in Python).
//   -2  grad mode is on and grad == 2 (a parameter needs grad), or grad == 1 and an input
//       requires grad: the caller takes autograd's path;
//   i   the first input whose dtype, device, sizes or strides differ from specs[i] (a -1 size
//       or stride: any; the rank must match), or that is not a tensor;
//   -1  every input matches. Class, requires_grad, inference and conj/neg are not compared:
//       the wrapper's kernels do not depend on them (the frame's guards check them).
PyObject* entry(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 3 || !PyTuple_Check(a[0]) || !PyTuple_Check(a[1]) ||
      PyTuple_GET_SIZE(a[0]) != PyTuple_GET_SIZE(a[1])) {
    PyErr_SetString(PyExc_TypeError, "entry(tensors: tuple, specs: tuple of equal length, grad)");
    return nullptr;
  }
  Py_ssize_t count = PyTuple_GET_SIZE(a[0]);
  long grad = PyLong_AsLong(a[2]);
  if (grad == -1 && PyErr_Occurred()) return nullptr;
  if (grad && at::GradMode::is_enabled()) {
    if (grad == 2) return PyLong_FromLong(-2);
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* o = PyTuple_GET_ITEM(a[0], i);
      if (THPVariable_Check(o) && THPVariable_Unpack(o).requires_grad())
        return PyLong_FromLong(-2);
    }
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* o = PyTuple_GET_ITEM(a[0], i);
    auto* s = static_cast<Spec*>(PyCapsule_GetPointer(PyTuple_GET_ITEM(a[1], i),
                                                      "pydynamo.TensorSpec"));
    if (!s) return nullptr;
    if (!THPVariable_Check(o)) return PyLong_FromSsize_t(i);
    try {
      const at::Tensor& t = THPVariable_Unpack(o);
      if (t.scalar_type() != s->dtype ||
          (s->cpu ? !t.is_cpu() : t.device() != s->device) ||
          !same(t.sizes(), s->sizes) || !same(t.strides(), s->strides))
        return PyLong_FromSsize_t(i);
    } catch (...) {   // a layout without strides: not what the kernels were compiled for
      return PyLong_FromSsize_t(i);
    }
  }
  return PyLong_FromLong(-1);
}

PyMethodDef methods[] = {
  {"make_spec", (PyCFunction)(void (*)(void))make_spec, METH_FASTCALL, "a TensorSpec capsule"},
  {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL, "tensor matches spec"},
  {"entry", (PyCFunction)(void (*)(void))entry, METH_FASTCALL,
   "a wrapper's entry check: -2 autograd, i first mismatching input, -1 all match"},
  {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "pydynamo._tensor_check", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__tensor_check(void) { return PyModule_Create(&module); }
