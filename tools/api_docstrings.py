"""A griffe extension for the API pages (mkdocs.yml loads it): fastad's docstrings are plain
text whose examples are doctest lines (`>>>` and the output below them), and the compiled
functions' docstrings start with their signature, which the page shows already. Each run of
doctest lines becomes a fenced Python block, the signature line goes, and reST's
"Example::" reads "Example:" (the indented block below it is Markdown's code block)."""
import re

import griffe


def as_markdown(name, text):
    lines = text.splitlines()
    if lines and re.match(rf"{re.escape(name)}\(.*\)( -> .*)?$", lines[0]):
        lines = lines[1:]
    out, in_example = [], False
    for line in lines:
        starts = line.lstrip().startswith(">>>")
        if starts and not in_example:
            out += ["", "```python"]
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        if not in_example and line.endswith("::"):
            line = line[:-1]                      # reST's "Example::" before an indented block
        out.append(line.strip() if in_example else line)
    if in_example:
        out.append("```")
    return "\n".join(out).strip("\n")


class DocstringsAsMarkdown(griffe.Extension):
    def on_object(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.name, obj.docstring.value)
