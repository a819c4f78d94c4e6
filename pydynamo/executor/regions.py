"""Region templates: a repeated module's forward traced once and its graph nodes reused.

When the translator inlines `module.forward` (variables/nn_module.py, after the hooks), the call
goes through `inline_forward`. The first call for a key — the module's class (hence its forward
function), the grad / inference / autocast state, and the arguments' kinds (tensors by their
static metadata, their source and which arguments are the same tensor, constants by type and
value) — is
inlined as always while a `_Recording` watches what it adds to the frame's state. If the
recording shows the call was a pure function of

  * its arguments (tensors read, never written),
  * the module instance's own state, read through sources under the instance's source `S0`
    (every such read is guarded there), and
  * values outside the instance that are the same whichever instance is called (globals,
    functions, a config object shared by every layer: read through sources outside `S0`),

it becomes a `Template`: the FX nodes the call made, the placeholders it referred to (by their
source under `S0`), the guards it added, and the structure of its result. A later call with the
same key on another instance `S1` then replays the template instead of tracing the body again:

  1. the recorded guards that mention `S0` (those the call added, and those made before it on
     `S0`'s state: its own ID_MATCH, its hooks, an object under it wrapped earlier) are checked
     on the frame now for `S1` (compiled once per template, over the instance as the local
     `___pd_region`), then added re-rooted to `S1` (an instance whose attribute differs fails
     the check and is inlined as always);
     a module's ID_MATCH (made by the builder when the submodule was first wrapped) is
     re-rooted to the new submodule's identity, after checking that the identity pattern of
     the instance's modules and tensors (which of them are the same object) is the same;
  2. the new instance's parameters and buffers are wrapped by the builder at their re-rooted
     sources (the same placeholders, TENSOR_MATCH and aliasing guards a trace makes);
  3. the recorded nodes are copied with `Graph.node_copy`, arguments and parameters mapped;
  4. the result is rebuilt with fresh trackers (fresh meta examples, same metadata).

The graph is the one graph a full trace makes (same nodes in the same order, same inputs), so
graph counts, aot and codegen do not change; only tracing is skipped. A template is never made
(the call is only inlined) when the recording saw: a graph break (the exception passes through),
a write to any pre-existing object (side effects), an in-place write to an argument or to the
module's state, a random op, a symbolic size, a changed grad/autocast mode, a read of the
module's identity (id(), an ID_MATCH on a module wrapped before the call), a tensor reached
from outside the instance, a result that is not tensors made by the call / constants / tuples
of them, or a pending side effect on the instance. Replay additionally requires that nothing
was written since the template was recorded (the state it read is still the state).
Configured by `pydynamo.config.region_templates` (read when a frame's trace starts).
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any, Optional

import torch
import torch.fx

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.constant import CONSTANT_TYPES, ConstantVariable
from pydynamo.executor.variables.containers import TupleVariable
from pydynamo.executor.variables.tensor import TensorVariable
from pydynamo.guards import Guard, GuardKind, compile_guards
from pydynamo.mutation import node_mutation
from pydynamo.sources import LocalSource, Source

# Guard kinds a read outside the instance may have added: they hold for any instance (the same
# value is read); a DICT_KEYS guard only when its keys are plain constants (a dict keyed by
# modules answers per instance).
_OUTSIDE_KINDS = {GuardKind.ID_MATCH, GuardKind.TYPE_MATCH, GuardKind.EQUALS_MATCH, GuardKind.LEN,
                  GuardKind.TENSOR_MATCH, GuardKind.ALIASING, GuardKind.DICT_KEYS}

# Ops that draw random numbers (by name: torch functions, Tensor methods and aten overloads).
_RANDOM = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
           "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "uniform_", "exponential_",
           "geometric_", "cauchy_", "log_normal_", "random_", "poisson", "rrelu", "rrelu_",
           "native_dropout", "fused_dropout", "_fused_dropout"}
# Dropout-like ops: random only when training (the flag's position in their signatures).
_DROPOUTS = {"dropout": 2, "dropout_": 2, "alpha_dropout": 2, "alpha_dropout_": 2,
             "feature_alpha_dropout": 2, "feature_alpha_dropout_": 2, "dropout1d": 2,
             "dropout2d": 2, "dropout3d": 2}


# node.meta key of a node a template made: its marks (template uid, instance, position in the
# template), outermost template first (`Template.annotate`). codegen's regional compilation
# (codegen/region_calls.py, option compile_regions) groups the nodes of each instance by them;
# nothing else reads them, so the graph is the same with or without them.
REGION_META = "pd_region"
_uids = itertools.count()

# Process-wide counts: "recorded" (templates made), "declined" (a first call not reusable),
# "replayed" (calls answered by a template), "missed" (a template that did not apply).
STATS: collections.Counter = collections.Counter()


class Regions:
    """The templates of one frame's trace (per root translator; keys are not valid past it)."""

    def __init__(self):
        self.templates: dict = {}       # key -> Template, or None (first call not reusable)
        self.active: set = set()        # keys being recorded (a recursive call inlines)
        self.guard_texts: list = []     # _guard_text of the frame's guards, in order (made once)


def inline_forward(tx, module_var, forward, args, kwargs):
    """Inline `forward(module, *args, **kwargs)`, through a template where one applies."""
    root = tx.root
    regions = root.regions
    if regions is None or module_var.source is None:
        return tx.inline_method(module_var, forward, args, kwargs)
    key = _key(root, module_var, args, kwargs)
    if key is None or key in regions.active:
        return tx.inline_method(module_var, forward, args, kwargs)
    if key in regions.templates:
        tpl = regions.templates[key]
        out = tpl.replay(tx, module_var, args, kwargs) if tpl is not None else None
        STATS["replayed" if out is not None else "missed" if tpl is not None else "untemplated"] += 1
        if out is not None:
            return out
        return tx.inline_method(module_var, forward, args, kwargs)
    rec = _Recording(root, module_var, args, kwargs)
    regions.active.add(key)
    try:
        out = tx.inline_method(module_var, forward, args, kwargs)
    finally:
        regions.active.discard(key)
    tpl = regions.templates[key] = rec.finish(out)
    if tpl is not None:
        tpl.annotate(tpl.nodes)
    STATS["recorded" if tpl is not None else "declined"] += 1   # (with its reason, below)
    return out


# --- keys ---------------------------------------------------------------------------------

def _tensor_key(v: TensorVariable):
    """What a trace may read of a tensor argument: its metadata, and its source (a tensor from
    outside the frame can carry Python attributes read through it; an intermediate has none)."""
    e = v.example
    return ("T", v.cls, e.dtype, v.device, tuple(e.shape), tuple(e.stride()), e.storage_offset(),
            e.requires_grad, e.is_leaf, e._is_view(), e.is_inference(), e.is_conj(), e.is_neg(),
            v.source)


def _arg_key(v, seen: dict):
    if isinstance(v, TensorVariable):
        if v.meta is not None:
            return None     # symbolic sizes: not handled
        return _tensor_key(v) + (seen.setdefault(id(v), len(seen)),)
    if type(v) is ConstantVariable and (v.value is None or type(v.value) in CONSTANT_TYPES):
        try:
            hash(v.value)
        except TypeError:
            return None
        return ("C", type(v.value), v.value)
    return None


def _key(root, module_var, args, kwargs):
    seen: dict = {}
    parts = []
    for a in itertools.chain(args, kwargs.values()):
        k = _arg_key(a, seen)
        if k is None:
            return None
        parts.append(k)
    return (type(module_var.value), root.grad_enabled_, root.inference_mode_, repr(root.autocast_),
            tuple(kwargs), tuple(parts))


# --- sources ------------------------------------------------------------------------------

def reroot(src, old: Source, new: Source, memo: Optional[dict] = None):
    """`src` with every occurrence of `old` in it replaced by `new` (sources are frozen
    dataclasses; any field holding a source is followed, so wrappers without `base` count).
    `memo` (by id) shares the work between sources with a common prefix."""
    if memo is not None and id(src) in memo:
        return memo[id(src)]
    if src is old or src == old:
        out = new
    elif not isinstance(src, Source) or not dataclasses.is_dataclass(src):
        return src
    else:
        changes = {}
        for f in dataclasses.fields(src):
            v = getattr(src, f.name)
            if isinstance(v, Source):
                r = reroot(v, old, new, memo)
                if r is not v:
                    changes[f.name] = r
        out = dataclasses.replace(src, **changes) if changes else src
    if memo is not None:
        memo[id(src)] = out
    return out


def _mentions(src, root: Source) -> bool:
    """Whether `root` occurs in `src` (any field holding a source, as `reroot` follows)."""
    if not isinstance(src, Source):
        return False
    if src is root or src == root:
        return True
    return any(_mentions(getattr(src, name), root) for name in _fields(type(src)))


_FIELDS: dict = {}


def _fields(cls) -> tuple:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) \
            if dataclasses.is_dataclass(cls) else ()
    return names


def _guard_text(g: Guard) -> str:
    """The names a guard reads (its source's; an ALIASING guard's other source too): a source
    that mentions S0 has S0's name inside its own, so a substring test finds every candidate."""
    text = g.source.name() if g.source is not None else ""
    return text + " " + g.expected.name() if g.kind is GuardKind.ALIASING else text


_REGION = LocalSource("___pd_region")     # the instance, in a template's compiled check


def _eval(root, src: Source):
    return eval(src.guard_expr(), {"L": root.frame_locals, "G": root.f_globals})


def _pending_under(side_effects, src: Source) -> bool:
    """Whether a side effect not yet replayed writes an object reached through `src`."""
    objs = list(side_effects.mutated) + [s.obj for s in side_effects.attr_stores.values()]
    return any(_mentions(o.source, src) for o in objs) or bool(side_effects.global_stores)


def _identity_pattern(objs) -> tuple:
    first: dict = {}
    return tuple(first.setdefault(id(o), i) for i, o in enumerate(objs))


def _is_random(node) -> bool:
    t = node.target
    name = t if isinstance(t, str) else getattr(t, "__name__", "")
    if isinstance(t, torch._ops.OpOverload):
        if torch.Tag.nondeterministic_seeded in t.tags:
            return True
        name = t._schema.name.split("::")[-1]
    if name in _RANDOM:
        return True
    if name in _DROPOUTS:
        pos = _DROPOUTS[name] - (node.op == "call_method")
        flag = node.kwargs.get("training", node.kwargs.get("train",
                               node.args[pos] if len(node.args) > pos else True))
        p = node.kwargs.get("p", node.args[1 - (node.op == "call_method")]
                            if len(node.args) > 1 - (node.op == "call_method") else 0.5)
        return not (flag is False or p == 0)
    return False


# --- recording ----------------------------------------------------------------------------

class _Recording:
    """What one inlined call adds to the frame's state (snapshots taken before it runs)."""

    def __init__(self, root, module_var, args, kwargs):
        self.root = root
        self.source = module_var.source
        self.args = list(itertools.chain(args, kwargs.values()))
        # the arguments' nodes now (an in-place write inside would rebind the tracker's node)
        self.arg_nodes = [a.node if isinstance(a, TensorVariable) else None for a in self.args]
        out = root.output_graph
        self.n_guards = len(root.guards)
        self.n_inputs = len(out.inputs)
        self.last = next(iter(reversed(out.graph.nodes)), None)
        self.n_cache = len(root.builder.cache)
        se = root.side_effects_
        self.writes = se.writes
        self.ok = not _pending_under(se, self.source) and not root.global_overrides
        self.state = _state(root)
        self.state_read = set(root.state_read)

    def finish(self, result) -> Optional["Template"]:
        if not self.ok:
            STATS["declined: pending side effect on the instance"] += 1
            return None
        try:
            return self._finish(result)
        except _NoTemplate as e:
            STATS[f"declined: {e}"] += 1
        except Exception as e:  # a source that no longer reads: inline next time too
            STATS[f"declined: {type(e).__name__}"] += 1
        return None

    def _finish(self, result):
        root, S0 = self.root, self.source
        out = root.output_graph
        if root.side_effects_.writes != self.writes or _state(root) != self.state or root.global_overrides:
            raise _NoTemplate('state changed (a write, a mode, a size)')
        inputs = out.inputs[self.n_inputs:]
        if any(not _mentions(i.source, S0) or not isinstance(i.value, torch.Tensor) for i in inputs):
            raise _NoTemplate('a tensor from outside the instance')   # a tensor from outside the instance, or a size placeholder
        guards = root.guards[self.n_guards:]
        new_cache = set(itertools.islice(root.builder.cache, self.n_cache, None))
        rooted, id_rebind, ident_sources = [], {}, {}   # (a dict as an ordered set)
        # guards made before the call on the instance's state (its own ID_MATCH, its hooks, the
        # type of an object under it wrapped earlier) are assumptions the trace relied on too
        texts = root.regions.guard_texts     # (root.guards only grows)
        texts.extend(_guard_text(g) for g in root.guards[len(texts):])
        name = S0.name()
        for g, text in zip(root.guards[:self.n_guards], texts):
            if name in text and (_mentions(g.source, S0) or
                                 (g.kind is GuardKind.ALIASING and _mentions(g.expected, S0))):
                rooted.append(g)
                if g.kind is GuardKind.ID_MATCH and isinstance(_eval(root, g.source), torch.nn.Module):
                    id_rebind[len(rooted) - 1] = type(_eval(root, g.source))
                if g.kind in (GuardKind.ID_MATCH, GuardKind.TENSOR_MATCH):
                    ident_sources[g.source] = None
        id_count: dict = {}
        for g in guards:
            if g.kind is GuardKind.SHAPE_ENV or g.kind is GuardKind.COMPILE_SETTINGS:
                raise _NoTemplate('shape guard')
            under = _mentions(g.source, S0) or (g.kind is GuardKind.ALIASING and _mentions(g.expected, S0))
            if not under:
                if g.source is not None and g.kind not in _OUTSIDE_KINDS:
                    raise _NoTemplate('outside guard kind')
                if g.kind is GuardKind.DICT_KEYS and \
                        not all(type(k) in CONSTANT_TYPES for k in g.expected):
                    raise _NoTemplate('outside dict keyed by objects')
                continue        # already among the frame's guards; the same read for any instance
            rooted.append(g)
            if g.kind is GuardKind.ID_MATCH:
                value = _eval(root, g.source)
                if isinstance(value, torch.nn.Module):
                    id_count[g.source] = id_count.get(g.source, 0) + 1
                    # the builder's guard of a module first wrapped here; anything else read
                    # the module's identity (id(), a guard made before the call)
                    if id(value) not in new_cache or id_count[g.source] > 1:
                        raise _NoTemplate('module identity read')
                    id_rebind[len(rooted) - 1] = type(value)
            if g.kind in (GuardKind.ID_MATCH, GuardKind.TENSOR_MATCH):
                ident_sources[g.source] = None
        region = [n for n in self._new_nodes() if n.op != "placeholder"]
        inside = set(region)
        arg_index = {}
        for i, node in enumerate(self.arg_nodes):
            if node is not None:
                arg_index.setdefault(node, i)
        by_node = {i.node: i for i in out.inputs}
        aliases = {g.expected: g.source for g in rooted if g.kind is GuardKind.ALIASING and
                   not _mentions(g.expected, S0)}
        externals = {}      # external node -> ("arg", i) | ("param", source under S0, example)
        for n in region:
            if n.op not in ("call_function", "call_method") or _is_random(n):
                raise _NoTemplate('op kind or random op')
            m = node_mutation(n)
            if m is not None and any(isinstance(w, torch.fx.Node) and w not in inside
                                     for w in m.written(n.args, n.kwargs)):
                raise _NoTemplate('in-place write to an argument or module state')   # writes an argument or the module's state
            for x in n.all_input_nodes:
                if x in inside or x in externals:
                    continue
                if x in arg_index:
                    externals[x] = ("arg", arg_index[x])
                    continue
                gi = by_node.get(x)
                if gi is None:
                    raise _NoTemplate('a node from outside')
                src = gi.source if _mentions(gi.source, S0) else aliases.get(gi.source)
                if src is None or not isinstance(gi.value, torch.Tensor):
                    raise _NoTemplate('a tensor from outside the instance')   # a tensor read from outside the instance
                externals[x] = ("param", src, _spec(gi.value))
                ident_sources[src] = None
        external_bases = set()
        for a in self.args + [root.builder.cache.get(id(i.value)) for i in out.inputs]:
            if isinstance(a, TensorVariable):
                external_bases |= {id(a.example), id(a.example._base)}
        shape = _result_shape(result, inside, arg_index, external_bases, set())
        pattern = _identity_pattern([_eval(root, s) for s in ident_sources])
        return Template(S0, rooted, id_rebind, region, externals, shape, list(ident_sources), pattern,
                        self.writes, root.state_read - self.state_read)

    def _new_nodes(self):
        nodes = self.root.output_graph.graph.nodes
        if self.last is None:
            return list(nodes)
        out, n = [], self.last.next
        while n.op != "root":
            out.append(n)
            n = n.next
        return out


class _NoTemplate(Exception):
    pass


def _state(root):
    return (root.grad_enabled_, root.inference_mode_, repr(root.autocast_), _state_shapes(root))


def _state_shapes(root):
    env = root.shape_env
    return (len(env.var_to_source), len(env.guards), len(env.replacements), len(env.source_equalities))


def _spec(t: torch.Tensor):
    return (type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
            t.requires_grad, t.is_leaf)


def _fresh(example: torch.Tensor) -> torch.Tensor:
    """A new meta tensor standing for another call's result with `example`'s metadata: a view
    (of a fresh base like example's) when it is one, a non-leaf when it requires grad."""
    if example._is_view():
        base = _fresh(example._base)
        with torch.enable_grad():
            return base.as_strided(tuple(example.shape), tuple(example.stride()), example.storage_offset())
    t = torch.empty_strided(tuple(example.shape), tuple(example.stride()), dtype=example.dtype,
                            device="meta")
    if example.requires_grad and not example.is_leaf:
        with torch.enable_grad():
            t = t.requires_grad_(True).clone(memory_format=torch.preserve_format)
    return t.requires_grad_(example.requires_grad) if example.is_leaf else t


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype and
            a.storage_offset() == b.storage_offset() and a.requires_grad == b.requires_grad and
            a.is_leaf == b.is_leaf and a._is_view() == b._is_view())


def _result_shape(v, inside, arg_index, external_bases: set, bases: set):
    """The call's result as data: ("node", n, device, cls, example) for a tensor the call
    made, ("arg", i), ("const", value), ("tuple", items). A tensor made by the call may be a
    view only of a base the call made that no other result shares (its fresh example on replay
    is a view of a fresh base: aliasing with anything else would be lost)."""
    if isinstance(v, TensorVariable):
        if v.node in inside:
            e = v.example
            if v.meta is not None or v.source is not None or v.node.meta.get("val") is None or \
                    not _same_layout(_fresh(e), e):
                raise _NoTemplate("result's layout")
            for t in (e, e._base) if e._is_view() else (e,):
                if id(t) in external_bases or id(t) in bases:
                    raise _NoTemplate("result aliases an input or another result")
                bases.add(id(t))
            return ("node", v.node, v.device, v.cls, e)
        if v.node in arg_index:
            return ("arg", arg_index[v.node])
        raise _NoTemplate("result is a tensor from outside")
    if type(v) is ConstantVariable and (v.value is None or type(v.value) in CONSTANT_TYPES):
        return ("const", v.value)
    if type(v) is TupleVariable and v.source is None:
        return ("tuple", [_result_shape(x, inside, arg_index, external_bases, bases) for x in v.items])
    raise _NoTemplate("result type")


# --- replay -------------------------------------------------------------------------------

@dataclasses.dataclass
class Template:
    source: Source                  # the recorded instance's source (S0)
    guards: list                    # the guards the call added that mention S0
    id_rebind: dict                 # index in `guards` -> module class: a module's ID_MATCH, re-bound
    nodes: list                     # the FX nodes the call made, in order
    externals: dict                 # node outside the call -> ("arg", i) | ("param", src, spec)
    result: Any                     # _result_shape's description of the return value
    ident_sources: list             # sources (under S0) of the modules and tensors read
    pattern: tuple                  # which of them were the same object
    writes: int                     # side-effect writes when recorded (replay needs the same)
    state_read: set                 # global-state checks the call relied on
    check: Any = None               # the guards over _REGION, compiled (`_check`)
    uid: int = dataclasses.field(default_factory=lambda: next(_uids))
    instances: Any = dataclasses.field(default_factory=itertools.count)   # REGION_META's instance

    def annotate(self, nodes, copied: bool = False):
        """Mark `nodes` (one instance's, in template order) as this template's next instance:
        REGION_META is a tuple of marks (uid, instance, position), outermost first, as the
        templates enclosing a node finish. `copied`: nodes a replay copied, whose marks are the
        recorded nodes'; the marks inside this template's own become this copy's (instance ids
        made unique), those around it are the recorded call's context, not this one's."""
        inst = next(self.instances)
        for j, n in enumerate(nodes):
            marks = n.meta.get(REGION_META, ())
            if copied:
                own = next((i for i, m in enumerate(marks) if m[0] == self.uid), None)
                marks = () if own is None else \
                    tuple((u, (self.uid, inst, i), k) for u, i, k in marks[own + 1:])
            n.meta[REGION_META] = ((self.uid, inst, j),) + marks

    def replay(self, tx, module_var, args, kwargs):
        """The call's result on `module_var`, or None where the template does not apply."""
        root = tx.root
        S1 = module_var.source
        if root.side_effects_.writes != self.writes or root.global_overrides or \
                _pending_under(root.side_effects_, S1) or module_var.attrs:
            return None
        memo: dict = {}
        try:
            # the guards, compiled once per template over the instance as a local of its own
            frame = dict(root.frame_locals)
            frame[_REGION.local_name] = module_var.value
            if not self._check(root)(frame):
                return None
            objs = {s: _eval(root, reroot(s, self.source, S1, memo)) for s in self.ident_sources}
        except Exception as e:  # a source that does not read on this instance
            STATS[f"missed: {type(e).__name__}"] += 1
            return None
        if _identity_pattern(objs.values()) != self.pattern:
            return None
        params = {}
        for node, ext in self.externals.items():
            if ext[0] == "param":
                value = objs[ext[1]]
                if not isinstance(value, torch.Tensor) or _spec(value) != ext[2]:
                    return None
                params[node] = (value, reroot(ext[1], self.source, S1, memo))
        flat = list(itertools.chain(args, kwargs.values()))
        env = {}
        for node, ext in self.externals.items():
            if ext[0] == "arg":
                env[node] = flat[ext[1]].node
            else:
                value, src = params[node]
                var = tx.wrap(value, src)
                if not isinstance(var, TensorVariable) or var.meta is not None:
                    raise Unsupported("region_template", "a parameter became symbolic on replay")
                env[node] = var.node
        root.guards.extend(self._guards(root, S1, objs, memo))
        root.state_read |= self.state_read
        graph = root.output_graph.graph
        for n in self.nodes:
            env[n] = graph.node_copy(n, lambda x: env[x])
        self.annotate([env[n] for n in self.nodes], copied=True)
        return self._rebuild(root, self.result, env, flat, {})

    def _check(self, root):
        """The recorded guards over the instance `_REGION` (a module's ID_MATCH as its type:
        which module it is, the identity pattern checks), compiled at the first replay."""
        if self.check is None:
            memo: dict = {}
            out = []
            for i, g in enumerate(self.guards):
                src = reroot(g.source, self.source, _REGION, memo)
                if g.kind is GuardKind.ALIASING:
                    out.append(Guard(src, g.kind, reroot(g.expected, self.source, _REGION, memo)))
                elif i in self.id_rebind:
                    out.append(Guard(src, GuardKind.TYPE_MATCH, self.id_rebind[i]))
                else:
                    out.append(Guard(src, g.kind, g.expected))
            self.check = compile_guards(out, root.f_globals)
        return self.check

    def _guards(self, root, S1, objs, memo):
        """The recorded guards re-rooted to S1, as a trace of S1 would have added them. A
        module's ID_MATCH is left out where the builder made it already (S1 itself, a submodule
        wrapped before the call): an enclosing recording would count it twice, as an id() read."""
        out = []
        for i, g in enumerate(self.guards):
            src = reroot(g.source, self.source, S1, memo)
            expected = g.expected
            if g.kind is GuardKind.ALIASING:
                expected = reroot(expected, self.source, S1, memo)
            elif i in self.id_rebind:
                obj = objs[g.source]
                known = root.builder.cache.get(id(obj))
                if known is not None and known.source == src:
                    continue
                expected = (id(obj), expected[1])
            out.append(Guard(src, g.kind, expected, g.origin))
        return out

    def _rebuild(self, root, shape, env, flat, made):
        kind = shape[0]
        if kind == "node":
            _, node, device, cls, example = shape
            if node not in made:    # one tracker per result, as the trace had
                out = root.output_graph
                var = TensorVariable(env[node], _fresh(example), device, cls=cls, env=out.shape_env)
                out.by_example[id(var.example)] = var
                made[node] = var
            return made[node]
        if kind == "arg":
            return flat[shape[1]]
        if kind == "const":
            return ConstantVariable(shape[1])
        return TupleVariable([self._rebuild(root, s, env, flat, made) for s in shape[1]])
