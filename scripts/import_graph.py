"""Module import graph of pydynamo/ and codegen/: circles and function-local imports.

Parses the sources with `ast` only (nothing is imported), so it sees every import: module-level
ones and the function-local ones that hide a circle from Python's import machinery. An edge
A -> B means module A imports module B (or a name from it) somewhere in its file; `from pkg
import name` where `pkg.name` is itself a module counts as an edge to that submodule, else to
`pkg`. Importing a package's `__init__` counts as importing the package module only (Python also
runs the parent packages' `__init__`s, but those are reported as edges of their own files).

Prints the strongly connected components of more than one module (the import circles), the
biggest of them, how many project modules importing a few chosen modules executes (module-level
imports plus the parent packages' `__init__`s, which Python runs first: this measures whether a
package `__init__` is lazy), and per file the count of function-local imports of project modules
(imports not at module level; `if TYPE_CHECKING:` blocks never run and are skipped).

    python scripts/import_graph.py [--packages pydynamo codegen] [--edges]
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# compiled leaf modules (built from csrc/, installed beside the sources): they import nothing of
# ours, so `from pydynamo import _C` is an edge to a leaf, not to the package `__init__`
EXTENSIONS = {"pydynamo._C"}


def module_files(packages):
    """{module name: path} for every .py file under the given top-level packages."""
    mods = {}
    for pkg in packages:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
            for fn in sorted(filenames):
                if not fn.endswith(".py"):
                    continue
                path = os.path.join(dirpath, fn)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                mods[".".join(parts)] = path
    return mods


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(modname, path, is_pkg):
    """Yield (imported module name candidates, is_function_local, lineno) for one file."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = []

    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                continue  # never executed at runtime
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append(([a.name], local, child.lineno))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = modname.split(".") if is_pkg else modname.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module
                out.append(([target] + [f"{target}.{a.name}" for a in child.names], local,
                            child.lineno))
            visit(child, local)

    visit(tree, False)
    return out


def build(packages):
    mods = module_files(packages)
    known = set(mods) | EXTENSIONS
    edges = {m: set() for m in known}
    eager = {m: set() for m in known}  # module-level edges only: what runs at import time
    local_counts = {m: 0 for m in mods}
    for m, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        for cands, local, _ in imports_of(m, path, is_pkg):
            base, subs = cands[0], cands[1:]
            hit = [s for s in subs if s in known]
            if hit:
                targets = hit
            else:
                # the module itself, or for `import a.b.c` of a non-module the nearest enclosing one
                parts = base.split(".")
                while parts and ".".join(parts) not in known:
                    parts.pop()
                targets = [".".join(parts)] if parts else []
            if local and any(base.split(".")[0] == p for p in packages):
                local_counts[m] += 1
            for t in targets:
                if t != m:
                    edges[m].add(t)
                    if not local:
                        eager[m].add(t)
    return mods, edges, eager, local_counts


def parents(m):
    """The packages whose `__init__` Python runs before module m."""
    parts = m.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def loads(root, eager):
    """Project modules that `import root` executes: module-level imports and parent packages."""
    seen, todo = set(), [root]
    while todo:
        m = todo.pop()
        if m in seen or m not in eager:
            continue
        seen.add(m)
        todo.extend(parents(m))
        todo.extend(eager[m])
    return seen


def sccs(edges):
    """Tarjan's algorithm, iterative; returns the components as sorted lists."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packages", nargs="+", default=["pydynamo", "codegen"])
    ap.add_argument("--edges", action="store_true", help="print the edges inside each circle")
    ap.add_argument("--loads", nargs="*",
                    default=["pydynamo", "pydynamo.mutation", "pydynamo.sources", "pydynamo.shapes",
                             "codegen"],
                    help="print how many project modules importing each of these executes")
    args = ap.parse_args(argv)
    mods, edges, eager, local_counts = build(args.packages)
    comps = sorted((c for c in sccs(edges) if len(c) > 1), key=len, reverse=True)
    print(f"modules: {len(mods)}  edges: {sum(map(len, edges.values()))}")
    print(f"import circles (SCCs of size > 1): {len(comps)}; sizes {[len(c) for c in comps]}")
    for c in comps:
        print(f"\n  circle of {len(c)}:")
        cs = set(c)
        for m in c:
            inner = sorted(edges[m] & cs)
            print(f"    {m}" + (f"  -> {', '.join(inner)}" if args.edges else ""))
    print(f"\nbiggest circle: {len(comps[0]) if comps else 0} modules")
    if args.loads:
        print("\nproject modules executed by importing (module-level imports, parent packages):")
        for m in args.loads:
            if m in eager:
                print(f"  {len(loads(m, eager)):4d}  {m}")
    total = sum(local_counts.values())
    print(f"\nfunction-local imports of project modules: {total}")
    for m, n in sorted(local_counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n:
            print(f"  {n:4d}  {os.path.relpath(mods[m], ROOT)}")
    for pkg in args.packages:
        n = sum(v for m, v in local_counts.items() if m.split(".")[0] == pkg)
        print(f"  {pkg}/: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
