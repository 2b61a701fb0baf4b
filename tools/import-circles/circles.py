#!/usr/bin/env python3
"""Import circles inside each crate: the strongly connected sets of files that reach each
other through `crate::`, `super::` and `self::` paths (test modules left out).

Usage: tools/import-circles/circles.py [--edges] [CRATE_DIR ...]   (default: every crate)
--edges also prints, for each circle, which of its files uses which.
Prints each circle of more than one file; exits 1 if any has more than two (the house rule).
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(src: Path):
    """Module path (tuple) -> file, for every .rs file under src."""
    files = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        files[tuple(parts)] = f
    return files


def strip_tests(text: str) -> str:
    """Drops `#[cfg(test)] mod … { … }` blocks (brace-matched)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


DEFINES = r"^\s*(?:pub(?:\([a-z:]+\))?\s+)?(?:async\s+)?(?:unsafe\s+)?(?:fn|struct|enum|trait|const|static|type|union|macro_rules!)\s+(\w+)"


def definitions(files):
    """Module -> (names it defines, name -> module path it re-exports that name from)."""
    out = {}
    for module, f in files.items():
        text = re.sub(r"//[^\n]*", "", strip_tests(f.read_text()))
        defined = set(re.findall(DEFINES, text, re.M))
        defined |= set(re.findall(r"^\s*tokio::task_local!\s*\{[^}]*?static\s+(\w+)", text, re.M | re.S))
        reexports = {}
        for m in re.finditer(r"^\s*pub(?:\([a-z]+\))?\s+use\s+([^;]+);", text, re.M):
            body = " ".join(m.group(1).split())
            head, _, group = body.partition("::{")
            names = group.rstrip("}").split(",") if group else [body.rsplit("::", 1)[-1]]
            if not group:
                head = body.rsplit("::", 1)[0] if "::" in body else ""
            for name in names:
                name = name.strip()
                if not name:
                    continue
                original, _, alias = name.partition(" as ")
                reexports[(alias or original).strip().split("::")[-1]] = (head, original.strip())
        out[module] = (defined, reexports)
    return out


def resolve(files, defs, module_path, rest, depth=0):
    """The file that defines `module_path::rest…`, following re-exports."""
    path = list(module_path)
    rest = list(rest)
    while rest and tuple(path + [rest[0]]) in files:
        path.append(rest.pop(0))
    target = tuple(path)
    if not rest or target not in defs or depth > 8:
        return target
    defined, reexports = defs[target]
    name = rest[0]
    if name in defined or name not in reexports:
        return target
    head, original = reexports[name]
    parts = [p for p in head.split("::") if p]
    base = list(target)
    if parts and parts[0] == "crate":
        start = []
        parts = parts[1:]
    elif parts and re.fullmatch(r"plinth_\w+|std|core|alloc", parts[0]):
        return None  # another crate's item: no edge inside this one
    elif parts and parts[0] in ("super", "self"):
        start = base
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                start = start[:-1]
            parts = parts[1:]
    elif parts and tuple(base + [parts[0]]) in files:
        start = base
    else:
        return None  # re-exported from another crate: no edge inside this one
    original_parts = original.split("::")
    return resolve(files, defs, start, parts + original_parts, depth + 1)


def edges(files):
    defs = definitions(files)
    graph = {m: set() for m in files}
    for module, f in files.items():
        text = strip_tests(f.read_text())
        text = re.sub(r"//[^\n]*", "", text)
        # A re-export is the module's face, not a use of what it names.
        text = re.sub(r"^\s*pub(?:\([a-z]+\))?\s+use\s+[^;]+;", "", text, flags=re.M)
        # `self::` and `child::` start at the module itself, `super::` one up from it.
        base = module
        paths = []
        for m in re.finditer(r"\b((?:crate|super|self)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))*)(::\{([^}]*)\})?", text):
            head = m.group(1)
            if m.group(3) is not None:
                for name in m.group(3).split(","):
                    name = name.strip().split(" as ")[0].strip()
                    paths.append(head if name in ("", "self", "*") else f"{head}::{name}")
            elif "::" in head:
                paths.append(head)
        children = re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", text, re.M)
        for child in children:
            for m in re.finditer(rf"(?<![\w:]){child}::(?:\{{([^}}]*)\}}|([A-Za-z_]\w*))", text):
                if m.group(2):
                    paths.append(f"self::{child}::{m.group(2)}")
                else:
                    for name in m.group(1).split(","):
                        name = name.strip().split(" as ")[0].strip()
                        paths.append(f"self::{child}" + (f"::{name}" if name and name != "self" else ""))
        for path_text in paths:
            parts = path_text.split("::")
            if parts[0] == "crate":
                start, rest = [], parts[1:]
            else:
                start, rest = list(base), parts
                while rest and rest[0] in ("super", "self"):
                    if rest[0] == "super":
                        start = start[:-1]
                    rest = rest[1:]
            target = resolve(files, defs, start, rest)
            if target in files and target != module:
                graph[module].add(target)
    return graph


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    show_edges = "--edges" in args
    args = [a for a in args if a != "--edges"]
    dirs = [Path(a) for a in args] or sorted(
        p.parent for p in ROOT.glob("*/*/Cargo.toml") if (p.parent / "src").is_dir())
    worst = 0
    for d in dirs:
        src = d / "src"
        files = module_files(src)
        graph = edges(files)
        for comp in sccs(graph):
            if len(comp) > 1:
                worst = max(worst, len(comp))
                names = sorted(str(files[m].relative_to(src)) for m in comp)
                print(f"{d.name}: {len(comp)} files: {' '.join(names)}")
                if show_edges:
                    inside = set(comp)
                    for m in sorted(comp, key=lambda m: str(files[m])):
                        uses = sorted(str(files[t].relative_to(src)) for t in graph[m] if t in inside)
                        print(f"    {files[m].relative_to(src)} -> {' '.join(uses)}")
    print(f"largest circle: {worst} files")
    sys.exit(1 if worst > 2 else 0)


main()
