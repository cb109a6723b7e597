"""A command agent built on mini-swe-agent (v2: its bash tool through litellm's tool calls,
`mini.yaml`'s prompts), run programmatically without confirmation. Runs inside the episode's
sandbox with the harness's own venv (`python -m skyrl_sdk.benchmarks.harness_venv
mini-swe-agent`)."""

import os
from pathlib import Path

import yaml
from minisweagent import package_dir
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_model import LitellmModel

config = yaml.safe_load((Path(package_dir) / "config" / "mini.yaml").read_text())
agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}  # mode: the CLI's
agent_config["step_limit"] = int(os.environ.get("AGENT_MAX_TURNS", "10"))
model_config = dict(config["model"])
model_kwargs = {
    **model_config.pop("model_kwargs", {}),
    "api_base": os.environ["OPENAI_BASE_URL"],
    "api_key": os.environ["OPENAI_API_KEY"],
    "max_tokens": int(os.environ.get("AGENT_MAX_TOKENS", "256")),
}
model = LitellmModel(
    model_name="openai/" + os.environ["OPENAI_MODEL"],
    model_kwargs=model_kwargs,
    cost_tracking="ignore_errors",
    **model_config,
)
env = LocalEnvironment(cwd=os.getcwd(), timeout=30, **config.get("environment", {}))
instruction = Path(os.environ["SKYRL_INSTRUCTION_FILE"]).read_text(encoding="utf-8")
result = DefaultAgent(model, env, **agent_config).run(instruction)
print("exit_status", result.get("exit_status"), "calls", model.__class__.__name__)
