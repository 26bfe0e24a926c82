#!/usr/bin/env python3
"""Checks the workspace's shape: the modules of each crate import one another one way (no
circle), and no source file holds more than MAX_LINES lines of code outside its tests.

Cargo refuses a circle between crates; inside a crate nothing does. For every crate of the
workspace this reads the top-level modules declared in `src/lib.rs` (or `src/main.rs`), collects
which of them each module's code names (`crate::<module>`, or `crate::<Item>` for an item that
the crate root re-exports from a module), and fails naming the circle when the graph has one.
Comments and test code are not counted (see `code`). `--print` shows the arrows between crates, then each crate's arrows between modules, `--why` the lines behind a circle's arrows.

A long file is counted without its test code (a `tests.rs` file, an inline `#[cfg(test)]`
module): a module whose code passes MAX_LINES holds more than one concern; split it.

The CLI's integration tests (`cli/tests/*.rs`) are tests of the command line: each file runs
the built `memwall` (`CARGO_BIN_EXE_memwall` or a `tests/common` helper that does); a test of a
crate's library sits beside that crate.

Usage: python3 .ci/structure.py [--print] [--why]
"""
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 1000
MOD = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;", re.M)
GLOB = re.compile(r"^\s*pub\s+use\s+(\w+)::\*\s*;", re.M)
NAMED = re.compile(r"^\s*pub\s+use\s+(\w+)::(?:\{([^}]*)\}|(\w+))\s*;", re.M)
ITEM = re.compile(r"^\s*pub\s+(?:fn|struct|enum|trait|type|const|static)\s+(\w+)", re.M)
PATH = re.compile(r"\bcrate::(?:(\w+)|\{([^}]*)\})")
SUPER = re.compile(r"(?<![\w:])super::(?:(\w+)|\{([^}]*)\})")
INLINE_MOD = re.compile(r"^(?:pub(?:\([a-z]+\))?\s+)?mod\s+\w+\s*\{\s*$")
WORD = re.compile(r"\b[A-Za-z_]\w*\b")
WHY = {}


def code(path, keep_comments=False):
    """The file's code: without `//` comment lines, and without test code (a `tests.rs` file, and
    an inline `#[cfg(test)]` module, to its closing brace): a test may
    use a module above the one it tests."""
    if path.name == "tests.rs" or "tests" in path.parts[:-1]:
        return ""
    lines = path.read_text(encoding="utf-8").splitlines()
    kept, skip = [], False
    for i, line in enumerate(lines):
        if skip:
            skip = line != "}"
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line == "#[cfg(test)]" and INLINE_MOD.match(nxt):
            skip = True
            continue
        kept.append(line)
    lines = kept
    if keep_comments:
        return "\n".join(lines)
    return "\n".join(l for l in lines if not l.lstrip().startswith("//"))


def names_of(pair):
    """The first names of a path match: `x` of `crate::x::..`, `a`, `b` of `crate::{a, b::c}`."""
    one, group = pair
    if one:
        return [one]
    return [part.strip().split("::")[0].split(" ")[0] for part in group.split(",") if part.strip()]


def files_of(src, module):
    """The files of a top-level module: `<m>.rs` and everything under `<m>/`."""
    out = [p for p in (src / f"{module}.rs",) if p.exists()]
    folder = src / module
    if folder.is_dir():
        out += sorted(folder.rglob("*.rs"))
    return out


def arrows(crate_dir):
    src = crate_dir / "src"
    root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
    root_code = code(root)
    modules = MOD.findall(root_code)
    owner = {m: m for m in modules}
    for m in GLOB.findall(root_code):
        if m in modules:
            for f in files_of(src, m):
                for item in ITEM.findall(code(f)):
                    owner.setdefault(item, m)
    for m, group, one in NAMED.findall(root_code):
        if m in modules:
            for name in (group.split(",") if group else [one]):
                name = name.strip().split(" as ")[-1].strip()
                if name and name != "self":
                    owner.setdefault(name, m)
    items = {name for name, m in owner.items() if name != m}
    graph = {m: set() for m in modules}
    for m in modules:
        for f in files_of(src, m):
            # In a module's own file `super::` is the crate root; where that file takes the
            # root's names whole (`use super::*;`), any item the root re-exports may be named bare.
            top = f.parent == src or (f.name == "mod.rs" and f.parent.parent == src)
            text = code(f)
            bare = top and "use super::*;" in text
            for line in text.splitlines():
                names = [n for pair in PATH.findall(line) for n in names_of(pair)]
                if top:
                    names += [n for pair in SUPER.findall(line) for n in names_of(pair)]
                if bare:
                    names += [w for w in WORD.findall(line) if w in items]
                for name in names:
                    target = owner.get(name)
                    if target is not None and target != m:
                        graph[m].add(target)
                        WHY.setdefault((crate_dir.name, m, target), []).append(
                            f"{f.relative_to(ROOT)}: {line.strip()}")
    return graph


def circle(graph):
    """One circle of the graph as a list of modules, or None."""
    state = {}

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n, stack)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [])
            if found:
                return found
    return None


# Arrows between crates that the architecture forbids although Cargo would build them
# (docs/src/contributor/architecture.md): the report and the studies are siblings above
# memwall-document, and the report renders records without Burn.
FORBIDDEN = {
    ("memwall-report", "memwall-studies"): "the report renders what a study builds (memwall-document)",
    ("memwall-studies", "memwall-report"): "a study builds memwall-document content; the report renders it",
    ("memwall-report", "memwall-runner"): "device and measurement types are memwall-core's",
    ("memwall-document", "memwall-runner"): "the document crate is serde and core only",
    ("memwall-document", "memwall-remat"): "the document crate is serde and core only",
}


def crate_arrows(manifest):
    """Each workspace crate's name and the workspace crates it depends on (not dev-dependencies),
    read from the members' Cargo.toml files."""
    crates = {}
    for member in manifest["workspace"]["members"]:
        toml = tomllib.loads((ROOT / member / "Cargo.toml").read_text(encoding="utf-8"))
        deps = toml.get("dependencies", {})
        crates[toml["package"]["name"]] = sorted(d for d in deps if d.startswith("memwall"))
    return crates


# What a CLI test calls to run the built `memwall`: the binary itself or a tests/common helper
# that starts it.
RUNS_MEMWALL = re.compile(
    r"CARGO_BIN_EXE_memwall|\b(?:common::)?(?:memwall|memwall_alone|bundle_smoke|plan)\(")


def cli_tests_only_run_the_cli():
    """The files of cli/tests that never run the built `memwall` (their tests belong beside the
    crate they test)."""
    return [f for f in sorted((ROOT / "cli" / "tests").glob("*.rs"))
            if not RUNS_MEMWALL.search(f.read_text(encoding="utf-8"))]


def main():
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text(encoding="utf-8"))
    failed = False
    crates = crate_arrows(manifest)
    if "--print" in sys.argv:
        print("crates:")
        for c in crates:
            print(f"  {c} -> {', '.join(crates[c]) or '(nothing)'}")
    for c, deps in crates.items():
        for d in deps:
            if (c, d) in FORBIDDEN:
                failed = True
                print(f"error: {c} depends on {d}: {FORBIDDEN[(c, d)]}; remove the dependency "
                      f"from its Cargo.toml", file=sys.stderr)
    for member in manifest["workspace"]["members"]:
        graph = arrows(ROOT / member)
        if "--print" in sys.argv:
            print(f"{member}:")
            for m in sorted(graph):
                print(f"  {m} -> {', '.join(sorted(graph[m])) or '(nothing)'}")
        found = circle(graph)
        if found and "--why" in sys.argv:
            for a, b in zip(found, found[1:]):
                for line in WHY[(pathlib.Path(member).name, a, b)][:4]:
                    print(f"  {a} -> {b}: {line}", file=sys.stderr)
        if found:
            failed = True
            print(f"error: {member}/src: modules import each other in a circle: "
                  f"{' -> '.join(found)}; move what both need into a module below them",
                  file=sys.stderr)
        for f in sorted((ROOT / member).rglob("*.rs")):
            if "target" in f.relative_to(ROOT).parts:
                continue
            text = code(f, keep_comments=True)
            n = len(text.splitlines()) if text else 0
            if n > MAX_LINES:
                failed = True
                print(f"error: {f.relative_to(ROOT)}: {n} lines of code outside tests, more than "
                      f"{MAX_LINES}; split it by concern (a folder module)", file=sys.stderr)
    for f in cli_tests_only_run_the_cli():
        failed = True
        print(f"error: {f.relative_to(ROOT)} never runs the built memwall: cli/tests holds tests "
              f"of the command line; move its tests beside the crate they test (its tests/)",
              file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
