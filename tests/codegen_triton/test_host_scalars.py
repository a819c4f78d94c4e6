"""Host scalars (codegen/host_scalars.py): CPU 0-d tensor inputs of a device graph, computed on
the host and uploaded to one device buffer per dtype (issue 18: transformers' StaticCache keeps
`cumulative_length` on the CPU).

Without a GPU the Triton interpreter's graphs live on the CPU, so `SIMULATE` makes their CPU 0-d
inputs host scalars: the split, the packed uploads, the host outputs and the CUDA-graph runner's
roles all run here (the runner with tests/models/test_decode.py's simulated graph). The tests at
the end need CUDA (run by benchmarks/gpu/run_all.sh tests): exact results on every step of a
decode-like loop under CUDA-graph replay, and no host-device sync in the steady state.
"""
import operator
import os

import pytest
import torch
import torch.fx

import codegen
import codegen.host_scalars as hs
import pydynamo

interp = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                            reason="the CPU simulation needs Triton's interpreter")
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def simulate(monkeypatch):
    monkeypatch.setattr(hs, "SIMULATE", True)
    pydynamo.reset()
    yield
    pydynamo.reset()


def step(cache, count, x):
    """A decode step: positions from a CPU counter, the counter advanced in place, the cache
    written at those positions, a result that reads the advanced counter."""
    pos = torch.arange(x.shape[0], device=cache.device) + count
    count.add_(x.shape[0])
    cache.index_copy_(0, pos, x)
    return cache.sum(0) * 2 + count


def _delta(before):
    return {k: codegen.counters[k] - before.get(k, 0) for k in codegen.counters}


def _run_steps(fn, device, steps=6):
    torch.manual_seed(0)
    cache = torch.randn(16, 4, device=device)
    count = torch.tensor(3)          # on the CPU, as StaticCache's
    ref_cache, ref_count = cache.clone(), count.clone()
    ptr = cache.data_ptr()
    for t in range(steps):
        x = torch.randn(1 + t % 2, 4, device=device)      # one or two new rows
        out = fn(cache, count, x)
        want = step(ref_cache, ref_count, x)
        assert out.device == want.device
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(cache, ref_cache)
        assert count.device.type == "cpu" and int(count) == int(ref_count)
    assert cache.data_ptr() == ptr
    return count


@interp
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_cpu_counter_is_computed_on_the_host_and_uploaded(simulate, dynamic):
    before = dict(codegen.counters)
    f = pydynamo.optimize(step, backend="codegen", dynamic=dynamic,
                          options={"backend_kernels": "triton", "strict": True})
    count = _run_steps(f, "cpu")
    assert int(count) == 3 + 1 + 2 + 1 + 2 + 1 + 2
    d = _delta(before)
    # static: two graphs (one and two new rows), each split, none eager; dynamic: the size
    # symbols' input positions are the device part's
    assert d.get("host_scalar_graphs") == d.get("graphs_compiled") and \
        (dynamic or d["graphs_compiled"] == 2)
    assert not d.get("eager_fallback_graphs")


def _split_of(fn, *args):
    gm = torch.fx.symbolic_trace(fn)
    vals = {}

    class Record(torch.fx.Interpreter):
        def run_node(self, n):
            r = super().run_node(n)
            vals[n] = r
            return r
    Record(gm).run(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    for n, v in vals.items():
        n.meta["val"] = v
    return hs.split(gm, list(args), torch.device("cpu"))


@interp
def test_the_split_puts_host_only_arithmetic_on_the_host(simulate):
    def f(x, count):
        new = count + 1                  # host: its only tensor input is the counter
        return x * new, new * 2          # device (reads x); host (CPU result of host values)
    s = _split_of(f, torch.randn(3), torch.tensor(4))
    assert s is not None and s.host_positions == [1] and s.device_positions == [0]
    assert [k for k, _ in s.outputs] == ["dev", "host"]
    assert s.groups == [(torch.int64, 1)]           # `new` uploaded once
    targets = [n.target for n in s.device_gm.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.select.int, operator.mul]     # the adds stay on the host


@interp
def test_no_split_where_the_host_part_would_change_what_the_device_reads(simulate):
    def writes(x, count):                # an in-place write of a host value: not reordered
        y = x + count
        count.add_(1)
        return y * count
    assert _split_of(writes, torch.randn(3), torch.tensor(2)) is None

    def not_scalar(x, count):            # a host value that is no scalar, read by the device
        return x + count.expand(3)
    assert _split_of(not_scalar, torch.randn(3), torch.tensor(2)) is None

    def draws(x, count):                 # the host would draw before the device part
        return x + torch.ops.aten.rand_like.default(count.float())
    assert _split_of(draws, torch.randn(3), torch.tensor(2)) is None


@interp
def test_without_simulation_a_cpu_graph_is_not_split():
    def f(x, count):
        return x * (count + 1)
    gm = torch.fx.symbolic_trace(f)
    assert hs.split(gm, [torch.randn(3), torch.tensor(2)], torch.device("cpu")) is None


@interp
def test_several_dtypes_get_a_buffer_each_and_outputs_keep_their_order(simulate):
    def f(x, n, scale, flag):
        return (n + 1, x * scale + n, torch.where(flag, x, -x), scale * 3)
    args = (torch.randn(5), torch.tensor(7), torch.tensor(0.5), torch.tensor(True))
    before = dict(codegen.counters)
    g = pydynamo.optimize(f, backend="codegen",
                          options={"backend_kernels": "triton", "strict": True})
    for _ in range(3):
        x = torch.randn(5)
        got, want = g(x, *args[1:]), f(x, *args[1:])
        assert len(got) == 4
        for a, b in zip(got, want):
            assert a.device == b.device and a.dtype == b.dtype
            torch.testing.assert_close(a, b)
    d = _delta(before)
    assert d.get("host_scalar_graphs") == 1 and d.get("host_scalar_inputs") == 3


def test_an_output_on_the_upload_buffer_is_cloned():
    """A device output that shares the buffer's memory would be rewritten by the next call."""
    gm = torch.fx.symbolic_trace(lambda x, n: (x, n))
    s = hs.Split(gm, gm, [0], [1], [(torch.int64, 1)], [("dev", 0)], tuple)
    s.host_gm = torch.fx.symbolic_trace(lambda x, n: (n.reshape(1),))
    call = hs.HostScalarCall(gm, s, lambda x, buf: (buf[0],), torch.device("cpu"))
    first = call(torch.randn(2), torch.tensor(5))[0]
    call(torch.randn(2), torch.tensor(9))
    assert int(first) == 5


# --- on CUDA -------------------------------------------------------------------------------

@gpu
def test_decode_steps_on_cuda_exact_captured_and_without_syncs():
    pydynamo.reset()
    before = dict(codegen.counters)
    f = pydynamo.optimize(step, backend="codegen", mode="reduce-overhead")
    _run_steps(f, "cuda", steps=6)        # compile, warm up, capture both shapes
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        torch.manual_seed(1)
        cache = torch.randn(16, 4, device="cuda")
        count = torch.tensor(3)
        ref_cache, ref_count = cache.clone(), count.clone()
        outs = []
        for t in range(8):
            x = torch.randn(1 + t % 2, 4, device="cuda")
            outs.append((f(cache, count, x).clone(), x))   # kept past the next replay
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for out, x in outs:
        torch.testing.assert_close(out, step(ref_cache, ref_count, x))
    torch.testing.assert_close(cache, ref_cache)
    assert int(count) == int(ref_count)
    d = _delta(before)
    assert d.get("host_scalar_graphs") == 2 and not d.get("eager_fallback_graphs")
    assert d.get("cudagraph_captures", 0) >= 2 and not d.get("cudagraph_plain_launch")
    pydynamo.reset()


@gpu
def test_static_cache_generate_on_cuda_is_compiled_and_captured():
    """The issue-18 case: transformers' greedy static-cache decode, reduce-overhead: no graph
    runs eagerly (a CPU cumulative_length is a host scalar now), the decode step is captured,
    tokens, logits and every layer's cumulative_length equal eager's on two generate calls."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                      max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval().cuda()
    ids = torch.randint(1, 1000, (1, 6), device="cuda")

    def generate():
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                  min_new_tokens=12, do_sample=False, pad_token_id=0,
                                  cache_implementation="static", disable_compile=True,
                                  return_dict_in_generate=True, output_logits=True)
    ref = generate()
    pydynamo.reset()
    before = dict(codegen.counters)
    model.forward = pydynamo.optimize(model.forward, backend="codegen", mode="reduce-overhead")
    try:
        for _ in range(2):
            out = generate()
            assert torch.equal(out.sequences, ref.sequences)
            for mine, theirs in zip(out.logits, ref.logits):
                torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
            for mine, theirs in zip(out.past_key_values.layers, ref.past_key_values.layers):
                assert int(mine.cumulative_length) == int(theirs.cumulative_length)
    finally:
        del model.forward
        pydynamo.reset()
    d = _delta(before)
    assert not d.get("eager_fallback_graphs"), d
    assert d.get("host_scalar_graphs", 0) >= 1 and d.get("cudagraph_captures", 0) >= 1, d


@gpu
def test_a_cpu_scalar_that_cannot_be_split_runs_eagerly_and_says_why():
    def f(x, count):
        y = x + count
        count.add_(1)                    # not functionalized here: a write of a host value
        return y * count
    gm = torch.fx.symbolic_trace(f)
    x, count, ref = torch.randn(4, device="cuda"), torch.tensor(2), torch.tensor(2)
    with pytest.warns(UserWarning, match="not split off as a host scalar: "):
        call = codegen.compile_fx(gm, [x, count])
    torch.testing.assert_close(call(x, count), f(x, ref))
    assert int(count) == int(ref) == 3
