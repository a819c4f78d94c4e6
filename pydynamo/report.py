"""The compile report: one self-contained HTML page per process of what pydynamo did.

    PYDYNAMO_REPORT=dir python prog.py      # dir/pydynamo-report-<pid>.html, written at exit
    pydynamo.config.report_dir = "dir"       # the same from code (recording starts with it)
    pydynamo.write_report("page.html")       # written now (returns the path)

While `config.report_dir` is set, convert_frame hands every translation's record here (`record`:
the FrameResult of a compiled entry, the GraphBreak of a frame that runs in Python, the
RecompileExplanation before a recompile, a WarmLoad for an entry loaded from the warm cache
instead of traced), and phases.LATE the clocks of graphs compiled outside
a frame's compile (a backward, at the first backward call). The page shows, per frame (code
object), its source location and source, and per compiled entry: why it recompiled (each
failing guard, expected and got), the compile time split into phases (pydynamo/phases.py),
the graphs (op counts, FX code), the graph break that cut it (the user's line, its source text,
the reason, the hint, the inlined call chain), the guards, and links to the generated files
(wrappers, kernel sources, libraries in the codegen cache dir, as file:// URIs).

Invariants:
  * Records are turned into text when they arrive: the report holds no graph, tensor, code
    object or guard, so it keeps nothing alive.
  * Every piece of text on the page is HTML-escaped (user source and names go into it); the
    page has no script and loads nothing (style inline).
  * Writing is atomic (temp file, rename) and never raises at exit: a failure warns once.
  * Recording does not depend on the page ever being written; `clear()` forgets everything.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import datetime
import html
import linecache
import os
import pathlib
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch

from pydynamo import config, phases
from pydynamo.bytecode import origin_of, user_frame_name
from pydynamo.exc import GraphBreak
from pydynamo.guards import settings_of
from pydynamo.recompiles import RecompileExplanation, user_names, value_text

_SOURCE_LINES = 80      # a frame's source shown up to this many lines


@dataclasses.dataclass
class WarmLoad:
    """An entry an earlier process compiled, loaded from the warm cache (pydynamo/warm_cache.py)
    instead of traced: its guard, and the clock of the load."""
    guard: Any
    times: phases.Clock


@dataclasses.dataclass
class _Break:
    reason: str
    message: str
    location: str
    filename: Optional[str]
    lineno: Optional[int]
    line: str           # the user's source line, stripped
    hint: str
    stack: List[Tuple[str, int, str]]


@dataclasses.dataclass
class _Graph:
    name: str
    op_count: int
    ops: List[Tuple[str, int]]      # (op, how many), most frequent first
    code: str


@dataclasses.dataclass
class _Entry:
    at_s: float                     # seconds since the report started
    compile_s: float
    seconds: Dict[str, float]
    graphs: List[_Graph]
    guards: List[str]
    files: List[Tuple[str, str]]
    cut: Optional[_Break]
    why: Optional[List[List[Tuple[str, str, str, str, str]]]]   # recompile: per old entry, failures
    settings: str                   # the optimize() settings (backend, mode, ...)
    loaded: bool = False            # from the warm cache, not traced (no graphs to show)


@dataclasses.dataclass(eq=False)      # (one per code object: compared by identity)
class _Frame:
    name: str
    filename: str
    firstlineno: int
    lines: Tuple[int, int]          # source line range shown
    entries: List[_Entry] = dataclasses.field(default_factory=list)
    eager: List[Tuple[Optional[list], _Break]] = dataclasses.field(default_factory=list)
    pending_why: Optional[list] = None

    @property
    def anchor_lines(self) -> set:
        marks = {e.cut.lineno for e in self.entries if e.cut and e.cut.filename == self.filename}
        return marks | {b.lineno for _, b in self.eager if b.filename == self.filename}


class _Report:
    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        self.started = time.time()
        self.t0 = time.perf_counter()
        self.frames: Dict[tuple, _Frame] = {}
        self.late: List[Tuple[float, Dict[str, float], List[Tuple[str, str]]]] = []


_REPORT = _Report()
_exit_registered = False


def clear() -> None:
    """Forget everything recorded so far (the next page starts empty)."""
    with _REPORT.lock:
        _REPORT.clear()


def record(item, code) -> None:
    """A translation's record for `code` (see the module docstring); called by convert_frame
    while config.report_dir is set."""
    _register_exit()
    with _REPORT.lock:
        frame = _frame(code)
        if isinstance(item, RecompileExplanation):
            frame.pending_why = [[(f.what, value_text(f.expected), value_text(f.actual), f.kind, f.origin)
                                  for f in fails] for fails in item.entries]
        elif isinstance(item, WarmLoad):
            frame.entries.append(_Entry(
                time.perf_counter() - _REPORT.t0, item.times.total(), dict(item.times.seconds), [],
                [user_names(code, g.describe()) for g in getattr(item.guard, "guards", [])],
                list(item.times.files), None, frame.pending_why,
                settings_of(getattr(item.guard, "callback", None)), loaded=True))
            frame.pending_why = None
        elif isinstance(item, GraphBreak):       # the frame runs in Python as a whole
            frame.eager.append((frame.pending_why, _break(item)))
            frame.pending_why = None
        else:                                    # a FrameResult
            clock = item.times
            frame.entries.append(_Entry(
                time.perf_counter() - _REPORT.t0, item.compile_time_s,
                dict(clock.seconds) if clock else {}, [_graph(g) for g in item.graphs],
                item.guard_texts(), list(clock.files) if clock else [],
                _break(item.graph_break) if item.graph_break is not None else None,
                frame.pending_why, settings_of(getattr(item.guard, "callback", None))))
            frame.pending_why = None


def _late(clock: phases.Clock) -> None:
    if config.report_dir is None:
        return
    _register_exit()
    with _REPORT.lock:
        _REPORT.late.append((time.perf_counter() - _REPORT.t0, dict(clock.seconds), list(clock.files)))


phases.LATE.append(_late)


def _frame(code) -> _Frame:
    key = (code.co_filename, code.co_firstlineno, code.co_qualname, len(code.co_code))
    frame = _REPORT.frames.get(key)
    if frame is None:
        lines = [ln for _, _, ln in code.co_lines() if ln is not None] + [code.co_firstlineno]
        first, last = min(lines), max(lines)
        # resume code is named `f (resumed at file:line)`, which tells the rests of f apart
        name = user_frame_name(code) if origin_of(code) is None else f"the rest of {code.co_name}"
        frame = _REPORT.frames[key] = _Frame(name, code.co_filename, code.co_firstlineno,
                                             (first, min(last, first + _SOURCE_LINES - 1)))
    return frame


def _break(gb: GraphBreak) -> _Break:
    line = linecache.getline(gb.filename, gb.lineno).strip() if gb.filename and gb.lineno else ""
    return _Break(gb.reason_code, gb.message, gb.location(), gb.filename, gb.lineno, line, gb.hint,
                  list(gb.user_stack))


def _graph(g) -> _Graph:
    ops: collections.Counter = collections.Counter()
    for n in g.gm.graph.nodes:
        if n.op == "call_function":
            ops[getattr(n.target, "__name__", None) or str(n.target)] += 1
        elif n.op == "call_method":
            ops[f".{n.target}"] += 1
        elif n.op == "call_module":
            ops[type(g.gm.get_submodule(n.target)).__name__] += 1
    return _Graph(g.name, g.op_count, ops.most_common(), g.gm.code.strip())


# --- writing ------------------------------------------------------------------------------------

def default_path() -> str:
    """This process's page in config.report_dir."""
    if config.report_dir is None:
        raise ValueError("pydynamo: no report directory: set PYDYNAMO_REPORT or "
                         "pydynamo.config.report_dir, or pass write_report a path")
    return os.path.join(config.report_dir, f"pydynamo-report-{os.getpid()}.html")


def write_report(path: Optional[str] = None) -> str:
    """Write the compile report of this process so far to `path` (default: its page in
    config.report_dir) and return the path. Recording happens only while config.report_dir is
    set."""
    path = os.path.abspath(path or default_path())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _REPORT.lock:
        text = render(_REPORT)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".pydynamo-report-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def _register_exit() -> None:
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(_write_at_exit)


def _write_at_exit() -> None:
    if config.report_dir is None:
        return
    try:
        write_report()
    except Exception as e:   # never the reason a program's exit fails
        warnings.warn(f"pydynamo: the compile report could not be written: {type(e).__name__}: {e}")


# --- the page -----------------------------------------------------------------------------------

def esc(value) -> str:
    return html.escape(str(value), quote=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#1b1f24;background:#fff}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.3em;margin:1.4em 0 .4em;border-bottom:2px solid #d0d7de;padding-bottom:.2em}
h3{font-size:1.08em;margin:1em 0 .3em}h4{font-size:1em;margin:.8em 0 .2em}
.meta,.loc{color:#57606a}.loc{font-weight:normal;font-size:.85em;font-family:ui-monospace,monospace}
table{border-collapse:collapse;margin:.3em 0 .8em}th,td{border:1px solid #d0d7de;padding:.2em .6em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:.5em .7em;overflow-x:auto;font:12px/1.4 ui-monospace,monospace;margin:.3em 0}
code{font-family:ui-monospace,monospace;font-size:.92em}
.frame{border:1px solid #d0d7de;border-radius:6px;padding:.2em 1em .8em;margin:1em 0}
.entry{border-left:4px solid #54aeff;padding:.1em .9em;margin:.8em 0}
.break{border-left:4px solid #d4a72c;background:#fff8c5;padding:.3em .8em;margin:.5em 0}
.eager{border-left:4px solid #cf222e;background:#ffebe9;padding:.3em .8em;margin:.5em 0}
.recompile{border-left:4px solid #8250df;background:#fbefff;padding:.3em .8em;margin:.5em 0}
.hint{color:#0a3069}.bar{display:flex;height:14px;width:420px;border:1px solid #d0d7de;margin:.3em 0}
.bar span{display:block;height:100%}.mark{background:#fff8c5;display:block}
.p0{background:#54aeff}.p1{background:#4ac26b}.p2{background:#d4a72c}.p3{background:#cf222e}.p4{background:#8250df}
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
details{margin:.3em 0}summary{cursor:pointer;color:#0969da}
"""


def render(rep: _Report) -> str:
    frames = sorted(rep.frames.values(), key=lambda f: (f.entries[0].at_s if f.entries else float("inf")))
    ids = {id(f): f"frame-{i + 1}" for i, f in enumerate(frames)}
    entries = [e for f in frames for e in f.entries]
    breaks = [(f, e.cut) for f in frames for e in f.entries if e.cut] + \
             [(f, b) for f in frames for _, b in f.eager]
    totals = dict.fromkeys(phases.PHASES, 0.0)
    for seconds in [e.seconds for e in entries] + [s for _, s, _ in rep.late]:
        for p, s in seconds.items():
            totals[p] += s
    recompiles = sum(1 for f in frames for e in f.entries if e.why is not None) + \
        sum(1 for f in frames for why, _ in f.eager if why is not None)
    started = datetime.datetime.fromtimestamp(rep.started).isoformat(timespec="seconds")
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>pydynamo compile report: {esc(' '.join(sys.argv) or 'python')}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>pydynamo compile report</h1>",
        f'<p class="meta">process {os.getpid()} &middot; <code>{esc(" ".join([sys.executable] + sys.argv))}</code>'
        f"<br>started {esc(started)}, written {esc(datetime.datetime.now().isoformat(timespec='seconds'))}"
        f" &middot; Python {esc(sys.version.split()[0])} &middot; torch {esc(torch.__version__)}</p>",
        '<h2 id="summary">Summary</h2><table>',
        _row("frames compiled", sum(1 for f in frames if f.entries)),
        _row("compiled entries", len(entries)),
        _row("of them loaded from the warm cache", sum(1 for e in entries if e.loaded)),
        _row("graphs", sum(len(e.graphs) for e in entries)),
        _row("ops in graphs", sum(g.op_count for e in entries for g in e.graphs)),
        _row("graph breaks", len(breaks)),
        _row("recompiles", recompiles),
        _row("frames run in Python", sum(1 for f in frames if f.eager and not f.entries)),
        _row("compile time (ms)", _ms(sum(totals.values()))),
        "</table>", "<h3>Compile time by phase</h3>", _split(totals)]
    out += ["<h3>Frames</h3>", "<table><tr><th>#</th><th>function</th><th>location</th><th>entries</th>"
            "<th>graphs</th><th>ops</th><th>breaks</th><th>compile ms</th></tr>"]
    for i, f in enumerate(frames):
        out.append(
            f'<tr><td class="n">{i + 1}</td><td><a href="#{ids[id(f)]}">{esc(f.name)}</a></td>'
            f"<td><code>{esc(f.filename)}:{f.firstlineno}</code></td><td class=\"n\">{len(f.entries)}</td>"
            f'<td class="n">{sum(len(e.graphs) for e in f.entries)}</td>'
            f'<td class="n">{sum(g.op_count for e in f.entries for g in e.graphs)}</td>'
            f'<td class="n">{sum(1 for e in f.entries if e.cut) + len(f.eager)}</td>'
            f'<td class="n">{_ms(sum(e.compile_s for e in f.entries))}</td></tr>')
    out.append("</table>")
    if breaks:
        seen: Dict[tuple, list] = {}     # one row per break site, with how often it was taken
        for f, b in breaks:
            seen.setdefault((b.location, b.reason, b.message, b.line, b.hint), []).append(f)
        out += ['<h3 id="breaks">Graph breaks</h3>', "<table><tr><th>where</th><th>reason</th>"
                "<th>line</th><th>taken</th><th>in</th></tr>"]
        for (where, reason, message, line, hint), fs in seen.items():
            links = ", ".join(f'<a href="#{ids[id(f)]}">{esc(f.name)}</a>' for f in dict.fromkeys(fs))
            hint = f'<div class="hint">hint: {esc(hint)}</div>' if hint else ""
            out.append(f"<tr><td><code>{esc(where)}</code></td><td>{esc(message)} "
                       f"<code>[{esc(reason)}]</code>{hint}</td><td><code>{esc(line)}</code></td>"
                       f'<td class="n">{len(fs)}</td><td>{links}</td></tr>')
        out.append("</table>")
    for f in frames:
        out.append(_frame_html(f, ids[id(f)]))
    if rep.late:
        out.append('<h2 id="late">Compiled at call time</h2><p>Graphs compiled outside a frame\'s '
                   "compile: a training graph's backward, compiled at its first backward call.</p>")
        for i, (at, seconds, files) in enumerate(rep.late):
            out.append(f'<div class="entry"><h3>{i + 1}. at {at:.2f} s</h3>{_split(seconds)}{_files(files)}</div>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _row(name: str, value) -> str:
    return f'<tr><th>{esc(name)}</th><td class="n">{esc(value)}</td></tr>'


def _split(seconds: Dict[str, float], brief: bool = False) -> str:
    """The time by phase: a bar and a table (`brief`: a bar and one line of the phases that took
    time)."""
    total = sum(seconds.values())
    bar = "".join(f'<span class="p{i}" style="width:{100 * seconds.get(p, 0) / total:.2f}%" '
                  f'title="{esc(p)}"></span>' for i, p in enumerate(phases.PHASES)) if total else ""
    if brief:
        parts = " &middot; ".join(f'<span class="sw p{i}"></span>{esc(p)} {_ms(seconds[p])} ms'
                                  for i, p in enumerate(phases.PHASES) if seconds.get(p))
        return f'<div class="bar">{bar}</div><div>compile time: {parts or "0 ms"}</div>'
    rows = "".join(f'<tr><td><span class="sw p{i}"></span>{esc(p)}</td><td class="n">{_ms(seconds.get(p, 0))}</td>'
                   f'<td class="n">{(100 * seconds.get(p, 0) / total if total else 0):.0f}%</td></tr>'
                   for i, p in enumerate(phases.PHASES))
    return (f'<div class="bar">{bar}</div><table class="split"><tr><th>phase</th><th>ms</th><th>%</th></tr>'
            f'{rows}<tr><th>total</th><td class="n">{_ms(total)}</td><td></td></tr></table>')


def _files(files: List[Tuple[str, str]]) -> str:
    if not files:
        return ""
    items = "".join(f'<li>{esc(kind)}: <a href="{esc(pathlib.Path(path).as_uri())}">{esc(path)}</a></li>'
                    for kind, path in files if path)
    return f"<h4>Generated code</h4><ul>{items}</ul>"


def _source(f: _Frame) -> str:
    marks = f.anchor_lines
    first, last = f.lines
    rows = []
    for n in range(first, last + 1):
        text = linecache.getline(f.filename, n).rstrip("\n")
        line = f"{n:5d}  {esc(text)}"
        rows.append(f'<span class="mark">{line}</span>' if n in marks else line + "\n")
    if not any(linecache.getline(f.filename, n) for n in range(first, last + 1)):
        return ""
    return f"<details><summary>source (lines {first}-{last})</summary><pre>{''.join(rows)}</pre></details>"


def _break_html(b: _Break, cls: str, title: str) -> str:
    out = [f'<div class="{cls}"><b>{esc(title)}</b> at <code>{esc(b.location)}</code>: {esc(b.message)} '
           f"<code>[{esc(b.reason)}]</code>"]
    if b.line:
        out.append(f"<pre>{esc(b.lineno)}  {esc(b.line)}</pre>")
    if b.hint:
        out.append(f'<div class="hint">hint: {esc(b.hint)}</div>')
    if len(b.stack) > 1:
        out.append("<details><summary>call chain (inlined calls)</summary><pre>" + "\n".join(
            f"{esc(fn)}:{esc(ln)} in {esc(name)}" for fn, ln, name in b.stack) + "</pre></details>")
    out.append("</div>")
    return "".join(out)


def _why_html(why: list) -> str:
    rows = []
    for i, fails in enumerate(why):
        if not fails:
            rows.append(f'<tr><td class="n">{i + 1}</td><td colspan="5">(no single guard fails: '
                        "rejected as a whole)</td></tr>")
        rows += [f'<tr><td class="n">{i + 1}</td><td><code>{esc(what)}</code></td><td><code>{esc(exp)}</code></td>'
                 f"<td><code>{esc(got)}</code></td><td>{esc(kind)}</td><td><code>{esc(origin)}</code></td></tr>"
                 for what, exp, got, kind, origin in fails]
    return ('<div class="recompile"><b>Recompiled</b>: no compiled entry accepted the call. '
            "<table><tr><th>entry</th><th>guard on</th><th>expected</th><th>got</th><th>kind</th>"
            f"<th>guard from</th></tr>{''.join(rows)}</table></div>")


def _frame_html(f: _Frame, anchor: str) -> str:
    out = [f'<section class="frame" id="{anchor}"><h2>{esc(anchor.split("-")[1])}. {esc(f.name)} '
           f'<span class="loc">{esc(f.filename)}:{f.firstlineno}</span></h2>', _source(f)]
    for k, e in enumerate(f.entries):
        how = "loaded from the warm cache" if e.loaded else "compiled"
        out.append(f'<div class="entry" id="{anchor}-entry-{k + 1}"><h3>entry {k + 1}'
                   f'{" (recompile)" if e.why is not None else ""} <span class="loc">{how} at '
                   f"{e.at_s:.2f} s in {_ms(e.compile_s)} ms</span></h3>")
        if e.why is not None:
            out.append(_why_html(e.why))
        if e.cut:
            out.append(_break_html(e.cut, "break", "Graph break"))
        out.append(f'<div class="meta">{esc(e.settings)}</div>' + _split(e.seconds, brief=True))
        out.append(f"<h4>Graphs ({len(e.graphs)})</h4>" if not e.loaded else
                   "<p>Loaded from the warm cache: not traced in this process, no graphs to show.</p>")
        if e.graphs:
            out.append("<table><tr><th>graph</th><th>ops</th><th>op counts</th></tr>")
            for g in e.graphs:
                counts = ", ".join(f"{esc(op)} &times;{n}" for op, n in g.ops)
                out.append(f'<tr><td><code>{esc(g.name)}</code></td><td class="n">{g.op_count}</td>'
                           f"<td>{counts}</td></tr>")
            out.append("</table>")
            out += [f"<details><summary>FX graph code: {esc(g.name)}</summary><pre>{esc(g.code)}</pre></details>"
                    for g in e.graphs]
        out.append(f"<details><summary>{len(e.guards)} guards</summary><pre>"
                   + "\n".join(esc(t) for t in e.guards) + "</pre></details>")
        out.append(_files(e.files))
        out.append("</div>")
    for why, b in f.eager:
        if why is not None:
            out.append(_why_html(why))
        out.append(_break_html(b, "eager", "Runs in Python (not compiled)"))
    out.append("</section>")
    return "\n".join(out)
