"""Every ```python block of README.md runs as written."""
import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks():
    with open(README) as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_block_runs(index, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)            # blocks may write files (checkpoints)
    code = python_blocks()[index]
    exec(compile(code, f"README.md block {index}", "exec"), {"__name__": f"readme_block_{index}"})
