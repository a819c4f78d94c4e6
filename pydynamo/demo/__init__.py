"""pydynamo.demo: the embedded default model and `python -m pydynamo.demo`.

`model.py` defines a small transformer (no download, seeded weights); `__main__.py` captures it
with pydynamo.optimize and reports graphs, guards, a recompile on an input dtype change, outputs
against eager, and timings. Importing this package imports torch.
"""
from pydynamo.demo.model import DemoConfig, TinyTransformer, build_model, example_inputs

__all__ = ["DemoConfig", "TinyTransformer", "build_model", "example_inputs"]
