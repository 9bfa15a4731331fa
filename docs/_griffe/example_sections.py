"""Griffe extension for the API reference: plain-text docstrings as Markdown.

The library's Google-style docstrings are written as plain text. Two of
their habits would be misread by Markdown:

* doctests are titled `Example:`, which griffe reads as an admonition, so
  the `>>>` lines would be rendered as prose (and outputs such as
  `[1.0, 0.0]` taken for link references); the plural `Examples:` makes them
  an examples section with code blocks;
* indexing such as `G[rows][:, cols]` in prose is Markdown's reference-link
  syntax; the second bracket is escaped outside code spans and doctests.

Only the rendered text changes: nothing is written back to the source files.
"""

import re

import griffe

_SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


def _escape_reference_brackets(text: str) -> str:
  lines = []
  for line in text.split("\n"):
    stripped = line.lstrip()
    if not stripped.startswith((">>>", "...")) and "][" in line:
      parts = line.split("`")
      # Even parts are outside code spans.
      parts[::2] = [p.replace("][", "]\\[") for p in parts[::2]]
      line = "`".join(parts)
    lines.append(line)
  return "\n".join(lines)


class ExampleSections(griffe.Extension):
  """Makes the library's docstrings render as intended (see module doc)."""

  def on_instance(self, *, obj, **kwargs):  # noqa: D102
    docstring = obj.docstring
    if docstring is None:
      return
    value = _SINGULAR.sub(r"\1Examples:", docstring.value)
    docstring.value = _escape_reference_brackets(value)
