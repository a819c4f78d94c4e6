"""Issue 16's mutation/aliasing acceptance: every program of mutation_corpus.py, compiled with
each backend, behaves as eager does, call by call.

Per case, backend and mode the harness runs the program twice on each side (eager and compiled),
each call on fresh arguments made by the case's `make` from the same seed (so the second compiled
call is a cache hit on tensors it never saw), or by `make_later` after the first call (aliasing
among the inputs that changes between calls). After each call it compares, compiled against eager:
  * outputs: values (tests/differential.py tolerances: exact for integers; a float output of a
    call with bfloat16 inputs at bfloat16's), dtype, shape, stride
    (dims of size 1 excluded: their stride is arbitrary), requires_grad, grad_fn present or not;
  * every argument and the module's parameters and buffers (values: in-place updates);
  * aliasing, against the "known" tensors (the arguments, their `_base`s, the module's
    parameters and buffers): which known tensor an output IS, which one is its `_base`, whether
    `_base` is None, which known tensors and which other outputs share its storage, and the
    storage offset of an output that shares one;
  * version counters of the known tensors: bumped or not, as eager's (the amount may differ: one
    functional write-back for eager's chain of in-place ops);
  * grad mode only: after `backward()` of a weighted sum of every float output and argument that
    requires grad, the `.grad` of the leaves (`Inputs.bases`) and of the module's parameters;
  * where eager raises, the compiled call raises the same exception type.
Modes: "inference" (torch.no_grad), "grad" (inputs built from leaves that require grad,
module parameters require grad) and, for modules, "params_grad" (grad mode on, inputs that do not
require grad, parameters that do: inference without no_grad, or a first layer's training step). Backends: "eager", "aot_eager" (when registered), "codegen"
(C++ kernels) and, for the cases marked `triton`, "triton" (codegen with backend_kernels="triton",
run by Triton's interpreter on CPU: conftest.py sets TRITON_INTERPRET=1).

A failing (case, backend, mode) is listed in XFAIL with the reason (strict: it must fail) and
written down in /work/notes/aot_failures.md; assertions are never loosened to pass.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch.utils._pytree import tree_map_only

import pydynamo
from pydynamo.aot import counters as aot_counters
from differential import precision_floor, value_diff
from mutation_corpus import CASES, NOTED, Inputs

BACKENDS = ["eager", "aot_eager", "codegen", "triton"]
MODES = ["inference", "grad", "params_grad"]
CALLS = 2
# codegen's warnings for a graph it ran with eager ops. Neither they nor graph breaks fail a case
# (both sides still compute the program); conftest prints them per backend and mode in the summary.
FALLBACK = re.compile(r"running (this graph|the graph|it|graphs) eagerly")

# (case, backend, mode) -> reason; mode None: both modes; backend None: every backend but "eager".
# Each entry is written down in /work/notes/aot_failures.md with a repro.
XFAIL: dict[tuple, str] = {}


def _spec(backend):
    if backend == "triton":
        return "codegen", {"backend_kernels": "triton"}
    return backend, None


def _flat(v, out):
    if isinstance(v, (tuple, list)):
        for x in v:
            _flat(x, out)
    elif hasattr(v, "items"):
        for x in v.values():
            _flat(x, out)
    else:
        out.append(v)
    return out


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _index(t, known):
    return next((i for i, k in enumerate(known) if t is k), None)


def _out_facts(outs: list, known: list) -> list:
    facts = []
    for j, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            facts.append(type(o).__name__)
            continue
        share_known = [i for i, k in enumerate(known) if _same_storage(o, k)]
        share_outs = [j2 for j2, o2 in enumerate(outs)
                      if j2 != j and isinstance(o2, torch.Tensor) and _same_storage(o, o2)]
        facts.append(dict(
            shape=tuple(o.shape), dtype=o.dtype,
            stride=tuple(s for s, n in zip(o.stride(), o.shape) if n > 1),
            requires_grad=o.requires_grad, grad_fn=o.grad_fn is not None,
            is_known=_index(o, known), base_is_none=o._base is None,
            base_is_known=None if o._base is None else _index(o._base, known),
            storage_shared_with_known=share_known, storage_shared_with_outputs=share_outs,
            storage_offset=o.storage_offset() if share_known or share_outs else None))
    return facts


def _weights(t: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sin(torch.arange(t.numel(), dtype=t.dtype) * 0.37 + k).reshape(t.shape)


class Side:
    """One side (eager or compiled) of a run: per call, what the comparisons read."""

    def __init__(self, case, mode: str, backend: str | None):
        grad = mode != "inference"        # grad mode on
        torch.manual_seed(1234)
        self.module = case.fn() if case.module else None
        fn = self.module if case.module else case.fn
        if backend is not None:
            name, opts = _spec(backend)
            fn = pydynamo.optimize(fn, backend=name, options=opts)
        self.calls, self.warnings = [], []
        for call in range(CALLS):
            torch.manual_seed(100 + call)
            T = Inputs(mode == "grad")      # "params_grad": plain inputs
            args = (case.make_later or case.make)(T) if call else case.make(T)
            known = [a for a in args if isinstance(a, torch.Tensor)]
            known += [a._base for a in known if a._base is not None]
            if self.module is not None:
                known += list(self.module.parameters()) + list(self.module.buffers())
            before = [k._version for k in known]
            rec = dict(exc=None)
            with warnings.catch_warnings(record=True) as caught, torch.set_grad_enabled(grad):
                warnings.simplefilter("always")
                try:
                    out = fn(*args)
                except Exception as e:      # compared with eager's: the same type must be raised
                    rec["exc"] = e
            self.warnings += [str(w.message) for w in caught if "pydynamo" in str(w.message)]
            self.calls.append(rec)
            if rec["exc"] is not None:
                break
            outs = _flat(out, [])
            rec["out"] = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs]
            rec["out_rg"] = [o.requires_grad if isinstance(o, torch.Tensor) else None for o in outs]
            rec["facts"] = _out_facts(outs, known)
            rec["bumped"] = [k._version != v for k, v in zip(known, before)]
            rec["args"] = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
            rec["state"] = self._state()
            if grad:
                diff = [t for t in outs + list(args) if isinstance(t, torch.Tensor)
                        and t.requires_grad and t.dtype.is_floating_point]
                if diff:
                    loss = sum((t * _weights(t, k)).sum() for k, t in enumerate(diff))
                    with warnings.catch_warnings(record=True) as caught:   # a backward compiles here
                        warnings.simplefilter("always")
                        try:
                            loss.backward()
                        except Exception as e:
                            rec["exc"] = e
                    self.warnings += [str(w.message) for w in caught if "pydynamo" in str(w.message)]
                    if rec["exc"] is not None:
                        break
                rec["grads"] = [b.grad for b in T.bases]
                rec["param_grads"] = ({n: p.grad for n, p in self.module.named_parameters()}
                                      if self.module is not None else {})

    def _state(self):
        if self.module is None:
            return {}
        return {k: v.detach().clone() for k, v in self.module.state_dict().items()}


def _compare(case, ref: Side, got: Side) -> list:
    problems = []
    for i, (r, g) in enumerate(zip(ref.calls, got.calls)):
        at = f"call {i + 1}"
        if r["exc"] is not None or g["exc"] is not None:
            if type(r["exc"]) is not type(g["exc"]):
                problems.append(f"{at}: raised {type(g['exc']).__name__}: {g['exc']} vs eager "
                                f"{type(r['exc']).__name__}: {r['exc']}")
            break
        if len(r["out"]) != len(g["out"]):
            problems.append(f"{at}: {len(g['out'])} outputs vs eager {len(r['out'])}")
            break
        # float outputs and grads of a call with lower-precision inputs: compared at the loosest
        # input dtype's tolerance (compiled kernels may keep an intermediate in float32 that eager
        # rounds, as torch.compile's do)
        floor = precision_floor(r["args"])
        problems += [f"{at}: {d}" for d in value_diff(g["out"], r["out"], "output", floor=floor)]
        problems += [f"{at}: output[{j}] requires_grad {b} vs eager {a}"
                     for j, (a, b) in enumerate(zip(r["out_rg"], g["out_rg"])) if a != b]
        for j, (a, b) in enumerate(zip(r["facts"], g["facts"])):
            if isinstance(a, dict) and isinstance(b, dict):
                problems += [f"{at}: output[{j}].{k}: {b[k]} vs eager {a[k]}" for k in a if a[k] != b[k]]
            elif a != b:
                problems.append(f"{at}: output[{j}]: {b} vs eager {a}")
        problems += [f"{at}: {d}" for d in value_diff(g["args"], r["args"], "argument (after call)")]
        problems += [f"{at}: {d}" for d in value_diff(g["state"], r["state"], "module state")]
        if r["bumped"] != g["bumped"]:
            problems.append(f"{at}: version counter bumped {g['bumped']} vs eager {r['bumped']} "
                            f"(known tensors: arguments, their bases, parameters, buffers)")
        if "grads" in r:
            problems += [f"{at}: {d}" for d in value_diff(g.get("grads"), r["grads"], "leaf .grad", floor=floor)]
            problems += [f"{at}: {d}" for d in value_diff(g.get("param_grads"), r["param_grads"], "param .grad",
                                                          floor=floor)]
    if len(ref.calls) != len(got.calls) and not problems:
        problems.append(f"{len(got.calls)} calls ran vs eager {len(ref.calls)}")
    return problems


def _params():
    out = []
    for c in CASES:
        for backend in BACKENDS:
            if backend == "triton" and not c.triton:
                continue
            for mode in MODES:
                if mode == "params_grad" and not c.module:
                    continue
                keys = [(c.name, backend, mode), (c.name, backend, None)]
                if backend != "eager":      # (case, None, mode): every compiling backend
                    keys.append((c.name, None, mode))
                reason = next((XFAIL[k] for k in keys if k in XFAIL), None)
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                out.append(pytest.param(c, backend, mode, marks=marks, id=f"{c.name}-{backend}-{mode}"))
    return out


def test_corpus_size():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case,backend,mode", _params())
def test_mutation_case(case, backend, mode):
    if backend == "aot_eager" and "aot_eager" not in pydynamo.list_backends():
        pytest.skip("backend aot_eager not registered yet")
    pydynamo.reset()
    ref = Side(case, mode, None)
    before = dict(aot_counters)
    got = Side(case, mode, backend)
    pydynamo.reset()
    if backend != "eager":     # not failures: counted, printed at the end of the session
        for w in got.warnings:
            kind = "eager fallback" if FALLBACK.search(w) else "graph break" if "graph break" in w else None
            if kind:
                NOTED[(backend, mode, kind)].append((case.name, w))
        if aot_counters["joint_graphs"] > before.get("joint_graphs", 0):
            NOTED[(backend, mode, "training path (joint graph)")].append((case.name, ""))
    problems = _compare(case, ref, got)
    assert not problems, "\n".join(problems)


# ---- the harness is not blind: backends that are wrong in one known way are caught -------------

def _map_tensors(v, fn):
    return tree_map_only(torch.Tensor, fn, v)


def _inputs_cloned(gm, example_inputs):
    """Runs the graph on copies of its inputs: in-place updates and input aliases are lost."""
    return lambda *args: gm(*_map_tensors(args, lambda t: t.clone()))


def _outputs_cloned(gm, example_inputs):
    """Returns copies of the graph's outputs: outputs that alias inputs or each other no longer do."""
    return lambda *args: _map_tensors(gm(*args), lambda t: t.clone())


def _outputs_detached(gm, example_inputs):
    return lambda *args: _map_tensors(gm(*args), lambda t: t.detach())


@pytest.mark.parametrize("broken,name,mode", [
    (_inputs_cloned, "add_on_input_returns_it", "inference"),
    (_inputs_cloned, "BN1d", "inference"),
    (_inputs_cloned, "input_and_its_view", "inference"),
    (_outputs_cloned, "return_view", "inference"),
    (_outputs_cloned, "return_view", "grad"),
    (_outputs_cloned, "two_outputs_share_storage", "inference"),
    (_outputs_detached, "intermediate_add_inplace", "grad"),
])
def test_harness_catches_a_wrong_backend(broken, name, mode):
    case = next(c for c in CASES if c.name == name)
    pydynamo.reset()
    ref, got = Side(case, mode, None), Side(case, mode, broken)
    pydynamo.reset()
    assert _compare(case, ref, got)
