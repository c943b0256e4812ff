#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown: README.md and docs/**/*.md.

Every link or image whose target is not a URL must name a file or folder that exists,
relative to the page; a #fragment pointing into a Markdown page must match one of that
page's headings (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
Links inside code (fenced blocks and `spans`) are not links and are skipped.

Usage: check_links.py ROOT [FILE ...]   (no FILE: README.md and every docs/**/*.md)
Exit status 0 when every link resolves, 1 with one line per broken link otherwise.
"""
import pathlib
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(path, keep_code_spans=False):
    """(line number, text) of the lines outside fenced code, code spans blanked unless kept."""
    in_fence = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(1)
            elif fence.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is None:
            yield number, line if keep_code_spans else CODE_SPAN.sub("", line)


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading)               # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        for _, line in prose_lines(path, keep_code_spans=True):  # `code` is part of an anchor
            match = HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        for match in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8")):
            found.add(match.group(1))
        cache[path] = found
    return cache[path]


def targets(line):
    for match in LINK.finditer(line):
        yield match.group(1)
    match = REFERENCE.match(line)
    if match:
        yield match.group(1)


def check(root, page):
    broken = []
    for number, line in prose_lines(page):
        for target in targets(line):
            if EXTERNAL.match(target):
                continue
            where, _, fragment = target.partition("#")
            dest = page if where == "" else (page.parent / where).resolve()
            shown = f"{page.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{shown}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{shown}: no heading #{fragment} in {dest.relative_to(root)}")
    return broken


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1]).resolve()
    pages = [root / p for p in argv[2:]] or [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        broken += check(root, page.resolve())
    for line in broken:
        print(line)
    print(f"check_links: {len(pages)} pages, {len(broken)} broken links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
