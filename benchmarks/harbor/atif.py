"""Export our `Trajectory` as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format).

One step per opening message (source `system` / `user`) and one `agent` step per turn, with
its tool calls, the tool results as the step's observation, and token ids / logprobs in the
step's metrics when the policy gave them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from skyrl_sdk.agents.trajectory import Trajectory

ATIF_VERSION = "ATIF-v1.8"


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def to_atif(
    trajectory: Trajectory, *, agent_name: str = "skyrl-llm", agent_version: str = "0.1.0"
) -> dict[str, Any]:
    """The ATIF document of one episode (a JSON-serialisable dict)."""
    steps: list[dict[str, Any]] = []
    at = _iso(trajectory.started_at or 0.0)
    for message in trajectory.prompt_messages:
        role = message.get("role")
        source = "system" if role == "system" else "user"
        steps.append(
            {
                "step_id": len(steps) + 1,
                "timestamp": at,
                "source": source,
                "message": message["content"],
            }
        )
    prompt_tokens = len(trajectory.prompt_ids)
    completion_tokens = 0
    for turn in trajectory.turns:
        calls = []
        for i, call in enumerate(turn.tool_calls):
            calls.append(
                {
                    "tool_call_id": call.id or f"call_{turn.index}_{i}",
                    "function_name": call.name,
                    "arguments": call.arguments,
                }
            )
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "timestamp": at,
            "source": "agent",
            "model_name": trajectory.policy,
            "message": turn.action,
        }
        if calls:
            step["tool_calls"] = calls
        results = []
        for j, obs in enumerate(turn.observation):
            source_id = calls[j]["tool_call_id"] if j < len(calls) else None
            results.append({"source_call_id": source_id, "content": obs.get("content", "")})
        if results:
            step["observation"] = {"results": results}
        metrics: dict[str, Any] = {"completion_tokens": len(turn.token_ids)}
        if turn.token_ids:
            metrics["completion_token_ids"] = list(turn.token_ids)
        if turn.logprobs is not None:
            metrics["logprobs"] = list(turn.logprobs)
        step["metrics"] = metrics
        step["extra"] = {"reward": turn.reward, "finish_reason": turn.finish_reason.value}
        completion_tokens += len(turn.token_ids)
        steps.append(step)
    if not steps:  # ATIF needs at least one step
        steps.append({"step_id": 1, "timestamp": at, "source": "user", "message": ""})
    return {
        "schema_version": ATIF_VERSION,
        "session_id": trajectory.episode_id,
        "agent": {"name": agent_name, "version": agent_version, "model_name": trajectory.policy},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": prompt_tokens,
            "total_completion_tokens": completion_tokens,
            "total_steps": len(steps),
        },
        "extra": {
            "task_id": trajectory.task_id,
            "stop_reason": trajectory.stop_reason.value,
            "reward": trajectory.reward,
            "error": trajectory.error,
        },
    }
