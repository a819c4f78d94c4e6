"""Decode loops (issue 18): transformers greedy generation with a static KV cache, the forward
compiled by pydynamo (codegen, mode="reduce-overhead"), one token at a time.

On the CPU: tokens equal eager's (fp32, random weights, batch 1 and 2, several prompts); the
prefill and the decode step compile once each (one recompile, never one per token: the cache
position changes value, not shape), no graph break, like torch.compile (2 frames, 2 graphs, 0
breaks on the same run; measured, not re-run here: it takes ~40 s on this machine); the cache
tensors keep their storage (the update is written into the caller's tensor) and end equal to
eager's. The CUDA-graph runner (codegen/cudagraphs.py) runs here with a simulated graph
(`SimulatedGraphs`: a capture records the call, a replay re-runs it into the captured output
buffers): which arguments are read in place (the cache) or copied (fresh ids), one capture for
all decode steps, a new cache per generate call read in place again, outputs never stale, and
the whole decode loop through the Triton interpreter with the runner around every graph; and
the same loop with StaticCache's CPU `cumulative_length` as a host scalar (as on a GPU:
codegen/host_scalars.py, simulated on the CPU), advanced on the host, uploaded for the kernels.
"""
import pytest
import torch

import pydynamo
from pydynamo import convert_frame
from pydynamo.cudagraphs import _flat
import codegen.cudagraphs as cgr
from benchmarks.bench_decode import Counts    # translations, graphs, breaks, recompiles
from codegen.cudagraphs import CudaGraphRunner, in_place_roles

transformers = pytest.importorskip("transformers")


# --- the runner's bookkeeping, with a simulated graph ---------------------------------------

class SimulatedGraphs(cgr.Device):
    """A capture runs the call once on the real arguments (to get its outputs and what they
    alias), then undoes its writes (a real capture runs nothing); a replay runs it again on the
    captured arguments and copies fresh results into the captured output buffers, so a caller
    that kept an output of an earlier replay would see it overwritten, as on a GPU."""

    def pool(self):
        return object()

    def capture(self, fn, args, pool):
        saved = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
        outs = fn(*args)
        for a, s in zip(args, saved):
            if s is not None:
                a.copy_(s)
        return _SimGraph(fn, list(args), outs), outs

    def failed(self):
        pass

    def checking_syncs(self, fn, args):
        return fn(*args)


class _SimGraph:
    def __init__(self, fn, args, outs):
        self.fn, self.args, self.outs = fn, args, outs

    def replay(self):
        new = self.fn(*self.args)
        for o, n in zip(_flat(self.outs), _flat(new)):
            if isinstance(o, torch.Tensor) and o.data_ptr() != n.data_ptr():
                o.copy_(n)


def _step(cache, pos, x):
    """One decode step: write row `pos` of the cache in place, read the whole cache, return a
    fresh result and a view of the cache."""
    cache.index_copy_(0, pos, x)
    return (cache.sum(0) * 2 + x[0]), cache[1:3]


def test_roles_follow_the_addresses_of_the_call_before():
    assert in_place_roles((1, 2, None), (1, 3, None)) == (True, False, None)
    assert in_place_roles((1, 2), None) == (False, False)


def test_one_capture_serves_every_decode_step_and_writes_the_cache_in_place():
    torch.manual_seed(0)
    cache, ref = torch.zeros(8, 4), torch.zeros(8, 4)
    ptr = cache.data_ptr()
    run = CudaGraphRunner(_step, [0], device=SimulatedGraphs())
    kept = []
    for t in range(8):
        pos, x = torch.tensor([t]), torch.randn(1, 4)       # fresh tensors every step
        out, view = run(cache, pos, x)
        want, want_view = _step(ref, pos.clone(), x.clone())
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(cache, ref)              # written in place, every step
        assert view.data_ptr() == cache.data_ptr() + 4 * 4  # the caller's cache, not a copy
        kept.append((out, want))
    assert cache.data_ptr() == ptr
    for out, want in kept:                                  # no output went stale
        torch.testing.assert_close(out, want)
    s = run.cg_stats
    assert s["captures"] == 1 and s["plain_calls"] == 1 and s["replays"] == 7
    assert s["input_copies"] == 2 * 6      # pos and x, not the cache (the capture's replay: 0)


def test_a_new_cache_per_generate_call_is_read_in_place_again():
    run = CudaGraphRunner(_step, [0], device=SimulatedGraphs())
    for gen in range(3):
        cache, ref = torch.zeros(8, 4), torch.zeros(8, 4)
        for t in range(5):
            pos, x = torch.tensor([t]), torch.randn(1, 4)
            out, _ = run(cache, pos, x)
            torch.testing.assert_close(out, _step(ref, pos, x)[0])
        torch.testing.assert_close(cache, ref)
        keep = cache    # noqa: F841  (three live caches: three addresses)
        if gen == 0:
            first = cache
    s = run.cg_stats
    # generate 0: warm-up, capture; 1 and 2: one plain call at the new address, then a capture
    assert s["captures"] == 3 and s["plain_calls"] == 3 and s["replays"] == 12
    assert s["input_copies"] == 2 * (12 - 3)
    del first


def test_arguments_fresh_on_every_call_are_copied_into_one_capture():
    f = lambda a, b: (a * b + 1,)      # noqa: E731
    run = CudaGraphRunner(f, device=SimulatedGraphs())
    for _ in range(5):
        a, b = torch.randn(3, 3), torch.randn(3, 3)
        torch.testing.assert_close(run(a, b)[0], a * b + 1)
    assert run.cg_stats["captures"] == 1 and run.cg_stats["input_copies"] == 2 * 3


def test_a_moved_argument_gets_a_copied_capture_beside_the_in_place_one():
    f = lambda x: (x.exp() - 1,)      # noqa: E731
    run = CudaGraphRunner(f, device=SimulatedGraphs())
    x = torch.randn(4, 4)
    run(x), run(x)
    x.mul_(3)                          # same address, new contents
    torch.testing.assert_close(run(x)[0], x.exp() - 1)
    assert run.cg_stats["input_copies"] == 0 and run.cg_stats["captures"] == 1
    for _ in range(3):                 # fresh tensors: one plain call, then a copied capture
        z = torch.randn(4, 4)
        torch.testing.assert_close(run(z)[0], z.exp() - 1)
    assert run.cg_stats["captures"] == 2 and run.cg_stats["plain_calls"] == 2
    torch.testing.assert_close(run(x)[0], x.exp() - 1)      # back in place: no copy
    assert run.cg_stats["input_copies"] == 1


def test_an_output_that_is_an_argument_comes_back_as_the_callers_tensor():
    def f(cache, pos, x):               # a scatter written into its input (codegen/reinplace.py)
        return cache.index_copy_(0, pos, x), cache.sum(0)
    run = CudaGraphRunner(f, [0], device=SimulatedGraphs())
    cache, ref = torch.zeros(6, 3), torch.zeros(6, 3)
    for t in range(4):
        pos, x = torch.tensor([t]), torch.randn(1, 3)
        same, total = run(cache, pos, x)
        want = f(ref, pos, x)[1]
        assert same is cache
        torch.testing.assert_close(total, want)
    torch.testing.assert_close(cache, ref)


def test_a_written_back_output_is_copied_into_its_input_inside_the_graph():
    def f(count, x):                   # functionalized `count.add_(1)`: the caller copies out[0]
        return count + 1, x * count
    run = CudaGraphRunner(f, copy_back=[(0, 0)], device=SimulatedGraphs())
    count, ref = torch.zeros(()), torch.zeros(())
    for _ in range(5):
        x = torch.randn(3)
        new, y = run(count, x)
        want_new, want_y = f(ref, x)
        torch.testing.assert_close(y, want_y)
        torch.testing.assert_close(new, want_new)
        count.copy_(new)               # the caller's write-back (onto itself after a replay)
        ref.copy_(want_new)
    s = run.cg_stats
    assert s["captures"] == 1 and s["replays"] == 4 and new is count
    fresh = torch.zeros(())            # a count that moves every call: copied back
    for _ in range(3):
        fresh = fresh.clone()
        new, _ = run(fresh, torch.randn(3))
        fresh.copy_(new)
    assert float(fresh) == 3.0


def test_a_copied_argument_written_in_place_is_copied_back():
    def f(a, b):
        a.add_(b)
        return (a * 2,)
    run = CudaGraphRunner(f, [0], device=SimulatedGraphs())
    b = torch.randn(5)
    for _ in range(4):
        a = torch.randn(5)
        want = a + b
        out = run(a, b)[0]
        torch.testing.assert_close(a, want)          # the caller's tensor, written
        torch.testing.assert_close(out, want * 2)
    assert run.cg_stats["captures"] == 1 and run.cg_stats["replays"] == 3


def test_size_buckets_and_the_capture_limit(monkeypatch):
    monkeypatch.setattr(cgr, "MAX_CAPTURES", 2)
    f = lambda x: (x * 2,)      # noqa: E731
    run = CudaGraphRunner(f, device=SimulatedGraphs())
    for n in (1, 8, 1, 8, 1, 8):        # batch 1 and batch 8: a bucket each
        x = torch.randn(n, 4)
        torch.testing.assert_close(run(x)[0], x * 2)
    assert len(run.entries) == 2 and run.cg_stats["captures"] == 2
    keep = []
    for _ in range(4):                  # in-place captures at new addresses: the oldest goes
        x = torch.randn(2, 4)
        keep.append(x)
        for _ in range(3):
            torch.testing.assert_close(run(x)[0], x * 2)
    e = run.entries[next(k for k in run.entries if k[0][0] == (2, 4))]
    assert len(e.graphs) <= 2 and run.cg_stats["evictions"] >= 1


# --- scatters into written-back inputs (codegen/reinplace.py) ----------------------------

def _compiled_counts(fn, *args):
    import codegen
    before = codegen.counters["reinplaced_inputs"]
    pydynamo.reset()
    out = pydynamo.optimize(fn, backend="codegen")(*args)
    return out, codegen.counters["reinplaced_inputs"] - before


def _cache_args():
    torch.manual_seed(3)
    return torch.randn(2, 3, 8, 4), torch.tensor([5, 1]), torch.randn(2, 3, 2, 4)


def test_index_copy_into_a_cache_input_writes_it_in_place():
    def f(cache, pos, x):
        cache.index_copy_(2, pos, x)
        return cache.sum(2) * 2
    cache, pos, x = _cache_args()
    ref = cache.clone()
    want = f(ref, pos, x)
    ptr = cache.data_ptr()
    out, n = _compiled_counts(f, cache, pos, x)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(cache, ref)
    assert n == 1 and cache.data_ptr() == ptr


def test_a_cache_read_before_its_update_is_not_written_early():
    def f(cache, pos, x):
        old = cache * 2                  # a kernel fused after the update would read it new
        cache.index_copy_(2, pos, x)
        return old + cache
    cache, pos, x = _cache_args()
    ref = cache.clone()
    want = f(ref, pos, x)
    out, n = _compiled_counts(f, cache, pos, x)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(cache, ref)
    assert n == 0


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_into_a_cache_input(accumulate):
    def f(cache, pos, x):
        cache.index_put_((pos,), x, accumulate=accumulate)
        return cache * 3
    torch.manual_seed(4)
    cache, pos, x = torch.randn(6, 4), torch.tensor([4, 0]), torch.randn(2, 4)
    ref = cache.clone()
    want = f(ref, pos, x)
    out, n = _compiled_counts(f, cache, pos, x)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(cache, ref)
    assert n == (0 if accumulate else 1)    # accumulation is not idempotent: written back


def _same_as_eager(f, *args):
    ref = [a.clone() for a in args]
    want = f(*ref)
    out, n = _compiled_counts(f, *args)
    torch.testing.assert_close(out, want)
    for a, r in zip(args, ref):
        torch.testing.assert_close(a, r)
    return out, n


def test_a_returned_cache_update_is_the_callers_tensor():
    def f(cache, pos, x):
        return cache.index_copy_(2, pos, x)
    cache, pos, x = _cache_args()
    out, n = _same_as_eager(f, cache, pos, x)
    assert out is cache


def test_updates_through_a_view_and_twice_are_written_back_as_before():
    def through_view(cache, pos, x):
        cache[1].index_copy_(1, pos, x[0])
        return cache.sum()

    def twice(cache, pos, x):
        cache.index_copy_(2, pos, x)
        cache.index_copy_(2, pos.flip(0), x * 2)
        return cache.mean(2)
    for f in (through_view, twice):
        cache, pos, x = _cache_args()
        _, n = _same_as_eager(f, cache, pos, x)
        assert n == 0


def test_an_out_of_range_update_raises_as_eager_and_leaves_the_cache_as_eager():
    def f(cache, pos, x):
        cache.index_copy_(2, pos, x)
        return cache * 2
    cache, _, x = _cache_args()
    bad = torch.tensor([1, 8])                     # 8 is past the cache's 8 rows
    ref = cache.clone()
    with pytest.raises(Exception) as eager_error:
        f(ref, bad, x)
    pydynamo.reset()
    with pytest.raises(Exception) as ours:
        pydynamo.optimize(f, backend="codegen")(cache, bad, x)
    assert type(ours.value) is type(eager_error.value)
    torch.testing.assert_close(cache, ref)


_WARM_CHILD = """
import sys
sys.path.insert(0, ".")
import torch, pydynamo, codegen
def step(cache, pos, x):
    cache.index_copy_(2, pos, x)
    return cache.sum(2) * 2
torch.manual_seed(0)
cache = torch.randn(2, 3, 8, 4); ref = cache.clone()
pos = torch.tensor([int(sys.argv[1])]); x = torch.randn(2, 3, 1, 4)
out = pydynamo.optimize(step, backend="codegen")(cache, pos, x)
want = step(ref, pos, x)
assert torch.equal(out, want) or torch.allclose(out, want), "output"
assert torch.allclose(cache, ref), "cache"
print("COMPILED", codegen.counters["graphs_compiled"])
"""


def test_a_graph_written_into_its_cache_input_is_kept_by_the_warm_cache(tmp_path):
    """The scatter extern (codegen.reinplace.index_copy_into) has an importable name, so the
    wrapper is stored and a second process runs it without compiling."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYDYNAMO_WARM_START="1", PYDYNAMO_CACHE_DIR=str(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = tmp_path / "child.py"       # a file: the warm cache hashes the traced source
    child.write_text(_WARM_CHILD)
    compiled = []
    for pos in (1, 6):
        r = subprocess.run([sys.executable, str(child), str(pos)], cwd=root, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        compiled.append(int(r.stdout.split("COMPILED")[-1]))
    assert compiled == [1, 0]


# --- the decode loop ----------------------------------------------------------------------

def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                      max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def _generate(model, ids, new=12):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                              do_sample=False, cache_implementation="static",
                              disable_compile=True, return_dict_in_generate=True,
                              pad_token_id=0)


@pytest.fixture
def counts():
    pydynamo.reset()
    c = Counts()
    convert_frame.RECORDERS.append(c)
    yield c
    convert_frame.RECORDERS.remove(c)
    pydynamo.reset()


def _cache_layers(out):
    return out.past_key_values.layers


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_static_cache_decode_equals_eager(counts, batch):
    model = _llama()
    torch.manual_seed(batch)
    prompts = [torch.randint(1, 1000, (batch, 7)), torch.randint(1, 1000, (batch, 7))]
    refs = [_generate(model, p) for p in prompts]
    eager_forward = model.forward
    model.forward = pydynamo.optimize(eager_forward, backend="codegen", mode="reduce-overhead")
    for p, ref in zip(prompts, refs):
        out = _generate(model, p)
        assert torch.equal(out.sequences, ref.sequences), (out.sequences, ref.sequences)
        for mine, theirs in zip(_cache_layers(out), _cache_layers(ref)):
            torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(mine.values, theirs.values, rtol=1e-5, atol=1e-5)
            assert int(mine.cumulative_length) == int(theirs.cumulative_length)
    # prefill and decode: one translation each, one recompile between them, no break (as
    # torch.compile: 2 frames, 2 graphs); the second prompt compiles nothing
    assert (counts.frames, counts.graphs, counts.breaks, counts.recompiles) == (2, 2, 0, 1)


def test_decode_writes_the_callers_cache_tensor(counts):
    """The decode graph's index_copy_ lands in the StaticCache's own tensors: same storage
    before and after every step, values equal eager's step by step."""
    model = _llama()
    ids = torch.randint(1, 1000, (1, 5))
    compiled = pydynamo.optimize(model.forward, backend="codegen", mode="reduce-overhead")
    seen = []

    def forward(*args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        before = [l.keys.data_ptr() for l in cache.layers] if cache.layers[0].is_initialized \
            else None
        out = compiled(*args, **kwargs)
        after = [l.keys.data_ptr() for l in cache.layers]
        seen.append((before, after, [l.keys.clone() for l in cache.layers]))
        return out
    ref_steps = []
    eager = model.forward

    def eager_forward(*args, **kwargs):
        out = eager(*args, **kwargs)
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ref_steps.append([l.keys.clone() for l in cache.layers])
        return out
    model.forward = eager_forward
    ref = _generate(model, ids, new=6)
    model.forward = forward
    out = _generate(model, ids, new=6)
    assert torch.equal(out.sequences, ref.sequences)
    assert seen[0][0] is None                       # the prefill creates the cache
    first = seen[0][1]
    for (before, after, keys), want in zip(seen, ref_steps):
        assert after == first and (before is None or before == first)
        for k, w in zip(keys, want):
            torch.testing.assert_close(k, w, rtol=1e-5, atol=1e-5)
    assert len(seen) == 6 and counts.recompiles == 1


@pytest.fixture
def simulated_runners(monkeypatch):
    """The Triton path (interpreted) with the CUDA-graph runner around every compiled graph, on
    the simulated graph; yields the runners in compile order."""
    import os
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set before triton is imported)")
    from codegen.gpu_wrapper import TritonBackend
    runners = []

    def finish(self, call, gm, g, options, stats, ns):
        call = cgr.maybe_wrap(call, gm, g, options, stats, ns.get("matches"))
        if isinstance(call, CudaGraphRunner):
            call.device = SimulatedGraphs()
            runners.append(call)
        return call
    monkeypatch.setattr(TritonBackend, "finish", finish)
    yield runners


def _decode_with_runners(runners):
    """Greedy decode of 8 tokens, eager and compiled (Triton path): tokens and keys equal;
    (compiled output, eager output, the runners: prefill's and decode's)."""
    model = _llama()
    ids = torch.randint(1, 1000, (1, 6))
    ref = _generate(model, ids, new=8)
    model.forward = pydynamo.optimize(model.forward, backend="codegen", mode="reduce-overhead",
                                      options={"backend_kernels": "triton"})
    out = _generate(model, ids, new=8)
    assert torch.equal(out.sequences, ref.sequences)
    for mine, theirs in zip(_cache_layers(out), _cache_layers(ref)):
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-5, atol=1e-5)
    assert len(runners) == 2
    return out, ref, runners


def test_decode_loop_through_the_graph_runner_on_the_triton_interpreter(counts,
                                                                        simulated_runners):
    """The GPU path's Triton kernels (interpreted) with the CUDA-graph runner around every
    compiled graph, on the simulated graph: tokens equal eager's, the decode bucket captured
    once and replayed for every later step, the prefill never captured (one call)."""
    out, ref, (prefill, decode) = _decode_with_runners(simulated_runners)
    assert prefill.cg_stats["captures"] == 0 and prefill.cg_stats["plain_calls"] == 1
    # 7 decode steps: warm-up, capture (+ its replay), 5 replays
    assert decode.cg_stats["captures"] == 1 and decode.cg_stats["replays"] == 6
    # the four cache tensors (2 layers, keys and values) are written by the graph itself, and
    # read in place (the step's ids, positions and mask are copied: 3 per replay but the first)
    assert len(decode.mutated) == 4 and decode.cg_stats["input_copies"] == 3 * 5
    # each layer's cumulative_length.add_ is copied back by the captured work (no launch left
    # outside the graph), in the prefill too (which creates the cache tensors themselves)
    assert len(decode.copy_back) == 2 and len(prefill.copy_back) == 2
    assert all(len(g.written) == 6 for e in decode.entries.values() for g in e.graphs.values())
    assert counts.recompiles == 1


def test_decode_loop_with_host_scalars_under_graph_replay(counts, simulated_runners,
                                                         monkeypatch):
    """issue 18: on a GPU, StaticCache's `cumulative_length` is a CPU 0-d tensor in a device
    graph. Simulated here (codegen/host_scalars.py SIMULATE: the interpreter's CPU 0-d inputs
    are host scalars): each layer's advance is computed on the host and written back by the
    caller as a CPU copy (no copy_back in the runner), the positions the kernels read come
    from the upload buffer, read in place by the capture (no copy of it per replay), and the
    host part runs outside the capture on every call, so every replayed step is exact."""
    import codegen
    import codegen.host_scalars as hs
    monkeypatch.setattr(hs, "SIMULATE", True)
    before = codegen.counters["host_scalar_graphs"], codegen.counters["eager_fallback_graphs"]
    out, ref, (prefill, decode) = _decode_with_runners(simulated_runners)
    for mine, theirs in zip(_cache_layers(out), _cache_layers(ref)):
        torch.testing.assert_close(mine.values, theirs.values, rtol=1e-5, atol=1e-5)
        assert mine.cumulative_length.device.type == "cpu"
        assert int(mine.cumulative_length) == int(theirs.cumulative_length) == 6 + 7
    assert codegen.counters["host_scalar_graphs"] - before[0] == 2      # prefill and decode
    assert codegen.counters["eager_fallback_graphs"] == before[1]
    assert decode.cg_stats["captures"] == 1 and decode.cg_stats["replays"] == 6
    # ids, positions and mask copied per replay (but the first), the upload buffer read in place
    assert decode.cg_stats["input_copies"] == 3 * 5
    assert len(decode.mutated) == 4 and decode.copy_back == [] and prefill.copy_back == []
    assert counts.recompiles == 1
