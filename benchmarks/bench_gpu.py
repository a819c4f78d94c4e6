"""GPU acceptance benchmarks for the Triton path (issue 8), one script, one process per part.

    python benchmarks/bench_gpu.py --part kernels   # bandwidth: pointwise, softmax, layer_norm
    python benchmarks/bench_gpu.py --part tiny      # launch-bound 64x64 graphs, CUDA graphs
    python benchmarks/bench_gpu.py --part gpt2 [--model gpt2|gpt2-lmhead|llama] [--dtype ...]
                                                    # LM inference, default and reduce-overhead
        [--also-cudagraph-outputs copy]             # + reduce-overhead copying every output
    python benchmarks/bench_gpu.py --smoke ...      # small sizes: checks that everything runs

Every line prints pydynamo codegen and torch.compile on the same line. Bandwidth lines count
the fewest bytes the op must move (each input read once, each output written once) over the
median kernel time (triton.testing.do_bench), as a fraction of the device-to-device copy
bandwidth measured in the same run (bytes read + written). Launch-bound lines are wall-clock
microseconds per call (host loop, synchronized), which is what a user of a tiny graph waits.
Results append to --out as JSON lines. The timed loops drop each call's result before the
next call, so pydynamo's reduce-overhead hands out the graph's memory without copying it (as
torch.compile's does); the result read for the error check is taken before the timing (its
counters line shows cudagraph_output_copies / _outputs_invalidated).
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import codegen  # noqa: E402

RESULTS = []


def record(**kw):
    RESULTS.append(kw)
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in kw.items()),
          flush=True)


def gpu_ms(fn, *args):
    from triton.testing import do_bench
    return do_bench(lambda: fn(*args), warmup=50, rep=300, return_mode="median")


def wall_us(fn, *args, n=2000):
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            fn(*args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / (n // 5) * 1e6)
    return statistics.median(times)


def ours(mod, args, **opts):
    gm = torch.fx.symbolic_trace(mod)
    return codegen.compile_fx(gm, list(args), **opts)


class Pointwise(nn.Module):
    def forward(self, x, y):
        a = x * torch.sigmoid(y) + 0.5
        return torch.relu(a) * y - a * 0.25


class TransposeAdd(nn.Module):
    def forward(self, x, y):
        return x.t() * 2 + y


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)


class LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x)


class Tiny(nn.Module):
    """8 ops on 64x64: a launch-bound graph."""

    def forward(self, x, y):
        a = torch.sin(x) * y + 1.0
        b = torch.softmax(a, -1)
        c = F.gelu(b - a.mean(-1, keepdim=True))
        return c * x + torch.tanh(y)


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(64, 64), nn.Linear(64, 64)
        self.ln = nn.LayerNorm(64)

    def forward(self, x):
        return self.ln(self.l2(F.gelu(self.l1(x))) + x)


def part_kernels(smoke):
    n = (1 << 16) if smoke else (1 << 26)          # 64M fp32 elements, 256 MiB per tensor
    rows = 256 if smoke else 8192
    x = torch.randn(n, device="cuda")
    dst = torch.empty_like(x)
    copy_ms = gpu_ms(dst.copy_, x)
    copy_bw = 2 * n * 4 / copy_ms / 1e6            # GB/s, read + write
    record(part="kernels", case="d2d_copy", elems=n, ms=copy_ms, GBps=copy_bw)
    cases = [
        ("pointwise_64M", Pointwise(), (torch.randn(n, device="cuda"),
                                        torch.randn(n, device="cuda")), 3 * n * 4),
        ("transpose_add_4096x8192", TransposeAdd(),
         (torch.randn(8192 if not smoke else 256, 4096 if not smoke else 128, device="cuda"),
          torch.randn(4096 if not smoke else 128, 8192 if not smoke else 256, device="cuda")),
         3 * (8192 * 4096 if not smoke else 256 * 128) * 4),
        ("softmax_8192x8192", Softmax(), (torch.randn(rows, rows, device="cuda"),),
         2 * rows * rows * 4),
        ("layer_norm_8192x8192", LayerNorm(rows).cuda(), (torch.randn(rows, rows,
                                                                      device="cuda"),),
         2 * rows * rows * 4),
    ]
    with torch.no_grad():
        for name, mod, args, nbytes in cases:
            c = ours(mod, args)
            torch.testing.assert_close(c(*args), mod(*args), rtol=1e-4, atol=1e-4)
            ms = gpu_ms(c, *args)
            tc = torch.compile(mod)
            tc(*args)
            tms = gpu_ms(tc, *args)
            ems = gpu_ms(mod, *args)
            ca = ours(mod, args, mode="max-autotune")
            ca(*args)
            ams = gpu_ms(ca, *args)
            bw, tbw = nbytes / ms / 1e6, nbytes / tms / 1e6
            record(part="kernels", case=name, kernels=c.kernel_count, ours_ms=ms,
                   ours_frac_of_copy=bw / copy_bw, torch_compile_ms=tms,
                   torch_compile_frac_of_copy=tbw / copy_bw, eager_ms=ems,
                   ours_autotune_frac_of_copy=nbytes / ams / 1e6 / copy_bw)


def part_tiny(smoke):
    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    n = 200 if smoke else 2000
    with torch.no_grad():
        for name, mod, args in [("tiny_8ops_64x64", Tiny(), (x, y)),
                                ("tiny_mlp_ln_64x64", TinyMLP().cuda(), (x,))]:
            plain = ours(mod, args)
            cg = ours(mod, args, cudagraphs=True)
            torch.testing.assert_close(cg(*args), mod(*args), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(cg(*args), mod(*args), rtol=1e-4, atol=1e-4)
            row = dict(part="tiny", case=name, kernels=plain.kernel_count,
                       eager_us=wall_us(mod, *args, n=n),
                       ours_plain_us=wall_us(plain, *args, n=n),
                       ours_cudagraphs_us=wall_us(cg, *args, n=n))
            tc = torch.compile(mod, mode="reduce-overhead")
            for _ in range(3):
                tc(*args)
            row["torch_compile_reduce_overhead_us"] = wall_us(tc, *args, n=n)
            td = torch.compile(mod)
            td(*args)
            row["torch_compile_default_us"] = wall_us(td, *args, n=n)
            record(**row)


def lm_model(name, smoke, device, dtype):
    """A transformers causal LM with random weights, and the input ids of one benchmark batch.
    gpt2: GPT2Model (hidden states, no LM head; earlier runs' line); gpt2-lmhead:
    GPT2LMHeadModel (.logits, vocabulary 50257: the unaligned LM-head GEMM); llama: a
    Llama-architecture model of ~134M parameters (hidden 768, 12 layers, 12 heads, MLP 2048,
    vocabulary 32000, tied embeddings off); bert-mlm: BertForMaskedLM, BERT-base (.logits,
    vocabulary 30522 with the decoder's bias: an unaligned LM head with a bias)."""
    import transformers as T
    layers = 2 if smoke else 12
    if name in ("gpt2", "gpt2-lmhead"):
        cfg = T.GPT2Config(n_layer=layers, n_embd=128 if smoke else 768, n_head=4 if smoke else 12)
        cls = T.GPT2Model if name == "gpt2" else T.GPT2LMHeadModel
    elif name == "bert-mlm":
        cfg = T.BertConfig(num_hidden_layers=layers, hidden_size=128 if smoke else 768,
                           num_attention_heads=4 if smoke else 12,
                           intermediate_size=512 if smoke else 3072)
        cls = T.BertForMaskedLM
    else:
        cfg = T.LlamaConfig(hidden_size=128 if smoke else 768, num_hidden_layers=layers,
                            num_attention_heads=4 if smoke else 12,
                            num_key_value_heads=4 if smoke else 12,
                            intermediate_size=256 if smoke else 2048, vocab_size=32000,
                            max_position_embeddings=1024, tie_word_embeddings=False)
        cls = T.LlamaForCausalLM
    torch.manual_seed(0)
    model = cls(cfg).to(device).eval().to(dtype)
    batch, seq = (2, 64) if smoke else (8, 256)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    return model, ids


def part_gpt2(smoke, dtype=torch.float32, model_name="gpt2", device="cuda", also_outputs=()):
    import pydynamo
    model, ids = lm_model(model_name, smoke, device, dtype)
    field = "last_hidden_state" if model_name == "gpt2" else "logits"

    kw = {} if model_name == "bert-mlm" else {"use_cache": False}

    def run(m):
        return getattr(m(input_ids=ids, **kw), field)

    timer = gpu_ms if device == "cuda" else cpu_ms
    with torch.no_grad():
        ref = run(model)
        row = dict(part="gpt2", model=model_name, dtype=str(dtype).replace("torch.", ""),
                   batch=ids.shape[0], seq=ids.shape[1], params_m=sum(
                       p.numel() for p in model.parameters()) / 1e6,
                   eager_ms=timer(run, model))
        if device == "cuda":
            row["eager_wall_ms"] = wall_us(run, model, n=100) / 1e3
        engines = [
            ("ours_default", lambda: pydynamo.optimize(model, backend="codegen")),
            ("ours_reduce_overhead", lambda: pydynamo.optimize(model, backend="codegen",
                                                               mode="reduce-overhead")),
        ] + [
            (f"ours_reduce_overhead_{pol}",
             lambda pol=pol: pydynamo.optimize(model, backend="codegen", mode="reduce-overhead",
                                               options={"cudagraph_outputs": pol}))
            for pol in also_outputs
        ] + [
            ("torch_compile_default", lambda: torch.compile(model)),
            ("torch_compile_reduce_overhead",
             lambda: torch.compile(model, mode="reduce-overhead")),
        ]
        for name, make in engines:
            try:
                t0 = time.perf_counter()
                m = make()
                out = run(m)
                for _ in range(2):
                    out = run(m)
                if device == "cuda":
                    torch.cuda.synchronize()
                row[name + "_compile_s"] = time.perf_counter() - t0
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                row[name + "_relerr"] = err
                row[name + "_ms"] = timer(run, m)
                if device == "cuda":
                    # synchronized host loop: what a caller waits when the host is the bottleneck
                    row[name + "_wall_ms"] = wall_us(run, m, n=100) / 1e3
            except Exception as e:  # report, keep going
                row[name + "_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if name.startswith("ours"):
                row[name + "_counters"] = {k: v for k, v in codegen.counters.items()
                                           if "cudagraph" in k or "fallback" in k
                                           or k.startswith("kernels")}
                pydynamo.reset()
            torch._dynamo.reset()
        for mode in ("default", "reduce_overhead"):
            a, b = row.get(f"ours_{mode}_ms"), row.get(f"torch_compile_{mode}_ms")
            if a and b:
                row[f"speed_vs_tc_{mode}"] = b / a       # above 1: pydynamo faster
        record(**row)


def cpu_ms(fn, *args, n=5):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", action="append", choices=["kernels", "tiny", "gpt2"])
    ap.add_argument("--model", default="gpt2",
                    choices=["gpt2", "gpt2-lmhead", "llama", "bert-mlm"],
                    help="the gpt2 part's model (gpt2: GPT2Model's hidden states)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: only with --smoke, to check the gpt2 part runs without a GPU")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--also-cudagraph-outputs", action="append", default=[],
                    choices=["copy", "copy_held"],
                    help="the gpt2 part: also time reduce-overhead with this output policy "
                         "(codegen/options.py cudagraph_outputs; copy: every output copied)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="GPT-2's parameter dtype (the gpt2 part)")
    # Raw rows go to a scratch file; benchmarks/results/GPU.md keeps the current figures.
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "gpu.jsonl"))
    a = ap.parse_args()
    record(part="env", device=torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
           torch=torch.__version__,
           triton=__import__("triton").__version__, python=sys.version.split()[0])
    for p in a.part or ["kernels", "tiny", "gpt2"]:
        try:
            if p == "gpt2":
                part_gpt2(a.smoke, getattr(torch, a.dtype), a.model, a.device,
                          a.also_cudagraph_outputs)
            else:
                {"kernels": part_kernels, "tiny": part_tiny}[p](a.smoke)
        except Exception as e:
            record(part=p, error=f"{type(e).__name__}: {str(e)[:500]}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "a") as f:
        for r in RESULTS:
            f.write(json.dumps(r, default=str) + "\n")


if __name__ == "__main__":
    main()
