"""Sessions: each conversation a client holds with `skyrl serve`, kept token-exact.

A session is named by the URL (`/sessions/{id}/v1/...`), else by the request's `user` field,
else it is the session `default`. Per session the server keeps:

- the replies it answered (sampled ids by reply key, see `prompts`), so a client that sends
  the conversation back gets the model's own ids in its next prompt;
- the captured `Trajectory`: a request whose prompt ids start with the previous turn's ids
  (its prompt plus what was sampled) is the next turn of the same segment, and the ids in
  between are that turn's `observation_ids`; any other prompt starts a new segment
  (`SegmentStart.HISTORY_EDITED`), exactly as given, never re-tokenized to fit;
- how many generate calls it made (the turn index a scripted policy replays).

With a capture directory, after every answered turn the session's trajectory so far is
written to `DIR/<session>.jsonl` (one line, written to a temporary file, flushed and renamed
over the old one), so the file is always one whole trajectory that `skyrl view` renders and
`skyrl train` reads, even while the session goes on, and a crash mid-write leaves the previous
turn's file intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from skyrl_sdk.agents.policy import Completion
from skyrl_sdk.agents.serving.prompts import SampledReply, reply_key
from skyrl_sdk.agents.serving.protocol import MAX_N
from skyrl_sdk.agents.serving.tool_output import parse
from skyrl_sdk.agents.trajectory import (
    Segment,
    SegmentStart,
    StopReason,
    Trajectory,
    Turn,
    read_trajectories,
    sampled_turn,
)
from skyrl_sdk.tools.calls import ParseError, ToolCall

DEFAULT_SESSION = "default"
"""The session of requests that name none."""
MAX_SESSIONS = 10_000
"""Sessions held in memory at once (each keeps its token history). Beyond it the least
recently used one is dropped from memory; with a capture directory it is read back from its
file if it comes back, so nothing captured is lost."""
ENV_ID = "serve"
"""The `env_id` of captured trajectories."""

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def file_name(session_id: str) -> str:
    """`DIR/<name>.jsonl` for a session: the id itself when it is a safe file name, else a
    sanitized id plus a hash (an id never names a path outside the directory)."""
    if _SAFE.fullmatch(session_id):
        return f"{session_id}.jsonl"
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", session_id)[:64].lstrip("._-") or "session"
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:12]
    return f"{cleaned}-{digest}.jsonl"


@dataclass(frozen=True)
class Answer:
    """One answered request, as the capture records it."""

    prompt_ids: tuple[int, ...]
    """The ids the policy was given."""
    messages: tuple[dict[str, Any], ...]
    """The request's messages (empty for `/v1/completions`)."""
    completion: Completion
    """What the policy returned."""
    action: str
    """The reply text."""
    reply_key: str | None
    """Under which key a client will send the reply back (None: completions, no messages)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Calls parsed from the reply."""
    parse_error: ParseError | None = None
    """Set when the reply tried to call a tool and could not be parsed."""
    llm_s: float = 0.0
    """Seconds the policy took."""
    auxiliary: bool = False
    """A side conversation (`SessionStore.is_auxiliary`): captured in segments of its own,
    marked `SegmentStart.AUXILIARY`, that never continue or break the main one."""


@dataclass
class _Session:
    id: str
    policy: str
    started_at: float = field(default_factory=time.time)
    replies: dict[str, SampledReply] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    tail: tuple[int, ...] = ()
    alternatives: list[Answer] = field(default_factory=list)
    """The other choices of the request answered last (n > 1): the next request shows which
    one the client took. At most `MAX_N - 1`: a client repeating one request keeps only the
    latest choices, never a growing list."""
    calls: int = 0
    main: int = -1
    """The main conversation's last turn (-1: none yet); side conversations' turns may follow it."""
    thread: str | None = None
    """What names the main conversation (`SessionStore.is_auxiliary`)."""
    side_tails: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    """Per auxiliary segment: its last turn and the ids a continuation must start with."""
    updated_at: float = 0.0
    written: int = 0
    """Turns in the capture file."""
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    def trajectory(self) -> Trajectory:
        main = [s for s in self.segments if s.start is not SegmentStart.AUXILIARY]
        first = (main or self.segments)[0].prompt_messages if self.segments else ()
        return Trajectory(
            episode_id=self.id,
            task_id=self.id,
            env_id=ENV_ID,
            policy=self.policy,
            stop_reason=StopReason.DONE,
            turns=tuple(self.turns),
            segments=tuple(self.segments),
            prompt_messages=first,
            reward=0.0,
            success=False,
            started_at=self.started_at,
            duration_s=max(0.0, self.updated_at - self.started_at),
        )


def _extends(prompt: tuple[int, ...], ids: tuple[int, ...]) -> bool:
    return len(prompt) >= len(ids) and prompt[: len(ids)] == ids


def _turn(answer: Answer, index: int, segment: int) -> Turn:
    """An answered request as a captured turn (its observation is filled in by the next)."""
    return sampled_turn(
        index,
        segment,
        answer.action,
        answer.completion,
        (),
        (),
        0.0,
        answer.tool_calls,
        answer.parse_error,
        answer.llm_s,
    )


def _observation(messages: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The messages after the last assistant message (what the harness added)."""
    for k in range(len(messages) - 1, -1, -1):
        if messages[k].get("role") == "assistant":
            return tuple(messages[k + 1 :])
    return tuple(messages)


class SessionStore:
    """Every session's replies and captured turns (thread-safe: the server's event loop
    writes, `RunningServer.session_trajectory` reads from other threads)."""

    def __init__(
        self,
        policy_name: str,
        capture_dir: Path | None = None,
        *,
        max_sessions: int = MAX_SESSIONS,
    ):
        self.policy_name = policy_name
        self.capture_dir = Path(capture_dir) if capture_dir is not None else None
        if self.capture_dir is not None:
            self.capture_dir.mkdir(parents=True, exist_ok=True)
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
            return session
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        session = self._restore(session_id) or _Session(session_id, self.policy_name)
        self._sessions[session_id] = session
        return session

    def _restore(self, session_id: str) -> _Session | None:
        """A session dropped from memory, read back from its capture file."""
        if self.capture_dir is None:
            return None
        path = self.capture_dir / file_name(session_id)
        if not path.is_file():
            return None
        try:
            (trajectory,) = read_trajectories(path)
        except (ValueError, KeyError, TypeError, OSError):
            return None  # not ours to read: the next write replaces it
        session = _Session(session_id, trajectory.policy, started_at=trajectory.started_at)
        session.turns = list(trajectory.turns)
        session.segments = list(trajectory.segments)
        session.calls = len(trajectory.turns)
        side = {k for k, s in enumerate(trajectory.segments) if s.start is SegmentStart.AUXILIARY}
        last = next((t for t in reversed(trajectory.turns) if t.segment not in side), None)
        if last is not None:
            session.tail = (*trajectory.segment_ids(last.segment),)
            session.main = last.index
        for turn in trajectory.turns:
            if turn.parse_error is None:
                content = parse(turn.action).content if turn.tool_calls else turn.action
                calls = [
                    {"function": {"name": c.name, "arguments": c.arguments}}
                    for c in turn.tool_calls
                ]
                session.replies[reply_key(content, calls)] = SampledReply(turn.token_ids)
            else:
                session.replies[reply_key(turn.action)] = SampledReply(turn.token_ids)
        return session

    def drop(self, session_id: str) -> None:
        """Forget a session (its file stays): a finished episode's memory back."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def replies(self, session_id: str) -> Mapping[str, SampledReply]:
        """The replies answered in a session, by reply key (a copy)."""
        with self._lock:
            session = self._sessions.get(session_id)
            return dict(session.replies) if session else {}

    def next_call(self, session_id: str) -> int:
        """The 0-based index of the session's next generate call (and count it)."""
        with self._lock:
            session = self._get(session_id)
            session.calls += 1
            return session.calls - 1

    def remember(self, session_id: str, key: str, token_ids: Sequence[int]) -> None:
        """Keep a reply's sampled ids (a choice that is not captured as the turn)."""
        with self._lock:
            self._get(session_id).replies[key] = SampledReply(tuple(token_ids))

    def is_auxiliary(self, session_id: str, thread: str) -> bool:
        """Whether a request of conversation `thread` (what tells a harness's conversations
        apart, e.g. a digest of the system prompt) is a side conversation of the session: the
        first thread a session captures is its main one, any other is auxiliary."""
        with self._lock:
            session = self._get(session_id)
            if session.thread is None:
                session.thread = thread
            return session.thread != thread

    def record(self, session_id: str, answer: Answer) -> Callable[[], None]:
        """Capture one answered request as the session's next turn.

        Returns what puts it on disk: serializing a long session is slow, so the server runs
        it in a worker thread (and waits for it before answering); a no-op without a capture
        directory.
        """
        with self._lock:
            session = self._get(session_id)
            c = answer.completion
            prompt = answer.prompt_ids
            if answer.auxiliary:
                self._record_side(session, answer)
                return self._writer(session)
            if session.main >= 0 and not _extends(prompt, session.tail):
                self._take_alternative(session, prompt)
            # Keep only this request's other choices (streamed, they may come first).
            session.alternatives = [a for a in session.alternatives if a.prompt_ids == prompt][
                -(MAX_N - 1) :
            ]
            tail = session.tail
            if session.main >= 0 and _extends(prompt, tail):
                last = session.turns[session.main]
                session.turns[session.main] = replace(
                    last,
                    observation=_observation(answer.messages),  # type: ignore[arg-type]
                    observation_ids=prompt[len(tail) :],
                )
                segment = last.segment
            else:
                segment = len(session.segments)
                start = SegmentStart.EPISODE if session.main < 0 else SegmentStart.HISTORY_EDITED
                session.segments.append(
                    Segment(prompt, answer.messages, len(session.turns), start)  # type: ignore[arg-type]
                )
            session.main = len(session.turns)
            session.turns.append(_turn(answer, len(session.turns), segment))
            session.tail = prompt + c.token_ids
            session.updated_at = time.time()
            if answer.reply_key is not None:
                session.replies[answer.reply_key] = SampledReply(c.token_ids)
            return self._writer(session)

    def _writer(self, session: _Session) -> Callable[[], None]:
        if self.capture_dir is None:
            return lambda: None
        snapshot = session.trajectory()
        return lambda: self._write(session, snapshot)

    @staticmethod
    def _record_side(session: _Session, answer: Answer) -> None:
        """A side conversation's turn: it continues the auxiliary segment whose ids its prompt
        extends, else starts one (marked `SegmentStart.AUXILIARY`)."""
        prompt = answer.prompt_ids
        found = [k for k, (_, tail) in session.side_tails.items() if _extends(prompt, tail)]
        if found:
            segment = max(found, key=lambda k: len(session.side_tails[k][1]))
            last, tail = session.side_tails[segment]
            session.turns[last] = replace(
                session.turns[last],
                observation=_observation(answer.messages),  # type: ignore[arg-type]
                observation_ids=prompt[len(tail) :],
            )
        else:
            segment = len(session.segments)
            session.segments.append(
                Segment(prompt, answer.messages, len(session.turns), SegmentStart.AUXILIARY)  # type: ignore[arg-type]
            )
        session.side_tails[segment] = (len(session.turns), prompt + answer.completion.token_ids)
        session.turns.append(_turn(answer, len(session.turns), segment))
        session.updated_at = time.time()
        if answer.reply_key is not None:
            session.replies[answer.reply_key] = SampledReply(answer.completion.token_ids)

    def alternative(self, session_id: str, answer: Answer) -> None:
        """Keep another choice of a request whose choice 0 is (or will be) `record`ed: if the
        client's next request continues from it instead, it becomes that turn."""
        with self._lock:
            session = self._get(session_id)
            same = [a for a in session.alternatives if a.prompt_ids == answer.prompt_ids]
            session.alternatives = [*same, answer][-(MAX_N - 1) :]

    @staticmethod
    def _take_alternative(session: _Session, prompt: tuple[int, ...]) -> None:
        """Make the last turn the choice that `prompt` continues from, if it is one of the
        last request's other choices (else `prompt` starts a new segment, as any edit does)."""
        last = session.turns[session.main]
        asked = session.tail[: len(session.tail) - len(last.token_ids)]
        for other in session.alternatives:
            taken = other.prompt_ids + other.completion.token_ids
            if other.prompt_ids == asked and _extends(prompt, taken):
                session.turns[session.main] = _turn(other, last.index, last.segment)
                session.tail = taken
                return

    def trajectory(self, session_id: str) -> Trajectory | None:
        """The session's captured turns so far (None: no turn yet)."""
        with self._lock:
            session = self._sessions.get(session_id)
            return session.trajectory() if session and session.turns else None

    def session_ids(self) -> list[str]:
        """Sessions with at least one turn."""
        with self._lock:
            return [s.id for s in self._sessions.values() if s.turns]

    def _write(self, session: _Session, snapshot: Trajectory) -> None:
        """Put a snapshot of the session on disk, unless a newer one is there already (two
        turns finishing together may be written in either order)."""
        assert self.capture_dir is not None
        with session.write_lock:
            if len(snapshot.turns) <= session.written:
                return
            path = self.capture_dir / file_name(session.id)
            staging = path.with_name(path.name + ".tmp")
            line = json.dumps(snapshot.to_json(), ensure_ascii=False) + "\n"
            with staging.open("w", encoding="utf-8") as f:
                f.write(line)
                f.flush()
            os.replace(staging, path)
            session.written = len(snapshot.turns)
