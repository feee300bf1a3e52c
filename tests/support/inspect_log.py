"""A real, small inspect log: inspect-ai runs a four-sample arithmetic task against ``mockllm/model``, inspect's own
built-in model for tests, which answers each question correctly except the last."""

from __future__ import annotations

from pathlib import Path


def make_inspect_log(log_dir: Path, task_name: str = "add") -> Path:
    """Run the task; returns the one ``.eval`` log written into ``log_dir``."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    def answer(messages, tools, tool_choice, config):
        a, b = messages[-1].text.removeprefix("What is ").removesuffix("?").split("+")
        total = int(a) + int(b) + (1 if a == "4" else 0)  # one wrong answer, so the log shows both scores
        out = ModelOutput.from_content(model="mockllm/model", content=f"The answer is {total}")
        # With usage given, mockllm does not count tokens with tiktoken, which would download its vocabulary.
        out.usage = ModelUsage(input_tokens=8, output_tokens=4, total_tokens=12)
        return out

    task = Task(
        name=task_name,
        dataset=[Sample(input=f"What is {i}+{i}?", target=str(2 * i), id=i) for i in range(1, 5)],
        solver=generate(),
        scorer=match(location="end"),
    )
    [log] = inspect_eval(
        task,
        model="mockllm/model",
        model_args={"custom_outputs": answer},
        log_dir=str(log_dir),
        log_format="eval",
        display="none",
    )
    if log.status != "success":
        raise RuntimeError(f"the mockllm eval ended {log.status}: {log.error}")
    return Path(log.location)
