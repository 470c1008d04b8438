"""No import cycle among cronman's modules, a package's ``__init__`` included.

``lint-imports`` (ops/test) checks layers, contracts and cycles between the
siblings of a package; a cycle through a package's own ``__init__`` (a module
importing the package that imports it) is no sibling cycle, so it is looked
for here, over the same import graph (grimp's).
"""

from __future__ import annotations

import grimp


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import cycles: groups of two modules or more that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("cronman", cache_dir=None)
    assert strongly_connected(graph) == []


def test_a_cycle_through_a_package_init_is_found():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b"):
        graph.add_module(module)
    graph.add_import(importer="pkg", imported="pkg.a")
    graph.add_import(importer="pkg.a", imported="pkg.b")
    assert strongly_connected(graph) == []
    graph.add_import(importer="pkg.b", imported="pkg")
    assert strongly_connected(graph) == [["pkg", "pkg.a", "pkg.b"]]
