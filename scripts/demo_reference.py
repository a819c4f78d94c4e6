"""torch.compile's side of the demo's timings and graph-break counts, in its own process
(python -m pydynamo.demo runs it; product code never calls torch.compile). Loads the demo
model from its file without importing pydynamo, so no pydynamo frame hook is present. Prints
one JSON line."""
import argparse
import importlib.util
import json
import os
import sys

import torch

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pydynamo", "demo")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"demo_{name}", os.path.join(DEMO, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


model_mod, interleaved_us = _load("model"), _load("timing").interleaved_us


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--inductor", action="store_true")
    a = ap.parse_args()
    cfg = model_mod.DemoConfig()
    m = model_mod.build_model(cfg)
    x = model_mod.example_inputs(cfg, a.batch, a.seq, seed=30)
    backends = ["eager"] + (["inductor"] if a.inductor else [])
    out, eager, ok = {}, {}, True
    for be in backends:
        torch._dynamo.reset()
        c = torch.compile(m, backend=be)
        with torch.no_grad():
            ok = ok and torch.allclose(c(x), m(x), rtol=1e-4, atol=1e-5)
        # interleaved with eager in this process: the demo compares each row with its own eager
        name = f"torch.compile backend={be}"
        t = interleaved_us({"eager": m, name: c}, x, a.iters)
        out[name], eager[name] = t[name].as_dict(), t["eager"].as_dict()
    # graph and break counts of the demo's graph-break function, torch.compile's own numbers
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    f = torch.compile(model_mod.next_token_probs, backend=counting)
    with torch.no_grad():
        ok = ok and torch.allclose(f(m, x), model_mod.next_token_probs(m, x), rtol=1e-4, atol=1e-5)
    ops = [sum(1 for n in g.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
           for g in graphs]
    print(json.dumps({"timings_us": out, "eager_us": eager, "matches_eager": bool(ok),
                      "breaks": {"graph_count": len(graphs), "ops_per_graph": ops}}))


if __name__ == "__main__":
    main()
