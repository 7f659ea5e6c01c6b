#!/usr/bin/env python3
"""Fail on any import cycle among the project's modules under src/, imports inside functions included.

The graph has one node per module (``calf_core.traces``, ``calf_agent.policies``, ...). An edge A -> B is
any ``import B`` or ``from B import x`` in A, at any depth of A's code (functions, methods, ``if``
blocks, ``TYPE_CHECKING`` blocks excepted, since they never run). ``from pkg import name`` points at
``pkg.name`` when that is a module, else at ``pkg``. Every strongly connected component of more than
one module is a cycle; each is printed with one import chain that closes it, and the exit code is 1.

Usage: python scripts/check_imports.py [SRC_DIR]   (default: the repository's src/)
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

# Cycles allowed for now, each as the set of its modules, with the reason. Keep this empty if you can.
ALLOWED: dict[frozenset[str], str] = {}


def find_modules(src: Path) -> dict[str, Path]:
    """Map every module name of the project's Python packages under ``src`` to its file."""
    modules: dict[str, Path] = {}
    for init in sorted(src.glob('*/*/__init__.py')):
        pkg_dir = init.parent
        if pkg_dir.parent.name == 'test':
            continue
        for path in sorted(pkg_dir.rglob('*.py')):
            rel = path.relative_to(pkg_dir.parent).with_suffix('')
            parts = list(rel.parts)
            if parts[-1] == '__init__':
                parts = parts[:-1]
            modules['.'.join(parts)] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or (
        isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING')


def _longest_module(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a project module, if any."""
    parts = name.split('.')
    for cut in range(len(parts), 0, -1):
        prefix = '.'.join(parts[:cut])
        if prefix in modules:
            return prefix
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The project modules that ``module`` imports anywhere (outside TYPE_CHECKING), each with a line."""
    anchor = module.split('.') if path.name == '__init__.py' else module.split('.')[:-1]
    found: dict[str, int] = {}
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding='utf-8'), filename=str(path))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = anchor[:len(anchor) - (node.level - 1)]
                base = '.'.join(parts + ([base] if base else []))
            names = [f'{base}.{alias.name}' for alias in node.names]
        for name in names:
            target = _longest_module(name, modules)
            if target is not None and target != module:
                found[target] = min(found.get(target, node.lineno), node.lineno)
        stack.extend(ast.iter_child_nodes(node))
    return found


def build_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """Edges between project modules: ``graph[a][b]`` is the first line in ``a`` that imports ``b``."""
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def chain(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """One closed import chain through the component's first module, as ``module:line -> ...``."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    path.reverse()
                    path.append(start)
                    return [f'{a} (line {graph[a][b]})' for a, b in zip(path, path[1:])] + [start]
                if child not in parents:
                    parents[child] = node
                    nxt.append(child)
        frontier = nxt
    return component


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / 'src'
    graph = build_graph(find_modules(src))
    bad = 0
    for component in cycles(graph):
        allowed = ALLOWED.get(frozenset(component))
        label = f'allowed ({allowed})' if allowed else 'error'
        print(f'import cycle, {label}: ' + ' -> '.join(chain(graph, component)), flush=True)
        bad += allowed is None
    if bad:
        print(f'{bad} import cycle(s) among {len(graph)} modules: move the shared code down into a module '
              'both can import', file=sys.stderr)
        return 1
    print(f'no import cycles among {len(graph)} modules, but for the allowed ones listed above' if ALLOWED else f'no import cycles among {len(graph)} modules')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
