"""Output code: a replacement for the frame's code that calls the compiled graph, rebuilds the
return value, and replays side effects.

The replacement is generated as Python source with the original signature (same argument names,
kinds, cell and free variables), compiled, and its code object taken: the C hook requires the
same argument/cell/free layout, which `build_code` checks before returning. Graph inputs are read
through their sources (`x`, `self._parameters['weight']`); the compiled graph and any
non-literal constants live in the frame's globals under `__pydynamo_*` names (pydynamo/installed.py:
removed again by reset()).
Order inside the body: call the graph; compute every value to return or write into temporaries;
apply the writes; return. Reading before writing keeps sources valid (a write cannot change what
an earlier read meant).
"""
from __future__ import annotations

import collections
import inspect
import itertools
import keyword
import math
import types

from pydynamo.exc import Unsupported
from pydynamo.installed import cells_of, const_ids as _const_ids, install, register_source
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import is_literal
from pydynamo.executor.variables.containers import ConstDictVariable, ListVariable, SetVariable
from pydynamo.executor.variables.tensor import TensorVariable
from pydynamo.executor.variables.user_objects import ModelOutputVariable, UserDefinedObjectVariable
from pydynamo.sources import GlobalSource, Source, py_name
from pydynamo.user_errors import place_graph_error

OUT = "__pydynamo_out"
PLACE_ERROR = "__pydynamo_place_error"


def _new_object(cls, attrs, items=None):
    """An instance of a user class made in the frame, without running its __init__ again; a dict
    subclass gets its items through the dict's own __setitem__ (not an override)."""
    if items is None:
        obj = object.__new__(cls)
    else:
        obj = dict.__new__(cls)
        put = collections.OrderedDict.__setitem__ if isinstance(obj, collections.OrderedDict) else dict.__setitem__
        for k, v in items.items():
            put(obj, k, v)
    obj.__dict__.update(attrs)
    return obj


def _make_function(code, globals_, defaults, kwdefaults, closure):
    fn = types.FunctionType(code, globals_, code.co_name, defaults or None, closure or None)
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    return fn


class OutputCodegen:
    def __init__(self, code: types.CodeType, frame_globals: dict, frame_cells: dict | None = None):
        self.code = code
        self.frame_globals = frame_globals
        # the root frame's cell trackers by name (None: unknown, its cells cannot be shared)
        self.frame_cells = frame_cells
        self.cell_writes: list[str] = []  # `name = value` for frame cells, after every read
        self.lines: list[str] = []
        self.graph_outputs: list[TensorVariable] = []
        self._out_index: dict[int, int] = {}
        self._memo: dict[int, str] = {}
        self._ntemps = 0
        self.globals_declared: set[str] = set()
        self.nonlocals_declared: set[str] = set()
        self.frame_names = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)

    # --- leaves -----------------------------------------------------------------------------
    def load_source(self, source: Source) -> str:
        root = source.root()
        if isinstance(root, GlobalSource) and root.global_name in self.frame_names:
            raise Unsupported("name_clash", f"global {root.global_name!r} is shadowed by a local")
        return source.reload()

    def load_const(self, value) -> str:
        if is_literal(value) and not isinstance(value, range) and \
                not (isinstance(value, (float, complex)) and not _finite(value)):
            return repr(value)
        name = f"__pydynamo_const_{next(_const_ids)}"
        install(self.frame_globals, name, value)
        return name

    def load_tensor(self, var: TensorVariable) -> str:
        if var.dead is not None:
            raise Unsupported("vmap", f"returning {var.dead}")
        if var.source is not None:
            return self.load_source(var.source)
        idx = self._out_index.get(id(var))
        if idx is None:
            idx = self._out_index[id(var)] = len(self.graph_outputs)
            self.graph_outputs.append(var)
        return f"{OUT}[{idx}]"

    def temp(self, expr: str) -> str:
        name = f"__pydynamo_tmp{self._ntemps}"
        self._ntemps += 1
        self.lines.append(f"{name} = {expr}")
        return name

    def reconstruct(self, var: VariableTracker) -> str:
        """Expression for `var`; mutable objects made in the frame are built once (identity)."""
        if id(var) in self._memo:
            return self._memo[id(var)]
        expr = var.reconstruct(self)
        if var.source is None and isinstance(var, (ListVariable, ConstDictVariable, SetVariable,
                                                   UserDefinedObjectVariable, ModelOutputVariable)):
            expr = self.temp(expr)
            self._memo[id(var)] = expr
        return expr

    def new_object(self, var: UserDefinedObjectVariable) -> str:
        attrs = ", ".join(f"{k!r}: {self.reconstruct(v)}" for k, v in var.attrs.items())
        view = getattr(var, "_dict_view", None)
        items = ""
        if view is not None:
            items = ", {" + ", ".join(f"{self.load_const(k)}: {self.reconstruct(v)}" for k, v in view.items.items()) + "}"
        return f"{self.load_const(_new_object)}({self.load_const(var.cls)}, {{{attrs}}}{items})"

    def make_function(self, var) -> str:
        """A function made in the frame (lambda, nested def, a closure returned by an inlined
        helper) that outlives the graph: rebuilt from its code with its defaults and closure. A
        cell of the frame itself is the frame's real cell (its final value written back); a cell
        of an inlined call, which has no frame at run time, becomes a new cell holding its final
        value, shared by every function that closed over it."""
        defaults = "(" + "".join(self.reconstruct(d) + ", " for d in var.defaults) + ")"
        kw = "{" + ", ".join(f"{k!r}: {self.reconstruct(v)}" for k, v in var.kwdefaults.items()) + "}"
        globals_ = "globals()" if var.f_globals is self.frame_globals else self.load_const(var.f_globals)
        closure = "(" + "".join(self.cell(c) + ", " for c in var.closure) + ")"
        return self.temp(f"{self.load_const(_make_function)}({self.load_const(var.code)}, {globals_}, "
                         f"{defaults}, {kw}, {closure})")

    def cell(self, cell) -> str:
        if id(cell) in self._memo:
            return self._memo[id(cell)]
        mine = self.frame_cells is not None and self.frame_cells.get(cell.name) is cell
        if mine:
            if cell.name not in self.code.co_cellvars + self.code.co_freevars:
                raise Unsupported("closure_escape", f"cell {cell.name!r} is not a cell of the frame")
            if not cell.external and cell.contents is not None:
                # the frame's own cell: written last, so no earlier read sees the new value
                self.cell_writes.append(f"{cell.name} = {self.temp(self.reconstruct(cell.contents))}")
            expr = self.temp(f"{self.load_const(cells_of)}(lambda: ({cell.name},), ({cell.name!r},))[0]")
        elif self.frame_cells is None and cell.name in self.code.co_cellvars + self.code.co_freevars:
            raise Unsupported("closure_escape", f"cannot tell whether cell {cell.name!r} is the frame's")
        elif cell.external or (cell.contents is None and cell.lazy is not None):
            # a real cell of a function made outside the frame: reachable only through that function
            raise Unsupported("closure_escape", f"a function made in the frame closes over {cell.name!r}, "
                              "a cell of a function defined outside it")
        else:
            contents = "" if cell.contents is None else self.reconstruct(cell.contents)
            expr = self.temp(f"{self.load_const(types.CellType)}({contents})")
        self._memo[id(cell)] = expr
        return expr

    def declare_global(self, name: str) -> str:
        if name in self.frame_names:
            raise Unsupported("name_clash", f"global {name!r} is also a local name")
        self.globals_declared.add(name)
        return name

    def declare_nonlocal(self, name: str) -> str:
        if name not in self.code.co_freevars:
            raise Unsupported("deref_store", f"store to cell variable {name!r}")
        self.nonlocals_declared.add(name)
        return name


def _finite(v) -> bool:
    if isinstance(v, complex):
        return math.isfinite(v.real) and math.isfinite(v.imag)
    return math.isfinite(v)


def signature_text(code: types.CodeType) -> str:
    names = tuple(py_name(n) for n in code.co_varnames)
    n_pos, n_po, n_kw = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    parts = list(names[:n_po]) + (["/"] if n_po else []) + list(names[n_po:n_pos])
    i = n_pos + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + names[i])
        i += 1
    elif n_kw:
        parts.append("*")
    parts += names[n_pos:n_pos + n_kw]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[i])
    return ", ".join(parts)


def build_code(code: types.CodeType, cg: OutputCodegen, graph_call: str | None,
               ret_expr: str) -> tuple[types.CodeType, str]:
    """Assemble the replacement function's source, compile it, check the frame layout."""
    for name in code.co_freevars + code.co_cellvars:
        if keyword.iskeyword(name) or not name.isidentifier():
            raise Unsupported("odd_name", f"variable name {name!r}")
    renamed = {py_name(n): n for n in code.co_varnames if py_name(n) != n}  # `.0` of comprehensions
    if any(keyword.iskeyword(n) for n in code.co_varnames):
        raise Unsupported("odd_name", "a keyword as a variable name")
    body = []
    if cg.globals_declared:
        body.append("global " + ", ".join(sorted(cg.globals_declared)))
    if cg.nonlocals_declared:
        body.append("nonlocal " + ", ".join(sorted(cg.nonlocals_declared)))
    if graph_call is not None:
        # an op that raises inside the graph raises eager's exception at the user's line of it
        # (pydynamo/user_errors.py); a try costs nothing on 3.11+ until something raises
        install(cg.frame_globals, PLACE_ERROR, place_graph_error)
        body += ["try:", f"    {OUT} = {graph_call}", "except BaseException as __pydynamo_exc:",
                 f"    {PLACE_ERROR}(__pydynamo_exc)", "    raise"]
    body += cg.lines + cg.cell_writes
    body.append(f"return {ret_expr}")
    # keep the original cell and free variables (the hook checks the layout): dead code that makes
    # the compiler allocate the same cells; non-argument cell variables need a (dead) binding
    cells = list(code.co_cellvars) + list(code.co_freevars)
    if cells:
        unbound = [c for c in code.co_cellvars if c not in code.co_varnames[:_nargs(code)]]
        body.append("if 0:")
        if unbound:
            body.append("    " + " = ".join(unbound) + " = None")
        body.append("    (lambda: (" + ", ".join(cells) + ",))")
    inner = f"def {_fn_name(code)}({signature_text(code)}):\n" + "\n".join("    " + line for line in body)
    if code.co_freevars:
        outer = "def __pydynamo_outer(" + ", ".join(code.co_freevars) + "):\n"
        outer += "\n".join("    " + line for line in inner.splitlines())
        outer += f"\n    return {_fn_name(code)}\n"
        text = outer
    else:
        text = inner + "\n"
    filename = f"<pydynamo transformed {code.co_name} from {code.co_filename}:{code.co_firstlineno} " \
               f"#{next(_builds)}>"
    module = compile(text, filename, "exec")
    new = _find_code(module, _fn_name(code))
    _register_source(filename, text, code.co_firstlineno - new.co_firstlineno)
    new = new.replace(co_name=code.co_name, co_qualname=code.co_qualname, co_firstlineno=code.co_firstlineno)
    if renamed:
        new = new.replace(co_varnames=tuple(renamed.get(n, n) for n in new.co_varnames))
    if (new.co_argcount, new.co_posonlyargcount, new.co_kwonlyargcount, new.co_cellvars, new.co_freevars,
            new.co_varnames[:_nargs(code)]) != (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                                                code.co_cellvars, code.co_freevars, code.co_varnames[:_nargs(code)]) \
            or (new.co_flags ^ code.co_flags) & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        raise Unsupported("layout", "could not reproduce the frame layout for the output code")
    return new, text


_builds = itertools.count()


def _register_source(filename: str, text: str, shift: int) -> None:
    """Make the generated source visible to tracebacks, pdb and inspect through linecache. The
    code object keeps the original co_firstlineno, which moves its line numbers by `shift`; the
    cached text is moved the same way so every line number points at its statement."""
    lines = text.splitlines(True)
    lines = ["\n"] * shift + lines if shift >= 0 else lines[-shift:]
    register_source(filename, lines)


def _nargs(code) -> int:
    return code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) + \
        bool(code.co_flags & inspect.CO_VARKEYWORDS)


def _fn_name(code) -> str:
    return "__pydynamo_transformed"


def _find_code(container: types.CodeType, name: str) -> types.CodeType:
    for c in container.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name:
                return c
            found = _find_code(c, name)
            if found is not None:
                return found
    return None
