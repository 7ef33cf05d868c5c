"""mkdocs hook: render the docstrings' doctest examples (``>>>`` lines and their output)
as Python console code blocks instead of nested block quotes."""

from __future__ import annotations

import re

from markdown import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

_PROMPT = re.compile(r"^(\s*)>>> ")


class _DoctestFence(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        fenced = False
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            m = None if fenced else _PROMPT.match(line)
            if m is None:
                out.append(line)
                i += 1
                continue
            indent = m.group(1)
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():  # a doctest runs to a blank line
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
        return out


class DoctestFenceExtension(Extension):
    def extendMarkdown(self, md):  # type: ignore[no-untyped-def]  # noqa: N802
        md.preprocessors.register(_DoctestFence(md), "doctest_fence", 40)


@event_priority(100)  # before mkdocstrings reads the extensions
def on_config(config):  # type: ignore[no-untyped-def]
    config.markdown_extensions.append(DoctestFenceExtension())
    return config
