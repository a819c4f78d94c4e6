"""User functions, closures and methods — all inlined by a nested translator when called.

UserFunctionVariable wraps a real function object (reached through a source: its defaults and
closure cells are read through that source, so they are guarded like any input).
NestedUserFunctionVariable is a function made inside the traced frame (MAKE_FUNCTION: lambdas,
nested defs, comprehensions on 3.11); its defaults and cells are trackers.
Argument binding (defaults, *args, **kwargs, keyword-only) uses Python's own rules through
`inspect.Signature.bind` on a stand-in function carrying the same code flags.
"""
from __future__ import annotations

import functools
import inspect
import types

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import CONSTANT_TYPES, ConstantVariable
from pydynamo.executor.variables.containers import ConstDictVariable, TupleVariable
from pydynamo.sources import AttrSource, ClosureSource, DefaultsSource


class CellVariable(VariableTracker):
    """A closure cell created inside the frame (MAKE_CELL / LOAD_CLOSURE)."""

    def __init__(self, contents: VariableTracker | None = None, name: str = "", external: bool = False):
        super().__init__()
        self.contents = contents
        self.name = name
        self.external = external  # a real cell outside the frame: stores must be replayed
        self.lazy = None          # (value, source) to wrap on first read

    def __repr__(self):
        return f"CellVariable({self.name}={self.contents})"


def bind_args(code: types.CodeType, name: str, defaults: tuple, kwdefaults: dict,
              args: list, kwargs: dict) -> dict:
    """Map parameter names to trackers exactly as a call to a function with `code` would."""
    stand_in = types.FunctionType(_sig_code(code), {}, name)
    stand_in.__defaults__ = tuple(defaults) or None
    stand_in.__kwdefaults__ = dict(kwdefaults) or None
    try:
        bound = inspect.signature(stand_in).bind(*args, **kwargs)
    except TypeError as e:
        raise Unsupported("bad_call", f"{name}(): {e}") from None
    bound.apply_defaults()
    out = {}
    real_name = dict(zip(stand_in.__code__.co_varnames, code.co_varnames[:_nparams(code)]))
    for pname, param in inspect.signature(stand_in).parameters.items():
        real = real_name[pname]
        v = bound.arguments[pname]
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            v = TupleVariable(list(v))
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            v = ConstDictVariable(dict(v))
        out[real] = v
    return out


_sig_cache: dict = {}


def _sig_code(code):
    """A code object with only `code`'s signature (no cells) so FunctionType accepts no closure."""
    key = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
           code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS), code.co_varnames[:_nparams(code)])
    c = _sig_cache.get(key)
    if c is None:
        params = [n if n.isidentifier() else f"__pydynamo_arg{i}"  # ".0" of comprehensions
                  for i, n in enumerate(code.co_varnames[:_nparams(code)])]
        parts = []
        pos = params[:code.co_argcount]
        parts += pos[:code.co_posonlyargcount]
        if code.co_posonlyargcount:
            parts.append("/")
        parts += pos[code.co_posonlyargcount:]
        i = code.co_argcount
        kwonly = params[i:i + code.co_kwonlyargcount]
        i += code.co_kwonlyargcount
        if code.co_flags & inspect.CO_VARARGS:
            parts.append("*" + params[i])
            i += 1
        elif kwonly:
            parts.append("*")
        parts += kwonly
        if code.co_flags & inspect.CO_VARKEYWORDS:
            parts.append("**" + params[i])
        ns: dict = {}
        exec(f"def f({', '.join(parts)}): pass", ns)
        c = _sig_cache[key] = ns["f"].__code__
    return c


def _nparams(code) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return n


class BaseUserFunctionVariable(VariableTracker):
    def get_code(self) -> types.CodeType:
        raise NotImplementedError

    def bind(self, tx, args, kwargs) -> tuple[dict, dict]:
        """(locals, closure cells by free-variable name)"""
        raise NotImplementedError

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self, args, kwargs)

    def python_type(self):
        return types.FunctionType


class UserFunctionVariable(BaseUserFunctionVariable):
    def __init__(self, fn: types.FunctionType, source=None):
        super().__init__(source)
        self.fn = fn

    def get_code(self):
        return self.fn.__code__

    def get_globals(self):
        return self.fn.__globals__

    def as_python_constant(self):
        return self.fn

    def call_function(self, tx, args, kwargs):
        if self.fn.__module__ == "logging":
            # a log record goes to handlers (streams, files) whatever its level: output, like
            # print(), which the graph cannot hold; torch.compile breaks on logging calls too
            raise Unsupported("logging", f"logging call {self.fn.__qualname__}() has effects outside the graph")
        marked = _marked_constant(tx, self.fn, self.fn, args, kwargs)
        if marked is not None:
            return marked
        return super().call_function(tx, args, kwargs)

    def bind(self, tx, args, kwargs):
        fn = self.fn
        defaults = tuple(tx.wrap(v, DefaultsSource(self.source, i) if self.source else None)
                         for i, v in enumerate(fn.__defaults__ or ()))
        kwdefaults = {k: tx.wrap(v, DefaultsSource(self.source, k, kw=True) if self.source else None)
                      for k, v in (fn.__kwdefaults__ or {}).items()}
        local_vars = bind_args(fn.__code__, fn.__name__, defaults, kwdefaults, args, kwargs)
        cells = {}
        for i, name in enumerate(fn.__code__.co_freevars):
            try:
                contents = fn.__closure__[i].cell_contents
            except ValueError:
                raise Unsupported("empty_cell", f"free variable {name!r} of {fn.__name__} is unbound") from None
            src = ClosureSource(self.source, i) if self.source is not None else None
            cells[name] = CellVariable(tx.wrap(contents, src), name, external=True)
        return local_vars, cells

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.fn, name))
        if name in ("__defaults__", "__kwdefaults__", "__code__", "__wrapped__", "__dict__"):
            if not hasattr(self.fn, name):
                raise Unsupported("no_attribute", f"function has no attribute {name!r}")
            return tx.wrap(getattr(self.fn, name), AttrSource(self.source, name) if self.source else None)
        return super().var_getattr(tx, name)

    def __repr__(self):
        return f"UserFunctionVariable({self.fn.__qualname__})"


class NestedUserFunctionVariable(BaseUserFunctionVariable):
    def __init__(self, code, qualname, globals_, defaults, kwdefaults, closure: tuple):
        super().__init__()
        self.code, self.qualname, self.f_globals = code, qualname, globals_
        self.defaults = defaults or ()      # tuple of trackers
        self.kwdefaults = kwdefaults or {}  # name -> tracker
        self.closure = closure or ()        # tuple of CellVariable

    def get_code(self):
        return self.code

    def get_globals(self):
        return self.f_globals

    def bind(self, tx, args, kwargs):
        local_vars = bind_args(self.code, self.code.co_name, self.defaults, self.kwdefaults, args, kwargs)
        cells = dict(zip(self.code.co_freevars, self.closure))
        return local_vars, cells

    def var_getattr(self, tx, name):
        if name == "__name__":
            return ConstantVariable(self.code.co_name)
        if name == "__qualname__":
            return ConstantVariable(self.qualname)
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        return cg.make_function(self)

    def __repr__(self):
        return f"NestedUserFunctionVariable({self.qualname})"


class LruCacheWrapperVariable(VariableTracker):
    """A functools.lru_cache / functools.cache wrapper. Its cache (a C object) decides whether the
    wrapped function runs at all, and a hit returns the very object it stored. The wrapped
    function is inlined (as torch.compile does) when that cannot be told apart from a hit: the
    arguments are constants or objects that exist outside the frame, and the call writes to no
    pre-existing object, adds nothing to the graph and returns an immutable constant (a config
    lookup, a shape computation). A call without arguments to a wrapper whose cache is filled is
    a hit whatever the function does (`is_torch_distributed_available()`): its cached constant is
    read now. Anything else (effects, tensors, mutable results) is a graph break at the call,
    which then runs in Python with its cache. Read through an instance it
    binds like a function (its __get__ makes a bound method)."""

    def __init__(self, wrapper, source=None):
        super().__init__(source)
        self.wrapper = wrapper

    def python_type(self):
        return type(self.wrapper)

    def as_python_constant(self):
        return self.wrapper

    def call_function(self, tx, args, kwargs):
        marked = _marked_constant(tx, self.wrapper.__wrapped__, self.wrapper, args, kwargs)
        if marked is not None:
            return marked
        vals = [*args, *kwargs.values()]
        if all(v.source is not None or v.is_python_constant() for v in vals):
            writes, nodes = tx.side_effects.writes, len(tx.output.graph.nodes)
            src = AttrSource(self.source, "__wrapped__") if self.source is not None else None
            try:
                result = tx.wrap(self.wrapper.__wrapped__, src).call_function(tx, args, kwargs)
            except Unsupported as e:
                if e.reason_code == "logging":   # transformers' logger.warning_once: a log call
                    raise Unsupported("logging", f"{self.wrapper.__qualname__} (lru_cache) logs: {e.message}") \
                        from None
                result = None
            if result is not None and tx.side_effects.writes == writes and \
                    len(tx.output.graph.nodes) == nodes and _immutable_constant(result):
                return result
        if not vals and getattr(self.wrapper, "cache_info", None) is not None and \
                self.wrapper.cache_info().currsize > 0:
            # no arguments and a filled cache: the call is certainly a hit (its one key is ()),
            # so asking the wrapper now runs nothing and returns the object every call returns
            value = self.wrapper()
            result = tx.wrap_constant_result(value) if type(value) in CONSTANT_TYPES else None
            if result is not None:
                return result
        raise Unsupported("lru_cache", f"call to {self.wrapper.__qualname__}, wrapped by functools.lru_cache "
                          "(its cache lives outside the graph and the call has effects or a non-constant "
                          "result)")

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.wrapper, name))
        if name == "__wrapped__":
            return tx.wrap(self.wrapper.__wrapped__, AttrSource(self.source, name) if self.source else None)
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        return cg.load_source(self.source) if self.source is not None else cg.load_const(self.wrapper)

    def __repr__(self):
        return f"LruCacheWrapperVariable({self.wrapper.__qualname__})"


def _marked_constant(tx, fn, call, args, kwargs):
    """A function its library marked as a trace-time constant (torch.compiler's
    assume_constant_result marker, `_dynamo_marked_constant`: transformers' install and version
    probes) called with constant arguments: `call` (the function, or its lru_cache wrapper, so
    the cache fills as in eager) runs now and its immutable result is a constant, as under
    torch.compile. None when not marked or not applicable."""
    if getattr(fn, "_dynamo_marked_constant", False) is not True or \
            not all(v.is_python_constant() for v in (*args, *kwargs.values())):
        return None
    value = call(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
    return tx.wrap_constant_result(value) if type(value) in CONSTANT_TYPES else None


def _immutable_constant(v: VariableTracker) -> bool:
    if isinstance(v, TupleVariable) and type(v) is TupleVariable:
        return all(_immutable_constant(i) for i in v.items)
    return isinstance(v, ConstantVariable) and type(v.value) in CONSTANT_TYPES


class UserMethodVariable(VariableTracker):
    """A bound method: `fn` (a function tracker) with `obj` as first argument."""

    def __init__(self, fn: BaseUserFunctionVariable, obj: VariableTracker, source=None):
        super().__init__(source)
        self.fn, self.obj = fn, obj

    def python_type(self):
        return types.MethodType

    def call_function(self, tx, args, kwargs):
        return self.fn.call_function(tx, [self.obj, *args], kwargs)

    def var_getattr(self, tx, name):
        if name == "__self__":
            return self.obj
        if name == "__func__":
            return self.fn
        return self.fn.var_getattr(tx, name)

    def __repr__(self):
        return f"UserMethodVariable({self.fn}, {self.obj})"


class PartialVariable(VariableTracker):
    """functools.partial made or found in the frame."""

    def __init__(self, fn: VariableTracker, args: list, kwargs: dict, source=None):
        super().__init__(source)
        self.fn, self.args, self.kwargs = fn, list(args), dict(kwargs)

    def call_function(self, tx, args, kwargs):
        return self.fn.call_function(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def python_type(self):
        return functools.partial

    def var_getattr(self, tx, name):
        if name == "func":
            return self.fn
        if name == "args":
            return tx.tuple(self.args)
        if name == "keywords":
            return ConstDictVariable(self.kwargs)
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        parts = [cg.reconstruct(self.fn), *(cg.reconstruct(a) for a in self.args),
                 *(f"{k}={cg.reconstruct(v)}" for k, v in self.kwargs.items())]
        return f"{cg.load_const(functools.partial)}({', '.join(parts)})"
