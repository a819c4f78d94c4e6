"""GPT-2 (transformers GPT2Model from a config: 2 layers, 64 wide, 4 heads, vocab 1000, random
weights, eval, no_grad) at sequence lengths 16, 17, 32, 64. Registered only when transformers
is installed (tests/compat_dynamic/test_design.py says so when it is not)."""
import torch

from dyn_case import dyn_module_case, factory, under

try:
    import transformers
except ImportError:  # pragma: no cover - depends on the venv
    transformers = None


def ids(n):
    return factory(lambda g: torch.randint(0, 1000, (2, n), generator=g))


if transformers is not None:
    @dyn_module_case(*(under(torch.no_grad, ids(n)) for n in (16, 17, 32, 64)), modes=("auto", "dynamic"))
    class GPT2Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128, bos_token_id=0, eos_token_id=0,
                                          use_cache=False)
            self.model = transformers.GPT2Model(cfg)

        def forward(self, input_ids):
            return self.model(input_ids).last_hidden_state
