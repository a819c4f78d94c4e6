"""A model's first compile split into its phases (pydynamo/phases.py's clock: tracing, graph
passes, codegen, C++/Triton compile, loading), from the records convert_frame hands observers.

    PYDYNAMO_CACHE_DIR=<fresh dir> python benchmarks/compile_phases.py [n_layer]

GPT-2 (transformers GPT2Model, GPT2Config(n_layer=n_layer), eager attention, random weights),
CPU, inference under no_grad, ids 1 x 32, backend codegen; the first call's wall time and the
phases summed over the compiled frames. Use a fresh cache dir: a warm kernel cache skips g++.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402


def main():
    import transformers
    import pydynamo
    from pydynamo import convert_frame
    n_layer = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    cfg = transformers.GPT2Config(n_layer=n_layer)
    cfg._attn_implementation = "eager"
    m = transformers.GPT2Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 32))
    records = []
    convert_frame.RECORDERS.append(records.append)
    t0 = time.perf_counter()
    with torch.no_grad():
        pydynamo.optimize(m)(ids)
    t1 = time.perf_counter()
    total = {}
    for r in records:
        if hasattr(r, "times"):
            for k, v in r.times.seconds.items():
                total[k] = total.get(k, 0) + v
    graphs = [g for r in records if hasattr(r, "graphs") for g in r.graphs]
    print(f"GPT-2 n_layer={n_layer}: first call {t1 - t0:.2f} s; "
          f"{sum(hasattr(r, 'times') for r in records)} frames, {len(graphs)} graphs, "
          f"{sum(g.op_count for g in graphs)} ops")
    print("  " + ", ".join(f"{k} {v:.2f} s" for k, v in total.items()))


if __name__ == "__main__":
    main()
