"""What a user reads about a graph break: one-line hints by stable reason code, messages in the
user's words (`user_message`: no tracker reprs, no object ids; `opcode_message`: the Python
construct, not the bytecode; `meta_failure`), and the explicit `pydynamo.graph_break()`.

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
    "context_generator": "write the context manager as a class with __enter__/__exit__ to compile the code inside it",
    "autocast_context": "cast explicitly (x.to(torch.bfloat16)) instead of using torch.autocast in compiled code",
    "not_constant": "a tensor's value was needed as a Python value: keep it a tensor (torch.where, torch.sort)",
}

# Executor messages are f-strings over variable trackers; their reprs are internal names
# (`UserDefinedObjectVariable(Rec)`). Each is rewritten to the user's words, innermost first.
_TENSOR = re.compile(r"TensorVariable\([^()]*(?:\([^()]*\)[^()]*)*\)")
_TRACKER = re.compile(r"\b(\w*)Variable\(([^()]*)\)")
_IDS = re.compile(r"\s+at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{6,}")
_WORDS = {
    "Constant": "{}", "Object": "{}", "Builtin": "builtin {}", "TorchFunction": "torch function {}",
    "UserFunction": "function {}", "NestedUserFunction": "function {}", "NNModule": "a {} module",
    "UserDefinedObject": "a {} object", "UserDefinedClass": "class {}", "Opaque": "a {} value",
    "SymNode": "a symbolic int", "List": "a list", "Tuple": "a tuple", "ConstDict": "a dict",
    "ListIterator": "an iterator", "UserMethod": "a method", "Set": "a set", "Size": "a torch.Size",
}


def _words(m: re.Match) -> str:
    kind, inner = m.group(1), m.group(2).strip()
    form = _WORDS.get(kind)
    if form is None:
        return "a traced value"
    return form.format(inner.split(",")[0].strip()) if "{}" in form else form


def user_message(message: str) -> str:
    """`message` without tracker reprs or object ids (explain(), logs, warnings, errors)."""
    message = _TENSOR.sub("a tensor", message)
    for _ in range(8):  # nested reprs: one level per pass
        new = _TRACKER.sub(_words, message)
        if new == message:
            break
        message = new
    return _IDS.sub("", message)


# opcodes the executor declines, as the Python construct a user wrote
CONSTRUCTS: dict[str, str] = {
    "RAISE_VARARGS": "a `raise` statement", "RERAISE": "re-raising an exception",
    "PUSH_EXC_INFO": "an `except` handler", "POP_EXCEPT": "an `except` handler",
    "CHECK_EXC_MATCH": "an `except` clause", "CHECK_EG_MATCH": "an `except*` clause",
    "PREP_RERAISE_STAR": "an `except*` clause", "WITH_EXCEPT_START": "a with-block left by an exception",
    "LOAD_ASSERTION_ERROR": "a failing `assert`", "SEND": "`yield from` / `await`",
    "GET_AWAITABLE": "`await`", "BEFORE_ASYNC_WITH": "`async with`", "GET_AITER": "`async for`",
    "GET_YIELD_FROM_ITER": "`yield from`", "MATCH_CLASS": "a `match` statement",
    "MATCH_KEYS": "a `match` statement", "MATCH_MAPPING": "a `match` statement",
    "MATCH_SEQUENCE": "a `match` statement", "GET_LEN": "a `match` statement",
    "IMPORT_STAR": "`from ... import *`",
}


def opcode_message(opname: str, reason: str) -> str:
    construct = CONSTRUCTS.get(opname)
    if construct is None:
        return f"this Python construct is not traced (bytecode {opname}: {reason})"
    return f"{construct} is not traced: it runs in Python ({reason})"


def meta_failure(name: str, exc: Exception) -> tuple[str, str]:
    """(reason code, message) for an op whose output metadata could not be computed."""
    from pydynamo.executor.variables.tensor import _DATA_METHODS  # ops that read tensor data
    if _DATA_METHODS.get(name.split(".")[-1]) == "dynamic_output_shape":
        return "dynamic_output_shape", f"torch.{name}: the output shape depends on the tensor's values"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return "meta_failed", f"{name}: cannot compute output metadata ({type(exc).__name__}: {first})"


def hint_for(reason_code: str, given: str = "") -> str:
    return given or HINTS.get(reason_code, "")


def graph_break() -> None:
    """Force a graph break here: code before and after is compiled as separate graphs."""


graph_break.__pydynamo_graph_break__ = True
