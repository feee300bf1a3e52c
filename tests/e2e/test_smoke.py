"""`ptflow smoke` on the embedded default: one cell of the matrix, as an agent `<id>-smoke` with a short budget, run
for real (cache, preprocess, train, evaluate) and nothing else of the matrix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.smk import REPO, job_env

PTFLOW = str(Path(sys.executable).with_name("ptflow"))


def test_smoke_runs_one_cell_with_a_short_budget(tmp_path):
    out = subprocess.run(
        [PTFLOW, "smoke", "--steps", "3", "-s", str(REPO / "Snakefile"), "--profile", str(REPO / "profiles/local")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    cells = sorted(
        p.relative_to(tmp_path / "results" / "cells") for p in tmp_path.glob("results/cells/*/*/*/eval.json")
    )
    assert len(cells) == 1 and cells[0].parts[2].endswith("-smoke"), cells
    manifest = json.loads((tmp_path / "results" / "cells" / cells[0].parent / "checkpoint.json").read_text())
    assert manifest["params"]["steps"] == 3, manifest["params"]
    assert f"smoke cell {cells[0].parent}" in out.stdout
    assert not (tmp_path / "results" / "summary.csv").exists()  # the matrix itself was not run
