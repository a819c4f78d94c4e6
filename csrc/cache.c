/* cache.c: per-code cache state (a pd_cache object) kept in one code-object extra slot.
 *
 * Invariants:
 * - The slot owns one reference to its pd_cache; the freefunc detaches the cache (unlinks it
 *   from the registry, forgets the code pointer) and drops that reference. CPython calls the
 *   freefunc for every slot, NULL included, when a code object dies, and with the old value
 *   still stored when SetExtra replaces it; so clearing takes its own reference first and drops
 *   it only after the slot is NULL, and no Python code can see a freed pointer.
 * - Entries are (guard, code) tuples, most recently hit first; a replacement code's layout is
 *   checked once, when inserted, so the per-call argument copy can go by index.
 * - The extra index is requested once per process.
 */
#include "pydynamo_c.h"

#if PY_VERSION_HEX >= 0x030C0000
#define pd_RequestCodeExtraIndex PyUnstable_Eval_RequestCodeExtraIndex
#define pd_Code_GetExtra PyUnstable_Code_GetExtra
#define pd_Code_SetExtra PyUnstable_Code_SetExtra
#else
#define pd_RequestCodeExtraIndex _PyEval_RequestCodeExtraIndex
#define pd_Code_GetExtra _PyCode_GetExtra
#define pd_Code_SetExtra _PyCode_SetExtra
#endif

static Py_ssize_t pd_extra_index = -1;
static pd_cache pd_registry_head; /* sentinel of the circular list of attached caches */
static Py_ssize_t pd_registry_size = 0;

static void pd_cache_dealloc(pd_cache *self) {
    Py_XDECREF(self->entries);
    Py_XDECREF(self->shell);
    PyObject_Free(self);
}

static PyTypeObject pd_cache_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pydynamo._C._CacheState",
    .tp_basicsize = sizeof(pd_cache),
    .tp_dealloc = (destructor)pd_cache_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "per-code cache state of the pydynamo frame hook (internal)",
};

static void pd_cache_detach(pd_cache *c) {
    if (c->code == NULL) {
        return;
    }
    c->prev->next = c->next;
    c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->code = NULL;
    pd_registry_size--;
}

static void pd_cache_freefunc(void *p) {
    if (p == NULL) {
        return;
    }
    pd_cache *c = (pd_cache *)p;
    pd_cache_detach(c);
    Py_DECREF(c);
}

int pd_cache_init(void) {
    if (PyType_Ready(&pd_cache_type) < 0) {
        return -1;
    }
    if (pd_extra_index < 0) {
        pd_registry_head.next = pd_registry_head.prev = &pd_registry_head;
        pd_extra_index = pd_RequestCodeExtraIndex(pd_cache_freefunc);
        if (pd_extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "pydynamo: no free code-object extra index");
            return -1;
        }
    }
    return 0;
}

pd_cache *pd_cache_get(PyObject *code) {
    void *extra = NULL;
    if (pd_Code_GetExtra(code, pd_extra_index, &extra) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return (pd_cache *)extra;
}

pd_cache *pd_cache_get_or_create(PyObject *code) {
    pd_cache *c = pd_cache_get(code);
    if (c != NULL) {
        return c;
    }
    c = PyObject_New(pd_cache, &pd_cache_type);
    if (c == NULL) {
        return NULL;
    }
    c->state = PD_STATE_DEFAULT;
    c->code = NULL;
    c->shell = NULL;
    c->prev = c->next = NULL;
    c->entries = PyList_New(0);
    if (c->entries == NULL || pd_Code_SetExtra(code, pd_extra_index, c) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    c->code = code;
    c->next = pd_registry_head.next;
    c->prev = &pd_registry_head;
    pd_registry_head.next->prev = c;
    pd_registry_head.next = c;
    pd_registry_size++;
    return c;
}

int pd_cache_clear_code(PyObject *code) {
    pd_cache *c = pd_cache_get(code);
    if (c == NULL) {
        return 0;
    }
    Py_INCREF(c);
    int rc = pd_Code_SetExtra(code, pd_extra_index, NULL);
    Py_DECREF(c); /* entries die here, after the slot no longer points at them */
    return rc;
}

int pd_cache_clear_all(void) {
    /* Snapshot first: clearing runs destructors, which may attach or detach other caches. */
    PyObject *codes = PyList_New(0);
    if (codes == NULL) {
        return -1;
    }
    for (pd_cache *c = pd_registry_head.next; c != &pd_registry_head; c = c->next) {
        if (PyList_Append(codes, c->code) < 0) {
            Py_DECREF(codes);
            return -1;
        }
    }
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(codes); i++) {
        if (pd_cache_clear_code(PyList_GET_ITEM(codes, i)) < 0) {
            rc = -1;
            break;
        }
    }
    Py_DECREF(codes);
    return rc;
}

Py_ssize_t pd_cache_count(void) { return pd_registry_size; }

static int pd_same_names(PyObject *a, Py_ssize_t a0, PyObject *b, Py_ssize_t b0, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(a, a0 + i), PyTuple_GET_ITEM(b, b0 + i),
                                          Py_EQ);
        if (eq <= 0) {
            return eq;
        }
    }
    return 1;
}

/* The shadow frame copies argument slots by index and the replacement function reuses the
 * original closure, so arguments and free variables must line up exactly. Cell variables may
 * differ: the replacement's own MAKE_CELL wraps whatever raw argument values it needs. */
int pd_cache_check_layout(PyObject *orig_obj, PyObject *repl_obj) {
    if (!PyCode_Check(repl_obj)) {
        PyErr_Format(PyExc_TypeError, "pydynamo: replacement must be a code object, not %.100s",
                     Py_TYPE(repl_obj)->tp_name);
        return -1;
    }
    PyCodeObject *orig = (PyCodeObject *)orig_obj, *repl = (PyCodeObject *)repl_obj;
    const int sig_flags = CO_VARARGS | CO_VARKEYWORDS;
    const int bad_flags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
    const char *why = NULL;
    if (!(repl->co_flags & CO_OPTIMIZED) || (repl->co_flags & bad_flags)) {
        why = "it must be an optimized function body, not a generator or coroutine";
    } else if (repl->co_argcount != orig->co_argcount ||
               repl->co_kwonlyargcount != orig->co_kwonlyargcount ||
               (repl->co_flags & sig_flags) != (orig->co_flags & sig_flags)) {
        why = "argument counts or *args/**kwargs differ";
    } else if (repl->co_nfreevars != orig->co_nfreevars) {
        why = "free variable counts differ";
    }
    if (why == NULL) {
        Py_ssize_t nargs = orig->co_argcount + orig->co_kwonlyargcount +
                           ((orig->co_flags & CO_VARARGS) ? 1 : 0) +
                           ((orig->co_flags & CO_VARKEYWORDS) ? 1 : 0);
        int eq = pd_same_names(orig->co_localsplusnames, 0, repl->co_localsplusnames, 0, nargs);
        if (eq == 1) {
            eq = pd_same_names(orig->co_localsplusnames, orig->co_nlocalsplus - orig->co_nfreevars,
                               repl->co_localsplusnames, repl->co_nlocalsplus - repl->co_nfreevars,
                               orig->co_nfreevars);
        }
        if (eq < 0) {
            return -1;
        }
        if (eq == 0) {
            why = "argument or free variable names differ";
        }
    }
    if (why != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "pydynamo: replacement code %R cannot stand in for %R: %s", repl_obj,
                     orig_obj, why);
        return -1;
    }
    return 0;
}

int pd_cache_lookup(pd_cache *cache, PyObject *inputs, PyObject **hit) {
    /* A guard may clear this cache or insert into it; hold the list and each entry, and find the
     * hit again by identity before moving it to the front. */
    PyObject *entries = cache->entries;
    Py_INCREF(entries);
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        Py_INCREF(entry);
        PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 0), inputs);
        int ok = -1;
        if (r != NULL) {
            ok = (r == Py_True) ? 1 : (r == Py_False || r == Py_None) ? 0 : PyObject_IsTrue(r);
            Py_DECREF(r);
        }
        if (ok < 0) {
            Py_DECREF(entry);
            rc = -1;
            break;
        }
        if (ok) {
            PyListObject *list = (PyListObject *)entries;
            Py_ssize_t n = PyList_GET_SIZE(entries), j = (i < n && list->ob_item[i] == entry) ? i : 0;
            while (j < n && list->ob_item[j] != entry) {
                j++;
            }
            if (j > 0 && j < n) {
                memmove(&list->ob_item[1], &list->ob_item[0], j * sizeof(PyObject *));
                list->ob_item[0] = entry;
            }
            *hit = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
            Py_DECREF(entry);
            rc = 1;
            break;
        }
        Py_DECREF(entry);
    }
    Py_DECREF(entries);
    return rc;
}

int pd_cache_insert(pd_cache *cache, PyObject *guard, PyObject *code) {
    PyObject *entry = PyTuple_Pack(2, guard, code);
    if (entry == NULL) {
        return -1;
    }
    int rc = PyList_Insert(cache->entries, 0, entry);
    Py_DECREF(entry);
    return rc;
}
