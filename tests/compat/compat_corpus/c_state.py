"""Compat cases: state around the graph — grad-mode blocks (no_grad, enable_grad,
set_grad_enabled, inference_mode), try/except/finally where nothing raises, global reads and
writes, list / dict / attribute mutations that must be replayed after the graph, in-place tensor
ops on inputs and on module buffers. `before` resets global state so every call sees the same
guards; `observe` reads the state the call left behind (compared against eager)."""
import torch
import torch.nn as nn

import functools

from compat_case import case, default_dtype, module_case, t, under

W = torch.randn(3, generator=torch.Generator().manual_seed(7))
SCALE = 2.5
FLAGS = {"relu": True, "bias": 0.5}
OUT = None
CALLS = 0
LOG = []
TABLE = {}


class State:
    last = None
    count = 0


STATE = State()


@case(t(3, requires_grad=True))
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    z = x * 3
    return y, z, y.requires_grad, z.requires_grad


@case(t(3, requires_grad=True))
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * 2
    return a, b, torch.is_grad_enabled()


@case(t(3, requires_grad=True), False, change=(t(3, requires_grad=True), True))
def set_grad_enabled_arg(x, mode):
    with torch.set_grad_enabled(mode):
        y = x.sin()
    return y, y.requires_grad


@case(t(3))
def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2 + 1
    return y.clone()


@case(t(3, requires_grad=True))
def no_grad_decorated_helper(x):
    return _no_grad_helper(x) + x


@torch.no_grad()
def _no_grad_helper(x):
    return x * 5


@case(t(3), changes=((t(3, requires_grad=True),), (t(3),)))
def requires_grad_guard(x):
    return x * 2, x.requires_grad


@case(t(3))
def try_except_no_raise(x):
    try:
        y = x * 2
    except RuntimeError:
        y = x
    return y + 1


@case(t(3))
def try_finally_no_raise(x):
    out = []
    try:
        out.append(x.cos())
    finally:
        out.append(x.sin())
    return out[0] + out[1]


@case(t(3))
def try_except_else_finally(x):
    try:
        y = x + 1
    except (ValueError, KeyError):
        y = x - 1
    else:
        y = y * 2
    finally:
        z = 3
    return y * z


@case(t(3))
def nested_try_in_loop(x):
    for i in range(2):
        try:
            x = x + i
        finally:
            x = x * 2
    return x


@case(t(3))
def global_tensor_read(x):
    return x * W + SCALE


@case(t(3), change=(t(3, dtype=torch.float64),))
def global_dict_config_read(x):
    y = x.relu() if FLAGS["relu"] else x
    return y + FLAGS["bias"]


def _reset_out():
    global OUT
    OUT = None


@case(t(3), before=_reset_out, observe=lambda: OUT)
def global_tensor_write(x):
    global OUT
    OUT = x * 2
    return x + 1


def _reset_calls():
    global CALLS
    CALLS = 0


@case(t(3), before=_reset_calls, observe=lambda: CALLS)
def global_int_read_write(x):
    global CALLS
    CALLS += 1
    return x * (CALLS + 1)


@case(t(3), before=LOG.clear, observe=lambda: list(LOG))
def global_list_append(x):
    LOG.append(x.sum())
    LOG.append("done")
    return x * 2


@case(t(3), before=TABLE.clear, observe=lambda: dict(TABLE))
def global_dict_write(x):
    TABLE["y"] = x * 3
    TABLE["n"] = 1
    return x - 1


def _reset_state():
    STATE.last = None
    STATE.count = 0


@case(t(3), before=_reset_state, observe=lambda: (STATE.last, STATE.count))
def global_object_attr_write(x):
    STATE.last = x.mean()
    STATE.count = STATE.count + 1
    return x * 2


@case(t(3), [t(3)], change=(t(3), [t(3), t(3)]))
def input_list_mutation(x, lst):
    lst.append(x * 2)
    lst[0] = lst[0] + 1
    return len(lst)  * x


@case(t(3), {"a": t(3)})
def input_dict_mutation(x, d):
    d["b"] = x + d["a"]
    del d["a"]
    return x * 2


@case(t(3), [1, 2, 3])
def input_list_pop_and_return(x, lst):
    v = lst.pop()
    lst.insert(0, v)
    return x * v, lst


@case(t(3))
def local_list_of_tensors_mutation(x):
    acc = []
    for i in range(3):
        acc.append(x + i)
    acc[1] = acc[1] * 10
    return torch.stack(acc)


@case(t(4), t(4))
def inplace_on_two_inputs(x, y):
    x.mul_(2)
    y.copy_(x + 1)
    return (x + y).sum()


@case(t(4, 4))
def inplace_returns_input(x):
    x.clamp_(-0.5, 0.5)
    return x


@case(t(2, 3))
def setitem_with_tensor_index(x):
    idx = torch.tensor([1])
    x[:, idx] = -1.0
    x[x > 1.0] = 1.0
    return x.sum(1)


@module_case(t(2, 4))
class BufferInplaceUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.ones(4))

    def forward(self, x):
        with torch.no_grad():
            self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return x - self.running


@case(t(3, requires_grad=True), changes=(under(torch.no_grad, t(3, requires_grad=True)),
                                         (t(3, requires_grad=True),)))
def grad_mode_guard(x):
    y = x * 2
    return y, y.requires_grad


@case(t(3), changes=(under(functools.partial(default_dtype, torch.float64), t(3)), (t(3),)))
def default_dtype_guard(x):
    return x + torch.ones(3), torch.zeros(2).dtype


@case(t(3), "a", changes=tuple((t(3), m) for m in "bcdefghijk"))
def recompile_limit(x, mode):
    # every new string is a new EQUALS guard: entries pile up to the limit (8), then calls run eagerly
    return x * len(mode) + ord(mode)
