#!/usr/bin/env python3
"""Offline link check for the README and the book (docs/).

Checks README.md, every docs/src/*.md, and every file a chapter pulls in
with mdBook's {{#include}}:

- every relative link and image, [x](path) or [x](path#anchor), points to
  a file that exists;
- every #anchor, in the same file or another .md file, matches a heading
  there (slugs as GitHub and mdBook make them: lower case, punctuation
  other than - and _ dropped, each space a -, repeats numbered -1, -2);
- every SUMMARY.md entry has its chapter file, and every docs/src/*.md is
  listed in SUMMARY.md.

An included file is checked twice: from its own folder (as GitHub shows
it) and from the including chapter's folder (mdBook resolves its links
there). http(s):// and mailto: links are skipped, never fetched.

Standard library only. Prints each problem as file:line: target and exits
1 when there is one.

    python3 tools/check-links.py
"""

import os
import re
import sys
import unicodedata
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOK_SRC = os.path.join(ROOT, "docs", "src")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s]+)\s*\}\}")
# [text](target) and ![alt](target), with an optional "title".
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)"
)
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*\"([^\"]*)\"", re.I)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*\"([^\"]*)\"", re.I)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SKIP = ("http://", "https://", "mailto:")


def rel(path):
    return os.path.relpath(path, ROOT)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def include_target(spec, base_dir):
    """The file an {{#include path[:anchor|:lines]}} names."""
    path = spec
    # `file.md:anchor`, `file.md:10`, `file.md:10:20`: the file is the part
    # before the first ':' that follows the extension.
    m = re.match(r"^(.*?\.[A-Za-z0-9]+)(?::.*)?$", spec)
    if m:
        path = m.group(1)
    return os.path.normpath(os.path.join(base_dir, path))


def outside_fences(lines):
    """(index, line) for the lines not inside a fenced code block."""
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield i, line
        elif (
            m
            and m.group(1)[0] == fence[0]
            and len(m.group(1)) >= len(fence)
            and not line[m.end():].strip()
        ):
            fence = None


def expanded(path, seen=()):
    """The file's lines with {{#include}} replaced by the included lines,
    as mdBook builds a page (anchors and line ranges ignored: the whole
    file is taken, which can only add headings)."""
    if path in seen or not os.path.isfile(path):
        return []
    out = []
    for line in read_lines(path):
        m = INCLUDE.search(line)
        if m:
            target = include_target(m.group(1), os.path.dirname(path))
            out.extend(expanded(target, seen + (path,)))
        else:
            out.append(line)
    return out


def heading_text(raw):
    """What a heading renders as, for its slug."""
    text = re.sub(r"[ \t]+#+[ \t]*$", "", raw or "")
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", text)
    text = CODE_SPAN.sub(lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("*", "").replace("~", "")
    return text.strip()


def slug(text):
    out = []
    for ch in text.lower():
        if ch in "-_" or ch.isalnum() or unicodedata.category(ch) in ("Mn", "Mc"):
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


_anchor_cache = {}


def anchors(path):
    """Every anchor a page offers: heading slugs (numbered when repeated),
    explicit {#id}s, and HTML id/name attributes."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    lines = expanded(path)
    found = set()
    counts = {}
    prev = None
    for i, line in outside_fences(lines):
        for m in HTML_ID.finditer(line):
            found.add(m.group(1))
        text = None
        m = ATX.match(line)
        if m:
            text = m.group(2) or ""
        elif SETEXT.match(line) and prev is not None and prev[0] == i - 1 and prev[1].strip() \
                and not ATX.match(prev[1]) and not prev[1].lstrip().startswith(("|", "-", "*", ">")):
            text = prev[1].strip()
        prev = (i, line)
        if text is None:
            continue
        explicit = re.search(r"\{#([^}\s]+)\}\s*$", text)
        if explicit:
            found.add(explicit.group(1))
            text = text[: explicit.start()]
        base = slug(heading_text(text))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    _anchor_cache[path] = found
    return found


def links(lines):
    """(line number, target) for every link, image and reference
    definition outside code."""
    for i, line in outside_fences(lines):
        if INCLUDE.search(line):
            continue
        plain = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        for m in INLINE_LINK.finditer(plain):
            yield i + 1, m.group(1)
        m = REF_DEF.match(plain)
        if m:
            yield i + 1, m.group(1)
        for m in HTML_ATTR.finditer(plain):
            yield i + 1, m.group(1)


def check_links(path, page, problems, context=""):
    """Checks every link in `path` as shown on `page`: relative targets
    resolve from the page's folder and a bare #anchor names a heading of
    the page (the file itself, or a chapter that includes it)."""
    base_dir = os.path.dirname(page)
    count = 0
    for line, target in links(read_lines(path)):
        target = target.strip()
        if target.startswith("<") and target.endswith(">"):
            target = target[1:-1]
        if not target or target.lower().startswith(SKIP):
            continue
        count += 1
        where = f"{rel(path)}:{line}: {target}{context}"
        file_part, _, anchor = target.partition("#")
        if file_part:
            dest = os.path.normpath(os.path.join(base_dir, unquote(file_part)))
            if not os.path.exists(dest):
                problems.append(f"{where} (no such file)")
                continue
        else:
            dest = page
        if anchor and dest.endswith(".md") and os.path.isfile(dest):
            if unquote(anchor) not in anchors(dest):
                problems.append(f"{where} (no heading #{anchor} in {rel(dest)})")
    return count


def includes(path):
    """(line number, included file) for each {{#include}} in a chapter."""
    for i, line in enumerate(read_lines(path)):
        for m in INCLUDE.finditer(line):
            yield i + 1, m.group(1), include_target(m.group(1), os.path.dirname(path))


def summary_entries(path):
    for i, line in outside_fences(read_lines(path)):
        for m in re.finditer(r"\[[^\]]*\]\(([^)]*)\)", line):
            yield i + 1, m.group(1).strip()


def main():
    problems = []
    count = 0
    chapters = sorted(
        os.path.join(BOOK_SRC, f) for f in os.listdir(BOOK_SRC) if f.endswith(".md")
    ) if os.path.isdir(BOOK_SRC) else []

    summary = os.path.join(BOOK_SRC, "SUMMARY.md")
    for path in [os.path.join(ROOT, "README.md")] + chapters:
        # SUMMARY.md's entries are checked as chapters, below.
        if os.path.isfile(path) and path != summary:
            count += check_links(path, path, problems)

    # Included files: from their own folder, and from each includer's.
    included = {}
    for chapter in chapters:
        for line, spec, target in includes(chapter):
            if not os.path.isfile(target):
                problems.append(f"{rel(chapter)}:{line}: {{{{#include {spec}}}}} (no such file)")
                continue
            included.setdefault(target, []).append(chapter)
    for target, includers in sorted(included.items()):
        count += check_links(target, target, problems)
        for chapter in includers:
            count += check_links(
                target,
                chapter,
                problems,
                context=f" (as included by {rel(chapter)})",
            )

    # SUMMARY.md: every entry has its file; every chapter is listed.
    if os.path.isfile(summary):
        listed = set()
        for line, target in summary_entries(summary):
            if not target:
                continue  # a draft chapter
            dest = os.path.normpath(os.path.join(BOOK_SRC, unquote(target.partition("#")[0])))
            listed.add(dest)
            if not os.path.isfile(dest):
                problems.append(f"{rel(summary)}:{line}: {target} (chapter file missing)")
        for chapter in chapters:
            if chapter != summary and chapter not in listed:
                problems.append(f"{rel(chapter)}:1: (not listed in {rel(summary)})")
    elif chapters:
        problems.append(f"{rel(summary)}:1: (missing)")

    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    print(f"ok: {count} links checked in README.md, {len(chapters)} files of docs/src and "
          f"{len(included)} included file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
