/* frame_compat.h: the one place that knows CPython's interpreter-frame internals.
 *
 * Include only from .c files (internal headers are not maintained as C++). Every access to a
 * _PyInterpreterFrame field goes through the inline helpers below, so a new CPython version is
 * a change to this header and frame_compat.c only. Versions outside 3.11..3.13 fail to build:
 * the copied CPython logic (data-stack push/pop, frame clearing) must be re-checked per release.
 *
 * Reference: /work/shared/reference/cpython_frame_hook.md (sections 3, 9, 10, 11, 14).
 */
#ifndef PYDYNAMO_FRAME_COMPAT_H
#define PYDYNAMO_FRAME_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "pydynamo._C supports CPython 3.11, 3.12 and 3.13 only; re-check frame_compat.c first"
#endif

#if PY_VERSION_HEX >= 0x030C0000
/* cpython#105268: cpython/objimpl.h defines it as a macro, pycore_gc.h as an inline function. */
#undef _PyGC_FINALIZED
#endif
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#undef Py_BUILD_CORE

#define PD_PY311 (PY_VERSION_HEX < 0x030C0000)
#define PD_PY313 (PY_VERSION_HEX >= 0x030D0000)

/* Code object of a frame, or NULL when the frame is not running a code object (3.13). */
static inline PyCodeObject *pd_frame_code(_PyInterpreterFrame *f) {
#if PD_PY313
    return PyCode_Check(f->f_executable) ? (PyCodeObject *)f->f_executable : NULL;
#else
    return f->f_code;
#endif
}

static inline PyObject *pd_frame_func(_PyInterpreterFrame *f) {
#if PD_PY311
    return (PyObject *)f->f_func;
#else
    return f->f_funcobj;
#endif
}

/* A frame CPython handed us that has executed nothing yet (section 3 "not-started test"). */
static inline int pd_frame_started(_PyInterpreterFrame *f, PyCodeObject *co) {
#if PD_PY313
    return f->instr_ptr != _PyCode_CODE(co);
#else
    return f->prev_instr != _PyCode_CODE(co) - 1;
#endif
}

static inline int pd_frame_tracing(PyThreadState *tstate) {
    /* 3.12+ sys.monitoring callbacks also raise `tracing` while they run. */
    return tstate->tracing > 0;
}

/* Words of data stack a frame for `co` needs. */
static inline size_t pd_frame_size(PyCodeObject *co) {
#if PD_PY311
    return (size_t)co->co_nlocalsplus + (size_t)co->co_stacksize + FRAME_SPECIALS_SIZE;
#else
    return (size_t)co->co_framesize;
#endif
}

/* Number of leading localsplus slots holding the bound arguments. */
static inline int pd_code_nargs(PyCodeObject *co) {
    return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
           ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

/* frame_compat.c */
_PyInterpreterFrame *pd_push_shadow(PyThreadState *tstate, PyObject *func, PyCodeObject *co);
_PyStackChunk *pd_room_enter(PyThreadState *tstate);
void pd_room_exit(PyThreadState *tstate, _PyStackChunk *c);
Py_ssize_t pd_room_chunks_allocated(void);
void pd_finish_shadow(PyThreadState *tstate, _PyInterpreterFrame *shadow);
void pd_drop_original(PyThreadState *tstate, _PyInterpreterFrame *frame);
PyObject *pd_frame_inputs(_PyInterpreterFrame *frame, PyCodeObject *co, PyObject *func);

#endif
