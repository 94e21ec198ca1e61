"""The distribution's PEP 621 metadata, as pip shows it: built from pyproject.toml by the build backend.

setuptools' ``prepare_metadata_for_build_wheel`` (what pip runs before building) writes the ``METADATA`` of the
checkout into a temporary folder, in a child process (no network, no build), and ``importlib.metadata`` reads
it: the license (the SPDX expression of LICENSE), the authors of CITATION.cff, classifiers for the Python
versions and the topic, and keywords.
"""
import os
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("metadata")
    code = "import sys; from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Deprecat" not in proc.stderr, proc.stderr[-3000:]  # nothing setuptools will stop accepting
    return metadata.PathDistribution(out / proc.stdout.strip().splitlines()[-1])


def test_name_version_and_license(dist):
    meta = dist.metadata
    assert meta["Name"] == "hmm_nmt" and meta["Version"]
    with open(os.path.join(ROOT, "LICENSE")) as f:
        assert f.readline().strip() == "MIT License"
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]


def test_authors_are_citation_cffs(dist):
    with open(os.path.join(ROOT, "CITATION.cff")) as f:
        cff = f.read()
    author = dist.metadata["Author"]
    assert author and f"- name: {author}" in cff


def test_classifiers_name_python_versions_and_the_topic(dist):
    classifiers = dist.metadata.get_all("Classifier") or []
    assert "Topic :: Scientific/Engineering :: Artificial Intelligence" in classifiers
    versions = [c.rsplit(" :: ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")]
    assert versions, classifiers
    # every version named is allowed by Requires-Python
    low = tuple(int(x) for x in dist.metadata["Requires-Python"].removeprefix(">=").split("."))
    assert all(tuple(int(x) for x in v.split(".")) >= low for v in versions), (versions, low)
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: the license is License-Expression


def test_keywords_and_description(dist):
    keywords = [k for k in (dist.metadata["Keywords"] or "").split(",") if k.strip()]
    assert "machine translation" in keywords and "word alignment" in keywords
    assert dist.metadata["Summary"]
    assert dist.metadata["Description-Content-Type"] == "text/markdown"
