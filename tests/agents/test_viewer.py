"""`skyrl view`: a static HTML report, checked by loading it in headless Chromium."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import skyrl_gym
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import TrajectoryWriter


def _find_chromium() -> str | None:
    return next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )


@pytest.fixture(scope="session")
def chromium() -> str:
    found = _find_chromium()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        install = ["apt-get", "install", "-y", "-qq", "chromium"]
        if subprocess.run(install, capture_output=True, timeout=600).returncode != 0:
            # A fresh machine may have no package lists yet.
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600)
            subprocess.run(install, capture_output=True, timeout=600)
        found = _find_chromium()
    if found is None:
        pytest.skip(
            "headless Chromium is not installed and could not be installed (apt-get install chromium)"
        )
    return found


class Spans(HTMLParser):
    """Collects token spans and the text of elements with given classes."""

    def __init__(self):
        super().__init__()
        self.masks: list[str] = []
        self.titles: list[str] = []
        self.stop_reasons: list[str] = []
        self.episodes: list[str] = []
        self._capture = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if "tok" in classes:
            self.masks.append(next(c for c in classes if c in ("m0", "m1")))
            self.titles.append(a.get("title") or "")
        if "data-episode" in a:
            self.episodes.append(a["data-episode"])
        self._capture = "stop-reason" in classes

    def handle_data(self, data):
        if self._capture:
            self.stop_reasons.append(data)
            self._capture = False


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path, chromium, chatml_renderer) -> None:
    tasks = bundled_tasks()[:2]
    script = {
        tasks[0]["task_id"]: [
            f"<calculator>{tasks[0]['expression']}</calculator>",
            f"<answer>{tasks[0]['answer']}</answer>",
        ],
        tasks[1]["task_id"]: ["no idea <b>bold</b>", "<answer>0</answer>"],
    }
    policy = ScriptedPolicy(script, renderer=chatml_renderer)
    path = tmp_path / "trajectories.jsonl"
    trajectories = []
    with TrajectoryWriter(path) as writer:
        for task in tasks:
            env = skyrl_gym.make("math")
            t = asyncio.run(rollout(env, policy, task))
            env.close()
            writer.write(t)
            trajectories.append(t)
    report = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "view", str(path), "-o", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    parsed = Spans()
    parsed.feed(dom)
    assert parsed.episodes == [t["task_id"] for t in tasks]
    assert parsed.stop_reasons == ["done", "done"]
    # Green spans are exactly the sampled tokens, grey ones the rest, each with a tooltip.
    generated = sum(t.num_generated_tokens for t in trajectories)
    total = sum(len(s.input_ids) for t in trajectories for s in t.training_samples())
    assert parsed.masks.count("m1") == generated and len(parsed.masks) == total
    assert all(
        "logprob 0.0000" in title
        for m, title in zip(parsed.masks, parsed.titles, strict=True)
        if m == "m1"
    )
    # Model text is escaped, never interpreted as markup; rewards and parse errors show.
    assert "no idea &lt;b&gt;bold&lt;/b&gt;" in dom
    assert "parse error (no_action)" in dom
    assert 'id="mean-reward">0.500<' in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            report.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000


def test_summary_shows_success_as_a_rate() -> None:
    from skyrl_sdk.agents.trajectory import StopReason, Trajectory
    from skyrl_sdk.agents.viewer import render_html

    def episode(i: int, success: bool) -> Trajectory:
        return Trajectory(
            episode_id=f"e{i}", task_id=f"t{i}", env_id="lookup", policy="p",
            stop_reason=StopReason.DONE, turns=(), segments=(), prompt_messages=(),
            reward=float(success), success=success,
        )  # fmt: skip

    page = render_html([episode(0, True), episode(1, False), episode(2, False), episode(3, True)])
    assert "<th>success rate</th>" in page
    assert "<td id='success-rate'>50% (2/4)</td>" in page
    assert "<td id='success-rate'>0% (0/0)</td>" in render_html([])
