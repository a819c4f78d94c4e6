"""Decode loops (issue 18): transformers greedy generation with a static KV cache, one token at
a time, the forward compiled with mode="reduce-overhead".

    python benchmarks/bench_decode.py --out decode.jsonl               # GPU: the acceptance run
    python benchmarks/bench_decode.py --device cpu --smoke --out x     # tiny configs: it runs

Engines: eager (the model's own forward), torch.compile(model.forward, mode="reduce-overhead")
(each forward preceded by torch.compiler.cudagraph_mark_step_begin(), as its docs ask of a
loop that keeps outputs across steps), optionally torch_compile_default (torch.compile(model.forward)
without CUDA graphs: the reference where its reduce-overhead crashes, as it has on the static
cache's CPU `cumulative_length` since session 15) and pydynamo.optimize(model.forward, backend="codegen",
mode="reduce-overhead"). Models from transformers configs with random weights (seeded): a
Llama-architecture model (hidden 1024, 12 layers, vocab 32000, ~215M parameters) and GPT-2
small; dtypes fp32 and bf16; batch 1 and 8; a 16-token random prompt; 128 new tokens
(min_new_tokens = max_new_tokens: random weights may emit EOS early).

Per line: tokens/s (batch x new tokens over the median of --repeats timed generate calls,
prefill included, after two warm-up calls), the ratio to torch.compile's, the first generate
call's wall time (compile and capture included), whether the tokens equal eager's (the first
diverging new-token position otherwise), and for pydynamo the translations, graphs, graph
breaks, recompiles, CUDA-graph captures (in the warm-up and in the timed calls: 0 there means
no re-capture per token or per generate call), plain launches and cache inputs written in place
(codegen/reinplace.py; 2 per layer in the decode graph), graphs compiled, graphs run eagerly
(with the first reasons), graphs split around host scalars (codegen/host_scalars.py: StaticCache's
CPU `cumulative_length`). JSON lines to --out.

Each engine runs in its own process (`--child`): a crash in one (torch.compile's CUDA-graph trees
segfaulted after pydynamo in session 14) costs only its own figures, printed as an error line;
the eager tokens come back to the parent, which compares the others' against them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import codegen  # noqa: E402
import pydynamo  # noqa: E402
from pydynamo import convert_frame  # noqa: E402
from pydynamo.recompiles import RecompileExplanation  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def make_model(name: str, smoke: bool, device: str, dtype):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    if name == "llama":
        cfg = (LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                           max_position_embeddings=256) if smoke else
               LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                           num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                           max_position_embeddings=2048))
        model = LlamaForCausalLM(cfg)
    elif name == "gpt2":
        cfg = (GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=256)
               if smoke else GPT2Config())
        cfg.eos_token_id = cfg.bos_token_id = 0
        model = GPT2LMHeadModel(cfg)
    else:
        raise ValueError(name)
    return model.eval().to(device=device, dtype=dtype)


def generate(model, ids, new):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                              min_new_tokens=new, do_sample=False,
                              cache_implementation="static", disable_compile=True,
                              pad_token_id=0).cpu()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def first_divergence(seq, ref, prompt_len):
    """None when equal, else the first new-token position where any row differs."""
    if seq.shape == ref.shape and torch.equal(seq, ref):
        return None
    n = min(seq.shape[1], ref.shape[1])
    diff = (seq[:, :n] != ref[:, :n]).any(0).nonzero()
    return int(diff[0]) - prompt_len if len(diff) else n - prompt_len


class Counts:
    """pydynamo's translations, graphs, graph breaks and recompiles (as explain() counts)."""

    def __init__(self):
        self.frames = self.graphs = self.breaks = self.recompiles = 0

    def __call__(self, item):
        if isinstance(item, RecompileExplanation):
            self.recompiles += 1
        elif hasattr(item, "graphs"):
            self.frames += 1
            self.graphs += len(item.graphs)
            self.breaks += item.graph_break is not None
        else:
            self.breaks += 1


def engine_forward(engine, forward):
    if engine == "eager":
        return forward
    if engine == "pydynamo":
        return pydynamo.optimize(forward, backend="codegen", mode="reduce-overhead")
    if engine == "torch_compile_default":     # no CUDA graphs: the reference where its
        return torch.compile(forward)          # reduce-overhead crashes on this model
    compiled = torch.compile(forward, mode="reduce-overhead")

    def step(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)
    return step


EAGER_WARNING = "pydynamo codegen: running this graph eagerly: "
COUNTERS = ("cudagraph_captures", "cudagraph_plain_launch", "reinplaced_inputs",
            "graphs_compiled", "eager_fallback_graphs", "host_scalar_graphs")


def run_engine(engine, model, ids, new, repeats, device, row):
    forward = model.forward
    counts = Counts()
    if engine == "pydynamo":
        pydynamo.reset()
        convert_frame.RECORDERS.append(counts)
    c0 = {k: codegen.counters[k] for k in COUNTERS}
    try:
        model.forward = engine_forward(engine, forward)
        sync(device)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = generate(model, ids, new)
        sync(device)
        row[f"{engine}_first_generate_s"] = round(time.perf_counter() - t0, 3)
        generate(model, ids, new)
        captures1 = codegen.counters["cudagraph_captures"]
        times = []
        for _ in range(repeats):
            sync(device)
            t0 = time.perf_counter()
            out = generate(model, ids, new)
            sync(device)
            times.append(time.perf_counter() - t0)
        row[f"{engine}_tok_s"] = round(ids.shape[0] * new / statistics.median(times), 1)
        if engine == "pydynamo":
            d = {k: codegen.counters[k] - c0[k] for k in COUNTERS}
            reasons = []
            for w in caught:
                m = str(w.message)
                if m.startswith(EAGER_WARNING) and m[len(EAGER_WARNING):] not in reasons:
                    reasons.append(m[len(EAGER_WARNING):][:200])
            row["pydynamo_counts"] = dict(
                frames=counts.frames, graphs=counts.graphs, breaks=counts.breaks,
                recompiles=counts.recompiles, graphs_compiled=d["graphs_compiled"],
                graphs_eager=d["eager_fallback_graphs"], eager_reasons=reasons[:4],
                host_scalar_graphs=d["host_scalar_graphs"],
                captures_warmup=captures1 - c0["cudagraph_captures"],
                captures_timed=codegen.counters["cudagraph_captures"] - captures1,
                plain_launch_graphs=d["cudagraph_plain_launch"],
                cache_inputs_written_in_place=d["reinplaced_inputs"])
        elif engine.startswith("torch_compile"):
            from torch._dynamo.utils import counters
            row[f"{engine}_counts"] = dict(
                frames=counters["frames"]["ok"], graphs=counters["stats"]["unique_graphs"],
                breaks=sum(counters["graph_break"].values()),
                cudagraph_skips=counters["inductor"]["cudagraph_skips"])
        return out
    except Exception as e:   # report, keep going
        row[f"{engine}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return None
    finally:
        model.forward = forward
        if engine == "pydynamo":
            convert_frame.RECORDERS.remove(counts)
            pydynamo.reset()
        elif engine.startswith("torch_compile"):
            torch._dynamo.reset()


def child(a):
    """One engine on one (model, dtype, batch): its row fields and tokens, as one RESULT line."""
    model = make_model(a.models, a.smoke, a.device, DTYPES[a.dtypes])
    torch.manual_seed(int(a.batches))
    ids = torch.randint(1, model.config.vocab_size, (int(a.batches), a.prompt_len),
                        device=a.device)
    row = {"params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1)}
    out = run_engine(a.child, model, ids, a.new_tokens, a.repeats, a.device, row)
    row["tokens"] = out.tolist() if out is not None else None
    print("RESULT " + json.dumps(row), flush=True)


def run_child(engine, name, dt, batch, a, new):
    """The engine's row fields and tokens from its own process, or an error for a crash."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", engine, "--models", name,
           "--dtypes", dt, "--batches", str(batch), "--device", a.device, "--new-tokens",
           str(new), "--prompt-len", str(a.prompt_len), "--repeats", str(a.repeats)]
    cmd += ["--smoke"] if a.smoke else []
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {f"{engine}_error": f"timed out after {a.timeout} s"}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = [ln for ln in r.stderr.splitlines() if ln.strip() and "Warning" not in ln][-3:]
    what = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
    return {f"{engine}_error": f"process crashed ({what}): {' | '.join(tail)[-400:]}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny configs, few tokens")
    ap.add_argument("--models", default="llama,gpt2")
    ap.add_argument("--dtypes", default=None, help="default fp32,bf16 (cpu: fp32)")
    ap.add_argument("--batches", default=None, help="default 1,8 (smoke: 1,2)")
    ap.add_argument("--engines", default="eager,pydynamo,torch_compile")
    ap.add_argument("--new-tokens", type=int, default=None, help="default 128 (smoke: 8)")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per engine process")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)   # one engine, one config
    a = ap.parse_args()
    if a.child:
        return child(a)
    dtypes = (a.dtypes or ("fp32" if a.device == "cpu" else "fp32,bf16")).split(",")
    batches = [int(b) for b in (a.batches or ("1,2" if a.smoke else "1,8")).split(",")]
    new = a.new_tokens or (8 if a.smoke else 128)
    engines = a.engines.split(",")
    print(f"torch {torch.__version__}, device {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device == "cuda" else ""), flush=True)
    for name in a.models.split(","):
        for dt in dtypes:
            for batch in batches:
                row = dict(bench="decode", model=name, dtype=dt, batch=batch,
                           prompt=a.prompt_len, new_tokens=new,
                           device=torch.cuda.get_device_name() if a.device == "cuda"
                           else "cpu")
                ref = None
                for engine in engines:
                    got = run_child(engine, name, dt, batch, a, new)
                    tokens = got.pop("tokens", None)
                    row.update(got)
                    if f"{engine}_error" in got:
                        print(f"  {engine} FAILED: {got[f'{engine}_error']}", flush=True)
                    else:
                        print("  (so far) " + json.dumps(row), flush=True)
                    out = torch.tensor(tokens) if tokens is not None else None
                    if engine == "eager":
                        ref = out
                    elif out is not None and ref is not None:
                        row[f"{engine}_first_divergence"] = first_divergence(out, ref,
                                                                            a.prompt_len)
                for ref_engine in ("torch_compile", "torch_compile_default"):
                    tc = row.get(f"{ref_engine}_tok_s")
                    for engine in ("eager", "pydynamo"):
                        if tc and row.get(f"{engine}_tok_s"):
                            row[f"{engine}_vs_{ref_engine}"] = round(
                                row[f"{engine}_tok_s"] / tc, 3)
                c = row.get("pydynamo_counts")
                if c:
                    print(f"  pydynamo graphs: {c['graphs_compiled']} compiled, "
                          f"{c['graphs_eager']} eager {c['eager_reasons']}, "
                          f"{c['host_scalar_graphs']} split around host scalars; CUDA-graph "
                          f"captures {c['captures_warmup']} (warm-up) + {c['captures_timed']} "
                          f"(timed), {c['plain_launch_graphs']} launching plainly", flush=True)
                print(json.dumps(row), flush=True)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
