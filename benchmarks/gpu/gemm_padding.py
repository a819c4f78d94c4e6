"""Is a GEMM with a size that breaks 16-byte alignment faster with its operands padded?

    python benchmarks/gpu/gemm_padding.py

For the three GEMMs of a language-model head (GPT-2: tokens x hidden x vocabulary 50257) and a
few other sizes, the time of torch.mm on the unaligned operands against the same product on
operands padded to an aligned size (the pad copies included, and the result sliced back), per
16-bit dtype and in float32. codegen/decompositions.py's padding rule is stated from these.
"""
import torch
import torch.nn.functional as F
from triton.testing import do_bench


def pad_to(n, m):
    return -(-n // m) * m


def case(name, a_shape, b_shape, a_t, b_t, dtype, pad_dim):
    torch.manual_seed(0)
    a = torch.randn(*a_shape, device="cuda", dtype=dtype)
    b = torch.randn(*b_shape, device="cuda", dtype=dtype)
    A = a.t() if a_t else a
    B = b.t() if b_t else b

    def plain():
        return A @ B
    m = 8 if dtype.itemsize == 2 else 4

    def padded():
        # pad the misaligned size where it sits in the stored tensors
        pa = F.pad(a, pad_dim(a_shape, "a", m)) if pad_dim(a_shape, "a", m) else a
        pb = F.pad(b, pad_dim(b_shape, "b", m)) if pad_dim(b_shape, "b", m) else b
        out = (pa.t() if a_t else pa) @ (pb.t() if b_t else pb)
        return out[: A.shape[0], : B.shape[1]]
    ref = plain()
    got = padded()
    err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    t0 = do_bench(plain, warmup=20, rep=200, return_mode="median")
    t1 = do_bench(padded, warmup=20, rep=200, return_mode="median")
    print(f"{name:34s} {str(dtype)[6:]:9s} plain {t0 * 1e3:8.1f} us  padded {t1 * 1e3:8.1f} us  "
          f"ratio {t0 / t1:5.2f}  rel.err {err:.1e}", flush=True)


def main():
    V, H, T = 50257, 768, 2048
    print(torch.cuda.get_device_name(), torch.__version__)

    def last(n):       # pad the last dim of a 2-D tensor whose last dim is n
        return lambda shape, which, m: (0, pad_to(shape[1], m) - shape[1]) if shape[1] == n else None

    def first(n):
        return lambda shape, which, m: (0, 0, 0, pad_to(shape[0], m) - shape[0]) if shape[0] == n else None
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        # forward logits: h (T x H) @ W^T, W (V x H): output columns V
        case("fwd  h @ W.t()  (out ld=V)", (T, H), (V, H), False, True, dtype, first(V))
        # backward grad_h: g (T x V) @ W (V x H): inner size V
        case("bwd  g @ W       (K=V)", (T, V), (V, H), False, False, dtype,
             lambda s, w, m: (0, pad_to(V, m) - V) if w == "a" else (0, 0, 0, pad_to(V, m) - V))
        # backward grad_W: g^T (V x T) @ h (T x H): output rows V, A's ld V
        case("bwd  g.t() @ h   (M=V)", (T, V), (T, H), True, False, dtype, last(V))
        case("mlp  x @ w (4097 cols)", (T, H), (H, 4097), False, False, dtype, last(4097))


if __name__ == "__main__":
    main()
