/*
 * Two uids in a grading sandbox: the verifier's and the agent's (sandboxes/bwrap.py,
 * `SandboxSpec(grading=True)`, `GradingIsolation.TWO_UID`).
 *
 * One source, two builds (sandboxes/_native.py):
 *
 * 1. The exec shim (-DSKYRL_SHIM, a shared library put in LD_PRELOAD of every grading
 *    command). It interposes execve, execv, execvp, execvpe, execl, execlp, execle, execveat,
 *    fexecve, posix_spawn and posix_spawnp. When the verifier (uid 0 of the sandbox's user
 *    namespace) execs *agent code*, the shim execs the helper below in its "skyrl-as-agent"
 *    mode instead, which drops to the agent's uid and execs the original program. Everything
 *    else runs as asked, with the shim put back into LD_PRELOAD if the caller dropped it (a
 *    `subprocess.run(..., env={})` keeps the shim).
 *
 * 2. The helper (an executable, static when libc.a allows; bound read-only at
 *    /run/skyrl-grading inside). Its modes, by argv[1] (or argv[0] for the drop):
 *    - `launch V A -- ARGV` (on the host, as root, after the cgroup join): clears the
 *      supplementary groups, unshares a user namespace whose uid 0 is host uid V and whose
 *      uid A is host uid A (a forked child, still in the host's namespace, writes the maps),
 *      becomes its uid 0 and execs ARGV (bwrap, then privileged inside that namespace only).
 *    - `init SECCOMP_FD -- ARGV` (inside, bwrap's command, PID 1): hides other uids'
 *      processes (/proc hidepid=2,gid=0), drops the capabilities it needed for that, loads
 *      the seccomp filter and execs the command server (see `init` below).
 *    - `exec -- ARGV` (inside, the first program of every grading command: the command
 *      server is static and never loads the shim): the shim's decision for ARGV, then exec.
 *    - argv[0] `skyrl-as-agent`, then `-- PATH ARGV...`: setgroups(0), setresgid(A),
 *      setresuid(A) (every capability goes with the uid), the shim out of LD_PRELOAD and
 *      PYTHONSAFEPATH / PYTHONNOUSERSITE out of the environment (the verifier's defences,
 *      not the agent program's: it imports its sibling modules as in a container), then
 *      execve(PATH, ARGV) (ENOEXEC: /bin/sh PATH, as execvp does).
 *
 * "Agent code" (decided as the verifier, before the exec):
 *   (a) the program's real path is agent-controlled;
 *   (a'') the program is a script whose `#!` interpreter is agent-controlled;
 *   (a') the program was named by a path whose directory is agent-controlled (a symlink the
 *       agent made to /usr/bin/python3: python reads pyvenv.cfg next to it);
 *   (b) the program is an interpreter (sh, bash, dash, zsh, ksh, mksh, ash, python*, pypy*,
 *       perl*, ruby*, node, nodejs, php*, lua*, luajit, Rscript, tclsh*, awk, gawk, mawk,
 *       nawk, by basename) and its script (the first non-option argument; none after -c,
 *       -m, -e and the like) or a path given as an option's value before it (--rcfile FILE,
 *       -r MODULE, -f PROGRAM, -I DIR) is agent-controlled, or, with no script named, its
 *       stdin is an agent-controlled file. Later arguments are the script's data:
 *       `python3 /tests/check.py /app/out.txt` stays the verifier;
 *   (c) git, when its working directory, a -C DIR, --git-dir/--work-tree or $GIT_DIR /
 *       $GIT_WORK_TREE is agent-controlled (hooks, core.fsmonitor, filters, aliases of the
 *       agent's .git/config then run as the agent);
 *   (d) make, when its working directory, a -C DIR or a -f FILE is agent-controlled.
 * "Agent-controlled path": some entry of its real path (every directory from / down, and the
 * file) is owned by the agent's uid, or the file is writable by it, or a directory on the way
 * is writable by it and not sticky (a sticky directory protects the entries the agent does
 * not own). Owned and writable are asked of the kernel as the agent (setfsuid/setfsgid for
 * the one check, then back): inside the user namespace, files of unmapped host uids (host
 * root's /usr) show the overflow uid 65534 too, so st_uid alone cannot tell them apart.
 * Ownership is open(O_NOATIME), which only the owner (or CAP_FOWNER, gone with the fsuid)
 * may ask for; writability is faccessat2(W_OK, AT_EACCESS), which also says EROFS.
 *
 * What stays open: static programs that exec without libc (the shim is never loaded in
 * them); a script piped into an interpreter (`cat /app/x.sh | sh`); code the verifier runs in-process (a sourced script, an imported module, pytest's
 * conftest.py); build tools other than git and make that run the workspace's configuration
 * (npm scripts, cargo build.rs, pip's setup.py); and a race where an agent program running at
 * the same time swaps a file between the check and the exec.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef SKYRL_SHIM
#include <dlfcn.h>
#include <spawn.h>
#else
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#endif

#define AGENT_ID 65534
#define HELPER_INSIDE "/run/skyrl-grading"
#define SHIM_INSIDE "/run/skyrl-grading-shim.so"
#define VERIFIER_HOME "/run/verifier-home" /* bwrap.py VERIFIER_HOME */
#define MAX_ARGS 4096

#ifndef AT_EACCESS
#define AT_EACCESS 0x200
#endif
#ifndef SYS_faccessat2
#define SYS_faccessat2 439
#endif

extern char **environ;

/* Built against the host's C library, the shim loads into an image's programs too: it asks
 * for no symbol version newer than the architecture's first (dlsym moved into libc in 2.34,
 * stat and lstat got new versions in 2.33), so an older glibc in an image still loads it. */
#ifdef SKYRL_SHIM
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif
#endif
static int stat_at(const char *path, struct stat *st, int flags) {
    return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, flags);
}
#define lstat(path, st) stat_at((path), (st), AT_SYMLINK_NOFOLLOW)
#define stat(path, st) stat_at((path), (st), 0)

/* ---- is a path agent-controlled? ------------------------------------------------------------ */

/* Writable by the current fs identity (the agent's during a check). */
static int can_write(const char *path) {
    long r = syscall(SYS_faccessat2, AT_FDCWD, path, W_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW);
    if (r == 0) return 1;
    if (errno != ENOSYS) return 0;
    /* Kernels before 5.8: the mode bits, as if the agent were in the file's group (a wrong
     * guess only ever makes a program run as the agent). */
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    return (st.st_mode & 0002) || (st.st_gid == AGENT_ID && (st.st_mode & 0020));
}

/* Owned by the current fs identity: O_NOATIME is refused (EPERM) to anyone but the owner. */
static int owns(const char *path, const struct stat *st) {
    if (st->st_uid != AGENT_ID) return 0; /* another mapped uid: the verifier's */
    int fd = open(path, O_RDONLY | O_NOATIME | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    if (errno == EPERM) return 0;
    /* EACCES: unreadable to the agent. If the owner may read it, the agent is not the owner;
     * else it may be the agent's own file made unreadable: count it as the agent's. */
    return !(st->st_mode & S_IRUSR);
}

/* The check of one real path, already under the agent's fs identity. */
static int controlled_real(const char *real) {
    char prefix[PATH_MAX];
    size_t n = strlen(real);
    if (n == 0 || n >= sizeof prefix || real[0] != '/') return 0;
    struct stat st;
    size_t end = 1;
    for (;;) {
        /* prefix = real[0:end] ("/" first, then each longer prefix) */
        memcpy(prefix, real, end);
        prefix[end] = 0;
        if (lstat(prefix, &st) != 0) return 0;
        if (owns(prefix, &st)) return 1;
        int last = end >= n;
        if (last) return S_ISDIR(st.st_mode) ? 0 : can_write(prefix);
        if (S_ISDIR(st.st_mode) && !(st.st_mode & S_ISVTX) && can_write(prefix)) return 1;
        /* next component */
        size_t next = end;
        if (real[next] == '/') next++;
        while (next < n && real[next] != '/') next++;
        end = next;
    }
}

/* The path, and where it was found: a symlink the agent made to a system program (its
 * directory, with its real path) counts as well, since programs read what lies next to the
 * path they were started by (python's pyvenv.cfg and prefix, for one). */
static int controlled(const char *path) {
    char real[PATH_MAX], where[PATH_MAX];
    if (!path || !*path || !realpath(path, real)) return 0;
    if (geteuid() != 0) return 0; /* not the verifier: nothing to decide */
    const char *slash = strrchr(path, '/');
    int link_dir = 0;
    if (slash && (size_t)(slash - path) < sizeof where) {
        char dir[PATH_MAX];
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = 0;
        link_dir = realpath(dir, where) != NULL;
    }
    int saved = errno;
    setfsgid(AGENT_ID);
    setfsuid(AGENT_ID);
    int r = controlled_real(real) || (link_dir && controlled_real(where));
    setfsuid(0);
    setfsgid(0);
    errno = saved;
    return r;
}

/* ---- is a command agent code? --------------------------------------------------------------- */

typedef enum { I_NONE, I_SHELL, I_PYTHON, I_PERL, I_RUBY, I_NODE, I_PHP, I_LUA, I_R, I_TCL, I_AWK } interp_t;

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static interp_t interpreter(const char *base) {
    static const char *shells[] = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", 0};
    for (int i = 0; shells[i]; i++)
        if (!strcmp(base, shells[i])) return I_SHELL;
    if (starts(base, "python") || starts(base, "pypy")) return I_PYTHON;
    if (starts(base, "perl")) return I_PERL;
    if (starts(base, "ruby")) return I_RUBY;
    if (!strcmp(base, "node") || !strcmp(base, "nodejs")) return I_NODE;
    if (starts(base, "php")) return I_PHP;
    if (starts(base, "lua")) return I_LUA;
    if (!strcmp(base, "Rscript")) return I_R;
    if (starts(base, "tclsh") || starts(base, "wish")) return I_TCL;
    if (!strcmp(base, "awk") || !strcmp(base, "gawk") || !strcmp(base, "mawk") || !strcmp(base, "nawk"))
        return I_AWK;
    return I_NONE;
}

/* Options after which there is no script file (the program text is an argument). */
static int ends_without_script(interp_t k, const char *a) {
    switch (k) {
    case I_SHELL: /* -c, also in a cluster: -ec, -xc */
        return a[0] == '-' && a[1] != '-' && strchr(a + 1, 'c') != NULL;
    case I_PYTHON:
        return a[0] == '-' && a[1] != '-' && (strchr(a + 1, 'c') || strchr(a + 1, 'm'));
    case I_PERL:
        return !strncmp(a, "-e", 2) || !strncmp(a, "-E", 2);
    case I_RUBY:
    case I_R:
        return !strncmp(a, "-e", 2);
    case I_NODE:
        return !strcmp(a, "-e") || !strcmp(a, "--eval") || !strcmp(a, "-p") || !strcmp(a, "--print");
    case I_PHP:
        return !strcmp(a, "-r");
    default:
        return 0;
    }
}

/* Options whose value is the next argument. */
static int takes_value(interp_t k, const char *a) {
    switch (k) {
    case I_SHELL:
        return !strcmp(a, "-o") || !strcmp(a, "+o") || !strcmp(a, "-O") || !strcmp(a, "+O") ||
               !strcmp(a, "--rcfile") || !strcmp(a, "--init-file");
    case I_PYTHON:
        return !strcmp(a, "-W") || !strcmp(a, "-X") || !strcmp(a, "--check-hash-based-pycs");
    case I_RUBY:
        return !strcmp(a, "-I") || !strcmp(a, "-r");
    case I_NODE:
        return !strcmp(a, "-r") || !strcmp(a, "--require") || !strcmp(a, "--import") ||
               !strcmp(a, "--loader");
    case I_PHP:
        return !strcmp(a, "-c") || !strcmp(a, "-d") || !strcmp(a, "-f");
    case I_LUA:
        return !strcmp(a, "-e") || !strcmp(a, "-l");
    case I_AWK:
        return !strcmp(a, "-f") || !strcmp(a, "-v") || !strcmp(a, "-F") || !strcmp(a, "-i") ||
               !strcmp(a, "-E");
    default:
        return 0;
    }
}

static int exists(const char *path) {
    struct stat st;
    return path && *path && stat(path, &st) == 0;
}

/* No script named: the interpreter reads it from stdin. A file there (`sh < /app/x.sh`) is
 * checked; a pipe (`cat /app/x.sh | sh`) cannot be told apart from the verifier's own. */
static int stdin_is_agent_file(void) {
    struct stat st;
    char target[PATH_MAX];
    if (fstat(0, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    ssize_t n = readlink("/proc/self/fd/0", target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    return controlled(target);
}

static int interpreter_runs_agent_code(interp_t k, char *const argv[]) {
    if (!argv || !argv[0]) return 0;
    for (int i = 1; argv[i]; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--") && k != I_AWK) return argv[i + 1] && controlled(argv[i + 1]);
        if (a[0] == '-' && a[1] == 0) return stdin_is_agent_file(); /* the script on stdin */
        if (a[0] == '-' || (a[0] == '+' && k == I_SHELL)) {
            if (ends_without_script(k, a)) return 0;
            if (takes_value(k, a) && argv[i + 1]) {
                i++;
                if (exists(argv[i]) && controlled(argv[i])) return 1;
            }
            const char *eq = strchr(a, '='); /* --rcfile=FILE, --require=MOD */
            if (eq && exists(eq + 1) && controlled(eq + 1)) return 1;
            continue;
        }
        if (k == I_AWK) return 0; /* the program text, not a file */
        return controlled(a);
    }
    return stdin_is_agent_file();
}

static const char *env_get(char *const envp[], const char *name) {
    size_t n = strlen(name);
    for (int i = 0; envp && envp[i]; i++)
        if (!strncmp(envp[i], name, n) && envp[i][n] == '=') return envp[i] + n + 1;
    return NULL;
}

/* git or make: the tree they work in (and each -C DIR, config or makefile named). */
static int tool_runs_agent_config(int is_git, char *const argv[], char *const envp[]) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) && controlled(cwd)) return 1;
    if (is_git) {
        const char *names[] = {"GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_GLOBAL", 0};
        for (int i = 0; names[i]; i++) {
            const char *v = env_get(envp, names[i]);
            if (v && controlled(v)) return 1;
        }
    }
    for (int i = 1; argv && argv[i]; i++) {
        const char *a = argv[i];
        if (is_git && a[0] != '-') break; /* the subcommand: its own options follow */
        if (is_git && (!strcmp(a, "-c") || !strcmp(a, "--config-env") || !strcmp(a, "--namespace"))) {
            if (argv[i + 1]) i++; /* a value, not the subcommand */
            continue;
        }
        const char *value = NULL;
        if ((!strcmp(a, "-C") || (!is_git && (!strcmp(a, "-f") || !strcmp(a, "--file") ||
                                               !strcmp(a, "--makefile") || !strcmp(a, "--directory")))) ||
            (is_git && (!strcmp(a, "--git-dir") || !strcmp(a, "--work-tree")))) {
            value = argv[i + 1];
            if (value) i++;
        } else if (starts(a, "--git-dir=") || starts(a, "--work-tree=") || starts(a, "--directory=") ||
                   starts(a, "--file=") || starts(a, "--makefile=")) {
            value = strchr(a, '=') + 1;
        } else if (!is_git && a[0] == '-' && a[1] == 'C' && a[2]) {
            value = a + 2;
        } else if (!is_git && a[0] == '-' && a[1] == 'f' && a[2]) {
            value = a + 2;
        }
        if (value && controlled(value)) return 1;
    }
    return 0;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A script's `#!` interpreter, which the kernel runs with the exec's credentials: the
 * agent's interpreter behind a verifier script is agent code too (up to the kernel's depth). */
static int shebang_is_agent(const char *path, int depth) {
    char head[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, head, sizeof head - 1);
    close(fd);
    if (n < 3 || head[0] != '#' || head[1] != '!') return 0;
    head[n] = 0;
    char *p = head + 2;
    while (*p == ' ' || *p == '\t') p++;
    char *end = p;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n') end++;
    *end = 0;
    if (!*p) return 0;
    return controlled(p) || (depth < 4 && shebang_is_agent(p, depth + 1));
}

/* The decision: 1 when `path` (already PATH-resolved) with `argv` is agent code. */
static int is_agent_code(const char *path, char *const argv[], char *const envp[]) {
    if (geteuid() != 0 || !path) return 0;
    /* A path that cannot be executed is nobody's code: the real execve fails with its own
     * errno, so a caller searching PATH itself (CPython's subprocess) tries the next entry. */
    if (access(path, X_OK) != 0) return 0;
    if (controlled(path) || shebang_is_agent(path, 1)) return 1;
    char real[PATH_MAX];
    const char *names[2] = {base_name(path), realpath(path, real) ? base_name(real) : NULL};
    for (int j = 0; j < 2; j++) {
        const char *b = names[j];
        if (!b) continue;
        interp_t k = interpreter(b);
        if (k != I_NONE) return interpreter_runs_agent_code(k, argv);
        if (!strcmp(b, "git")) return tool_runs_agent_config(1, argv, envp);
        if (!strcmp(b, "make") || !strcmp(b, "gmake")) return tool_runs_agent_config(0, argv, envp);
    }
    return 0;
}

/* PATH search as execvp does it: the first executable regular file. */
static const char *search_path(const char *file, const char *path_var, char *out, size_t size) {
    if (!file || !*file) return NULL;
    if (strchr(file, '/')) return file;
    const char *p = path_var ? path_var : "/bin:/usr/bin";
    while (*p) {
        const char *colon = strchrnul(p, ':');
        size_t len = (size_t)(colon - p);
        int n = len ? snprintf(out, size, "%.*s/%s", (int)len, p, file) : snprintf(out, size, "%s", file);
        struct stat st;
        if (n > 0 && (size_t)n < size && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return out;
        p = *colon ? colon + 1 : colon;
    }
    return NULL;
}

/* envp with `LD_PRELOAD` holding the shim (add) or not (remove), in a new array. */
static char **with_shim(char *const envp[], int keep) {
    /* The usual case, an environment the shim came in with: used as it is, with no malloc
     * (CPython's subprocess execs from a vfork child, where allocating is best avoided). */
    const char *preload = env_get(envp, "LD_PRELOAD");
    size_t len = sizeof SHIM_INSIDE - 1;
    if (keep && preload && !strncmp(preload, SHIM_INSIDE, len) && (preload[len] == 0 || preload[len] == ':'))
        return (char **)envp;
    int n = 0;
    while (envp && envp[n]) n++;
    char **out = malloc(sizeof(char *) * (size_t)(n + 2));
    if (!out) return (char **)envp;
    int j = 0, seen = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(envp[i], "LD_PRELOAD=", 11) != 0) {
            out[j++] = envp[i];
            continue;
        }
        /* Rebuild the list without the shim; with it first when keeping. */
        const char *list = envp[i] + 11;
        size_t cap = strlen(list) + sizeof SHIM_INSIDE + 16;
        char *value = malloc(cap);
        if (!value) continue;
        strcpy(value, "LD_PRELOAD=");
        if (keep) strcat(value, SHIM_INSIDE);
        char *copy = strdup(list), *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ": ", &save) : NULL; tok; tok = strtok_r(NULL, ": ", &save)) {
            if (!strcmp(tok, SHIM_INSIDE)) continue;
            if (value[11]) strcat(value, ":");
            strcat(value, tok);
        }
        free(copy);
        seen = 1;
        if (value[11]) out[j++] = value;
        else free(value);
    }
    if (keep && !seen) out[j++] = "LD_PRELOAD=" SHIM_INSIDE;
    out[j] = NULL;
    return out;
}

/* argv for the helper: skyrl-as-agent -- PATH ARGV... */
static char **agent_argv(const char *path, char *const argv[]) {
    int n = 0;
    while (argv && argv[n]) n++;
    char **out = malloc(sizeof(char *) * (size_t)(n + 4));
    if (!out) return NULL;
    out[0] = "skyrl-as-agent";
    out[1] = "--";
    out[2] = (char *)path;
    for (int i = 0; i < n; i++) out[3 + i] = argv[i];
    if (n == 0) out[3 + n++] = (char *)path;
    out[3 + n] = NULL;
    return out;
}

#ifdef SKYRL_SHIM
/* ---- the shim --------------------------------------------------------------------------- */

typedef int (*execve_t)(const char *, char *const[], char *const[]);
typedef int (*execveat_t)(int, const char *, char *const[], char *const[], int);
typedef int (*execvpe_t)(const char *, char *const[], char *const[]);
typedef int (*spawn_t)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                       const posix_spawnattr_t *, char *const[], char *const[]);

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

__attribute__((constructor)) static void shim_probe(void) {
    /* The sandbox asks once whether the shim loads in its root (an image's libc may refuse). */
    if (getenv("SKYRL_GRADING_SHIM_PROBE")) {
        static const char ok[] = "skyrl-grading-shim-ok\n";
        (void)!write(1, ok, sizeof ok - 1);
        _exit(0);
    }
}

static int run_as_agent(const char *path, char *const argv[], char *const envp[]) {
    char **args = agent_argv(path, argv);
    if (!args) {
        errno = ENOMEM;
        return -1;
    }
    execve_t e = (execve_t)real("execve");
    int r = e(HELPER_INSIDE, args, envp);
    int saved = errno;
    free(args);
    errno = saved;
    return r;
}

int execve(const char *path, char *const argv[], char *const envp[]) {
    if (is_agent_code(path, argv, envp)) return run_as_agent(path, argv, envp);
    execve_t e = (execve_t)real("execve");
    return e(path, argv, geteuid() == 0 ? with_shim(envp, 1) : (char **)envp);
}

int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

int execvpe(const char *file, char *const argv[], char *const envp[]) {
    char buf[PATH_MAX];
    const char *found = search_path(file, getenv("PATH"), buf, sizeof buf);
    if (found && is_agent_code(found, argv, envp)) return run_as_agent(found, argv, envp);
    execvpe_t e = (execvpe_t)real("execvpe");
    return e(file, argv, geteuid() == 0 ? with_shim(envp, 1) : (char **)envp);
}

int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

static char **collect(const char *arg0, va_list ap, char ***envp_out) {
    char **argv = malloc(sizeof(char *) * MAX_ARGS);
    if (!argv) return NULL;
    int n = 0;
    argv[n++] = (char *)arg0;
    while (n < MAX_ARGS - 1 && (argv[n] = va_arg(ap, char *)) != NULL) n++;
    argv[n] = NULL;
    if (envp_out) *envp_out = va_arg(ap, char **);
    return argv;
}

int execl(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    char **argv = collect(arg0, ap, NULL);
    va_end(ap);
    if (!argv) return errno = ENOMEM, -1;
    int r = execve(path, argv, environ);
    free(argv);
    return r;
}

int execlp(const char *file, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    char **argv = collect(arg0, ap, NULL);
    va_end(ap);
    if (!argv) return errno = ENOMEM, -1;
    int r = execvpe(file, argv, environ);
    free(argv);
    return r;
}

int execle(const char *path, const char *arg0, ...) {
    va_list ap;
    va_start(ap, arg0);
    char **envp = NULL;
    char **argv = collect(arg0, ap, &envp);
    va_end(ap);
    if (!argv) return errno = ENOMEM, -1;
    int r = execve(path, argv, envp);
    free(argv);
    return r;
}

/* The path an execveat names, for the decision (the fd's target for AT_EMPTY_PATH). */
static const char *at_path(int dirfd, const char *path, int flags, char *out, size_t size) {
    if (path && path[0] == '/') return path;
    char link[64];
    if (dirfd == AT_FDCWD) return path;
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    char dir[PATH_MAX];
    ssize_t n = readlink(link, dir, sizeof dir - 1);
    if (n < 0) return NULL;
    dir[n] = 0;
    size_t dn = (size_t)n, pn = path ? strlen(path) : 0;
    if ((flags & AT_EMPTY_PATH) && pn == 0) {
        if (dn + 1 > size) return NULL;
        memcpy(out, dir, dn + 1);
        return out;
    }
    if (dn + pn + 2 > size) return NULL;
    memcpy(out, dir, dn);
    out[dn] = '/';
    memcpy(out + dn + 1, path, pn + 1);
    return out;
}

int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
    char buf[PATH_MAX];
    const char *resolved = at_path(dirfd, path, flags, buf, sizeof buf);
    if (resolved && is_agent_code(resolved, argv, envp)) return run_as_agent(resolved, argv, envp);
    execveat_t e = (execveat_t)real("execveat");
    if (!e) {
        errno = ENOSYS;
        return -1;
    }
    return e(dirfd, path, argv, geteuid() == 0 ? with_shim(envp, 1) : (char **)envp, flags);
}

int fexecve(int fd, char *const argv[], char *const envp[]) {
    char buf[PATH_MAX];
    const char *resolved = at_path(fd, "", AT_EMPTY_PATH, buf, sizeof buf);
    if (resolved && is_agent_code(resolved, argv, envp)) return run_as_agent(resolved, argv, envp);
    typedef int (*fexecve_t)(int, char *const[], char *const[]);
    fexecve_t e = (fexecve_t)real("fexecve");
    return e(fd, argv, geteuid() == 0 ? with_shim(envp, 1) : (char **)envp);
}

static int spawn_common(const char *name, pid_t *pid, const char *file, const char *resolved,
                        const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                        char *const argv[], char *const envp[]) {
    if (resolved && is_agent_code(resolved, argv, envp)) {
        char **args = agent_argv(resolved, argv);
        if (!args) return ENOMEM;
        spawn_t s = (spawn_t)real("posix_spawn");
        int r = s(pid, HELPER_INSIDE, fa, attr, args, envp);
        free(args);
        return r;
    }
    spawn_t s = (spawn_t)real(name);
    return s(pid, file, fa, attr, argv, geteuid() == 0 ? with_shim(envp, 1) : (char **)envp);
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    return spawn_common("posix_spawn", pid, path, path, fa, attr, argv, envp);
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    char buf[PATH_MAX];
    const char *found = search_path(file, getenv("PATH"), buf, sizeof buf);
    return spawn_common("posix_spawnp", pid, file, found, fa, attr, argv, envp);
}

#else
/* ---- the helper ----------------------------------------------------------------------- */

static void fail(const char *what) {
    fprintf(stderr, "skyrl-grading: %s: %s\n", what, strerror(errno));
    _exit(126);
}

/* Drop to the agent's uid and exec PATH with ARGV (argv: skyrl-as-agent -- PATH ARGV...). */
static int as_agent(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[1], "--") != 0) {
        fprintf(stderr, "usage: skyrl-as-agent -- PATH ARGV...\n");
        return 2;
    }
    if (setgroups(0, NULL) != 0 && geteuid() == 0) fail("setgroups");
    if (setresgid(AGENT_ID, AGENT_ID, AGENT_ID) != 0) fail("setresgid");
    if (setresuid(AGENT_ID, AGENT_ID, AGENT_ID) != 0) fail("setresuid");
    if (getuid() != AGENT_ID || geteuid() != AGENT_ID) {
        errno = EPERM;
        fail("still not the agent's uid");
    }
    const char *home = getenv("HOME");
    if (home && !strcmp(home, VERIFIER_HOME)) setenv("HOME", "/tmp", 1); /* not the verifier's */
    /* The verifier's start-up-hook defences (grading.py) guard the verifier's own
     * interpreters; the agent's program, now without any of the verifier's rights, runs as
     * in a container: its script's directory on sys.path (`from run import run_tasks` next to
     * it) and its user site. */
    unsetenv("PYTHONSAFEPATH");
    unsetenv("PYTHONNOUSERSITE");
    char **envp = with_shim(environ, 0);
    const char *path = argv[2];
    execve(path, argv + 3, envp);
    if (errno == ENOEXEC) { /* a script without #!: sh runs it, as execvp would */
        int n = 0;
        while (argv[3 + n]) n++;
        char **sh = malloc(sizeof(char *) * (size_t)(n + 3));
        if (sh) {
            sh[0] = "/bin/sh";
            sh[1] = (char *)path;
            for (int i = 1; i < n; i++) sh[1 + i] = argv[3 + i];
            sh[n + 1] = NULL;
            execve("/bin/sh", sh, envp);
        }
    }
    int err = errno;
    fprintf(stderr, "sandbox: cannot run '%s': %s\n", path, strerror(err));
    return err == ENOENT ? 127 : 126;
}

/* The first program of a grading command (the static command server loads no shim). */
static int exec_first(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--") != 0) {
        fprintf(stderr, "usage: skyrl-grading exec -- ARGV...\n");
        return 2;
    }
    char **args = argv + 3;
    char buf[PATH_MAX];
    const char *found = search_path(args[0], getenv("PATH"), buf, sizeof buf);
    if (!found) {
        fprintf(stderr, "sandbox: %s: command not found\n", args[0]);
        return 127;
    }
    if (is_agent_code(found, args, environ)) {
        char **drop = agent_argv(found, args);
        int n = 0;
        while (drop[n]) n++;
        return as_agent(n, drop);
    }
    execve(found, args, with_shim(environ, 1));
    int err = errno;
    if (err == ENOEXEC) {
        int n = 0;
        while (args[n]) n++;
        char **sh = malloc(sizeof(char *) * (size_t)(n + 3));
        if (sh) {
            sh[0] = "/bin/sh";
            sh[1] = (char *)found;
            for (int i = 1; i < n; i++) sh[1 + i] = args[i];
            sh[n + 1] = NULL;
            execve("/bin/sh", sh, with_shim(environ, 1));
        }
    }
    fprintf(stderr, "sandbox: cannot run '%s': %s\n", found, strerror(err));
    return err == ENOENT ? 127 : 126;
}

static void write_file(const char *path, const char *data) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path);
    size_t n = strlen(data);
    if (write(fd, data, n) != (ssize_t)n) fail(path);
    close(fd);
}

/* The verifier's capabilities (bwrap.py VERIFIER_CAPS); init drops every other one. */
static const int verifier_caps[] = {CAP_SETUID, CAP_SETGID, CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER, CAP_KILL};

static int kept(int cap) {
    for (size_t i = 0; i < sizeof verifier_caps / sizeof verifier_caps[0]; i++)
        if (verifier_caps[i] == cap) return 1;
    return 0;
}

/* PID 1 of a two-uid grading sandbox, exec'd by bwrap (argv: init SECCOMP_FD -- ARGV):
 * 1. remounts the sandbox's /proc with hidepid=2,gid=0, so the agent's programs see no
 *    process but their own: not the verifier's command lines (a check's expected value is
 *    often in its `sh -c` text), not /proc/1; the verifier (gid 0) still sees every process;
 * 2. drops CAP_SYS_ADMIN and CAP_SETPCAP (needed for 1 and 3 only) and every capability but
 *    the verifier's from the bounding set;
 * 3. loads the sandbox's seccomp filter (bwrap would have loaded it before 1, which needs
 *    mount(2));
 * 4. execs ARGV, the command server, which stays PID 1. */
static int init(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: skyrl-grading init SECCOMP_FD|-1 -- ARGV...\n");
        return 2;
    }
    if (mount("proc", "/proc", "proc", MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "hidepid=2,gid=0") != 0)
        fail("remount /proc with hidepid=2");
    for (int cap = 0; cap <= 63; cap++) {
        if (kept(cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail("drop a capability");
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, cap, 0, 0);
    }
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &head, data) != 0) fail("capget");
    for (int cap = 0; cap <= 63; cap++) {
        if (kept(cap)) continue;
        unsigned bit = 1u << (cap % 32);
        data[cap / 32].effective &= ~bit;
        data[cap / 32].permitted &= ~bit;
        data[cap / 32].inheritable &= ~bit;
    }
    if (syscall(SYS_capset, &head, data) != 0) fail("capset");
    int fd = atoi(argv[2]);
    if (fd >= 0) {
        static struct sock_filter program[4096];
        size_t got = 0;
        for (;;) {
            ssize_t n = read(fd, (char *)program + got, sizeof program - got);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail("read the seccomp filter");
            if (n == 0) break;
            got += (size_t)n;
            if (got == sizeof program) break;
        }
        close(fd);
        if (got == 0 || got % sizeof program[0] != 0) {
            errno = EINVAL;
            fail("the seccomp filter");
        }
        struct sock_fprog prog = {(unsigned short)(got / sizeof program[0]), program};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("no_new_privs");
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) fail("load the seccomp filter");
    }
    execvp(argv[4], argv + 4); /* the Python server is named `python3` */
    fail(argv[4]);
    return 126;
}

/* On the host, as root: a user namespace where uid 0 is host uid V and uid A is host uid A,
 * then exec ARGV as its uid 0 in this same process (so its pid stays the sandbox's). */
static int launch(int argc, char **argv) {
    if (argc < 6 || strcmp(argv[4], "--") != 0) {
        fprintf(stderr, "usage: skyrl-grading launch VERIFIER_UID AGENT_UID -- ARGV...\n");
        return 2;
    }
    long verifier = strtol(argv[2], NULL, 10), agent = strtol(argv[3], NULL, 10);
    if (verifier <= 0 || agent <= 0 || verifier == agent) {
        fprintf(stderr, "skyrl-grading: bad uids %s %s\n", argv[2], argv[3]);
        return 2;
    }
    /* Host root's supplementary groups (gid 0 among them) must not follow into the namespace:
     * unmapped there, but still checked by the kernel for file access. */
    if (setgroups(0, NULL) != 0) fail("setgroups");
    int go[2], done[2];
    if (pipe2(go, O_CLOEXEC) != 0 || pipe2(done, O_CLOEXEC) != 0) fail("pipe");
    pid_t self = getpid();
    pid_t child = fork();
    if (child < 0) fail("fork");
    if (child == 0) {
        /* Stays in the host's namespace: writes the parent's maps once it has unshared. */
        char c;
        close(go[1]);
        close(done[0]);
        if (read(go[0], &c, 1) != 1) _exit(1);
        char path[64], map[128];
        snprintf(map, sizeof map, "0 %ld 1\n%ld %ld 1\n", verifier, agent, agent);
        snprintf(path, sizeof path, "/proc/%d/uid_map", (int)self);
        write_file(path, map);
        snprintf(path, sizeof path, "/proc/%d/setgroups", (int)self);
        write_file(path, "allow"); /* only mapped gids can ever be set */
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)self);
        write_file(path, map);
        if (write(done[1], "x", 1) != 1) _exit(1);
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    if (unshare(CLONE_NEWUSER) != 0) fail("unshare(CLONE_NEWUSER)");
    if (write(go[1], "x", 1) != 1) fail("signal the map writer");
    char c;
    ssize_t got = read(done[0], &c, 1);
    int status = 0;
    waitpid(child, &status, 0);
    if (got != 1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "skyrl-grading: the uid maps could not be written\n");
        return 1;
    }
    close(go[1]);
    close(done[0]);
    if (setresgid(0, 0, 0) != 0) fail("setresgid(0)");
    if (setresuid(0, 0, 0) != 0) fail("setresuid(0)");
    execvp(argv[5], argv + 5);
    fail(argv[5]);
    return 126;
}

int main(int argc, char **argv) {
    if (argc >= 1 && !strcmp(base_name(argv[0]), "skyrl-as-agent")) return as_agent(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "exec")) return exec_first(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "launch")) return launch(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "init")) return init(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        puts("skyrl-grading ready");
        return 0;
    }
    fprintf(stderr, "usage: skyrl-grading launch|exec ... (or as skyrl-as-agent)\n");
    return 2;
}
#endif
