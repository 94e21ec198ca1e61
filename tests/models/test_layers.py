"""No import cycle among the project's modules.

import-linter (``lint-imports``, contracts in pyproject.toml) checks the layers between packages; a cycle
between two modules of one layer, or through a script, is outside what its contracts express. Here the import
graph of every project module (the packages through grimp, import-linter's own graph builder, which also sees
imports inside functions; ``scripts/*.py``, which are not a package, through their source) must have no
strongly connected component of more than one module. And the layers contract names every module of the tools
layer: import-linter checks only the modules a contract names.
"""
import ast
import os
import re

import grimp
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ["hmm_nmt", "hmm_nmt_align", "benchmarks"]
SCRIPTS = sorted(n[:-3] for n in os.listdir(os.path.join(ROOT, "scripts")) if n.endswith(".py"))


def _script_imports(path):
    """Dotted names a script imports at any depth, absolute imports only (scripts import each other bare)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            for a in node.names:
                yield f"{node.module}.{a.name}"


def project_import_graph():
    """{module: set of project modules it imports}; a script is the node ``scripts/NAME``."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    node = {m: m for m in edges}
    node.update({s: f"scripts/{s}" for s in SCRIPTS})
    for s in SCRIPTS:
        deps = set()
        for name in _script_imports(os.path.join(ROOT, "scripts", f"{s}.py")):
            parts = name.split(".")
            for k in range(len(parts), 0, -1):  # the longest prefix that is a project module
                target = node.get(".".join(parts[:k]))
                if target is not None:
                    deps.add(target)
                    break
        edges[f"scripts/{s}"] = deps
    return edges


def strongly_connected_components(edges):
    """Tarjan's algorithm, iterative; returns the components as sorted lists."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def test_scc_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert sorted(c for c in strongly_connected_components(edges) if len(c) > 1) == [["a", "b", "c"]]


def test_no_import_cycle_between_project_modules():
    edges = project_import_graph()
    assert "hmm_nmt.hmm" in edges and "scripts/tag" in edges  # the graph covers both kinds
    cycles = [c for c in strongly_connected_components(edges) if len(c) > 1]
    report = "\n".join(
        "cycle: " + ", ".join(c) + "\n  " + "\n  ".join(f"{a} -> {b}" for a in c for b in sorted(edges[a]) if b in c)
        for c in cycles)
    assert not cycles, "import cycles among project modules:\n" + report


def _pyproject():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml needs tomllib (3.11) or tomli")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_the_tools_layer_names_every_module_of_hmm_nmt_align():
    """Every module and subpackage of alignment/hmm_nmt_align/ but base/ (the bottom layer), safe_checkpoint (the
    loader under the plugin) and __init__/__main__ is in the tools layer: a module left out could import upward
    unseen."""
    contracts = _pyproject()["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers" and "benchmarks" in c["layers"]]
    assert layers[0] == "benchmarks" and layers[2:] == ["hmm_nmt", "hmm_nmt_align.safe_checkpoint", "hmm_nmt_align.base"]
    named = set(re.split(r"\s*[:|]\s*", layers[1].strip()))
    folder = os.path.join(ROOT, "alignment", "hmm_nmt_align")
    found = {f"hmm_nmt_align.{n[:-3]}" for n in os.listdir(folder)
             if n.endswith(".py") and n not in ("__init__.py", "__main__.py", "safe_checkpoint.py")}
    found |= {f"hmm_nmt_align.{n}" for n in os.listdir(folder)
              if n != "base" and os.path.isfile(os.path.join(folder, n, "__init__.py"))}
    assert "hmm_nmt_align.corpus" in found and "hmm_nmt_align.extract" in found
    assert named == found, f"named but absent: {sorted(named - found)}; absent from the layer: {sorted(found - named)}"
