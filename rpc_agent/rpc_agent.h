/* rpc_agent/rpc_agent.h -- the measuring agent (prefix agt_).
**
**   agt_launcher *l;  agt_launcher_open(&l, err, sizeof err);   FIRST, while single-threaded
**   agt_agent *a;     agt_open(&(agt_config){.tracker_url = "tcp://10.0.0.2:9190",
**                              .device_key = "pixel7", .keys = &key, .n_keys = 1,
**                              .launcher = l}, &a, err, sizeof err);
**   agt_run(a);       serves until agt_stop(a) (another thread or a signal handler)
**   agt_close(a);  agt_launcher_close(l);
**
** The agent dials the tracker (and redials with back-off), authenticates with the fleet key,
** registers under its device key with its target triple, CPU features, fingerprint and
** sandbox capabilities, and then long-polls for jobs.  Each batch of jobs runs in a fresh
** sandboxed child process: the kernel runtime's loader maps every artifact; buffers (with
** guard pages and canaries), the workspace and the thread pool are made; then the child
** enters a seccomp filter (where the platform has one) and runs, checks and times the
** kernels, reporting each result over a socket.  The agent enforces each job's timeout
** (killing the child), turns a death by signal into RUNTIME_DEVICE, and starts a new child
** for the rest of the batch.  Results and heartbeats go back on the next poll; results are
** kept until the tracker acknowledges them, across reconnections.
**
** Children are forked by a "launcher": a small process forked from the agent before any
** thread exists, because forking a multi-threaded process is unreliable (sanitizer and
** malloc locks held by other threads).  docs/fleet.md and docs/security.md describe the
** sandbox; the agent links common/ and the kernel runtime only (no LLVM, SQLite, XGBoost).
**
** Threads: agt_run runs the network loop on the calling thread and one measuring thread.
** agt_stop is async-signal-safe; agt_get_stats is thread-safe. */
#ifndef AGT_RPC_AGENT_H
#define AGT_RPC_AGENT_H

#include <stdint.h>
#include <sys/types.h>

#include "common/common.h"
#include "common/wire.h"

typedef struct agt_launcher agt_launcher;
typedef struct agt_agent agt_agent;

/* What the sandbox of this platform can do, found by trying it in a child. */
typedef struct agt_caps {
    int seccomp;    /* a seccomp filter can be entered */
    int rlimits;    /* resource limits apply */
    char note[256]; /* why something is missing ("seccomp: Invalid argument (qemu-user?)") */
} agt_caps;

/* Fork the launcher process.  Call it before creating any thread (first thing in main);
** from a process that already has threads it still works with glibc but may deadlock in a
** sanitizer build, and it logs a warning.  On AT_OK the caller owns *out
** (agt_launcher_close, which ends the launcher and any child).  AT_EIO if fork fails. */
at_err agt_launcher_open(agt_launcher **out, char *errmsg, size_t n);
void agt_launcher_close(agt_launcher *l); /* NULL is fine */
/* The sandbox capabilities the launcher found. */
const agt_caps *agt_launcher_caps(const agt_launcher *l);
/* The launcher's process id: kernels run in its children, which inherit its CPU
** affinity (the tuner's overlap mode pins it to the kernels' cores). */
pid_t agt_launcher_pid(const agt_launcher *l);
/* Whether the launcher is alive with no report or child event pending, so that another
** agent can take it over once its agent is closed (agt_close waits for every child it
** started).  Drops stale child events.  1 or 0; 0 for NULL. */
int agt_launcher_idle(agt_launcher *l);

typedef struct agt_config {
    const char *tracker_url; /* "tcp://host:9190", "host:9190" or "inproc://name" */
    const char *device_key;  /* the pool this agent serves ("pixel7") */
    const at_wire_key *keys; /* the fleet key, then optionally the next one */
    int n_keys;
    const char *name;        /* for logs and the status page; NULL: host name */
    agt_launcher *launcher;  /* NULL: agt_open opens one (see agt_launcher_open) */
    int n_threads;           /* kernel threads by default; 0: online CPUs */
    int max_batch;           /* jobs per sandboxed child; default 16 */
    int no_seccomp;          /* run without the seccomp filter even where it works */
    int no_pin;              /* leave the kernel threads unpinned (default: pinned, one
                             ** CPU each, fastest first: docs/fleet.md) */
    int bench_ack;           /* benchmark mode: acknowledge jobs without running them */
    double hot_c;            /* results above this temperature are flagged throttled (85) */
    double loaded_per_core;  /* load average per core above which results are flagged (0.75) */
    int64_t mem_limit_bytes; /* RLIMIT_AS of a child; 0: none (never under ASan) */
    int reconnect_max_ms;    /* longest back-off between dials (default 5000) */
    const char *device;      /* "cuda:N": measure on NVIDIA GPU N (agt_cuda.c); NULL: CPU */
} agt_config;

/* A --device string: "cpu" (*cuda_index = -1), "cuda" (0) or "cuda:N" (N < 64).  0, or -1
** when it is none of these. */
int agt_device_parse(const char *s, int *cuda_index);

/* Run a GPU artifact (gpu_kind != AT_WIRE_GPU_NONE) once on NVIDIA GPU 'device' in this
** process, on host buffers in argument order: the inputs are copied to the device, every
** output is read back into its buffer.  For tools (tests/tools/gpu_verify): the driver and
** the context stay loaded until the process ends, and a kernel fault leaves the context
** unusable, so a measuring agent never calls this (agt_cuda.c runs each batch in a child).
** AT_EUNSUPPORTED "no GPU: ..." without a driver or device; AT_ECODEGEN when the module does
** not load; AT_EIO for a failed launch or an out-of-bounds write (guard zones). */
at_err agt_cuda_run_once(int device, const at_wire_artifact *a, void *const *bufs,
                         char *errmsg, size_t n);

/* Make an agent (nothing is dialled until agt_run).  On AT_OK the caller owns *out
** (agt_close).  AT_EINVAL for a bad configuration ('errmsg' says which field).  With a
** 'device' "cuda:N", a child probes the GPU first: AT_EUNSUPPORTED with "no GPU: ..." when
** the CUDA driver (libcuda.so.1, loaded at run time) or the device is missing. */
at_err agt_open(const agt_config *cfg, agt_agent **out, char *errmsg, size_t n);

/* Serve until agt_stop.  On stop, the job running finishes (within its timeout), jobs not
** started go back to the tracker, results are delivered when the tracker answers within
** a few seconds, then it returns AT_OK. */
at_err agt_run(agt_agent *a);
void agt_stop(agt_agent *a);  /* async-signal-safe */
/* After agt_stop, from a thread: cut short the poll the tracker may hold for up to its
** hold time (1 s), so that agt_run returns as soon as the agent has nothing to deliver. */
void agt_wake(agt_agent *a);
void agt_close(agt_agent *a); /* after agt_run returned, or if it never ran; NULL is fine */

typedef struct agt_stats {
    int64_t n_jobs;     /* jobs received */
    int64_t n_results;  /* results acknowledged by the tracker */
    int64_t n_failed;   /* results with a status other than NO_ERROR */
    int64_t n_children; /* sandboxed children started */
    int64_t n_sessions; /* sessions opened (1 + reconnections) */
    int64_t n_refs_run; /* reference outputs computed (not taken from the cache) */
    int registered;     /* registered on the current session */
} agt_stats;

void agt_get_stats(agt_agent *a, agt_stats *out);

/* ---- device description (agt_device.c) ------------------------------------------------ */

typedef struct agt_device {
    char arch[32], model[128], os[128], triple[64];
    char features[AT_WIRE_MAX_FEATURES];
    int n_cores;
} agt_device;

/* Read what this machine says about itself (uname, /proc/cpuinfo, sysconf). */
void agt_device_read(agt_device *d);
/* Read the device state: CPU frequency (sysfs cpufreq), hottest thermal zone, load average;
** -1 where unknown; flags from the thresholds. */
void agt_device_state(double hot_c, double loaded_per_core, int n_cores, at_wire_devstate *s);

#endif /* AGT_RPC_AGENT_H */
