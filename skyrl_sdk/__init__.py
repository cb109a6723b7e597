"""skyrl-sdk: train and evaluate multi-turn, tool-using LLM agents in sandboxes.

The distribution installs two import roots: `skyrl_gym` (the environment API, SkyRL's own name,
kept so SkyRL envs run unchanged) and this package, whose subpackages live in the repository's
top-level folders: `skyrl_sdk.agents`, `skyrl_sdk.tools`, `skyrl_sdk.sandboxes`,
`skyrl_sdk.trainer` and `skyrl_sdk.benchmarks`. Nothing is installed under a bare name such as
`agents` or `tools`, so this SDK lives next to `openai-agents` or any other package.
"""

__version__ = "0.1.0"
