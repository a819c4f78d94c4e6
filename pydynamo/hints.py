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
    "logging": "a logging call runs outside the graph: log outside the compiled function, or in a helper "
               "marked pydynamo.disable",
    "lru_cache": "the call runs in Python with its cache (only a pure call returning a constant is inlined)",
    "explicit_break": "pydynamo.graph_break() asked for this break",
    "error_on_graph_break": "call pydynamo.error_on_graph_break with a constant True or False",
    "tensor_branch": "branching on a tensor value: use torch.where, or move the test out of the compiled code",
    "tensor_item": "reading a tensor as a Python number: keep it a tensor (e.g. x.sum() instead of x.sum().item())",
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
    "region_template": "a repeated module's recorded trace could not be reused for this instance: "
                       "set pydynamo.config.region_templates = False to trace every instance "
                       "(and please report it)",
    "context_generator": "write the context manager as a class with __enter__/__exit__ to compile the code inside it",
    "autocast_context": "use `with torch.autocast(...)` or the decorator form; torch.autocast's own methods "
                        "are not traced line by line",
    "not_constant": "a tensor's value was needed as a Python value: keep it a tensor (torch.where, torch.sort)",
    "data_dependent": "the result depends on tensor values (torch.compile breaks here too): keep it a tensor "
                      "(torch.where, torch.isclose(a, b).all())",
    "tensor_data_ptr": "data_ptr() is known only at run time: compare tensors, not their addresses",
    "tensor_storage": "storage access is not traced: use tensor operations",
    "tensor_storage_offset": "storage_offset() is known only at run time (an input view may start anywhere in its storage): slice or narrow instead of as_strided with an offset",
    "tensor_hook": "register hooks outside the compiled function",
    "tensor_backward": "call backward() on the compiled function's output, outside it",
    "tensor_attr": "this tensor attribute is not traced: read it outside the compiled function",
    "tensor_setattr": "keep extra values in local variables, not as attributes of a tensor",
    "tensor_delitem": "`del x[i]` on a tensor is not traced: build the result with indexing or torch.cat",
    "tensor_constant": "pass the tensor to the compiled function as an argument",
    "format_traced": "format Python values (x.shape, a number), not traced values, in compiled code",
    # calls and values the executor does not model
    "call": "calling this object is not traced: call it outside the compiled function, or wrap it with "
            "pydynamo.allow_in_graph if it only does tensor work",
    "bad_call": "the arguments do not match the function's signature: check the call (it raises eagerly too)",
    "call_ex": "f(*args, **kwargs) with these arguments is not traced: pass the arguments explicitly",
    "builtin": "this builtin is not traced with these arguments: call it outside the compiled function",
    "builtin_method": "this method of a builtin type is not traced: compute the value outside the compiled function",
    "const_method": "this method of a constant is not traced: compute the value outside the compiled function",
    "binary_op": "this operator is not traced for these types: use tensors or Python numbers",
    "compare": "this comparison is not traced: compare tensors with torch ops (torch.eq, torch.lt)",
    "python_type": "this value's type is not traced: pass tensors, numbers, lists, tuples or dicts",
    "graph_arg": "pass tensors, numbers, or lists and tuples of them to torch operations",
    "id": "id() of a traced value is not known while compiling: avoid id() in compiled code",
    "intrinsic": "this Python construct is not traced; move it out of the compiled function",
    "itertools": "this itertools function is not traced: use a loop or a list comprehension",
    "generator": "generators and coroutines are not traced: build a list instead",
    "recursion": "recursive calls are not traced: rewrite with a loop, or mark the function pydynamo.disable",
    "user_class": "objects of this class cannot be created in compiled code: create them outside",
    "model_output": "return a tuple or a dict from the model instead of this output type",
    # attributes
    "getattr": "this attribute lookup is not traced: read the value outside the compiled function",
    "no_attribute": "reading this attribute is not traced: read it outside the compiled function",
    "property": "this property is not traced: read it outside the compiled function",
    "descriptor": "this attribute is a custom descriptor: read it outside the compiled function",
    "namedtuple_attr": "read namedtuple fields by name (t.field) or index",
    "custom_getattr": "classes with __getattr__ are not traced: use plain attributes",
    "custom_getattribute": "classes with __getattribute__ are not traced: use plain attributes",
    "custom_setattr": "classes with __setattr__ are not traced: use plain attributes",
    "setattr": "setting this attribute is not traced: keep the value in a local variable",
    "delattr": "deleting an attribute of an object from outside the compiled function is not traced: "
               "set the attribute to None instead",
    "custom_delattr": "classes with a C-level __delattr__ are not traced: use plain attributes",
    "vars": "vars() is traced on objects made in the compiled function only: read the attributes by name",
    "numpy": "numpy runs in the graph only on numbers: use torch operations on tensors",
    "autograd_function": "a custom autograd.Function is traced under torch.no_grad() only: call it "
                         "outside the compiled function, or without gradients",
    "sym_attr": "this attribute of a symbolic size is not traced: use the size as an int",
    "super": "call super() inside methods only, with the usual two forms",
    # containers
    "dict_key": "use strings, numbers or enums as dict keys in compiled code",
    "dict_merge": "merge dicts with a loop over items in compiled code",
    "dict_method": "this dict method is not traced: use indexing, items(), keys(), values(), get()",
    "dict_subclass": "use a plain dict (or OrderedDict, defaultdict) in compiled code",
    "dict_values": "this dict view is not traced: convert it with list() first",
    "dict_view_method": "this method of a dict view is not traced: convert the view with list() first",
    "dict_view_escape": "convert dict views with list() before they leave the compiled function",
    "user_dict": "use a plain dict in compiled code",
    "list_method": "this list method is not traced: use append, extend, pop, indexing or a comprehension",
    "set_method": "this set method is not traced: use a list, or a set of constants",
    "set_item": "sets of tensors are not traced: use a list",
    "frozenset": "use a tuple instead of this frozenset in compiled code",
    "unpack": "unpack a list, a tuple, a dict or a tensor: this value cannot be iterated while compiling",
    "index": "index with ints, slices or tensors",
    # Python raising an exception in the traced code (eager raises the same)
    "index_error": "this indexing raises IndexError: the code runs in Python, as eagerly",
    "key_error": "this lookup raises KeyError: the code runs in Python, as eagerly",
    "type_error": "this operation raises TypeError: the code runs in Python, as eagerly",
    "value_error": "this operation raises ValueError: the code runs in Python, as eagerly",
    "name_error": "the name is not defined (eager raises NameError too): check the name",
    # variables
    "unbound_local": "a local is read before it is assigned: assign it on every path",
    "unbound_cell": "a closure variable is read before it is assigned: assign it first",
    "empty_cell": "a closure variable is read before it is assigned: assign it first",
    "closure_escape": "a function defined in the compiled code escapes it: define it at module level",
    "closure_store": "assigning an enclosing function's variable (nonlocal) is not traced: return the value",
    "deref_store": "assigning an enclosing function's variable (nonlocal) is not traced: return the value",
    "global_store": "assigning a global is not traced: return the value, or set it outside",
    # modules
    "module_call": "call the module (module(x)), not this method of it",
    "module_ctor": "create modules outside the compiled function (in __init__)",
    "module_hooks": "modules with hooks are not traced: remove the hooks, or call the module outside",
    "module_setattr": "set module attributes outside the compiled function",
    # global state
    "grad_mode": "use torch.no_grad() / enable_grad() / set_grad_enabled() as with-blocks",
    "inference_mode": "use torch.inference_mode() as a with-block",
    "grad_mode_leak": "change grad mode with a with-block (with torch.no_grad():), not a bare call",
    "context_decorator": "use the context manager as a with-block, not as a decorator",
    "autocast": "use torch.autocast with constant arguments on cpu or cuda, and call modules' forward "
                "inside it (other forms of autocast are not traced)",
    "autocast_leak": "leave every torch.autocast region the function enters before it returns",
    "functorch": "under torch.func transforms (vmap, grad) the function runs eagerly: compile outside them",
    "pytree": "torch.utils._pytree is traced over tuples, lists, dicts and None without is_leaf: flatten "
              "other structures outside the compiled function",
    "vmap": "torch.vmap traces a pure tensor function returning tensors: keep in-place ops, chunk_size and "
            "values that outlive the call out of it (it runs eagerly here)",
    "environ": "read os.environ with a str key (os.environ[k], .get(k)), or read it outside the compiled function",
    "copy": "copy.copy/deepcopy of this value is not traced: copy it outside the compiled function, or clone tensors",
    "torch_function": "__torch_function__ overrides and modes run outside the graph: call them outside the compiled function",
    "tuple_new": "build the tuple subclass outside the compiled function, or use a plain tuple or namedtuple",
    "iter_0d": "iterating over a 0-d tensor raises TypeError (as eagerly): index or reshape it first",
    "type3": "type(name, bases, dict) creates a class: create it outside the compiled function",
    "torch_global": "change this torch setting outside the compiled function",
    "distributed": "torch.distributed calls run in Python between graphs (DDP and FSDP2 need "
                   "nothing: their communication stays outside the graphs)",
    "meta_error": "the op failed on the given shapes/dtypes; check that it runs eagerly",
    "meta_no_method": "this tensor method is not traced: use the torch function form",
    "meta_unsupported": "this op's output metadata is not known: call it outside the compiled function",
    # pydynamo's own limits
    "python_version": "run on CPython 3.11 or 3.12",
    "reconstruct": "a value made in the compiled code cannot cross this graph break: move the break "
                   "(print, .item()) after the value's last use",
    "unbreakable": "no graph break is possible here: move the unsupported call to its own statement",
    "layout": "a pydynamo limitation with this function's arguments: please report it",
    "name_clash": "a pydynamo limitation with this function's variable names: please report it",
    "odd_name": "a pydynamo limitation with this function's variable names: please report it",
}

# Breaks the user asked for (pydynamo.graph_break(), a call of a pydynamo.disable function): logged
# and reported by explain(), never warned about. "exception" (constructing an exception object)
# is where a `raise` begins: the raise statement on the same line warns, once.
NO_WARNING = frozenset({"explicit_break", "disabled", "exception"})

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


# a tracker class named without its value (a list of argument kinds): a plain noun
_BARE = re.compile(r"'?\b(\w*)Variable\b'?")
_NOUNS = {"Tensor": "tensor", "Constant": "constant", "List": "list", "Tuple": "tuple", "ConstDict": "dict",
          "UserDefinedObject": "object", "UserFunction": "function", "Builtin": "builtin",
          "NNModule": "module", "Opaque": "C value", "SymNode": "symbolic int"}


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
    message = _BARE.sub(lambda m: _NOUNS.get(m.group(1), "value"), message)
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


# Tensor methods that read data: a graph break (data-dependent) whose reason code names what was
# asked (variables/tensor.py raises it; meta_failure names an op of this kind by it).
DATA_METHODS = {"item": "tensor_item", "tolist": "tensor_tolist", "numpy": "tensor_numpy",
                "__bool__": "tensor_branch", "nonzero": "dynamic_output_shape",
                "unique": "dynamic_output_shape", "masked_select": "dynamic_output_shape",
                "unique_consecutive": "dynamic_output_shape", "argwhere": "dynamic_output_shape",
                "bincount": "dynamic_output_shape", "repeat_interleave": "dynamic_output_shape",
                "data_ptr": "tensor_data_ptr", "untyped_storage": "tensor_storage",
                # where an input view starts in its storage varies per call and is not guarded
                "storage_offset": "tensor_storage_offset",
                "register_hook": "tensor_hook", "backward": "tensor_backward",
                "__index__": "tensor_item", "__int__": "tensor_item", "__float__": "tensor_item",
                "equal": "data_dependent", "is_nonzero": "data_dependent",
                "allclose": "data_dependent"}


def meta_failure(name: str, exc: Exception) -> tuple[str, str]:
    """(reason code, message) for an op whose output metadata could not be computed."""
    if DATA_METHODS.get(name.split(".")[-1]) == "dynamic_output_shape":
        return "dynamic_output_shape", f"torch.{name}: the output shape depends on the tensor's values"
    first = str(exc).splitlines()[0] if str(exc) else ""
    # the op reads tensor data while computing its metadata (torch.compile breaks there too:
    # "Data dependent operator", "Dynamic shape operator")
    if "item() cannot be called on meta tensors" in first:
        return "data_dependent", f"{name}: reads a tensor's value (a size or scalar argument given as a tensor)"
    if "torch.nonzero()" in first and isinstance(exc, NotImplementedError):
        return "dynamic_output_shape", f"{name}: the output shape depends on the tensor's values (a boolean mask)"
    return "meta_failed", f"{name}: cannot compute output metadata ({type(exc).__name__}: {first})"


def hint_for(reason_code: str, given: str = "") -> str:
    return given or HINTS.get(reason_code, "")


def graph_break() -> None:
    """Force a graph break here: the code before and after it is compiled as separate graphs
    (explain() reports it as [explicit_break]; no warning, since it was asked for). Eager
    Python (outside pydynamo.optimize) ignores it."""


graph_break.__pydynamo_graph_break__ = True
