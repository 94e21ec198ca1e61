"""Every relative link of README.md and docs/*.md points at a file of the repository and, with ``#anchor``, at a
heading of that page (GitHub's anchors: the heading lower-cased, punctuation but ``-`` and ``_`` dropped, spaces
as ``-``, ``-1``, ``-2`` for repeats), so that a renamed section or a moved file fails here."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```$", re.S | re.M)


def slug(heading):
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    for line in text.splitlines():
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]


def test_the_slug_rule():
    assert slug("Subword vocabulary size (`--merges`)") == "subword-vocabulary-size---merges"
    assert slug("7.3 Alignment stage: FLOPs per pair against the CPU's matmul rate") == \
        "73-alignment-stage-flops-per-pair-against-the-cpus-matmul-rate"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_relative_link_resolves(page):
    bad = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = page if not file else os.path.normpath(os.path.join(os.path.dirname(page), file))
        if not os.path.exists(dest):
            bad.append(f"{target}: no file {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    assert not bad, "\n".join(bad)
