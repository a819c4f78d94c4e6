"""A/B of codegen/causal_mask.py on the CPU in one process, interleaved rounds: pydynamo with the
pass off (the causal mask transformers builds under a compiler passed to attention) against on
(`is_causal=True` without it), beside torch.compile, for bench_codegen.py's model cases by a word
of their name:

    OMP_NUM_THREADS=2 python benchmarks/causal_mask_ab.py "GPT-2 tiny" 30

Prints the median ms per call of each and the ratios (new/old above 1: the pass is faster).
"""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import benchmarks.bench_codegen as B  # noqa: E402
import codegen.pipeline as P  # noqa: E402
import pydynamo  # noqa: E402


def main():
    word, rounds = sys.argv[1], int(sys.argv[2])
    name, model, kwargs, attr = next(c for c in B.model_cases(False)
                                     if word.lower() in c[0].lower())
    model.eval()
    fns = {}
    with torch.no_grad():
        ref = getattr(model(**kwargs), attr)
        real = P.causal_attention
        try:
            for key, rewrite in (("old", lambda gm: 0), ("new", real)):
                P.causal_attention = rewrite        # (read when the first call compiles)
                m = pydynamo.optimize(copy.deepcopy(model), backend="codegen")
                torch.testing.assert_close(getattr(m(**kwargs), attr), ref, rtol=1e-3, atol=1e-3)
                fns[key] = (lambda m: lambda: getattr(m(**kwargs), attr))(m)
        finally:
            P.causal_attention = real
        ind = torch.compile(copy.deepcopy(model))
        fns["inductor"] = lambda: getattr(ind(**kwargs), attr)
        fns["inductor"]()
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
              f"load {os.getloadavg()[0]:.2f}")
        old, new, ind_s = B.timeit_interleaved(list(fns.values()), [], 20, rounds, warm=3)
        print(f"{name}: pass off {old * 1e3:.3f} ms | on {new * 1e3:.3f} ms | inductor "
              f"{ind_s * 1e3:.3f} ms | new/old {old / new:.3f} new/ind {ind_s / new:.3f} "
              f"old/ind {ind_s / old:.3f} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
