"""Issue 23, items 7 and 8: a task folder must not harm the host, leak its secrets, or lose logs.

Each test builds a hostile task folder at test time (big files are sparse, made with
`truncate`, never committed) and runs it end to end through the real CLI,
`skyrl harbor run -a oracle`:

- (a) `storage_mb = 100000000` and a sparse 2 GiB file the Dockerfile COPYs: the host must not
  write it densely into the workspace (its allocated blocks stay near zero), and the disk cap
  is clamped to a host-sized maximum with a note naming the task's value; a dense COPY larger
  than the task's memory cap is charged to the sandbox's memory cgroup (it cannot land);
- (b) a sparse 512 MiB instruction.md is refused as an invalid task, without being read
  whole (the CLI's peak RSS stays low);
- (c) `${SKYRL_API_KEY}` / `${OPENAI_API_KEY}` in task.toml's env tables do not copy the
  host's values into the agent's (or the verifier's) environment unless `--pass-env` allows
  them; a note names each variable, never its value;
- (d) a log tree deeper than Python's recursion limit under /logs/agent is not cut silently:
  the rest of the logs are copied and a note says what was not.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap
from tests.skyrl_gym.envs.harbor.conftest import make_task

pytestmark = needs_bwrap

REPO = Path(__file__).parents[3]
GiB = 1 << 30
MiB = 1 << 20


def _harbor_run(
    tasks: Path, out: Path, *flags: str, env: dict[str, str] | None = None
) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """`skyrl harbor run -a oracle` over `tasks`; the only trial's result.json and the run."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", "oracle"]
    done = subprocess.run(
        [*cli, *flags, "-p", str(tasks), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    return json.loads((out / trial["trial_name"] / "result.json").read_text()), done


def _trial_dir(out: Path) -> Path:
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    return out / trial["trial_name"]


def _toml(environment: str = "", extra: str = "") -> str:
    """A task.toml: `environment` lines go into `[environment]`, `extra` after it."""
    head = "[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n[environment]\n"
    return f'schema_version = "1.4"\n{head}network_mode = "no-network"\n{environment}\n{extra}\n'


@pytest.mark.skipif(os.geteuid() != 0, reason="the workspace is a tmpfs as root")
def test_sparse_copy_stays_sparse_and_storage_is_clamped(tmp_path: Path) -> None:
    """(a) The 36 KB task folder: a huge storage_mb and a sparse 2 GiB COPY."""
    task = make_task(
        tmp_path,
        "sparse-copy",
        toml=_toml("storage_mb = 100000000"),
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY big.bin /app/big.bin\n",
        solve_sh=(
            "stat -c '%b %B %s' /app/big.bin > /logs/agent/big.txt; "
            "df -B1 --output=size /app | tail -1 > /logs/agent/df.txt; echo ok > /app/done.txt"
        ),
    )
    with open(task / "environment" / "big.bin", "wb") as f:
        f.truncate(2 * GiB)  # sparse: no block allocated
    result, done = _harbor_run(task, tmp_path / "out")
    assert result["reward"] == 1.0, (result, done.stdout)
    trial = _trial_dir(tmp_path / "out")
    blocks, block_size, size = map(int, (trial / "agent" / "big.txt").read_text().split())
    assert size == 2 * GiB  # the file is there, at its full length...
    assert blocks * block_size < MiB, "the host wrote the sparse file densely"  # ...unwritten
    workspace = int((trial / "agent" / "df.txt").read_text())
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert workspace <= mem_total // 2, "storage_mb was not clamped to the host"
    notes = "\n".join(result["environment_notes"])
    assert "storage_mb=100000000" in notes and "clamped" in notes, notes


@pytest.mark.skipif(os.geteuid() != 0, reason="the workspace is a tmpfs as root")
def test_copy_is_charged_to_the_sandbox_memory_cap(tmp_path: Path) -> None:
    """(a) A dense COPY larger than the task's memory cap cannot land: the copy runs inside the
    sandbox's memory cgroup (the workspace is a tmpfs: its pages are memory), not on the host
    outside every cgroup."""
    task = make_task(
        tmp_path,
        "dense-copy",
        toml=_toml("memory_mb = 64\nstorage_mb = 1024"),
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY big.bin /app/big.bin\n",
        solve_sh=(
            "stat -c %s /app/big.bin > /logs/agent/big.txt 2>&1 || echo missing > "
            "/logs/agent/big.txt; echo ok > /app/done.txt"
        ),
    )
    with open(task / "environment" / "big.bin", "wb") as f:
        chunk = b"x" * MiB  # not zeros: a sparse-aware copy cannot skip it
        for _ in range(160):
            f.write(chunk)
    result, done = _harbor_run(task, tmp_path / "out", env={"SKYRL_HARBOR_ROOT": "binds"})
    trial = _trial_dir(tmp_path / "out")
    copied = (trial / "agent" / "big.txt").read_text().strip() if result["error"] is None else ""
    assert copied != str(160 * MiB), "160 MiB landed in a sandbox capped at 64 MiB"
    notes = "\n".join(result["environment_notes"]) + result["error_message"]
    assert "out of memory" in notes and "64 MiB" in notes, (result, done.stdout)
    # A copy-on-write root copies at build time, in the build sandbox, capped by the build's
    # disk cap (its tmpfs, charged to its memory cgroup).
    cow = {"SKYRL_HARBOR_BUILD_MAX_BYTES": str(64 * MiB), "SKYRL_CACHE": str(tmp_path / "c")}
    result, done = _harbor_run(task, tmp_path / "out-cow", env=cow)
    trial = _trial_dir(tmp_path / "out-cow")
    copied = (trial / "agent" / "big.txt").read_text().strip() if result["error"] is None else ""
    assert copied != str(160 * MiB), "160 MiB landed past a 64 MiB build cap"
    notes = "\n".join(result["environment_notes"]) + result["error_message"]
    assert "COPY" in notes and "No space left" in notes, (result, done.stdout)


def test_huge_sparse_instruction_is_refused_without_reading_it(tmp_path: Path) -> None:
    """(b) A sparse 512 MiB instruction.md: an invalid task, and never read whole."""
    task = make_task(tmp_path, "huge-instruction")
    os.truncate(task / "instruction.md", 512 * MiB)
    out = tmp_path / "out"
    # The peak RSS of the CLI (and what it waits for), measured from a parent of its own.
    probe = textwrap.dedent(
        f"""\
        import resource, subprocess, sys
        subprocess.run([sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", "oracle",
                        "-p", {str(task)!r}, "-o", {str(out)!r}], capture_output=True, timeout=300)
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=320, cwd=REPO
    )
    peak_kib = int(done.stdout.split()[-1])
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    result = json.loads((out / trial["trial_name"] / "result.json").read_text())
    assert result["error"] == "invalid_task", result
    assert "instruction.md" in result["error_message"], result
    assert "larger than" in result["error_message"], result
    assert peak_kib < 400 * 1024, f"peak RSS {peak_kib} KiB: instruction.md was read whole"


def test_host_secrets_are_not_templated_into_the_task(tmp_path: Path) -> None:
    """(c) `${VAR}` in task.toml copies nothing from the host unless the user allows it."""
    skyrl_key = f"sk-skyrl-{secrets.token_hex(12)}"
    openai_key = f"sk-openai-{secrets.token_hex(12)}"
    toml = (
        'schema_version = "1.4"\n'
        '[agent]\ntimeout_sec = 60.0\nenv = { FROM_AGENT = "${OPENAI_API_KEY}" }\n'
        '[verifier]\ntimeout_sec = 30.0\nenv = { FROM_VERIFIER = "${OPENAI_API_KEY}" }\n'
        '[environment]\nnetwork_mode = "no-network"\n'
        'env = { FROM_ENVIRONMENT = "${SKYRL_API_KEY}", WITH_DEFAULT = "${OPENAI_API_KEY:-none}" }\n'
        '[solution]\nenv = { FROM_SOLUTION = "${SKYRL_API_KEY}" }\n'
    )
    task = make_task(
        tmp_path,
        "secret-template",
        toml=toml,
        solve_sh="env > /logs/agent/env.txt; echo ok > /app/done.txt",
        test_sh="env > /logs/verifier/env.txt; echo 1 > /logs/verifier/reward.txt",
    )
    out = tmp_path / "out"
    result, done = _harbor_run(
        task, out, env={"SKYRL_API_KEY": skyrl_key, "OPENAI_API_KEY": openai_key}
    )
    assert result["reward"] == 1.0, (result, done.stdout)
    agent_env = (_trial_dir(out) / "agent" / "env.txt").read_text()
    assert "WITH_DEFAULT=none" in agent_env  # ${VAR:-default}: the default, not the host's
    for path in out.rglob("*"):
        if path.is_file() and not path.is_symlink():
            text = path.read_text(errors="replace")
            assert skyrl_key not in text and openai_key not in text, f"a host secret in {path}"
    notes = "\n".join(result["environment_notes"])
    assert "SKYRL_API_KEY" in notes and "OPENAI_API_KEY" in notes, notes


@pytest.mark.skipif(os.geteuid() != 0, reason="the workspace is a tmpfs as root")
def test_deep_log_tree_is_not_cut_silently(tmp_path: Path) -> None:
    """(d) 1,500 nested directories under /logs/agent: the other logs are still copied and a
    note names what was not."""
    task = make_task(
        tmp_path,
        "deep-logs",
        solve_sh=(
            "cd /logs/agent && echo top > top.txt && deep=$(printf 'a/%.0s' $(seq 1500)) && "
            'mkdir -p "$deep" && echo leaf > "${deep}leaf.txt"; '
            "echo ok > /app/done.txt"
        ),
    )
    out = tmp_path / "out"
    result, done = _harbor_run(task, out)
    assert result["reward"] == 1.0, (result, done.stdout)
    trial = _trial_dir(out)
    assert (trial / "agent" / "top.txt").read_text() == "top\n"
    assert (trial / "verifier" / "test-stdout.txt").is_file(), "the verifier's logs were lost"
    notes = "\n".join(result["environment_notes"])
    assert "agent/a/a/" in notes and "not copied" in notes, notes


def test_pass_env_allows_the_named_variables_only(tmp_path: Path) -> None:
    """(c) `--pass-env OPENAI_API_KEY`: that variable is templated from the host, no other."""
    skyrl_key = f"sk-skyrl-{secrets.token_hex(12)}"
    openai_key = f"sk-openai-{secrets.token_hex(12)}"
    toml = _toml('env = { KEY = "${OPENAI_API_KEY}", OTHER = "${SKYRL_API_KEY}" }')
    task = make_task(
        tmp_path,
        "pass-env",
        toml=toml,
        solve_sh="env > /logs/agent/env.txt; echo ok > /app/done.txt",
    )
    out = tmp_path / "out"
    env = {"SKYRL_API_KEY": skyrl_key, "OPENAI_API_KEY": openai_key}
    result, done = _harbor_run(task, out, "--pass-env", "OPENAI_API_KEY", env=env)
    assert result["reward"] == 1.0, (result, done.stdout)
    agent_env = (_trial_dir(out) / "agent" / "env.txt").read_text()
    assert f"KEY={openai_key}\n" in agent_env and skyrl_key not in agent_env
    assert "OTHER=\n" in agent_env
    notes = "\n".join(result["environment_notes"])
    assert "${SKYRL_API_KEY}" in notes and "OPENAI_API_KEY" not in notes, notes


@pytest.mark.skipif(os.geteuid() != 0, reason="the copy runs as root only when root")
def test_copy_never_writes_through_a_link_a_run_step_left(tmp_path: Path) -> None:
    """(a) A RUN step (the sandbox's user) leaves `/app/config.txt -> HOST FILE`, then COPY
    writes config.txt: the host copier, as root, must replace the link, not write through it
    onto the host file. A link in place of a directory on the way is refused."""
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    task = make_task(
        tmp_path,
        "copy-through-link",
        dockerfile=(
            "FROM debian:bookworm-slim\nWORKDIR /app\n"
            f"RUN ln -s {victim} /app/config.txt\nCOPY config.txt /app/config.txt\n"
        ),
        files={"environment/config.txt": "planted\n"},
        solve_sh="cat /app/config.txt > /logs/agent/config.txt; echo ok > /app/done.txt",
    )
    out = tmp_path / "out"
    # The host copier of the read-only-binds layout; a copy-on-write root copies inside the
    # build sandbox, where the link leads nowhere on the host (checked below too).
    binds = {"SKYRL_HARBOR_ROOT": "binds"}
    result, done = _harbor_run(task, out, env=binds)
    assert victim.read_text() == "original\n", "COPY wrote through the link onto a host file"
    assert result["reward"] == 1.0, (result, done.stdout)
    assert (_trial_dir(out) / "agent" / "config.txt").read_text() == "planted\n"
    result, done = _harbor_run(task, tmp_path / "out-cow", env={"SKYRL_CACHE": str(tmp_path / "c")})
    assert victim.read_text() == "original\n", "the build wrote through the link onto a host file"
    assert result["reward"] == 1.0, (result, done.stdout)

    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    task = make_task(
        tmp_path,
        "copy-through-dir-link",
        dockerfile=(
            "FROM debian:bookworm-slim\nWORKDIR /app\n"
            f"RUN ln -s {victim_dir} /app/sub\nCOPY config.txt /app/sub/config.txt\n"
        ),
        files={"environment/config.txt": "planted\n"},
    )
    result, done = _harbor_run(task, tmp_path / "out2", env=binds)
    assert list(victim_dir.iterdir()) == [], "COPY wrote through a directory link"
    assert result["error"] == "environment_error" and "link" in result["error_message"], result
    result, done = _harbor_run(
        task, tmp_path / "out2-cow", env={"SKYRL_CACHE": str(tmp_path / "c")}
    )
    assert list(victim_dir.iterdir()) == [], "the build wrote through a directory link"


def test_skyrl_eval_pass_env(tmp_path: Path) -> None:
    """(c) `skyrl eval harbor --pass-env NAME`: the named variable reaches `${NAME}`, no other;
    without the flag neither does; an env that takes no pass_env is refused."""
    from tests.skyrl_gym.envs.harbor.conftest import ANSWER, bash_call

    openai_key = f"sk-openai-{secrets.token_hex(12)}"
    skyrl_key = f"sk-skyrl-{secrets.token_hex(12)}"
    task = make_task(
        tmp_path,
        "eval-pass-env",
        toml=_toml('env = { KEY = "${OPENAI_API_KEY}", OTHER = "${SKYRL_API_KEY}" }'),
        test_sh=(
            f'[ "$(cat /app/seen.txt)" = "K={openai_key} O=" ] && echo 1 > '
            "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
        ),
    )
    (tmp_path / "tasks.jsonl").write_text(
        json.dumps({"task_id": task.name, "path": str(task)}) + "\n"
    )
    actions = [bash_call('echo "K=$KEY O=$OTHER" > /app/seen.txt'), ANSWER]
    (tmp_path / "script.json").write_text(json.dumps({"actions": actions}))
    env = {**os.environ, "OPENAI_API_KEY": openai_key, "SKYRL_API_KEY": skyrl_key}
    base = [sys.executable, "-m", "skyrl_gym", "eval", "harbor", "--tasks", "tasks.jsonl"]
    base += ["-p", "scripted:script.json"]
    rewards = {}
    for name, flags in (("allowed", ["--pass-env", "OPENAI_API_KEY"]), ("none", [])):
        done = subprocess.run(
            [*base, *flags, "-o", name],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(REPO)},
        )
        results = json.loads((tmp_path / name / "results.json").read_text())
        (episode,) = results["episodes"]
        rewards[name] = episode["reward"]
        assert skyrl_key not in (tmp_path / name / "trajectories.jsonl").read_text()
    assert rewards == {"allowed": 1.0, "none": 0.0}, (rewards, done.stdout)
    math = [sys.executable, "-m", "skyrl_gym", "eval", "math", "-p", "scripted:script.json"]
    refused = subprocess.run(
        [*math, "--pass-env", "OPENAI_API_KEY"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and "takes no pass_env" in refused.stdout, refused.stdout


def test_deeply_nested_task_toml_does_not_end_the_job(tmp_path: Path) -> None:
    """A task.toml of arrays nested 50,000 deep (tomllib recurses per level) is one invalid
    task; the job's other tasks still run and job.json is written."""
    tasks = tmp_path / "tasks"
    make_task(tasks, "fine")
    make_task(tasks, "nested", toml="a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", "oracle"]
    done = subprocess.run(
        [*cli, "-p", str(tasks), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert (tmp_path / "out" / "job.json").is_file(), done.stdout + done.stderr
    trials = json.loads((tmp_path / "out" / "job.json").read_text())["trials"]
    by_task = {t["task"]: t for t in trials}
    assert by_task["nested"]["error"] == "invalid_task"
    assert by_task["fine"]["reward"] == 1.0
