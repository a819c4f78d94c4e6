"""The guard function's source holds no per-process value (pydynamo/guards.py: ids and objects
are constants passed to its factory), so its compiled code is reused: across calls of
compile_guards in one process, and across processes through a warm-cache entry (`prebuilt`,
used only when its key is the text's). Strictness is unchanged: the reused code checks the
constants of the guards it is built for, and a miss is still explained guard by guard."""
import torch

from pydynamo import guards, recompiles
from pydynamo.guards import Guard, GuardKind, TensorSpec, compile_guards
from pydynamo.sources import LocalSource

X, F = LocalSource("x"), LocalSource("f")


def _guards(fn, scale, t):
    return [Guard(F, GuardKind.ID_MATCH, (id(fn), "sin")),
            Guard(LocalSource("s"), GuardKind.EQUALS_MATCH, scale),
            Guard(X, GuardKind.TENSOR_MATCH, TensorSpec.of(t))]


def test_ids_and_values_are_constants_not_text():
    t = torch.randn(3, 4)
    a = compile_guards(_guards(torch.sin, 2, t), {})
    b = compile_guards(_guards(torch.cos, 3, t), {})
    assert a.source_text == b.source_text and str(id(torch.sin)) not in a.source_text
    assert a.module_code is b.module_code           # compiled once
    assert a({"f": torch.sin, "s": 2, "x": t}) and not a({"f": torch.cos, "s": 2, "x": t})
    assert b({"f": torch.cos, "s": 3, "x": t}) and not b({"f": torch.sin, "s": 3, "x": t})
    assert not a({"f": torch.sin, "s": 3, "x": t}) and not a({"f": torch.sin, "s": 2.0, "x": t})


def _counting(monkeypatch):
    guards._codes.clear()
    compiled = []
    monkeypatch.setattr(guards, "compile", lambda *a: compiled.append(1) or compile(*a),
                        raising=False)
    return compiled


def test_prebuilt_code_serves_guards_of_its_shape_unrendered(monkeypatch):
    """A warm entry's code, taken with this process's constants: nothing rendered or compiled,
    and the function checks this process's objects and values."""
    t = torch.randn(3, 4)
    own = compile_guards(_guards(torch.sin, 2, t), {})
    compiled = _counting(monkeypatch)
    prebuilt = (guards.text_key(own.source_text), own.module_code, own.shape)
    fn = compile_guards(_guards(torch.cos, 3, t), {}, prebuilt)
    assert compiled == [] and fn.source_text is None and fn.module_code is own.module_code
    assert fn({"f": torch.cos, "s": 3, "x": t})
    assert not fn({"f": torch.sin, "s": 3, "x": t}) and not fn({"f": torch.cos, "s": 2, "x": t})
    assert not fn({"f": torch.cos, "s": 3, "x": t.t()})


def test_prebuilt_code_of_another_shape_or_text_is_not_used(monkeypatch):
    t = torch.randn(3, 4)
    own = compile_guards(_guards(torch.sin, 2, t), {})
    key = guards.text_key(own.source_text)
    compiled = _counting(monkeypatch)
    # one more guard: another shape and another text; the code offered is not used
    more = _guards(torch.sin, 2, t) + [Guard(LocalSource("n"), GuardKind.LEN, 2)]
    fn = compile_guards(more, {}, (key, own.module_code, own.shape))
    assert compiled == [1] and fn.module_code is not own.module_code
    assert fn({"f": torch.sin, "s": 2, "x": t, "n": [1, 2]})
    assert not fn({"f": torch.sin, "s": 2, "x": t, "n": [1, 2, 3]})
    # the C++ tensor predicate missing in this process: another shape (the tensor checked in
    # Python), so the text is rendered, and it is not the offered code's
    predicate = guards.tensor_check.module
    monkeypatch.setattr(guards.tensor_check, "module", lambda: None)
    compiled.clear()
    fn = compile_guards(_guards(torch.sin, 2, t), {}, (key, own.module_code, own.shape))
    assert compiled == [1] and fn.module_code is not own.module_code and ".shape" in fn.source_text
    assert fn({"f": torch.sin, "s": 2, "x": t}) and not fn({"f": torch.sin, "s": 2, "x": t[:2]})
    # another shape but the same text once rendered (the key says so): the code is used
    monkeypatch.setattr(guards.tensor_check, "module", predicate)
    compiled.clear()
    guards._codes.clear()
    fn = compile_guards(_guards(torch.sin, 2, t), {}, (key, own.module_code, "another shape"))
    assert compiled == [] and fn.module_code is own.module_code and fn.source_text is not None


def test_a_miss_on_an_identity_is_still_explained():
    t = torch.randn(3, 4)
    gs = _guards(torch.sin, 2, t)
    out = recompiles.guard_failures(gs, {"f": torch.cos, "s": 2, "x": t}, {})
    assert len(out) == 1 and "ID_MATCH" in str(out[0]) and "L['f']" in str(out[0]), out
