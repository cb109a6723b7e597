"""Lint a Harbor task's verifier for patterns an agent can forge (`skyrl harbor lint TASKS/`).

A verifier (tests/test.sh and the shell and Python files beside it) runs after the agent, in
the agent's environment. The runtime keeps it from the agent's processes (its own uid, a
read-only /proc, reward files only from the verifier), but it cannot fix a verifier that
*trusts* what the agent left behind. Six patterns do, each a rule:

    agent-path-expected   the expected value is read from a path the agent can write
    reward-before-checks  a reward is written before checks that could still change it
    stale-reward-file     the reward file is appended to or read, or only a success is
                          ever written (so a file left from before could count)
    imports-agent-code    agent files are sourced or imported into the checker itself
    git-hooks-on          git runs on the agent's repository with its hooks and fsmonitor
    no-timeout            an agent program runs without a `timeout`

Each rule is one function, `rule(text, ctx, path)`: it reads one file's text (shell unless
`path` ends in `.py`; Python embedded in shell heredocs and `-c` strings, and shell strings
given to `os.system` or `subprocess`, are read too) and returns `Finding`s. `LintContext`
says which paths the agent can write. The checks are static and heuristic: they read the
text, never run it, and aim to flag only patterns that are forgeable as written; a line
ending in `# skyrl-lint: ignore[rule-id]` silences that rule on that line (say why beside it).

`lint_task(dir)` lints every verifier file of a task folder; `log_findings(task)` is what
`load_task` calls, one warning line per finding (once per task folder and file contents).
"""

from __future__ import annotations

import ast
import enum
import functools
import logging
import posixpath
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.envs.harbor.dockerfile import inside, plan_dockerfile

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.task import HarborTask

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 1 << 20
"""Verifier files larger than this are not linted (data, not code)."""


class LintRule(enum.StrEnum):
    """A verifier pattern known to be forgeable; the value is the rule id."""

    AGENT_PATH_EXPECTED = "agent-path-expected"
    """An expected value is read from (or computed by) something the agent can write."""
    REWARD_BEFORE_CHECKS = "reward-before-checks"
    """A reward is written while checks or commands that could change it still follow."""
    STALE_REWARD_FILE = "stale-reward-file"
    """The reward file is appended to or read, or only ever written on success."""
    IMPORTS_AGENT_CODE = "imports-agent-code"
    """Agent files are sourced or imported into the checker's own process."""
    GIT_HOOKS_ON = "git-hooks-on"
    """git runs on the agent's repository without hooks and fsmonitor turned off."""
    NO_TIMEOUT = "no-timeout"
    """An agent program runs without a timeout of its own."""


RULE_FIXES: Mapping[LintRule, str] = {
    LintRule.AGENT_PATH_EXPECTED: "keep expected values in tests/ or in the verifier's text",
    LintRule.REWARD_BEFORE_CHECKS: "write the verdict last, after every check",
    LintRule.STALE_REWARD_FILE: "write the reward with > on every path, 0 on failure",
    LintRule.IMPORTS_AGENT_CODE: "run agent code as a program (subprocess, with a timeout)",
    LintRule.GIT_HOOKS_ON: "git -c core.hooksPath=/dev/null -c core.fsmonitor=false ...",
    LintRule.NO_TIMEOUT: "timeout 30 CMD (shell) or subprocess.run(..., timeout=30)",
}
"""The usual fix for each rule, printed after its findings."""


@dataclass(frozen=True)
class Finding:
    """One forgeable pattern at one line of one verifier file."""

    rule: LintRule
    """Which pattern."""
    path: str
    """The file, relative to the folder that was linted (e.g. `my-task/tests/test.sh`)."""
    line: int
    """1-based line number in that file."""
    message: str
    """What was found, in one line."""

    def format(self) -> str:
        """`path:line: rule-id: message`, the line the CLI and the load-time warning print."""
        return f"{self.path}:{self.line}: {self.rule.value}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form: rule id, path, line, message."""
        return {
            "rule": self.rule.value,
            "path": self.path,
            "line": self.line,
            "message": self.message,
        }


DEFAULT_AGENT_PATHS = ("/app", "/tmp", "/logs/agent", "/workspace")
"""Paths the agent of a Harbor task can write besides its WORKDIR (and COPY destinations)."""
DEFAULT_VERIFIER_PATHS = ("/tests", "/logs/verifier")
"""Paths only the verifier has: uploaded or created after the agent is gone."""


@dataclass(frozen=True)
class LintContext:
    """Where a verifier runs, as far as the rules need to know."""

    agent_paths: tuple[str, ...] = DEFAULT_AGENT_PATHS
    """Absolute paths the agent can write (a path counts with everything below it)."""
    cwd: str | None = "/app"
    """The verifier's starting directory (relative paths resolve against it; None: unknown)."""
    verifier_paths: tuple[str, ...] = DEFAULT_VERIFIER_PATHS
    """Paths the agent cannot write even where they lie under an agent path."""
    safe_path: bool = True
    """Python runs with `PYTHONSAFEPATH=1`, so `python -m X` does not put the cwd on
    `sys.path` (true of our Harbor verifier and of `grading_env`)."""
    deadline_fails: bool = False
    """The runner scores a check that outlives its deadline as failed (terminal checks, SWE
    tests): a hung agent program is then an honest 0, so no-timeout does not apply. A Harbor
    verifier that hangs loses its verdict instead (the trial ends without one)."""

    git_hardened: bool = False
    """The runner's environment already turns git's hooks and fsmonitor off for every git
    the checker starts (`GIT_HARDENING` in `grading_env`: terminal checks, SWE grading).
    Harbor tasks are linted without it: they also run under Harbor, which does not."""

    def is_agent(self, path: str | None) -> bool:
        """True when absolute `path` is one the agent can write."""
        if not path or not path.startswith("/"):
            return False
        if any(inside(path, p) for p in self.verifier_paths):
            return False
        return any(inside(path, p) for p in self.agent_paths)

    def resolve(self, word: str, cwd: str | None = None) -> str | None:
        """`word` as an absolute normalized path (relative ones against `cwd`), or None."""
        if not word or "$" in word or word.startswith(("~", "-")) or "\n" in word:
            return None
        if word.startswith("/"):
            return posixpath.normpath(word)
        base = cwd if cwd is not None else self.cwd
        return posixpath.normpath(posixpath.join(base, word)) if base else None


def harbor_context(workdir: str | None, dockerfile: Path | None = None) -> LintContext:
    """The context of a Harbor task: its WORKDIR (task.toml, else the Dockerfile's, else /app),
    the usual agent paths, and every Dockerfile COPY destination (the agent can edit them)."""
    extra: list[str] = []
    docker_workdir = None
    if dockerfile is not None and dockerfile.is_file():
        try:
            plan = plan_dockerfile(dockerfile)
        except (OSError, ValueError):
            plan = None
        if plan is not None:
            docker_workdir = plan.workdir
            extra = [s.dest.rstrip("/") for s in plan.steps if s.dest and s.dest.rstrip("/")]
    cwd = workdir or docker_workdir or "/app"
    paths = tuple(dict.fromkeys([cwd, *DEFAULT_AGENT_PATHS, *extra]))
    return LintContext(agent_paths=paths, cwd=cwd)


# ---- shared vocabulary --------------------------------------------------------------------------

_REWARD_NAMES = ("reward.txt", "reward.json")
_EXPECTED_NAME = re.compile(
    r"(?:^|_)(want|wanted|expect|expected|expectation|reference|golden|gold|truth)(?:_|$)"
)
_INTERPRETERS = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|bash|sh|dash|zsh|ksh|node|nodejs|deno|bun|ruby|perl|php|"
    r"Rscript|lua[0-9.]*|tclsh|julia|ts-node|tsx|java)$"
)
_SHELLS = ("bash", "sh", "dash", "zsh", "ksh")
_BUILD_TOOLS = ("make", "cargo", "go", "npm", "yarn", "pnpm", "mvn", "gradle", "ninja")
_FILE_READERS = (
    "cat", "tac", "head", "tail", "wc", "sort", "uniq", "cut", "grep", "egrep", "fgrep", "rg",
    "awk", "gawk", "sed", "jq", "md5sum", "sha1sum", "sha256sum", "cksum", "xxd", "od", "nl",
    "paste", "column", "strings", "base64", "readlink", "yq", "tr",
)  # fmt: skip
_PATTERN_FIRST = ("grep", "egrep", "fgrep", "rg", "awk", "gawk", "sed", "jq", "yq")
_BENIGN_AFTER_VERDICT = (
    "echo", "printf", "exit", "return", "true", "false", ":", "cat", "ls", "sync", "sleep",
    "wait", "date", "set", "trap", "kill", "pkill", "rm", "fi", "done", "esac", "chmod", "tee",
)  # fmt: skip
_GIT_SAFE = ("core.hookspath=/dev/null", "core.fsmonitor=false")
_GIT_NO_REPO = ("clone", "init", "version", "help", "--version", "--help", "ls-remote")
_PATH_VARS = ("PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "PYTHONHOME")
_PYTEST_VALUE_OPTS = (
    "-k", "-m", "-p", "-c", "-o", "-n", "-W", "--rootdir", "--ctrf", "--junitxml", "--junit-xml",
    "--json-report-file", "--tb", "--deselect", "--ignore", "--ignore-glob", "--confcutdir",
    "--basetemp", "--durations", "--maxfail", "--log-file", "--cov", "--cov-report", "--timeout",
    "--override-ini", "--import-mode", "--html", "--alluredir", "--reruns", "--capture",
    "--color", "-r", "--report-log", "--dist",
)  # fmt: skip


def _pathish(word: str) -> bool:
    """True for words that name files (`/x`, `a/b`, `./x`, `x.py`), not programs or values."""
    return (
        "/" in word or word.startswith(".") or bool(re.search(r"\.[A-Za-z][A-Za-z0-9]{0,4}$", word))
    )


def _is_reward(path: str | None) -> bool:
    return bool(path) and posixpath.basename(path) in _REWARD_NAMES


class _Value(enum.Enum):
    """What a reward write writes, as far as the text says."""

    ZERO = "zero"
    SUCCESS = "success"
    UNKNOWN = "unknown"


def _classify(value: str) -> _Value:
    text = value.strip().strip("'\"")
    m = re.search(r"""["']reward["']\s*:\s*([0-9.]+)""", text)
    if m:
        text = m.group(1)
    try:
        return _Value.ZERO if float(text) == 0 else _Value.SUCCESS
    except ValueError:
        return _Value.UNKNOWN


# ---- shell: a small scanner ---------------------------------------------------------------------

_KEYWORDS = frozenset(("if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"))
_CLOSERS = frozenset(("fi", "done", "esac", "}", "in", ";;"))
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=(.*)$", re.DOTALL)
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass
class _Cmd:
    """One simple shell command as written."""

    line: int
    seq: int
    depth: int
    func: str | None
    words: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    heredoc: tuple[str, int] | None = None
    after: str = ""
    funcdef: str | None = None
    subs: list[str] = field(default_factory=list)
    """The texts of the command substitutions in its words (`$(...)`, backticks)."""


class _Scanner:
    """Split shell text into simple commands: words, redirects, heredocs, substitutions."""

    def __init__(self, text: str, line: int = 1, depth: int = 0, counter: list[int] | None = None):
        self.s, self.i, self.line, self.depth = text, 0, line, depth
        self.counter = counter if counter is not None else [0]
        self.out: list[_Cmd] = []
        self.frames: list[str | None] = []
        self.pending_func: str | None = None
        self.heredocs: list[tuple[_Cmd, str, bool]] = []
        self._new()

    def _func(self) -> str | None:
        """The function whose body the scanner is in (None: top level)."""
        return next((f for f in reversed(self.frames) if f), None)

    def _new(self) -> None:
        self.counter[0] += 1
        self.cmd = _Cmd(line=self.line, seq=self.counter[0], depth=self.depth, func=self._func())
        self.w_raw, self.w_unq, self.in_word = "", "", False
        self.redir: str | None = None

    def _end_word(self) -> None:
        if not self.in_word:
            return
        raw, unq = self.w_raw, self.w_unq
        self.w_raw, self.w_unq, self.in_word = "", "", False
        if self.redir is not None:
            op, self.redir = self.redir, None
            if op in ("<<", "<<-"):
                self.heredocs.append((self.cmd, unq, op == "<<-"))
            else:
                self.cmd.redirects.append((op, unq))
            return
        if not self.cmd.words and not self.cmd.redirects:
            if raw in _KEYWORDS:
                if raw == "{":
                    self.frames.append(self.pending_func)
                    self.pending_func = None
                    self.cmd.func = self._func()
                return
            if raw in _CLOSERS:
                if raw == "}" and self.frames:
                    self.frames.pop()
                    self.cmd.func = self._func()
                return
        if not self.cmd.words:
            self.cmd.line = self._word_line
        self.cmd.words.append(unq)
        self.cmd.raw.append(raw)

    def _end_cmd(self, after: str) -> None:
        self._end_word()
        self.cmd.after = after
        if self.cmd.words or self.cmd.redirects:
            self.out.append(self.cmd)
        self._new()

    def _start_word(self) -> None:
        if not self.in_word:
            self.in_word = True
            self._word_line = self.line

    def _nested(self, inner: str) -> None:
        self.cmd.subs.append(inner)
        sub = _Scanner(inner, self.line, self.depth + 1, self.counter)
        self.out.extend(sub.scan())

    def _matching(self, start: int, open_: str, close: str) -> int:
        """Index of the `close` that ends a group opened just before `start`."""
        level, j, s = 1, start, self.s
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'" and open_ != "{":
                k = s.find("'", j + 1)
                j = len(s) if k < 0 else k + 1
                continue
            if c == '"' and open_ != "{":
                j = self._dquote_end(j + 1)
                continue
            if c == open_ and open_ != close:
                level += 1
            elif c == close:
                level -= 1
                if level == 0:
                    return j
            j += 1
        return len(s)

    def _dquote_end(self, j: int) -> int:
        s = self.s
        while j < len(s) and s[j] != '"':
            if s[j] == "\\":
                j += 1
            elif s.startswith("$(", j):
                j = self._matching(j + 2, "(", ")")
            j += 1
        return j + 1

    def _substitution(self, quoted: bool) -> None:
        """At `$(`, `$((`, `${` or a backtick: add it to the word, scan what it runs."""
        s, i = self.s, self.i
        if s.startswith("$((", i):
            end = self._matching(i + 3, "(", ")")
            end = end + 1 if s.startswith("))", end) else end
            text = s[i : end + 1]
        elif s.startswith("$(", i):
            end = self._matching(i + 2, "(", ")")
            text = s[i : end + 1]
            self._nested(s[i + 2 : end])
        elif s.startswith("${", i):
            end = self._matching(i + 2, "{", "}")
            text = s[i : end + 1]
        else:  # backtick
            end = s.find("`", i + 1)
            end = len(s) if end < 0 else end
            text = s[i : end + 1]
            self._nested(s[i + 1 : end])
        self.w_raw += text
        self.w_unq += text
        self.line += text.count("\n")
        self.i = end + 1

    def _read_heredocs(self) -> None:
        for cmd, delim, strip in self.heredocs:
            body_line = self.line
            lines: list[str] = []
            while self.i < len(self.s):
                nl = self.s.find("\n", self.i)
                nl = len(self.s) if nl < 0 else nl
                text = self.s[self.i : nl]
                self.i = nl + 1
                self.line += 1
                if (text.lstrip("\t") if strip else text) == delim:
                    break
                lines.append(text)
            cmd.heredoc = ("\n".join(lines) + "\n", body_line)
        self.heredocs = []

    def _escape(self) -> None:
        """At a backslash outside quotes: a line continuation, or the next character as is."""
        s = self.s
        if s[self.i + 1] == "\n":
            self.i += 2
            self.line += 1
            return
        self._start_word()
        self.w_raw += s[self.i : self.i + 2]
        self.w_unq += s[self.i + 1]
        self.i += 2

    def _single_quoted(self) -> None:
        """At `'`: the quoted text, as is, into the word."""
        s = self.s
        self._start_word()
        end = s.find("'", self.i + 1)
        end = len(s) if end < 0 else end
        self.w_raw += s[self.i : end + 1]
        self.w_unq += s[self.i + 1 : end]
        self.line += s.count("\n", self.i, end)
        self.i = end + 1

    def _double_quoted(self) -> None:
        """At `"`: the quoted text into the word, its escapes undone, substitutions scanned."""
        s = self.s
        self._start_word()
        self.w_raw += '"'
        self.i += 1
        while self.i < len(s) and s[self.i] != '"':
            ch = s[self.i]
            if ch == "\\" and self.i + 1 < len(s):
                nxt = s[self.i + 1]
                self.w_raw += ch + nxt
                self.w_unq += nxt if nxt in '$`"\\\n' else ch + nxt
                self.line += nxt == "\n"
                self.i += 2
            elif (ch == "$" and s.startswith(("$(", "${"), self.i)) or ch == "`":
                self._substitution(quoted=True)
            else:
                self.w_raw += ch
                self.w_unq += ch
                self.line += ch == "\n"
                self.i += 1
        self.w_raw += '"'
        self.i += 1

    def _funcdef(self) -> None:
        """At `()` after a word: `name()` defines a function; its body is the next command."""
        name = self.w_unq
        self.w_raw, self.w_unq, self.in_word = "", "", False
        self.pending_func = name
        self.cmd.funcdef = name
        self.cmd.words.append(name)
        self.cmd.raw.append(name)
        self.i += 2
        self._end_cmd(";")

    def _redirection(self) -> None:
        """At `<` or `>`: the operator; the next word is its target (not for `2>&1`)."""
        s = self.s
        if self.in_word and self.w_unq.isdigit():
            self.w_raw, self.w_unq, self.in_word = "", "", False
        else:
            self._end_word()
        for op in ("<<<", "<<-", "<<", "<>", "<&", ">>", ">|", ">&", "<", ">"):
            if s.startswith(op, self.i):
                break
        self.i += len(op)
        if op in (">&", "<&"):
            m = re.match(r"\s*(\d+|-)", s[self.i :])
            if m:  # 2>&1: a descriptor, not a file
                self.i += m.end()
                return
        self.redir = op

    def scan(self) -> list[_Cmd]:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                self._escape()
            elif c == "'":
                self._single_quoted()
            elif c == '"':
                self._double_quoted()
            elif (c == "$" and s.startswith(("$(", "${"), self.i)) or c == "`":
                self._start_word()
                self._substitution(quoted=False)
            elif c == "#" and not self.in_word:
                nl = s.find("\n", self.i)
                self.i = len(s) if nl < 0 else nl
            elif c in " \t\r":
                self._end_word()
                self.i += 1
            elif c == "\n":
                self._end_cmd("\n")
                self.i += 1
                self.line += 1
                self._read_heredocs()
            elif c == "(" and self.in_word and s.startswith("()", self.i):
                self._funcdef()
            elif c == "&" and s.startswith("&>", self.i):
                self._end_word()
                self.redir = "&>>" if s.startswith("&>>", self.i) else "&>"
                self.i += len(self.redir)
            elif c in ";&|()":
                op = s[self.i : self.i + 2]
                op = op if op in ("&&", "||", ";;", "|&") else c
                self._end_cmd(op)
                self.i += len(op)
            elif c in "<>":
                self._redirection()
            else:
                self._start_word()
                self.w_raw += c
                self.w_unq += c
                self.i += 1
        self._end_cmd("")
        self._read_heredocs()
        return sorted(self.out, key=lambda cmd: cmd.seq)


# ---- shell: what each command does --------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """A command with its wrappers and assignments taken off."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    timed: bool


def _unwrap(words: Sequence[str], runners: Mapping[str, bool] | None = None) -> _Run:
    """Strip `VAR=x`, `timeout N`, `env`, `sudo`, `uvx`, ... to the program that runs.

    `runners`: the file's functions that run their arguments (`run() { timeout 5 "$@"; }`),
    each with whether it adds a timeout.
    """
    env: dict[str, str] = {}
    argv = list(words)
    timed = False
    runners = runners or {}
    while argv:
        m = _ASSIGN.match(argv[0])
        if m:
            env[m.group(1)] = m.group(2)
            argv.pop(0)
            continue
        prog = posixpath.basename(argv[0])
        if prog in runners:
            timed = timed or runners[prog]
            argv = argv[1:]
        elif prog == "timeout":
            timed = True
            j = 1
            while j < len(argv) and argv[j].startswith("-"):
                j += 2 if argv[j] in ("-s", "--signal", "-k", "--kill-after") else 1
            argv = argv[j + 1 :]
        elif prog in ("env", "sudo", "nice", "nohup", "command", "exec", "builtin", "stdbuf",
                      "time", "setsid", "unbuffer", "xvfb-run", "runuser", "ionice", "chronic"):  # fmt: skip
            j = 1
            valued = ("-u", "-g", "-n", "-C", "--chdir", "-S")
            while j < len(argv) and (argv[j].startswith("-") or _ASSIGN.match(argv[j])):
                if _ASSIGN.match(argv[j]):
                    key, _, value = argv[j].partition("=")
                    env[key] = value
                if argv[j] == "--":
                    j += 1
                    break
                j += 2 if argv[j] in valued else 1
            argv = argv[j:]
        elif prog in ("uvx", "pipx", "poetry", "conda", "uv"):
            j = 1
            if prog in ("uv", "pipx", "poetry"):
                while j < len(argv) and argv[j] in ("run", "tool", "x"):
                    j += 1
            elif prog == "conda" and argv[1:2] == ["run"]:
                j = 2
            while j < len(argv) and argv[j].startswith("-"):
                takes = argv[j] in ("-p", "--python", "-w", "--with", "--from", "-n", "--name",
                                    "--with-requirements", "--with-editable", "--index-url",
                                    "--extra-index-url", "--project", "--directory", "--spec")  # fmt: skip
                j += 2 if takes else 1
            argv = argv[j:]
        else:
            break
    return _Run(tuple(argv), env, timed)


def _interpreter_target(argv: Sequence[str]) -> tuple[str, str] | None:
    """For `python x.py`, `bash x.sh`, `python -m mod`, `python -c code`: (kind, operand)."""
    j = 1
    while j < len(argv):
        w = argv[j]
        if w in ("-c", "-m", "-e", "--eval", "-jar"):
            return (w, argv[j + 1]) if j + 1 < len(argv) else None
        if w in ("-", "--"):
            return None
        if not w.startswith("-"):
            return ("script", w)
        j += 2 if w in ("-W", "-X", "-r", "--require", "-cp", "-classpath") else 1
    return None


@dataclass(frozen=True)
class _Step:
    """A shell command in its place: resolved words, directory, variables, unwrapped run."""

    cmd: _Cmd
    words: tuple[str, ...]
    run: _Run
    cwd: str | None
    vars: Mapping[str, str]


@dataclass(frozen=True)
class _Shell:
    """A shell file, read: its steps in order and the facts that hold for the whole file."""

    steps: tuple[_Step, ...]
    runners: frozenset[str]
    git_wrapped: frozenset[str]
    git_env_safe: bool
    safe_path: bool


def _expand(word: str, vars_: Mapping[str, str], cwd: str | None) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "PWD" and cwd:
            return cwd
        return vars_.get(name, m.group(0))

    return _VAR.sub(sub, word) if "$" in word else word


@functools.lru_cache(maxsize=512)
def _read_shell(text: str, ctx: LintContext, line: int = 1) -> _Shell:
    cmds = _Scanner(text, line).scan()
    runners: dict[str, bool] = {}
    for c in cmds:
        inner = _unwrap(c.words) if c.func else None
        if c.func and inner is not None and inner.argv[:1] in (("$@",), ("$*",), ("${@}",)):
            runners[c.func] = runners.get(c.func, False) or inner.timed
    git_wrapped: set[str] = set()
    for c in cmds:
        if (
            c.func
            and "git" in c.words
            and all(any(w.lower().endswith(k) for w in c.words) for k in _GIT_SAFE)
        ):
            git_wrapped.add(c.func)
    aliases = re.findall(r"^\s*alias\s+(\w+)=(.*)$", text, re.M)
    git_wrapped |= {n for n, v in aliases if all(k in v.lower() for k in _GIT_SAFE)}
    vars_: dict[str, str] = {}
    cwd = ctx.cwd
    steps: list[_Step] = []
    exported = ""
    for c in cmds:
        words = tuple(_expand(w, vars_, cwd) for w in c.words)
        c.redirects = [(op, _expand(t, vars_, cwd)) for op, t in c.redirects]
        run = _unwrap(words, runners)
        steps.append(_Step(c, words, run, cwd, dict(vars_)))
        if c.depth or c.func:
            continue
        head = words[0] if words else ""
        if head in ("export", "local", "declare", "readonly", "typeset") or not run.argv:
            for w in words[1:] if run.argv else words:
                m = _ASSIGN.match(w)
                if m:
                    name, value = m.group(1), m.group(2)
                    exported += f" {name}={value}"
                    if "$(" in value or "`" in value or "$" in value:
                        vars_.pop(name, None)
                    else:
                        vars_[name] = value
        elif head in ("cd", "pushd") and len(words) <= 3:
            target = next((w for w in words[1:] if not w.startswith("-")), None)
            cwd = ctx.resolve(target, cwd) if target else None
        elif head == "for" and len(words) >= 4 and words[2] == "in":
            vars_[words[1]] = words[3]
    # export GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/dev/null ...
    pairs = dict(re.findall(r"(\w+)=(\S*)", exported))
    given = {
        f"{pairs.get(f'GIT_CONFIG_KEY_{i}', '').lower()}={pairs.get(f'GIT_CONFIG_VALUE_{i}', '')}"
        for i in range(8)
    }
    git_env_safe = "GIT_CONFIG_COUNT" in pairs and set(_GIT_SAFE) <= given
    safe_path = ctx.safe_path or "PYTHONSAFEPATH=1" in exported
    return _Shell(tuple(steps), frozenset(runners), frozenset(git_wrapped), git_env_safe, safe_path)


def _reads(step: _Step, ctx: LintContext) -> list[str]:
    """Agent paths this command reads as data (file operands of readers, `<` redirects)."""
    found = [
        p for op, t in step.cmd.redirects if op in ("<", "<>") for p in [ctx.resolve(t, step.cwd)]
    ]
    argv = step.run.argv
    prog = posixpath.basename(argv[0]) if argv else ""
    if prog in _FILE_READERS and prog != "tr":
        operands = [w for w in argv[1:] if not w.startswith("-")]
        if prog in _PATTERN_FIRST and operands:
            operands = operands[1:]
        found += [ctx.resolve(w, step.cwd) for w in operands]
    return [p for p in found if p and ctx.is_agent(p)]


def _agent_program(argv: Sequence[str], cwd: str | None, ctx: LintContext) -> str | None:
    """The agent-writable program (or script) that `argv` runs, if any."""
    if not argv:
        return None
    prog = argv[0]
    base = posixpath.basename(prog)
    if "/" in prog:
        path = ctx.resolve(prog, cwd)
        if ctx.is_agent(path):
            return path
    if _INTERPRETERS.match(base):
        target = _interpreter_target(argv)
        if target and target[0] in ("script", "-jar"):
            path = ctx.resolve(target[1], cwd)
            if ctx.is_agent(path):
                return path
    if base in _BUILD_TOOLS:
        where = cwd
        if "-C" in argv[:-1]:
            where = ctx.resolve(argv[argv.index("-C") + 1], cwd)
        if ctx.is_agent(where) and (base != "go" or argv[1:2] in (["run"], ["test"], ["build"])):
            return f"{base} in {where}"
    return None


def _pytest_problem(run: _Run, cwd: str | None, ctx: LintContext, safe: bool) -> str | None:
    """Why this pytest run loads agent code into the test runner, if it does."""
    argv = run.argv
    if not argv:
        return None
    base = posixpath.basename(argv[0])
    rest: Sequence[str]
    if base in ("pytest", "py.test"):
        rest = argv[1:]
        via_m = False
    elif _INTERPRETERS.match(base) and base.startswith(("python", "pypy")):
        target = _interpreter_target(argv)
        if not target or target != ("-m", "pytest"):
            return None
        rest = argv[argv.index("pytest") + 1 :]
        via_m = True
    else:
        return None
    paths: list[str] = []
    j = 0
    while j < len(rest):
        w = rest[j]
        if w in ("--rootdir", "-c", "--confcutdir") and j + 1 < len(rest):
            where = ctx.resolve(rest[j + 1], cwd)
            if ctx.is_agent(where):
                return f"pytest takes its configuration from {where}, which the agent can write"
        if w.startswith("-"):
            j += 2 if w in _PYTEST_VALUE_OPTS else 1
            continue
        paths.append(w.split("::")[0])
        j += 1
    for p in paths:
        path = ctx.resolve(p, cwd)
        if ctx.is_agent(path):
            return (
                f"pytest collects {path}, which the agent can write (its conftest.py and ini load)"
            )
    if not paths and ctx.is_agent(cwd):
        return f"pytest collects {cwd}, the agent's directory (its conftest.py and ini load)"
    python_safe = safe or "PYTHONSAFEPATH" in run.env or "-P" in argv[:3]
    if via_m and not python_safe and ctx.is_agent(cwd):
        return f"python -m pytest puts {cwd} on sys.path (a pytest.py there replaces pytest)"
    return None


def _git_problem(run: _Run, cwd: str | None, ctx: LintContext, safe: bool = False) -> str | None:
    """Why this git command runs the agent's hooks or fsmonitor, if it does."""
    argv = run.argv
    if not argv or posixpath.basename(argv[0]) != "git" or safe:
        return None
    target = cwd
    j = 1
    while j < len(argv) and argv[j].startswith("-"):
        w = argv[j]
        if w == "-C" and j + 1 < len(argv):
            target = ctx.resolve(argv[j + 1], target)
        elif w.startswith("--git-dir=") or w.startswith("--work-tree="):
            target = ctx.resolve(w.split("=", 1)[1], cwd)
        j += 2 if w in ("-C", "-c", "--exec-path", "--namespace") else 1
    sub = argv[j] if j < len(argv) else ""
    if sub in _GIT_NO_REPO:
        return None
    if "GIT_DIR" in run.env:
        target = ctx.resolve(run.env["GIT_DIR"], cwd)
    if not ctx.is_agent(target):
        return None
    options = " ".join(argv[1:j]).lower() + " " + " ".join(f"{k}={v}" for k, v in run.env.items())
    missing = [
        k for k in ("core.hooksPath=/dev/null", "core.fsmonitor=false") if k.lower() not in options
    ]
    if not missing:
        return None
    return f"`git {sub}` runs on {target} (the agent's repository) without -c " + " -c ".join(
        missing
    )


# ---- Python: a light read -----------------------------------------------------------------------


def _call_name(node: ast.AST) -> str:
    """`subprocess.run` for subprocess.run(...), `open` for open(...), '' otherwise."""
    if isinstance(node, ast.Call):
        node = node.func
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


@dataclass
class _Py:
    """A Python file, read: its tree, the strings its names may hold, its lists."""

    tree: ast.Module
    ctx: LintContext
    strs: dict[str, set[str]] = field(default_factory=dict)
    lists: dict[str, list[ast.expr]] = field(default_factory=dict)
    defs: set[str] = field(default_factory=set)

    def values(self, node: ast.AST | None, depth: int = 0) -> set[str]:
        """The strings (paths) an expression may evaluate to, as far as the text says."""
        if node is None or depth > 8:
            return set()
        d = depth + 1
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.JoinedStr):
            out = ""
            for part in node.values:
                if isinstance(part, ast.Constant):
                    out += str(part.value)
                    continue
                vals = self.values(part.value, d) if isinstance(part, ast.FormattedValue) else set()
                # One known value is used; otherwise `${?}` marks the word unknown.
                out += next(iter(vals)) if len(vals) == 1 else "${?}"
            return {out}
        if isinstance(node, ast.Name):
            return set(self.strs.get(node.id, ()))
        if _call_name(node) == "sys.executable":
            return {"python3"}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.Add):
            sep = "/" if isinstance(node.op, ast.Div) else ""
            right = self.values(node.right, d) or {"_"}
            return {a + sep + b for a in self.values(node.left, d) for b in right}
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in ("os.getcwd", "Path.cwd", "pathlib.Path.cwd") and self.ctx.cwd:
                return {self.ctx.cwd}
            if name.split(".")[-1] in ("Path", "PurePath", "PosixPath", "abspath", "realpath",
                                       "expanduser", "resolve", "str", "fspath") and node.args:  # fmt: skip
                return self.values(node.args[0], d)
            if name.endswith("path.join") and node.args:
                parts = [self.values(a, d) or {"_"} for a in node.args]
                out = set(parts[0])
                for p in parts[1:]:
                    out = {posixpath.join(a, b) for a in out for b in p}
                return out
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute"):
                return self.values(node.func.value, d)
        return set()

    def agent(self, node: ast.AST | None) -> str | None:
        """An agent-writable path the expression may be, or None."""
        for v in sorted(self.values(node)):
            path = self.ctx.resolve(v)
            if self.ctx.is_agent(path):
                return path
        return None

    def argv(self, node: ast.AST | None) -> list[str] | None:
        """A subprocess argv as strings ('?' where unknown), or None if not a list."""
        if isinstance(node, ast.Name) and node.id in self.lists:
            node = ast.List(elts=self.lists[node.id])
        if not isinstance(node, ast.List | ast.Tuple):
            return None
        out: list[str] = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                inner = self.argv(e.value)
                out += inner if inner is not None else ["?"]
            else:
                vals = sorted(self.values(e))
                agent = next(
                    (v for v in vals if _pathish(v) and self.ctx.is_agent(self.ctx.resolve(v))),
                    None,
                )
                out.append(agent or (vals[0] if vals else "?"))
        return out


@functools.lru_cache(maxsize=512)
def _read_py(text: str, ctx: LintContext) -> _Py | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    py = _Py(tree, ctx)
    for _ in range(2):  # twice: names defined from other names
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                py.defs.add(node.name)
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            elif isinstance(node, ast.For | ast.comprehension):
                targets, value = [node.target], node.iter
                if isinstance(value, ast.List | ast.Tuple | ast.Set):
                    for elt in value.elts:
                        _bind(py, node.target, elt)
                continue
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                targets, value = [node.optional_vars], node.context_expr
            for t in targets:
                _bind(py, t, value)
    return py


def _bind(py: _Py, target: ast.expr, value: ast.expr | None) -> None:
    if isinstance(target, ast.Name):
        vals = py.values(value)
        if vals:
            py.strs.setdefault(target.id, set()).update(vals)
        if isinstance(value, ast.List | ast.Tuple):
            py.lists[target.id] = list(value.elts)
    elif isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
        for t, v in zip(target.elts, value.elts, strict=False):
            _bind(py, t, v)


_SUBPROCESS = ("subprocess.run", "subprocess.call", "subprocess.check_call",
               "subprocess.check_output", "subprocess.Popen", "run", "call", "check_call",
               "check_output", "Popen")  # fmt: skip
_OS_SHELL = ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput")


@dataclass(frozen=True)
class _PyCmd:
    """A command a Python file starts: an argv or a shell string, with its call."""

    call: ast.Call
    argv: list[str] | None
    shell: str | None
    cwd: str | None
    timed: bool


def _py_commands(py: _Py) -> Iterator[_PyCmd]:
    has_wait_timeout = any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("communicate", "wait")
        and (_kw(n, "timeout") is not None or n.args)
        for n in ast.walk(py.tree)
    )
    for node in ast.walk(py.tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        first = node.args[0] if node.args else _kw(node, "args")
        cwd_node = _kw(node, "cwd")
        cwd = py.ctx.cwd
        if cwd_node is not None:
            vals = sorted(py.values(cwd_node))
            cwd = py.ctx.resolve(vals[0]) if vals else None
        timed = _kw(node, "timeout") is not None
        if name in _SUBPROCESS:
            if name.endswith("Popen"):
                timed = has_wait_timeout
            shell_kw = _kw(node, "shell")
            is_shell = isinstance(shell_kw, ast.Constant) and bool(shell_kw.value)
            if is_shell or (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                vals = sorted(py.values(first))
                if vals and is_shell:
                    yield _PyCmd(node, None, vals[0], cwd, timed)
                elif vals:
                    yield _PyCmd(node, [vals[0]], None, cwd, timed)
                continue
            argv = py.argv(first)
            if argv:
                yield _PyCmd(node, argv, None, cwd, timed)
        elif name in _OS_SHELL:
            vals = sorted(py.values(first))
            if vals:
                yield _PyCmd(node, None, vals[0], cwd, False)


# ---- running a rule over a file -----------------------------------------------------------------

_Hits = list[tuple[int, str]]
_ShellCheck = Callable[[_Shell, LintContext], _Hits]
_PyCheck = Callable[[_Py, LintContext], _Hits]


@dataclass(frozen=True)
class _Source:
    """A piece of code inside a file: its text, language, first line, and context."""

    text: str
    python: bool
    line: int
    ctx: LintContext
    timed: bool = False


def _embedded(src: _Source) -> Iterator[_Source]:
    """Code inside `src`: Python heredocs and `-c` strings of shell, shell strings of Python."""
    if src.python:
        py = _read_py(src.text, src.ctx)
        if py is None:
            return
        for c in _py_commands(py):
            line = src.line + c.call.lineno - 1
            ctx = replace(src.ctx, cwd=c.cwd)
            if c.shell:
                yield _Source(c.shell, False, line, ctx, c.timed)
            elif c.argv and "-c" in c.argv[1:-1]:
                # [sys.executable, "-c", code]: an interpreter given no script runs as the
                # verifier, so what `code` imports is the checker's as much as this file's.
                base = posixpath.basename(c.argv[0])
                code = c.argv[c.argv.index("-c", 1) + 1]
                if base == "?" or base.startswith(("python", "pypy")):
                    yield _Source(code, True, line, ctx, c.timed)
                elif base in _SHELLS:
                    yield _Source(code, False, line, ctx, c.timed)
        return
    shell = _read_shell(src.text, src.ctx, src.line)
    for st in shell.steps:
        argv = st.run.argv
        if not argv:
            continue
        base = posixpath.basename(argv[0])
        ctx = replace(src.ctx, cwd=st.cwd, safe_path=shell.safe_path)
        timed = st.run.timed or src.timed
        is_py = base.startswith(("python", "pypy"))
        if st.cmd.heredoc and (is_py or base in _SHELLS):
            if _interpreter_target(argv) is None:  # python3 - <<'PY', bash -s <<EOF
                body, line = st.cmd.heredoc
                yield _Source(body, is_py, line, ctx, timed)
        elif (is_py or base in _SHELLS) and "-c" in argv[:-1]:
            code = argv[argv.index("-c") + 1]
            yield _Source(code, is_py, st.cmd.line, ctx, timed)


def _sources(text: str, python: bool, ctx: LintContext) -> list[_Source]:
    out, todo = [], [_Source(text, python, 1, ctx)]
    while todo and len(out) < 64:
        src = todo.pop(0)
        out.append(src)
        todo.extend(_embedded(src))
    return out


def _suppressed(lines: Sequence[str], line: int, rule: LintRule) -> bool:
    if not 1 <= line <= len(lines):
        return False
    m = re.search(r"skyrl-lint:\s*ignore(?:\[([^\]]*)\])?", lines[line - 1])
    return bool(m) and (m.group(1) is None or rule.value in m.group(1))


def _run_rule(
    rule: LintRule,
    text: str,
    ctx: LintContext,
    path: str,
    shell_check: _ShellCheck,
    py_check: _PyCheck,
) -> list[Finding]:
    lines = text.splitlines()
    found: dict[tuple[int, str], None] = {}
    for src in _sources(text, path.endswith(".py"), ctx):
        sctx = src.ctx
        if src.python:
            py = _read_py(src.text, sctx)
            hits = py_check(py, sctx) if py is not None else _py_fallback(rule, src.text)
            hits = [(src.line + n - 1, m) for n, m in hits]
        else:
            shell = _read_shell(src.text, sctx, src.line)
            if src.timed:
                shell = replace(
                    shell,
                    steps=tuple(replace(s, run=replace(s.run, timed=True)) for s in shell.steps),
                )
            hits = shell_check(shell, sctx)
        for n, m in hits:
            found.setdefault((n, m), None)
    return [Finding(rule, path, n, m) for n, m in sorted(found) if not _suppressed(lines, n, rule)]


_PY_REWARD_OPEN = re.compile(
    r"""open\(\s*['"][^'"]*reward\.(?:txt|json)['"]\s*(?:,\s*['"]([a-z+]*)['"])?"""
)


def _py_fallback(rule: LintRule, text: str) -> _Hits:
    """Python that does not parse (shell variables in a `-c` string): reward appends only."""
    hits: _Hits = []
    if rule is LintRule.STALE_REWARD_FILE:
        for n, line in enumerate(text.splitlines(), 1):
            m = _PY_REWARD_OPEN.search(line)
            if m and "a" in (m.group(1) or ""):
                hits.append((n, "appends to the reward file (a stale value stays in front)"))
    return hits


# ---- the rules: agent-path-expected -------------------------------------------------------------


_GRADER_NAME = re.compile(
    r"^(verify|verifier|grade|grader|autograder|judge|scorer|score)([_.-][\w.-]*)?\.(py|sh|js|rb|pl)$"
)


def _grader_problem(program: str | None) -> str | None:
    """A grader the agent can rewrite (`/app/verify.py`): its verdict is the agent's to set."""
    if program and _GRADER_NAME.match(posixpath.basename(program)):
        return f"the verdict comes from {program}, a grader the agent can rewrite"
    return None


def _shell_agent_path_expected(sh: _Shell, ctx: LintContext) -> _Hits:
    hits: _Hits = [
        (st.cmd.line, why)
        for st in sh.steps
        if (why := _grader_problem(_agent_program(st.run.argv, st.cwd, ctx)))
    ]

    def sub_reads(word: str, st: _Step) -> list[str]:
        out: list[str] = []
        for inner in re.findall(r"\$\((.*)\)|`([^`]*)`", word, re.DOTALL):
            code = inner[0] or inner[1]
            sub = _read_shell(code, replace(ctx, cwd=st.cwd), st.cmd.line)
            for s in sub.steps:
                out += _reads(s, ctx)
                prog = _agent_program(s.run.argv, s.cwd, ctx)
                out += [prog] if prog else []
        return out

    for st in sh.steps:
        words, argv = st.words, st.run.argv
        if not argv:  # want=$(cat /app/x)
            for w in words:
                m = _ASSIGN.match(w)
                if m and _EXPECTED_NAME.search(m.group(1).lower()):
                    for p in sub_reads(m.group(2), st):
                        hits.append(
                            (
                                st.cmd.line,
                                f"`{m.group(1)}` is read from {p}, which the agent can write",
                            )
                        )
            continue
        prog = posixpath.basename(argv[0])
        if prog == "read" and any(_EXPECTED_NAME.search(w.lower()) for w in argv[1:]):
            for p in _reads(st, ctx):
                hits.append(
                    (st.cmd.line, f"the expected value is read from {p}, which the agent can write")
                )
        if prog in ("test", "[", "[["):
            ops = [i for i, w in enumerate(argv) if w in ("=", "==", "!=", "-eq", "-ne")]
            for i in ops:
                if 0 < i < len(argv) - 1:
                    left, right = sub_reads(argv[i - 1], st), sub_reads(argv[i + 1], st)
                    if left and right:
                        hits.append(
                            (
                                st.cmd.line,
                                f"both sides of the comparison come from files the agent can write ({', '.join(sorted(set(left + right)))}): the expected side can be edited",
                            )
                        )
        if prog in ("diff", "cmp") or (
            prog == "git" and argv[1:2] == ["diff"] and "--no-index" in argv
        ):
            files = [ctx.resolve(w, st.cwd) for w in argv[1:] if not w.startswith("-")]
            agent = [p for p in files if ctx.is_agent(p)]
            if len(files) >= 2 and len(agent) == len(files):
                hits.append(
                    (
                        st.cmd.line,
                        f"`{prog}` compares files the agent can both write ({', '.join(agent)})",
                    )
                )
    return hits


_READ_FUNCS = ("read_csv", "read_json", "read_excel", "read_table", "read_parquet", "loadtxt",
               "genfromtxt", "fromfile", "imread", "read_file", "load", "safe_load", "parse")  # fmt: skip


_Taint = Callable[[str, int], "str | None"]


def _walk_values(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` without subscript keys: `expected[key]` is expected data, whatever `key`."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, ast.Subscript):
            todo.append(n.value)
        else:
            todo.extend(ast.iter_child_nodes(n))


def _pairs(target: ast.expr, value: ast.AST) -> list[tuple[ast.expr, ast.AST]]:
    """Split `a, b = x, y` and `for a, b in zip(x, y)` into (a, x), (b, y)."""
    if isinstance(target, ast.Tuple | ast.List):
        elts: list[ast.AST] | None = None
        if isinstance(value, ast.Tuple | ast.List):
            elts = list(value.elts)
        elif isinstance(value, ast.Call) and _call_name(value) == "zip" and not value.keywords:
            elts = list(value.args)
        if elts is not None and len(elts) == len(target.elts):
            return [p for t, v in zip(target.elts, elts, strict=True) for p in _pairs(t, v)]
    return [(target, value)]


def _no_taint(name: str, line: int) -> str | None:
    return None


def _py_reads_agent(py: _Py, node: ast.AST, taint: _Taint = _no_taint) -> str | None:
    """The agent path an expression reads data from (directly or through a tainted name)."""
    for n in _walk_values(node):
        if isinstance(n, ast.Name):
            path = taint(n.id, n.lineno)
            if path:
                return path
        if not isinstance(n, ast.Call):
            continue
        name = _call_name(n)
        last = name.split(".")[-1]
        if last == "open" and n.args and name in ("open", "io.open", "codecs.open"):
            mode = n.args[1] if len(n.args) > 1 else _kw(n, "mode")
            mode_s = mode.value if isinstance(mode, ast.Constant) else "r"
            if isinstance(mode_s, str) and not set(mode_s) & set("wax"):
                path = py.agent(n.args[0])
                if path:
                    return path
        elif isinstance(n.func, ast.Attribute) and last in ("read_text", "read_bytes", "open"):
            path = py.agent(n.func.value)
            if path:
                return path
        elif last in _READ_FUNCS and n.args:
            path = py.agent(n.args[0])
            if path:
                return path
        elif name in _SUBPROCESS and n.args:
            argv = py.argv(n.args[0]) or []
            path = next(
                (a for a in argv if _pathish(a) and py.ctx.is_agent(py.ctx.resolve(a))), None
            )
            if path:
                return path
    return None


def _py_agent_path_expected(py: _Py, ctx: LintContext) -> _Hits:
    assigns: list[tuple[ast.expr, ast.AST, int]] = []
    for node in ast.walk(py.tree):
        found: list[tuple[ast.expr, ast.AST]] = []
        if isinstance(node, ast.Assign):
            found = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
            found = [(node.target, node.value)]
        elif isinstance(node, ast.For | ast.comprehension):
            found = [(node.target, node.iter)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            found = [(node.optional_vars, node.context_expr)]
        for target, value in found:
            line = getattr(node, "lineno", None) or getattr(value, "lineno", 1)
            assigns += [(t, v, line) for t, v in _pairs(target, value)]
    # Which assignments of each name read agent data: a name is tainted where its latest
    # assignment above the use does (`f` of one `with open(...)` is not the next one's).
    history: dict[str, dict[int, str | None]] = {}

    def taint(name: str, line: int, skip: frozenset[str] = frozenset()) -> str | None:
        seen = history.get(name)
        if not seen or name in skip:
            return None
        before = [n for n in seen if n <= line]
        return seen[max(before)] if before else next((p for p in seen.values() if p), None)

    for _ in range(3):
        for target, value, line in assigns:
            path = _py_reads_agent(py, value, taint)
            for t in ast.walk(target):
                if isinstance(t, ast.Name):
                    entry = history.setdefault(t.id, {})
                    entry[line] = entry.get(line) or path
    hits: _Hits = []
    for target, value, line in assigns:
        names = [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
        expected = frozenset(n for n in names if _EXPECTED_NAME.search(n.lower()))
        if expected:
            path = _py_reads_agent(py, value, functools.partial(taint, skip=expected))
            if path:
                first = sorted(expected)[0]
                hits.append((line, f"`{first}` is read from {path}, which the agent can write"))
    for c in _py_commands(py):
        why = _grader_problem(_agent_program(_unwrap(c.argv).argv, c.cwd, ctx)) if c.argv else None
        if why:
            hits.append((c.call.lineno, why))
    for node in ast.walk(py.tree):
        if isinstance(node, ast.Call) and _call_name(node) in ("filecmp.cmp", "cmp"):
            paths = [py.agent(a) for a in node.args[:2]]
            if len(paths) == 2 and all(paths):
                hits.append(
                    (
                        node.lineno,
                        f"compares files the agent can both write ({', '.join(map(str, paths))})",
                    )
                )
    return hits


def agent_path_expected(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """agent-path-expected: an expected value read from (or computed by) a path the agent can
    write: `want=$(cat /app/x)`, `test "$(cat out)" = "$(grep -c E app.log)"`,
    `expected = open("/app/input.txt").read()`, `diff /app/a /app/b`."""
    return _run_rule(
        LintRule.AGENT_PATH_EXPECTED, text, ctx, path,
        _shell_agent_path_expected, _py_agent_path_expected,
    )  # fmt: skip


# ---- the rules: reward writes (reward-before-checks, stale-reward-file) -------------------------


@dataclass(frozen=True)
class _RewardOp:
    """A write, append or read of a reward file."""

    line: int
    kind: str  # "write", "append" or "read"
    value: _Value = _Value.UNKNOWN
    seq: int = 0
    terminal: bool = False
    """The write is followed by `exit` on its own line (an early failure exit)."""


def _shell_reward_ops(sh: _Shell, ctx: LintContext) -> list[_RewardOp]:
    ops: list[_RewardOp] = []
    lines = {st.cmd.line for st in sh.steps if st.run.argv and st.run.argv[0] == "exit"}
    for st in sh.steps:
        argv = st.run.argv
        prog = posixpath.basename(argv[0]) if argv else ""
        terminal = st.cmd.line in lines and st.cmd.after in (";", "&&", "\n", "")
        for op, target in st.cmd.redirects:
            if not _is_reward(target):
                continue
            if op in (">", ">|", "&>"):
                value = _Value.UNKNOWN
                if prog in ("echo", "printf"):
                    value = _classify(" ".join(w for w in argv[1:] if not w.startswith("-")))
                elif st.cmd.heredoc:
                    value = _classify(st.cmd.heredoc[0])
                ops.append(_RewardOp(st.cmd.line, "write", value, st.cmd.seq, terminal))
            elif op in (">>", "&>>"):
                ops.append(_RewardOp(st.cmd.line, "append", seq=st.cmd.seq))
            elif op in ("<", "<>"):
                ops.append(_RewardOp(st.cmd.line, "read", seq=st.cmd.seq))
        operands = [w for w in argv[1:] if _is_reward(w)]
        if not operands or prog in ("echo", "printf", "rm", "mkdir", "touch", "unlink"):
            continue
        if prog == "tee":
            kind = "append" if "-a" in argv or "--append" in argv else "write"
            ops.append(_RewardOp(st.cmd.line, kind, seq=st.cmd.seq))
        elif prog in ("cp", "mv", "install", "ln") and _is_reward(argv[-1]):
            ops.append(_RewardOp(st.cmd.line, "write", seq=st.cmd.seq))
        elif not prog.startswith("python"):
            ops.append(_RewardOp(st.cmd.line, "read", seq=st.cmd.seq))
    return ops


def _embedded_writes(sh: _Shell) -> list[tuple[int, int]]:
    """(seq, line) of commands whose embedded Python or shell writes a reward file."""
    out = []
    for st in sh.steps:
        text = (st.cmd.heredoc[0] if st.cmd.heredoc else "") + " ".join(st.run.argv)
        if (
            st.run.argv
            and posixpath.basename(st.run.argv[0]).startswith("python")
            and re.search(r"reward\.(txt|json)", text)
        ):
            out.append((st.cmd.seq, st.cmd.line))
    return out


def _shell_reward_before_checks(sh: _Shell, ctx: LintContext) -> _Hits:
    writes = [op for op in _shell_reward_ops(sh, ctx) if op.kind in ("write", "append")]
    writes += [_RewardOp(line, "write", seq=seq) for seq, line in _embedded_writes(sh)]
    reward_seqs = {op.seq for op in writes}
    hits: _Hits = []
    in_function = {st.cmd.seq for st in sh.steps if st.cmd.func}
    for w in writes:
        # A write in a function body runs when the function is called, which the text
        # does not order: only top-level writes are judged.
        if w.value is _Value.ZERO or w.terminal or w.seq in in_function:
            continue
        for st in sh.steps:
            if st.cmd.seq <= w.seq or st.cmd.seq in reward_seqs or st.cmd.func or st.cmd.funcdef:
                continue
            argv = st.run.argv
            prog = posixpath.basename(argv[0]) if argv else ""
            if not argv or prog in _BENIGN_AFTER_VERDICT or st.cmd.line == w.line:
                continue
            if prog in ("test", "[", "[[") and not st.cmd.subs:
                continue  # a bare `[ ... ]` decides nothing after the verdict by itself
            hits.append(
                (
                    w.line,
                    f"the reward is written here, but `{' '.join(argv)[:60]}` (line {st.cmd.line}) still runs after it",
                )
            )
            break
    return hits


def _py_reward_ops(py: _Py) -> list[tuple[ast.AST, _RewardOp]]:
    """Reward-file writes, appends and reads in a Python file, with the node of each."""
    out: list[tuple[ast.AST, _RewardOp]] = []
    aliases: dict[str, ast.AST] = {}
    for node in ast.walk(py.tree):
        if isinstance(node, ast.With):
            for item in node.items:
                c = item.context_expr
                if (
                    isinstance(c, ast.Call)
                    and _call_name(c) == "open"
                    and isinstance(item.optional_vars, ast.Name)
                    and c.args
                    and any(_is_reward(v) for v in py.values(c.args[0]))
                ):
                    aliases[item.optional_vars.id] = c
    for node in ast.walk(py.tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        last = name.split(".")[-1]
        if (
            name in ("open", "io.open")
            and node.args
            and any(_is_reward(v) for v in py.values(node.args[0]))
        ):
            mode = node.args[1] if len(node.args) > 1 else _kw(node, "mode")
            m = (
                mode.value
                if isinstance(mode, ast.Constant) and isinstance(mode.value, str)
                else "r"
            )
            kind = "append" if "a" in m else "write" if set(m) & set("wx+") else "read"
            out.append((node, _RewardOp(node.lineno, kind, _py_written_value(py, node, aliases))))
        elif isinstance(node.func, ast.Attribute) and any(
            _is_reward(v) for v in py.values(node.func.value)
        ):
            if last in ("write_text", "write_bytes"):
                value = (
                    _classify(str(node.args[0].value))
                    if node.args and isinstance(node.args[0], ast.Constant)
                    else _Value.UNKNOWN
                )
                out.append((node, _RewardOp(node.lineno, "write", value)))
            elif last in ("read_text", "read_bytes", "exists", "is_file", "stat"):
                out.append((node, _RewardOp(node.lineno, "read")))
        elif (
            name in ("os.path.exists", "os.path.isfile", "os.path.getsize")
            and node.args
            and any(_is_reward(v) for v in py.values(node.args[0]))
        ):
            out.append((node, _RewardOp(node.lineno, "read")))
    return out


def _py_written_value(py: _Py, open_call: ast.Call, aliases: Mapping[str, ast.AST]) -> _Value:
    """What a write through `open(reward, "w")` writes, when the text says."""
    for node in ast.walk(py.tree):
        if not isinstance(node, ast.Call):
            continue
        args: list[ast.expr] = []
        last = _call_name(node).split(".")[-1]
        if last == "dump" and len(node.args) >= 2:
            target = node.args[1]
            if target is open_call or (
                isinstance(target, ast.Name) and aliases.get(target.id) is open_call
            ):
                args = [node.args[0]]
        elif last == "write" and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if owner is open_call or (
                isinstance(owner, ast.Name) and aliases.get(owner.id) is open_call
            ):
                args = node.args[:1]
        if args:
            arg = args[0]
            if isinstance(arg, ast.Constant):
                return _classify(str(arg.value))
            if isinstance(arg, ast.Dict):
                for k, v in zip(arg.keys, arg.values, strict=False):
                    if (
                        isinstance(k, ast.Constant)
                        and k.value == "reward"
                        and isinstance(v, ast.Constant)
                    ):
                        return _classify(str(v.value))
            return _Value.UNKNOWN
    return _Value.UNKNOWN


def _scopes(tree: ast.Module) -> Iterator[list[ast.stmt]]:
    """Statement lists that run in order: the module and each function body."""
    yield tree.body
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.body


def _flat(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a scope in source order, compound ones opened, nested defs skipped."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        yield stmt
        for name in ("body", "orelse", "finalbody"):
            yield from _flat(getattr(stmt, name, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _flat(handler.body)


def _is_check(py: _Py, stmt: ast.stmt) -> str | None:
    """Why a statement may still decide the outcome (an assert, a program, a local function)."""
    if isinstance(stmt, ast.Assert):
        return "assert"
    nodes = (
        [stmt] if isinstance(stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign) else []
    )
    if isinstance(stmt, ast.If | ast.While | ast.For):
        nodes = [getattr(stmt, "test", None) or stmt.iter]  # type: ignore[attr-defined]
    for top in nodes:
        for n in ast.walk(top):
            if isinstance(n, ast.Call):
                name = _call_name(n)
                if (
                    name in _SUBPROCESS
                    or name in _OS_SHELL
                    or name in py.defs
                    or name.startswith(("os.exec", "pytest.main", "unittest.main"))
                ):
                    return f"{name}()"
    return None


def _py_reward_before_checks(py: _Py, ctx: LintContext) -> _Hits:
    ops = [
        op
        for _, op in _py_reward_ops(py)
        if op.kind in ("write", "append") and op.value is not _Value.ZERO
    ]

    def span(s: ast.stmt) -> tuple[int, int]:
        return s.lineno, s.end_lineno or s.lineno

    hits: _Hits = []
    for body in _scopes(py.tree):
        stmts = list(_flat(body))
        for op in ops:
            # The innermost statement holding the write (_flat yields outer ones first).
            around = [s for s in stmts if span(s)[0] <= op.line <= span(s)[1]]
            if not around:
                continue
            end = span(around[-1])[1]
            for later in stmts:
                if later.lineno <= end or any(
                    span(later)[0] <= o.line <= span(later)[1] for o in ops
                ):
                    continue
                why = _is_check(py, later)
                if why:
                    msg = f"the reward is written here, but {why} (line {later.lineno}) still runs"
                    hits.append((op.line, msg))
                    break
    return hits


def reward_before_checks(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """reward-before-checks: a reward (other than 0) is written while checks or commands that
    could still change the outcome follow it (`echo 1 > /logs/verifier/reward.txt` then
    `pytest ...`): a crash or hang after it leaves a success behind."""
    return _run_rule(
        LintRule.REWARD_BEFORE_CHECKS, text, ctx, path,
        _shell_reward_before_checks, _py_reward_before_checks,
    )  # fmt: skip


def _stale_hits(ops: Sequence[_RewardOp]) -> _Hits:
    hits: _Hits = []
    first_write = min((o.line for o in ops if o.kind == "write"), default=None)
    for o in ops:
        if o.kind == "append":
            hits.append(
                (o.line, "appends to the reward file: a value left there earlier still counts")
            )
        elif o.kind == "read" and (first_write is None or o.line < first_write):
            hits.append((o.line, "reads the reward file before writing it: it may be a stale one"))
    writes = [o for o in ops if o.kind == "write"]
    if writes and all(o.value is _Value.SUCCESS for o in writes):
        hits.append(
            (
                writes[0].line,
                "only ever writes a success: on failure nothing is written, so an existing reward file could count",
            )
        )
    return hits


def _shell_stale_reward_file(sh: _Shell, ctx: LintContext) -> _Hits:
    ops = _shell_reward_ops(sh, ctx)
    # A Python step that writes a reward may write the 0: do not call the file success-only.
    ops += [_RewardOp(line, "write", seq=seq) for seq, line in _embedded_writes(sh)]
    return _stale_hits(ops)


def _py_stale_reward_file(py: _Py, ctx: LintContext) -> _Hits:
    return _stale_hits([op for _, op in _py_reward_ops(py)])


def stale_reward_file(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """stale-reward-file: the verifier appends to or reads an existing reward file, or writes a
    reward only on success (never a 0), so a file that was there before could count."""
    return _run_rule(
        LintRule.STALE_REWARD_FILE, text, ctx, path,
        _shell_stale_reward_file, _py_stale_reward_file,
    )  # fmt: skip


# ---- the rules: imports-agent-code --------------------------------------------------------------


def _path_var_problem(name: str, value: str, cwd: str | None, ctx: LintContext) -> str | None:
    for part in value.split(":"):
        path = ctx.resolve(part or ".", cwd) if name == "PYTHONPATH" else ctx.resolve(part, cwd)
        if ctx.is_agent(path):
            return f"{name} includes {path}, which the agent can write"
    return None


def _shell_imports_agent_code(sh: _Shell, ctx: LintContext) -> _Hits:
    hits: _Hits = []
    for st in sh.steps:
        argv, words = st.run.argv, st.words
        prog = posixpath.basename(argv[0]) if argv else ""
        if prog in ("source", ".") and len(argv) > 1:
            path = ctx.resolve(argv[1], st.cwd)
            if ctx.is_agent(path):
                hits.append((st.cmd.line, f"sources {path} into the verifier's shell"))
        if prog == "eval" and any(p for p in _shell_sub_agent_reads(st, ctx)):
            hits.append((st.cmd.line, "evaluates text read from a file the agent can write"))
        # Assignments: exported (or standalone) ones hold for the whole checker; a prefix
        # only for its command, which matters unless that command is the agent's own program.
        standalone = not argv or words[0] in ("export", "declare", "local")
        runs_agent = bool(argv) and _agent_program(argv, st.cwd, ctx) is not None
        pairs = [_ASSIGN.match(w) for w in words]
        for m in pairs:
            if m and m.group(1) in _PATH_VARS and (standalone or not runs_agent):
                why = _path_var_problem(m.group(1), m.group(2), st.cwd, ctx)
                if why:
                    hits.append((st.cmd.line, why))
        why = _pytest_problem(st.run, st.cwd, ctx, sh.safe_path)
        if why:
            hits.append((st.cmd.line, why))
    return hits


def _shell_sub_agent_reads(st: _Step, ctx: LintContext) -> list[str]:
    out: list[str] = []
    for code in st.cmd.subs:
        for s in _read_shell(code, replace(ctx, cwd=st.cwd)).steps:
            out += _reads(s, ctx)
    return out


def _py_imports_agent_code(py: _Py, ctx: LintContext) -> _Hits:
    hits: _Hits = []
    for node in ast.walk(py.tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            last = name.split(".")[-1]
            path = None
            if name.endswith("path.insert") and len(node.args) >= 2 and "sys" in name:
                path = py.agent(node.args[1])
            elif name.endswith("path.append") and "sys" in name and node.args:
                path = py.agent(node.args[0])
            elif (
                last in ("spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader")
                and len(node.args) >= 2
            ):
                path = py.agent(node.args[1])
            elif name in ("runpy.run_path", "site.addsitedir", "imp.load_source") and node.args:
                path = py.agent(node.args[-1] if last == "load_source" else node.args[0])
            elif name in ("exec", "eval") and node.args:
                path = _py_reads_agent(py, node.args[0])
            elif name in ("os.chdir",) and node.args and py.agent(node.args[0]):
                later = [
                    n
                    for n in ast.walk(py.tree)
                    if isinstance(n, ast.Call)
                    and _call_name(n) in ("importlib.import_module", "__import__")
                    and n.lineno > node.lineno
                ]
                path = py.agent(node.args[0]) if later else None
            if path:
                hits.append(
                    (
                        node.lineno,
                        f"{name}() brings code from {path} into a process of the verifier",
                    )
                )
            if name in _SUBPROCESS or name in _OS_SHELL:
                env = _kw(node, "env")
                if isinstance(env, ast.Dict):
                    for k, v in zip(env.keys, env.values, strict=False):
                        if isinstance(k, ast.Constant) and k.value in _PATH_VARS:
                            p = py.agent(v)
                            argv = py.argv(node.args[0]) if node.args else None
                            if p and not (argv and _agent_program(argv, ctx.cwd, ctx)):
                                hits.append(
                                    (
                                        node.lineno,
                                        f"{k.value} includes {p}, which the agent can write",
                                    )
                                )
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and _call_name(t.value) == "os.environ":
                    key = t.slice
                    if isinstance(key, ast.Constant) and key.value in _PATH_VARS:
                        p = py.agent(node.value)
                        if p:
                            hits.append(
                                (
                                    node.lineno,
                                    f"os.environ[{key.value!r}] includes {p}, which the agent can write",
                                )
                            )
    for c in _py_commands(py):
        if c.argv:
            why = _pytest_problem(_unwrap(c.argv), c.cwd, ctx, ctx.safe_path)
            if why:
                hits.append((c.call.lineno, why))
    return hits


def imports_agent_code(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """imports-agent-code: agent files run inside the checker itself, where no uid or sandbox
    separates them from it: `source /app/env.sh`, `sys.path.insert(0, "/app")`, importlib of a
    workspace file, `PYTHONPATH=/app`, pytest collecting the workspace (its conftest.py)."""
    return _run_rule(
        LintRule.IMPORTS_AGENT_CODE, text, ctx, path,
        _shell_imports_agent_code, _py_imports_agent_code,
    )  # fmt: skip


# ---- the rules: git-hooks-on --------------------------------------------------------------------


def _shell_git_hooks_on(sh: _Shell, ctx: LintContext) -> _Hits:
    hits: _Hits = []
    for st in sh.steps:
        if st.cmd.func in sh.git_wrapped:
            continue
        why = _git_problem(st.run, st.cwd, ctx, sh.git_env_safe or ctx.git_hardened)
        if why:
            hits.append((st.cmd.line, why))
    return hits


def _py_git_hooks_on(py: _Py, ctx: LintContext) -> _Hits:
    hits: _Hits = []
    for c in _py_commands(py):
        if c.argv:
            why = _git_problem(_unwrap(c.argv), c.cwd, ctx, ctx.git_hardened)
            if why:
                hits.append((c.call.lineno, why))
    for node in ast.walk(py.tree):
        if isinstance(node, ast.Call) and _call_name(node) in ("git.Repo", "Repo") and node.args:
            path = py.agent(node.args[0])
            if path:
                hits.append(
                    (
                        node.lineno,
                        f"GitPython runs git on {path} (the agent's repository) with its hooks and config",
                    )
                )
    return hits


def git_hooks_on(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """git-hooks-on: git runs on the agent's repository without `-c core.hooksPath=/dev/null`
    and `-c core.fsmonitor=false`, so a hook or fsmonitor command in its .git/config runs as
    the verifier (a wrapper function or alias that adds both counts)."""
    return _run_rule(LintRule.GIT_HOOKS_ON, text, ctx, path, _shell_git_hooks_on, _py_git_hooks_on)


# ---- the rules: no-timeout ----------------------------------------------------------------------


def _shell_no_timeout(sh: _Shell, ctx: LintContext) -> _Hits:
    if ctx.deadline_fails:
        return []
    hits: _Hits = []
    for st in sh.steps:
        if st.run.timed or st.cmd.after == "&":
            continue
        prog = _agent_program(st.run.argv, st.cwd, ctx)
        if prog:
            hits.append((st.cmd.line, f"runs {prog} without a timeout"))
    return hits


def _py_no_timeout(py: _Py, ctx: LintContext) -> _Hits:
    if ctx.deadline_fails:
        return []
    hits: _Hits = []
    for c in _py_commands(py):
        if c.argv and not c.timed:
            run = _unwrap(c.argv)
            prog = None if run.timed else _agent_program(run.argv, c.cwd, ctx)
            if prog:
                hits.append((c.call.lineno, f"runs {prog} without a timeout"))
    return hits


def no_timeout(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """no-timeout: an agent program (a script or binary the agent can write, an interpreter
    given one, a build in the workspace) runs without `timeout N` / `timeout=`: a program that
    hangs takes the verdict with it."""
    return _run_rule(LintRule.NO_TIMEOUT, text, ctx, path, _shell_no_timeout, _py_no_timeout)


# ---- files and tasks ----------------------------------------------------------------------------

RULES: Mapping[LintRule, Callable[[str, LintContext, str], list[Finding]]] = {
    LintRule.AGENT_PATH_EXPECTED: agent_path_expected,
    LintRule.REWARD_BEFORE_CHECKS: reward_before_checks,
    LintRule.STALE_REWARD_FILE: stale_reward_file,
    LintRule.IMPORTS_AGENT_CODE: imports_agent_code,
    LintRule.GIT_HOOKS_ON: git_hooks_on,
    LintRule.NO_TIMEOUT: no_timeout,
}
"""Every rule, by id."""


def lint_text(text: str, ctx: LintContext, path: str = "tests/test.sh") -> list[Finding]:
    """Every rule over one file's text (shell unless `path` ends in `.py`), sorted by line."""
    found = [f for rule in RULES.values() for f in rule(text, ctx, path)]
    return sorted(found, key=lambda f: (f.path, f.line, f.rule.value))


def verifier_files(task_dir: Path) -> list[Path]:
    """The files a task's verifier runs: tests/test.sh and every other .sh and .py in tests/."""
    tests = task_dir / "tests"
    if not tests.is_dir():
        return []
    files = [
        p
        for p in sorted(tests.rglob("*"))
        if p.suffix in (".sh", ".py") and p.is_file() and not p.is_symlink()
    ]
    return [p for p in files if p.stat().st_size <= MAX_FILE_BYTES]


def _toml_workdir(task_dir: Path) -> str | None:
    try:
        data = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    env = data.get("environment")
    workdir = env.get("workdir") if isinstance(env, dict) else None
    return workdir if isinstance(workdir, str) and workdir.startswith("/") else None


def lint_task(task_dir: str | Path, *, relative_to: Path | None = None) -> list[Finding]:
    """Every rule over every verifier file of one task folder (it need not load cleanly).

    Finding paths are relative to `relative_to` (default: the task folder's parent, so they
    start with the task's name).
    """
    task_dir = Path(task_dir).resolve()
    ctx = harbor_context(_toml_workdir(task_dir), task_dir / "environment" / "Dockerfile")
    base = relative_to.resolve() if relative_to is not None else task_dir.parent
    found: list[Finding] = []
    for f in verifier_files(task_dir):
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        try:
            rel = f.relative_to(base).as_posix()
        except ValueError:
            rel = f.as_posix()
        found += lint_text(text, ctx, rel)
    return found


_LOGGED: set[tuple[str, tuple[tuple[str, int, int], ...]]] = set()


def log_findings(task: HarborTask) -> list[Finding]:
    """Lint a loaded task and log one warning per finding (once per folder and file version).

    Called by `load_task`; never raises (a lint problem must not stop a task from loading).
    """
    try:
        files = verifier_files(task.path)
        key = (
            str(task.path),
            tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files),
        )
        if key in _LOGGED:
            return []
        _LOGGED.add(key)
        ctx = harbor_context(task.environment.workdir, task.dockerfile)
        found: list[Finding] = []
        for p in files:
            rel = p.relative_to(task.path.parent).as_posix()
            found += lint_text(p.read_text(encoding="utf-8", errors="replace"), ctx, rel)
    except Exception as e:  # the lint is advice: a bug in it must not stop a task loading
        logger.debug("harbor lint of %s failed: %s", task.path, e)
        return []
    for f in found:
        logger.warning("harbor task lint: %s (`skyrl harbor lint` explains)", f.format())
    return found
