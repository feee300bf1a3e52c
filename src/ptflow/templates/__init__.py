"""Every file ptflow renders or copies (launchers, batch scripts, prompts, configs, the HTML report), as package data.

Two jinja environments, both with undefined variables as errors and block tags that leave no blank lines:
``environment()`` for shell scripts, TOML, YAML and markdown (no escaping; comments are ``{## ##}`` because bash's
``${#array[@]}`` would open a jinja comment; ``q`` shell-quotes a value), and ``html_environment()`` for the report
pages under ``report/``, which escapes everything (traces and judge reasons are text an agent wrote).
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


@functools.cache
def html_environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader(__name__, "."),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=True,
    )


def render(name: str, **values) -> str:
    return environment().get_template(name).render(**values)
