"""The PostTrainBench checkouts' own judge panels, by the judges part's version (the checkout marker's
``judge_protocol``): d27a95e's panel (``v1.1``, :mod:`judge_run_v11` over :mod:`judge_v11`) and main's
``src/judges/`` (:mod:`judge_main`). Each is a module with the same names, which the planning (the cells' panel, a
vote's params, the checkout's paths) and the judge's room (``ptflow.stages.judge.ptb_vote``) call without knowing
which protocol it is (the preflight reads what each needs from ``ptflow.config.judges.PANEL_NEEDS``):

- ``PROTOCOL``, ``LABEL``, ``PANEL`` (its judges); ``panel()`` (a ``JudgePanel``), ``panel_judge(id, checkout=None)``
  (its judge: ``id``, ``cli``, ``model``, ``subscription``, ``key``, ``pin``, ``argv(prompt, home)``,
  ``env(path, environ)``, ``binds(checkout, tmp, auth)``, and where ``pin`` is set ``install_argv(home)``,
  ``install_env(path)``);
- ``checkout_paths(eval)``, ``auth_json(raw, checkout)``, ``subscription_auth(checkout)``,
  ``vote_settings(raw, agent, agent_config)``;
- ``judge_home_entries(...)``, ``build_judge_home(...)``, ``judge_prompt(checkout, judge, eval, model, vote, env)``,
  ``PtbVerdictError``, ``HOME``, ``TASK``, ``VERDICT_FILE``, ``AUTH_IN_HOME``;
- ``vote_outcome(judge, text, how, see)``, ``export_from_votes(vote_json)`` (main's also takes the cell's decided
  fields: ``ptflow.results.ptb_protocol.collect_judgement_texts``).

A judges part without a panel of its own here (v1.0: run_task.sh's one judge) is judged by the config's judge.
"""

from __future__ import annotations

from types import ModuleType

from ptflow.stages.posttrainbench import judge_main, judge_run_v11

PANELS: dict[str, ModuleType] = {judge_run_v11.PROTOCOL: judge_run_v11, judge_main.PROTOCOL: judge_main}


def adapter(protocol: str | None) -> ModuleType | None:
    """The panel module of a judges part's version (None: the checkout's judge is none of these)."""
    return PANELS.get(protocol) if protocol else None
