"""The compile report (issue 20): PYDYNAMO_REPORT=dir writes one self-contained HTML page per
process, loaded here in a real headless Chromium.

The browser test runs the demo (`python -m pydynamo.demo --no-timings`: graph breaks, a dtype
recompile, a dynamic recompile) plus a function whose broken line and guarded string are HTML
markup and a training graph whose backward compiles at the first backward call, all in one
process under PYDYNAMO_REPORT; then Chromium renders the page (--dump-dom): every frame is there,
with breaks, hints, recompiles and the compile time by phase, no markup from the program became
an element, and every link resolves (anchors to ids on the page, file:// links to existing
generated files). A screenshot is taken (PYDYNAMO_REPORT_SCREENSHOT=path keeps a copy). Skipped,
saying so, only where no Chromium binary is found (CI installs it from the system packages).
The other tests need no browser: the API form (config.report_dir, write_report), the page
written at exit, the environment variable's validation, the phase clock, an entry loaded from the
warm cache in a second process.
"""
import html.parser
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.parse

import pytest
import torch

import pydynamo
from pydynamo import config, convert_frame, phases, report

REPO = pathlib.Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason=f"no Chromium binary found ({', '.join(BROWSERS)} not on PATH; "
    "install it with: apt-get install -y --no-install-recommends chromium)")

MARKUP = "<img src=x onerror=alert(1)>"

PROGRAM = f'''
import sys
import torch
import pydynamo
from pydynamo.demo.__main__ import main

def tagged(x, tag):
    print("<script>alert('tag')</script>", tag)     # a graph break on a line of markup
    return x + len(tag)

def loss_fn(w, x):
    return (torch.tanh(x @ w) ** 2).sum()

rc = main(["--no-timings"])
f = pydynamo.optimize(tagged)
x = torch.randn(4)
f(x, "<b>one</b>")
f(x, {MARKUP!r})                                        # recompiles on the string's value
w = torch.randn(4, 4, requires_grad=True)
pydynamo.optimize(loss_fn)(w, torch.randn(3, 4)).backward()   # backward compiles at call time
sys.exit(rc)
'''


class Page(html.parser.HTMLParser):
    """What a test reads of a page: element names, ids, links, frame sections, text."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.ids, self.hrefs, self.frames, self.chunks = [], set(), [], [], []
        self.feed(text)
        self.text = " ".join(" ".join(self.chunks).split())

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
        if tag == "section" and "frame" in (a.get("class") or "").split():
            self.frames.append(a["id"])

    def handle_data(self, data):
        self.chunks.append(data)


def _browser(profile, *args, timeout=120) -> subprocess.CompletedProcess:
    # --no-sandbox: CI and this machine run tests as root, where Chromium's sandbox refuses;
    # a profile of its own: CI runs three Pythons' tests side by side
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=timeout)


def _check_links(page: Page) -> int:
    """Every link is an anchor on the page or a file:// URI of an existing file; returns how many
    files were linked."""
    files = 0
    for href in page.hrefs:
        if href.startswith("#"):
            assert href[1:] in page.ids, f"anchor {href} has no target"
            continue
        url = urllib.parse.urlparse(href)
        assert url.scheme == "file", f"a link out of the page: {href}"
        path = urllib.parse.unquote(url.path)
        assert os.path.isfile(path), f"linked file missing: {path}"
        files += 1
    return files


@needs_browser
def test_report_renders_in_chromium(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out = tmp_path / "report"
    env = dict(os.environ, PYDYNAMO_REPORT=str(out), PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env,
                         timeout=600, cwd=tmp_path)
    assert run.returncode == 0 and "report could not be written" not in run.stderr, \
        run.stdout[-3000:] + run.stderr[-3000:]
    pages = list(out.iterdir())
    assert [p.name for p in pages] == [f"pydynamo-report-{_pid(pages[0])}.html"], pages
    dom = _browser(tmp_path / "profile", "--dump-dom", pages[0].as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Page(dom.stdout)
    assert "pydynamo compile report" in page.text

    # the frames: the demo's model and its user function (both halves), ours, the training one
    assert len(page.frames) >= 6, page.frames
    for name in ("forward", "next_token_probs", "the rest of next_token_probs", "tagged", "loss_fn"):
        assert f". {name}" in page.text, name
    # graph breaks with the user's line and hint; recompiles with the failing guard and values
    for text in ("print() has a side effect outside the graph", "[tensor_branch]", "if logits.max() > 4.0:",
                 "hint: use torch.where / torch.cond", "Recompiled",
                 "L['ids'].dtype torch.int64 torch.int32", "L['ids'].shape [2, 16] [2, 17]",
                 "<script>alert('tag')</script>", repr(MARKUP), "Compiled at call time",
                 *phases.PHASES):
        assert text in page.text, text
    # the program's markup is text, never an element; the page loads nothing
    assert not {"script", "img", "iframe", "link", "object"} & set(page.tags), set(page.tags)
    assert _check_links(page) >= 3      # wrapper, kernel source and library of a codegen graph

    shot = tmp_path / "report.png"
    r = _browser(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400", pages[0].as_uri())
    assert r.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", r.stderr[-2000:]
    assert shot.stat().st_size > 20000          # not a blank page
    keep = os.environ.get("PYDYNAMO_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def _pid(page: pathlib.Path) -> str:
    return page.stem.rsplit("-", 1)[-1]


@pytest.fixture
def recording(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "report_dir", str(tmp_path / "report"))
    pydynamo.reset()
    report.clear()
    yield tmp_path
    report.clear()
    pydynamo.reset()


def _broken(x, n):
    y = x * n
    pydynamo.graph_break()
    return y.sin()


def test_write_report_on_demand(recording):
    results = []
    convert_frame.RECORDERS.append(results.append)
    try:
        f = pydynamo.optimize(_broken, backend="eager")
        f(torch.randn(3), 2)
        f(torch.randn(3), 3)                        # recompile on n
    finally:
        convert_frame.RECORDERS.remove(results.append)
    path = pydynamo.write_report(str(recording / "page.html"))
    assert path == str(recording / "page.html")
    page = Page(pathlib.Path(path).read_text())
    assert ". _broken" in page.text and ". the rest of _broken" in page.text
    assert "Recompiled" in page.text and "L['n'] 2 3" in page.text
    assert "[explicit_break]" in page.text and f"{__file__}:" in page.text
    _check_links(page)
    # the phases of a compile sum to its compile time (one clock, exclusive phases)
    frames = [r for r in results if isinstance(r, convert_frame.FrameResult)]
    assert frames and all(abs(r.times.total() - r.compile_time_s) < 1e-9 for r in frames)
    assert all(r.times.seconds["tracing"] > 0 for r in frames)
    # nothing of the program is kept alive by the report
    assert not any(isinstance(v, (torch.Tensor, torch.fx.GraphModule)) for f in report._REPORT.frames.values()
                   for e in f.entries for v in vars(e).values())


def test_nothing_recorded_without_a_directory(monkeypatch):
    monkeypatch.setattr(config, "report_dir", None)
    report.clear()
    pydynamo.optimize(_broken, backend="eager")(torch.randn(3), 2)
    pydynamo.reset()
    assert not report._REPORT.frames
    with pytest.raises(ValueError, match="PYDYNAMO_REPORT"):
        pydynamo.write_report()


def _python(*args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO), **env))


def test_page_written_at_exit_when_set_from_code(tmp_path):
    out = tmp_path / "made" / "here"
    r = _python("-c", "import torch, pydynamo\n"
                f"pydynamo.config.report_dir = {str(out)!r}\n"
                "pydynamo.optimize(lambda x: x.cos() + 1, backend='eager')(torch.randn(2))\n")
    assert r.returncode == 0, r.stderr
    pages = list(out.glob("pydynamo-report-*.html"))
    assert len(pages) == 1 and ". &lt;lambda&gt;" in pages[0].read_text()


def test_environment_variable_is_validated(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    r = _python("-c", "import pydynamo.config as c; print(c.report_dir)", PYDYNAMO_REPORT=str(a_file / "sub"))
    assert r.stdout.strip() == "None" and "is not a directory; ignored" in r.stderr, r.stderr
    r = _python("-c", "import pydynamo.config as c; print(c.report_dir)", PYDYNAMO_REPORT="~/x/../rep")
    assert r.stdout.strip() == os.path.abspath(os.path.expanduser("~/rep")) and not r.stderr


def test_phase_clock_is_exclusive_and_late_clocks_are_observed():
    late = []
    phases.LATE.append(late.append)
    try:
        with phases.compiling() as clock:
            time.sleep(0.01)
            with phases.phase("codegen"):
                time.sleep(0.01)
                with phases.phase("compile"):
                    time.sleep(0.02)
                phases.generated("wrapper", "/x.py")
        with phases.phase("loading"):               # outside a compile: a clock of its own
            time.sleep(0.01)
    finally:
        phases.LATE.remove(late.append)
    s = clock.seconds
    assert s["tracing"] >= 0.01 and 0.01 <= s["codegen"] < 0.02 and s["compile"] >= 0.02
    assert abs(clock.total() - sum(s.values())) < 1e-12 and clock.files == [("wrapper", "/x.py")]
    assert len(late) == 1 and late[0].seconds["loading"] >= 0.01 and late[0] is not clock


def test_entry_loaded_from_the_warm_cache_is_reported(tmp_path):
    code = ("import torch, pydynamo\n"
            "def f(x):\n    return torch.sin(x) * 2 + 1\n"
            "pydynamo.optimize(f, backend='eager')(torch.randn(4, 4))\n")
    prog = tmp_path / "prog.py"         # (a frame from `python -c` has no source file to key on)
    prog.write_text(code)
    pages = []
    for run in ("first", "second"):      # the second process loads what the first stored
        r = _python(str(prog), PYDYNAMO_WARM_START="1", PYDYNAMO_CACHE_DIR=str(tmp_path / "cache"),
                    PYDYNAMO_REPORT=str(tmp_path / run))
        assert r.returncode == 0, r.stderr
        pages += [Page(p.read_text()) for p in (tmp_path / run).glob("*.html")]
    first, second = pages
    assert "compiled at" in first.text and "loaded from the warm cache at" not in first.text
    assert "loaded from the warm cache at" in second.text and ". f" in second.text
    assert "of them loaded from the warm cache 1" in second.text and "guards" in second.text
