"""The symbolic executor: runs a frame's bytecode over abstract values and records an FX graph.

translator.py (opcode handlers), variables/ (abstract values), builder.py (wrapping real values
with sources and guards), output_graph.py (the FX graph and its compilation), side_effects.py
(mutations replayed after the graph), reconstruct.py (the replacement code). Entry point:
`pydynamo.convert_frame.translate`.
"""
