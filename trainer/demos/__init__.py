"""The demos behind `skyrl demo` and `make demo`: they use the trainer, the trainer never uses
them.

- `lookup`: `skyrl demo` (`--model smollm2`, the default, on `lookup-chat`; `--model tiny` on
  the word-level `lookup` env), its presets and report.
- `terminal`: `skyrl demo --task terminal` (SmolLM2 on generated shell tasks, judged on the
  held-out split) and its `terminal-gen-demo` env.
- `report`: the reward chart, the trajectory viewer, the progress heartbeat and the closing
  lines both demos print.
- `cli`: the `skyrl demo` command (only typer at import time).
"""
