"""The documentation: the README is a front door (short, its quickstart prints), the site in
docs/ builds with warnings as errors (API pages from the docstrings included), and every
```python block of the README and of docs/ runs as written."""
import glob
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in
                               glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


def python_blocks():
    """(page, index on the page, code) of every ```python block, dedented (a block may sit in
    a list item)."""
    blocks = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for index, code in enumerate(re.findall(r"^( *)```python\n(.*?)^\1```", text, re.S | re.M)):
            blocks.append((page, index, textwrap.dedent(code[1])))
    return blocks


BLOCKS = python_blocks()


def test_every_page_with_code_has_blocks_found():
    """The block pattern finds what a reader sees: as many blocks as ```python fences."""
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            fences = len(re.findall(r"^ *```python$", f.read(), re.M))
        assert fences == sum(1 for p, _, _ in BLOCKS if p == page), page
    assert len(BLOCKS) >= 20


@pytest.mark.parametrize("page, index, code", BLOCKS, ids=[f"{p}[{i}]" for p, i, _ in BLOCKS])
def test_block_runs(page, index, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)            # blocks may write files (checkpoints, vectors)
    exec(compile(code, f"{page} block {index}", "exec"), {"__name__": f"docs_block_{index}"})


def test_readme_is_a_front_door(capsys):
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    assert len(text.splitlines()) <= 250
    sections = re.findall(r"^## (.*)$", text, re.M)
    assert sections[:4] == ["Why: the figures", "Install", "Quickstart", "Examples"]
    quickstart = [code for page, _, code in BLOCKS if page == "README.md"][0]
    exec(compile(quickstart, "README quickstart", "exec"), {"__name__": "quickstart"})
    assert re.search(r"\d", capsys.readouterr().out), "the quickstart prints its result"
    for link in re.findall(r"\]\(((?:docs/)[^)#]*)", text):
        assert os.path.exists(os.path.join(ROOT, link)), link


def test_site_builds_with_warnings_as_errors(tmp_path):
    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    with open(site / "api" / "fastad" / "index.html") as f:
        api = f.read()
    # pages generated from the docstrings: the compiled core's names are there, with their text
    for name in ("fastad.Parameter", "fastad.train", "fastad.vector_dot", "fastad.ranking_loss"):
        assert f'id="{name}"' in api, name
    assert "A trainable leaf" in api
    with open(site / "api" / "models" / "index.html") as f:
        assert 'id="fastad.models.Word2Vec.most_similar"' in f.read()
    for page in PAGES[1:]:
        name = page[len("docs/"):-len(".md")]
        html = name[:-len("index")] if name.endswith("index") else name + "/"
        assert (site / html / "index.html").exists(), page
