"""Matrix products: mm, addmm and linear as extern GEMM calls, with their operands padded where
cuBLAS would otherwise take its slow unaligned kernels.

Extern epilogues (issue 18). Pointwise work right after a product is taken into the extern call
when it would otherwise be a kernel of its own that reads the product again: the rule is that
the chain's last node's result is written to memory anyway (some consumer, through views, is an
extern or the graph's output: GraphLowering.written_anyway) and eager lays it out row-major.
When a kernel consumes it (GELU then LayerNorm, a residual then LayerNorm), the work fuses into
that kernel instead, which reads the product once either way. The chain follows single users
from the product (mm, addmm, linear, and matmul of (..., M, K) by (K, N), lowered here as mm over
the rows), each step optional, in this order:
  - a row bias (N,) of the result's dtype, where the product has none (`x @ w + b`);
  - a residual of the result's shape and dtype (`mm(x, w) + r`: addmm(r, x, w), beta 1); with
    a bias too, addmm's input is bias + residual, summed by our kernels (fused into the
    residual's producer). A broadcast residual is not taken (a kernel reads it);
  - relu (torch._addmm_activation(input, x, w), cuBLASLt's epilogue on CUDA, addmm then an
    in-place relu on CPU), or GELU (use_gelu=True): erf GELU on CPU (torch's CPU call is erf
    GELU, equal bit for bit to F.gelu), the tanh GELU (`approximate="tanh"`) on CUDA, where
    cuBLASLt's GELU epilogue is the tanh approximation, and only under max-autotune (below):
    its figures are ~1 bf16 ulp / ~7 float32 ulps from eager's two-step result, and it pays
    by shape (GPT-2's MLP input, H200: 1.30x in bf16, 1.005x in float32). An activation needs
    an input (a bias or a residual); on CPU only for results of at least Backend.gemm_act_min_numel
    elements (torch's fused call is addmm then one more dispatch, dearer than a small kernel).
No node between the product and the chain's end may write in place (the residual is read at
the product's place in the graph). The taken nodes' values are the extern's result
(GraphLowering.absorbed). A linear with a bias and no chain keeps its bias inside the extern on
the same rule, and on CPU also for products of at least Backend.gemm_bias_min_numel elements
whatever reads them (GraphLowering.bias_in_extern: a beta-0 GEMM ran slower in BERT than addmm).
Under mode="max-autotune" on a GPU the chain is taken only where the fused call measured
faster than the product alone plus the chain as a kernel of its own (gemm_timing's
`epilogue_fused`; the kernel charged at copy bandwidth for the bytes it moves).
The one Triton matmul (codegen/gemm_rows.py, below) takes a linear's row bias as its epilogue;
it serves only products whose result is a graph output (an LM head), which nothing follows.

Padding rule. cuBLAS runs a 16-bit GEMM with tensor cores only when every matrix's leading
dimension is a multiple of 16 bytes; otherwise it falls to "align1" kernels. Measured on an H100
(benchmarks/gpu/gemm_padding.py, torch 2.11): GPT-2's LM head, 2048 tokens x 768 x vocabulary
50257 in bf16, the forward product takes 1652 us unaligned against 321 us with the vocabulary
zero-padded to 50264 (the pad copies included), the two backward products 1116 -> 616 and
1118 -> 535 us; fp16 alike; a 4097-column MLP weight 114 -> 41 us. float32 is not padded (its
kernels are SIMT ones either way; padding measured 0.85-0.95x). So, on GPU graphs, a bf16/fp16
product of at least PAD_MIN_MACS multiply-adds pads each of M, K, N that is not a multiple of 8
with zeros to the next multiple of 8 (each is some matrix's leading dimension in a common layout:
N the row-major result's, K a row-major operand's, M a transposed left operand's, as in a weight
gradient g.t() @ h), computes the padded product and returns the unpadded slice of it (zeros in
the padded K contribute nothing; the padded rows and columns of the result are never read). The
pad copies are our own kernels, a parameter's made per call (cheap next to the GEMM: 77 MB for
GPT-2's embedding).

Rows-aligned direct product. Where only N is unaligned and the result is a graph output (eager's
contiguous layout: the padded result would be copied into it), a Triton matmul writes the
contiguous result itself with 16-byte aligned stores and reads the weight unpadded
(codegen/gemm_rows.py). Cost rule, from the H100 probe (benchmarks/gpu/triton_mm_probe.py,
session 19): the kernel runs at ~480 TFLOP/s where cuBLAS's padded product runs at ~640, and
saves the weight's pad copy (4NK bytes moved) and the result's copy (4MN) at ~2.9 TB/s; it is
faster when 2MNK (1/480 - 1/640)/1e12 < 4N(K + M)/2.9e12, that is M*K/(M + K) below
DIRECT_ROWS_MAX. GPT-2's LM head (M 2048, K 768: 559): 329 us against 52 + 245 + 143. Over
sizes (benchmarks/gpu/gemm_ways.py, H100, session 19: GPU.md) the kernel's time over the padded
way's is 0.71-0.73 at N 32769-50257, 0.68-0.86 for M 1024-8192 and K 768-4096 (M*K/(M+K) up to
1365), 0.90 at N 8193, but 1.04 at N 4097 and 1.45 at N 1001 (too few column blocks to fill the
GPU): so N must also be at least DIRECT_ROWS_MIN_N. The kernel's programs cover
DIRECT_ROWS_TILE rows at a time (8 row classes x 128 rows), so the rule also needs M within 1/8
of a whole number of those: a decode step's few rows would run a 1024-row tile mostly masked
(1 row: ~80 GFLOP of MMA on zeros) where cuBLAS reads the weight once. Taken on compute
capability 9 only, where it was measured.

Under mode="max-autotune" these rules give way to measurement for 16-bit products that would
pad: the plain, padded and (where possible) rows-aligned ways are timed on the device and the
fastest runs (codegen/gemm_timing.py, logged per product).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, List, Optional

import sympy
import torch
import torch.fx

from codegen import gemm_group, gemm_timing
from codegen.ir import NotLowered, TensorValue, current, realize, strided_view_of
from codegen.lowering import LOWERINGS, is_tensor, register
from codegen.ops import collect_deps
from codegen.sizevars import static_int
from pydynamo.symbols import loop_vars

L = LOWERINGS
ALIGN = 8                 # elements of a 16-bit dtype in 16 bytes
PAD_MIN_MACS = 1 << 27    # smaller products: the pad copies are not worth it
_PADDED_DTYPES = (torch.float16, torch.bfloat16)
EPILOGUE_CHAINS = True    # take bias/residual/activation chains into the extern (A/B switch)
DIRECT_ROWS_MAX = 1300    # M*K/(M+K) below which the rows-aligned kernel beats pad, GEMM, copy
DIRECT_ROWS_TILE = 1024   # rows one column block of codegen/gemm_rows.py's programs covers
DIRECT_ROWS_MIN_N = 8192  # narrower results leave the GPU's SMs idle (gemm_ways.py)
DIRECT_ROWS_CAPABILITIES = (9,)     # major compute capabilities where the rule was measured


@register("linear")
def linear(input, weight, bias=None):
    group = gemm_group.plan(current.graph, current.graph.current_node, input, bias)
    if group is not None:
        return _grouped_linear(input, group)
    if input.ndim >= 2 and _pad_plan(_rows(input), input.size[-1], weight.size[0], input, weight):
        flat = L["reshape"](input, [-1, input.size[-1]]) if input.ndim > 2 else input
        out = _padded_mm(flat, L["permute"](weight, [1, 0]), whole=True, bias=bias)
        if input.ndim > 2:
            out = L["reshape"](out, list(input.size[:-1]) + [weight.size[0]])
        return out
    if input.ndim >= 2 and weight.ndim == 2 and (bias is None or bias.ndim == 1):
        size = list(input.size[:-1]) + [weight.size[0]]
        epi = _plan_epilogue(size, input.size[-1], input.dtype, bias_ok=bias is None)
        if epi is not None:
            return _with_epilogue(input, L["permute"](weight, [1, 0]), bias, epi, size)
    if bias is not None and bias.ndim == 1 and current.graph.bias_in_extern():
        return current.graph.call_extern(torch.nn.functional.linear, (input, weight, bias), {})
    out = current.graph.call_extern(torch.nn.functional.linear, (input, weight), {})
    if bias is not None:
        out = L["add"](out, bias)
    return out


def _grouped_linear(input, group):
    """The siblings' products as one (codegen/gemm_group.py): input @ the concatenated weights
    (+ the concatenated biases), each sibling's value a column slice of it; the first
    sibling's is returned, the others' wait in GraphLowering.absorbed."""
    g = current.graph
    k = static_int(input.size[-1])
    def key(s):     # (a weight read twice, `v(x)` in two places: one slice)
        return s.weight.name, s.bias and s.bias.name
    distinct = list({key(s): s for s in group}.values())
    n = sum(s.n for s in distinct)
    w = g.derived("cat", [s.weight for s in distinct], (n, k))
    b = g.derived("cat", [s.bias for s in distinct], (n,)) if group[0].bias is not None else None
    if _pad_plan(_rows(input), k, n, input, w):
        flat = L["reshape"](input, [-1, k]) if input.ndim > 2 else input
        out = _padded_mm(flat, L["permute"](w, [1, 0]), bias=b)
        out = L["reshape"](out, list(input.size[:-1]) + [n]) if input.ndim > 2 else out
    else:
        out = g.call_extern(torch.nn.functional.linear, (input, w) + ((b,) if b is not None
                                                                       else ()), {})
    start, columns = 0, {}
    for s in distinct:
        columns[key(s)] = L["narrow"](out, out.ndim - 1, start, s.n)
        start += s.n
    values = [columns[key(s)] for s in group]
    for s, v in zip(group[1:], values[1:]):
        g.absorbed[s.node] = v
    return values[0]


@register("mm")
def mm(input, mat2):
    group = gemm_group.plan(current.graph, current.graph.current_node, input, None)
    if group is not None:       # (an aten graph's linear: mm(x, t(w)))
        return _grouped_linear(input, group)
    if input.ndim == 2 and mat2.ndim == 2 and \
            not _pad_plan(input.size[0], input.size[1], mat2.size[1], input, mat2):
        size = [input.size[0], mat2.size[1]]
        epi = _plan_epilogue(size, input.size[1], input.dtype, bias_ok=True)
        if epi is not None:
            return _with_epilogue(input, mat2, None, epi, size)
    return _padded_mm(input, mat2, whole=True)


@register("matmul")
def matmul(input, other):
    """A product of a matrix or a batch of matrices (..., M, K) by one matrix (K, N): as mm
    over the rows (eager folds the batch the same way), so a bias or residual after it is the
    GEMM's epilogue; other ranks stay eager's matmul."""
    if not (is_tensor(input) and is_tensor(other)) or input.ndim < 2 or other.ndim != 2 or \
            input.dtype != other.dtype:
        raise NotLowered("matmul other than (..., M, K) @ (K, N)")
    if input.ndim == 2:
        return mm(input, other)
    size = list(input.size[:-1]) + [other.size[1]]
    epi = _plan_epilogue(size, input.size[-1], input.dtype, bias_ok=True)
    if epi is not None and not _pad_plan(_rows(input), input.size[-1], other.size[1], input, other):
        return _with_epilogue(input, other, None, epi, size)
    out = _padded_mm(L["reshape"](input, [-1, input.size[-1]]), other, whole=True)
    return L["reshape"](out, size)


@register("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    if beta == 1 and alpha == 1:        # (an aten graph's linear with a bias: addmm(b, x, t(w)))
        group = gemm_group.plan(current.graph, current.graph.current_node, mat1, input)
        if group is not None:
            return _grouped_linear(mat1, group)
    if beta == 1 and alpha == 1 and is_tensor(input) and input.ndim == 1 and \
            input.dtype == mat1.dtype and mat1.ndim == 2 and mat2.ndim == 2 and \
            not _pad_plan(mat1.size[0], mat1.size[1], mat2.size[1], mat1, mat2):
        size = [mat1.size[0], mat2.size[1]]
        epi = _plan_epilogue(size, mat1.size[1], mat1.dtype, bias_ok=False)
        if epi is not None:
            return _with_epilogue(mat1, mat2, input, epi, size)
        if current.graph.bias_in_extern():
            return current.graph.call_extern(torch.addmm, (input, mat1, mat2), {})
    prod = _padded_mm(mat1, mat2)
    if alpha != 1:
        prod = L["mul"](prod, alpha)
    if beta == 0:
        return prod
    return L["add"](prod, input if beta == 1 else L["mul"](input, beta))


# ------------------------------------------------------------------ extern epilogues

@dataclass
class Epilogue:
    """Pointwise work after a product that its extern call computes: `nodes` (the FX nodes
    taken, in order; their values are the fused result), a row bias (N,), a residual of the
    result's shape and dtype, an activation ("relu"; "gelu": erf GELU, CPU only; "gelu_tanh":
    the tanh GELU, CUDA only, where max-autotune measured the fused call faster)."""
    nodes: List[torch.fx.Node] = field(default_factory=list)
    parts: List[tuple] = field(default_factory=list)     # (kind, value) per node

    def get(self, kind) -> Any:
        return next((v for k, v in self.parts if k == kind), None)


def _inplace(n) -> bool:
    name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
    if n.op == "call_module":     # a leaf module writes its input only by its inplace flag
        return bool(getattr(current.graph.gm.get_submodule(n.target), "inplace", False))
    return bool(n.kwargs.get("inplace")) or name.endswith("_") and not name.endswith("__") or \
        n.target in (operator.setitem, operator.iadd) or ".add_." in str(n.target)


def _op_name(n) -> Optional[str]:
    if n.op == "call_module":
        mod = current.graph.gm.get_submodule(n.target)
        if isinstance(mod, torch.nn.ReLU):
            return "relu"
        if isinstance(mod, torch.nn.GELU):
            return "gelu" if mod.approximate == "none" else None
        return None
    if n.op not in ("call_function", "call_method"):
        return None
    return current.graph.canon_name(n)


def _same_size(a, b) -> bool:
    return len(a) == len(b) and all(sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a, b))


def _step(g, n, u, size, dtype, epi, bias_ok):
    # bias_ok: the product has no bias of its own (one may join); else it has one
    """The epilogue part node `u` (the one user of `n`) adds, or None."""
    name = _op_name(u)
    if epi.get("act") is not None or _inplace(u):
        return None
    if name in ("relu", "gelu"):
        if len(u.args) != 1 or u.args[0] is not n or bias_ok and epi.get("bias") is None and \
                epi.get("resid") is None:
            return None     # (_addmm_activation needs an input: a bias or a residual)
        approx = u.kwargs.get("approximate", "none")
        on_cpu = (g.device or torch.device("cpu")).type == "cpu"
        if name == "gelu" and (set(u.kwargs) - {"approximate"} or
                               approx != ("none" if on_cpu else "tanh")):
            return None      # torch's fused GELU is erf's on CPU; cuBLAS's epilogue is tanh's
        if name == "gelu" and not on_cpu:     # (only where its speed is measured)
            return ("act", "gelu_tanh") if _measuring(g) else None
        if name == "relu" and any(k != "inplace" for k in u.kwargs):
            return None
        if on_cpu and (g.backend.gemm_act_min_numel is None or
                       g.hint(_numel(size)) < g.backend.gemm_act_min_numel):
            return None
        return ("act", name)
    if name != "add" or len(u.args) != 2 or any(k != "alpha" or v != 1 for k, v in u.kwargs.items()):
        return None
    other = u.args[1] if u.args[0] is n else u.args[0] if u.args[1] is n else None
    v = g.env.get(other) if isinstance(other, torch.fx.Node) else None
    if not isinstance(v, TensorValue) or v.dtype != dtype:
        return None
    if bias_ok and epi.get("bias") is None and epi.get("resid") is None and v.ndim == 1 and \
            sympy.sympify(v.size[0]) == sympy.sympify(size[-1]):
        return ("bias", v)
    if epi.get("resid") is None and _same_size(v.size, size):
        return ("resid", v)     # (a broadcast one stays a kernel's read)
    return None


def _plan_epilogue(size, k, dtype, bias_ok) -> Optional[Epilogue]:
    """The epilogue the product being lowered (result `size`, `dtype`) takes into its extern
    call, or None (the module docstring's rule): its chain of single users (a bias when it has
    none, a residual, then relu/GELU) up to the last node whose result is written to memory
    anyway; no node in between may write in place (a residual read at the product's place in
    the graph must be the value the add would read)."""
    g = current.graph
    node = g.current_node
    if not EPILOGUE_CHAINS or not g.backend.extern_epilogues or node is None or dtype not in \
            (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return None
    epi, n = Epilogue(), node
    while len(n.users) == 1:
        u = next(iter(n.users))
        part = _step(g, n, u, size, dtype, epi, bias_ok)
        if part is None:
            break
        epi.nodes.append(u)
        epi.parts.append(part)
        n = u
    while epi.nodes and not (g.written_anyway(epi.nodes[-1]) and _row_major(g, epi.nodes[-1])):
        epi.nodes.pop()
        epi.parts.pop()
    if not epi.nodes:
        return None
    m = node.next
    while m is not epi.nodes[-1]:
        if _inplace(m) if m.op in ("call_function", "call_method", "call_module") else False:
            return None
        m = m.next
    if _measuring(g):
        dims = [static_int(d) for d in (_numel(size[:-1]), k, size[-1])]
        if None in dims or not gemm_timing.epilogue_fused(
                *dims, tuple(v if kind == "act" else kind for kind, v in epi.parts), dtype,
                g.device):
            return None         # measured: the product alone, the chain a kernel of its own
    return epi


def _measuring(g) -> bool:
    """mode="max-autotune" on a device gemm_timing can time."""
    return g.measure_gemms and gemm_timing.can_measure(g.device)


def _row_major(g, node) -> bool:
    """Is eager's result of `node` row-major, as the fused call's is? (`r.t() + y` takes r's
    transposed layout: TensorIterator follows its first operand.)"""
    meta = g._meta(node)
    return meta is not None and hasattr(meta, "shape") and g._meta_contiguous(meta)


def _with_epilogue(a, b, bias, epi: Epilogue, size):
    """a (..., K) @ b (K, N) + bias with `epi`, as one addmm / _addmm_activation over a's rows;
    a residual (plus the bias, summed by our kernels: fused into the residual's producer) is
    the call's input. The epilogue's nodes take the result."""
    g = current.graph
    bias = epi.get("bias") if bias is None else bias
    c, resid = bias, epi.get("resid")
    if resid is not None:
        c = resid if bias is None else L["add"](resid, bias)
        c = L["reshape"](c, [-1, c.size[-1]]) if c.ndim != 2 else c
    a2 = L["reshape"](a, [-1, a.size[-1]]) if a.ndim != 2 else a
    act = epi.get("act")
    if act is not None:
        out = g.call_extern(torch._addmm_activation, (c, a2, b),
                            {"use_gelu": act in ("gelu", "gelu_tanh")})
    else:
        out = g.call_extern(torch.addmm, (c, a2, b), {})
    if a.ndim != 2:
        out = L["reshape"](out, size)
    for n in epi.nodes:
        g.absorbed[n] = out
    return out


def _rows(x):
    return _numel(x.size[:-1])


def _numel(size):
    n = sympy.Integer(1)
    for s in size:
        n = n * s
    return n


def _pad_plan(m, k, n, a, b) -> Optional[List[int]]:
    """The padded (M, K, N) of a product of a (M, K) and b, or None to run it as is (see the
    module docstring)."""
    g = current.graph
    if not g.backend.pad_gemm_operands or a.dtype not in _PADDED_DTYPES or b.dtype != a.dtype:
        return None
    dims = [static_int(d) for d in (m, k, n)]
    if any(d is None for d in dims) or dims[0] * dims[1] * dims[2] < PAD_MIN_MACS:
        return None
    padded = [-(-d // ALIGN) * ALIGN for d in dims]
    return padded if padded != dims else None


def _padded_mm(a, b, whole=False, bias=None):
    """a (M, K) @ b (K, N) (+ `bias`, a linear's), through zero-padded operands when
    `_pad_plan` says so; `whole`: the product (with the bias) is the value of the node being
    lowered (nothing scales or adds to it after), so it may be the rows-aligned kernel's result,
    which takes a row bias of the product's dtype as its epilogue (the module docstring)."""
    g = current.graph
    plan = _pad_plan(a.size[0], a.size[1], b.size[1], a, b) if a.ndim == 2 == b.ndim else None
    if plan is None:
        out = g.call_extern(torch.mm, (a, b), {})
        return out if bias is None else L["add"](out, bias)
    m, k, n = plan
    rows, cols = static_int(a.size[0]), static_int(b.size[1])
    b_column_major = _column_major(b)
    rows_ok = whole and k == static_int(a.size[1]) and b_column_major and \
        not _column_major(a) and _rows_possible(g, rows, k, cols)
    if g.measure_gemms and gemm_timing.can_measure(g.device):
        way = gemm_timing.fastest(["plain", "padded"] + (["rows"] if rows_ok else []), rows,
                                  static_int(a.size[1]), cols, plan, b_column_major, a.dtype,
                                  g.device, g.is_output(g.current_node))
    else:
        way = "rows" if rows_ok and _rows_by_rule(g, rows, k, cols) else "padded"
    if way == "rows":
        from codegen.gemm_rows import mm_rows_aligned_out   # (Triton: GPU graphs only)
        row_bias = bias is not None and bias.ndim == 1 and bias.dtype == a.dtype
        out = g.call_extern(mm_rows_aligned_out, (a, b, bias) if row_bias else (a, b), {},
                            out_meta=torch.empty((rows, cols), dtype=a.dtype, device="meta"))
        return out if bias is None or row_bias else L["add"](out, bias)
    if way == "plain":
        out = g.call_extern(torch.mm, (a, b), {})
    else:
        out = g.call_extern(torch.mm, (_pad2(a, m, k), _pad2(b, k, n)), {})
        if m != static_int(a.size[0]):
            out = L["narrow"](out, 0, 0, int(a.size[0]))
        if n != static_int(b.size[1]):
            out = L["narrow"](out, 1, 0, int(b.size[1]))
    return out if bias is None else L["add"](out, bias)


def _rows_possible(g, m, k, n) -> bool:
    """Can the product being lowered (only N unaligned) be the rows-aligned kernel's? Its
    result must be a graph output (the padded variant's slice would be copied dense: the
    kernel saves that copy), every matrix under 2**31 elements (the kernel's offsets are
    32-bit: GPT-2's logits at batch 64 x seq 1024 are 3.3e9)."""
    return max(m * n, n * k, m * k) < 1 << 31 and g.is_output(g.current_node)


def _rows_by_rule(g, m, k, n) -> bool:
    """Without measuring, is it faster than the padded product? (The module docstring's rule:
    a measured device, M*K/(M+K) small enough, N at least DIRECT_ROWS_MIN_N, M rows filling
    the kernel's row tiles to within 1/8.)"""
    covered = -(-m // DIRECT_ROWS_TILE) * DIRECT_ROWS_TILE
    return m * k < DIRECT_ROWS_MAX * (m + k) and 8 * covered <= 9 * m and \
        n >= DIRECT_ROWS_MIN_N and _measured_device(g.device)


def _measured_device(device) -> bool:
    return device is not None and device.type == "cuda" and \
        torch.cuda.get_device_capability(device)[0] in DIRECT_ROWS_CAPABILITIES


def _pad2(x, rows, cols):
    """x zero-padded to (rows, cols), padded in the order it is stored: a transposed view (a
    weight's `.t()`, a gradient's `g.t()`) is its storage padded and transposed back, so the copy
    reads and writes contiguously and cuBLAS takes the transpose for free. One copy per padded
    value and shape per graph (g @ W and g.t() @ h share g's)."""
    r, c = static_int(x.size[0]), static_int(x.size[1])
    if (r, c) == (rows, cols):
        return x
    if _column_major(x):
        return L["permute"](_pad_stored(L["permute"](x, [1, 0]), cols, rows), [1, 0])
    return _pad_stored(x, rows, cols)


def _column_major(x) -> bool:
    """Are x's reads (of a view, or of a cast of one) contiguous down its columns?"""
    i, j = loop_vars("g", 2)
    reads = collect_deps(x.loader, [i, j]).reads
    if not reads:
        return False
    try:
        e = sympy.expand(next(iter(reads)).index)
        return e.coeff(i) == 1 and e.coeff(j) != 1
    except Exception:
        return False


def _pad_stored(x, rows, cols):
    view = strided_view_of(x)
    key = view and (view.buffer.name, view.size, view.stride, view.offset, rows, cols)
    cache = current.graph.__dict__.setdefault("gemm_pads", {})
    if key is None or key not in cache:
        r, c = static_int(x.size[0]), static_int(x.size[1])
        param = current.graph.parameter_view(x)
        if param is not None:       # a parameter's: padded once, kept while it is unchanged
            padded = current.graph.derived("pad", [param[0]], (rows, cols), [param[1]])
        else:
            padded = realize(L["constant_pad_nd"](x, [0, cols - c, 0, rows - r], 0.0))
        if key is None:
            return padded
        cache[key] = padded
    return cache[key]
