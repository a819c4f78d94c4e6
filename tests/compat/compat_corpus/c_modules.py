"""Compat cases: nn.Module — parameters and buffers reached through their source, submodule
calls inlined, Sequential / ModuleList / ModuleDict, forward hooks, module attributes and
configuration branches, functions that take a module. Modules are built with seeded weights."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from compat_case import case, module_case, t

F64 = torch.float64


@module_case(t(4, 8), change=(t(6, 8),))
class LinearRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        return torch.relu(self.fc(x))


@module_case(t(3, 8))
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@module_case(t(2, 8))
class SequentialStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Sigmoid())

    def forward(self, x):
        return self.net(x) + self.net[0](x)


@module_case(t(2, 8))
class ModuleListLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) * (i + 1)
        return x, len(self.layers)


@module_case(t(2, 8), "a", changes=((t(2, 8), "b"), (t(2, 8), "a")))
class ModuleDictSelect(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

    def forward(self, x, key):
        return self.heads[key](x)


@module_case(t(2, 8))
class ModuleDictIterate(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 2)})

    def forward(self, x):
        return {k: m(x) for k, m in self.heads.items()}


@module_case(t(2, 4))
class ParametersDirect(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x @ self.w + self.b


@module_case(t(2, 4))
class BufferUse(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.randn(4))
        self.register_buffer("std", torch.rand(4) + 0.5)

    def forward(self, x):
        return (x - self.mean) / self.std


@module_case(t(2, 3, 8))
class LayerNormModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.ln(x))


@module_case(t(2, 3, 8, 8))
class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


@module_case(t(2, 5, dtype=torch.int64), change=(t(2, 5, dtype=torch.int64),))
class EmbeddingModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.proj = nn.Linear(6, 2, bias=False)

    def forward(self, ids):
        return self.proj(self.emb(ids)).mean(1)


@module_case(t(2, 4, 8))
class AttentionModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)
        self.heads = 2

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        return self.out(y)


@module_case(t(2, 4, 8))
class MultiheadAttentionModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        out, _ = self.mha(x, x, x, need_weights=False)
        return out


@module_case(t(2, 8))
class ConfigBranches(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.use_residual = True
        self.mode = "tanh"
        self.scale = 0.5

    def forward(self, x):
        y = self.fc(x)
        if self.mode == "tanh":
            y = torch.tanh(y)
        if self.use_residual:
            y = y + x
        return y * self.scale


@module_case(t(2, 8))
class NestedSubmodules(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = MLP()
        self.dec = nn.Sequential(nn.Linear(4, 8), nn.ReLU())

    def forward(self, x):
        return self.dec(self.enc(x)) + x


@module_case(t(2, 8))
class SharedWeightsTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(self.fc(x))


@module_case(t(2, 8))
class ParameterIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        reg = sum(p.pow(2).sum() for p in self.parameters())
        n = len(list(self.named_parameters()))
        return self.fc2(self.fc(x)), reg, n


@module_case(t(2, 8))
class ModuleAttributesAndTraining(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            y = y * 0
        return y, self.fc.in_features, self.fc.weight.shape


def _double_output(mod, args, out):
    return out * 2


@module_case(t(2, 8))
class ForwardHookModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.fc.register_forward_hook(_double_output)

    def forward(self, x):
        return self.fc(x) + 1


def _shift_input(mod, args):
    return (args[0] + 1,)


@module_case(t(2, 8))
class ForwardPreHookModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.fc.register_forward_pre_hook(_shift_input)

    def forward(self, x):
        return self.fc(x)


@module_case(t(2, 8))
class ParameterListModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(8, 8)) for _ in range(2)])

    def forward(self, x):
        for w in self.ws:
            x = x @ w
        return x


@module_case(t(2, 8), t(2, 8))
class TwoInputsModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.bil = nn.Bilinear(8, 8, 3)

    def forward(self, a, b):
        return self.bil(a, b), F.cosine_similarity(a, b)


with torch.random.fork_rng():  # module-level weights: same in every engine's process
    torch.manual_seed(11)
    _GLOBAL_LIN = nn.Linear(4, 4)


@case(t(2, 4))
def global_module_call(x):
    return _GLOBAL_LIN(x) * 2


@case(t(3, 6))
def module_created_in_frame_functional(x):
    return nn.functional.relu(x) + nn.ReLU()(x)


@module_case(t(2, 8), change=(t(2, 8, dtype=F64),))
class DtypeDependentModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.rand(8) + 1)

    def forward(self, x):
        return x * self.scale.to(x.dtype)


@module_case(t(2, 6))
class GRUCellModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(6, 5)

    def forward(self, x):
        h = self.cell(x)
        return self.cell(x, h)


@module_case(t(2, 8))
class ChildrenIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x
