"""Helpers for the executor's dynamic-shape tests: a backend that records graphs with their example
inputs, the frames translated (guards), and a fresh cache and automatic-dynamic memory per test."""
import pytest
import torch

import pydynamo
from pydynamo import convert_frame


class Recorder:
    """Counting backend (runs each graph as is) + observer of every translation."""

    def __init__(self):
        self.graphs, self.examples, self.frames, self.recompiles = [], [], [], []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.examples.append(list(example_inputs))
        return gm.forward

    def observe(self, item):
        if hasattr(item, "guards") and hasattr(item, "graphs"):
            self.frames.append(item)
        elif type(item).__name__ == "RecompileExplanation":
            self.recompiles.append(item)

    @property
    def count(self) -> int:
        return len(self.graphs)

    def int_inputs(self, i: int = -1) -> list:
        """Example values of graph i's int placeholders (one per symbol the graph reads)."""
        return [x for x in self.examples[i] if type(x) is int]

    def shape_guards(self, i: int = -1) -> list:
        """Texts of frame i's SHAPE_ENV relations."""
        return [t for g in self.frames[i].guards if g.kind.value == "SHAPE_ENV" for t in g.expected.texts]

    def tensor_specs(self, i: int = -1) -> dict:
        return {g.source.name(): g.expected for g in self.frames[i].guards if g.kind.value == "TENSOR_MATCH"}


@pytest.fixture
def rec():
    pydynamo.reset()
    convert_frame.COUNTERS.clear()
    r = Recorder()
    convert_frame.RECORDERS.append(r.observe)
    yield r
    convert_frame.RECORDERS.remove(r.observe)
    pydynamo.reset()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
