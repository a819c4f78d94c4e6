"""Benchmark: one training step (forward, loss, backward, optimizer step), side by side: eager,
pydynamo (backend "codegen", and "aot_eager" as a column) and torch.compile (default inductor).

    python benchmarks/bench_training.py --model gpt2-tiny                     # CPU, fp32
    python benchmarks/bench_training.py --model gpt2-tiny --dtype bf16-autocast
    python benchmarks/bench_training.py --model gpt2-small --dtype bf16-autocast  # CUDA
    python benchmarks/bench_training.py --model gpt2-tiny --engines eager codegen --rounds 2

Models (transformers GPT2LMHeadModel, random weights, loss = the model's own LM loss on
labels=input_ids): gpt2-tiny is n_layer=2, n_embd=128, n_head=2, vocab 1000, batch 2, seq 64 (CPU
by default); gpt2-small is GPT2Config() (124M), batch 8, seq 256 (CUDA by default). Dropout is 0
unless --dropout says otherwise, so every engine computes the same losses (checked: the first and
last step's loss against eager's). use_cache stays the config's default (True: the forward builds
a key/value cache, as a training loop that does not turn it off does) unless --no-cache. Each engine gets its own copy of the same initial weights and
its own AdamW; the model is compiled, the optimizer step runs eagerly in every column. Under
--dtype bf16-autocast the forward and the loss run in `torch.autocast(device, torch.bfloat16)`.

Per engine: the first step's forward+backward wall time (it includes compiling the forward and
the backward; caches start empty unless --warm-cache), then the median step time over interleaved
rounds (each round times --steps steps of every engine, in an order that rotates per round), and
on CUDA the peak memory of one step above what was resident before it (parameters, optimizer
state and the other engines' copies excluded: torch.cuda.max_memory_allocated minus
memory_allocated at the step's start). pydynamo columns print pydynamo.aot.counters (joint graphs,
backward graphs compiled, backward calls, eager fallbacks) and codegen's counters for the engine:
a graph that ran its backward eagerly shows there ("no silent eager").
"""
import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _fresh_caches():
    """Empty compile caches for this process, set before torch reads them: the first step then
    pays the whole compile, for pydynamo and torch.compile alike."""
    d = tempfile.mkdtemp(prefix="bench_training_")
    for var, sub in (("PYDYNAMO_CACHE_DIR", "pd"), ("TORCHINDUCTOR_CACHE_DIR", "ind"),
                     ("TRITON_CACHE_DIR", "tr")):
        os.environ[var] = os.path.join(d, sub)
    return d


if "--warm-cache" not in sys.argv:
    CACHE_DIR = _fresh_caches()

import torch  # noqa: E402

MODELS = {
    # name: (GPT2Config overrides, batch, seq, default device)
    "gpt2-tiny": (dict(n_layer=2, n_embd=128, n_head=2, vocab_size=1000, n_positions=64,
                       bos_token_id=0, eos_token_id=0), 2, 64, "cpu"),
    "gpt2-small": ({}, 8, 256, "cuda"),
}
ENGINES = ("eager", "codegen", "aot_eager", "torch.compile")
CLOCK = time.perf_counter      # --cpu-time: time.thread_time


def build(name, device, dropout, use_cache=True):
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        sys.exit("bench_training needs transformers (GPT2Config, GPT2LMHeadModel)")
    over, batch, seq, _ = MODELS[name]
    cfg = GPT2Config(**over, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                     use_cache=use_cache)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).to(device).train()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    return model, ids, cfg


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def wrap(engine, model):
    if engine == "eager":
        return model
    if engine == "torch.compile":
        return torch.compile(model)
    import pydynamo
    return pydynamo.optimize(model, backend=engine)


def aot_counters():
    try:
        import pydynamo.aot as aot
    except ImportError:        # the training path is not there: say so instead of a zero
        return None
    return dict(aot.counters)


def codegen_counters():
    import codegen
    keep = ("graphs_compiled", "kernels", "eager_fallback_graphs", "eager_grad_calls")
    return {k: v for k, v in codegen.counters.items() if k in keep}


def delta(after, before):
    if after is None:
        return "pydynamo.aot absent"
    return {k: v - (before or {}).get(k, 0) for k, v in after.items() if v != (before or {}).get(k, 0)}


class Engine:
    def __init__(self, name, base, ids, device, autocast):
        self.name, self.ids, self.device, self.autocast = name, ids, device, autocast
        self.model = copy.deepcopy(base)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.fn = wrap(name, self.model)
        self.losses, self.times, self.error = [], [], None

    def fwd_bwd(self):
        with torch.autocast(self.device, torch.bfloat16, enabled=self.autocast):
            loss = self.fn(input_ids=self.ids, labels=self.ids).loss
        loss.backward()
        return loss

    def step(self):
        loss = self.fwd_bwd()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.losses.append(loss.detach())

    def first(self):
        """The first step; its forward+backward time includes compiling both."""
        sync(self.device)
        t0 = time.perf_counter()
        loss = self.fwd_bwd()
        sync(self.device)
        self.first_s = time.perf_counter() - t0
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.losses.append(loss.detach())

    def timed(self, steps):
        sync(self.device)
        t0 = CLOCK()
        for _ in range(steps):
            self.step()
        sync(self.device)
        self.times.append((CLOCK() - t0) / steps)

    def peak_mib(self):
        if self.device != "cuda":
            return None
        sync(self.device)
        torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated()
        self.step()
        sync(self.device)
        return (torch.cuda.max_memory_allocated() - resident) / 2**20


def run(a):
    device = a.device or MODELS[a.model][3]
    base, ids, cfg = build(a.model, device, a.dropout, not a.no_cache)
    autocast = a.dtype == "bf16-autocast"
    nparams = sum(p.numel() for p in base.parameters())
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, device "
          f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, threads "
          f"{torch.get_num_threads()}; {a.model} ({nparams / 1e6:.1f}M params, n_layer "
          f"{cfg.n_layer}, n_embd {cfg.n_embd}), batch {ids.shape[0]}, seq {ids.shape[1]}, "
          f"{a.dtype}, dropout {a.dropout}, use_cache {cfg.use_cache}, AdamW (eager); caches "
          f"{'warm' if a.warm_cache else 'empty at start'}", flush=True)
    engines, rows = [], {}
    for name in a.engines:
        before = (aot_counters(), codegen_counters())
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                e = Engine(name, base, ids, device, autocast)
                e.first()
                for _ in range(a.warmup):
                    e.step()
            engines.append(e)
        except Exception as ex:     # report, keep going
            rows[name] = dict(error=f"{type(ex).__name__}: {str(ex)[:300]}")
            print(f"{name}: {rows[name]['error']}", flush=True)
            continue
        # graph breaks and eager fallbacks, once each, first line: what the engine did not compile
        e.warned = sorted({str(w.message).split("\n")[0][:300] for w in caught
                           if "pydynamo" in str(w.message) or "inductor" in str(w.message)})
        if name in ("codegen", "aot_eager"):
            e.counters = (aot_counters(), codegen_counters(), before)
    for r in range(a.rounds):
        for e in engines[r % len(engines):] + engines[:r % len(engines)]:
            e.timed(a.steps)
    for e in engines:
        e.peak = e.peak_mib()
    ref = next((e for e in engines if e.name == "eager"), None)
    for e in engines:
        row = rows[e.name] = dict(step_ms=statistics.median(e.times) * 1e3,
                                  first_fwd_bwd_s=e.first_s, peak_step_mib=e.peak)
        if ref is not None:
            l0, l1 = e.losses[0].float().item(), e.losses[-1].float().item()
            row["loss_first_diff"] = abs(l0 - ref.losses[0].float().item())
            row["loss_last_diff"] = abs(l1 - ref.losses[-1].float().item())
        if hasattr(e, "counters"):
            aot_after, cg_after, (aot_before, cg_before) = e.counters
            row["aot_counters"] = delta(aot_after, aot_before)
            row["codegen_counters"] = delta(cg_after, cg_before)
            row["warnings"] = e.warned
    report(rows, engines)
    return dict(model=a.model, device=device, dtype=a.dtype, batch=ids.shape[0], seq=ids.shape[1],
                torch=torch.__version__, rows=rows)


def report(rows, engines):
    t = {e.name: rows[e.name]["step_ms"] for e in engines}
    eager, tc = t.get("eager"), t.get("torch.compile")
    print(f"\n{'engine':14s} {'step ms':>9s} {'eager/x':>8s} {'tc/x':>6s} {'1st fwd+bwd s':>14s} "
          f"{'peak MiB':>9s} {'dloss 1st':>10s} {'dloss last':>10s}")
    for e in engines:
        r = rows[e.name]
        peak = f"{r['peak_step_mib']:9.1f}" if r["peak_step_mib"] is not None else f"{'-':>9s}"
        print(f"{e.name:14s} {r['step_ms']:9.2f} "
              f"{(eager / r['step_ms']) if eager else float('nan'):8.2f} "
              f"{(tc / r['step_ms']) if tc else float('nan'):6.2f} {r['first_fwd_bwd_s']:14.2f} "
              f"{peak} {r.get('loss_first_diff', float('nan')):10.2e} "
              f"{r.get('loss_last_diff', float('nan')):10.2e}")
    for e in engines:
        if "aot_counters" in rows[e.name]:
            print(f"{e.name}: pydynamo.aot.counters {rows[e.name]['aot_counters']}; codegen "
                  f"{rows[e.name]['codegen_counters']}")
            for w in rows[e.name]["warnings"]:
                print(f"    {w}")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name}: FAILED {r['error']}")
    print("(eager/x: eager's step time over the engine's, >1 is faster than eager; tc/x: the "
          "same against torch.compile)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-tiny", choices=sorted(MODELS))
    ap.add_argument("--device", choices=["cpu", "cuda"], help="default: the model's")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16-autocast"])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per engine per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    ap.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--no-cache", action="store_true",
                    help="GPT2Config(use_cache=False): no key/value cache built in the forward")
    ap.add_argument("--warm-cache", action="store_true", help="keep the usual compile caches")
    ap.add_argument("--json", default="", help="append the run as one JSON line")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time steps by this thread's CPU time, not wall time (CPU only, with "
                         "OMP_NUM_THREADS=1: every kernel on this thread), so that other "
                         "processes on a shared machine do not count")
    a = ap.parse_args()
    if a.cpu_time:
        if os.environ.get("OMP_NUM_THREADS") != "1" or (a.device or MODELS[a.model][3]) != "cpu":
            sys.exit("--cpu-time needs OMP_NUM_THREADS=1 and the CPU")
        global CLOCK
        CLOCK = time.thread_time
    print(f"step clock: {'thread CPU time' if a.cpu_time else 'wall'}, load "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    out = run(a)
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(out, default=str) + "\n")


if __name__ == "__main__":
    main()
