/* pydynamo_c.h: declarations shared by the C files of pydynamo._C (Python.h only, no internals).
 *
 * Layout of the extension:
 *   frame_compat.{h,c}  CPython frame internals per version (push/pop, clear, read inputs)
 *   cache.c             per-code cache state stored in a code-object extra slot
 *   hook.c              the PEP 523 eval-frame function, per-thread callback, install/uninstall
 *   module.c            the Python-visible functions and module init
 */
#ifndef PYDYNAMO_C_H
#define PYDYNAMO_C_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* What the hook does with a code object (independent of the thread's callback). */
typedef enum { PD_STATE_DEFAULT = 0, PD_STATE_SKIP = 1, PD_STATE_RUN_ONLY = 2 } pd_state;

/* Cache state of one code object. Owned (one reference) by the code's extra slot; the hook takes
 * its own reference across every call into Python, because a guard or callback may clear the
 * slot. `code` is borrowed and valid only while attached (NULL once detached). */
typedef struct pd_cache {
    PyObject_HEAD
    PyObject *entries; /* list of (guard, code) tuples, most recently hit first */
    pd_state state;
    PyObject *code;
    PyObject *shell; /* idle function object reused for shadow frames (hook.c), or NULL */
    struct pd_cache *prev, *next; /* registry of attached caches, for clear_all */
} pd_cache;

/* cache.c */
int pd_cache_init(void);
pd_cache *pd_cache_get(PyObject *code);          /* borrowed, NULL if none (no error) */
pd_cache *pd_cache_get_or_create(PyObject *code); /* borrowed, NULL with an exception */
int pd_cache_clear_code(PyObject *code);
int pd_cache_clear_all(void);
int pd_cache_check_layout(PyObject *orig, PyObject *replacement);
/* 1 hit (*hit = new ref to the code), 0 miss, -1 error. */
int pd_cache_lookup(pd_cache *cache, PyObject *inputs, PyObject **hit);
int pd_cache_insert(pd_cache *cache, PyObject *guard, PyObject *code);
Py_ssize_t pd_cache_count(void);

/* hook.c */
int pd_hook_init(void);
PyObject *pd_set_eval_frame(PyObject *callback); /* new ref to the previous setting */
PyObject *pd_get_eval_frame(void);                /* new ref */
int pd_hook_installed(void);
Py_ssize_t pd_active_threads(void);
Py_ssize_t pd_room_chunks_allocated(void); /* frame_compat.c: spare data-stack chunks made */
extern PyObject *pd_SKIP_CODE, *pd_RUN_ONLY;

#endif
