"""Nothing built on the first call (issue 20): the C++ tensor-guard extension is compiled when the
package is installed (CMakeLists.txt -> pydynamo/tensor_check_build.py), and a fresh install
imports it without compiling anything; the build on first use stays only as the fallback.

The fresh install is a real one: `pip install --target` of this tree (its own build dir; see
`fresh` for build isolation), run by an interpreter started with -S so that the editable
install's import redirect (a .pth file) does not apply: pydynamo comes from the target.
"""
import os
import subprocess
import sys
import sysconfig

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SITE = sysconfig.get_paths()["purelib"]        # torch, sympy, ... of this environment
BUILD_SCRIPT = os.path.join(ROOT, "pydynamo", "tensor_check_build.py")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The tree installed into a fresh --target. Without build isolation where this environment
    has the build backend (no network needed); else as .ci/run installs, in pip's isolated
    build environment (pip fetches scikit-build-core), which is what hides the target's torch
    from a naive build."""
    d = tmp_path_factory.mktemp("fresh")
    try:
        import scikit_build_core  # noqa: F401
        isolation = ["--no-build-isolation"]
    except ImportError:
        isolation = []
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *isolation,
                        "--no-deps", "--no-cache-dir", "--target", str(d / "site"),
                        "-C", f"build-dir={d / 'build'}", ROOT],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return d


def _run_installed(fresh, code, **env):
    prelude = f"import sys; sys.path[1:1] = [{str(fresh / 'site')!r}, {SITE!r}]\n"
    env = dict(os.environ, PYDYNAMO_CACHE_DIR=str(fresh / "cache"), **env)
    r = subprocess.run([sys.executable, "-S", "-c", prelude + code], capture_output=True,
                       text=True, env=env, cwd=str(fresh), timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
    return r


def test_fresh_install_ships_the_extension_and_compiles_nothing(fresh):
    site = fresh / "site" / "pydynamo"
    assert any(n.startswith("_tensor_check.") and n.endswith(".so") for n in os.listdir(site))
    assert (site / "_tensor_check_info.py").exists() and (site / "tensor_check.cpp").exists()
    _run_installed(fresh, (
        "import os, torch, pydynamo\n"
        "from pydynamo import tensor_check\n"
        f"assert pydynamo.__file__.startswith({str(fresh)!r}), pydynamo.__file__\n"
        "assert tensor_check.origin() == 'installed', tensor_check.origin()\n"
        f"assert tensor_check.module().__file__.startswith({str(site)!r})\n"
        "f = pydynamo.optimize(lambda x: x * 2 + 1, backend='eager')\n"
        "x = torch.randn(3, 4)\n"
        "for t in (x, x.t(), x.double()): assert torch.equal(f(t), t * 2 + 1)\n"
        "print('ok')\n"), CXX="/nonexistent/g++")     # a compile attempt would fail loudly
    assert not (fresh / "cache" / "guards").exists()   # nothing built on demand


def test_install_for_another_torch_falls_back_to_the_build_on_first_use(fresh, tmp_path):
    """An install whose extension names another torch build (torch upgraded after the install)
    is not imported: the build on first use serves (here it fails: no compiler, so the Python
    checks serve, with one warning), and answers stay right."""
    import shutil
    site = tmp_path / "site"
    shutil.copytree(fresh / "site", site)
    info = site / "pydynamo" / "_tensor_check_info.py"
    info.write_text(info.read_text().replace("TORCH = '", "TORCH = '0.0.1 "))
    r = _run_installed(tmp_path, (
        "import logging, torch, pydynamo\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "from pydynamo import tensor_check\n"
        "assert tensor_check.module() is None and tensor_check.origin() == 'none'\n"
        "f = pydynamo.optimize(lambda x: x - 1, backend='eager')\n"
        "x = torch.randn(5)\n"
        "assert torch.equal(f(x), x - 1)\n"
        "print('ok')\n"), CXX="/nonexistent/g++")
    assert "the install-time build is for 0.0.1" in r.stderr, r.stderr[-2000:]
    assert r.stderr.count("C++ tensor guard check unavailable") == 1, r.stderr[-2000:]


def test_build_script_never_fails_the_install(tmp_path):
    """No torch (here: an interpreter without site-packages) or no compiler: the script says why
    and exits 0, leaving nothing to install (the extension is then built on first use)."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-S", BUILD_SCRIPT, str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "WARNING: not built at install time" in r.stdout, r
    assert "torch is not importable" in r.stdout and os.listdir(out) == []
    r = subprocess.run([sys.executable, BUILD_SCRIPT, str(out), "/nonexistent/g++"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "could not run" in r.stdout, r
    assert os.listdir(out) == []
