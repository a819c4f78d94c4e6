"""VariableTracker subclasses, one module per family of Python values (see base.py for the
invariants every tracker keeps)."""
