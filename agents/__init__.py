"""The agent loop: policies, token-first trajectories, append-only chat rendering.

    from skyrl_sdk.agents import rollout, ScriptedPolicy, ChatRenderer
    trajectory = await rollout(env, policy, task, max_turns=8, max_tokens=256)

Heavy backends import torch / transformers / vllm only when built: `agents.local_engine`
(`LocalEngine`), `agents.openai_client` (`OpenAIClient`), `agents.vllm_engine` (`VLLMEngine`).
"""

from skyrl_sdk.agents.chat import (
    ChatRenderer,
    RenderedPrompt,
    TemplateError,
    retokenize_conversation,
)
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    Policy,
    PolicyError,
    SamplingParams,
)
from skyrl_sdk.agents.rollout import ContextPolicy, RolloutLimits, rollout, run_episodes
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import (
    Segment,
    SegmentStart,
    StopReason,
    TrainingSample,
    Trajectory,
    TrajectoryWriter,
    Turn,
    latest_by_episode,
    read_trajectories,
)

__all__ = [
    "ChatRenderer",
    "Completion",
    "ContextPolicy",
    "FinishReason",
    "GenerationContext",
    "Policy",
    "PolicyError",
    "RenderedPrompt",
    "RolloutLimits",
    "SamplingParams",
    "ScriptedPolicy",
    "Segment",
    "SegmentStart",
    "StopReason",
    "TemplateError",
    "TrainingSample",
    "Trajectory",
    "TrajectoryWriter",
    "Turn",
    "latest_by_episode",
    "read_trajectories",
    "retokenize_conversation",
    "rollout",
    "run_episodes",
]
