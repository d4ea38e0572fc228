"""MkDocs hooks (mkdocs.yml: hooks). The CLI reference's examples are code, as `autotune COMMAND --help` shows them.

A command's docstring ends in a `\\b` block, "Example:" and indented command lines, which Click prints as they
are; mkdocs-click passes them to Markdown as one paragraph, which a browser folds into one line. This turns
each such paragraph of docs/cli.md back into "Example:" and a code block.
"""

import re

EXAMPLE = re.compile(r"<p>(Examples?:)\n((?:[ \t]+\S.*(?:\n|(?=</p>)))+)</p>")


def on_page_content(html, page, **kwargs):
    if page.file.src_uri != "cli.md":
        return html
    return EXAMPLE.sub(lambda m: f"<p>{m.group(1)}</p>\n<pre><code>{_dedent(m.group(2))}</code></pre>", html)


def _dedent(lines: str) -> str:
    rows = lines.rstrip("\n").split("\n")
    indent = min(len(row) - len(row.lstrip()) for row in rows)
    return "\n".join(row[indent:] for row in rows)
