"""Parameterised families of shell tasks: one `TaskSpec` per (family, seed).

Every family draws its parameters (file names, words, numbers, file contents) from
`random.Random(f"{family}:{seed}")`, so a seed gives the same task on every machine and
Python version, and different seeds give different answers (names and contents change
together, so one seed's solution does not solve another's task).

A spec holds what a Harbor task folder needs: the instruction, the starting files of `/app`,
their modes, the reference solution (`solution/solve.sh`) and the verifier's checks (a bash
fragment that calls `fail` for each unmet condition; `verifier.py` wraps it). Checks look at
the final state of `/app` (and, for script families, at what the agent's program prints
when the verifier runs it), never at the commands that produced it.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import io
import random
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field


class Category(enum.StrEnum):
    """The kind of shell work a family exercises."""

    FILES = "files"
    """Create, copy and move files and directories."""
    TEXT = "text"
    """Text processing: grep, sort, uniq, wc, sed, awk, cut."""
    ARCHIVES = "archives"
    """tar and gzip."""
    PERMISSIONS = "permissions"
    """chmod and file modes."""
    SCRIPTS = "scripts"
    """Write a small script the verifier runs."""
    FIX = "fix"
    """Repair a broken script the verifier runs."""
    COMBINED = "combined"
    """Two steps chained (search then transform)."""


@dataclass(frozen=True)
class TaskSpec:
    """One generated task, before it is written as a Harbor folder."""

    family: str
    """The family's name (`echo-word`, `grep-count`, ...)."""
    seed: int
    """The seed that drew the parameters."""
    difficulty: int
    """1 (one obvious command) to 3 (several steps or a program)."""
    category: Category
    """The kind of shell work."""
    instruction: str
    """What the agent is told (instruction.md)."""
    checks: str
    """Bash fragment run by tests/test.sh in /app: calls `fail REASON` for each unmet
    condition; may use the helpers of `verifier.HELPERS`."""
    solution: str
    """Body of solution/solve.sh (runs in /app)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Starting files of /app: relative path -> content."""
    modes: dict[str, int] = field(default_factory=dict)
    """Starting modes of some of `files` (default 0644)."""
    runs_agent_code: bool = False
    """True when the verifier runs a program the agent wrote or fixed (`program`)."""
    program: str | None = None
    """Path (relative to /app) of the program the verifier runs, when `runs_agent_code`."""

    @property
    def task_id(self) -> str:
        """`<family>-s<seed>`: the folder name and task id."""
        return f"{self.family}-s{self.seed}"


WORDS = (
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
    "juniper", "kelp", "lagoon", "maple", "nectar", "onyx", "pebble", "quartz", "raven",
    "sierra", "tundra", "umber", "velvet", "willow", "yonder", "zephyr", "acorn", "breeze",
    "cobalt", "dune", "falcon", "glacier", "hazel", "iris", "jasper", "lotus", "meadow",
    "nova", "orchid", "prairie", "ripple", "saffron", "thistle", "violet", "walnut",
)  # fmt: skip
STEMS = (
    "notes", "report", "data", "result", "output", "summary", "answer", "list", "values",
    "record", "memo", "draft", "entry", "index", "digest", "ledger", "tally", "log",
)  # fmt: skip
DIRS = ("inbox", "drafts", "incoming", "staging", "queue", "spool", "work", "scratch", "tmpdata")
DESTS = ("archive", "done", "sorted", "kept", "shelf", "vault", "outbox", "processed", "filed")
NAMES = (
    "ada", "bob", "cyd", "dee", "eli", "fay", "gus", "hal", "ivy", "jon", "kai", "lea", "max",
    "ned", "ola", "pam", "quin", "rex", "sam", "tia", "uma", "vic", "wes", "xia", "yan", "zoe",
)  # fmt: skip
LEVELS = ("ERROR", "WARN", "INFO", "DEBUG", "NOTICE")
SERVICES = ("auth", "billing", "cache", "db", "gateway", "mailer", "search", "queue", "api")
REGIONS = ("north", "south", "east", "west", "central")


def _out_name(rng: random.Random, ext: str = "txt") -> str:
    return f"{rng.choice(STEMS)}_{rng.randint(10, 99)}.{ext}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _want_text(path: str, expected: str) -> str:
    """Checks that `path` is a regular file whose text (trailing spaces/newlines ignored)
    equals `expected` (embedded base64, so any bytes are safe in the script)."""
    return (
        f"want=$(printf %s {_b64(expected)} | base64 -d)\n"
        f"regular {shlex.quote(path)} || fail '{path} is missing or not a regular file'\n"
        f'[ "$(trimmed {shlex.quote(path)})" = "$want" ] || fail "{path} has the wrong content"\n'
    )


# ---- families ---------------------------------------------------------------------------------


def echo_word(rng: random.Random, seed: int) -> TaskSpec:
    """Write a word given in the instruction into a named file: the command copies words
    from the instruction (the family a tiny model can learn)."""
    word = f"{rng.choice(WORDS)}{rng.randint(10, 999)}"
    out = f"{rng.choice(STEMS)}.txt"
    return TaskSpec(
        "echo-word",
        seed,
        1,
        Category.FILES,
        f"Write the word {word} into the file {out}.",
        _want_text(out, word),
        f"echo {word} > {out}\n",
    )


def make_dirs(rng: random.Random, seed: int) -> TaskSpec:
    """Create a nested directory and an empty file in it."""
    a, b = rng.sample(WORDS, 2)
    name = f"{rng.choice(STEMS)}_{rng.randint(10, 99)}.md"
    path = f"{a}/{b}/{name}"
    checks = (
        f"[ -d {a}/{b} ] && [ ! -L {a} ] && [ ! -L {a}/{b} ] || fail 'no directory {a}/{b}'\n"
        f"regular {path} || fail '{path} is missing'\n"
        f"[ -s {path} ] && fail '{path} is not empty'\n"
    )
    return TaskSpec(
        "make-dirs",
        seed,
        1,
        Category.FILES,
        f"Create the directory {a}/{b} (and any missing parent) in /app, with an empty file "
        f"named {name} inside it.",
        checks,
        f"mkdir -p {a}/{b} && touch {path}\n",
    )


def move_files(rng: random.Random, seed: int) -> TaskSpec:
    """Move the files with one extension from one directory to a new one."""
    src, dest = rng.choice(DIRS), rng.choice(DESTS)
    ext, other = rng.sample(("csv", "log", "txt", "json", "md", "dat"), 2)
    stems = rng.sample(STEMS, rng.randint(5, 8))
    moved = sorted(f"{s}.{ext}" for s in stems[: rng.randint(2, len(stems) - 2)])
    kept = sorted(f"{s}.{other}" for s in stems[len(moved) :])
    files = {f"{src}/{n}": f"{n} {rng.randint(1000, 9999)}\n".encode() for n in moved + kept}
    checks = []
    for n in moved:
        content = files[f"{src}/{n}"].decode().strip()
        checks.append(_want_text(f"{dest}/{n}", content))
        checks.append(f"[ -e {src}/{n} ] && fail '{src}/{n} is still there'\n")
    for n in kept:
        checks.append(_want_text(f"{src}/{n}", files[f"{src}/{n}"].decode().strip()))
        checks.append(f"[ -e {dest}/{n} ] && fail '{n} should not have moved'\n")
    return TaskSpec(
        "move-files",
        seed,
        2,
        Category.FILES,
        f"Move every .{ext} file from the directory {src} into a new directory named {dest} "
        f"(in /app). Leave the other files in {src}.",
        "".join(checks),
        f"mkdir -p {dest} && mv {src}/*.{ext} {dest}/\n",
        files=files,
    )


def _log_lines(rng: random.Random, n: int) -> list[str]:
    return [
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.choice(LEVELS)} "
        f"{rng.choice(SERVICES)} request {rng.randint(100, 999)} took {rng.randint(1, 900)}ms"
        for _ in range(n)
    ]


def grep_count(rng: random.Random, seed: int) -> TaskSpec:
    """Count the lines of a log that contain a word."""
    log = f"{rng.choice(SERVICES)}-{rng.randint(10, 99)}.log"
    lines = _log_lines(rng, rng.randint(25, 60))
    word = rng.choice(LEVELS)
    out = _out_name(rng)
    count = sum(word in line for line in lines)
    return TaskSpec(
        "grep-count",
        seed,
        1,
        Category.TEXT,
        f"Count the lines of {log} that contain the word {word} and write just that number "
        f"to {out}.",
        _want_text(out, str(count)),
        f"grep -c {word} {log} > {out}\n",
        files={log: ("\n".join(lines) + "\n").encode()},
    )


def word_count(rng: random.Random, seed: int) -> TaskSpec:
    """Count the lines or the words of a file (wc)."""
    src = f"{rng.choice(STEMS)}-{rng.randint(10, 99)}.txt"
    text = "\n".join(
        " ".join(rng.choices(WORDS, k=rng.randint(1, 9))) for _ in range(rng.randint(8, 40))
    )
    unit = rng.choice(("lines", "words"))
    out = _out_name(rng)
    count = len(text.split("\n")) if unit == "lines" else len(text.split())
    flag = "-l" if unit == "lines" else "-w"
    return TaskSpec(
        "word-count",
        seed,
        1,
        Category.TEXT,
        f"Write the number of {unit} in {src} (just the number) to {out}.",
        _want_text(out, str(count)),
        f"wc {flag} < {src} | tr -d ' ' > {out}\n",
        files={src: (text + "\n").encode()},
    )


def sort_unique(rng: random.Random, seed: int) -> TaskSpec:
    """Distinct lines, sorted (sort -u)."""
    src = f"{rng.choice(('guests', 'members', 'users', 'owners', 'players'))}-{rng.randint(10, 99)}.txt"
    pool = rng.sample(NAMES, rng.randint(5, 10))
    names = [rng.choice(pool) for _ in range(rng.randint(12, 30))]
    order = rng.choice(("alphabetical", "reverse alphabetical"))
    out = _out_name(rng)
    expected = sorted(set(names), reverse=order != "alphabetical")
    return TaskSpec(
        "sort-unique",
        seed,
        2,
        Category.TEXT,
        f"Write the distinct names listed in {src}, one per line, in {order} order, to {out}.",
        _want_text(out, "\n".join(expected)),
        f"sort -u {'-r ' if order != 'alphabetical' else ''}{src} > {out}\n",
        files={src: ("\n".join(names) + "\n").encode()},
    )


def sed_replace(rng: random.Random, seed: int) -> TaskSpec:
    """Replace a word everywhere in a config file, changing nothing else."""
    src = f"{rng.choice(SERVICES)}-{rng.randint(10, 99)}.conf"
    old, new = rng.sample(WORDS, 2)
    keys = rng.sample(("host", "backup", "mirror", "peer", "proxy", "cache", "replica"), 5)
    lines = [
        f"{k} = {rng.choice((old, old, rng.choice(WORDS)))}-{rng.randint(1, 9)}.local" for k in keys
    ]
    if not any(f"= {old}-" in line for line in lines):
        lines[0] = f"{keys[0]} = {old}-1.local"
    original = "\n".join(lines) + "\n"
    expected = original.replace(old, new)
    return TaskSpec(
        "sed-replace",
        seed,
        2,
        Category.TEXT,
        f"In {src}, replace every occurrence of {old} with {new}. Change nothing else.",
        _want_text(src, expected.rstrip("\n")),
        f"sed -i 's/{old}/{new}/g' {src}\n",
        files={src: original.encode()},
    )


def awk_sum(rng: random.Random, seed: int) -> TaskSpec:
    """Sum one CSV column over the rows matching a value (awk)."""
    src = f"{rng.choice(('sales', 'orders', 'stock', 'usage'))}-{rng.randint(10, 99)}.csv"
    column = rng.choice(("units", "amount", "weight"))
    region = rng.choice(REGIONS)
    rows = [
        (rng.choice(NAMES), rng.choice(REGIONS), rng.randint(1, 500))
        for _ in range(rng.randint(10, 25))
    ]
    if not any(r[1] == region for r in rows):
        rows[0] = (rows[0][0], region, rows[0][2])
    out = _out_name(rng)
    total = sum(v for _, r, v in rows if r == region)
    text = f"name,region,{column}\n" + "".join(f"{n},{r},{v}\n" for n, r, v in rows)
    return TaskSpec(
        "awk-sum",
        seed,
        2,
        Category.TEXT,
        f"{src} is a CSV file with a header line. Sum the {column} column over the rows whose "
        f"region is {region} and write just the total to {out}.",
        _want_text(out, str(total)),
        f"awk -F, 'NR > 1 && $2 == \"{region}\" {{ s += $3 }} END {{ print s + 0 }}' {src} > {out}\n",
        files={src: text.encode()},
    )


def _tar_gz(members: dict[str, str]) -> bytes:
    """A deterministic .tar.gz (fixed mtimes, owner and gzip header)."""
    import gzip

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs = sorted({p.rsplit("/", 1)[0] for p in members if "/" in p})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
            tar.addfile(info)
        for path, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def archive_extract(rng: random.Random, seed: int) -> TaskSpec:
    """Extract a .tar.gz into a given directory."""
    archive = (
        f"{rng.choice(('backup', 'bundle', 'export', 'snapshot'))}-{rng.randint(10, 99)}.tar.gz"
    )
    top = rng.choice(WORDS)
    members = {f"{top}/{s}.txt": f"{s} {rng.randint(1000, 9999)}\n" for s in rng.sample(STEMS, 3)}
    dest = rng.choice(DESTS)
    checks = "".join(_want_text(f"{dest}/{p}", t.strip()) for p, t in members.items())
    return TaskSpec(
        "archive-extract",
        seed,
        2,
        Category.ARCHIVES,
        f"Extract the archive {archive} into a new directory named {dest}, so that its files "
        f"end up under {dest}/{top}/.",
        checks,
        f"mkdir -p {dest} && tar -xzf {archive} -C {dest}\n",
        files={archive: _tar_gz(members)},
    )


def archive_create(rng: random.Random, seed: int) -> TaskSpec:
    """Pack the files with one extension into a .tar.gz."""
    src = rng.choice(DIRS)
    ext, other = rng.sample(("csv", "log", "txt", "md"), 2)
    stems = rng.sample(STEMS, 5)
    packed = sorted(f"{s}.{ext}" for s in stems[:3])
    files = {f"{src}/{n}": f"{n} {rng.randint(1000, 9999)}\n".encode() for n in packed}
    files.update({f"{src}/{s}.{other}": b"not this one\n" for s in stems[3:]})
    archive = f"{rng.choice(('pack', 'bundle', 'parcel', 'batch'))}-{rng.randint(10, 99)}.tar.gz"
    want_list = "\n".join(f"{src}/{n}" for n in packed)
    checks = [
        f"regular {archive} || fail '{archive} is missing'\n",
        # Member names, normalised (./ prefix, directory entries dropped), must be exactly
        # the files asked for.
        f"names=$(tar -tzf {archive} 2>/dev/null | sed -e 's#^\\./##' | grep -v '/$' | sort)\n",
        f'[ "$names" = "$(printf %s {_b64(want_list)} | base64 -d)" ] || '
        f"fail 'the archive does not hold exactly the .{ext} files of {src}'\n",
    ]
    for n in packed:
        content = files[f"{src}/{n}"].decode().strip()
        checks.append(
            f"got=$(tar -xzOf {archive} {src}/{n} 2>/dev/null || tar -xzOf {archive} ./{src}/{n} 2>/dev/null)\n"
            f'[ "$got" = "{content}" ] || fail "{src}/{n} in the archive has the wrong content"\n'
        )
    return TaskSpec(
        "archive-create",
        seed,
        2,
        Category.ARCHIVES,
        f"Create a gzip-compressed tar archive {archive} in /app holding only the .{ext} files "
        f"of the directory {src} (stored as {src}/NAME inside the archive).",
        "".join(checks),
        f"tar -czf {archive} {src}/*.{ext}\n",
        files=files,
    )


MODES = (0o600, 0o640, 0o644, 0o700, 0o750, 0o755, 0o400, 0o444)


def permissions(rng: random.Random, seed: int) -> TaskSpec:
    """Set two files' modes (chmod)."""
    a = f"{rng.choice(STEMS)}-{rng.randint(10, 99)}.sh"
    b = f"{rng.choice(('secret', 'token', 'private', 'key'))}-{rng.randint(10, 99)}.txt"
    ma, mb = rng.choice(MODES), rng.choice(MODES)
    start = {a: rng.choice([m for m in (0o644, 0o664, 0o600) if m != ma])}
    start[b] = rng.choice([m for m in (0o644, 0o664, 0o666) if m != mb])
    checks = "".join(
        f"regular {p} || fail '{p} is missing'\n"
        f'[ "$(stat -c %a {p} 2>/dev/null)" = "{m:o}" ] || fail "{p} has mode $(stat -c %a {p}), want {m:o}"\n'
        for p, m in ((a, ma), (b, mb))
    )
    return TaskSpec(
        "permissions",
        seed,
        2,
        Category.PERMISSIONS,
        f"Set the permissions of {a} to {ma:o} and of {b} to {mb:o} (octal modes).",
        checks,
        f"chmod {ma:o} {a} && chmod {mb:o} {b}\n",
        files={a: b"#!/bin/sh\necho hello\n", b: f"{rng.randint(10**8, 10**9)}\n".encode()},
        modes=start,
    )


# What each script prints for its integer arguments: (description, python function, bash body).
SCRIPT_OPS: dict[str, tuple[str, Callable[[list[int]], int], str]] = {
    "sum": ("the sum of", sum, 's=0; for n in "$@"; do s=$((s + n)); done; echo $s'),
    "max": (
        "the largest of",
        max,
        's=$1; for n in "$@"; do [ "$n" -gt "$s" ] && s=$n; done; echo $s',
    ),
    "min": (
        "the smallest of",
        min,
        's=$1; for n in "$@"; do [ "$n" -lt "$s" ] && s=$n; done; echo $s',
    ),
    "count": ("how many there are of", len, "echo $#"),
    "product": (
        "the product of",
        lambda xs: __import__("math").prod(xs),
        's=1; for n in "$@"; do s=$((s * n)); done; echo $s',
    ),
}


def _run_program_checks(program: str, cases: list[tuple[list[str], str]]) -> str:
    """Run the agent's program on each case (5 s each, output capped) and compare."""
    out = [f"regular {program} || fail '{program} is missing'\n"]
    for args, want in cases:
        quoted = " ".join(shlex.quote(a) for a in args)
        out.append(
            f"got=$(run_agent ./{program} {quoted})\n"
            f'[ "$got" = {shlex.quote(want)} ] || fail "./{program} {quoted} printed $(printf %q "$got"), want {want}"\n'
        )
    return "".join(out)


def write_script(rng: random.Random, seed: int) -> TaskSpec:
    """Write an executable script that computes something from its arguments."""
    op = rng.choice(sorted(SCRIPT_OPS))
    what, fn, body = SCRIPT_OPS[op]
    name = f"{op}_{rng.choice(STEMS)}{rng.randint(100, 999)}.sh"
    example = [rng.randint(1, 9) for _ in range(3)]
    cases = []
    for _ in range(3):
        xs = [rng.randint(-20, 40) for _ in range(rng.randint(2, 5))]
        cases.append(([str(x) for x in xs], str(fn(xs))))
    checks = f"[ -x {name} ] || fail '{name} is not executable'\n" + _run_program_checks(
        name, cases
    )
    return TaskSpec(
        "write-script",
        seed,
        3,
        Category.SCRIPTS,
        f"Write an executable shell script {name} in /app that prints {what} its integer "
        f"arguments (./{name} {' '.join(map(str, example))} prints {fn(example)}).",
        checks,
        f"printf '#!/bin/bash\\n%s\\n' {shlex.quote(body)} > {name} && chmod +x {name}\n",
        runs_agent_code=True,
        program=name,
    )


def fix_script(rng: random.Random, seed: int) -> TaskSpec:
    """Repair a script with one bug; the verifier runs it on inputs it never saw."""
    word = rng.choice(LEVELS)
    name = f"count_{rng.choice(STEMS)}{rng.randint(100, 999)}.sh"
    bug = rng.choice(("invert", "wrong-arg", "count-all"))
    good = f'#!/bin/bash\n# Prints how many lines of the file "$1" contain {word}.\ngrep -c {word} "$1"\n'
    broken = {
        "invert": good.replace("grep -c", "grep -vc"),
        "wrong-arg": good.replace('"$1"\n', '"$2"\n'),
        "count-all": good.replace(f"grep -c {word}", "grep -c ''"),
    }[bug]
    cases = []
    for i in range(2):
        lines = _log_lines(rng, rng.randint(10, 30))
        path = f"/tmp/case{i}.log"
        cases.append((path, lines))
    setup = "".join(
        f"printf %s {_b64(chr(10).join(lines) + chr(10))} | base64 -d > {path}\n"
        for path, lines in cases
    )
    checks = (
        f"[ -x {name} ] || fail '{name} is not executable'\n"
        + setup
        + _run_program_checks(
            name, [([path], str(sum(word in line for line in lines))) for path, lines in cases]
        )
    )
    fixed_body = _b64(good)
    return TaskSpec(
        "fix-script",
        seed,
        3,
        Category.FIX,
        f"The script {name} should print how many lines of the file given as its first "
        f"argument contain {word}, but it has a bug. Fix it (keep it executable).",
        checks,
        f"printf %s {fixed_body} | base64 -d > {name} && chmod +x {name}\n",
        files={name: broken.encode()},
        modes={name: 0o755},
        runs_agent_code=True,
        program=name,
    )


def grep_cut_sort(rng: random.Random, seed: int) -> TaskSpec:
    """Two steps: select lines, then take a field and sort its distinct values."""
    log = f"{rng.choice(SERVICES)}-{rng.randint(10, 99)}.log"
    lines = _log_lines(rng, rng.randint(25, 50))
    level = rng.choice(LEVELS)
    if not any(f" {level} " in line for line in lines):
        lines[0] = lines[0].replace(lines[0].split()[1], level)
    out = _out_name(rng)
    services = sorted({line.split()[2] for line in lines if line.split()[1] == level})
    return TaskSpec(
        "grep-cut-sort",
        seed,
        3,
        Category.COMBINED,
        f"Each line of {log} reads DATE LEVEL SERVICE .... Write the distinct SERVICE names "
        f"that appear on {level} lines, sorted alphabetically, one per line, to {out}.",
        _want_text(out, "\n".join(services)),
        f"awk '$2 == \"{level}\" {{ print $3 }}' {log} | sort -u > {out}\n",
        files={log: ("\n".join(lines) + "\n").encode()},
    )


FAMILIES: dict[str, Callable[[random.Random, int], TaskSpec]] = {
    "echo-word": echo_word,
    "make-dirs": make_dirs,
    "grep-count": grep_count,
    "word-count": word_count,
    "move-files": move_files,
    "sort-unique": sort_unique,
    "sed-replace": sed_replace,
    "awk-sum": awk_sum,
    "archive-extract": archive_extract,
    "archive-create": archive_create,
    "permissions": permissions,
    "write-script": write_script,
    "fix-script": fix_script,
    "grep-cut-sort": grep_cut_sort,
}
"""Every family, easiest first."""


HELDOUT_SEEDS = 1_000_000
"""Seeds below this are the train range, seeds from it on the held-out range."""
HELDOUT_SHARE = 5
"""One instance in `HELDOUT_SHARE` (by content hash) belongs to held-out seeds, the rest to
train seeds."""
MAX_DRAWS = 200


def fingerprint(spec: TaskSpec) -> str:
    """What makes an instance: its instruction, starting files and modes, and its checks."""
    digest = hashlib.sha256()
    for part in (spec.family, spec.instruction, spec.checks, repr(sorted(spec.modes.items()))):
        digest.update(part.encode() + b"\0")
    for path, data in sorted(spec.files.items()):
        digest.update(path.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def is_heldout_instance(spec: TaskSpec) -> bool:
    """True when the instance belongs to the held-out seed range (by its content hash)."""
    return int(fingerprint(spec)[:8], 16) % HELDOUT_SHARE == 0


def make_spec(family: str, seed: int) -> TaskSpec:
    """The task of `family` for `seed` (deterministic).

    Parameters are drawn from `random.Random(f"{family}:{seed}")` until the instance's
    content hash falls in the seed's range (train below `HELDOUT_SEEDS`, held-out from it on),
    so no instance can ever be both a train task and a held-out task."""
    try:
        build = FAMILIES[family]
    except KeyError:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}") from None
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    rng = random.Random(f"{family}:{seed}")
    heldout = seed >= HELDOUT_SEEDS
    for _ in range(MAX_DRAWS):
        spec = build(rng, seed)
        if is_heldout_instance(spec) == heldout:
            return spec
    raise RuntimeError(f"{family}: no instance for seed {seed} in {MAX_DRAWS} draws")
