"""Iterators: iter/next, enumerate, zip, map, filter, reversed, and itertools basics.

An iterator tracker (ListIteratorVariable, in base.py: every tracker's get_iter makes one) holds
a Python iterator over trackers, so map/filter call their function
lazily, when the traced program asks for the next item (same order as CPython). Iterators made in
the frame are not rebuilt after the graph (Unsupported if one escapes).
"""
from __future__ import annotations

import itertools
import operator

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import ListIteratorVariable, VariableTracker
from pydynamo.executor.variables.builtins import HANDLERS, binary_op
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.executor.variables.containers import TupleVariable


def _tuple(items):
    return TupleVariable(list(items))


def make(tx, fn, args, kwargs) -> ListIteratorVariable:
    if fn is enumerate:
        start = (args[1] if len(args) > 1 else kwargs.get("start", ConstantVariable(0))).as_python_constant()
        items = (_tuple([ConstantVariable(i), v]) for i, v in enumerate(_lazy(tx, args[0]), start))
    elif fn is zip:
        strict = kwargs.get("strict", ConstantVariable(False)).as_python_constant()
        items = (_tuple(t) for t in zip(*[_lazy(tx, a) for a in args], strict=strict))
    elif fn is map:
        f = args[0]
        items = (f.call_function(tx, list(t), {}) for t in zip(*[_lazy(tx, a) for a in args[1:]]))
    elif fn is filter:
        f, seq = args
        if f.is_python_constant() and f.as_python_constant() is None:
            items = (v for v in _lazy(tx, seq) if v.truthy(tx))
        else:
            items = (v for v in _lazy(tx, seq) if f.call_function(tx, [v], {}).truthy(tx))
    elif fn is reversed:
        items = reversed(tx.unpack(args[0]))
    else:
        items = _itertools(tx, fn, args, kwargs)
    return ListIteratorVariable(items)


def _lazy(tx, v: VariableTracker):
    if isinstance(v, ListIteratorVariable):
        return v.it
    return iter(tx.unpack(v))


def _itertools(tx, fn, args, kwargs):
    consts = lambda vs: [v.as_python_constant() for v in vs]  # noqa: E731
    if fn is itertools.chain:
        return itertools.chain(*[_lazy(tx, a) for a in args])
    if fn == itertools.chain.from_iterable:
        return itertools.chain.from_iterable(_lazy(tx, a) for a in _lazy(tx, args[0]))
    if fn is itertools.islice:
        return itertools.islice(_lazy(tx, args[0]), *consts(args[1:]))
    if fn is itertools.repeat:
        if len(args) < 2 and "times" not in kwargs:
            raise Unsupported("itertools", "itertools.repeat without times")
        n = (args[1] if len(args) > 1 else kwargs["times"]).as_python_constant()
        return itertools.repeat(args[0], n)
    if fn is itertools.count:
        start = args[0].as_python_constant() if args else 0
        step = args[1].as_python_constant() if len(args) > 1 else 1
        return (ConstantVariable(i) for i in itertools.count(start, step))
    if fn in (itertools.product, itertools.zip_longest):
        seqs = [tx.unpack(a) for a in args]
        if fn is itertools.product:
            return (_tuple(t) for t in itertools.product(*seqs, repeat=kwargs.get(
                "repeat", ConstantVariable(1)).as_python_constant()))
        fill = kwargs.get("fillvalue", ConstantVariable(None))
        return (_tuple(t) for t in itertools.zip_longest(*seqs, fillvalue=fill))
    if fn in (itertools.combinations, itertools.permutations):
        seq = tx.unpack(args[0])
        r = consts(args[1:])
        return (_tuple(t) for t in fn(seq, *r))
    if fn is itertools.accumulate:
        f = args[1] if len(args) > 1 else kwargs.get("func")
        step = (lambda a, b: f.call_function(tx, [a, b], {})) if f is not None else \
            (lambda a, b: binary_op(tx, operator.add, a, b))
        return itertools.accumulate(tx.unpack(args[0]), step)
    if fn is itertools.starmap:
        return (args[0].call_function(tx, tx.unpack(t), {}) for t in _lazy(tx, args[1]))
    if fn is getattr(itertools, "pairwise", None):
        return (_tuple(t) for t in itertools.pairwise(_lazy(tx, args[0])))
    if fn is itertools.compress:
        return itertools.compress(_lazy(tx, args[0]), (s.truthy(tx) for s in _lazy(tx, args[1])))
    if fn in (itertools.takewhile, itertools.dropwhile, itertools.filterfalse):
        pred = args[0]
        test = (lambda v: v.truthy(tx)) if pred.is_python_constant() and pred.as_python_constant() is None \
            else (lambda v: pred.call_function(tx, [v], {}).truthy(tx))
        return fn(test, _lazy(tx, args[1]))
    raise Unsupported("itertools", f"itertools.{getattr(fn, '__qualname__', fn)}")


ITERTOOLS = (itertools.chain, itertools.chain.from_iterable, itertools.islice, itertools.repeat, itertools.count, itertools.product,
             itertools.zip_longest, itertools.combinations, itertools.permutations, itertools.accumulate,
             itertools.starmap, itertools.compress, itertools.takewhile, itertools.dropwhile,
             itertools.filterfalse) + ((itertools.pairwise,) if hasattr(itertools, "pairwise") else ())


def _handler(fn):
    def h(tx, *args, **kwargs):
        return make(tx, fn, list(args), kwargs)
    return h


# builtins' dispatch table learns the iterator builtins here: this module sits above builtins
# (accumulate adds with its binary_op), and the builder imports it before any call is traced
for _fn in (enumerate, zip, map, filter, reversed):
    HANDLERS[_fn] = _handler(_fn)
for _fn in ITERTOOLS:
    HANDLERS.setdefault(_fn, _handler(_fn))
