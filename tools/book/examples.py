#!/usr/bin/env python3
"""Which public items of a library crate have no example in their documentation.

    python3 tools/book/examples.py [--require] [--summary] CRATE_DIR...

An item is a `pub` function (methods included), struct, enum, trait, constant, static or type
alias, outside `#[cfg(test)]` modules and not `#[doc(hidden)]`; it has an example when its doc
comment holds a code block (```). Prints each crate's count and the items without one; with
`--require`, exits 1 if any crate has such an item; with `--summary`, prints the counts only (the doc tests themselves run with
`cargo test --doc`).
"""

import pathlib
import re
import sys

ITEM = re.compile(
    r"^\s*pub\s+(?:async\s+|const\s+|unsafe\s+)*(fn|struct|enum|trait|const|static|type)\s+(\w+)"
)


def items(path):
    """(line, kind, name, has_example) of each public item in one file."""
    lines = path.read_text().split("\n")
    found = []
    depth_test = None  # brace depth at which a #[cfg(test)] module began
    depth = 0
    pending_test = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if depth_test is None:
            if stripped.startswith("#[cfg(test)]"):
                pending_test = True
            elif pending_test and stripped.startswith("mod "):
                depth_test = depth
                pending_test = False
            elif pending_test and not stripped.startswith("#["):
                pending_test = False
            match = ITEM.match(line)
            if match and not stripped.startswith("//"):
                j = i
                hidden = False
                # Back over attributes (one line or several) and plain comments to the docs.
                while j > 0:
                    above = lines[j - 1].strip()
                    if above.startswith("///") or not above or above.endswith((";", "{", "}")):
                        break
                    hidden |= above.startswith("#[doc(hidden)]") or above.startswith(
                        "#[cfg(doctest)]"
                    )
                    j -= 1
                doc = []
                while j > 0 and lines[j - 1].strip().startswith("///"):
                    doc.append(lines[j - 1])
                    j -= 1
                if not hidden:
                    has = any("```" in d for d in doc)
                    found.append((i + 1, match.group(1), match.group(2), has))
        if not stripped.startswith("//"):
            code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
            depth += code.count("{") - code.count("}")
        if depth_test is not None and depth <= depth_test and "}" in line:
            depth_test = None
    return found


def main(argv):
    require = "--require" in argv
    summary = "--summary" in argv
    crates = [a for a in argv if a not in ("--require", "--summary")]
    missing_any = False
    for crate in crates:
        src = pathlib.Path(crate) / "src"
        total, missing = 0, []
        for path in sorted(src.rglob("*.rs")):
            for line, kind, name, has in items(path):
                total += 1
                if not has:
                    missing.append(f"  {path}:{line}: {kind} {name}")
        print(f"{crate}: {total - len(missing)} of {total} public items have an example")
        if missing:
            missing_any = True
            if not summary:
                print("\n".join(missing))
    return 1 if (require and missing_any) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
