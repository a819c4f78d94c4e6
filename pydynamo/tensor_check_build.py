"""How the C++ tensor-guard extension (tensor_check.cpp) is compiled: the one command, used at
install time and on demand.

    python pydynamo/tensor_check_build.py OUT_DIR [CXX]     (what CMakeLists.txt runs)

writes OUT_DIR/_tensor_check<EXT_SUFFIX> and OUT_DIR/_tensor_check_info.py (the torch build and
source it was made from), which the install puts into the package as pydynamo._tensor_check and
pydynamo._tensor_check_info. tensor_check.py imports `command` and `torch_build` for its build
on demand, and uses the installed module only where `_tensor_check_info` names the running
torch build and this source.

Invariants:
  * A leaf: imports the standard library and torch only (it runs before pydynamo is installed,
    and CMake runs it with the target environment's interpreter, outside pip's isolated build
    environment, so the extension links against the torch the package will run with).
  * Never fails the install: no torch, no compiler or a failed compile prints why and exits 0
    with nothing in OUT_DIR; the extension is then built on first use as before.
  * Idempotent: an OUT_DIR already holding a build for this source and torch is left as is
    (a reinstall does not recompile).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_PATH = os.path.join(HERE, "tensor_check.cpp")
NAME = "_tensor_check"
# the file suffix of this interpreter's own extension modules (sysconfig's EXT_SUFFIX on
# CPython, read without importing sysconfig: a warm-start hit loads the extension, never builds
# it, and sysconfig's import is 0.4 ms of its first call)
EXT_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def source() -> str:
    with open(SOURCE_PATH) as f:
        return f.read()


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def torch_build() -> str:
    """The torch the extension's ABI depends on: version, commit and C++ ABI flag."""
    import torch
    return (f"{torch.__version__} {torch.version.git_version} "
            f"cxx11abi={int(getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', True))}")


def command(cxx: str, src: str, out: str) -> list:
    """The compile command for source file `src` into extension `out`, against this torch."""
    import sysconfig        # (building only: see EXT_SUFFIX)

    import torch
    from torch.utils import cpp_extension
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return ([cxx, "-O2", "-shared", "-fPIC", "-std=c++20", "-w",
             f"-D_GLIBCXX_USE_CXX11_ABI={abi}", src, "-o", out]
            + [f"-I{p}" for p in cpp_extension.include_paths()]
            + [f"-I{sysconfig.get_paths()['include']}"]
            + [f"-L{p}" for p in cpp_extension.library_paths()]
            + ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"])


def _info_text(torch_id: str, src_hash: str) -> str:
    return ('"""Written at install time by pydynamo/tensor_check_build.py: what pydynamo._tensor_check '
            'was built from."""\n'
            f"TORCH = {torch_id!r}\nSOURCE_SHA256 = {src_hash!r}\n")


def build(out_dir: str, cxx: str) -> str:
    """Build into out_dir; returns what happened (one line)."""
    try:
        torch_id = torch_build()
    except ImportError as e:
        return f"torch is not importable here ({e})"
    text = source()
    info = os.path.join(out_dir, NAME + "_info.py")
    ext = os.path.join(out_dir, NAME + EXT_SUFFIX)
    want = _info_text(torch_id, source_hash(text))
    try:
        with open(info) as f:
            if f.read() == want and os.path.exists(ext):
                return f"up to date ({torch_id})"
    except OSError:
        pass
    os.makedirs(out_dir, exist_ok=True)
    for p in (info, ext):                 # a failed build leaves nothing that could be loaded
        if os.path.exists(p):
            os.unlink(p)
    tmp = ext + ".tmp"
    try:
        proc = subprocess.run(command(cxx, SOURCE_PATH, tmp), capture_output=True, text=True,
                              timeout=900)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cxx} could not run ({e})"
    if proc.returncode != 0:
        return f"compile failed: {proc.stderr.strip()[-1500:]}"
    os.replace(tmp, ext)
    with open(info, "w") as f:
        f.write(want)
    return f"built for {torch_id}"


def main(argv) -> int:
    out_dir = argv[1]
    cxx = argv[2] if len(argv) > 2 and argv[2] else os.environ.get("CXX", "g++")
    os.makedirs(out_dir, exist_ok=True)
    what = build(out_dir, cxx)
    prefix = "" if what.startswith(("built", "up to date")) else \
        "WARNING: not built at install time (it is built on first use instead): "
    print(f"pydynamo C++ tensor guard extension: {prefix}{what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
