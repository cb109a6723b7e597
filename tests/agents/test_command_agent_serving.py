"""Command agents against the real in-process server (`agents.serving.start_server`): real
harnesses run inside the episode's bwrap sandbox, talk to a scripted policy over OpenAI's API
through the forwarded port, and their captured trajectories are checked token by token.

- `http_agent.py` (standard library only) always runs;
- `openai-agents` (chat completions, tracing off, streamed, one shell tool) and
  `mini-swe-agent` (its bash tool through litellm) run from their own venvs under `.venvs/`
  and skip, saying how to build them, when those are missing:
  `python -m skyrl_sdk.benchmarks.harness_venv`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from skyrl_sdk.agents.command_agent import CommandAgent, CommandAgentRunner
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import SegmentStart, StopReason, Trajectory, read_trajectories
from skyrl_sdk.benchmarks import harness_venv
from tests.conftest import arun, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="forwarded ports (pasta) need root"),
]
serving = pytest.importorskip("skyrl_sdk.agents.serving", reason="agents.serving not built yet")

HARNESSES = Path(__file__).with_name("harnesses")
SKYRL = Path(sys.executable).with_name("skyrl")
HELLO = {
    "task_id": "hello",
    "instruction": "Write hello world to hello.txt",
    "files": {},
    "check": 'test "$(cat hello.txt)" = "hello world"',
}


@pytest.fixture(scope="module")
def renderer():
    from skyrl_sdk.agents.evaluate import load_renderer

    return load_renderer("tiny")


@pytest.fixture(scope="module")
def harness_dir() -> Iterator[Path]:
    """The harness scripts in a directory the sandbox's user can read (bound read-only)."""
    d = Path(tempfile.mkdtemp(prefix="skyrl-harnesses-"))
    d.chmod(0o755)
    for script in HARNESSES.glob("*.py"):
        shutil.copy(script, d / script.name)
        (d / script.name).chmod(0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def side_venv(name: str) -> str:
    found = harness_venv.ready(name)
    if found is None:
        pytest.skip(
            f"harness venv {harness_venv.venv_dir(name)} is missing: build it with "
            f"`python -m skyrl_sdk.benchmarks.harness_venv {name}`"
        )
    return str(found)


def call(name: str, **arguments: str) -> str:
    """A scripted tool-call reply in the tiny template's Hermes/Qwen format."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def non_canonical(renderer, text: str) -> list[int]:
    """`text` as ids the tokenizer would never produce itself: one piece per character."""
    ids = [i for ch in text for i in renderer.encode(ch)]
    assert ids != list(renderer.encode(text)) and renderer.decode(ids) == text
    return ids


def expected_ids(renderer, action: str | Sequence[int]) -> list[int]:
    """The ids the scripted policy samples for an action (it appends end-of-turn)."""
    ids = list(renderer.encode(action)) if isinstance(action, str) else list(action)
    return [*ids, renderer.end_of_turn_id]


def play(
    policy, agent: CommandAgent, task: dict = HELLO, log_dir: Path | None = None
) -> tuple[Trajectory, CommandAgentRunner]:
    import skyrl_gym

    capture = log_dir / "capture" if log_dir is not None else None
    runner = CommandAgentRunner(agent, policy, log_dir=log_dir, capture_dir=capture)
    env = skyrl_gym.make("terminal", tasks=[task])
    try:
        trajectory = arun(runner.run(env, task, episode_id=task["task_id"], env_id="terminal"), 400)
    finally:
        env.close()
    return trajectory, runner


def check_exact(trajectory: Trajectory, renderer, actions: Sequence) -> None:
    """One segment; each turn carries exactly the scripted ids; the segment's ids are what
    the policy saw: each turn's prompt is the previous prompt + sampled + observation ids."""
    assert len(trajectory.segments) == 1, [s.start for s in trajectory.segments]
    assert trajectory.segments[0].start is SegmentStart.EPISODE
    assert len(trajectory.turns) == len(actions)
    for turn, action in zip(trajectory.turns, actions, strict=True):
        assert list(turn.token_ids) == expected_ids(renderer, action), turn.index
        assert turn.segment == 0 and turn.logprobs == (0.0,) * len(turn.token_ids)
    assert trajectory.trainable
    (sample,) = trajectory.training_samples()
    assert sum(sample.loss_mask) == sum(len(t.token_ids) for t in trajectory.turns)
    assert renderer.decode(list(sample.input_ids)).count("hello world") >= 1
    # Viewable: the HTML report shows every turn's action.
    from skyrl_sdk.agents.viewer import render_html

    page = render_html([trajectory], decode=renderer.decode, title="capture")
    assert all(f"turn {t.index} · reward" in page for t in trajectory.turns)


def test_http_agent_tool_session_is_one_exact_segment(renderer, harness_dir, tmp_path) -> None:
    """A 3-turn tool-calling session through the real server: one segment with the scripted
    ids, a reply scripted as non-canonical ids included; the grader's reward on the episode."""
    actions = [
        call("shell", command="echo hello world > hello.txt"),
        non_canonical(renderer, call("shell", command="cat hello.txt")),
        "Done: hello.txt holds hello world.",
    ]
    policy = ScriptedPolicy(actions, renderer=renderer)
    agent = CommandAgent(f"python3 {harness_dir}/http_agent.py", binds=(str(harness_dir),))
    t, runner = play(policy, agent, log_dir=tmp_path)
    try:
        assert t.stop_reason is StopReason.DONE, t.error
        assert t.reward == 1.0 and t.success and t.turns[-1].reward == 1.0
        check_exact(t, renderer, actions)
        assert [c.name for c in t.turns[0].tool_calls] == ["shell"]
        # The finished session is dropped from the server's memory; its capture file stays.
        log = next(tmp_path.glob("*.log")).read_text()
        session = next(x for x in log.splitlines() if x.startswith("session: ")).split()[1]
        assert runner.server().session_trajectory(session) is None
        (captured,) = read_trajectories(tmp_path / "capture" / f"{session}.jsonl")
        assert [x.token_ids for x in captured.turns] == [x.token_ids for x in t.turns]
    finally:
        runner.close()


def test_session_key_opens_only_its_own_session(renderer, harness_dir, tmp_path) -> None:
    """The agent's key fails on another session's URL and on the base URL (the server's main
    key is a secret of this process), and stops working once the episode is over."""
    policy = ScriptedPolicy(["Done."], renderer=renderer)
    runner = CommandAgentRunner(CommandAgent("true"), policy)
    server = runner.server()
    other = server.session_url("someone-else")
    server.issue_session_key("someone-else")
    try:
        for probe in (other, server.base_url):
            agent = CommandAgent(
                f"python3 {harness_dir}/http_agent.py; echo KEY=$OPENAI_API_KEY URL=$OPENAI_BASE_URL",
                binds=(str(harness_dir),),
                env={"AGENT_PROBE_URL": probe},
            )
            runner.agent = agent
            import skyrl_gym

            env = skyrl_gym.make("terminal", tasks=[HELLO])
            runner.log_dir = tmp_path / f"logs-{len(list(tmp_path.iterdir()))}"
            try:
                t = arun(runner.run(env, HELLO, episode_id="hello", env_id="terminal"), 120)
            finally:
                env.close()
            (log,) = runner.log_dir.iterdir()
            text = log.read_text()
            assert "PROBE 401" in text, text
            assert t.stop_reason is StopReason.DONE and len(t.turns) == 1, t.error
            line = next(x for x in text.splitlines() if x.startswith("KEY="))
            key, url = (part.split("=", 1)[1] for part in line.split())
            request = urllib.request.Request(
                f"{url}/models", headers={"Authorization": f"Bearer {key}"}
            )
            with pytest.raises(urllib.error.HTTPError) as refused:  # revoked after the episode
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401
    finally:
        runner.close()


def test_openai_agents_streamed_tool_session(renderer, harness_dir, tmp_path) -> None:
    """openai-agents (chat completions, tracing off, streamed) plays a 5-turn tool session:
    four shell calls (one scripted as non-canonical ids) and a final answer; the capture is
    one segment with exactly the scripted ids; the terminal grader gives 1.0."""
    venv = side_venv("openai-agents")
    actions = [
        call("shell", command="echo hello world > hello.txt"),
        non_canonical(renderer, call("shell", command="cat hello.txt")),
        call("shell", command="ls"),
        call("shell", command="wc -c hello.txt"),
        "I wrote hello world to hello.txt.",
    ]
    policy = ScriptedPolicy(actions, renderer=renderer)
    agent = CommandAgent(
        f"python {harness_dir}/openai_agents_driver.py",
        venv=venv,
        binds=(str(harness_dir),),
        timeout_s=300,
        memory_bytes=1 << 30,
    )
    t, runner = play(policy, agent, log_dir=tmp_path)
    runner.close()
    log = next(tmp_path.glob("*.log")).read_text()
    assert t.stop_reason is StopReason.DONE, (t.error, log[-3000:])
    assert "final='I wrote hello world to hello.txt.'" in log
    assert t.reward == 1.0
    check_exact(t, renderer, actions)
    assert [c.name for turn in t.turns for c in turn.tool_calls] == ["shell"] * 4


def test_mini_swe_agent_tool_session(renderer, harness_dir, tmp_path) -> None:
    """mini-swe-agent (bash tool calls through litellm) plays a 5-turn session ending with its
    submit command; one exact segment; the grader gives 1.0."""
    venv = side_venv("mini-swe-agent")
    actions = [
        call("bash", command="echo hello world > hello.txt"),
        non_canonical(renderer, call("bash", command="cat hello.txt")),
        call("bash", command="ls"),
        call("bash", command="wc -c hello.txt"),
        call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    policy = ScriptedPolicy(actions, renderer=renderer)
    agent = CommandAgent(
        f"python {harness_dir}/mini_swe_agent_driver.py",
        venv=venv,
        binds=(str(harness_dir),),
        timeout_s=300,
        memory_bytes=1 << 30,
        env={"MSWEA_SILENT_STARTUP": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    t, runner = play(policy, agent, log_dir=tmp_path)
    runner.close()
    log = next(tmp_path.glob("*.log")).read_text()
    assert t.stop_reason is StopReason.DONE, (t.error, log[-3000:])
    assert "exit_status Submitted" in log
    assert t.reward == 1.0
    check_exact(t, renderer, actions)


def skyrl(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SKYRL), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
    )


def test_eval_cli_with_a_command_agent_then_view(harness_dir, tmp_path) -> None:
    """`skyrl eval terminal --agent command:CMD` end to end: each task's episode is graded,
    trajectories are the captured tokens, agent logs are kept, `skyrl view` renders them;
    a missing command fails every episode with that message and exits 1."""
    rows = [dict(HELLO, task_id=f"t{i}") for i in range(2)]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "script.json").write_text(
        json.dumps([call("shell", command="echo hello world > hello.txt"), "Done."])
    )
    out = skyrl(
        tmp_path,
        *("eval", "terminal", "--tasks", "tasks.jsonl", "-p", "scripted:script.json"),
        *("--agent", f"command:python3 {harness_dir}/http_agent.py"),
        *("--agent-bind", str(harness_dir), "-o", "run", "-c", "2"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["summary"]["episodes"] == 2 and data["summary"]["mean_reward"] == 1.0
    assert data["summary"]["trainable"] == 2 and data["summary"]["stop_reasons"] == {"done": 2}
    assert data["policy"].endswith(f"via command:python3 {harness_dir}/http_agent.py")
    trajectories = read_trajectories(tmp_path / "run" / "trajectories.jsonl")
    assert all(len(t.turns) == 2 and len(t.segments) == 1 for t in trajectories)
    assert len(list((tmp_path / "run" / "agent_logs").iterdir())) == 2
    assert len(list((tmp_path / "run" / "capture").glob("*.jsonl"))) == 2
    view = skyrl(tmp_path, "view", "run/trajectories.jsonl", "-o", "report.html")
    assert view.returncode == 0 and "shell" in (tmp_path / "report.html").read_text()

    bad = skyrl(
        tmp_path,
        *("eval", "terminal", "--tasks", "tasks.jsonl", "-p", "scripted:script.json"),
        *("--agent", "command:/no/such/harness --go", "-o", "bad"),
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "all 2 episodes failed (2 agent_error)" in bad.stdout
    assert "agent command not found" in bad.stdout
    wrong_env = skyrl(
        tmp_path, "eval", "math", "--agent", "command:true", "-p", "scripted:script.json"
    )
    assert wrong_env.returncode == 2 and "cannot host a command agent" in wrong_env.stdout


def test_eval_harbor_env_with_a_command_agent(harness_dir, tmp_path) -> None:
    """`skyrl eval harbor --agent command:CMD`: the Harbor env's runtime forwards the server's
    port for the agent phase only; the task's verifier gives the reward."""
    from skyrl_gym.envs.harbor.env import BUNDLED_TASKS

    rows = [{"task_id": "find-file", "path": str(BUNDLED_TASKS / "find-file")}]
    (tmp_path / "tasks.jsonl").write_text(json.dumps(rows[0]) + "\n")
    command = "grep -rl '^ACCESS-CODE:' /app/docs | head -n 1 > /app/answer.txt"
    (tmp_path / "script.json").write_text(json.dumps([call("shell", command=command), "Done."]))
    out = skyrl(
        tmp_path,
        *("eval", "harbor", "--tasks", "tasks.jsonl", "-p", "scripted:script.json"),
        *("--agent", f"command:python3 {harness_dir}/http_agent.py"),
        *("--agent-bind", str(harness_dir), "-o", "run"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (t,) = read_trajectories(tmp_path / "run" / "trajectories.jsonl")
    assert t.stop_reason is StopReason.DONE and t.reward == 1.0, t.error
    assert len(t.turns) == 2 and t.trainable


def test_harbor_run_with_a_command_agent(harness_dir, tmp_path) -> None:
    """`skyrl harbor run --agent command:CMD`: the agent solves a bundled Harbor task in its
    environment through the forwarded server; the task's verifier gives 1.0; the captured
    trajectory is in trajectories.jsonl with that reward."""
    from skyrl_gym.envs.harbor.env import BUNDLED_TASKS

    command = "grep -rl '^ACCESS-CODE:' /app/docs | head -n 1 > /app/answer.txt"
    (tmp_path / "script.json").write_text(json.dumps([call("shell", command=command), "Done."]))
    out = skyrl(
        tmp_path,
        *("harbor", "run", "--path", str(BUNDLED_TASKS / "find-file"), "-o", "job"),
        *("--agent", f"command:python3 {harness_dir}/http_agent.py"),
        *("--agent-bind", str(harness_dir), "--policy", "scripted:script.json"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    job = json.loads((tmp_path / "job" / "job.json").read_text())
    assert job["agent"] == "command" and job["mean_reward"] == 1.0, job
    (t,) = read_trajectories(tmp_path / "job" / "trajectories.jsonl")
    assert t.reward == 1.0 and len(t.turns) == 2 and t.trainable


def test_train_on_command_agent_episodes(harness_dir, tmp_path) -> None:
    """`skyrl train` with `agent.spec=command:CMD`: each episode's harness talks to the policy
    being trained (served in process), the captured tokens are trained on, and the run ends
    with its steps done; the episodes are in trajectories.jsonl with exact ids."""
    command = f"AGENT_MAX_TOKENS=12 AGENT_MAX_TURNS=2 python3 {harness_dir}/http_agent.py"
    out = skyrl(
        tmp_path,
        *("train", "-", "env.id=terminal", "model.source=tiny", "out_dir=run"),
        *("trainer.steps=2", "trainer.groups_per_step=1", "rollout.group_size=2"),
        *("logging.console=false", f"agent.spec=command:{command}"),
        f"agent.binds=[{harness_dir}]",
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trained 2 steps" in out.stdout
    trajectories = read_trajectories(tmp_path / "run" / "trajectories.jsonl")
    assert len(trajectories) == 4
    for t in trajectories:
        assert t.env_id == "terminal" and t.policy.endswith("via command:" + command)
        assert t.stop_reason in (StopReason.DONE, StopReason.AGENT_ERROR), t.error
        assert t.turns and t.trainable and len(t.segments) >= 1
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all(m["tokens/trained"] > 0 for m in metrics)

    bad = skyrl(tmp_path, "train", "-", "env.id=terminal", "agent.spec=command:x", "--ray")
    assert bad.returncode == 2 and "drop --ray" in bad.stdout
    bad = skyrl(tmp_path, "train", "-", "env.id=lookup", "agent.spec=command:x")
    assert bad.returncode == 2 and "cannot host a command agent" in bad.stdout


def test_train_with_the_openai_agents_harness(harness_dir, tmp_path) -> None:
    """A short `skyrl train` whose episodes are played by openai-agents (streamed) against the
    policy being trained: the run finishes and trains on the captured tokens."""
    venv = side_venv("openai-agents")
    command = f"AGENT_MAX_TOKENS=12 python {harness_dir}/openai_agents_driver.py"
    out = skyrl(
        tmp_path,
        *("train", "-", "env.id=terminal", "model.source=tiny", "out_dir=run"),
        *("trainer.steps=1", "trainer.groups_per_step=1", "rollout.group_size=2"),
        *("logging.console=false", f"agent.spec=command:{command}", f"agent.venv={venv}"),
        *(f"agent.binds=[{harness_dir}]", "agent.memory_mb=1024"),
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    trajectories = read_trajectories(tmp_path / "run" / "trajectories.jsonl")
    assert len(trajectories) == 2 and all(t.turns and t.trainable for t in trajectories), [
        (t.stop_reason, t.error) for t in trajectories
    ]
    (metrics,) = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert metrics["tokens/trained"] > 0
