"""The templates' filling: templates/NAME.md (Markdown with ``$name`` fields,
string.Template) as lines, and a block of lines as one field's value."""

import os
from string import Template

TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")


def fill(name, **fields):
    """templates/NAME.md with its fields filled in, as a list of lines."""
    with open(os.path.join(TEMPLATES, name + ".md"), encoding="utf-8") as f:
        text = Template(f.read()).substitute(fields)
    return text.rstrip("\n").split("\n")


def block(lines):
    """Lines as one field's value: a block of its own, or nothing."""
    return "\n".join(lines)
