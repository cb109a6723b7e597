"""Repository source at an instance's `base_commit`, prepared on the host for a sandbox.

Sources, in order: a local directory of git repositories (`DIR/<owner>__<name>`,
`DIR/<name>` or `DIR/<owner>/<name>`), then, when allowed, the repository's GitHub URL. A
workspace gets only the history up to `base_commit` (fetched by id into a fresh repository),
so no later commit, branch or tag of the source is visible in it.

These git commands run on the host, but only on sources the operator named and on git
directories this module created; a workspace an agent has written is read back only through
a pristine copy of its git directory (`workspace_patch`), never through its own `.git`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from skyrl_gym.envs.swe.instances import SWEInstance

GITHUB_URL = "https://github.com/{repo}.git"

# Host git never runs hooks, fsmonitor commands or external diff drivers here.
_SAFE_GIT = [
    "git",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "safe.directory=*",
    "-c",
    "core.autocrlf=false",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "advice.detachedHead=false",
]
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    # Nor the host user's ~/.gitconfig: its filters or diff drivers must not run on a work
    # tree an agent wrote.
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "skyrl",
    "GIT_AUTHOR_EMAIL": "skyrl@localhost",
    "GIT_COMMITTER_NAME": "skyrl",
    "GIT_COMMITTER_EMAIL": "skyrl@localhost",
}


class RepoError(RuntimeError):
    """The repository source is missing, or `base_commit` cannot be fetched from it."""


def git(args: Sequence[str], cwd: str | Path | None = None, timeout: float = 300) -> str:
    """Run host git with safe settings; `RepoError` with its stderr when it fails."""
    env = {**os.environ, **_GIT_ENV}
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    try:
        done = subprocess.run(
            [*_SAFE_GIT, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise RepoError(f"git {' '.join(args[:2])} timed out after {timeout:g}s") from None
    if done.returncode != 0:
        raise RepoError(f"git {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def find_repo(repos_dir: str | Path | None, repo: str) -> Path | None:
    """The local git repository for `owner/name` under `repos_dir`, if there is one."""
    if repos_dir is None:
        return None
    owner, name = repo.split("/")
    root = Path(repos_dir)
    for candidate in (root / f"{owner}__{name}", root / name, root / owner / name):
        if (candidate / ".git").exists() or (candidate / "HEAD").is_file():
            return candidate
    return None


def repo_source(instance: SWEInstance, repos_dir: str | Path | None, allow_clone: bool) -> str:
    """Where to fetch the instance's repository from (a local path or a URL)."""
    local = find_repo(repos_dir, instance.repo)
    if local is not None:
        return str(local.resolve())
    if allow_clone:
        return GITHUB_URL.format(repo=instance.repo)
    owner, name = instance.repo.split("/")
    where = f" under {repos_dir}" if repos_dir else " (no --repos given)"
    raise RepoError(
        f"{instance.instance_id}: no git repository {owner}__{name} or {name}{where}, "
        "and cloning is off"
    )


def materialize(
    instance: SWEInstance,
    dest: str | Path,
    *,
    repos_dir: str | Path | None = None,
    allow_clone: bool = False,
    timeout: float = 600,
) -> Path:
    """Make `dest` a git work tree at `base_commit` (branch `main`, no remotes, no tags)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    source = repo_source(instance, repos_dir, allow_clone)
    git(["init", "-q", str(dest)])
    try:
        git(["fetch", "-q", "--no-tags", source, instance.base_commit], dest, timeout)
    except RepoError as e:
        raise RepoError(
            f"{instance.instance_id}: cannot fetch {instance.base_commit} from {source}: {e}"
        ) from None
    git(["checkout", "-q", "-B", "main", "FETCH_HEAD"], dest)
    return dest


def snapshot_git_dir(work_tree: str | Path, dest: str | Path) -> Path:
    """Copy a fresh work tree's `.git` to `dest`: a trusted reference to diff against later."""
    dest = Path(dest)
    shutil.copytree(Path(work_tree) / ".git", dest, symlinks=True)
    return dest


def workspace_patch(work_tree: str | Path, git_dir: str | Path, base_commit: str) -> str:
    """Every change in `work_tree` relative to `base_commit`, as a git diff.

    The work tree's own `.git` is ignored (an agent may have rewritten it); `git_dir` is the
    pristine snapshot taken before the agent started. New files are included.
    """
    with tempfile.TemporaryDirectory(prefix="skyrl-swe-index-") as tmp:
        index = Path(tmp) / "index"
        base = ["--git-dir", str(git_dir), "--work-tree", str(work_tree)]
        env = {**os.environ, **_GIT_ENV, "GIT_INDEX_FILE": str(index)}
        for args in (
            [*base, "add", "-A", "--", "."],
            [*base, "diff", "--cached", "--binary", "--no-color", "--no-ext-diff", base_commit],
        ):
            done = subprocess.run(
                [*_SAFE_GIT, *args],
                capture_output=True,
                text=True,
                errors="surrogateescape",
                timeout=300,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            if done.returncode != 0:
                raise RepoError(f"reading the workspace's changes failed: {done.stderr[-2000:]}")
        return done.stdout


def path_exists_at(source_work_tree: str | Path, commit: str, paths: Sequence[str]) -> list[str]:
    """The subset of `paths` that exist in `commit` of the repository at `source_work_tree`."""
    if not paths:
        return []
    listed = git(["ls-tree", "-r", "--name-only", commit, "--", *paths], source_work_tree)
    present = set(listed.splitlines())
    return [p for p in paths if p in present]
