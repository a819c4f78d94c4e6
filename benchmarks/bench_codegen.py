"""Benchmarks: pydynamo codegen vs eager vs torch.compile (inductor), CPU, in one run.

    python benchmarks/bench_codegen.py            # full sizes (run on a quiet machine)
    python benchmarks/bench_codegen.py --smoke    # tiny sizes, checks everything runs
    python benchmarks/bench_codegen.py --cold     # also cold compile times (new processes)
    python benchmarks/bench_codegen.py --only softmax mlp --rounds 30
    python benchmarks/bench_codegen.py --cold-only --cold-graphs gpt2 --cold-backends codegen
    python benchmarks/bench_codegen.py --models-only --rounds 12   # the transformers models only

Each line: median time per call (interleaved rounds) for eager, codegen and inductor, the speedups over eager
(codegen x, inductor x), and codegen's kernel count. Graphs come from torch.fx.symbolic_trace
and are compiled with codegen.compile_fx; inductor gets the same nn.Module via torch.compile.
Models (transformers, random weights, eval, no_grad, `.logits`/`.last_hidden_state`): the tiny
GPT-2 of bench_training.py (2 layers, 128 wide, batch 2, seq 64) and BERT-base-shaped stacks
(hidden 768, 12 heads, seq 128); these go whole through pydynamo.optimize(model,
backend="codegen") against torch.compile(model), the way a user compiles them.
Cold compile: a new Python process with an empty cache directory compiles (a) a 10-op
pointwise graph and (b) the GPT-2 block stack, for codegen and for torch.compile.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class PointwiseChain(nn.Module):
    def forward(self, x, y):
        a = torch.sin(x) * y + 1.5
        b = torch.sigmoid(a) * torch.cos(y) - a / 3
        c = torch.relu(b) + torch.exp(-x.abs())
        d = c * c - torch.tanh(a) + 0.25
        return d * 0.5 + x


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x)


class RowSum(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


class ColSum(nn.Module):
    def forward(self, x):
        return x.sum(dim=0)


class MaskedSoftmax(nn.Module):
    """Attention's scale, causal masked_fill and softmax (a bool mask read by the kernel)."""
    def __init__(self, T):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, att):
        return F.softmax((att * 0.125).masked_fill(self.bias == 0, float("-inf")), dim=-1)


class GeluMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, T):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias == 0, float("-inf"))   # T is fixed per model
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPT2Block(nn.Module):
    def __init__(self, d, n_head, T):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head, T)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2Stack(nn.Module):
    def __init__(self, n_layer=4, d=128, n_head=4, T=64):
        super().__init__()
        self.blocks = nn.Sequential(*[GPT2Block(d, n_head, T) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln_f(self.blocks(x))


def cases(smoke):
    s = 1 if not smoke else 0
    n = 1 << 22 if s else 1 << 10
    return [
        ("pointwise chain (10 ops)", PointwiseChain(), [torch.randn(n), torch.randn(n)]),
        ("softmax", Softmax(), [torch.randn(2048 if s else 8, 1024 if s else 32)]),
        ("layer_norm", LayerNorm(1024 if s else 32), [torch.randn(2048 if s else 8, 1024 if s else 32)]),
        ("row sum", RowSum(), [torch.randn(4096 if s else 8, 1024 if s else 32)]),
        ("column sum", ColSum(), [torch.randn(4096 if s else 8, 1024 if s else 32)]),
        ("column sum, tall-skinny", ColSum(), [torch.randn(100_000 if s else 64, 64 if s else 4)]),
        ("masked softmax (attention)", MaskedSoftmax(64 if s else 8),
         [torch.randn(8 if s else 2, 4 if s else 2, 64 if s else 8, 64 if s else 8)]),
        ("GELU MLP", GeluMLP(512 if s else 16), [torch.randn(256 if s else 4, 512 if s else 16)]),
        ("GPT-2 blocks (4x d128 T64)", GPT2Stack() if s else GPT2Stack(2, 32, 2, 8),
         [torch.randn(8 if s else 2, 64 if s else 8, 128 if s else 32)]),
    ]


def model_cases(smoke):
    """(name, model, kwargs, output attribute): transformers models as a user compiles them."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    out = []
    if smoke:
        g = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16,
                       bos_token_id=0, eos_token_id=0, use_cache=False)
        out.append(("GPT-2 tiny (smoke)", GPT2LMHeadModel(g),
                    dict(input_ids=torch.randint(0, 100, (2, 16))), "logits"))
        b = BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=256,
                       num_hidden_layers=1, vocab_size=100)
        out.append(("BERT (smoke)", BertModel(b, add_pooling_layer=False),
                    dict(input_ids=torch.randint(0, 100, (1, 16))), "last_hidden_state"))
        return out
    g = GPT2Config(n_layer=2, n_embd=128, n_head=2, vocab_size=1000, n_positions=64,
                   bos_token_id=0, eos_token_id=0, use_cache=False)
    out.append(("GPT-2 tiny LM (2x d128, B2 T64)", GPT2LMHeadModel(g),
                dict(input_ids=torch.randint(0, 1000, (2, 64))), "logits"))
    for layers, batch in ((2, 1), (4, 2)):
        b = BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                       num_hidden_layers=layers, max_position_embeddings=512)
        out.append((f"BERT-base {layers} layers (B{batch} T128)",
                    BertModel(b, add_pooling_layer=False),
                    dict(input_ids=torch.randint(0, b.vocab_size, (batch, 128))),
                    "last_hidden_state"))
    return out


def run_models(smoke, rounds=15, only=None):
    import pydynamo
    rows = []
    with torch.no_grad():
        for name, model, kwargs, attr in model_cases(smoke):
            if only and not any(o.lower() in name.lower() for o in only):
                continue
            model.eval()
            ours_m = pydynamo.optimize(model, backend="codegen")
            ind_m = torch.compile(model)

            def runner(m):
                return lambda: getattr(m(**kwargs), attr)
            eager, ours, ind = runner(model), runner(ours_m), runner(ind_m)
            t0 = time.perf_counter()
            ref = eager()
            once = time.perf_counter() - t0
            for f in (ours, ind):
                torch.testing.assert_close(f(), ref, rtol=1e-3, atol=1e-3)
            # about 0.3 s per contender and round (BERT's stacks take 0.1-1 s per call here)
            iters = 3 if smoke else max(2, min(20, int(0.3 / once)))
            te, tc, ti = timeit_interleaved([eager, ours, ind], [], iters, 2 if smoke else rounds,
                                            warm=1 if iters < 5 else 3)
            rows.append(dict(case=name, eager_ms=te * 1e3, codegen_ms=tc * 1e3,
                             inductor_ms=ti * 1e3, codegen_x=te / tc, inductor_x=te / ti,
                             iters=iters))
            _print_row(rows[-1], "")
    return rows


def _print_row(r, kernels):
    print(f"{r['case']:30s} eager {r['eager_ms']:8.3f} ms | codegen {r['codegen_ms']:8.3f} ms "
          f"({r['codegen_x']:5.2f}x{kernels}) | inductor "
          f"{r['inductor_ms']:8.3f} ms ({r['inductor_x']:5.2f}x) | codegen/inductor "
          f"{r['inductor_ms'] / r['codegen_ms']:5.2f}", flush=True)


CLOCK = time.perf_counter


def timeit_interleaved(fns, args, iters, rounds, warm=3):
    """Median seconds per call of each fn. Rounds alternate the contenders, in an order that
    rotates every round, so a drift of the machine hits all of them alike; each block starts
    with `warm` untimed calls, so nobody pays for the heap state the previous contender left
    (e.g. glibc trimming the freed temporaries of eager's ten-op chain, which makes the next
    16 MB output fault in fresh pages)."""
    times = [[] for _ in fns]
    order = list(range(len(fns)))
    for r in range(rounds):
        for i in order[r % len(fns):] + order[:r % len(fns)]:
            fn = fns[i]
            for _ in range(warm):
                fn(*args)
            t0 = CLOCK()
            for _ in range(iters):
                fn(*args)
            times[i].append((CLOCK() - t0) / iters)
    return [statistics.median(t) for t in times]


def run_speed(smoke, rounds=15, only=None):
    import codegen
    rows = []
    with torch.no_grad():
        for name, mod, args in cases(smoke):
            if only and not any(o.lower() in name.lower() for o in only):
                continue
            mod.eval()
            gm = torch.fx.symbolic_trace(mod)
            ours = codegen.compile_fx(gm, args)
            ind = torch.compile(mod)
            ref = mod(*args)
            for f in (ours, ind):
                torch.testing.assert_close(f(*args), ref, rtol=1e-3, atol=1e-3)
            iters = 3 if smoke else 20
            te, tc, ti = timeit_interleaved([mod, ours, ind], args, iters, 2 if smoke else rounds)
            rows.append(dict(case=name, eager_ms=te * 1e3, codegen_ms=tc * 1e3,
                             inductor_ms=ti * 1e3, codegen_x=te / tc, inductor_x=te / ti,
                             kernels=ours.kernel_count, externs=ours.stats.externs))
            _print_row(rows[-1], f", {rows[-1]['kernels']} kernels")
    return rows


COLD_SNIPPET = r"""
import sys, time, os
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import torch, torch.fx
sys.argv = ['x']
import benchmarks.bench_codegen as B
which, backend, smoke = {which!r}, {backend!r}, {smoke!r}
mod = B.PointwiseChain() if which == 'pointwise' else (B.GPT2Stack() if not smoke else B.GPT2Stack(2, 32, 2, 8))
args = [torch.randn(1 << 12), torch.randn(1 << 12)] if which == 'pointwise' else \
    [torch.randn(8 if not smoke else 2, 64 if not smoke else 8, 128 if not smoke else 32)]
mod.eval()
t1 = time.perf_counter()
with torch.no_grad():
    if backend == 'codegen':
        import codegen
        fn = codegen.compile_fx(torch.fx.symbolic_trace(mod), args)
    else:
        fn = torch.compile(mod)
    fn(*args)
t2 = time.perf_counter()
print('COLD', t2 - t1)
"""


def cold(which, backend, smoke):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYDYNAMO_CACHE_DIR=os.path.join(d, "pd"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "ind"), TRITON_CACHE_DIR=os.path.join(d, "tr"))
        code = COLD_SNIPPET.format(root=ROOT, which=which, backend=backend, smoke=smoke)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=900)
        if r.returncode != 0:
            return float("nan"), r.stderr[-500:]
        return float(r.stdout.split("COLD")[-1]), ""


def run_cold(smoke, graphs=("pointwise", "gpt2"), backends=("codegen", "inductor")):
    rows = []
    for which in graphs:
        t = {}
        for backend in backends:
            t[backend], err = cold(which, backend, smoke)
            if err:
                print(f"cold compile {which} {backend} failed: {err}", flush=True)
        rows.append(dict(graph=which, **{f"{b}_s": v for b, v in t.items()}))
        print(f"cold compile {which:10s} " + " | ".join(f"{b} {v:7.2f} s" for b, v in t.items()),
              flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--cold-only", action="store_true", help="skip the speed table")
    ap.add_argument("--models-only", action="store_true", help="only the transformers models")
    ap.add_argument("--no-models", action="store_true", help="skip the transformers models")
    ap.add_argument("--cold-graphs", nargs="*", default=["pointwise", "gpt2"])
    ap.add_argument("--cold-backends", nargs="*", default=["codegen", "inductor"])
    ap.add_argument("--json", default="")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    ap.add_argument("--only", nargs="*", help="cases whose name contains one of these words")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by this thread's CPU time (time.thread_time), not wall time: "
                         "with OMP_NUM_THREADS=1 it leaves out the time other processes take "
                         "the core away (a machine shared by others); needs one thread")
    a = ap.parse_args()
    if a.cpu_time:
        if torch.get_num_threads() != 1 or os.environ.get("OMP_NUM_THREADS") != "1":
            sys.exit("--cpu-time needs OMP_NUM_THREADS=1 (every kernel on this thread)")
        global CLOCK
        CLOCK = time.thread_time
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cpus {os.cpu_count()}, "
          f"clock {'thread CPU time' if a.cpu_time else 'wall'}, load {os.getloadavg()[0]:.2f}")
    out = {}
    if not a.cold_only and not a.models_only:
        out["speed"] = run_speed(a.smoke, a.rounds, a.only)
    if not a.cold_only and not a.no_models:
        out["models"] = run_models(a.smoke, a.rounds, a.only)
    if a.cold or a.cold_only:
        out["cold"] = run_cold(a.smoke, a.cold_graphs, a.cold_backends)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
