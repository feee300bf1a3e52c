"""The configuration's first check and the form of its errors: the JSON schema, one-line errors, canonical values.

:func:`validate_schema` checks shape, types and unknown keys against the JSON schema (through
``snakemake.utils.validate``), and :func:`explain_schema_error` turns a jsonschema error into one line naming the key,
the bad value and what to do; the site files are checked the same way (``ptflow.config.sites``). :class:`ConfigError`
is what every check of the config raises (the schema's here, the entries' in ``ptflow.config.entries``, the matrix's
in ``ptflow.config.matrix``); :func:`canonical` gives nested values one key order, so params compare by meaning.
"""

from __future__ import annotations

import difflib
from pathlib import Path

SCHEMA_DIR = Path(__file__).parent / "schemas"
# The schemas are JSON, not YAML: snakemake.utils.validate reads the schema file each time (every Snakemake start, two
# per Slurm job), trying JSON first; the YAML ones went through yte's pure-Python parse (55 + 36 ms; JSON: under 1).
CONFIG_SCHEMA = SCHEMA_DIR / "config.schema.json"


class ConfigError(ValueError):
    """A configuration problem, described in one line."""


def canonical(value):
    """Nested mappings with sorted keys. Snakemake compares params by their text, so without this a config whose
    keys were merely reordered (an editor, yaml.safe_dump) would look changed and rerun finished trainings."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def _where(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def explain_schema_error(err) -> str:
    """One line from a jsonschema ValidationError: where, what, and what to do."""
    where = _where(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        hints = [
            f"'{k}' (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(k, allowed, 1)) else f"'{k}'"
            for k in extra
        ]
        return f"config error at {where}: unknown key {', '.join(hints)}; allowed keys: {', '.join(allowed)}"
    if err.validator == "required":
        return f"config error at {where}: {err.message}; add it (see docs/configuration.md)"
    if err.validator in ("minimum", "exclusiveMinimum"):
        return f"config error at {where}: {err.instance!r} is too small ({err.message}); use a positive number"
    if err.validator == "enum":
        allowed = ", ".join(repr(v) for v in err.validator_value)
        return f"config error at {where}: {err.instance!r} is not one of {allowed}"
    if err.validator == "minItems":
        return f"config error at {where}: the list is empty; give at least {err.validator_value} entry"
    if err.validator == "oneOf" and list(err.absolute_path)[:1] == ["judge"] and isinstance(err.instance, dict):
        return _judge_error(err, where)
    if err.validator == "oneOf" and list(err.absolute_path)[-1:] == ["sampling"]:
        return (
            f"config error at {where}: {err.instance!r} must be 'greedy' or a mapping of temperature (> 0), top_p, seed"
        )
    if err.validator == "oneOf":
        return f"config error at {where}: {err.instance!r} must be 'all' or a non-empty list of ids"
    return f"config error at {where}: {err.message}"


def validate_schema(cfg: dict) -> None:
    """Shape, types and unknown keys, checked by snakemake.utils.validate against the JSON schema."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(cfg, str(CONFIG_SCHEMA))
    except WorkflowError as exc:
        cause = exc.__context__ if hasattr(exc.__context__, "absolute_path") else None
        if cause is None:
            raise ConfigError(f"config error: {exc}") from None
        raise ConfigError(explain_schema_error(cause)) from None


def _judge_error(err, where: str) -> str:
    """The judge's oneOf (the one-judge shorthand | the panel; each judge: agent + model | cli), explained by the
    branch the entry meant: the panel where it has ``judges``, else the shorthand."""
    from jsonschema.exceptions import best_match

    branch = 1 if list(err.absolute_path) == ["judge"] and "judges" in err.instance else 0
    meant = [e for e in err.context if e.relative_schema_path and e.relative_schema_path[0] == branch]
    if meant and all(e.validator == "required" for e in meant):  # agent + model | cli: neither complete
        return f"config error at {where}: a judge needs agent and model, or cli; add them (see docs/configuration.md)"
    if not meant:  # both spellings matched: agent and cli given together
        return f"config error at {where}: a judge has either agent (and model) or cli, not both"
    return explain_schema_error(best_match(meant))  # a judge of the panel's list: its own oneOf, explained alike


def unknown_id_error(kind: str, key: str, value: str, known) -> ConfigError:
    """The error for an id that names no entry of its section: the closest known one, and all of them."""
    known = list(known)
    close = difflib.get_close_matches(value, known, 1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(
        f"config error at {key}: {value!r} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind} id{hint}; "
        f"known: {', '.join(known)} — fix the spelling or add it under {kind}s"
    )


def check_unique_ids(entries: list[dict], section: str) -> None:
    """Refuse a section (``models``, ``evals``, ``agents``) where two entries share an id."""
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry["id"] in seen:
            raise ConfigError(
                f"config error at {section}[{i}].id: duplicate id {entry['id']!r} "
                f"(also {section}[{seen[entry['id']]}]); give each entry its own id"
            )
        seen[entry["id"]] = i
