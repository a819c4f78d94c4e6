"""Shared helpers for executor tests: a counting backend and a fresh cache per test."""
import pytest
import torch

import pydynamo


class CountingBackend:
    """torch.compile-style backend that records every graph it receives and runs it eagerly."""

    def __init__(self):
        self.graphs = []
        self.example_inputs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(example_inputs)
        return gm.forward

    @property
    def count(self):
        return len(self.graphs)

    def op_counts(self):
        return [sum(1 for n in g.graph.nodes if n.op.startswith("call")) for g in self.graphs]


@pytest.fixture
def cnt():
    pydynamo.reset()
    yield CountingBackend()
    pydynamo.reset()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
