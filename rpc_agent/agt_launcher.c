/* rpc_agent/agt_launcher.c -- the launcher process and the seccomp filter.
**
** The launcher is forked from the agent while the agent has one thread, and stays
** single-threaded: forking it is always safe (no lock of malloc or of a sanitizer runtime
** can be held by another thread).  It probes the sandbox once, then serves launch requests
** one at a time: read a batch, fork a child that runs it (agt__child_main), report the
** child's pid, wait for it, report its wait status.  The agent kills a child directly
** (kill of its process group) when a job times out; the launcher only reaps.
**
** The seccomp allow-list (what a child may call once its kernels run):
**   write (events to the agent), futex and sched_yield (the thread pool), clock_gettime,
**   clock_getres, gettimeofday, nanosleep, clock_nanosleep (timing, cool-down),
**   rt_sigreturn, rt_sigprocmask, restart_syscall, exit, exit_group.
** Everything else kills the whole child (SIGSYS).  Sanitizer builds also allow what the
** sanitizer runtime needs to print a report (mmap, munmap, mprotect, madvise, sigaltstack,
** rt_sigaction, getpid, gettid, tgkill, openat, read, close, fstat, newfstatat, readlinkat,
** prctl, sched_getaffinity, lseek, pread64); docs/security.md says so. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc_agent/agt_int.h"

const char *agt__signal_text(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV (invalid memory access: out of bounds or a bad pointer)";
    case SIGBUS:
        return "SIGBUS (misaligned or unmapped memory access)";
    case SIGFPE:
        return "SIGFPE (arithmetic exception, e.g. integer division by zero)";
    case SIGILL:
        return "SIGILL (illegal instruction: the target's CPU features do not match this CPU)";
    case SIGSYS:
        return "SIGSYS (a system call the sandbox forbids)";
    case SIGABRT:
        return "SIGABRT (aborted)";
    case SIGKILL:
        return "SIGKILL (killed: out of memory, or by the agent)";
    case SIGXCPU:
        return "SIGXCPU (CPU time limit of the sandbox)";
    case SIGTRAP:
        return "SIGTRAP (trap instruction)";
    default:
        return "a signal";
    }
}

int agt__seccomp_enter(char *err, size_t n)
{
    static const int allowed[] = {
        SCMP_SYS(write),          SCMP_SYS(futex),           SCMP_SYS(sched_yield),
        SCMP_SYS(clock_gettime),  SCMP_SYS(clock_getres),    SCMP_SYS(gettimeofday),
        SCMP_SYS(nanosleep),      SCMP_SYS(clock_nanosleep), SCMP_SYS(rt_sigreturn),
        SCMP_SYS(rt_sigprocmask), SCMP_SYS(restart_syscall), SCMP_SYS(exit),
        SCMP_SYS(exit_group),
    };
#if AGT_SANITIZER
    static const int sanitizer[] = {
        SCMP_SYS(mmap),
        SCMP_SYS(munmap),
        SCMP_SYS(mprotect),
        SCMP_SYS(madvise),
        SCMP_SYS(sigaltstack),
        SCMP_SYS(rt_sigaction),
        SCMP_SYS(getpid),
        SCMP_SYS(gettid),
        SCMP_SYS(tgkill),
        SCMP_SYS(openat),
        SCMP_SYS(read),
        SCMP_SYS(close),
        SCMP_SYS(fstat),
        SCMP_SYS(newfstatat),
        SCMP_SYS(readlinkat),
        SCMP_SYS(prctl),
        SCMP_SYS(sched_getaffinity),
        SCMP_SYS(lseek),
        SCMP_SYS(pread64),
    };
#endif
    scmp_filter_ctx ctx;
    int rc;

    if ((ctx = seccomp_init(SCMP_ACT_KILL_PROCESS)) == NULL &&
        (ctx = seccomp_init(SCMP_ACT_KILL)) == NULL) {
        snprintf(err, n, "seccomp_init failed");
        return -ENOMEM;
    }
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
    for (size_t i = 0; rc == 0 && i < AT_ARRAY_LEN(allowed); i++)
        if (allowed[i] >= 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed[i], 0);
#if AGT_SANITIZER
    for (size_t i = 0; rc == 0 && i < AT_ARRAY_LEN(sanitizer); i++)
        if (sanitizer[i] >= 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, sanitizer[i], 0);
#endif
    if (rc == 0) rc = seccomp_load(ctx);
    /* the context is not released: free() might call munmap, which is no longer allowed */
    if (rc != 0) {
        snprintf(err, n, "seccomp: %s", strerror(-rc));
        seccomp_release(ctx);
        return rc;
    }
    return 0;
}

/* Fork a child that enters the filter and then makes a forbidden call: it must die of
** SIGSYS.  Returns 1 when seccomp works; else 0 with the reason in caps->note. */
static int probe_seccomp(agt_caps *caps)
{
    int st;
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(caps->note, sizeof caps->note, "seccomp: cannot fork the probe: %s",
                 strerror(errno));
        return 0;
    }
    if (pid == 0) {
        char err[128];
        int rc = agt__seccomp_enter(err, sizeof err);
        if (rc != 0) _exit(100 + (-rc > 100 ? 99 : -rc));
        syscall(SYS_getppid); /* forbidden: the filter must kill us here */
        _exit(2);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) return 1;
    if (WIFEXITED(st) && WEXITSTATUS(st) >= 100)
        snprintf(caps->note, sizeof caps->note,
                 "seccomp unavailable: %s (qemu-user and some "
                 "kernels have no seccomp): kernels run with process isolation, limits and "
                 "timeouts only",
                 strerror(WEXITSTATUS(st) - 100));
    else
        snprintf(caps->note, sizeof caps->note,
                 "seccomp filter not enforced here: kernels run "
                 "with process isolation, limits and timeouts only");
    return 0;
}

static void launcher_main(int ctl, int ev) __attribute__((noreturn));
static void launcher_main(int ctl, int ev)
{
    agt_caps caps;
    agt_report rep;
    memset(&caps, 0, sizeof caps);
    caps.seccomp = probe_seccomp(&caps);
    memset(&rep, 0, sizeof rep);
    rep.kind = AGT_REP_CAPS;
    rep.status = caps.seccomp;
    if (at_fd_write_all(ctl, &rep, sizeof rep) != 0 ||
        at_fd_write_all(ctl, caps.note, sizeof caps.note) != 0)
        _exit(1);
    for (;;) {
        agt_launch_hdr h;
        uint8_t *buf;
        pid_t pid;
        int st;
        if (at_fd_read_all(ctl, &h, sizeof h) != 0) _exit(0); /* the agent closed its end */
        if (h.magic != AGT_LAUNCH_MAGIC || h.len == 0 || h.len > AT_WIRE_MAX_MSG) _exit(1);
        if ((buf = malloc(h.len)) == NULL || at_fd_read_all(ctl, buf, h.len) != 0) _exit(1);
        pid = fork();
        if (pid == 0) {
            close(ctl);
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (h.flags & AGT_LAUNCH_CUDA)
                agt__cuda_child_main(buf, h.len, ev, (int)h.reserved);
            agt__child_main(buf, h.len, ev, h.flags, h.mem_limit);
        }
        free(buf);
        memset(&rep, 0, sizeof rep);
        if (pid < 0) {
            rep.kind = AGT_REP_FORK_FAILED;
            rep.status = errno;
            if (at_fd_write_all(ctl, &rep, sizeof rep) != 0) _exit(1);
            continue;
        }
        setpgid(pid, pid); /* also here: no race with the agent's kill of the group */
        rep.kind = AGT_REP_STARTED;
        rep.pid = pid;
        if (at_fd_write_all(ctl, &rep, sizeof rep) != 0) {
            kill(pid, SIGKILL);
            _exit(1);
        }
        while (waitpid(pid, &st, 0) < 0) {
            if (errno != EINTR) {
                st = 0;
                break;
            }
        }
        rep.kind = AGT_REP_EXITED;
        rep.pid = pid;
        rep.status = st;
        if (at_fd_write_all(ctl, &rep, sizeof rep) != 0) _exit(1);
    }
}

static int thread_count(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = 1;
    if (f == NULL) return 1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

at_err agt_launcher_open(agt_launcher **out, char *errmsg, size_t n)
{
    agt_launcher *l;
    int ctl[2], ev[2];
    pid_t parent = getpid();
    agt_report rep;
    struct pollfd pfd;
    int threads = thread_count();

    *out = NULL;
    if ((l = at_calloc(1, sizeof *l)) == NULL) return AT_ENOMEM;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0) {
        snprintf(errmsg, n, "socketpair: %s", strerror(errno));
        at_free(l);
        return AT_EIO;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev) != 0) {
        snprintf(errmsg, n, "socketpair: %s", strerror(errno));
        close(ctl[0]);
        close(ctl[1]);
        at_free(l);
        return AT_EIO;
    }
    if (threads > 1) /* glibc's fork is safe with threads; sanitizer runtimes are not */
        at_log_debug("agent: starting the launcher from a process with %d threads (start it "
                     "first thing in main; a sanitizer build may hang in it)",
                     threads);
    fflush(stdout);
    fflush(stderr);
    l->pid = fork();
    if (l->pid < 0) {
        snprintf(errmsg, n, "fork: %s", strerror(errno));
        close(ctl[0]);
        close(ctl[1]);
        close(ev[0]);
        close(ev[1]);
        at_free(l);
        return AT_EIO;
    }
    if (l->pid == 0) {
        close(ctl[0]);
        close(ev[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);
        signal(SIGPIPE, SIG_IGN);
        signal(SIGINT, SIG_IGN); /* the agent decides when we end */
        signal(SIGTERM, SIG_DFL);
        launcher_main(ctl[1], ev[1]);
    }
    close(ctl[1]);
    close(ev[1]);
    l->ctl_fd = ctl[0];
    l->ev_fd = ev[0];
    pfd.fd = l->ctl_fd;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, 20000) != 1 || at_fd_read_all(l->ctl_fd, &rep, sizeof rep) != 0 ||
        rep.kind != AGT_REP_CAPS || at_fd_read_all(l->ctl_fd, l->caps.note, sizeof l->caps.note) != 0) {
        snprintf(errmsg, n, "the launcher did not start");
        agt_launcher_close(l);
        return AT_EIO;
    }
    l->caps.note[sizeof l->caps.note - 1] = 0;
    l->caps.seccomp = rep.status == 1;
    l->caps.rlimits = 1;
    *out = l;
    return AT_OK;
}

pid_t agt_launcher_pid(const agt_launcher *l)
{
    return l->pid;
}

void agt_launcher_close(agt_launcher *l)
{
    int st;
    if (l == NULL) return;
    close(l->ctl_fd); /* the launcher exits on EOF */
    close(l->ev_fd);
    if (l->pid > 0) {
        pid_t r;
        for (int i = 0; i < 200; i++) {
            if ((r = waitpid(l->pid, &st, WNOHANG)) != 0) break;
            usleep(10000);
        }
        if (waitpid(l->pid, &st, WNOHANG) == 0) {
            kill(l->pid, SIGKILL);
            waitpid(l->pid, &st, 0);
        }
    }
    at_free(l);
}

int agt_launcher_idle(agt_launcher *l)
{
    uint8_t junk[256];
    struct pollfd p;
    if (l == NULL || l->pid <= 0) return 0;
    while (recv(l->ev_fd, junk, sizeof junk, MSG_DONTWAIT | MSG_TRUNC) > 0)
        ; /* events of a child whose agent is gone */
    p.fd = l->ctl_fd; /* readable: a report nobody read, or the launcher's EOF */
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, 0) != 0) return 0;
    return kill(l->pid, 0) == 0;
}

const agt_caps *agt_launcher_caps(const agt_launcher *l)
{
    return &l->caps;
}
