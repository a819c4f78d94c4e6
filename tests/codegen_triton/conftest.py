"""Every test here runs the Triton printer. Without a GPU, kernels run on CPU tensors through
Triton's interpreter (TRITON_INTERPRET=1, set before Triton is imported by any kernel module)."""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
