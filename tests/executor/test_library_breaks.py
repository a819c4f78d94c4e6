"""Graph breaks library code made pydynamo take where torch.compile takes fewer, reduced to
self-contained cases: a dataclass that is also an OrderedDict (transformers' ModelOutput: None
fields are attributes but not keys) whose class has a Python metaclass, passed in or built in the
frame; functools.lru_cache-wrapped methods and functions (a pure one is inlined, one that logs
breaks at its call); logging calls (a break at the call, never inside logging's level cache,
whose KeyError is caught by a try/except in `Logger.isEnabledFor`). Each case's graph count
equals torch.compile(backend=eager)'s, probed live in a subprocess (both engines install a frame
hook): `python tests/executor/test_library_breaks.py` prints {case: graphs}. Then a training
step of tiny GPT-2 / BERT from transformers configs with labels (skipped without transformers).
"""
import collections
import copy
import dataclasses
import functools
import json
import logging
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
log = logging.getLogger("pydynamo_test_library_breaks")
log.addHandler(logging.NullHandler())
log.propagate = False


class Meta(type):
    """Like transformers' _BCCacheNameMeta: Python code that runs when the class is built."""

    def __setattr__(cls, name, value):
        super().__setattr__(name, value)


class OutputBase(collections.OrderedDict, metaclass=Meta):
    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v


@dataclasses.dataclass
class Output(OutputBase):
    last: torch.Tensor = None
    cache: object = None
    hidden: object = None


def _inner(x):
    return Output(last=x.sin())


def model_output_in_frame(x):
    o = _inner(x)
    return o.last + 1, o.cache, o.hidden, len(o), list(o.keys())


def model_output_passed_in(o):
    # reading a None field (an attribute, not a key) of an object made outside the frame
    return Output(last=o.last + 1, cache=o.cache, hidden=o.hidden)


class Logs:
    @functools.lru_cache(None)
    def warn_once(self, msg):
        log.warning(msg)

    @functools.lru_cache(None)
    def scale(self, n):
        return n * 2


LOGS = Logs()


@functools.lru_cache(None)
def _double(n):
    return n * 2


def lru_method_that_logs(x):
    x = x + 1
    LOGS.warn_once("once")
    return x * 2


def lru_method_pure(x):
    return (x + 1) * LOGS.scale(3)


def lru_function_pure(x):
    return (x + 1) * _double(3)


def logger_warning(x):
    x = x + 1
    log._cache.clear()  # isEnabledFor's level lookup raises KeyError, caught in logging
    log.warning("careful")
    return x * 2


def logger_debug(x):
    x = x + 1
    log.debug("quiet %d", 3)
    return x * 2


_LEVELS = {}


def _lookup(level):
    try:
        return _LEVELS[level]
    except KeyError:
        _LEVELS[level] = v = level > 20
        return v


def keyerror_caught(x):
    _LEVELS.clear()
    x = x + 1
    if _lookup(30):
        x = x * 3
    return x * 2


CASES = {f.__name__: f for f in (model_output_in_frame, model_output_passed_in, lru_method_that_logs,
                                  lru_method_pure, lru_function_pure, logger_warning, logger_debug,
                                  keyerror_caught)}


def _arg(name):
    x = torch.randn(3)
    return Output(last=x) if name == "model_output_passed_in" else x


def run(compile_fn, reset) -> dict:
    """{case: (graphs compiled over two calls, outputs equal eager)}"""
    out = {}
    for name, fn in CASES.items():
        reset()
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        compiled = compile_fn(fn, backend)
        ok = True
        for _ in range(2):
            torch.manual_seed(0)
            arg = _arg(name)
            got, want = compiled(arg), fn(arg)
            ok = ok and _same(got, want)
        out[name] = (len(graphs), ok)
    return out


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a.keys()) == list(b.keys()) and \
            all(_same(x, y) for x, y in zip(a.values(), b.values())) and \
            all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.fixture(scope="module")
def torch_reference():
    p = subprocess.run([sys.executable, os.path.abspath(__file__)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ours():
    import pydynamo
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run(lambda f, b: pydynamo.optimize(f, backend=b), pydynamo.reset)
    pydynamo.reset()
    return res


# torch.compile inlines the try/except around the KeyError (its exception handling is traced);
# pydynamo's translator does not trace exception handlers yet, so the raising lookup is a break
KNOWN_GAPS = {"keyerror_caught": "an exception caught by try/except in traced code is a graph break"}


@pytest.mark.parametrize("name", [n if n not in KNOWN_GAPS else pytest.param(
    n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n])) for n in CASES])
def test_library_case_graphs_like_torch_compile(name, ours, torch_reference):
    graphs, ok = ours[name]
    assert ok is True, "outputs differ from eager"
    assert graphs == torch_reference[name][0]


def test_lru_cache_with_effects_runs_its_cache():
    """A break at the call: the wrapped function runs once (a cache hit skips it), as in eager."""
    import pydynamo
    calls = []

    @functools.lru_cache(None)
    def note(n):
        calls.append(n)
        return n

    def f(x):
        note(1)
        return x + 1

    pydynamo.reset()
    opt = pydynamo.optimize(f, backend="eager")
    for _ in range(3):
        opt(torch.ones(2))
    assert calls == [1]
    pydynamo.reset()


# --- transformers: a training step with labels -------------------------------------------------

def _transformers_model(kind):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind.startswith("gpt2"):
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                                      resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, bos_token_id=0, eos_token_id=0)
        if kind == "gpt2_no_cache":
            cfg.use_cache = False
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                                  vocab_size=128, hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    return transformers.BertForMaskedLM(cfg)


# torch.compile(backend="eager") on the same calls (torch 2.13, transformers 5): GPT-2 breaks once,
# at the loss property's `logger.warning_once` (an lru_cache'd logging call), 2 graphs; BERT 1 graph
TORCH_GRAPHS = {"gpt2": 2, "gpt2_no_cache": 2, "bert": 1}


@pytest.mark.parametrize("kind", list(TORCH_GRAPHS))
def test_transformers_training_step_breaks_like_torch_compile(kind, cnt):
    import pydynamo
    import warnings
    model = _transformers_model(kind)
    ref = copy.deepcopy(model)
    opt = pydynamo.optimize(model, backend=cnt)
    for step in range(2):
        ids = torch.randint(0, 128, (2, 32))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = opt(input_ids=ids, labels=ids)
            out.loss.backward()
        want = ref(input_ids=ids, labels=ids)
        want.loss.backward()
        torch.testing.assert_close(out.loss, want.loss)
        torch.testing.assert_close(out.logits, want.logits)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        breaks = [str(w.message) for w in caught if "graph break" in str(w.message)]
        # no break reading ModelOutput fields, binding warning_once, or inside logging
        assert not [b for b in breaks if any(c in b for c in ("[no_attribute]", "[descriptor]", "[key_error]"))], breaks
    assert cnt.count == TORCH_GRAPHS[kind]


if __name__ == "__main__":
    import torch._dynamo
    print(json.dumps(run(lambda f, b: torch.compile(f, backend=b), torch._dynamo.reset)))
