"""A torch.library custom op with a Python kernel, for the semantics corpus (s_more): kept out of
the corpus package so the harness's frame counter does not count its kernel's frames as case
code. The kernel reads tensor data (`tolist()`), as transformers' MoE grouped-matmul fallback
does: the op belongs in the graph whole, its kernel runs in Python, never compiled."""
import torch


@torch.library.custom_op("pydynamo_semantics::scale_rows", mutates_args=())
def scale_rows(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    for i, s in enumerate(scales.tolist()):
        out[i] = out[i] * s
    return out


@scale_rows.register_fake
def _(x, scales):
    return torch.empty_like(x)
