"""mkdocs hooks: a Sphinx role left in a docstring fails the strict build.

mkdocstrings renders Markdown, so ``:meth:`set_noise``` showed literally in the
API reference; docstrings use Markdown cross-references instead
(``[`SumOfGamma`][combolayer.SumOfGamma]``, or plain backticks).
"""

import logging
import re

log = logging.getLogger("mkdocs.plugins.sphinx_roles")

#: A Sphinx role as it reaches the page: ``:meth:`` then backticks or a <code> span.
SPHINX_ROLE = re.compile(r":(class|meth|func|attr|mod|data|exc|obj|py:\w+):(`|<code>)")


def on_page_content(html, page, config, files):
    for match in SPHINX_ROLE.finditer(html):
        start = max(0, match.start() - 40)
        log.warning("%s: a Sphinx role renders literally (...%s...): use a Markdown "
                    "cross-reference like [`Name`][combolayer.Name] or backticks",
                    page.file.src_path, html[start:match.end() + 40])
    return html
