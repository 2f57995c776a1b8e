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

enum {
    AGT_LAUNCH_SECCOMP = 1,
    AGT_LAUNCH_CUDA = 2, /* a GPU child (agt_cuda.c); 'reserved' is the device index */
    AGT_LAUNCH_NO_PIN = 4 /* kernel threads not pinned to CPUs (rpc_agent --no-pin) */
};

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

/* Events of a child to the agent (agt_child.c): encode 'm' into 'out' (reserved) and send it
** on 'ev'; a RESULT of job 'id' (index 'index' of the batch); a READY or START with a note. */
void agt__send(int ev, at_buf *out, at_wire_msg *m);
/* Timing a slow kernel (agt_child.c; CPU and GPU children): the checked run took check_s
** seconds and the job has budget_s seconds left.  When the warm-ups and 'repeat' repeats
** of 'number' calls would not fit in 80% of that, *n_warmup becomes 0 and the result is
** the repeats that fit (0: report the checked run's time as the one repeat); otherwise
** 'repeat'. */
int agt__fit_repeats(double check_s, double budget_s, int number, int repeat, int *n_warmup);
/* The CPUs this process may use (at most 'max' of them), fastest first (cpufreq's
** cpuinfo_max_freq, where sysfs has it: a phone's big cores before its little ones), then
** by number: a pinned pool's launcher takes the first, its workers the next ones
** (agt_child.c).  The count; 0 if the affinity cannot be read. */
int agt__pin_order(int *cpus, int max);
void agt__send_result(int ev, at_buf *out, const char *id, int index, int status,
                      const double *costs, int n_costs, const char *text);
void agt__send_note(int ev, at_buf *out, int kind, int index, const char *note);
/* Two artifacts take the same arguments (dtypes, shapes, outputs). */
int agt__same_sig(const at_wire_artifact *a, const at_wire_artifact *b);
/* write() all of it, through EINTR; 0 or -1 (agt_agent.c). */
int agt__write_all(int fd, const void *p, size_t n);

/* ---- NVIDIA GPUs (agt_cuda.c) ---- */

/* What the probe child reads about the GPU. */
typedef struct agt_gpu {
    int index;                  /* cuda:N */
    char name[128];             /* "NVIDIA H200" */
    int cc_major, cc_minor;     /* compute capability */
    int n_sms;
    int clock_khz, mem_clock_khz;
    int driver;                 /* cuDriverGetVersion: 12040 for CUDA 12.4 */
    long long mem_bytes;
    int max_shared;             /* opt-in shared memory per block */
} agt_gpu;

/* Ask a child (through the launcher) what GPU 'index' is.  AT_EUNSUPPORTED with "no GPU:
** ..." when the driver cannot be loaded or the device does not exist; AT_EIO when the
** launcher fails. */
at_err agt__cuda_probe(agt_launcher *l, int index, agt_gpu *gpu, char *errmsg, size_t n);
/* The body of a GPU child (never returns): the probe for an empty batch, else the batch. */
void agt__cuda_child_main(const uint8_t *batch, size_t n, int ev_fd, int device)
    __attribute__((noreturn));

/* "SIGSEGV (invalid memory access)" */
const char *agt__signal_text(int sig);

#endif /* AGT_INT_H */
