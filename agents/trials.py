"""Trials: every task played K times (`--trials K`), each trial with a sampling seed of its own.

A trial is one episode of a task. Trial `k` of task `t` has the episode id `t` for k = 0 (so a
one-trial run reads as before, and `--resume` with more trials extends it) and `t#k` after;
its trajectory carries `trial = k`. The env plays the same task every trial (its seed stays
the task's): only the policy's sampling seed changes, `trial_seed(base, k, K)`.

The statistics over trials (intervals, pass@k, pass^k, flip rate) are `skyrl_sdk.stats`.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from skyrl_gym.tasks import TaskRow
from skyrl_sdk.agents.agent import Agent, PlayableEnv
from skyrl_sdk.agents.policy import Policy, SamplingParams
from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits
from skyrl_sdk.agents.trajectory import Trajectory

TRIAL_SEED_STRIDE = 1_000_003
"""Seeds of consecutive trials lie this far apart, so two runs whose base seeds differ by
less never share a trial's seed."""


def trial_episode_id(task_id: str, trial: int) -> str:
    """The episode id of trial `trial` of a task: its task id for trial 0, else `id#trial`."""
    return task_id if trial == 0 else f"{task_id}#{trial}"


def trial_seed(base: int | None, trial: int, trials: int) -> int | None:
    """The sampling seed of trial `trial` of `trials`: `base` for trial 0, and
    `base + trial * TRIAL_SEED_STRIDE` after. One trial without a seed stays unseeded (as
    before trials existed); several trials without one count from 0, so the run repeats."""
    if base is None and trials == 1:
        return None
    return (base or 0) + trial * TRIAL_SEED_STRIDE


def trial_episodes(
    tasks: Sequence[TaskRow], trials: int
) -> tuple[list[tuple[str, TaskRow]], dict[str, int]]:
    """`(episode_id, task)` for every trial of every task, trial by trial (a run stopped
    early has whole trials), and each episode id's trial."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    episodes: list[tuple[str, TaskRow]] = []
    trial_of: dict[str, int] = {}
    for k in range(trials):
        for task in tasks:
            episode_id = trial_episode_id(str(task["task_id"]), k)
            episodes.append((episode_id, task))
            trial_of[episode_id] = k
    return episodes, trial_of


@dataclass(frozen=True)
class TrialAgent:
    """An `Agent` that plays each episode with its trial's agent and marks the trajectory
    with its trial (`trial_of`: episode id -> trial; an unknown id is trial 0)."""

    agents: Mapping[int, Agent]
    """The agent of each trial (trial 0 is also the fallback)."""
    trial_of: Mapping[str, int]
    """Each episode id's trial."""

    @property
    def name(self) -> str:
        """Trial 0's agent's name (every trial's agent plays the same policy)."""
        return self.agents[0].name

    def play(
        self,
        env: PlayableEnv,
        task: TaskRow,
        *,
        episode_id: str | None = None,
        env_id: str = "",
    ) -> Coroutine[Any, Any, Trajectory]:
        """The trial's agent plays; the trajectory comes back with `trial` set."""
        trial = self.trial_of.get(episode_id or "", 0)
        agent = self.agents.get(trial, self.agents[0])
        return _marked(agent.play(env, task, episode_id=episode_id, env_id=env_id), trial)


async def _marked(played: Coroutine[Any, Any, Trajectory], trial: int) -> Trajectory:
    trajectory = await played
    return trajectory if trajectory.trial == trial else replace(trajectory, trial=trial)


def trial_agent(
    trial_of: Mapping[str, int],
    trials: int,
    *,
    policy: Policy,
    limits: RolloutLimits | None = None,
    sampling: SamplingParams | None = None,
    agent: Agent | None = None,
) -> TrialAgent:
    """The agent of a run of `trials` trials: the loop agent over `policy` with each trial's
    sampling seed (`trial_seed` of `sampling.seed`), or `agent` (a command agent, whose
    sampling is the harness's business) for every trial."""
    if agent is not None:
        return TrialAgent({0: agent}, trial_of)
    base = sampling or SamplingParams()

    def sampling_of(k: int) -> SamplingParams | None:
        seed = trial_seed(base.seed, k, trials)
        return sampling if seed == base.seed else replace(base, seed=seed)

    return TrialAgent(
        {k: LoopAgent(policy, limits or RolloutLimits(), sampling_of(k)) for k in range(trials)},
        trial_of,
    )
