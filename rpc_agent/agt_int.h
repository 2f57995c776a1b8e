/* rpc_agent/agt_int.h -- what only rpc_agent/ sees: the launcher's wire (between the agent
** and its launcher process), the sandbox child, the seccomp filter. */
#ifndef AGT_INT_H
#define AGT_INT_H

#include <sys/types.h>

#include "rpc_agent/rpc_agent.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AGT_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGT_SANITIZER 1
#endif
#endif
#ifndef AGT_SANITIZER
#define AGT_SANITIZER 0
#endif

/* Agent -> launcher: this header, then 'len' bytes of an SBX_BATCH frame. */
#define AGT_LAUNCH_MAGIC 0x41544c42u /* "ATLB" */
typedef struct agt_launch_hdr {
    uint32_t magic;
    uint32_t len;
    uint32_t flags; /* AGT_LAUNCH_* */
    uint32_t reserved;
    int64_t mem_limit; /* RLIMIT_AS of the child; 0: none */
} agt_launch_hdr;

enum { AGT_LAUNCH_SECCOMP = 1 };

/* Launcher -> agent: fixed-size reports. */
enum { AGT_REP_STARTED = 1, AGT_REP_EXITED = 2, AGT_REP_FORK_FAILED = 3, AGT_REP_CAPS = 4 };
typedef struct agt_report {
    uint32_t kind;
    int32_t pid;
    int32_t status; /* EXITED: wait status; FORK_FAILED: errno; CAPS: seccomp works (0/1) */
    int32_t err;    /* CAPS: errno of the failed probe, or -1 when it was not enforced */
} agt_report;

struct agt_launcher {
    pid_t pid;  /* the launcher process */
    int ctl_fd; /* stream socket: launch requests out, reports in */
    int ev_fd;  /* seqpacket socket: events from sandbox children */
    agt_caps caps;
};

/* Enter the seccomp allow-list filter on every thread of the calling process (TSYNC).
** 0 on success; -errno (and a sentence in err) when the platform refuses it. */
int agt__seccomp_enter(char *err, size_t n);

/* The body of a sandboxed child (never returns): decode the batch, set everything up,
** enter the sandbox, run, check and time each job, send events on 'ev_fd'. */
void agt__child_main(const uint8_t *batch, size_t n, int ev_fd, uint32_t flags, int64_t mem_limit)
    __attribute__((noreturn));

/* "SIGSEGV (invalid memory access)" */
const char *agt__signal_text(int sig);

#endif /* AGT_INT_H */
