"""Build the bundled SWE-bench-style repositories and instances (offline, deterministic).

    python -m skyrl_gym.envs.swe.bundled.build --repos DIR [--instances FILE]

creates one git repository per project in `DIR/skyrl-bench__<name>` (fixed authors and dates,
so commit ids are the same on every machine) and writes the instances (JSONL) to FILE. The
checked-in `instances.jsonl` next to this file was written this way; `ensure_repos()` builds
the repositories into a cache directory on first use and checks their commits against it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from skyrl_gym.envs.swe.bundled.projects import OWNER, PROJECTS, TASKS, Project, Task
from skyrl_gym.envs.swe.repos import git

INSTANCES_FILE = Path(__file__).with_name("instances.jsonl")
"""The bundled instances."""

_DATE = "2024-01-{day:02d}T12:00:00+00:00"


def _commit_env(day: int) -> dict[str, str]:
    date = _DATE.format(day=day)
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "SkyRL Bench",
        "GIT_AUTHOR_EMAIL": "bench@skyrl.invalid",
        "GIT_COMMITTER_NAME": "SkyRL Bench",
        "GIT_COMMITTER_EMAIL": "bench@skyrl.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        path.chmod(0o644)


def build_project(project: Project, dest: Path) -> list[str]:
    """Create the project's repository at `dest`; its commit ids, oldest first."""
    dest.mkdir(parents=True)
    git(["init", "-q", "-b", "main", str(dest)])
    commits = []
    for day, (message, files) in enumerate(project.commits, 1):
        _write(dest, files)
        git(["add", "-A"], dest)
        subprocess.run(
            ["git", "-c", "commit.gpgsign=false", "commit", "-q", "-m", message],
            cwd=dest,
            env=_commit_env(day),
            check=True,
        )
        commits.append(git(["rev-parse", "HEAD"], dest).strip())
    return commits


def _diff(repo: Path, commit: str, files: dict[str, str]) -> str:
    """The git diff that turns `commit` into `commit` + `files` (computed in a scratch clone)."""
    with tempfile.TemporaryDirectory(prefix="skyrl-bundled-") as tmp:
        work = Path(tmp) / "w"
        git(["clone", "-q", "--no-hardlinks", str(repo), str(work)])
        git(["checkout", "-q", commit], work)
        _write(work, files)
        git(["add", "-A"], work)
        return git(["diff", "--cached", "--no-color", "--no-ext-diff", "--no-renames"], work)


def _test_ids(repo: Path, commit: str, task: Task) -> list[str]:
    """Node ids of every test in the task's test files, after the fix and the new tests."""
    with tempfile.TemporaryDirectory(prefix="skyrl-bundled-") as tmp:
        work = Path(tmp) / "w"
        git(["clone", "-q", "--no-hardlinks", str(repo), str(work)])
        git(["checkout", "-q", commit], work)
        _write(work, {**task.fix, **task.tests})
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                *sorted(task.tests),
            ],
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        ids = [line for line in done.stdout.splitlines() if "::" in line]
        if done.returncode != 0 or not ids:
            raise RuntimeError(f"collecting tests of {task.project} failed:\n{done.stdout}")
        return ids


def build_repos(repos_dir: str | Path) -> dict[str, list[str]]:
    """Build every project's repository under `repos_dir`; project name -> commit ids."""
    root = Path(repos_dir)
    root.mkdir(parents=True, exist_ok=True)
    commits: dict[str, list[str]] = {}
    for project in PROJECTS:
        path = root / f"{OWNER}__{project.name}"
        if path.exists():
            raise FileExistsError(f"{path} exists; build into an empty directory")
        commits[project.name] = build_project(project, path)
    return commits


def build(repos_dir: str | Path) -> list[dict[str, Any]]:
    """Build every project under `repos_dir`; return the instances (as JSON rows).

    PASS_TO_PASS is every other test collected from the touched test files (this runs pytest
    once per instance, so it takes seconds).
    """
    commits = build_repos(repos_dir)
    instances = []
    for task in TASKS:
        repo = Path(repos_dir) / f"{OWNER}__{task.project}"
        base = commits[task.project][task.base]
        ids = _test_ids(repo, base, task)
        missing = [t for t in task.fail_to_pass if t not in ids]
        if missing:
            raise RuntimeError(f"{task.project}: FAIL_TO_PASS tests not collected: {missing}")
        instances.append(
            {
                "instance_id": f"{OWNER}__{task.project}-{task.number}",
                "repo": f"{OWNER}/{task.project}",
                "base_commit": base,
                "patch": _diff(repo, base, task.fix),
                "test_patch": _diff(repo, base, task.tests),
                "problem_statement": task.problem_statement,
                "hints_text": "",
                "created_at": _DATE.format(day=len(commits[task.project]) + 1),
                "version": "0.1",
                "environment_setup_commit": base,
                "FAIL_TO_PASS": list(task.fail_to_pass),
                "PASS_TO_PASS": [t for t in ids if t not in task.fail_to_pass],
            }
        )
    return instances


def bundled_instances() -> list[dict[str, Any]]:
    """The checked-in instances, as rows."""
    lines = INSTANCES_FILE.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _fingerprint() -> str:
    return hashlib.sha256(INSTANCES_FILE.read_bytes()).hexdigest()[:12]


def cache_root() -> Path:
    """Where bundled repositories are cached: `$SKYRL_CACHE_DIR` or `~/.cache/skyrl`."""
    base = os.environ.get("SKYRL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "skyrl"
    )
    return Path(base) / "swebench"


@cache
def ensure_repos(repos_dir: str | None = None) -> Path:
    """The bundled repositories, built on first use (into `repos_dir` or the cache).

    Raises `RuntimeError` if a rebuilt repository's commits differ from `instances.jsonl`.
    """
    target = Path(repos_dir) if repos_dir else cache_root() / f"repos-{_fingerprint()}"
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        commits = build_repos(scratch / "repos")
        for row in bundled_instances():
            name = row["repo"].split("/")[1]
            if row["base_commit"] not in commits.get(name, ()):
                raise RuntimeError(
                    f"bundled repository for {row['instance_id']} does not match "
                    f"{INSTANCES_FILE.name}; rebuild it with `python -m {__spec__.name}`"
                )
        (scratch / "repos" / ".complete").write_text("ok\n")
        try:
            (scratch / "repos").rename(target)
        except OSError:  # another process finished first
            if not (target / ".complete").exists():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", required=True, help="empty directory for the repositories")
    parser.add_argument("--instances", help="write the instances here (JSONL)")
    args = parser.parse_args(argv)
    rows = build(args.repos)
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    if args.instances:
        Path(args.instances).write_text(text, encoding="utf-8")
    print(f"built {len(PROJECTS)} repositories and {len(rows)} instances in {args.repos}")


if __name__ == "__main__":
    main()
