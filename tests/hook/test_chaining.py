"""Chaining: with another frame-evaluation function installed first (as a debugger would), our
hook sends the frames it does not handle to it, runs replacement code through it, and restores it
on uninstall. The other function is a tiny counting C hook built here with the C compiler."""
import ctypes
import os
import shutil
import subprocess
import sysconfig

import pytest

from pydynamo import _C
from hookutil import Recorder, hooked, with_const

COUNTING_HOOK = r"""
#include <Python.h>
struct _PyInterpreterFrame;
static long counter = 0;
static PyObject *counting_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag) {
    counter++;
    return _PyEval_EvalFrameDefault(ts, f, throwflag);
}
long count(void) { return counter; }
void install(void) { _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), counting_eval); }
void uninstall(void) {
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), _PyEval_EvalFrameDefault);
}
int installed(void) {
    return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == counting_eval;
}
"""


@pytest.fixture(scope="module")
def counting(tmp_path_factory):
    cc = shutil.which(sysconfig.get_config_var("CC").split()[0] or "cc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the foreign eval-frame hook")
    d = tmp_path_factory.mktemp("counting")
    src, lib = d / "counting.c", d / "counting.so"
    src.write_text(COUNTING_HOOK)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}",
                    str(src), "-o", str(lib)], check=True, capture_output=True)
    mod = ctypes.PyDLL(os.fspath(lib))
    mod.count.restype = ctypes.c_long
    return mod


def f(x):
    return x * 10


def test_foreign_hook_kept_and_restored(counting):
    counting.install()
    try:
        n0 = counting.count()
        f(1)
        assert counting.count() > n0  # the foreign hook sees ordinary frames

        rec = Recorder({f.__code__: with_const(f, 10, 11)}, guard=bool)  # a guard with no frame
        with hooked(rec):
            assert not counting.installed() and _C.hook_installed()
            n1 = counting.count()
            assert f(2) == 22  # compile, run the replacement through the foreign hook
            n2 = counting.count()
            assert n2 > n1
            assert f(3) == 33  # hit: exactly one frame, the shadow, through the foreign hook
            assert counting.count() == n2 + 1
        # uninstalling ours puts the foreign one back
        assert counting.installed() and not _C.hook_installed()

        # bypassed (skipped) frames reach it too
        _C.set_code_state(f.__code__, "skip")
        with hooked(Recorder()):
            n4 = counting.count()
            assert f(4) == 40
            assert counting.count() == n4 + 1
        assert counting.installed()
    finally:
        counting.uninstall()
    assert not counting.installed()
