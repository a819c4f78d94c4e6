"""The start of a fresh interpreter's script for the warm-start tests (test_warm_start.py,
test_warm_start_training.py): the module at argv[1] imported as `mod`, pydynamo with the warm
cache on against the cache dir argv[2], its version key pinned to argv[3] (pydynamo's files
change under a tree being edited), and every translation counted: `traced` (qualnames),
`origins` (for a resume function, the qualname of the function it continues)."""

PRELUDE = """
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("warm_fresh_model", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
import pydynamo
from pydynamo import convert_frame, stages, warm_cache
from pydynamo.code_origins import origin_of
warm_cache._versions[:] = [sys.argv[3]]
pydynamo.config.cache_dir = sys.argv[2]
pydynamo.config.warm_start = True
traced, origins, real = [], [], convert_frame.translate
def counting(code, *args, **kwargs):
    traced.append(code.co_qualname)
    origins.append(origin_of(code)[0].co_qualname if origin_of(code) else None)
    return real(code, *args, **kwargs)
convert_frame.translate = counting
"""
