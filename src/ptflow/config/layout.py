"""Where every artifact lives. Rules and scripts get paths only from here.

Arguments may be wildcard strings such as ``"{model}"``, so the same functions give rule patterns and paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    results: str
    scratch: str
    hf_home: str
    evals_cache: str = ""  # inspect_evals' cache dir (INSPECT_EVALS_CACHE_DIR): URL and git data of the evals

    def __post_init__(self) -> None:
        if not self.evals_cache:  # paths.evals_cache unset: beside the checkpoints on scratch
            object.__setattr__(self, "evals_cache", str(Path(self.scratch, "inspect_evals")))

    # HF cache markers (one per repo) and the marker of the whole cache this workflow needs.
    def dataset_marker(self, dataset: str) -> str:
        return f"{self.results}/cache/datasets/{dataset}.json"

    def model_marker(self, model: str) -> str:
        return f"{self.results}/cache/models/{model}.json"

    def cache_marker(self) -> str:
        return f"{self.results}/cache/hf_cache.json"

    def eval_data_marker(self, eval_id: str) -> str:
        """What an eval's evaluation reads from the caches (datasets, URL files, git data, a local grader)."""
        return f"{self.results}/cache/evals/{eval_id}.json"

    def resources_marker(self) -> str:
        """The extra models and datasets of ``cache_resources`` (PostTrainBench resources.json files)."""
        return f"{self.results}/cache/resources.json"

    def posttrainbench_marker(self) -> str:
        """Rule posttrainbench_checkout's output: the checkout's commit, place and the object ids of the paths used."""
        return f"{self.results}/posttrainbench/checkout.json"

    def posttrainbench_cache_marker(self) -> str:
        """Rule posttrainbench_cache's output: every repo of the checkout's resources.json and the commit fetched."""
        return f"{self.results}/posttrainbench/hf_cache.json"

    def spend_ledger(self) -> str:
        """The matrix cap's ledger: its agent cells, written when a run starts (``config.spend.write_ledger``)."""
        return f"{self.results}/spend/ledger.json"

    def data(self, eval_id: str, split: str) -> str:
        return f"{self.results}/data/{eval_id}/{split}.parquet"

    def cell_dir(self, model: str, eval_id: str, agent: str) -> str:
        return f"{self.results}/cells/{model}/{eval_id}/{agent}"

    def manifest(self, model: str, eval_id: str, agent: str) -> str:
        return f"{self.cell_dir(model, eval_id, agent)}/checkpoint.json"

    def agent_trace_dir(self, model: str, eval_id: str, agent: str) -> str:
        """cli-agent cells: prompt, stdout/stderr of the agent, and the readable trace.md."""
        return f"{self.cell_dir(model, eval_id, agent)}/agent"

    def judge_json(self, model: str, eval_id: str, agent: str) -> str:
        return f"{self.cell_dir(model, eval_id, agent)}/judge.json"

    def judge_vote_json(self, model: str, eval_id: str, agent: str, judge: str, run: int | str) -> str:
        """One vote: run ``run`` of the panel's judge ``judge`` (what it left: the dir of this name without .json)."""
        return f"{self.cell_dir(model, eval_id, agent)}/judges/{judge}/run{run}.json"

    def eval_json(self, model: str, eval_id: str, agent: str) -> str:
        return f"{self.cell_dir(model, eval_id, agent)}/eval.json"

    def seed_eval_json(self, model: str, eval_id: str, agent: str, seed: int | str) -> str:
        """One evaluation seed of a seeded eval's cell; the cell's eval.json is the mean over its seeds."""
        return f"{self.cell_dir(model, eval_id, agent)}/seeds/{seed}/eval.json"

    def seed_inspect_dir(self, model: str, eval_id: str, agent: str, seed: int | str) -> str:
        return f"{self.cell_dir(model, eval_id, agent)}/seeds/{seed}/inspect"

    def rescore_json(self, model: str, eval_id: str, agent: str, scorer: str) -> str:
        """The cell's stored inspect log scored again by ``scorer`` (rule rescore), beside its eval.json."""
        return f"{self.cell_dir(model, eval_id, agent)}/rescore/{scorer}.json"

    def inspect_dir(self, model: str, eval_id: str, agent: str) -> str:
        return f"{self.cell_dir(model, eval_id, agent)}/inspect"

    def checkpoint_dir(self, model: str, eval_id: str, agent: str) -> str:
        # On scratch, not in results: checkpoints are large (tens of GB on real runs).
        return f"{self.scratch}/checkpoints/{model}/{eval_id}/{agent}"

    def env_record(self, name: str) -> str:
        """Rule env's output: what built a software environment (verl venv, NeMo-RL uv env) and its import check."""
        return f"{self.results}/envs/{name}.json"

    def log(self, stage: str, *parts: str) -> str:
        return f"{self.results}/logs/{stage}/{'/'.join(parts)}.log"

    def summary(self) -> str:
        return f"{self.results}/summary.csv"

    def leaderboard(self) -> str:
        return f"{self.results}/leaderboard.md"

    def heatmap(self) -> str:
        return f"{self.results}/heatmap.png"

    def agents_csv(self) -> str:
        """One row per agent: PostTrainBench's weighted score, its error, fallbacks, time and GPU-hours."""
        return f"{self.results}/agents.csv"

    def report_dir(self) -> str:
        return f"{self.results}/report"

    def report_index(self) -> str:
        """The static report people open in a browser (rebuilt whole by the aggregate rule)."""
        return f"{self.report_dir()}/index.html"

    @classmethod
    def from_config(cls, raw: dict, site_paths: dict | None = None) -> Layout:
        """config.paths, replaced key by key by the site's paths (``Site.paths``)."""
        from ptflow.config.uris import PathURIError, cluster_path
        from ptflow.config.validate import ConfigError

        paths = {**raw["paths"], **(site_paths or {})}
        try:
            paths = {k: cluster_path(v, f"paths.{k}") for k, v in paths.items()}  # lustre:///abs -> /abs
        except PathURIError as exc:
            raise ConfigError(f"config error: {exc}") from None
        evals_cache = paths.get("evals_cache")
        return cls(
            str(Path(paths["results"])),
            str(Path(paths["scratch"])),
            str(Path(paths["hf_home"])),
            str(Path(evals_cache)) if evals_cache else "",
        )
