"""tests/distributed: issue 22 on CPU, gloo, 2 ranks over loopback (harness.py starts them)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
