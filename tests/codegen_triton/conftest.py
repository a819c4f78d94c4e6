"""Every test here runs the Triton printer. Without a GPU, kernels run on CPU tensors through
Triton's interpreter (TRITON_INTERPRET=1, set before Triton is imported by any kernel module)."""
import os
import sys

import torch

# tests/differential.py (the shared compare) is imported by name, as in the other test folders
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
