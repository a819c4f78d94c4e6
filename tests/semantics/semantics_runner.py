"""Run the semantics corpus under ONE engine in this process (tests/compat's runner, reused).

    python tests/semantics/semantics_runner.py --engine {eager,torch,pydynamo} --out DIR [--cases a,b]

Everything is tests/compat/compat_runner.py's, with the corpus swapped for semantics_corpus.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "compat"))
sys.path.insert(0, HERE)

import compat_runner as cr  # noqa: E402
import semantics_corpus  # noqa: E402  (registers the cases)

cr.compat_corpus = semantics_corpus  # the frame counter walks these modules' code

if __name__ == "__main__":
    sys.exit(cr.main())
