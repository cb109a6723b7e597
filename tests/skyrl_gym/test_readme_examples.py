"""The README's code is real: the ToolEnv example runs, the scripted format and model.source
examples are what the code accepts."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import yaml

import skyrl_gym

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block_after(marker: str, lang: str) -> str:
    """The first fenced `lang` block after `marker` in the README."""
    start = README.index(marker)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert match, f"no ```{lang} block after {marker!r}"
    return match.group(1)


def test_the_tool_env_example_is_in_the_readme_verbatim_and_runs():
    example = (ROOT / "examples" / "capital_env.py").read_text(encoding="utf-8")
    assert example.strip() in README, "README must show examples/capital_env.py verbatim"
    skyrl_gym.deregister("capitals")
    try:
        namespace = runpy.run_path(str(ROOT / "examples" / "capital_env.py"))  # asserts itself
        env = skyrl_gym.make("capitals")
        env.reset(options={"task": {"task_id": "fr", "country": "France"}})
        _, reward, terminated, _, info = env.step("<capital>France")  # malformed call
        assert (reward, terminated) == (0.0, False) and info["parse_error"] is not None
        assert namespace["CapitalEnv"].__mro__[1] is skyrl_gym.ToolEnv
    finally:
        skyrl_gym.deregister("capitals")


def test_the_scripted_policy_example_scores_one(tmp_path: Path):
    script = json.loads(_block_after("**Scripted policies.**", "json"))
    (tmp_path / "answers.json").write_text(json.dumps(script))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "skyrl_gym.cli",
            "eval",
            "math",
            "--policy",
            "scripted:answers.json",
            "--num",
            "2",
            "--out",
            "oracle",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "oracle" / "results.json").read_text())["summary"]
    assert (summary["episodes"], summary["mean_reward"]) == (2, 1.0)


def test_the_model_source_example_is_a_valid_config(tmp_path: Path):
    from skyrl_sdk.trainer.config import ModelSource, build_config

    data = yaml.safe_load(_block_after("**Choosing the model.**", "yaml"))
    config = build_config(data)
    assert config.model.source is ModelSource.PRETRAINED and config.model.lora.enabled
    for source in ModelSource:  # every source the README names exists, and only those
        assert f"`{source.value}`" in README.split("**Choosing the model.**")[1][:800]
