"""C++/OpenMP kernel printer: one `extern "C" int kernelN(...)` per FusedKernel.

`CppKernelPrinter` is an `ops` handler: running a loop body under it emits one typed C++
statement per op into the innermost open scope, with common-subexpression elimination per scope
(a value defined inside a loop is never used outside it; the machinery shared with the Triton
printer is codegen/kernel_printer.py, each primitive's C++ form its row in primitives.py). Loop
structure follows the scheduler's FusedKernel: shared outer loops (OpenMP-parallel when there is
enough work; several of them one flat loop, `open_outer`), then each node's inner loops
(innermost `#pragma omp simd`, unless that loop's own body flags an error). Reductions keep one
accumulator per outer iteration; when the outer loops are too small to parallelize, each
reduction is split across threads with per-thread accumulators combined under a critical
section. Every kernel returns an error flag (1: an indirect index out of bounds, 2: an integer
division by zero) that the wrapper turns into the exception eager raises for the op
(codegen/runtime.py kernel_error). fp16/bf16 buffers are passed as their 16 bits (`STORAGE`):
loads widen them to float, stores round to nearest even (PREAMBLE's pd_float_to_bf16/fp16). A
kernel identical to an earlier one but for its buffers' names is printed as a one-line function
forwarding to it (`generate_source`), so a repeated block is compiled once.

Only C++ lives here: the wrapper (codegen/wrapper.py) decides allocation and call order.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Dict, List, Optional

import sympy
import torch

from codegen.ir import Reduction
from codegen.kernel_printer import KernelPrinter, KValue, canonical_text
from codegen.ops import set_handler
from codegen.options import Options
from codegen.primitives import ROWS
from codegen.scheduler import FusedKernel, _same
from codegen.sizevars import contiguous_strides, flat_index, product, static_int
from pydynamo.symbols import cexpr, index_symbol, size_symbol

# the C type a value of each dtype is computed in (fp16/bf16: float, codegen/kernel_printer.py)
CTYPES = {torch.float32: "float", torch.float64: "double", torch.int64: "int64_t",
          torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
          torch.uint8: "uint8_t", torch.bool: "bool", torch.float16: "float",
          torch.bfloat16: "float"}
# where it is stored differently: the element type of its buffer arguments, and the functions
# that widen an element on load and round a float to one on store (PREAMBLE)
STORAGE = {torch.bool: ("uint8_t", None, None),
           torch.bfloat16: ("uint16_t", "pd_bf16_to_float", "pd_float_to_bf16"),
           torch.float16: ("uint16_t", "pd_fp16_to_float", "pd_float_to_fp16")}

PARALLEL_MIN_WORK = 32768
NUM_THREADS = os.cpu_count() or 1


def _variant_defines(options) -> str:
    """Kernel variants benchmarks/pointwise_probe.py times against each other (codegen options):
    cpp_tanh="libm" calls tanhf (libmvec when vectorized) instead of the inlined pd_tanhf."""
    return "#define PD_LIBM_TANH 1\n" if options.cpp_tanh == "libm" else ""

PREAMBLE = r"""
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <omp.h>

// fp16/bf16 elements as their bits (uint16_t): widened to float exactly; rounded from float to
// nearest even, as c10::BFloat16 and c10::Half round (a NaN becomes bf16's 0x7FC0, fp16's
// quiet NaN of the same sign); branch-free bit arithmetic, so `omp simd` loops vectorize it.
static inline float pd_bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t pd_float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float pd_bf16_to_float(uint16_t h) { return pd_bits_to_float(uint32_t(h) << 16); }
static inline uint16_t pd_float_to_bf16(float f) {
  uint32_t u = pd_float_to_bits(f);
  uint16_t r = uint16_t((u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16);
  return f != f ? uint16_t(0x7FC0) : r;
}
static inline float pd_fp16_to_float(uint16_t h) {
  uint32_t w = uint32_t(h) << 16, sign = w & 0x80000000u, two_w = w + w;
  float normal = pd_bits_to_float((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  float denormal = pd_bits_to_float((two_w >> 17) | (126u << 23)) - 0.5f;
  return pd_bits_to_float(sign | (two_w < (1u << 27) ? pd_float_to_bits(denormal)
                                                      : pd_float_to_bits(normal)));
}
static inline uint16_t pd_float_to_fp16(float f) {
  // scaling by 2^112 then 2^-110 rounds the mantissa at fp16's precision (denormals included)
  // and overflows to inf where fp16 does; the exponent is rebiased by the float add below
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t w = pd_float_to_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = pd_bits_to_float((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = pd_float_to_bits(base);
  uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
static inline float pd_round_bf16(float f) { return pd_bf16_to_float(pd_float_to_bf16(f)); }
static inline float pd_round_fp16(float f) { return pd_fp16_to_float(pd_float_to_fp16(f)); }
template <typename T> static inline bool pd_isnan(T a) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(a); else return false;
}
template <typename T> static inline T pd_max(T a, T b) {
  if (pd_isnan(a)) return a; if (pd_isnan(b)) return b; return a > b ? a : b;
}
template <typename T> static inline T pd_min(T a, T b) {
  if (pd_isnan(a)) return a; if (pd_isnan(b)) return b; return a < b ? a : b;
}
template <typename T> static inline T pd_relu(T a) { return a < T(0) ? T(0) : a; }
// float exp inlined so `omp simd` loops vectorize it without a libmvec call (about 2x faster
// than _ZGVeN16v_expf): Cody-Waite reduction by n*ln2, degree-7 polynomial on |r| <= ln2/2,
// 2^n applied in two halves so results down to the smallest denormal round once. Branch-free
// and without nearbyint, so g++ vectorizes it for any x86-64 level (with -fno-trapping-math).
// Max error 1.02 ulp against exp in double over every 7th float bit pattern (denormal results
// included); inf, -inf, NaN and the overflow/underflow edges are exact.
#ifdef __FMA__
#define PD_FMA(a, b, c) std::fma(a, b, c)
#else
#define PD_FMA(a, b, c) ((a) * (b) + (c))
#endif
static inline float pd_expf(float x) {
  // below the underflow edge the result is selected to 0 at the end; computing it at 0 instead
  // keeps masked rows (-inf from masked_fill) off the slow denormal-result path
  float xc = x < -103.972084045410f ? 0.0f : x;
  xc = xc > 88.7228394f ? 88.7228394f : xc;
  float t = PD_FMA(xc, 1.44269504088896341f, 12582912.0f);   // + 1.5 * 2^23 rounds to nearest
  float n = t - 12582912.0f;
  int32_t tb;
  std::memcpy(&tb, &t, 4);
  int32_t ni = tb - 0x4B400000;
  float r = PD_FMA(n, -0.693145751953125f, xc);
  r = PD_FMA(n, -1.428606765330187045e-06f, r);
  float p = 1.9875691500E-4f;
  p = PD_FMA(p, r, 1.3981999507E-3f);
  p = PD_FMA(p, r, 8.3334519073E-3f);
  p = PD_FMA(p, r, 4.1665795894E-2f);
  p = PD_FMA(p, r, 1.6666665459E-1f);
  p = PD_FMA(p, r, 5.0000001201E-1f);
  p = PD_FMA(p * r, r, r) + 1.0f;
  int32_t n1 = ni >> 1, n2 = ni - n1;
  int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float res = p * s1 * s2;
  res = x > 88.7228394f ? std::numeric_limits<float>::infinity() : res;
  res = x < -103.972084045410f ? 0.0f : res;   // below -150 ln2 exp rounds to +0
  return x != x ? x : res;
}
template <typename T> static inline T pd_exp(T a) {
  if constexpr (std::is_same_v<T, float>) return pd_expf(a); else return std::exp(a);
}
template <typename T> static inline T pd_sigmoid(T a) { return T(1) / (T(1) + pd_exp(-a)); }
// float tanh inlined for the same reason (libmvec's 8-wide tanhf is ~65 instructions plus the
// spill of every live vector register around the call): Cephes' odd polynomial below 0.625,
// else 1 - 2 / (exp(2|x|) + 1) on pd_expf (inf above 44: exactly 1); copysign keeps -0 and the
// sign of tiny/denormal inputs exact, and NaN passes through pd_expf. Branch-free like pd_expf.
// Max error 1.33 ulp against tanh in double over every non-negative float (odd by copysign).
static inline float pd_tanhf(float x) {
  float a = std::fabs(x);
  float z = x * x;
  float p = -5.70498872745E-3f;
  p = PD_FMA(p, z, 2.06390887954E-2f);
  p = PD_FMA(p, z, -5.37397155531E-2f);
  p = PD_FMA(p, z, 1.33314422036E-1f);
  p = PD_FMA(p, z, -3.33332819422E-1f);
  float small = PD_FMA(p * z, a, a);
  float big = 1.0f - 2.0f / (pd_expf(a + a) + 1.0f);
  return std::copysign(a < 0.625f ? small : big, x);
}
template <typename T> static inline T pd_tanh(T a) {
#ifndef PD_LIBM_TANH
  if constexpr (std::is_same_v<T, float>) return pd_tanhf(a); else
#endif
  return std::tanh(a);
}
template <typename T> static inline T pd_sign(T a) {
  if constexpr (std::is_floating_point_v<T>) { if (std::isnan(a)) return T(0); }
  if constexpr (std::is_unsigned_v<T>) return a > T(0) ? T(1) : T(0);
  else return (T(0) < a) - (a < T(0));
}
template <typename T> static inline T pd_remainder(T a, T b) {
  T m = std::fmod(a, b);
  if (m != T(0) && ((b < T(0)) != (m < T(0)))) m += b;
  return m;
}
template <typename T> static inline T pd_floordiv(T a, T b) {
  if (b == T(0)) return a / b;
  T m = std::fmod(a, b);
  T div = (a - m) / b;
  if (m != T(0) && ((b < T(0)) != (m < T(0)))) div -= T(1);
  T fl;
  if (div != T(0)) { fl = std::floor(div); if (div - fl > T(0.5)) fl += T(1); }
  else fl = std::copysign(T(0), a / b);
  return fl;
}
template <typename T> static inline T pd_xlogy(T x, T y) {
  if (std::isnan(y)) return y;
  if (x == T(0)) return T(0);
  return x * std::log(y);
}
template <typename T> static inline T pd_sgn(T a) { return pd_sign(a); }
// integer division: error 2 on a zero divisor; b == -1 avoids the INT_MIN / -1 trap (wraps)
template <typename T> static inline T pd_int_truncdiv(T a, T b, int* err) {
  if (b == T(0)) { *err = 2; return T(0); }
  if constexpr (std::is_signed_v<T>) { if (b == T(-1)) return T(T(0) - a); }
  return T(a / b);
}
template <typename T> static inline T pd_int_fmod(T a, T b, int* err) {
  if (b == T(0)) { *err = 2; return T(0); }
  if constexpr (std::is_signed_v<T>) { if (b == T(-1)) return T(0); }
  return T(a % b);
}
template <typename T> static inline T pd_int_floordiv(T a, T b, int* err) {
  T q = pd_int_truncdiv(a, b, err);
  if (b != T(0) && pd_int_fmod(a, b, err) != T(0) && ((a < T(0)) != (b < T(0)))) q = T(q - 1);
  return q;
}
template <typename T> static inline T pd_int_remainder(T a, T b, int* err) {
  T r = pd_int_fmod(a, b, err);
  if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = T(r + b);
  return r;
}
"""


# SIMD variants of libm (glibc libmvec): declaring them `omp declare simd` lets g++ vectorize
# loops that call exp/tanh/erf/... (what -ffast-math would do, without its value changes).
# The primitives marked `simd` (codegen/primitives.py) call such a function of their name.
def vector_math_decls() -> str:
    lines = ['extern "C" {']
    for arity in (1, 2):
        for fn in [p.name for p in ROWS if p.simd and p.arity == arity]:
            for suffix, t in (("f", "float"), ("", "double")):
                lines += ["#pragma omp declare simd notinbranch",
                          f"{t} {fn}{suffix}({', '.join([t] * arity)});"]
    # sin and cos under names g++ does not treat as builtins, bound to the same libm symbols:
    # sin(x) and cos(x) of one value are otherwise merged into a sincosf call, which has no
    # vector variant, and the whole loop stays scalar (rotary embeddings do exactly this).
    # `const` says what the builtins imply under -fno-math-errno: without it the calls count
    # as memory clobbers and g++ no longer if-converts the loop's selects (pd_expf, relu).
    for fn in ("sin", "cos"):
        for suffix, t in (("f", "float"), ("", "double")):
            lines += ["#pragma omp declare simd notinbranch",
                      f'{t} pd_v{fn}{suffix}({t}) __asm__("{fn}{suffix}") '
                      f'__attribute__((const, nothrow));']
    lines.append("}")
    for fn in ("sin", "cos"):
        lines += [f"static inline float pd_{fn}(float a) {{ return pd_v{fn}f(a); }}",
                  f"static inline double pd_{fn}(double a) {{ return pd_v{fn}(a); }}"]
    return "\n".join(lines) + "\n"


# without libmvec nothing vectorizes sin/cos anyway: plain libm
SCALAR_TRIG = """template <typename T> static inline T pd_sin(T a) { return std::sin(a); }
template <typename T> static inline T pd_cos(T a) { return std::cos(a); }
"""


def _fconst(v, ctype):
    if math.isnan(v):
        return f"std::numeric_limits<{ctype}>::quiet_NaN()"
    if math.isinf(v):
        return f"{'-' if v < 0 else ''}std::numeric_limits<{ctype}>::infinity()"
    return f"static_cast<{ctype}>({float(v)!r})"


def constant_literal(value, dtype) -> str:
    ct = CTYPES[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        return _fconst(float(value), ct)
    v = int(value)
    if v == -(2 ** 63):
        return "std::numeric_limits<int64_t>::min()"
    return f"static_cast<{ct}>({v}LL)"


class CppKernelPrinter(KernelPrinter):
    """Prints one FusedKernel as a C++ function."""

    hoist = True

    def __init__(self, kernel: FusedKernel, buffers: Dict[str, object], omp_schedule=""):
        super().__init__(kernel, buffers)
        # what the kernel stores: its loads are never moved (kernel_printer's `hoist`)
        self.written = {name for n in kernel.nodes for name in n.output_names()}
        self.seal_next = 0      # loops of a collapse(k) nest whose bodies are still to open
        # option omp_schedule: a schedule clause for parallel pointwise loops ("": the runtime's
        # default, static with one contiguous chunk per thread)
        self.omp_schedule = f" schedule({omp_schedule})" if omp_schedule else ""

    # ------------------------------------------------------------ the language
    def declare(self, v, expr):
        return f"{CTYPES[v.dtype]} {v.name} = {expr};"

    def print_index(self, e):
        return cexpr(e)

    def literal(self, value, dtype):
        return constant_literal(value, dtype)

    def scalar_expr(self, name, dtype):
        return name if dtype == torch.float64 else f"static_cast<{CTYPES[dtype]}>({name})"

    def op_expr(self, prim, args):
        return prim.cpp.format(*args)

    def cast_expr(self, x, cd):
        # a bool as a number is a select: g++ 12 vectorizes no loop holding a
        # static_cast<float>(bool) (a one-hot `(target == arange).float()` left the cross-entropy
        # backward's loop scalar, 4.6 us a 1000-wide row against 0.3)
        if getattr(x, "dtype", None) == torch.bool and cd != torch.bool:
            ct = CTYPES[cd]
            return f"({x} ? {ct}(1) : {ct}(0))"
        return f"static_cast<{CTYPES[cd]}>({x})"

    def round_half_expr(self, x, dtype):
        return f"pd_round_{'bf16' if dtype == torch.bfloat16 else 'fp16'}({x})"

    def bool_expr(self, x):
        return f"static_cast<bool>({x})"

    # ------------------------------------------------------------ loops
    # a vector loop's pragma is chosen when it closes: a body that flags an error (an indirect
    # index checked per element, an integer division) writes pd_err, which `omp simd` lanes
    # must not, so that loop gets `unless_err` instead; a row's index checked before the loop
    # (kernel_printer's hoist) leaves the loop free to vectorize
    NO_SIMD = "// (not omp simd: the body flags errors)"

    def open_loop(self, var, size, pragma=None, unless_err=None):
        if pragma:
            self.line(pragma)
        self.line(f"for (int64_t {var} = 0; {var} < {self.idx(size)}; ++{var}) {{")
        self.ranges[index_symbol(var) if isinstance(var, str) else var] = size
        self.push(header_lines=2 if pragma else 1)
        sealed = self.seal_next > 0
        self.seal_next = max(self.seal_next - 1, 0)
        if pragma and "collapse(" in pragma:   # the next k-1 loops sit directly in this one
            self.seal_next = int(pragma.split("collapse(")[1].split(")")[0]) - 1
            sealed = True
        self.scopes[-1].sealed = sealed
        n = static_int(size)
        self.scopes[-1].nonempty = n is not None and n > 0
        self.scopes[-1].unless_err = unless_err if pragma else None
        self.var_level[str(var)] = len(self.scopes) - 1

    def open_outer(self, xs, sizes, pragma=None) -> int:
        """The loops of `xs` over `sizes`, the first with `pragma`; returns how many loops were
        opened. Several loops under a parallel pragma are one flat loop `xf` over their product
        whose body first derives each variable (`x0 = xf / n1`, `x1 = xf % n1`): the same
        iterations in the same order and the same split over threads as `collapse(k)`, but the
        body is an ordinary loop scope, so a row's values (loads, indirect indices, libm calls)
        are hoisted into it (codegen/kernel_printer.py), where a collapsed nest must stay
        perfectly nested (BERT's embedding + LayerNorm over (1, 128) rows re-derived three
        gathered indices per element, unvectorized, 4x eager's time)."""
        if pragma is None or len(xs) < 2:
            for i, (x, r) in enumerate(zip(xs, sizes)):
                self.open_loop(x, r, pragma if i == 0 else None)
            return len(xs)
        self.open_loop("xf", product(sizes), pragma)
        level = len(self.scopes) - 1
        for i, (x, st, r) in enumerate(zip(xs, contiguous_strides(sizes), sizes)):
            q = "xf" if static_int(st) == 1 else f"(xf / {self.idx(st)})"
            self.line(f"const int64_t {x} = {q if i == 0 else f'{q} % {self.idx(r)}'};")
            self.ranges[index_symbol(x)] = r
            self.var_level[x] = level
        return 1

    def close_loop(self):
        sc = self.scopes[-1]
        if sc.unless_err is not None and any("pd_err" in ln for ln in sc.lines):
            head = self.scopes[-2].lines
            head[sc.header_at] = head[sc.header_at][:-len(head[sc.header_at].lstrip())] + \
                sc.unless_err
        self.pop()
        self.line("}")

    def open_block(self):
        self.line("{")
        self.push()

    close_block = close_loop

    # ------------------------------------------------------------ ops handler
    def _local_index(self, index):
        """A row-local scratch array is indexed by the inner part of the flat index: the
        outer loop variables' terms drop out (the buffer is contiguous, outer dims first)."""
        return sympy.sympify(index).subs({index_symbol(f"x{i}"): 0 for i in range(len(self.kernel.outer))})

    def load(self, name, index):
        if name in self.kernel.local:
            index = self._local_index(index)
        key = f"{name}[{self.idx(index)}]"
        fw = self.forwarded(key)
        if fw is not None:
            return fw
        if name in self.kernel.local:
            return self.tmp(key, self.buffers[name].dtype)
        if name in self.kernel.removed:
            raise RuntimeError(f"load of register-only buffer {name} not forwarded")
        self.params.setdefault(name, False)
        level = None if name in self.written else self.index_level
        dt = self.buffers[name].dtype
        # (a load leaves only loops that surely run: an empty input has no element 0)
        if dt == torch.bool:     # passed as bytes (see _signature)
            return self.tmp(f"({key} != 0)", torch.bool, level, nonempty=True)
        if dt in STORAGE:
            v = self.tmp(f"{STORAGE[dt][1]}({key})", dt, level, nonempty=True)
            self.half_exact.add(v.name)
            return v
        return self.tmp(key, dt, level, nonempty=True)

    def store(self, name, index, value):
        if name in self.kernel.local:
            index = self._local_index(index)
        key = f"{name}[{self.idx(index)}]"
        self.scopes[-1].forward[key] = value
        if name in self.kernel.local:
            self.line(f"{key} = {value};")
            return
        if name in self.kernel.removed:
            return
        self.params[name] = True
        dt = self.buffers[name].dtype
        if dt in STORAGE and STORAGE[dt][2]:
            self.line(f"{key} = {STORAGE[dt][2]}({value});")
            return
        self.line(f"{key} = {value};")

    def index_expr(self, expr, dtype):
        text = f"static_cast<{CTYPES[dtype]}>({self.idx(expr)})"
        return self.tmp(text, dtype, self.index_level)

    def print_indirect(self, name, value, sz, code):
        self.line(f"int64_t {name} = static_cast<int64_t>({value});")
        self.line(f"if ({name} < 0) {name} += {sz};")
        self.line(f"if ({name} < 0 || {name} >= {sz}) {{ pd_err = {code}; {name} = 0; }}")

    # ------------------------------------------------------------ kernel structure
    def generate(self) -> str:
        k = self.kernel
        outer = list(k.outer)
        xs = [f"x{i}" for i in range(len(outer))]
        with set_handler(self):
            work = product(outer) * sympy.Max(*[product(n.inner_ranges(len(outer)))
                                                for n in k.nodes], sympy.Integer(1))
            parallel_outer = self._outer_parallel(outer)
            if not k.has_inner:
                self._pointwise_nest(xs, outer, work)
            elif parallel_outer and self._column_mode(outer):
                self._column_nest(xs, outer, work)
            else:
                pragma = None
                if parallel_outer and outer:
                    pragma = f"#pragma omp parallel for{self._if(work)}"
                opened = self.open_outer(xs, outer, pragma)
                if not outer:
                    self.open_block()
                for name, elems in k.local.items():   # private: declared inside the loop
                    self.line(f"alignas(64) {CTYPES[self.buffers[name].dtype]} {name}[{elems}];")
                self._nodes([index_symbol(x) for x in xs], parallel_outer)
                for _ in range(max(opened, 1)):
                    self.close_loop()
        body = self.scopes[0].lines
        sig = self._signature()
        return "\n".join([f'extern "C" int {k.name}({sig}) {{', "    int pd_err = 0;"] + body
                         + ["    return pd_err;", "}"])

    def _signature(self):
        params = []
        for name, written in self.params.items():
            # bool buffers as bytes: read through `const bool*`, g++ lowered selects on the
            # value to per-element branches (masked_fill in attention: 4-7x slower than
            # eager); `load` compares each byte with 0, a plain vector compare
            dt = self.buffers[name].dtype
            ct = STORAGE[dt][0] if dt in STORAGE else CTYPES[dt]
            params.append(f"{'' if written else 'const '}{ct}* __restrict__ {name}")
        for s in sorted(self.size_syms, key=lambda s: s.name):
            params.append(f"int64_t {s.name}")
        params += [f"double {name}" for name in self.scalar_args]
        self.arg_names = self.argument_order()
        return ", ".join(params)

    def _if(self, work):
        """The `if` clause that keeps small work on one thread. Its `parallel:` modifier matters:
        on a combined `parallel for simd`, an unmodified if(0) applies to the simd part too and
        g++ then does not vectorize the loop at all."""
        w = static_int(work)
        if w is not None:
            return "" if w >= PARALLEL_MIN_WORK else " if(parallel: 0)"
        return f" if(parallel: {self.idx(work)} >= {PARALLEL_MIN_WORK})"

    def _outer_parallel(self, outer):
        n = static_int(product(outer))
        return n is None or n >= NUM_THREADS

    def _pointwise_nest(self, xs, outer, work):
        """All nodes share every loop; the last loop is the vector loop."""
        if not outer:
            self.open_block()
            for node in self.kernel.nodes:
                self.store_node(node, [])
            self.close_block()
            return
        head = static_int(product(outer[:-1]))
        par_head = len(outer) > 1 and (head is None or head >= NUM_THREADS)
        opened = 0
        if par_head:
            opened = self.open_outer(xs[:-1], outer[:-1], f"#pragma omp parallel for"
                                     f"{self.omp_schedule}{self._if(work)}")
            pragma, scalar = "#pragma omp simd", self.NO_SIMD
        else:
            for x, r in zip(xs[:-1], outer[:-1]):
                self.open_loop(x, r)
            opened = len(outer) - 1
            pragma, scalar = (f"#pragma omp parallel for{simd}{self.omp_schedule}{self._if(work)}"
                              for simd in (" simd", ""))
        self.open_loop(xs[-1], outer[-1], pragma, scalar)
        for node in self.kernel.nodes:
            self.store_node(node, [index_symbol(x) for x in xs])
        for _ in range(opened + 1):
            self.close_loop()

    COLUMN_TYPES = ("sum", "prod", "max", "min", "any", "all")
    COLUMN_BLOCK = 256      # widest block of output columns one thread accumulates
    COLUMN_BLOCK_MIN = 16   # one cache line of floats
    COLUMN_RUN_MIN = 64     # narrower column-parallel blocks read rows in runs too short

    def _column_plan(self, outer, work):
        """(columns per block, split rows?). Wide blocks read each input row as one contiguous
        run (16 columns, one cache line a row at a row-size stride, ran 4.6x slower than 256
        on a 4096x1024 sum(0)); blocks narrow while there are fewer than OpenMP threads, down
        to 64 columns. Below that a big tall-skinny reduction (100000x64) keeps the full
        width and splits its rows over the threads instead (`_column_nest`); small ones
        narrow on to 16."""
        n_other = 1
        for r in outer[:-1]:
            n = static_int(r)
            n_other *= n if n is not None else 1 << 20
        last = static_int(outer[-1])
        if last is None:
            return 64, False
        threads = torch.get_num_threads()
        full = min(self.COLUMN_BLOCK, max(self.COLUMN_BLOCK_MIN, 1 << (last - 1).bit_length()))

        def enough(b):
            return n_other * -(-last // b) >= threads
        b = full
        while b > self.COLUMN_RUN_MIN and not enough(b):
            b //= 2
        if enough(b):
            return b, False
        w = static_int(work)
        if len(outer) == 1 and w is not None and w >= 8 * PARALLEL_MIN_WORK:
            return full, True
        while b > self.COLUMN_BLOCK_MIN and not enough(b):
            b //= 2
        return b, False

    def _column_mode(self, outer):
        """Reductions whose input is contiguous along the last outer dim, strided along the
        reduction: iterate reduction-outer / outputs-inner so the inner loop is contiguous."""
        k = len(outer)
        if k == 0 or not all(n.is_reduction and n.buf.data.reduction_type in self.COLUMN_TYPES
                             for n in self.kernel.nodes):
            return False
        xl = index_symbol(f"x{k - 1}")
        for n in self.kernel.nodes:
            deps = n.reads(k)
            if deps.may_raise or not deps.reads:
                return False
            _, rs = n.vars(k)
            for r in deps.reads:
                e = sympy.expand(r.index)
                if e.coeff(xl) != 1 or e.coeff(rs[-1]) in (0, 1):
                    return False
        return True

    def _column_nest(self, xs, outer, work):
        k = len(outer)
        B, split = self._column_plan(outer, work)
        xl, L = xs[-1], outer[-1]
        if not split:
            coll = f" collapse({k})" if k > 1 else ""
            self.line(f"#pragma omp parallel for{coll}{self._if(work)}")
        for x, r in zip(xs[:-1], outer[:-1]):
            self.open_loop(x, r)
        self.line(f"for (int64_t xb = 0; xb < {self.idx(L)}; xb += {B}) {{")
        self.push()
        self.line(f"const int64_t xn = std::min<int64_t>({B}, {self.idx(L)} - xb);")
        xn = size_symbol("xn")
        for j, node in enumerate(self.kernel.nodes):
            red = node.buf.data
            acc = accumulator(red.reduction_type, red.src_dtype,
                              static_int(product(red.reduction_ranges)))
            a = t = f"acc{j}"
            self.line(f"{acc.ctype} {a}[{B}]; int {a}_nan[{B}];")
            self.line(f"for (int64_t xi = 0; xi < {B}; ++xi) {{ {a}[xi] = {acc.init}; "
                      f"{a}_nan[xi] = 0; }}")
            if split:                 # per-thread partials of the same shape
                t = f"acc{j}_t"
                self.line("#pragma omp parallel")
                self.open_block()
                self.line(f"{acc.ctype} {t}[{B}]; int {t}_nan[{B}];")
                self.line(f"for (int64_t xi = 0; xi < {B}; ++xi) {{ {t}[xi] = {acc.init}; "
                          f"{t}_nan[xi] = 0; }}")
            rs = [f"r{j}_{i}" for i in range(len(red.reduction_ranges))]
            for i, (r, n) in enumerate(zip(rs, red.reduction_ranges)):
                self.open_loop(r, n, "#pragma omp for nowait" if split and i == 0 else None)
            self.open_loop("xi", xn, "#pragma omp simd")
            self.line(f"const int64_t {xl} = xb + xi;")
            self.ranges[index_symbol(xl)] = L
            v = red.inner_fn([index_symbol(x) for x in xs], [index_symbol(r) for r in rs])
            self.line(acc.update.format(acc=f"{t}[xi]", v=v).replace(
                f"{t}[xi]_nan", f"{t}_nan[xi]"))
            self.close_loop()
            for _ in rs:
                self.close_loop()
            if split:
                self.line("#pragma omp critical")
                self.open_loop("xi", xn)
                self.line(acc.combine.format(acc=f"{a}[xi]", o=f"{t}[xi]")
                          + f" {a}_nan[xi] |= {t}_nan[xi];")
                self.close_loop()
                self.close_block()
            self.open_loop("xi", xn)
            self.line(f"const int64_t {xl} = xb + xi;")
            if acc.nan_flag:
                self.line(f"if ({a}_nan[xi]) {a}[xi] = "
                          f"std::numeric_limits<{acc.ctype}>::quiet_NaN();")
            out = self.tmp(f"static_cast<{CTYPES[node.buf.dtype]}>({a}[xi])", node.buf.dtype)
            self.store(node.buf.name, flat_index([index_symbol(x) for x in xs],
                                                 contiguous_strides(red.ranges)), out)
            self.close_loop()
        self.close_loop()
        for _ in xs[:-1]:
            self.close_loop()

    MERGEABLE = ("sum", "prod", "max", "min", "any", "all", "welford")

    def _nodes(self, xs, parallel_outer):
        """Each node's inner loops in order; a pointwise node directly followed by a reduction
        over the same inner ranges is computed inside that reduction's (first) loop, one pass
        over the row instead of two (softmax: exp stored and summed together)."""
        nodes, k, j = self.kernel.nodes, len(xs), 0
        while j < len(nodes):
            node, nxt = nodes[j], nodes[j + 1] if j + 1 < len(nodes) else None
            if (not node.is_reduction and nxt is not None and nxt.is_reduction
                    and nxt.buf.data.reduction_type in self.MERGEABLE
                    and _same(node.inner_ranges(k), nxt.buf.data.reduction_ranges)):
                emit_reduction(self, j + 1, nxt, xs, parallel_outer,
                               prelude=lambda rs, node=node: self.store_node(node, xs + rs))
                j += 2
                continue
            self._node(j, node, xs, parallel_outer)
            j += 1

    def _node(self, j, node, xs, parallel_outer):
        k = len(xs)
        inner = node.inner_ranges(k)
        if not node.is_reduction:
            ys = [f"y{j}_{i}" for i in range(len(inner))]
            for i, (y, r) in enumerate(zip(ys, inner)):
                par = i == 0 and not parallel_outer
                vec = i == len(inner) - 1
                pragma = scalar = None
                if par:
                    pragma, scalar = (f"#pragma omp parallel for{simd}{self._if(product(inner))}"
                                      for simd in ((" simd" if vec else ""), ""))
                elif vec:
                    pragma, scalar = "#pragma omp simd", self.NO_SIMD
                self.open_loop(y, r, pragma, scalar)
            self.store_node(node, xs + [index_symbol(y) for y in ys])
            for _ in ys:
                self.close_loop()
            return
        emit_reduction(self, j, node, xs, parallel_outer)


# ------------------------------------------------------------------ reductions

@dataclass
class Acc:
    ctype: str
    init: str
    update: str          # format with {acc} {v} {i}
    combine: str         # format with {acc} {o}  (merge per-thread partial `o` into `acc`)
    simd: Optional[str] = None   # omp simd reduction operator
    nan_flag: bool = False       # float max/min: vectorizable compare + a NaN-seen flag
    comp: bool = False           # a second sum `{acc}_c` updated in the same loop (welford)


def _lowest(ct, is_float):
    return f"-std::numeric_limits<{ct}>::infinity()" if is_float else \
        f"std::numeric_limits<{ct}>::lowest()"


def _highest(ct, is_float):
    return f"std::numeric_limits<{ct}>::infinity()" if is_float else \
        f"std::numeric_limits<{ct}>::max()"


SMALL_FLOAT_SUM = 4096   # float32 sums up to this length accumulate in float (simd lanes)


def accumulator(rtype, src_dtype, numel=None) -> Acc:
    ct = CTYPES[src_dtype]
    f = src_dtype.is_floating_point
    wide = "double" if f else "int64_t"
    if src_dtype == torch.float32 and numel is not None and numel <= SMALL_FLOAT_SUM:
        wide = "float"
    if rtype == "sum":
        return Acc(wide, "0", "{acc} += {v};", "{acc} += {o};", "+")
    if rtype == "prod":
        return Acc(wide, "1", "{acc} *= {v};", "{acc} *= {o};", "*")
    if rtype == "max":
        if src_dtype == torch.bool:
            return Acc("bool", "false", "{acc} = {acc} || {v};", "{acc} = {acc} || {o};", "||")
        if f:
            return Acc(ct, _lowest(ct, f), "{acc} = {v} > {acc} ? {v} : {acc}; "
                       "{acc}_nan |= ({v} != {v});", "{acc} = pd_max({acc}, {o});", "max", True)
        return Acc(ct, _lowest(ct, f), "{acc} = {v} > {acc} ? {v} : {acc};",
                   "{acc} = pd_max({acc}, {o});", "max")
    if rtype == "min":
        if src_dtype == torch.bool:
            return Acc("bool", "true", "{acc} = {acc} && {v};", "{acc} = {acc} && {o};", "&&")
        if f:
            return Acc(ct, _highest(ct, f), "{acc} = {v} < {acc} ? {v} : {acc}; "
                       "{acc}_nan |= ({v} != {v});", "{acc} = pd_min({acc}, {o});", "min", True)
        return Acc(ct, _highest(ct, f), "{acc} = {v} < {acc} ? {v} : {acc};",
                   "{acc} = pd_min({acc}, {o});", "min")
    if rtype == "any":
        return Acc("bool", "false", "{acc} = {acc} || {v};", "{acc} = {acc} || {o};", "||")
    if rtype == "all":
        return Acc("bool", "true", "{acc} = {acc} && {v};", "{acc} = {acc} && {o};", "&&")
    raise NotImplementedError(rtype)


def emit_reduction(p: CppKernelPrinter, j, node, xs, parallel_outer, prelude=None):
    """`prelude(rindex)`, if given, runs first in the body of the first reduction loop."""
    red: Reduction = node.buf.data
    rtype = red.reduction_type
    rs = [f"r{j}_{i}" for i in range(len(red.reduction_ranges))]
    store_idx = flat_index(xs, contiguous_strides(red.ranges))
    split = not parallel_outer     # too few outer iterations: split the reduction over threads

    def loops(body, clauses=None):
        for i, (r, n) in enumerate(zip(rs, red.reduction_ranges)):
            pragma = None
            if i == 0 and split:
                coll = f" collapse({len(rs)})" if len(rs) > 1 else ""
                pragma = f"#pragma omp for{coll} nowait"
            elif i == len(rs) - 1 and clauses and not split:
                pragma = f"#pragma omp simd {clauses}"
            p.open_loop(r, n, pragma, p.NO_SIMD if pragma and "simd" in pragma else None)
        body([index_symbol(r) for r in rs])
        for _ in rs:
            p.close_loop()

    def reduce_pass(acc_name, acc: Acc, value_fn):
        """acc_name = reduction of value_fn(rindex) over the reduction ranges."""
        p.line(f"{acc.ctype} {acc_name} = {acc.init};")
        if acc.nan_flag:
            p.line(f"int {acc_name}_nan = 0;")
        if acc.comp:
            p.line(f"{acc.ctype} {acc_name}_c = 0;")
        target = acc_name
        if split:
            p.line(f"#pragma omp parallel{p._if(product(red.reduction_ranges))}")
            p.open_block()
            target = acc_name + "_t"
            p.line(f"{acc.ctype} {target} = {acc.init};")
            if acc.nan_flag:
                p.line(f"int {target}_nan = 0;")
            if acc.comp:
                p.line(f"{acc.ctype} {target}_c = 0;")
        clauses = None
        if acc.simd:
            clauses = f"reduction({acc.simd}:{target})" + (
                f" reduction(|:{target}_nan)" if acc.nan_flag else "") + (
                f" reduction(+:{target}_c)" if acc.comp else "")
        def body(r):
            nonlocal prelude
            if prelude is not None:
                prelude(r)
                prelude = None          # welford's second pass reads what the first stored
            p.line(acc.update.format(acc=target, v=value_fn(r)))
        loops(body, clauses)
        if split:
            p.line("#pragma omp critical")
            extra = f" {acc_name}_nan |= {target}_nan;" if acc.nan_flag else ""
            extra += f" {acc_name}_c += {target}_c;" if acc.comp else ""
            p.line("{ " + acc.combine.format(acc=acc_name, o=target) + extra + " }")
            p.close_block()
        if acc.nan_flag:
            p.line(f"if ({acc_name}_nan) {acc_name} = std::numeric_limits<{acc.ctype}>::quiet_NaN();")

    name = f"acc{j}"
    if rtype == "welford":
        # two passes (sum, then squared deviations): vectorizable. Accumulated like a sum
        # (`accumulator`): a float32 row of at most SMALL_FLOAT_SUM elements in float, 16 simd
        # lanes (BERT's add + LayerNorm over 768 in double lanes: 37 us a kernel at one thread
        # against torch.compile's 36, 31 in float); longer rows and other dtypes in double.
        # In float the mean of a row far from zero (300 + randn) is off by many ulps of the
        # spread, which shifts every output: the second pass also sums the deviations, and
        # mean += c / n, m2 -= c * c / n (the corrected two-pass algorithm) take that error out
        # (max error against float64 then below eager's own, which the uncorrected pass was 1.3x).
        numel = product(red.reduction_ranges)
        wide = accumulator("sum", red.src_dtype, static_int(numel)).ctype
        small = wide == "float"
        wdt = torch.float32 if small else torch.float64
        n = p.idx(numel)
        s = Acc(wide, "0", "{acc} += {v};", "{acc} += {o};", "+")
        reduce_pass(name + "_sum", s, lambda r: red.inner_fn(xs, r))
        p.line(f"{wide} {name}_mean = {name}_sum / static_cast<{wide}>({n});")

        def dev(r):
            v = red.inner_fn(xs, r)
            d = p.tmp(f"(static_cast<{wide}>({v}) - {name}_mean)", wdt)
            return d if small else p.tmp(f"({d} * {d})", wdt)
        if small:
            sq = Acc(wide, "0", "{acc} += {v} * {v}; {acc}_c += {v};", "{acc} += {o};", "+",
                     comp=True)
            reduce_pass(name + "_m2", sq, dev)
            p.line(f"{name}_mean += {name}_m2_c / static_cast<{wide}>({n});")
            p.line(f"{name}_m2 = std::max({name}_m2 - {name}_m2_c * {name}_m2_c / "
                   f"static_cast<{wide}>({n}), {wide}(0));")
        else:
            reduce_pass(name + "_m2", s, dev)
        mean = KValue(f"static_cast<{CTYPES[node.buf.dtype]}>({name}_mean)", node.buf.dtype)
        m2 = KValue(f"static_cast<{CTYPES[node.buf.dtype]}>({name}_m2)", node.buf.dtype)
        p.store(node.buf.name, store_idx, p.tmp(str(mean), node.buf.dtype))
        p.store(node.buf.aux.name, store_idx, p.tmp(str(m2), node.buf.dtype))
        return
    if rtype in ("argmax", "argmin"):
        _emit_arg_reduction(p, name, red, xs, rs, split, loops, node, store_idx)
        return
    acc = accumulator(rtype, red.src_dtype, static_int(product(red.reduction_ranges)))
    reduce_pass(name, acc, lambda r: red.inner_fn(xs, r))
    out = p.tmp(f"static_cast<{CTYPES[node.buf.dtype]}>({name})", node.buf.dtype)
    p.store(node.buf.name, store_idx, out)


def _emit_arg_reduction(p, name, red, xs, rs, split, loops, node, store_idx):
    ct = CTYPES[red.src_dtype]
    f = red.src_dtype.is_floating_point
    is_max = red.reduction_type == "argmax"
    init = _lowest(ct, f) if is_max else _highest(ct, f)
    cmp = ">" if is_max else "<"
    lin = flat_index([index_symbol(r) for r in rs], contiguous_strides(red.reduction_ranges))
    # NaN wins (first NaN); otherwise strictly better wins, so ties keep the first index
    better = ("(!pd_isnan({av}) && (pd_isnan({v}) || {v} " + cmp + " {av}))")
    p.line(f"{ct} {name}_v = {init}; int64_t {name}_i = 0; bool {name}_seen = false;")
    tv, ti = name + "_v", name + "_i"
    if split:
        p.line(f"#pragma omp parallel{p._if(product(red.reduction_ranges))}")
        p.open_block()
        tv, ti = name + "_tv", name + "_ti"
        p.line(f"{ct} {tv} = {init}; int64_t {ti} = -1;")

    def body(r):
        v = red.inner_fn(xs, r)
        i = p.idx(lin)
        cond = better.format(av=tv, v=v)
        if split:
            cond = f"({ti} < 0 || {cond})"
        p.line(f"if ({cond}) {{ {tv} = {v}; {ti} = {i}; }}")
    loops(body)
    if split:
        # merge: NaN first, then better value, then smaller index
        p.line("#pragma omp critical")
        p.line(f"{{ if ({ti} >= 0) {{ bool take = false;"
               f" if (pd_isnan({tv}) || pd_isnan({name}_v)) take = pd_isnan({tv}) && "
               f"(!pd_isnan({name}_v) || {ti} < {name}_i);"
               f" else take = {tv} {cmp} {name}_v || ({tv} == {name}_v && {ti} < {name}_i);"
               f" if (!{name}_seen) take = true;"
               f" if (take) {{ {name}_v = {tv}; {name}_i = {ti}; }} {name}_seen = true; }} }}")
        p.close_block()
    p.line(f"(void){name}_seen;")
    out = p.tmp(f"{name}_i", torch.int64)
    p.store(node.buf.name, store_idx, out)


def generate_source(kernels: List[FusedKernel], buffers, vector_math=False, options=Options()
                    ) -> (str, Dict[str, List[str]]):
    """The C++ translation unit for one graph, and each kernel's argument names in order.
    A kernel whose canonical text equals an earlier one's (kernel_printer.canonical_text: its
    buffers and scratch arrays renamed by position) is printed as a one-line function calling
    that one: g++ compiles a repeated block's kernels once (GPT-2 small's 12 layers: 86 kernels,
    10 distinct), and the wrapper still calls every kernel by its own name."""
    parts, arg_names = [_variant_defines(options) + PREAMBLE + (vector_math_decls() if vector_math
                                                                else SCALAR_TRIG)], {}
    first: Dict[str, str] = {}
    for k in kernels:
        pr = CppKernelPrinter(k, buffers, options.omp_schedule)
        text = pr.generate()
        arg_names[k.name] = pr.arg_names
        same = first.setdefault(canonical_text(text, k.name, list(pr.params) + list(k.local)),
                                k.name)
        if same == k.name:
            parts.append(text)
        else:
            head = text.split("\n", 1)[0]          # extern "C" int name(signature) {
            parts.append(f"{head} return {same}({', '.join(pr.arg_names)}); }}")
    return "\n\n".join(parts) + "\n", arg_names
