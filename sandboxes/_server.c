/*
 * The native command server that runs *inside* a sandbox (bwrap and local backends).
 *
 * It does exactly what sandboxes/_server.py does, over exactly the same wire protocol, but
 * starts in well under a millisecond: the Python server spends 10-20 ms of a sandbox's start
 * in the interpreter's own start-up, which made a cold sandbox 2.4-2.7x a bare `bwrap true`.
 * It is compiled once per source hash by sandboxes/_native.py (`cc -O2 -static`, so that it
 * also runs inside image roots without the host's libc), bound read-only into the sandbox and
 * exec'd by bwrap as the sandbox's PID 1.
 *
 * Wire format, both ways: a 4-byte big-endian length, then a `marshal` (version 2) dict.
 * Requests come from the host (trusted); replies are decoded on the host by a bounded decoder
 * (_process.py `_safe_loads`), so this file only ever *writes* the subset that decoder reads:
 * dict, str ('u'), bytes ('s'), int ('i', or 'l' beyond 32 bits), float ('g'), True, False.
 *
 * Requests (see _server.py for the reference semantics):
 *   exec   argv, env, cwd, stdin (bytes or None), timeout, limit (output cap: the first 3/4 and
 *          the last 1/4 of each stream are kept, totals counted), cpu_time, fsize, as_bytes.
 *          "cancel" frames that arrive while it runs kill it; EOF on stdin kills everything
 *          and exits.
 *   read   path, max_bytes (returns at most max_bytes + 1 bytes, the host checks the excess)
 *   write  path, data, mode, parents
 *   tar / untar
 *          archives are rare (upload/download), so they are not reimplemented here: the host
 *          sends a `helper` argv (python3 -I -S -c <_server.py> --archive) that this server
 *          runs with the request on its stdin; its stdout is the reply, relayed as is.
 *   exit   reply {} and exit.
 *
 * Differences from the Python server, all on the safe side:
 * - Commands are started with vfork()+execve(), so their rlimits, session and oom_score_adj
 *   are set in the child *before* execve: no window where a forked grandchild keeps the
 *   server's limits (the Python server needs its "lower my own soft limits" trick for that).
 * - Commands start with SIGPIPE at its default and an empty signal mask (the Python server
 *   passes on the interpreter's ignored SIGPIPE).
 * - Orphans are reaped as soon as SIGCHLD says so (a signalfd), not on a 0.5 s tick.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 16)
#define SCRIPT_THRESHOLD 100000 /* argv strings above ~128 KiB cannot be passed to execve */
#define DRAIN_S 0.05            /* after exit, how long to collect output still in the pipes */
#define MAX_DEPTH 8

/* ---- small helpers ----------------------------------------------------------------------- */

static void die(const char *what) {
    /* stderr is the sandbox's server.log on the host: the only place a message can go. */
    fprintf(stderr, "skyrl-server: %s: %s\n", what, strerror(errno));
    _exit(1);
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die("out of memory");
    return q;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct {
    unsigned char *p;
    size_t len, cap;
} buf_t;

static void buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void buf_put(buf_t *b, const void *data, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void buf_free(buf_t *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- marshal: decoding requests ------------------------------------------------------------ */

typedef enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_BYTES, V_LIST, V_DICT } vtype_t;

typedef struct value {
    vtype_t t;
    int64_t i;           /* V_BOOL, V_INT */
    double f;            /* V_FLOAT */
    char *s;             /* V_STR, V_BYTES: NUL-terminated copy */
    size_t n;            /* length of s, or number of items (dict: number of pairs) */
    struct value *items; /* V_LIST: n items; V_DICT: key0, value0, key1, value1, ... */
} value_t;

static void value_free(value_t *v) {
    if (v->t == V_LIST || v->t == V_DICT) {
        size_t count = v->t == V_DICT ? 2 * v->n : v->n;
        for (size_t k = 0; k < count; k++) value_free(&v->items[k]);
        free(v->items);
    }
    free(v->s);
    memset(v, 0, sizeof *v);
}

typedef struct {
    const unsigned char *p;
    size_t len, pos;
} reader_t;

static int rd_u32(reader_t *r, uint32_t *out) {
    if (r->len - r->pos < 4) return -1;
    const unsigned char *q = r->p + r->pos;
    *out = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    r->pos += 4;
    return 0;
}

/* Decodes one value; returns 0, or -1 for data this server never receives from the host. */
static int decode(reader_t *r, value_t *v, int depth) {
    memset(v, 0, sizeof *v);
    if (r->pos >= r->len || depth > MAX_DEPTH) return -1;
    unsigned char code = r->p[r->pos++] & 0x7f; /* 0x80 is FLAG_REF (marshal >= 3) */
    uint32_t n;
    switch (code) {
    case 'N': v->t = V_NONE; return 0;
    case 'T': v->t = V_BOOL; v->i = 1; return 0;
    case 'F': v->t = V_BOOL; v->i = 0; return 0;
    case 'i':
        if (rd_u32(r, &n)) return -1;
        v->t = V_INT;
        v->i = (int32_t)n;
        return 0;
    case 'l': { /* signed count of 15-bit digits, 2 bytes each, least significant first */
        if (rd_u32(r, &n)) return -1;
        int32_t count = (int32_t)n;
        uint32_t digits = count < 0 ? (uint32_t)(-(int64_t)count) : (uint32_t)count;
        if (digits > 4 || r->len - r->pos < 2 * (size_t)digits) return -1; /* < 2**60 */
        uint64_t acc = 0;
        for (uint32_t k = 0; k < digits; k++) {
            const unsigned char *q = r->p + r->pos + 2 * k;
            acc |= (uint64_t)(q[0] | q[1] << 8) << (15 * k);
        }
        r->pos += 2 * digits;
        v->t = V_INT;
        v->i = count < 0 ? -(int64_t)acc : (int64_t)acc;
        return 0;
    }
    case 'g':
        if (r->len - r->pos < 8) return -1;
        v->t = V_FLOAT;
        memcpy(&v->f, r->p + r->pos, 8); /* little-endian on every supported architecture */
        r->pos += 8;
        return 0;
    case 'u': case 't': case 's': case 'a': case 'A': case 'z': case 'Z': {
        if (code == 'z' || code == 'Z') { /* short ASCII (marshal >= 4): one length byte */
            if (r->pos >= r->len) return -1;
            n = r->p[r->pos++];
        } else if (rd_u32(r, &n)) {
            return -1;
        }
        if (r->len - r->pos < n) return -1;
        v->t = code == 's' ? V_BYTES : V_STR;
        v->s = xrealloc(NULL, (size_t)n + 1);
        memcpy(v->s, r->p + r->pos, n);
        v->s[n] = 0;
        v->n = n;
        r->pos += n;
        return 0;
    }
    case '[': case '(': case '<': case '>': {
        if (rd_u32(r, &n)) return -1;
        if (n > r->len - r->pos) return -1; /* every item takes at least one byte */
        v->t = V_LIST;
        v->items = xrealloc(NULL, sizeof(value_t) * n);
        memset(v->items, 0, sizeof(value_t) * n);
        v->n = n;
        for (uint32_t k = 0; k < n; k++)
            if (decode(r, &v->items[k], depth + 1)) return -1;
        return 0;
    }
    case '{': {
        v->t = V_DICT;
        size_t cap = 0;
        for (;;) {
            if (r->pos >= r->len) return -1;
            if (r->p[r->pos] == '0') {
                r->pos++;
                return 0;
            }
            if (2 * v->n + 2 > cap) {
                cap = cap ? 2 * cap : 32;
                v->items = xrealloc(v->items, sizeof(value_t) * cap);
            }
            memset(&v->items[2 * v->n], 0, 2 * sizeof(value_t));
            v->n++;
            if (decode(r, &v->items[2 * v->n - 2], depth + 1)) return -1;
            if (decode(r, &v->items[2 * v->n - 1], depth + 1)) return -1;
        }
    }
    default:
        return -1;
    }
}

static const value_t *get(const value_t *dict, const char *key) {
    if (!dict || dict->t != V_DICT) return NULL;
    for (size_t k = 0; k < dict->n; k++) {
        const value_t *kv = &dict->items[2 * k];
        if (kv->t == V_STR && strcmp(kv->s, key) == 0) return &dict->items[2 * k + 1];
    }
    return NULL;
}

/* Python truthiness of a number (None and missing count as false). */
static int64_t num(const value_t *v, int64_t fallback) {
    if (!v) return fallback;
    if (v->t == V_INT || v->t == V_BOOL) return v->i;
    if (v->t == V_FLOAT) return (int64_t)v->f;
    return fallback;
}

/* ---- marshal: encoding replies --------------------------------------------------------------- */

static void w_byte(buf_t *b, int c) {
    unsigned char ch = (unsigned char)c;
    buf_put(b, &ch, 1);
}

static void w_u32(buf_t *b, uint32_t x) {
    unsigned char q[4] = {x & 0xff, (x >> 8) & 0xff, (x >> 16) & 0xff, (x >> 24) & 0xff};
    buf_put(b, q, 4);
}

static void w_str(buf_t *b, const char *s) {
    size_t n = strlen(s);
    w_byte(b, 'u');
    w_u32(b, (uint32_t)n);
    buf_put(b, s, n);
}

static void w_bytes(buf_t *b, const void *data, size_t n) {
    w_byte(b, 's');
    w_u32(b, (uint32_t)n);
    buf_put(b, data, n);
}

/* As marshal writes an int: 'i' when it fits in 32 bits, else 'l' with 15-bit digits. */
static void w_int(buf_t *b, int64_t x) {
    if (x >= INT32_MIN && x <= INT32_MAX) {
        w_byte(b, 'i');
        w_u32(b, (uint32_t)(int32_t)x);
        return;
    }
    uint64_t mag = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    unsigned char digits[10];
    int count = 0;
    while (mag) {
        uint16_t d = mag & 0x7fff;
        digits[2 * count] = d & 0xff;
        digits[2 * count + 1] = d >> 8;
        count++;
        mag >>= 15;
    }
    w_byte(b, 'l');
    w_u32(b, (uint32_t)(x < 0 ? -count : count));
    buf_put(b, digits, 2 * (size_t)count);
}

static void w_float(buf_t *b, double f) {
    w_byte(b, 'g');
    buf_put(b, &f, 8);
}

static void w_bool(buf_t *b, int truth) { w_byte(b, truth ? 'T' : 'F'); }

/* ---- talking to the host ------------------------------------------------------------------ */

static buf_t in;       /* bytes read from the host, not yet consumed */
static size_t in_pos;  /* start of the unconsumed part */
static int in_eof;

static void write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            _exit(0); /* the host is gone */
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Sends a marshal payload (a reply) with its length header. */
static void send_payload(const unsigned char *payload, size_t n) {
    unsigned char head[4] = {n >> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff};
    write_all(1, head, 4);
    write_all(1, payload, n);
}

static void send_reply(buf_t *reply) {
    send_payload(reply->p, reply->len);
    buf_free(reply);
}

/* Reads what the host sent (one read); sets in_eof at EOF. */
static void fill(void) {
    if (in_pos == in.len) {
        in.len = in_pos = 0;
    } else if (in_pos > (1 << 20)) { /* drop consumed bytes now and then */
        memmove(in.p, in.p + in_pos, in.len - in_pos);
        in.len -= in_pos;
        in_pos = 0;
    }
    buf_reserve(&in, CHUNK);
    ssize_t got;
    do got = read(0, in.p + in.len, CHUNK);
    while (got < 0 && errno == EINTR);
    if (got <= 0) {
        if (got < 0 && errno == EAGAIN) return;
        in_eof = 1;
        return;
    }
    in.len += (size_t)got;
}

/* The next complete frame's payload (pointer into `in`, valid until the next fill), or NULL. */
static const unsigned char *peek_frame(size_t *size) {
    size_t avail = in.len - in_pos;
    if (avail < 4) return NULL;
    const unsigned char *q = in.p + in_pos;
    size_t n = (size_t)q[0] << 24 | (size_t)q[1] << 16 | (size_t)q[2] << 8 | q[3];
    if (avail < 4 + n) return NULL;
    *size = n;
    return q + 4;
}

static void consume_frame(size_t size) { in_pos += 4 + size; }

/* ---- children ------------------------------------------------------------------------------- */

static int sigchld_fd = -1; /* signalfd for SIGCHLD: wakes the loops when any child exits */
static pid_t cur_pid;       /* the command running now (0: none) */
static int cur_status;      /* its wait status, once cur_done */
static int cur_done;
static int cur_orphans;     /* orphans (re-parented to PID 1) reaped while it ran */

/* Collects every exited child. As PID 1 of the sandbox, orphans are re-parented to this
 * process: reaping them at once means no zombie lingers (a zombie still counts against the
 * pids limit and still answers `kill -0`). */
static void reap(void) {
    struct signalfd_siginfo info;
    while (read(sigchld_fd, &info, sizeof info) > 0) {
    }
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        if (pid == cur_pid && !cur_done) {
            cur_status = status;
            cur_done = 1;
        } else if (cur_pid && !cur_done) {
            cur_orphans++;
        }
    }
}

/* As the sandbox's PID 1: count the other processes still running (zombies aside), kill them
 * all at once (kill(-1) spares only PID 1) and reap them. Returns the count, or -1 when this
 * server is not the namespace's init (then nothing is killed). */
static int end_all(void) {
    if (getpid() != 1) return -1;
    int running = 0;
    DIR *proc = opendir("/proc");
    struct dirent *e;
    while (proc && (e = readdir(proc))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || strcmp(e->d_name, "1") == 0) continue;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%.20s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, stat, sizeof stat - 1);
        close(fd);
        if (n <= 0) continue;
        stat[n] = 0;
        char *paren = strrchr(stat, ')');
        if (paren && paren[1] == ' ' && paren[2] != 'Z') running++;
    }
    if (proc) closedir(proc);
    kill(-1, SIGKILL);
    double deadline = now_s() + 1.0;
    while (now_s() < deadline) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0) break; /* ECHILD: all reaped */
        if (pid == 0) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    return running;
}

static void kill_group(pid_t pid) {
    kill(-pid, SIGKILL); /* the command's session = its process group */
    kill(pid, SIGKILL);
}

/* Keeps the first head_cap and the last tail_cap bytes of a stream and counts all of them. */
typedef struct {
    buf_t head;
    unsigned char *ring; /* the tail, a circular buffer of tail_cap bytes */
    size_t head_cap, tail_cap, ring_len, ring_pos;
    uint64_t total;
} capture_t;

static void capture_init(capture_t *c, size_t head_cap, size_t tail_cap) {
    memset(c, 0, sizeof *c);
    c->head_cap = head_cap;
    c->tail_cap = tail_cap;
    if (tail_cap) c->ring = xrealloc(NULL, tail_cap);
}

static void capture_add(capture_t *c, const unsigned char *data, size_t n) {
    c->total += n;
    size_t room = c->head_cap - c->head.len;
    if (room) {
        size_t take = n < room ? n : room;
        buf_put(&c->head, data, take);
        data += take;
        n -= take;
    }
    if (!n || !c->tail_cap) return;
    if (n >= c->tail_cap) { /* only the last tail_cap bytes of this chunk survive */
        memcpy(c->ring, data + n - c->tail_cap, c->tail_cap);
        c->ring_pos = 0;
        c->ring_len = c->tail_cap;
        return;
    }
    for (size_t k = 0; k < n; k++) {
        c->ring[(c->ring_pos + c->ring_len) % c->tail_cap] = data[k];
        if (c->ring_len < c->tail_cap)
            c->ring_len++;
        else
            c->ring_pos = (c->ring_pos + 1) % c->tail_cap;
    }
}

/* The tail in order, as a fresh buffer of ring_len bytes. */
static unsigned char *capture_tail(const capture_t *c) {
    unsigned char *out = xrealloc(NULL, c->ring_len);
    for (size_t k = 0; k < c->ring_len; k++) out[k] = c->ring[(c->ring_pos + k) % c->tail_cap];
    return out;
}

static void capture_free(capture_t *c) {
    buf_free(&c->head);
    free(c->ring);
}

typedef struct {
    int resource;
    rlim_t soft, hard;
} limit_t;

/* What one command needs to start. */
typedef struct {
    char **argv;
    char **envp;
    const char *path; /* resolved argv[0] */
    const char *cwd;  /* NULL: the server's own */
    limit_t limits[4];
    int nlimits;
    int oom_first; /* oom_score_adj 1000: the OOM killer takes the command, not the server */
} spawn_t;

static volatile int spawn_errno;     /* written by the vfork child before it _exits */
static volatile int spawn_chdir_failed;

/* Starts the command in its own session with the given pipes as 0, 1, 2.
 * vfork: the child borrows this process's memory until execve, so the start costs no page
 * table copy; everything the child does before execve is async-signal-safe and writes only
 * the two volatile variables above. */
static pid_t spawn(const spawn_t *s, int in_fd, int out_fd, int err_fd) {
    spawn_errno = 0;
    spawn_chdir_failed = 0;
    pid_t pid = vfork();
    if (pid != 0) return pid; /* the parent resumes once the child has exec'd or exited */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    setsid();
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) goto fail;
    if (s->cwd && chdir(s->cwd) < 0) {
        spawn_chdir_failed = 1;
        goto fail;
    }
    if (s->oom_first) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "1000", 4) < 0) { /* best effort, as in the Python server */
            }
            close(fd);
        }
    }
    for (int k = 0; k < s->nlimits; k++) {
        struct rlimit cur, want = {s->limits[k].soft, s->limits[k].hard};
        if (getrlimit(s->limits[k].resource, &cur) == 0 && cur.rlim_max != RLIM_INFINITY) {
            /* Hard limits can only be lowered: no CAP_SYS_RESOURCE in here. */
            if (want.rlim_max > cur.rlim_max) want.rlim_max = cur.rlim_max;
            if (want.rlim_cur > want.rlim_max) want.rlim_cur = want.rlim_max;
        }
        setrlimit(s->limits[k].resource, &want);
    }
    execve(s->path, s->argv, s->envp);
fail:
    spawn_errno = errno;
    _exit(127);
}

/* Python's name for an OSError with this errno (what the host maps back to exceptions). */
static const char *os_error_name(int err) {
    switch (err) {
    case ENOENT: return "FileNotFoundError";
    case EISDIR: return "IsADirectoryError";
    case ENOTDIR: return "NotADirectoryError";
    case EACCES: case EPERM: return "PermissionError";
    case EEXIST: return "FileExistsError";
    case EAGAIN: case EALREADY: case EINPROGRESS: return "BlockingIOError";
    case EPIPE: case ESHUTDOWN: return "BrokenPipeError";
    case ESRCH: return "ProcessLookupError";
    case ETIMEDOUT: return "TimeoutError";
    case EINTR: return "InterruptedError";
    case ECHILD: return "ChildProcessError";
    default: return "OSError";
    }
}

/* str(OSError(err, strerror, path)) as Python prints it: "[Errno 2] No such ...: '/x'". */
static void os_error_message(char *out, size_t size, int err, const char *path) {
    if (path)
        snprintf(out, size, "[Errno %d] %s: '%s'", err, strerror(err), path);
    else
        snprintf(out, size, "[Errno %d] %s", err, strerror(err));
}

static void error_reply(buf_t *reply, const char *name, const char *message) {
    w_byte(reply, '{');
    w_str(reply, "error");
    w_str(reply, name);
    w_str(reply, "message");
    w_str(reply, message);
    w_byte(reply, '0');
}

static void os_error_reply(buf_t *reply, int err, const char *path) {
    char message[4096 + 256];
    os_error_message(message, sizeof message, err, path);
    error_reply(reply, os_error_name(err), message);
}

/* PATH lookup as the Python server does it (a name with a slash is used as is). */
static char *which(const char *name, const char *path_var) {
    if (strchr(name, '/')) return strdup(name);
    const char *p = path_var ? path_var : "/usr/local/bin:/usr/bin:/bin";
    for (;;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char candidate[PATH_MAX];
        if (snprintf(candidate, sizeof candidate, "%.*s/%s", n ? (int)n : 1, n ? p : ".",
                     name) < (int)sizeof candidate) {
            struct stat st;
            if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && access(candidate, X_OK) == 0)
                return strdup(candidate);
        }
        if (!end) return NULL;
        p = end + 1;
    }
}

/* The outcome of running one command. */
typedef struct {
    int started;      /* 0: it could not be started; message says why */
    char message[512];
    int not_found;    /* the program was not found (exit 127, else 126) */
    int status;       /* wait status */
    int timed_out, cancelled;
    int others;       /* end_all: other processes running when it exited (-1: not asked) */
    capture_t out, err;
    double duration;
} run_t;

/* Runs one command to completion: feeds its stdin, captures its output, enforces the
 * deadline and listens to the host for "cancel" (and EOF) meanwhile. */
static void run_command(const spawn_t *s, const value_t *stdin_v, double timeout, run_t *res,
                        size_t head_cap, size_t tail_cap, double started, int end_all_on_exit) {
    res->others = -1;
    capture_init(&res->out, head_cap, tail_cap);
    capture_init(&res->err, head_cap, tail_cap);
    int stdin_p[2] = {-1, -1}, out_p[2], err_p[2];
    int has_stdin = stdin_v && stdin_v->t == V_BYTES;
    if (has_stdin) {
        if (pipe2(stdin_p, O_CLOEXEC) < 0) die("pipe");
    } else {
        stdin_p[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (stdin_p[0] < 0) die("/dev/null");
    }
    if (pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0) die("pipe");
    cur_done = 0;
    cur_orphans = 0;
    cur_pid = spawn(s, stdin_p[0], out_p[1], err_p[1]);
    int spawn_err = spawn_errno;
    close(stdin_p[0]);
    close(out_p[1]);
    close(err_p[1]);
    if (cur_pid < 0 || spawn_err) {
        if (cur_pid < 0) spawn_err = errno;
        if (cur_pid > 0) { /* the child _exited: collect it now */
            waitpid(cur_pid, NULL, 0);
        }
        char reason[400];
        os_error_message(reason, sizeof reason, spawn_err, spawn_chdir_failed ? s->cwd : s->path);
        snprintf(res->message, sizeof res->message, "cannot run '%s': %s", s->argv[0], reason);
        cur_pid = 0;
        if (stdin_p[1] >= 0) close(stdin_p[1]);
        close(out_p[0]);
        close(err_p[0]);
        return;
    }
    res->started = 1;
    pid_t pid = cur_pid;
    int fds[2] = {out_p[0], err_p[0]};
    capture_t *caps[2] = {&res->out, &res->err};
    int open_readers = 2;
    fcntl(out_p[0], F_SETFL, O_NONBLOCK);
    fcntl(err_p[0], F_SETFL, O_NONBLOCK);
    int stdin_w = stdin_p[1];
    const unsigned char *pending = has_stdin ? (const unsigned char *)stdin_v->s : NULL;
    size_t pending_n = has_stdin ? stdin_v->n : 0;
    if (stdin_w >= 0) {
        fcntl(stdin_w, F_SETFL, O_NONBLOCK);
        if (!pending_n) {
            close(stdin_w);
            stdin_w = -1;
        }
    }
    double deadline = started + (timeout > 0 ? timeout : 3600.0);
    double drain_until = 0;
    unsigned char chunk[CHUNK];
    for (;;) {
        double now = now_s();
        if (cur_done && !drain_until) {
            /* Nothing the command left behind runs on past its exit (e.g. to rewrite a file
             * the host reads next); the count says whether anything was there. */
            if (end_all_on_exit) res->others = end_all();
            /* Exited: collect what is already in the pipes, but do not wait on background
             * processes that inherited them. */
            drain_until = now + DRAIN_S;
        }
        if (!cur_done && now >= deadline && !res->timed_out) {
            res->timed_out = 1;
            kill_group(pid);
        }
        if (cur_done && (!open_readers || now >= drain_until)) break;
        struct pollfd pf[5];
        int np = 0;
        pf[np++] = (struct pollfd){.fd = 0, .events = POLLIN};
        pf[np++] = (struct pollfd){.fd = sigchld_fd, .events = POLLIN};
        for (int k = 0; k < 2; k++)
            if (fds[k] >= 0) pf[np++] = (struct pollfd){.fd = fds[k], .events = POLLIN};
        if (stdin_w >= 0) pf[np++] = (struct pollfd){.fd = stdin_w, .events = POLLOUT};
        double until = drain_until ? drain_until : deadline;
        double wait = until - now;
        if (res->timed_out && !cur_done) wait = 0.01;
        int wait_ms = wait <= 0 ? 0 : (int)(wait * 1000) + 1;
        if (poll(pf, (nfds_t)np, wait_ms) < 0) {
            if (errno == EINTR) continue;
            die("poll");
        }
        for (int k = 0; k < np; k++) {
            if (!pf[k].revents) continue;
            int fd = pf[k].fd;
            if (fd == 0) {
                fill();
                if (in_eof) { /* the host is gone: stop everything */
                    kill_group(pid);
                    _exit(0);
                }
                /* Only "cancel" can arrive while a command runs (the host waits for this
                 * reply before it sends anything else); anything else stays queued. */
                size_t size;
                const unsigned char *payload;
                while ((payload = peek_frame(&size))) {
                    reader_t r = {payload, size, 0};
                    value_t msg;
                    int bad = decode(&r, &msg, 0);
                    const value_t *op = bad ? NULL : get(&msg, "op");
                    int is_cancel = op && op->t == V_STR && strcmp(op->s, "cancel") == 0;
                    value_free(&msg);
                    if (!is_cancel) break;
                    consume_frame(size);
                    if (!cur_done) {
                        res->cancelled = 1;
                        kill_group(pid);
                    }
                }
            } else if (fd == sigchld_fd) {
                reap();
            } else if (fd == stdin_w) {
                ssize_t w = write(stdin_w, pending, pending_n < CHUNK ? pending_n : CHUNK);
                if (w > 0) {
                    pending += w;
                    pending_n -= (size_t)w;
                } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                    pending_n = 0; /* the command closed its stdin (EPIPE) */
                }
                if (!pending_n) {
                    close(stdin_w);
                    stdin_w = -1;
                }
            } else {
                int which_fd = fd == fds[0] ? 0 : 1;
                ssize_t got = read(fd, chunk, sizeof chunk);
                if (got > 0) {
                    capture_add(caps[which_fd], chunk, (size_t)got);
                } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                    close(fd);
                    fds[which_fd] = -1;
                    open_readers--;
                }
            }
        }
    }
    for (int k = 0; k < 2; k++)
        if (fds[k] >= 0) close(fds[k]);
    if (stdin_w >= 0) close(stdin_w);
    res->status = cur_status;
    cur_pid = 0;
    res->duration = now_s() - started;
}

static int exit_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return -1;
}

/* argv / env from the request, as NULL-terminated arrays of strings owned by the request.
 * Returns an error message (Python's, for the same mistake) or NULL. */
static const char *string_list(const value_t *list, char ***out) {
    if (!list || list->t != V_LIST || list->n == 0) return "argv must be a non-empty list";
    char **arr = xrealloc(NULL, sizeof(char *) * (list->n + 1));
    for (size_t k = 0; k < list->n; k++) {
        const value_t *item = &list->items[k];
        if (item->t != V_STR) {
            free(arr);
            return "argv items must be str";
        }
        if (strlen(item->s) != item->n) {
            free(arr);
            return "embedded null byte";
        }
        arr[k] = item->s;
    }
    arr[list->n] = NULL;
    *out = arr;
    return NULL;
}

static const char *env_list(const value_t *dict, char ***out, const char **path_var) {
    size_t n = dict && dict->t == V_DICT ? dict->n : 0;
    char **arr = xrealloc(NULL, sizeof(char *) * (n + 1));
    *path_var = NULL;
    for (size_t k = 0; k < n; k++) {
        const value_t *key = &dict->items[2 * k], *val = &dict->items[2 * k + 1];
        if (key->t != V_STR || val->t != V_STR) goto bad;
        if (strlen(key->s) != key->n || strlen(val->s) != val->n) {
            for (size_t j = 0; j < k; j++) free(arr[j]);
            free(arr);
            return "embedded null byte";
        }
        if (!key->n || strchr(key->s, '=')) {
            for (size_t j = 0; j < k; j++) free(arr[j]);
            free(arr);
            return "illegal environment variable name";
        }
        arr[k] = xrealloc(NULL, key->n + val->n + 2);
        sprintf(arr[k], "%s=%s", key->s, val->s);
        if (strcmp(key->s, "PATH") == 0) *path_var = val->s;
        continue;
    bad:
        for (size_t j = 0; j < k; j++) free(arr[j]);
        free(arr);
        return "env keys and values must be str";
    }
    arr[n] = NULL;
    *out = arr;
    return NULL;
}

static void free_env(char **envp) {
    if (!envp) return;
    for (char **e = envp; *e; e++) free(*e);
    free(envp);
}

/* The reply of an exec that could not start (same shape and wording as the Python server's). */
static void failed_reply(buf_t *reply, const char *message, int not_found, double started) {
    char err[700];
    int n = snprintf(err, sizeof err, "sandbox: %s\n", message);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof err) n = sizeof err - 1;
    w_byte(reply, '{');
    w_str(reply, "exit_code"); w_int(reply, not_found ? 127 : 126);
    w_str(reply, "timed_out"); w_bool(reply, 0);
    w_str(reply, "cancelled"); w_bool(reply, 0);
    w_str(reply, "out_head"); w_bytes(reply, "", 0);
    w_str(reply, "out_tail"); w_bytes(reply, "", 0);
    w_str(reply, "out_total"); w_int(reply, 0);
    w_str(reply, "err_head"); w_bytes(reply, err, (size_t)n);
    w_str(reply, "err_tail"); w_bytes(reply, "", 0);
    w_str(reply, "err_total"); w_int(reply, n);
    w_str(reply, "duration"); w_float(reply, now_s() - started);
    w_byte(reply, '0');
}

static unsigned script_counter;

/* A long `sh -c SCRIPT` goes through a private file: a single argv string above the
 * kernel's 128 KiB MAX_ARG_STRLEN cannot be passed to execve. Returns the file's path. */
static char *script_file(const char *script, size_t n) {
    char path[128];
    for (int attempt = 0; attempt < 16; attempt++) {
        snprintf(path, sizeof path, "/tmp/.skyrl-script-%d-%u", (int)getpid(), ++script_counter);
        /* O_EXCL|O_NOFOLLOW: code in the sandbox may have planted something at that name. */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            return NULL;
        }
        while (n) {
            ssize_t w = write(fd, script, n);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                int err = errno;
                close(fd);
                unlink(path);
                errno = err;
                return NULL;
            }
            script += w;
            n -= (size_t)w;
        }
        close(fd);
        return strdup(path);
    }
    errno = EEXIST;
    return NULL;
}

static void op_exec(const value_t *req, buf_t *reply) {
    double started = now_s();
    char **argv = NULL, **envp = NULL;
    const char *path_var;
    const char *problem = string_list(get(req, "argv"), &argv);
    if (!problem) problem = env_list(get(req, "env"), &envp, &path_var);
    if (problem) {
        free(argv);
        free_env(envp);
        error_reply(reply, "ValueError", problem);
        return;
    }
    const value_t *cwd_v = get(req, "cwd");
    const char *cwd = cwd_v && cwd_v->t == V_STR && cwd_v->n ? cwd_v->s : NULL;
    char *script = NULL;
    size_t argc = get(req, "argv")->n;
    /* A two-uid grading sandbox runs `HELPER exec -- sh -c SCRIPT` (bwrap.py `_command`). */
    int at = argc == 6 && strcmp(argv[1], "exec") == 0 && strcmp(argv[2], "--") == 0 ? 3 : 0;
    if (argc == at + 3 && strcmp(argv[at + 1], "-c") == 0 && strlen(argv[at + 2]) > SCRIPT_THRESHOLD) {
        script = script_file(argv[at + 2], strlen(argv[at + 2]));
        if (!script) {
            char message[300];
            os_error_message(message, sizeof message, errno, "/tmp/.skyrl-script");
            free(argv);
            free_env(envp);
            error_reply(reply, os_error_name(errno), message);
            return;
        }
        argv[at + 1] = script;
        argv[at + 2] = NULL;
    }
    char *path = which(argv[0], path_var);
    if (!path) {
        char message[400];
        snprintf(message, sizeof message, "%.300s: command not found", argv[0]);
        failed_reply(reply, message, 1, started);
    } else {
        spawn_t s = {.argv = argv, .envp = envp, .path = path, .cwd = cwd, .oom_first = 1};
        int64_t fsize = num(get(req, "fsize"), 0);
        /* Core dumps: off (soft 0) as in a container, but `ulimit -c unlimited` works (hard
         * unlimited, or the disk cap when that is an rlimit: RLIMIT_FSIZE does not bound a
         * dump). They land in the dumping process's cwd (the capped workspace or /tmp). */
        s.limits[s.nlimits++] = (limit_t){RLIMIT_CORE, 0, fsize > 0 ? (rlim_t)fsize : RLIM_INFINITY};
        int64_t cpu = num(get(req, "cpu_time"), 0);
        if (cpu > 0) s.limits[s.nlimits++] = (limit_t){RLIMIT_CPU, (rlim_t)cpu, (rlim_t)cpu + 1};
        if (fsize > 0) s.limits[s.nlimits++] = (limit_t){RLIMIT_FSIZE, (rlim_t)fsize, (rlim_t)fsize};
        int64_t as = num(get(req, "as_bytes"), 0);
        if (as > 0) s.limits[s.nlimits++] = (limit_t){RLIMIT_AS, (rlim_t)as, (rlim_t)as};
        int64_t limit = num(get(req, "limit"), 1 << 16);
        if (limit < 0) limit = 0;
        const value_t *tv = get(req, "timeout");
        double timeout = tv && tv->t == V_FLOAT ? tv->f : (double)num(tv, 0);
        run_t res;
        memset(&res, 0, sizeof res);
        run_command(&s, get(req, "stdin"), timeout, &res, (size_t)(limit - limit / 4),
                    (size_t)(limit / 4), started, num(get(req, "end_all"), 0) != 0);
        if (!res.started) {
            failed_reply(reply, res.message, 0, started);
        } else {
            capture_t *caps[2] = {&res.out, &res.err};
            const char *names[2][3] = {{"out_head", "out_tail", "out_total"},
                                       {"err_head", "err_tail", "err_total"}};
            w_byte(reply, '{');
            w_str(reply, "exit_code"); w_int(reply, exit_code(res.status));
            w_str(reply, "timed_out"); w_bool(reply, res.timed_out);
            w_str(reply, "cancelled"); w_bool(reply, res.cancelled);
            w_str(reply, "others"); w_int(reply, res.others);
            w_str(reply, "orphans"); w_int(reply, getpid() == 1 ? cur_orphans : -1);
            for (int k = 0; k < 2; k++) {
                unsigned char *tail = capture_tail(caps[k]);
                w_str(reply, names[k][0]); w_bytes(reply, caps[k]->head.p, caps[k]->head.len);
                w_str(reply, names[k][1]); w_bytes(reply, tail, caps[k]->ring_len);
                w_str(reply, names[k][2]); w_int(reply, (int64_t)caps[k]->total);
                free(tail);
            }
            w_str(reply, "duration"); w_float(reply, res.duration);
            w_byte(reply, '0');
        }
        capture_free(&res.out);
        capture_free(&res.err);
    }
    free(path);
    if (script) {
        unlink(script);
        free(script);
    }
    free(argv);
    free_env(envp);
}

static void op_read(const value_t *req, buf_t *reply) {
    const value_t *path = get(req, "path");
    if (!path || path->t != V_STR) {
        error_reply(reply, "KeyError", "'path'");
        return;
    }
    int64_t max_bytes = num(get(req, "max_bytes"), (int64_t)1 << 30);
    if (max_bytes < 0) max_bytes = 0;
    int fd = open(path->s, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        fd = -1;
        errno = EISDIR;
    }
    if (fd < 0) {
        os_error_reply(reply, errno, path->s);
        return;
    }
    /* At most max_bytes + 1: one byte over tells the host the file is too large. */
    uint64_t want = (uint64_t)max_bytes + 1;
    buf_t data = {0};
    while (data.len < want) {
        size_t step = want - data.len < CHUNK ? (size_t)(want - data.len) : CHUNK;
        buf_reserve(&data, step);
        ssize_t got = read(fd, data.p + data.len, step);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int err = errno;
            close(fd);
            buf_free(&data);
            os_error_reply(reply, err, NULL);
            return;
        }
        if (got == 0) break;
        data.len += (size_t)got;
    }
    close(fd);
    w_byte(reply, '{');
    w_str(reply, "data");
    w_bytes(reply, data.p ? data.p : (unsigned char *)"", data.len);
    w_byte(reply, '0');
    buf_free(&data);
}

/* os.makedirs(path, exist_ok=True); returns 0 or -1 with errno and the failing path. */
static int make_dirs(char *path, char *failed, size_t failed_size) {
    struct stat st;
    if (mkdir(path, 0777) == 0) return 0;
    if (errno == EEXIST) {
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
        snprintf(failed, failed_size, "%s", path);
        errno = EEXIST;
        return -1;
    }
    if (errno != ENOENT) {
        snprintf(failed, failed_size, "%s", path);
        return -1;
    }
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) {
        snprintf(failed, failed_size, "%s", path);
        errno = ENOENT;
        return -1;
    }
    *slash = 0;
    int rc = make_dirs(path, failed, failed_size);
    *slash = '/';
    if (rc) return rc;
    if (mkdir(path, 0777) == 0 || (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return 0;
    snprintf(failed, failed_size, "%s", path);
    return -1;
}

static void op_write(const value_t *req, buf_t *reply) {
    const value_t *path = get(req, "path"), *data = get(req, "data");
    if (!path || path->t != V_STR) {
        error_reply(reply, "KeyError", "'path'");
        return;
    }
    if (!data || (data->t != V_BYTES && data->t != V_STR)) {
        error_reply(reply, "KeyError", "'data'");
        return;
    }
    mode_t mode = (mode_t)num(get(req, "mode"), 0644);
    if (num(get(req, "parents"), 0)) {
        char *parent = strdup(path->s);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = 0;
            char failed[PATH_MAX];
            if (make_dirs(parent, failed, sizeof failed)) {
                int err = errno;
                free(parent);
                os_error_reply(reply, err, failed);
                return;
            }
        }
        free(parent);
    }
    int fd = open(path->s, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        os_error_reply(reply, errno, path->s);
        return;
    }
    const char *p = data->s ? data->s : "";
    size_t n = data->n;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            close(fd);
            os_error_reply(reply, err, NULL);
            return;
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
    if (chmod(path->s, mode) < 0) { /* exactly `mode`, whatever the umask */
        os_error_reply(reply, errno, path->s);
        return;
    }
    w_byte(reply, '{');
    w_byte(reply, '0');
}

/* tar / untar: run the host's helper (Python's tarfile, in the sandbox) with the request on
 * its stdin, and relay its stdout, a complete marshal reply, as this server's reply. */
static void op_archive(const value_t *req, const unsigned char *payload, size_t size,
                       buf_t *reply) {
    double started = now_s();
    char **argv = NULL, **envp = NULL;
    const char *path_var;
    const char *problem = string_list(get(req, "helper"), &argv);
    if (problem) {
        error_reply(reply, "SandboxError",
                    "the native command server needs a helper command for tar/untar");
        return;
    }
    problem = env_list(get(req, "env"), &envp, &path_var);
    if (problem) {
        free(argv);
        error_reply(reply, "ValueError", problem);
        return;
    }
    char *path = which(argv[0], path_var ? path_var : "/usr/local/bin:/usr/bin:/bin");
    if (!path) {
        char message[400];
        snprintf(message, sizeof message,
                 "%.300s: command not found (upload/download unpack archives with Python "
                 "inside the sandbox)", argv[0]);
        free(argv);
        free_env(envp);
        error_reply(reply, "FileNotFoundError", message);
        return;
    }
    /* The reply may hold the archive (max_bytes) plus keys and an error message. */
    int64_t cap = num(get(req, "max_bytes"), 0);
    if (cap < 0) cap = 0;
    cap += 1 << 16;
    value_t stdin_v = {.t = V_BYTES, .s = (char *)payload, .n = size};
    spawn_t s = {.argv = argv, .envp = envp, .path = path};
    s.limits[s.nlimits++] = (limit_t){RLIMIT_CORE, 0, 0};
    const value_t *tv = get(req, "timeout");
    double timeout = tv && tv->t == V_FLOAT ? tv->f : (double)num(tv, 0);
    run_t res;
    memset(&res, 0, sizeof res);
    run_command(&s, &stdin_v, timeout, &res, (size_t)cap + 1, 0, started, 0);
    if (!res.started) {
        error_reply(reply, "SandboxError", res.message);
    } else if (res.out.total > (uint64_t)cap) {
        error_reply(reply, "_TooLarge", "the archive is larger than max_bytes");
    } else if (res.timed_out || res.cancelled || exit_code(res.status) != 0 || !res.out.total) {
        char message[1200];
        size_t n = res.err.head.len < 1000 ? res.err.head.len : 1000;
        snprintf(message, sizeof message, "archive helper failed (exit %d%s): %.*s",
                 exit_code(res.status), res.timed_out ? ", timed out" : "", (int)n,
                 res.err.head.p ? (char *)res.err.head.p : "");
        error_reply(reply, "SandboxError", message);
    } else {
        buf_put(reply, res.out.head.p, res.out.head.len);
    }
    capture_free(&res.out);
    capture_free(&res.err);
    free(path);
    free(argv);
    free_env(envp);
}

int main(void) {
    /* First thing: non-dumpable. The commands this server runs share its uid; a
     * non-dumpable process can be neither ptrace-attached nor read or written through
     * /proc/PID/mem or /proc/PID/fd by them. It resets at execve, so commands stay ordinary. */
    int nondumpable =
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0;
    /* Writes to a command's closed stdin must fail with EPIPE, not kill the server. */
    signal(SIGPIPE, SIG_IGN);
    /* SIGCHLD is read from a signalfd, so the poll loops wake when any child exits. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    sigchld_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigchld_fd < 0) die("signalfd");
    /* The pipes to the host must not leak into commands (they get their own 0, 1, 2). */
    fcntl(0, F_SETFD, FD_CLOEXEC);
    fcntl(1, F_SETFD, FD_CLOEXEC);

    buf_t hello = {0};
    w_byte(&hello, '{');
    w_str(&hello, "ready"); w_bool(&hello, 1);
    w_str(&hello, "pid"); w_int(&hello, getpid());
    w_str(&hello, "nondumpable"); w_bool(&hello, nondumpable);
    w_str(&hello, "server"); w_str(&hello, "native");
    w_byte(&hello, '0');
    send_reply(&hello);

    for (;;) {
        size_t size;
        const unsigned char *payload = peek_frame(&size);
        if (!payload) {
            if (in_eof) return 0;
            struct pollfd pf[2] = {{.fd = 0, .events = POLLIN}, {.fd = sigchld_fd, .events = POLLIN}};
            if (poll(pf, 2, -1) < 0) {
                if (errno == EINTR) continue;
                die("poll");
            }
            if (pf[1].revents) reap();
            if (pf[0].revents) fill();
            continue;
        }
        /* Decode (strings are copied) and consume the frame before handling it: while a
         * command runs, only frames that arrive after this one are looked at. */
        reader_t r = {payload, size, 0};
        value_t msg;
        buf_t reply = {0};
        int bad = decode(&r, &msg, 0) || msg.t != V_DICT;
        const value_t *op = bad ? NULL : get(&msg, "op");
        const char *name = op && op->t == V_STR ? op->s : "";
        unsigned char *raw = NULL; /* archive ops forward the request as is */
        if (!bad && (strcmp(name, "tar") == 0 || strcmp(name, "untar") == 0)) {
            raw = xrealloc(NULL, size);
            memcpy(raw, payload, size);
        }
        consume_frame(size);
        if (bad) {
            error_reply(&reply, "ValueError", "malformed request");
        } else if (strcmp(name, "cancel") == 0) {
            value_free(&msg); /* arrived after its exec had already finished */
            continue;
        } else if (strcmp(name, "exit") == 0) {
            w_byte(&reply, '{');
            w_byte(&reply, '0');
            send_reply(&reply);
            return 0;
        } else if (strcmp(name, "exec") == 0) {
            op_exec(&msg, &reply);
        } else if (strcmp(name, "read") == 0) {
            op_read(&msg, &reply);
        } else if (strcmp(name, "write") == 0) {
            op_write(&msg, &reply);
        } else if (raw) {
            op_archive(&msg, raw, size, &reply);
        } else {
            char message[300];
            snprintf(message, sizeof message, "unknown op '%.200s'", name);
            error_reply(&reply, "ValueError", message);
        }
        free(raw);
        value_free(&msg);
        send_reply(&reply);
    }
}
