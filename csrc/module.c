/* module.c: the Python face of pydynamo._C (docs/INTERNALS.md section 1).
 *
 * Thin argument checking and conversion only; behaviour lives in hook.c and cache.c. A pure C
 * module init, built by CMakeLists.txt with CMake's FindPython (no pybind11).
 */
#include "pydynamo_c.h"

static int pd_check_code(PyObject *code) {
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "expected a code object, got %.100s",
                     Py_TYPE(code)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *m_set_eval_frame(PyObject *self, PyObject *cb) {
    if (cb == Py_None) {
        return pd_set_eval_frame(NULL);
    }
    if (cb != Py_False && !PyCallable_Check(cb)) {
        PyErr_Format(PyExc_TypeError,
                     "set_eval_frame expects None, False or a callable, got %.100s",
                     Py_TYPE(cb)->tp_name);
        return NULL;
    }
    return pd_set_eval_frame(cb);
}

static PyObject *m_get_eval_frame(PyObject *self, PyObject *unused) { return pd_get_eval_frame(); }

static PyObject *m_get_cache_entries(PyObject *self, PyObject *code) {
    if (pd_check_code(code) < 0) {
        return NULL;
    }
    pd_cache *c = pd_cache_get(code);
    return c == NULL ? PyList_New(0) : PyList_GetSlice(c->entries, 0, PY_SSIZE_T_MAX);
}

static PyObject *m_clear_code(PyObject *self, PyObject *code) {
    if (pd_check_code(code) < 0 || pd_cache_clear_code(code) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *m_clear_all(PyObject *self, PyObject *unused) {
    if (pd_cache_clear_all() < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static const char *const pd_state_names[] = {"default", "skip", "run_only"};

static PyObject *m_set_code_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *name;
    if (nargs != 2 || pd_check_code(args[0]) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "set_code_state(code, state)");
        }
        return NULL;
    }
    if ((name = PyUnicode_AsUTF8(args[1])) == NULL) {
        return NULL;
    }
    for (int s = 0; s < 3; s++) {
        if (strcmp(name, pd_state_names[s]) == 0) {
            pd_cache *c = pd_cache_get_or_create(args[0]);
            if (c == NULL) {
                return NULL;
            }
            c->state = (pd_state)s;
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_ValueError, "state must be 'default', 'skip' or 'run_only', not %R",
                 args[1]);
    return NULL;
}

static PyObject *m_get_code_state(PyObject *self, PyObject *code) {
    if (pd_check_code(code) < 0) {
        return NULL;
    }
    pd_cache *c = pd_cache_get(code);
    return PyUnicode_FromString(pd_state_names[c == NULL ? PD_STATE_DEFAULT : c->state]);
}

static PyObject *m_hook_installed(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(pd_hook_installed());
}

static PyObject *m_active_threads(PyObject *self, PyObject *unused) {
    return PyLong_FromSsize_t(pd_active_threads());
}

static PyObject *m_cached_code_count(PyObject *self, PyObject *unused) {
    return PyLong_FromSsize_t(pd_cache_count());
}

static PyObject *m_room_chunks_allocated(PyObject *self, PyObject *unused) {
    return PyLong_FromSsize_t(pd_room_chunks_allocated());
}

static PyMethodDef pd_methods[] = {
    {"set_eval_frame", m_set_eval_frame, METH_O,
     "set_eval_frame(cb) -> previous. This thread's setting: None = off, False = run-only "
     "(cached entries only), a callable = compile mode."},
    {"get_eval_frame", m_get_eval_frame, METH_NOARGS, "This thread's current setting."},
    {"get_cache_entries", m_get_cache_entries, METH_O,
     "get_cache_entries(code) -> [(guard, code), ...], most recently hit first."},
    {"clear_code", m_clear_code, METH_O, "Drop the entries and state mark of one code object."},
    {"clear_all", m_clear_all, METH_NOARGS, "clear_code for every code object with cache state."},
    {"set_code_state", (PyCFunction)(void (*)(void))m_set_code_state, METH_FASTCALL,
     "set_code_state(code, 'default' | 'skip' | 'run_only')"},
    {"get_code_state", m_get_code_state, METH_O, "get_code_state(code) -> state name"},
    {"hook_installed", m_hook_installed, METH_NOARGS,
     "Whether the frame hook is currently installed in the interpreter."},
    {"active_threads", m_active_threads, METH_NOARGS,
     "Number of threads whose setting is not None."},
    {"cached_code_count", m_cached_code_count, METH_NOARGS,
     "Number of code objects that currently carry cache state."},
    {"room_chunks_allocated", m_room_chunks_allocated, METH_NOARGS,
     "Data-stack chunks allocated so far to give compiled frames room (reused per thread)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef pd_module = {
    PyModuleDef_HEAD_INIT, "pydynamo._C",
    "PEP 523 frame hook and guard-keyed per-code cache of pydynamo.", -1, pd_methods,
};

static PyObject *pd_make_sentinel(const char *name) {
    /* A unique, printable marker object. */
    return PyUnicode_FromFormat("<pydynamo._C.%s>", name);
}

PyMODINIT_FUNC PyInit__C(void) {
    if (pd_cache_init() < 0 || pd_hook_init() < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&pd_module);
    if (m == NULL) {
        return NULL;
    }
    if (pd_SKIP_CODE == NULL) {
        pd_SKIP_CODE = pd_make_sentinel("SKIP_CODE");
        pd_RUN_ONLY = pd_make_sentinel("RUN_ONLY");
        if (pd_SKIP_CODE == NULL || pd_RUN_ONLY == NULL) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddObjectRef(m, "SKIP_CODE", pd_SKIP_CODE) < 0 ||
        PyModule_AddObjectRef(m, "RUN_ONLY", pd_RUN_ONLY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
