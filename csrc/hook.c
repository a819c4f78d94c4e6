/* hook.c: the PEP 523 frame-evaluation function and the per-thread callback.
 *
 * Invariants:
 * - Per-thread state lives in C11 thread-locals: `tls_callback` (owned; NULL = off, Py_False =
 *   run-only, else the compile-mode callable) and `tls_busy` (> 0 while guards or the callback
 *   run on this thread: frames they start are never intercepted).
 * - The hook is installed in the interpreter only while at least one thread has a callback set
 *   (an installed hook disables CPython's inlined calls for every thread), and chains every frame
 *   it does not handle to the evaluator that was installed before it.
 * - Every frame that is not handed to the evaluator is released by pd_drop_original on every
 *   path, success and error alike (it is a no-op on 3.11, where _PyEval_Vector does it).
 * - Guards, the callback and replacement code may call set_eval_frame, clear caches, or raise;
 *   the hook holds references to everything it uses across those calls.
 * Limitation: a thread that exits with a callback still set keeps the hook installed (there is
 * no per-thread destructor); pydynamo.eval_frame always restores the previous setting.
 */
#include "frame_compat.h"
#include "pydynamo_c.h"

PyObject *pd_SKIP_CODE = NULL, *pd_RUN_ONLY = NULL;

static _Thread_local PyObject *tls_callback = NULL;
static _Thread_local int tls_busy = 0;

static _PyFrameEvalFunction pd_prev_eval = _PyEval_EvalFrameDefault;
static Py_ssize_t pd_nactive = 0;

static PyObject *pd_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throw_flag);

/* ---- running a cache hit */

/* Function objects for shadow frames. A shadow frame needs a function with the replacement code
 * and the original's globals, builtins and closure. PyFunction_New costs about as much as the
 * rest of a hit, so each code's cache keeps one function ("shell") and re-points its fields per
 * call. The shell is reused only when the cache holds the sole reference (so not while running,
 * e.g. in an outer recursion level, nor while an escaped frame object keeps it); between calls
 * its fields point at an empty code and empty dicts, so it keeps nothing of the user's alive and
 * stays a valid, harmless function for anyone who finds it through gc. */
static PyObject *pd_empty_code = NULL, *pd_empty_dict = NULL;

int pd_hook_init(void) {
    if (pd_empty_code == NULL) {
        /* The code of `lambda: None`, so an idle shell called by anyone just returns None. */
        PyObject *module = Py_CompileString("lambda: None", "<pydynamo>", Py_eval_input);
        if (module == NULL) {
            return -1;
        }
        PyObject *consts = ((PyCodeObject *)module)->co_consts;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); i++) {
            if (PyCode_Check(PyTuple_GET_ITEM(consts, i))) {
                pd_empty_code = Py_NewRef(PyTuple_GET_ITEM(consts, i));
                break;
            }
        }
        Py_DECREF(module);
        pd_empty_dict = PyDict_New();
    }
    if (pd_empty_code == NULL || pd_empty_dict == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "pydynamo: cannot build the idle shadow function");
        }
        return -1;
    }
    return 0;
}

static void pd_point_function(PyFunctionObject *fn, PyObject *code, PyObject *globals,
                              PyObject *builtins, PyObject *closure) {
    /* Py_SETREF stores before it decrefs: a destructor run by a decref sees a whole function. */
    Py_SETREF(fn->func_code, Py_NewRef(code));
    Py_SETREF(fn->func_globals, Py_NewRef(globals));
    Py_SETREF(fn->func_builtins, Py_NewRef(builtins));
    Py_XSETREF(fn->func_closure, Py_XNewRef(closure));
}

/* A new reference to a function for running `code` in place of `orig`'s code. */
static PyObject *pd_acquire_function(pd_cache *cache, PyFunctionObject *orig, PyObject *code) {
    PyObject *shell = cache != NULL ? cache->shell : NULL;
    if (shell != NULL && Py_REFCNT(shell) == 1) {
        pd_point_function((PyFunctionObject *)shell, code, orig->func_globals,
                          orig->func_builtins, orig->func_closure);
        return Py_NewRef(shell);
    }
    PyObject *fn = PyFunction_New(code, orig->func_globals);
    if (fn == NULL) {
        return NULL;
    }
    pd_point_function((PyFunctionObject *)fn, code, orig->func_globals, orig->func_builtins,
                      orig->func_closure);
    if (cache != NULL && cache->shell == NULL) {
        cache->shell = Py_NewRef(fn);
    }
    return fn;
}

/* After a shadow frame finished: idle the shell, or give it up if something else holds it. */
static void pd_release_function(pd_cache *cache) {
    PyObject *shell = cache != NULL ? cache->shell : NULL;
    if (shell == NULL) {
        return;
    }
    if (Py_REFCNT(shell) != 1) {
        /* Still running (recursion) or kept by a frame object: leave it to its holders. */
        Py_CLEAR(cache->shell);
        return;
    }
    pd_point_function((PyFunctionObject *)shell, pd_empty_code, pd_empty_dict, pd_empty_dict,
                      NULL);
}

static PyObject *pd_run_shadow(PyThreadState *tstate, _PyInterpreterFrame *frame,
                               PyCodeObject *co, PyObject *func, PyObject *replacement,
                               _PyStackChunk *room) {
    pd_cache *cache = pd_cache_get((PyObject *)co);
    Py_XINCREF(cache); /* the replacement code may clear this cache while it runs */
    PyObject *result = NULL;
    PyObject *fn = pd_acquire_function(cache, (PyFunctionObject *)func, replacement);
    if (fn != NULL) {
        _PyInterpreterFrame *shadow = pd_push_shadow(tstate, fn, (PyCodeObject *)replacement);
        if (shadow != NULL) {
            /* Layout was checked at insertion: argument slots line up by index. Cells and free
             * variables stay NULL; the replacement's MAKE_CELL / COPY_FREE_VARS fill them. */
            int nargs = pd_code_nargs(co);
            for (int i = 0; i < nargs; i++) {
                shadow->localsplus[i] = Py_XNewRef(frame->localsplus[i]);
            }
            result = pd_prev_eval(tstate, shadow, 0);
            pd_finish_shadow(tstate, shadow);
        }
    }
    pd_room_exit(tstate, room);   /* the shadow is popped; the original lies below the room */
    pd_drop_original(tstate, frame);
    if (cache != NULL) {
        /* Keep the exception of a failed call intact across destructors the idling may run. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        pd_release_function(cache);
        PyErr_Restore(et, ev, tb);
        Py_DECREF(cache);
    }
    return result;
}

/* ---- the callback's verdict */

/* Applies what the callback returned. Returns 1 and sets *hit (new ref) to run replacement code,
 * 0 to run the original, -1 on error. */
static int pd_apply_verdict(PyObject *code, PyObject *verdict, PyObject **hit) {
    if (verdict == Py_None) {
        return 0;
    }
    if (verdict == pd_SKIP_CODE || verdict == pd_RUN_ONLY) {
        pd_cache *c = pd_cache_get_or_create(code);
        if (c == NULL) {
            return -1;
        }
        c->state = verdict == pd_SKIP_CODE ? PD_STATE_SKIP : PD_STATE_RUN_ONLY;
        return 0;
    }
    if (!PyTuple_Check(verdict) || PyTuple_GET_SIZE(verdict) != 2 ||
        !PyCallable_Check(PyTuple_GET_ITEM(verdict, 0))) {
        PyErr_Format(PyExc_TypeError,
                     "pydynamo: callback must return (guard, code), SKIP_CODE, RUN_ONLY or None;"
                     " got %.200R", verdict);
        return -1;
    }
    PyObject *guard = PyTuple_GET_ITEM(verdict, 0), *replacement = PyTuple_GET_ITEM(verdict, 1);
    if (pd_cache_check_layout(code, replacement) < 0) {
        return -1;
    }
    pd_cache *c = pd_cache_get_or_create(code);
    if (c == NULL || pd_cache_insert(c, guard, replacement) < 0) {
        return -1;
    }
    *hit = Py_NewRef(replacement);
    return 1;
}

/* ---- the slow path: guards, then (compile mode) the callback */

static PyObject *pd_intercept(PyThreadState *tstate, _PyInterpreterFrame *frame,
                              PyCodeObject *co, PyObject *func, pd_cache *cache, PyObject *cb,
                              int throw_flag) {
    int run_only = cb == Py_False || (cache != NULL && cache->state == PD_STATE_RUN_ONLY);
    PyObject *hit = NULL, *code = (PyObject *)co;
    int rc = 0;
    Py_XINCREF(cache);
    Py_INCREF(cb);
    tls_busy++;
    _PyStackChunk *room = pd_room_enter(tstate);   /* guards, callback and shadow run in it */
    PyObject *inputs = pd_frame_inputs(frame, co, func);
    if (inputs == NULL) {
        rc = -1;
    } else if (cache != NULL) {
        rc = pd_cache_lookup(cache, inputs, &hit);
    }
    if (rc == 0 && !run_only) {
        pd_cache *now = pd_cache_get(code); /* a guard may have cleared or replaced it */
        PyObject *entries = now != NULL ? PyList_GetSlice(now->entries, 0, PY_SSIZE_T_MAX)
                                        : PyList_New(0);
        if (entries == NULL) {
            rc = -1;
        } else {
            PyFunctionObject *fn = (PyFunctionObject *)func;
            PyObject *args[5] = {code, inputs, fn->func_globals, fn->func_builtins, entries};
            PyObject *verdict = PyObject_Vectorcall(cb, args, 5, NULL);
            Py_DECREF(entries);
            rc = verdict == NULL ? -1 : pd_apply_verdict(code, verdict, &hit);
            Py_XDECREF(verdict);
        }
    }
    tls_busy--;
    Py_XDECREF(inputs);
    Py_DECREF(cb);
    Py_XDECREF(cache);
    if (rc < 0 || hit == NULL) {
        pd_room_exit(tstate, room);   /* the original frame runs (or is dropped) where it is */
    }
    if (rc < 0) {
        pd_drop_original(tstate, frame);
        return NULL;
    }
    if (hit == NULL) {
        return pd_prev_eval(tstate, frame, throw_flag);
    }
    PyObject *result = pd_run_shadow(tstate, frame, co, func, hit, room);
    Py_DECREF(hit);
    return result;
}

/* ---- the hook: decide cheaply whether a frame is ours (section 4 of the reference) */

static PyObject *pd_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throw_flag) {
    PyObject *cb = tls_callback;
    if (cb == NULL || tls_busy || throw_flag || pd_frame_tracing(tstate) ||
        frame->owner != FRAME_OWNED_BY_THREAD || frame->f_locals != NULL) {
        return pd_prev_eval(tstate, frame, throw_flag);
    }
    PyCodeObject *co = pd_frame_code(frame);
    const int bad_flags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
    if (co == NULL || !(co->co_flags & CO_OPTIMIZED) || (co->co_flags & bad_flags) ||
        pd_frame_started(frame, co)) {
        return pd_prev_eval(tstate, frame, throw_flag);
    }
    PyObject *func = pd_frame_func(frame);
    if (func == NULL || !PyFunction_Check(func)) {
        return pd_prev_eval(tstate, frame, throw_flag);
    }
    pd_cache *cache = pd_cache_get((PyObject *)co);
    if (cache == NULL ? cb == Py_False
                      : cache->state == PD_STATE_SKIP ||
                            ((cb == Py_False || cache->state == PD_STATE_RUN_ONLY) &&
                             PyList_GET_SIZE(cache->entries) == 0)) {
        return pd_prev_eval(tstate, frame, throw_flag);
    }
    return pd_intercept(tstate, frame, co, func, cache, cb, throw_flag);
}

/* ---- per-thread setting and installation */

static void pd_install(int on) {
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (on && cur != pd_eval_frame) {
        pd_prev_eval = cur; /* chain to whoever was there (a debugger, say) */
        _PyInterpreterState_SetEvalFrameFunc(interp, pd_eval_frame);
    } else if (!on && cur == pd_eval_frame) {
        /* pd_prev_eval stays valid: frames still inside the hook keep using it. */
        _PyInterpreterState_SetEvalFrameFunc(interp, pd_prev_eval);
    }
}

PyObject *pd_set_eval_frame(PyObject *callback) {
    PyObject *prev = tls_callback;
    int was_on = prev != NULL, now_on = callback != NULL;
    tls_callback = Py_XNewRef(callback);
    if (was_on != now_on) {
        pd_nactive += now_on ? 1 : -1;
        if (pd_nactive == (now_on ? 1 : 0)) {
            pd_install(now_on);
        }
    }
    return prev != NULL ? prev : Py_NewRef(Py_None);
}

PyObject *pd_get_eval_frame(void) {
    return Py_NewRef(tls_callback != NULL ? tls_callback : Py_None);
}

int pd_hook_installed(void) {
    return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == pd_eval_frame;
}

Py_ssize_t pd_active_threads(void) { return pd_nactive; }
