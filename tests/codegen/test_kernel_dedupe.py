"""Kernels of a repeated block are printed (and compiled by g++) once.

codegen/cpp.py generate_source: a kernel whose text equals an earlier one's once its buffers and
scratch arrays are renamed by position (kernel_printer.canonical_text, the rule the Triton
printer already used) becomes a one-line function forwarding to the earlier one. Checked: a
stack of identical blocks prints one body and forwarding lines, results equal eager; blocks that
differ only in a literal (a LayerNorm eps) are not merged; kernels with row scratch
arrays (softmax) merge with their arrays renamed.
"""
import re

import torch
import torch.fx

import codegen


class Block(torch.nn.Module):
    def __init__(self, d, eps=1e-5, softmax=False):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d, eps=eps)
        self.softmax = softmax

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(self.lin(x)))
        if self.softmax:
            h = torch.softmax(h * 0.5, -1)
        return x + h


def _compile(blocks, x):
    m = torch.nn.Sequential(*blocks).eval()
    gm = torch.fx.symbolic_trace(m)
    codegen.counters.clear()
    with torch.no_grad():
        c = codegen.compile_fx(gm, [x])
        torch.testing.assert_close(c(x), m(x))
    assert codegen.counters["cpp_graphs_compiled"] == 1, dict(codegen.counters)
    src = open(c.library_path[:-3] + ".cpp").read()
    bodies = re.findall(r'^extern "C" int (kernel\w+)\(.*\{$', src, re.M)
    forwards = re.findall(r'^extern "C" int (kernel\w+)\(.*\{ return (kernel\w+)\(', src, re.M)
    return bodies, forwards


def test_repeated_blocks_print_one_body():
    torch.manual_seed(0)
    bodies, forwards = _compile([Block(32) for _ in range(4)], torch.randn(8, 32))
    assert len(bodies) == 1 and len(forwards) == 3, (bodies, forwards)
    assert {to for _, to in forwards} == set(bodies)


def test_blocks_that_differ_in_a_literal_are_not_merged():
    torch.manual_seed(1)
    bodies, forwards = _compile([Block(32, eps=1e-5), Block(32, eps=1e-3)], torch.randn(8, 32))
    assert len(bodies) == 2 and not forwards, (bodies, forwards)


def test_kernels_with_row_scratch_arrays_merge():
    torch.manual_seed(2)
    bodies, forwards = _compile([Block(48, softmax=True) for _ in range(3)], torch.randn(4, 48))
    assert forwards and len(bodies) + len(forwards) >= 3, (bodies, forwards)
