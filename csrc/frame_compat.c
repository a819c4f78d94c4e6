/* frame_compat.c: CPython frame plumbing the hook needs but CPython does not export.
 *
 * - data-stack push/pop of frames (copied from CPython's Python/pystate.c, PSF licence);
 * - building a shadow frame that runs replacement code with the original frame's arguments;
 * - clearing frames by the ownership rules of each version (section 10 of the reference):
 *     3.11: the evaluator leaves the frame it was given alone; _PyEval_Vector clears and pops
 *           the original, so we clear and pop the *shadow* (mirrors Python/frame.c _PyFrame_Clear,
 *           including handing the frame to a surviving frame object, e.g. from a traceback);
 *     3.12+: the evaluator clears and pops the frame it was given, so the shadow is freed by
 *           CPython and we clear and pop the *original* on every path that does not hand it to
 *           the evaluator (mirrors Python/ceval.c clear_thread_frame).
 * - reading a not-yet-started frame's inputs without writing to it (section 6).
 * Invariant: frames are popped strictly LIFO (shadow before original).
 */
#include "frame_compat.h"

#if PD_PY313
/* Exported by 3.13 but declared in a header that needs more of Py_BUILD_CORE than we include. */
PyAPI_FUNC(void) _PyEval_FrameClearAndPop(PyThreadState *tstate, _PyInterpreterFrame *frame);
#endif

/* ---- data stack (Python/pystate.c: push_chunk, _PyThreadState_PushFrame, _PyThreadState_PopFrame) */

#define PD_DATA_STACK_CHUNK_SIZE (16 * 1024)
#define PD_MINIMUM_OVERHEAD 1000

/* CPython frees chunks we allocate (and we pop its chunks), so both use its allocator. */
static _PyStackChunk *pd_chunk_alloc(size_t size) {
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    _PyStackChunk *c = (_PyStackChunk *)arena.alloc(arena.ctx, size);
    if (c != NULL) {
        c->size = size;
    }
    return c;
}

static void pd_chunk_free(_PyStackChunk *c) {
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, c, c->size);
}

/* Make `c` the thread's current chunk, above the one in use (whose top it saves). */
static void pd_link_chunk(PyThreadState *tstate, _PyStackChunk *c) {
    c->previous = tstate->datastack_chunk;
    c->top = 0;
    if (tstate->datastack_chunk) {
        tstate->datastack_chunk->top = tstate->datastack_top - &tstate->datastack_chunk->data[0];
    }
    tstate->datastack_chunk = c;
    tstate->datastack_limit = (PyObject **)(((char *)c) + c->size);
}

static PyObject **pd_push_chunk(PyThreadState *tstate, int size) {
    int allocate_size = PD_DATA_STACK_CHUNK_SIZE;
    while (allocate_size < (int)sizeof(PyObject *) * (size + PD_MINIMUM_OVERHEAD)) {
        allocate_size *= 2;
    }
    _PyStackChunk *new_chunk = pd_chunk_alloc(allocate_size);
    if (new_chunk == NULL) {
        return NULL;
    }
    pd_link_chunk(tstate, new_chunk);
    /* The root chunk is never popped: its frames start at data[1]. */
    PyObject **res = &new_chunk->data[new_chunk->previous == NULL];
    tstate->datastack_top = res + size;
    return res;
}

static _PyInterpreterFrame *pd_push_frame(PyThreadState *tstate, size_t size) {
    if (tstate->datastack_top != NULL &&
        size < (size_t)(tstate->datastack_limit - tstate->datastack_top)) {
        _PyInterpreterFrame *res = (_PyInterpreterFrame *)tstate->datastack_top;
        tstate->datastack_top += size;
        return res;
    }
    return (_PyInterpreterFrame *)pd_push_chunk(tstate, (int)size);
}

#if !PD_PY313
static void pd_pop_frame(PyThreadState *tstate, _PyInterpreterFrame *frame) {
    PyObject **base = (PyObject **)frame;
    if (base == &tstate->datastack_chunk->data[0]) {
        _PyStackChunk *chunk = tstate->datastack_chunk;
        _PyStackChunk *previous = chunk->previous;
        tstate->datastack_top = &previous->data[previous->top];
        tstate->datastack_chunk = previous;
        pd_chunk_free(chunk);
        tstate->datastack_limit = (PyObject **)(((char *)previous) + previous->size);
    } else {
        tstate->datastack_top = base;
    }
}
#endif

/* ---- room under shadow frames
 *
 * CPython frees a data-stack chunk as soon as the frame at its base is popped, so a call site
 * whose frames land just past a chunk's end maps and unmaps a fresh chunk on every call. A
 * compiled call makes hundreds of calls (guards, kernel launchers, extern checks, the rebuilt
 * output), and whether they cross depends on how deep the user's caller was (GPT-2 bf16 on the
 * H100 host, host time per forward: 3.84 ms without this, 2.89 ms with it, same script and
 * machine; benchmarks/gpu/host_budget.py, benchmarks/results/GPU.md).
 * So an intercepted call with less than PD_ROOM_NEEDED of its chunk left runs its guards,
 * callback and shadow frame in a chunk of our own, kept per thread and reused. Spares live in
 * a capsule in the thread's dict and are freed with it. */

#define PD_ROOM_CHUNK (64 * 1024)
#define PD_ROOM_NEEDED ((size_t)(16 * 1024) / sizeof(PyObject *))
#define PD_ROOM_SPARES 4

typedef struct {
    int n;
    _PyStackChunk *free[PD_ROOM_SPARES];
} pd_room_spares;

static Py_ssize_t pd_room_allocations;   /* chunks ever allocated here (tests read it) */

static void pd_room_spares_free(PyObject *cap) {
    pd_room_spares *s = (pd_room_spares *)PyCapsule_GetPointer(cap, "pydynamo.room_spares");
    for (int i = 0; s != NULL && i < s->n; i++) {
        pd_chunk_free(s->free[i]);
    }
    PyMem_Free(s);
}

/* This thread's spares, created on first use; NULL (no error set) if that fails. */
static pd_room_spares *pd_thread_spares(void) {
    static PyObject *key = NULL;
    if (key == NULL && (key = PyUnicode_InternFromString("pydynamo.room_spares")) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *d = PyThreadState_GetDict();
    if (d == NULL) {
        return NULL;
    }
    PyObject *cap = PyDict_GetItemWithError(d, key);
    if (cap != NULL) {
        return (pd_room_spares *)PyCapsule_GetPointer(cap, "pydynamo.room_spares");
    }
    pd_room_spares *s = PyErr_Occurred() ? NULL : PyMem_Calloc(1, sizeof(pd_room_spares));
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    cap = PyCapsule_New(s, "pydynamo.room_spares", pd_room_spares_free);
    if (cap == NULL) {
        PyMem_Free(s);
        PyErr_Clear();
        return NULL;
    }
    int rc = PyDict_SetItem(d, key, cap);
    Py_DECREF(cap);             /* on failure this frees s through the destructor */
    if (rc < 0) {
        PyErr_Clear();
        return NULL;
    }
    return s;
}

/* Links a spare chunk above the current one when less than PD_ROOM_NEEDED is left, and returns
 * it (pd_room_exit undoes it), else NULL; NULL also when no spare can be had (no error set):
 * the call then runs where it is, as without this. Frames start at data[1], never at data[0],
 * so CPython's pop of the first one leaves the chunk alone. */
_PyStackChunk *pd_room_enter(PyThreadState *tstate) {
    if (tstate->datastack_chunk == NULL || tstate->datastack_top == NULL ||
        (size_t)(tstate->datastack_limit - tstate->datastack_top) >= PD_ROOM_NEEDED) {
        return NULL;
    }
    pd_room_spares *s = pd_thread_spares();
    if (s == NULL) {
        return NULL;
    }
    _PyStackChunk *c;
    if (s->n > 0) {
        c = s->free[--s->n];
    } else {
        if ((c = pd_chunk_alloc(PD_ROOM_CHUNK)) == NULL) {
            return NULL;
        }
        pd_room_allocations++;
    }
    pd_link_chunk(tstate, c);
    /* data[0] holds no frame; it remembers the spares the chunk goes back to (the thread dict
     * that owns them outlives the call), so pd_room_exit needs no second dict lookup. */
    c->data[0] = (PyObject *)s;
    tstate->datastack_top = &c->data[1];
    return c;
}

/* Every frame pushed since pd_room_enter has been popped: back to the previous chunk. */
void pd_room_exit(PyThreadState *tstate, _PyStackChunk *c) {
    if (c == NULL) {
        return;
    }
    assert(tstate->datastack_chunk == c && tstate->datastack_top == &c->data[1]);
    _PyStackChunk *prev = c->previous;
    tstate->datastack_chunk = prev;
    tstate->datastack_top = &prev->data[prev->top];
    tstate->datastack_limit = (PyObject **)(((char *)prev) + prev->size);
    pd_room_spares *s = (pd_room_spares *)c->data[0];
    if (s->n < PD_ROOM_SPARES) {
        s->free[s->n++] = c;
    } else {
        pd_chunk_free(c);
    }
}

Py_ssize_t pd_room_chunks_allocated(void) { return pd_room_allocations; }

/* ---- shadow frames */

/* Push and initialise a not-started frame for `co`; consumes the reference to `func` (whose
 * globals, builtins and closure the frame uses). Locals are all NULL. */
_PyInterpreterFrame *pd_push_shadow(PyThreadState *tstate, PyObject *func, PyCodeObject *co) {
    _PyInterpreterFrame *shadow = pd_push_frame(tstate, pd_frame_size(co));
    if (shadow == NULL) {
        Py_DECREF(func);
        PyErr_NoMemory();
        return NULL;
    }
#if PD_PY311
    _PyFrame_InitializeSpecials(shadow, (PyFunctionObject *)func, NULL, co->co_nlocalsplus);
    for (int i = 0; i < co->co_nlocalsplus; i++) {
        shadow->localsplus[i] = NULL;
    }
#else
    _PyFrame_Initialize(shadow, (PyFunctionObject *)func, NULL, co, 0);
#endif
    return shadow;
}

#if PD_PY311
/* Python/frame.c take_ownership (3.11): a frame object outlives the call (a traceback or
 * sys._getframe() holds it), so it takes a copy of the frame before the data stack is popped. */
static void pd_take_ownership_311(PyThreadState *tstate, PyFrameObject *f,
                                  _PyInterpreterFrame *frame) {
    Py_ssize_t size = ((char *)&frame->localsplus[frame->stacktop]) - (char *)frame;
    memcpy((_PyInterpreterFrame *)f->_f_frame_data, frame, size);
    frame = (_PyInterpreterFrame *)f->_f_frame_data;
    f->f_frame = frame;
    frame->owner = FRAME_OWNED_BY_FRAME_OBJECT;
    if (_PyFrame_IsIncomplete(frame)) {
        PyCodeObject *code = frame->f_code;
        frame->prev_instr = _PyCode_CODE(code) + code->_co_firsttraceable;
    }
    _PyInterpreterFrame *prev = frame->previous;
    while (prev && _PyFrame_IsIncomplete(prev)) {
        prev = prev->previous;
    }
    if (prev && f->f_back == NULL) {
        /* The shadow has returned, so the thread's current frame is its caller: CPython's
         * _PyFrame_GetFrameObject(prev) is not exported, PyThreadState_GetFrame gives the same. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        f->f_back = PyThreadState_GetFrame(tstate);
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    frame->previous = NULL;
    if (!PyObject_GC_IsTracked((PyObject *)f)) {
        PyObject_GC_Track((PyObject *)f);
    }
}

/* Python/frame.c _PyFrame_Clear + ceval.c _PyEvalFrameClearAndPop (3.11), for the shadow. */
void pd_finish_shadow(PyThreadState *tstate, _PyInterpreterFrame *frame) {
    tstate->recursion_remaining--;
    if (frame->frame_obj) {
        PyFrameObject *f = frame->frame_obj;
        frame->frame_obj = NULL;
        if (Py_REFCNT(f) > 1) {
            pd_take_ownership_311(tstate, f, frame);
            Py_DECREF(f);
            tstate->recursion_remaining++;
            pd_pop_frame(tstate, frame);
            return;
        }
        Py_DECREF(f);
    }
    for (int i = 0; i < frame->stacktop; i++) {
        Py_XDECREF(frame->localsplus[i]);
    }
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_func);
    Py_DECREF(frame->f_code);
    tstate->recursion_remaining++;
    pd_pop_frame(tstate, frame);
}

void pd_drop_original(PyThreadState *tstate, _PyInterpreterFrame *frame) {
    /* 3.11: _PyEval_Vector clears and pops the original after we return. */
    (void)tstate;
    (void)frame;
}
#else
void pd_finish_shadow(PyThreadState *tstate, _PyInterpreterFrame *shadow) {
    /* 3.12+: the evaluator already cleared and popped it. */
    (void)tstate;
    (void)shadow;
}

/* ceval.c clear_thread_frame (3.12) for the original frame, which was never linked into the
 * frame chain nor exposed as a frame object, so frame_obj is NULL and nothing can take it. */
void pd_drop_original(PyThreadState *tstate, _PyInterpreterFrame *frame) {
#if PD_PY313
    _PyEval_FrameClearAndPop(tstate, frame);
#else
    tstate->c_recursion_remaining--;
    for (int i = 0; i < frame->stacktop; i++) {
        Py_XDECREF(frame->localsplus[i]);
    }
    Py_XDECREF(frame->frame_obj);
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(frame->f_code);
    tstate->c_recursion_remaining++;
    pd_pop_frame(tstate, frame);
#endif
}
#endif

/* ---- inputs of a not-started frame, as a fresh dict (section 6). Never writes the frame:
 * free variables are read through the function's closure (COPY_FREE_VARS has not run), cells of
 * arguments hold the raw value (MAKE_CELL has not run), unbound slots are left out. */
PyObject *pd_frame_inputs(_PyInterpreterFrame *frame, PyCodeObject *co, PyObject *func) {
    PyObject *d = PyDict_New();
    if (d == NULL) {
        return NULL;
    }
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    PyObject *closure = ((PyFunctionObject *)func)->func_closure;
    for (int i = 0; i < co->co_nlocalsplus; i++) {
        _PyLocals_Kind kind = _PyLocals_GetKind(co->co_localspluskinds, i);
#if !PD_PY311
        if (kind & CO_FAST_HIDDEN) {
            continue;
        }
#endif
        PyObject *value;
        if ((kind & CO_FAST_FREE) && i >= first_free) {
            if (closure == NULL || i - first_free >= PyTuple_GET_SIZE(closure)) {
                continue;
            }
            value = PyCell_GET(PyTuple_GET_ITEM(closure, i - first_free));
        } else {
            value = frame->localsplus[i];
        }
        if (value == NULL) {
            continue;
        }
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(co->co_localsplusnames, i), value) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}
