"""What a user can do about a graph break: one-line hints by stable reason code, and the explicit
`pydynamo.graph_break()`.

Reason codes are raised by the executor (`Unsupported(code, message)`); this table is the single
place that turns one into advice, so the wording stays consistent across explain(), logs and
fullgraph errors. A code without an entry gets no hint rather than a vague one.
"""
from __future__ import annotations

import re

HINTS: dict[str, str] = {
    "print": "print() runs outside the graph; remove it from the hot path or log after the call",
    "explicit_break": "pydynamo.graph_break() asked for this break",
    "tensor_branch": "branching on a tensor value: use torch.where, or move the test out of the compiled code",
    "tensor_item": "reading a tensor as a Python number: keep it a tensor (e.g. x.sum() instead of x.sum().item())",
    "data_dependent": "the result is a Python value computed from tensor data (torch.compile breaks here too): "
                      "keep it a tensor, e.g. torch.isclose(a, b).all()",
    "tensor_tolist": "tolist() reads tensor data: keep the values as a tensor",
    "tensor_numpy": "numpy() leaves the graph: use torch operations instead of numpy",
    "dynamic_output_shape": "the output shape depends on tensor values: use a fixed-shape alternative (e.g. torch.where)",
    "disabled": "the callee is marked pydynamo.disable; remove the mark to compile it",
    "torch_fn": "this torch function cannot be put in a graph; call it outside the compiled function",
    "unknown_value": "calls into C functions of other libraries (numpy, ...) run outside the graph: use torch ops",
    "unsupported_opcode": "this Python construct is not traced; move it out of the compiled function",
    "exception": "raising an exception ends the graph; check inputs before the compiled call",
    "constant_raises": "this Python operation raises; the exception runs outside the graph",
    "format_tensor": "formatting a tensor reads its data: format x.shape or x.dtype, not the tensor",
    "import": "import modules at the top of the file, not inside the compiled function",
    "side_effect": "this call changes state outside the graph; move it out of the compiled function",
    "meta_failed": "the op failed on the given shapes/dtypes; check that it runs eagerly",
    "internal_error": "a pydynamo bug: please report it (set PYDYNAMO_VERBOSE=1 for the traceback)",
    "not_constant": "a tensor's value was needed as a Python value: keep it a tensor (torch.where, torch.sort)",
}

# tracker reprs that can end up in executor messages, in the user's words
_TRACKER = re.compile(r"TensorVariable\([^()]*(?:\([^()]*\)[^()]*)*\)")


def user_message(message: str) -> str:
    return _TRACKER.sub("a tensor", message)


def hint_for(reason_code: str, given: str = "") -> str:
    return given or HINTS.get(reason_code, "")


def graph_break() -> None:
    """Force a graph break here: code before and after is compiled as separate graphs."""


graph_break.__pydynamo_graph_break__ = True
