#!/usr/bin/env python3
"""Checks the links of Markdown files: every relative link names a file that exists, every
`#anchor` a heading of its page (mdBook's ids), and every `{{#include}}` a file (and anchor).

  links.py FILE_OR_DIR...     exit status 1 and one line per broken link
"""
import os
import re
import sys

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
INCLUDE = re.compile(r"\{\{#include ([^}:\s]+)(?::([A-Za-z0-9_-]+))?\}\}")


def strip_code(text):
    """The text without fenced code blocks and inline code (links there are not links)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif line.strip().startswith(fence):
                fence = None
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading):
    """mdBook's id of a heading: lower case, punctuation gone, spaces to dashes."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"`", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return "".join(c if (c.isalnum() or c in "-_") else ("-" if c == " " else "") for c in text)


def anchors(path, cache={}):
    if path not in cache:
        ids = set()
        seen = {}
        for line in strip_code(open(path, encoding="utf-8").read()).split("\n"):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                ids.add(base if n == 0 else f"{base}-{n}")
                seen[base] = n + 1
        cache[path] = ids
    return cache[path]


def check(path):
    errors = []
    raw = open(path, encoding="utf-8").read()
    here = os.path.dirname(path)
    for m in INCLUDE.finditer(raw):
        target = os.path.normpath(os.path.join(here, m.group(1)))
        if not os.path.isfile(target):
            errors.append(f"{path}: include of a missing file {m.group(1)}")
        elif m.group(2) and f"ANCHOR: {m.group(2)}" not in open(target, encoding="utf-8").read():
            errors.append(f"{path}: include of a missing anchor {m.group(1)}:{m.group(2)}")
    text = strip_code(raw)
    for m in list(LINK.finditer(text)) + list(IMAGE.finditer(text)):
        url = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", url):
            continue  # http:, https:, mailto:
        file_part, _, anchor = url.partition("#")
        target = os.path.normpath(os.path.join(here, file_part)) if file_part else path
        if not os.path.exists(target):
            errors.append(f"{path}: link to a missing file {url}")
            continue
        if anchor and target.endswith(".md") and anchor not in anchors(target):
            errors.append(f"{path}: link to a missing heading {url}")
    return errors


def main(args):
    files = []
    for arg in args:
        if os.path.isdir(arg):
            for root, _, names in os.walk(arg):
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
        else:
            files.append(arg)
    errors = [e for f in files for e in check(f)]
    for e in errors:
        print(e)
    print(f"links.py: {len(files)} files, {len(errors)} broken links", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["."]))
