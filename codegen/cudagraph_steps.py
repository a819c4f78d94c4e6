"""Steps of CUDA-graph replay: `pydynamo.cudagraph_mark_step_begin()` (torch.compile's
torch.compiler.cudagraph_mark_step_begin).

The replay runner (codegen/cudagraphs.py) hands out the graph's own memory as outputs. Until this
is first called, every call of a compiled function is a step of its own: an output still held
when a later replay overwrites it is invalidated (reading it raises). Once it has been called, a
step lasts until the next call: an output of the current step that a replay of the same step
would overwrite is copied out instead (the caller may still use it: `f(x) + f(y)`, outputs kept
across calls within one iteration), and outputs of earlier steps are invalidated as before.

Invariants: a leaf (imports nothing), so the public function costs no import of the compiler;
`step` only grows (0: never marked).
"""
step = 0


def mark_step_begin() -> None:
    """Begin a new step of CUDA-graph replay (mode="reduce-overhead"): outputs handed out from
    now on stay valid until the next step begins, even when later calls in this step replay the
    same graph (held ones are copied out then); outputs of earlier steps raise when read after a
    later replay has overwritten them. See docs/USER_GUIDE.md, 'GPU and CUDA graphs'."""
    global step
    step += 1
