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


def test_prebuilt_code_is_used_only_for_its_own_text(monkeypatch):
    t = torch.randn(3, 4)
    own = compile_guards(_guards(torch.sin, 2, t), {})
    guards._codes.clear()
    compiled = []
    monkeypatch.setattr(guards, "compile", lambda *a: compiled.append(1) or compile(*a),
                        raising=False)
    key = guards.text_key(own.source_text)
    fn = compile_guards(_guards(torch.sin, 2, t), {}, (key, own.module_code))
    assert compiled == [] and fn.module_code is own.module_code
    guards._codes.clear()
    # a key of another text (one more guard): the code offered is not this text's, compiled anew
    more = _guards(torch.sin, 2, t) + [Guard(LocalSource("n"), GuardKind.LEN, 2)]
    fn = compile_guards(more, {}, (key, own.module_code))
    assert compiled == [1] and fn.module_code is not own.module_code
    assert fn({"f": torch.sin, "s": 2, "x": t, "n": [1, 2]})
    assert not fn({"f": torch.sin, "s": 2, "x": t, "n": [1, 2, 3]})


def test_a_miss_on_an_identity_is_still_explained():
    t = torch.randn(3, 4)
    gs = _guards(torch.sin, 2, t)
    out = recompiles.guard_failures(gs, {"f": torch.cos, "s": 2, "x": t}, {})
    assert len(out) == 1 and "ID_MATCH" in str(out[0]) and "L['f']" in str(out[0]), out
