"""The transformers model zoo (issue 17): tiny models nobody here wrote, one forward each, under an
engine, with the graphs and breaks it took. One concept here: how a zoo model is built, fed and
measured; scripts/model_zoo.py (the whole zoo) and tests/zoo/test_zoo.py (a fixed subset in CI)
drive it.

    python tests/zoo/zoo_runner.py --engine pydynamo|torch [--backend eager|codegen]
                                   [--options JSON] [--layers N] MODEL_CLASS [MODEL_CLASS ...]

prints one JSON line per model class, in order. pydynamo's backend is "eager" unless --backend
names another; --options (a JSON object: codegen.Options fields, e.g. '{"compile_regions": true}')
go to the codegen backend, and its `region_*` counters come back in the row (`regions`);
--layers sets every layer-count knob (default 1; level C outlines only repeated layers). Per model: the config class's defaults with every
size shrunk (hidden 32, 1 layer, 2 heads, vocab 99, images 32 px, ... `tiny_config`), weights
seeded, eval mode, a seeded batch of 1 fed by the first of `candidate_inputs` that eager runs.
Eager runs first; a model eager cannot build or run is "nobuild" (not ours to judge). Then the
engine's explain runs the same forward: graph count, break reasons (pydynamo's GraphBreak records
as "reason @ file:line"; torch.compile's as its explain() gives them) and whether every tensor of
the output equals eager's (`same`; torch.compile's from a second, compiled call: transformers
takes other paths when it sees a compiler, so "wrong" under both engines is the library's).
Both engines install a PEP 523 hook, so an engine runs in its own process (the driver's job);
torch.compile (torch._dynamo.explain) is the reference and is only imported here, never by
pydynamo.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Size knobs of transformers configs, shrunk. A key is set only where the default config has it.
TINY_INT = {
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "emb_dim": 32,
    "embedding_size": 32, "word_embed_proj_dim": 32, "projection_dim": 32, "d_embed": 32,
    "num_hidden_layers": 1, "num_layers": 1, "n_layer": 1, "n_layers": 1, "encoder_layers": 1,
    "decoder_layers": 1, "num_decoder_layers": 1, "num_encoder_layers": 1,
    "num_attention_heads": 2, "n_head": 2, "n_heads": 2, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "num_heads": 2, "num_key_value_heads": 1,
    "intermediate_size": 37, "ffn_dim": 37, "encoder_ffn_dim": 37, "decoder_ffn_dim": 37,
    "d_ff": 37, "n_inner": 37, "hidden_dim": 37, "d_kv": 16, "head_dim": 16,
    "vocab_size": 99, "max_position_embeddings": 64, "n_positions": 64, "max_seq_len": 64,
    "image_size": 32, "patch_size": 8, "num_experts": 4, "num_local_experts": 4,
    "moe_intermediate_size": 16, "num_experts_per_tok": 2,
}
TEXT_LEN = 8
BATCH = 1


LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers",
              "decoder_layers", "num_decoder_layers", "num_encoder_layers")


def _tiny_value(key, value, layers=1):
    if isinstance(value, bool) or value is None:
        return value
    if key in TINY_INT and isinstance(value, int):
        small = layers if key in LAYER_KEYS else TINY_INT[key]
        return small if value > small else value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if key in ("depths", "num_layers_per_stage", "layers", "num_blocks"):
            return [layers] * len(value)
        if key in ("hidden_sizes", "embed_dims", "channels", "dims", "widths", "embed_dim"):
            return [16 * (i + 1) for i in range(len(value))]
        if key in ("num_heads", "num_attention_heads", "heads"):
            return [1] * len(value)
    return value


def tiny_config_dict(d: dict, layers: int = 1) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and ("model_type" in v or k.endswith("_config")):
            out[k] = tiny_config_dict(v, layers)
        else:
            out[k] = _tiny_value(k, v, layers)
    if "layer_types" in out and isinstance(out["layer_types"], list):
        n = out.get("num_hidden_layers", len(out["layer_types"]))
        out["layer_types"] = out["layer_types"][:n] if isinstance(n, int) else out["layer_types"]
    return out


def all_model_classes() -> list[str]:
    """Every base model class of transformers' auto mapping (one per config type), sorted."""
    from transformers.models.auto import modeling_auto
    names = set()
    for v in modeling_auto.MODEL_MAPPING_NAMES.values():
        names.update(v if isinstance(v, (list, tuple)) else [v])
    return sorted(names)


def _config_class_of(cls_name: str):
    import transformers
    from transformers.models.auto import modeling_auto, configuration_auto
    for mt, v in modeling_auto.MODEL_MAPPING_NAMES.items():
        if cls_name in (v if isinstance(v, (list, tuple)) else [v]):
            return getattr(transformers, cls_name), configuration_auto.CONFIG_MAPPING[mt]
    raise KeyError(cls_name)


def build(cls_name: str, layers: int = 1):
    import torch
    model_cls, config_cls = _config_class_of(cls_name)
    d = tiny_config_dict(config_cls().to_dict(), layers)
    for k in ("transformers_version", "model_type", "architectures", "_name_or_path"):
        d.pop(k, None)
    config = config_cls(**d)
    torch.manual_seed(0)
    model = model_cls(config).eval()
    return model, config


def _get(config, *names, default=None):
    for c in (config, getattr(config, "vision_config", None), getattr(config, "text_config", None),
              getattr(config, "audio_config", None), getattr(config, "encoder_config", None)):
        if c is None:
            continue
        for n in names:
            v = getattr(c, n, None)
            if v is not None and not isinstance(v, bool):
                return v
    return default


def candidate_inputs(model, config) -> list:
    """Input sets to try, richest first (text and image for a multimodal model, then each alone):
    the first that eager runs is the model's input."""
    import torch
    g = torch.Generator().manual_seed(1)
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    vocab = _get(config, "vocab_size", default=99)
    vocab = vocab if isinstance(vocab, int) else 99
    parts = {}
    if "input_ids" in params:
        parts["input_ids"] = torch.randint(3, max(4, min(vocab, 99)), (BATCH, TEXT_LEN), generator=g)
    if "pixel_values" in params:
        size = _get(config, "image_size", default=32)
        size = size[0] if isinstance(size, (list, tuple)) else size
        if isinstance(size, dict):
            size = size.get("height", 32)
        ch = _get(config, "num_channels", default=3)
        ch = ch if isinstance(ch, int) else 3
        parts["pixel_values"] = torch.randn(BATCH, ch, size, size, generator=g)
    if main == "input_values" and "input_values" in params:
        parts["input_values"] = torch.randn(BATCH, 1600, generator=g)
    if main == "input_features" and "input_features" in params:
        bins = _get(config, "num_mel_bins", "feature_size", "input_feat_per_channel", default=80)
        parts["input_features"] = torch.randn(BATCH, bins, 64, generator=g)
    extra = {}
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        extra["decoder_input_ids"] = torch.randint(3, max(4, min(vocab, 99)), (BATCH, 4), generator=g)
    cands = [dict(parts)]
    if main in parts and len(parts) > 1:
        cands.append({main: parts[main]})
    cands += [{k: v} for k, v in parts.items() if k != main]
    return [{**c, **extra} for c in cands if c]


def tensors_of(v, out=None, depth=0, seen=None):
    """Every tensor in an output (ModelOutput, tuples, dicts, cache objects), in a fixed order."""
    import torch
    out = [] if out is None else out
    seen = set() if seen is None else seen
    if depth > 6 or id(v) in seen:
        return out
    seen.add(id(v))
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, dict):
        for k in v:
            tensors_of(v[k], out, depth + 1, seen)
    elif isinstance(v, (list, tuple)):
        for x in v:
            tensors_of(x, out, depth + 1, seen)
    elif hasattr(v, "__dict__") and not isinstance(v, type):
        for k in sorted(vars(v)):
            tensors_of(vars(v)[k], out, depth + 1, seen)
    return out


def same(got, want) -> str:
    """'' when every tensor of `got` equals eager's `want` (floats to 1e-4 of the max), else why."""
    import torch
    a, b = tensors_of(got), tensors_of(want)
    if len(a) != len(b):
        return f"{len(a)} tensors vs eager {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"tensor {i}: {tuple(x.shape)} {x.dtype} vs eager {tuple(y.shape)} {y.dtype}"
        if x.dtype.is_floating_point or x.dtype.is_complex:
            scale = max(1.0, float(y.abs().max())) if y.numel() else 1.0
            if x.numel() and not float((x - y).abs().nan_to_num(1e9).max()) <= 1e-4 * scale:
                return f"tensor {i} off by {float((x - y).abs().max()):.3g}"
        elif not torch.equal(x, y):
            return f"tensor {i} differs"
    return ""


def _break_text_pydynamo(b) -> str:
    loc = f"{os.path.basename(b.filename)}:{b.lineno}" if b.filename else ""
    return f"[{b.reason_code}] {b.message.splitlines()[0] if b.message else ''}"[:200] + \
        (f" @ {loc}" if loc else "")


def _break_text_torch(b) -> str:
    reason = getattr(b, "reason", str(b))
    stack = getattr(b, "user_stack", None) or []
    loc = f"{os.path.basename(stack[-1].filename)}:{stack[-1].lineno}" if stack else ""
    return str(reason).splitlines()[0][:200] + (f" @ {loc}" if loc else "")


def run_one(cls_name: str, engine: str, backend: str = "eager", options=None, layers: int = 1) -> dict:
    """One model's row. `backend`/`options`: pydynamo's (options go to the codegen backend)."""
    import torch
    row = {"model": cls_name, "engine": engine}
    if backend != "eager" or options:
        row.update(backend=backend, options=options or {})
    if layers != 1:
        row["layers"] = layers
    try:
        model, config = build(cls_name, layers)
        cands = candidate_inputs(model, config)
    except Exception as e:
        row.update(status="nobuild", why=f"{type(e).__name__}: {str(e)[:200]}")
        return row
    err = "no input the zoo knows how to make"
    for inputs in cands:
        try:
            torch.manual_seed(2)
            with torch.no_grad():
                want = model(**inputs)
            break
        except Exception as e:
            err = f"{type(e).__name__}: {str(e)[:200]}"
    else:
        row.update(status="nobuild", why=err)
        return row
    row["inputs"] = sorted(inputs)
    try:
        if engine == "torch":
            import torch._dynamo as td
            td.reset()
            torch.manual_seed(2)
            with torch.no_grad():
                ex = td.explain(model)(**inputs)
            row.update(graphs=ex.graph_count,
                       breaks=[_break_text_torch(b) for b in ex.break_reasons])
            td.reset()
            torch.manual_seed(2)
            with torch.no_grad():   # its values too: a library's is_compiling() path may differ
                got = torch.compile(model, backend="eager")(**inputs)
            td.reset()
        else:
            import pydynamo     # (here: the worker puts the repo on sys.path first)
            from codegen.runtime import counters
            from pydynamo.backends import lookup_backend
            compile_with = backend
            if options:     # a callable backend: explain() takes no options of its own
                compile_with = functools.partial(lookup_backend(backend), **options)
            if backend == "codegen":
                counters.clear()
            torch.manual_seed(2)
            with torch.no_grad():
                ex = pydynamo.explain(model, backend=compile_with)(**inputs)
            got = ex.out
            row.update(graphs=ex.graph_count, breaks=[_break_text_pydynamo(b) for b in ex.break_reasons])
            if backend == "codegen":
                row["regions"] = {k: v for k, v in sorted(counters.items()) if k.startswith("region_")}
    except Exception as e:
        row.update(status="error", why=f"{type(e).__name__}: {str(e)[:300]}",
                   tb=traceback.format_exc()[-1500:])
        return row
    bad = same(got, want)
    row.update(status="wrong" if bad else "ok", why=bad)
    return row


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("pydynamo", "torch"), default="pydynamo")
    ap.add_argument("--backend", default="eager", help="pydynamo's backend (eager, codegen)")
    ap.add_argument("--options", default="", help="codegen options, a JSON object")
    ap.add_argument("--layers", type=int, default=1, help="layer-count knobs of the tiny configs")
    ap.add_argument("models", nargs="+")
    ns = ap.parse_args(argv)
    options = json.loads(ns.options) if ns.options else None
    sys.path.insert(0, REPO)
    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    torch.set_num_threads(1)
    for name in ns.models:
        print(json.dumps(run_one(name, ns.engine, ns.backend, options, ns.layers)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
