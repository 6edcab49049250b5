"""A griffe extension for the API reference: the package's docstrings are numpydoc with
Sphinx cross-reference roles (``:class:`~simulator.config.Survey```, ``:func:`scan```), which
mkdocstrings would print as they are. Each role becomes inline code of the name it shows
(the last part after ``~``, as Sphinx shows it).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|obj|exc|const):`(~?)([^`]+)`")


def _shown(match: re.Match[str]) -> str:
    short, target = match[1], match[2].strip()
    if "<" in target and target.endswith(">"):  # :class:`text <target>`
        return f"`{target.split('<')[0].strip()}`"
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring as inline code."""

    def on_instance(self, **kwargs: Any) -> None:
        obj = kwargs["obj"]
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_shown, obj.docstring.value)
