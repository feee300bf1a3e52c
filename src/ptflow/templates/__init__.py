"""Every file ptflow renders or copies into a job (launchers, batch scripts, prompts, configs), as package data.

One jinja environment for all of them: undefined variables are errors, block tags leave no blank lines, and
comments are ``{## ##}`` because bash's ``${#array[@]}`` would open a jinja comment. ``q`` shell-quotes a value.
"""

from __future__ import annotations

import functools
import shlex
from importlib import resources
from pathlib import Path


def path(name: str) -> Path:
    """The file ``name`` of this package (copied as is into job dirs, e.g. ``ray_node.sh``)."""
    found = resources.files(__name__) / name
    if not found.is_file():
        raise FileNotFoundError(f"ptflow has no template {name!r}")
    return Path(str(found))


@functools.cache
def environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__name__, "."),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        comment_start_string="{##",
        comment_end_string="##}",
        autoescape=False,  # shell scripts, TOML, YAML and markdown, never HTML
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env


def render(name: str, **values) -> str:
    return environment().get_template(name).render(**values)
