"""`Trajectory`: one episode, token-first, as the trainer and the viewer read it.

Layout of one training segment (the usual case is one segment per episode):

    prompt_ids | turn 0 token_ids | turn 0 observation_ids | turn 1 token_ids | ...
    mask 0     | mask 1           | mask 0                 | mask 1           |

`token_ids` are the sampled ids with their sampler logprobs and policy versions;
`observation_ids` are the chat template's delta (end-of-turn glue, tool results, the next
generation prompt). When the context policy drops old turns, the token prefix changes, so a
new segment starts with a freshly rendered prompt instead of rewriting the old one: every
segment is exactly what the sampler saw.

Trajectories are JSON lines, appended as each episode finishes (`TrajectoryWriter`).
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_sdk.agents.policy import Completion, FinishReason
from skyrl_sdk.fast_frozen import fast_constructor
from skyrl_sdk.tools.calls import ParseError, ParseErrorKind, ToolCall
from skyrl_sdk.tools.messages import Message

SCHEMA_VERSION = 1


class StopReason(enum.Enum):
    """Why an episode ended."""

    DONE = "done"
    """The env terminated the episode (the task ended: answered, solved, failed)."""
    MAX_TURNS = "max_turns"
    """The turn limit was reached (the rollout's, or the env's own truncation)."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The next turn would not fit the model's context, and the context policy says stop."""
    PARSE_ERROR = "parse_error"
    """Too many consecutive replies could not be parsed into actions."""
    TIMEOUT = "timeout"
    """The episode's wall-clock budget ran out."""
    ENV_ERROR = "env_error"
    """The env raised (reset, step or scoring); see `Trajectory.error`."""
    POLICY_ERROR = "policy_error"
    """The policy could not produce a completion (server down, bad response)."""
    AGENT_ERROR = "agent_error"
    """An external agent command (`--agent command:CMD`) was missing or not executable,
    crashed, was killed, or never called the model; see `Trajectory.error`."""

    @property
    def is_error(self) -> bool:
        """True for infrastructure failures; `skyrl eval --resume` reruns these episodes."""
        return self in (StopReason.ENV_ERROR, StopReason.POLICY_ERROR, StopReason.AGENT_ERROR)


class SegmentStart(enum.Enum):
    """Why a training segment begins."""

    EPISODE = "episode"
    """The episode's opening prompt."""
    CONTEXT_COMPACTED = "context_compacted"
    """Old turns were dropped to fit the context; the prompt was re-rendered."""
    HISTORY_EDITED = "history_edited"
    """`skyrl serve` capture: the client's next prompt did not extend the previous turn's ids
    (it edited the history); the segment starts from that prompt exactly as it was sampled."""
    AUXILIARY = "auxiliary"
    """`skyrl serve` capture: a side conversation the harness opened next to its main one (a
    title or topic request, a sub-agent). Kept for inspection, left out of training samples
    unless asked for (`Trajectory.training_samples(auxiliary=True)`)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One assistant turn and the env's answer to it."""

    index: int
    """0-based turn number within the episode."""
    segment: int
    """Index of the training segment this turn belongs to."""
    action: str
    """The assistant's text, as given to the env."""
    token_ids: tuple[int, ...]
    """Sampled ids (loss mask 1); empty for text-only policies without a tokenizer."""
    logprobs: tuple[float, ...] | None
    """Sampler logprob per sampled id (None when the backend gives none)."""
    policy_versions: tuple[int, ...]
    """Policy (weights) version that produced each sampled id."""
    finish_reason: FinishReason
    """Why generation of this turn ended."""
    observation: tuple[Message, ...]
    """Messages the env returned for this action."""
    observation_ids: tuple[int, ...]
    """Template delta appended after the sampled ids (loss mask 0); empty after the last turn."""
    reward: float
    """Reward the env gave for this step."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls the env parsed from the action."""
    parse_error: ParseError | None = None
    """Set when the action could not be parsed."""
    llm_s: float = 0.0
    """Seconds spent waiting for the policy."""
    env_s: float = 0.0
    """Seconds spent in the env step."""
    text_only: bool = False
    """True when `token_ids` are a re-tokenization of text-only output (not trainable)."""
    constrained: bool = False
    """True when a grammar masked the sampler (`Completion.constrained`): `logprobs` are the
    masked, renormalised distribution's, which the learner's truncated importance sampling
    corrects toward its unmasked ones."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of turns that share one exact token prefix."""

    prompt_ids: tuple[int, ...]
    """Ids rendered from `prompt_messages` (loss mask 0)."""
    prompt_messages: tuple[Message, ...]
    """The conversation the prompt was rendered from."""
    first_turn: int
    """Index of the first turn generated from this prompt."""
    start: SegmentStart = SegmentStart.EPISODE
    """Why this segment began."""


@dataclass(frozen=True, slots=True)
class TrainingSample:
    """One segment flattened for a trainer: aligned per-token arrays."""

    input_ids: tuple[int, ...]
    """Prompt, sampled and observation ids in order."""
    loss_mask: tuple[int, ...]
    """1 on sampled ids, 0 elsewhere."""
    logprobs: tuple[float, ...]
    """Sampler logprob on sampled ids, 0.0 elsewhere."""
    policy_versions: tuple[int, ...]
    """Version per sampled id, -1 elsewhere."""
    observation_mask: tuple[int, ...] = ()
    """1 on the env's observation ids (what the env answered between turns), 0 elsewhere; empty
    when unknown (samples built by hand). The target of `algorithm.observation_loss_coef`."""
    token_advantages: tuple[float, ...] = ()
    """A per-token advantage for each id (0.0 off the loss mask), added to the one advantage
    the trainer gives the whole sample; empty: none. On-policy distillation sets it
    (`trainer.opd`: the teacher's logprob minus the sampler's, token by token)."""
    teacher_top_ids: tuple[tuple[int, ...], ...] = ()
    """Per id, the teacher's most likely ids at that position, most likely first, on sampled
    ids (`()` elsewhere); empty: none. Distillation's logit term sets it
    (`algorithm.opd_logit_kl_coef`, `trainer.opd`)."""
    teacher_top_logprobs: tuple[tuple[float, ...], ...] = ()
    """The teacher's logprobs of `teacher_top_ids`, aligned with them."""


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One finished episode."""

    episode_id: str
    """Unique id within a run (`task_id`, or `task_id#k` for repeats)."""
    task_id: str
    """The task row's id."""
    env_id: str
    """Env the episode ran in."""
    policy: str
    """`Policy.name` of the policy that played."""
    stop_reason: StopReason
    """Why the episode ended."""
    turns: tuple[Turn, ...]
    """Every assistant turn, in order."""
    segments: tuple[Segment, ...]
    """Training segments; empty when the policy had no tokenizer."""
    prompt_messages: tuple[Message, ...]
    """The env's opening messages."""
    reward: float
    """Episode reward: the sum of turn rewards."""
    success: bool
    """The env's verdict (`info["episode"]["correct"]` when given, else reward > 0)."""
    started_at: float = 0.0
    """Unix time the episode started."""
    duration_s: float = 0.0
    """Wall-clock seconds for the whole episode."""
    error: str | None = None
    """What went wrong, for `env_error` / `policy_error` / `timeout`."""
    seed: int | None = None
    """The seed the episode reset with, for an env played by seeds (task `seed-<n>`);
    None when a task row picked the episode."""
    trial: int = 0
    """Which of the task's trials this episode is (0..K-1 with `--trials K`): the sampling
    seed is derived from it, the env's seed stays the task's."""
    schema: int = SCHEMA_VERSION
    """Version of the JSON layout."""

    # -- views ----------------------------------------------------------------------------

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        """The first segment's prompt ids."""
        return self.segments[0].prompt_ids if self.segments else ()

    @property
    def text_only(self) -> bool:
        """True when any turn lacks sampled ids (no tokenizer, or a text-only API)."""
        return not self.segments or any(t.text_only for t in self.turns)

    @property
    def trainable(self) -> bool:
        """True when every turn carries exact sampled ids and their logprobs."""
        return not self.text_only and all(t.logprobs is not None for t in self.turns)

    @property
    def num_generated_tokens(self) -> int:
        """Sampled ids over all turns."""
        return sum(len(t.token_ids) for t in self.turns)

    @property
    def parse_errors(self) -> int:
        """Turns whose action could not be parsed."""
        return sum(t.parse_error is not None for t in self.turns)

    def messages(self) -> list[Message]:
        """The whole conversation as chat messages (opening, then assistant/observation)."""
        out: list[Message] = list(self.prompt_messages)
        for t in self.turns:
            out.append({"role": "assistant", "content": t.action})
            out.extend(t.observation)
        return out

    def segment_ids(self, index: int) -> list[int]:
        """All ids of one segment, in order."""
        seg = self.segments[index]
        ids = list(seg.prompt_ids)
        for t in self.turns:
            if t.segment == index:
                ids.extend(t.token_ids)
                ids.extend(t.observation_ids)
        return ids

    def training_samples(self, *, auxiliary: bool = False) -> list[TrainingSample]:
        """One aligned sample per segment (raises for text-only trajectories); segments of
        side conversations (`SegmentStart.AUXILIARY`) only with `auxiliary=True`."""
        if self.text_only:
            raise ValueError(f"episode {self.episode_id} is text-only: it has no sampled ids")
        samples = []
        for index, seg in enumerate(self.segments):
            if seg.start is SegmentStart.AUXILIARY and not auxiliary:
                continue
            n = len(seg.prompt_ids)
            ids, mask, observed = list(seg.prompt_ids), [0] * n, [0] * n
            logprobs, versions = [0.0] * n, [-1] * n
            for t in (t for t in self.turns if t.segment == index):
                k = len(t.token_ids)
                ids.extend(t.token_ids)
                mask.extend([1] * k)
                observed.extend([0] * k)
                logprobs.extend(t.logprobs if t.logprobs is not None else [0.0] * k)
                versions.extend(t.policy_versions)
                m = len(t.observation_ids)
                ids.extend(t.observation_ids)
                mask.extend([0] * m)
                observed.extend([1] * m)
                logprobs.extend([0.0] * m)
                versions.extend([-1] * m)
            samples.append(
                TrainingSample(
                    tuple(ids), tuple(mask), tuple(logprobs), tuple(versions), tuple(observed)
                )
            )
        return samples

    # -- JSON -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (one line of `trajectories.jsonl`)."""
        return {
            "schema": self.schema,
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "env_id": self.env_id,
            "policy": self.policy,
            "stop_reason": self.stop_reason.value,
            "reward": self.reward,
            "success": self.success,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "error": self.error,
            "seed": self.seed,
            "trial": self.trial,
            "prompt_messages": [dict(m) for m in self.prompt_messages],
            "segments": [
                {
                    "prompt_ids": list(s.prompt_ids),
                    "prompt_messages": [dict(m) for m in s.prompt_messages],
                    "first_turn": s.first_turn,
                    "start": s.start.value,
                }
                for s in self.segments
            ],
            "turns": [_turn_to_json(t) for t in self.turns],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trajectory:
        """Inverse of `to_json`."""
        return cls(
            episode_id=str(data["episode_id"]),
            task_id=str(data["task_id"]),
            env_id=data["env_id"],
            policy=data["policy"],
            stop_reason=StopReason(data["stop_reason"]),
            turns=tuple(_turn_from_json(t) for t in data["turns"]),
            segments=tuple(
                Segment(
                    tuple(s["prompt_ids"]),
                    tuple(s["prompt_messages"]),
                    s["first_turn"],
                    SegmentStart(s["start"]),
                )
                for s in data["segments"]
            ),
            prompt_messages=tuple(data["prompt_messages"]),
            reward=float(data["reward"]),
            success=bool(data["success"]),
            started_at=float(data.get("started_at", 0.0)),
            duration_s=float(data.get("duration_s", 0.0)),
            error=data.get("error"),
            seed=data.get("seed"),
            trial=int(data.get("trial", 0)),
            schema=int(data.get("schema", SCHEMA_VERSION)),
        )


new_turn = fast_constructor(Turn)
"""`Turn(...)` for hot paths (the agent loop builds one per turn; see `fast_constructor`)."""
new_segment = fast_constructor(Segment)
"""`Segment(...)` for hot paths."""
new_trajectory = fast_constructor(Trajectory)
"""`Trajectory(...)` for hot paths (one per episode)."""


_VERSIONS: dict[tuple[int, int], tuple[int, ...]] = {}


def _same_version(version: int, n: int) -> tuple[int, ...]:
    """`(version,) * n`, one shared tuple per (version, n): `Completion.versions()` without
    a new tuple per turn for every trajectory to keep."""
    key = (version, n)
    versions = _VERSIONS.get(key)
    if versions is None:
        if len(_VERSIONS) >= 4096:
            _VERSIONS.clear()
        versions = _VERSIONS[key] = (version,) * n
    return versions


def sampled_turn(
    index: int,
    segment: int,
    action: str,
    completion: Completion,
    observation: tuple[Message, ...],
    observation_ids: tuple[int, ...],
    reward: float,
    tool_calls: tuple[ToolCall, ...],
    parse_error: ParseError | None,
    llm_s: float,
    env_s: float = 0.0,
) -> Turn:
    """The `Turn` of one sampled `completion`: the one assembler of turns, which the agent
    loop (`rollout`) and `skyrl serve`'s capture both use. `action` is the text the env (or
    client) was given; the sampled ids, logprobs, versions (`Completion.versions()`), finish
    reason and text-only flag come from the completion as they are."""
    return new_turn(
        index,
        segment,
        action,
        completion.token_ids,
        completion.logprobs,
        completion.token_policy_versions
        or _same_version(completion.policy_version, len(completion.token_ids)),
        completion.finish_reason,
        observation,
        observation_ids,
        reward,
        tool_calls,
        parse_error,
        llm_s,
        env_s,
        completion.text_only,
        completion.constrained,
    )


def _turn_to_json(t: Turn) -> dict[str, Any]:
    return {
        "index": t.index,
        "segment": t.segment,
        "action": t.action,
        "token_ids": list(t.token_ids),
        "logprobs": None if t.logprobs is None else list(t.logprobs),
        "policy_versions": list(t.policy_versions),
        "finish_reason": t.finish_reason.value,
        "observation": [dict(m) for m in t.observation],
        "observation_ids": list(t.observation_ids),
        "reward": t.reward,
        "tool_calls": [c.to_json() for c in t.tool_calls],
        "parse_error": None if t.parse_error is None else t.parse_error.to_json(),
        "llm_s": t.llm_s,
        "env_s": t.env_s,
        "text_only": t.text_only,
        **({"constrained": True} if t.constrained else {}),  # older readers: absent is False
    }


def _turn_from_json(d: dict[str, Any]) -> Turn:
    error = d.get("parse_error")
    return Turn(
        index=d["index"],
        segment=d["segment"],
        action=d["action"],
        token_ids=tuple(d["token_ids"]),
        logprobs=None if d["logprobs"] is None else tuple(d["logprobs"]),
        policy_versions=tuple(d["policy_versions"]),
        finish_reason=FinishReason(d["finish_reason"]),
        observation=tuple(d["observation"]),
        observation_ids=tuple(d["observation_ids"]),
        reward=float(d["reward"]),
        tool_calls=tuple(ToolCall(c["name"], c["arguments"], c.get("id")) for c in d["tool_calls"]),
        parse_error=None
        if error is None
        else ParseError(ParseErrorKind(error["kind"]), error["message"]),
        llm_s=float(d.get("llm_s", 0.0)),
        env_s=float(d.get("env_s", 0.0)),
        text_only=bool(d.get("text_only", False)),
        constrained=bool(d.get("constrained", False)),
    )


# -- JSONL --------------------------------------------------------------------------------


@dataclass
class TrajectoryWriter:
    """Appends trajectories to a JSONL file, one line each, flushed as each one finishes.

    A run killed mid-write leaves at most one partial last line; opening the file again
    trims it, so appends after a resume start on a clean line.
    """

    path: Path
    """The JSONL file (created if missing)."""
    fsync: bool = False
    """Also fsync after each line (survives power loss, not just process death)."""
    _file: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _trim_partial_line(self.path)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, trajectory: Trajectory) -> None:
        """Append one trajectory and flush it to the OS."""
        self._file.write(json.dumps(trajectory.to_json(), ensure_ascii=False) + "\n")
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None and not self._file.closed:
            self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _trim_partial_line(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    with path.open("r+b") as f:
        f.truncate(data.rfind(b"\n") + 1)


def iter_trajectories(path: str | Path) -> Iterator[Trajectory]:
    """Read trajectories from JSONL, skipping a partial (unterminated) last line."""
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                return  # a write interrupted by a kill
            if line.strip():
                yield Trajectory.from_json(json.loads(line))


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """All trajectories in a JSONL file, in file order."""
    return list(iter_trajectories(path))


def latest_by_episode(trajectories: Iterable[Trajectory]) -> dict[str, Trajectory]:
    """The last trajectory per `episode_id` (a rerun supersedes an errored attempt)."""
    out: dict[str, Trajectory] = {}
    for t in trajectories:
        out[t.episode_id] = t
    return out
