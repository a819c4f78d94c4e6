"""Values computed from a graph's parameters alone, kept across calls (issue 18): a parameter's
zero-padded copy for an aligned GEMM (codegen/gemm.py), the weights of sibling products
concatenated into one (codegen/gemm_group.py).

A `Derivation` is an extern argument of the generated wrapper: `derive(d, arg3, arg5)` returns
d's value for those inputs. Invariants:
  * the value is recomputed exactly when some source is not the tensor contents it was computed
    from: each source's stamp is (its storage object, its data address, its version counter).
    The storage object is compared by address while the derivation holds a weak reference to it
    (torch's weak storage reference keeps the object's memory from being reused, so an equal
    address is the same storage, alive); the data address catches a storage resized or swapped
    in place, the version any in-place write (an optimizer step, `copy_`, `fill_`). So
    `p.data = new` (a new storage, the version kept), `with no_grad(): p.mul_(2)` and a
    different model's parameters all recompute; nothing else can change the sources' bytes;
  * the value is recomputed in place: its address never changes once made, so a CUDA graph
    captured reading it stays valid, and the CUDA-graph runner calls `refresh(args)` before
    each replay (codegen/cudagraphs.py: the wrapper's host code does not run then);
  * sources are graph inputs whose example values were parameters (nn.Parameter: the tensors a
    model keeps from call to call) of static layout; the value is read only by matrix
    products, never returned, written or reused as another buffer's memory (codegen/wrapper.py
    reuses only products' results);
  * pickled (the warm cache keeps the wrapper's extern arguments) without its value;
  * derivations of the same kind over the same source storages (two graphs of one model) share
    one value and its stamps (`_shared_value`): before every use each checks the stamps
    against its own sources, so a shared value is never read holding another model's bytes;
  * an inference tensor (made under torch.inference_mode) has no version counter, so a
    derivation over one is never known fresh: it is recomputed at every call (correct, slower).
Costs: three attribute reads per source and call (~0.25 us); the memory of the value, held as
long as the compiled graph (a concatenated weight doubles its sources' memory: the rule that
makes one says when that pays, codegen/gemm_group.py).
"""
from __future__ import annotations

import weakref
from typing import List, Optional, Sequence, Tuple

import torch

_weak_ref = torch.UntypedStorage._weak_ref
_free_weak = torch.UntypedStorage._free_weak_ref

View = Tuple[Tuple[int, ...], Tuple[int, ...], int]     # size, stride, storage offset


class _Value:
    """A derived tensor and the stamps of the sources its bytes were computed from (one per
    source: storage weak reference, data address, version). Shared by the derivations that
    make the same thing (`_SHARED`), so the stamps describe the tensor's current contents
    whoever wrote it last."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        self.stamps: List[Tuple[int, int, int]] = []

    def stamp(self, sources) -> None:
        self.__del__()
        self.stamps = [(_weak_ref(s.untyped_storage()), s.data_ptr(), _version(s))
                       for s in sources]

    def __del__(self, _free=_free_weak):     # (bound now: module globals go at exit)
        for ref, _, _ in self.stamps:
            _free(ref)
        self.stamps = []


class Derivation:
    """`kind` "pad": source 0's `views[0]` zero-padded to `shape`; "cat": the sources (whole)
    concatenated along dim 0. `positions`: the graph inputs the sources are (for `refresh`)."""

    def __init__(self, kind: str, positions: Sequence[int], shape: Sequence[int],
                 views: Sequence[Optional[View]] = ()):
        if kind not in ("pad", "cat"):
            raise ValueError(f"derivation {kind!r}")
        self.kind = kind
        self.positions = tuple(positions)
        self.shape = tuple(shape)
        self.views = tuple(views) or (None,) * len(self.positions)
        self.value: Optional[_Value] = None
        self.recomputed = 0      # (tests, benchmarks: how often the sources had moved)

    def __getstate__(self):
        return {"kind": self.kind, "positions": self.positions, "shape": self.shape,
                "views": self.views}

    def __setstate__(self, state):
        self.__init__(**state)

    def __repr__(self):
        return f"Derivation({self.kind!r}, inputs {list(self.positions)}, {list(self.shape)})"

    def __call__(self, *sources: torch.Tensor) -> torch.Tensor:
        if self.value is None or not _fresh(self.value.stamps, sources):
            self._compute(sources)
        return self.value.tensor

    def refresh(self, args) -> None:
        """Before a CUDA-graph replay: the value for the call's arguments, in place."""
        self(*(args[p] for p in self.positions))

    def _compute(self, sources) -> None:
        if self.value is None:
            if sources[0].is_cuda and torch.cuda.is_current_stream_capturing():
                # its memory would be the capture pool's, which later captures reuse (the
                # runner's warm-up calls make it first; a capture that gets here fails, and
                # the runner launches that graph plainly)
                raise RuntimeError("pydynamo: a derived value first made inside a CUDA-graph "
                                   "capture")
            self.value = _shared_value(self, sources)
        out = self.value.tensor
        with torch.no_grad():
            if self.kind == "cat":
                torch.cat(sources, 0, out=out)
            else:
                src = sources[0]
                if self.views[0] is not None:
                    size, stride, offset = self.views[0]
                    src = src.as_strided(size, stride, src.storage_offset() + offset)
                out[tuple(slice(0, n) for n in src.shape)].copy_(src)
        self.value.stamp(sources)
        self.recomputed += 1


def _fresh(stamps, sources) -> bool:
    for s, (ref, ptr, version) in zip(sources, stamps):
        try:
            if s._version != version:
                return False
        except RuntimeError:        # an inference tensor: no version, so never known fresh
            return False
        if s.data_ptr() != ptr or s.untyped_storage()._cdata != ref:
            return False
    return len(stamps) == len(sources)


def _version(t) -> int:
    try:
        return t._version
    except RuntimeError:        # an inference tensor (see _fresh)
        return -1


# values by what they are made of: the derivations of several graphs over the same parameters
# (a decode loop's prefill and step graphs) share one _Value, so the memory is paid once; an
# entry lives as long as some derivation holds it. Its stamps say whose bytes it holds: a
# derivation whose sources moved (written, or another model's) recomputes it in place, and
# another sharer whose sources then differ from the stamps recomputes it again before its own
# use (the bytes each call reads are always its own sources', in stream order).
_SHARED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _shared_value(d: Derivation, sources) -> _Value:
    key = (d.kind, d.shape, d.views, sources[0].dtype, sources[0].device,
           tuple((s.untyped_storage()._cdata, s.data_ptr()) for s in sources))
    value = _SHARED.get(key)
    if value is None:
        value = _SHARED[key] = _Value(torch.zeros(d.shape, dtype=sources[0].dtype,
                                                  device=sources[0].device))
    return value


def derive(d: Derivation, *sources: torch.Tensor) -> torch.Tensor:
    """The wrapper's extern: d's value for these sources (recomputed in place if they moved)."""
    return d(*sources)


def derivations_of(consts) -> List[Derivation]:
    """The derivations among a wrapper's extern arguments (its `_consts`)."""
    return [c for c in consts if isinstance(c, Derivation)]
