"""The agent loop: agents, policies, token-first trajectories, append-only chat rendering.

    from skyrl_sdk.agents import LoopAgent, RolloutLimits, ScriptedPolicy
    agent = LoopAgent(ScriptedPolicy(["42"]), RolloutLimits(max_turns=8))
    trajectory = await agent.play(env, task)

Heavy backends import torch / transformers / vllm only when built: `agents.engine`
(`LocalEngine`), `agents.openai_client` (`OpenAIClient`), `agents.vllm_engine` (`VLLMEngine`).
"""

from skyrl_sdk.agents.agent import Agent, PlayableEnv
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
from skyrl_sdk.agents.rollout import (
    ContextPolicy,
    LoopAgent,
    RolloutLimits,
    play_episode,
    rollout,
    run_episodes,
)
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
    "Agent",
    "ChatRenderer",
    "Completion",
    "ContextPolicy",
    "FinishReason",
    "GenerationContext",
    "LoopAgent",
    "PlayableEnv",
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
    "play_episode",
    "read_trajectories",
    "retokenize_conversation",
    "rollout",
    "run_episodes",
]
