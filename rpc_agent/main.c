/* rpc_agent/main.c -- the 'rpc_agent' command.
**
**   rpc_agent --tracker HOST:9190 --key pixel7 --fleet-key FILE [flags]
**
** Exit status: 0 clean stop (SIGTERM/SIGINT), 1 failure, 2 bad command line. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/wire.h"
#include "rpc_agent/rpc_agent.h"

static agt_agent *the_agent;
static sigset_t stop_sigs; /* SIGTERM, SIGINT: blocked in every thread, taken by sig_main */
static atomic_int got_sig;

/* The signal thread: SIGTERM or SIGINT stops the agent, and cuts short the poll the tracker
** may be holding (agt_wake is not async-signal-safe: hence a thread, not a handler).  main
** sends it SIGTERM itself when agt_run ends for another reason. */
static void *sig_main(void *arg)
{
    int sig;
    (void)arg;
    if (sigwait(&stop_sigs, &sig) == 0) {
        atomic_store(&got_sig, 1);
        agt_stop(the_agent);
        agt_wake(the_agent);
    }
    return NULL;
}

static struct {
    const char *tracker, *key_path, *next_path, *device, *log_level;
    int n_threads, max_batch, mem_limit_mb, hot_c, reconnect_max_ms, no_seccomp, no_pin, bench_ack, version;
} o = {.n_threads = -1, .max_batch = -1, .mem_limit_mb = -1, .hot_c = -1, .reconnect_max_ms = -1};
static agt_config cfg;

static const at_opt opts[] = {
    {"tracker", 0, AT_OPT_STR, &o.tracker, "ADDR",
     "the tracker (HOST:PORT, or an nng URL); required"},
    {"key", 0, AT_OPT_STR, &cfg.device_key, "NAME",
     "the device key this agent serves (e.g. pixel7); required"},
    {"device", 0, AT_OPT_STR, &o.device, "DEV",
     "cpu (default) or cuda:N: measure on NVIDIA GPU N (docs/gpu.md)"},
    {"fleet-key", 0, AT_OPT_STR, &o.key_path, "FILE", "the fleet key (or $AT_FLEET_KEY)"},
    {"next-fleet-key", 0, AT_OPT_STR, &o.next_path, "FILE",
     "a second key accepted during a key rotation"},
    {"name", 0, AT_OPT_STR, &cfg.name, "NAME", "shown by the tracker (default host:pid)"},
    {"threads", 0, AT_OPT_INT, &o.n_threads, "N", "kernel threads (default: online CPUs)"},
    {"batch", 0, AT_OPT_INT, &o.max_batch, "N", "jobs per sandboxed child (default 16)"},
    {"no-seccomp", 0, AT_OPT_BOOL, &o.no_seccomp, NULL,
     "do not enter the seccomp filter (process isolation only)"},
    {"no-pin", 0, AT_OPT_BOOL, &o.no_pin, NULL,
     "leave kernel threads unpinned (default: one CPU each, fastest first)"},
    {"mem-limit-mb", 0, AT_OPT_INT, &o.mem_limit_mb, "MB",
     "address-space limit of a child (default none)"},
    {"hot-c", 0, AT_OPT_INT, &o.hot_c, "C", "flag results measured above C degrees (default 85)"},
    {"bench-ack", 0, AT_OPT_BOOL, &o.bench_ack, NULL,
     "benchmark mode: acknowledge jobs without running them"},
    {"reconnect-max-ms", 0, AT_OPT_INT, &o.reconnect_max_ms, "MS",
     "longest pause between reconnection attempts (5000)"},
    {"log-level", 0, AT_OPT_STR, &o.log_level, "LEVEL",
     "debug, info, warn, error, off (default info)"},
    {"version", 0, AT_OPT_BOOL, &o.version, NULL, "print the version"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: rpc_agent --tracker HOST:PORT --key DEVICE_KEY --fleet-key FILE [flags]\n"
               "\n");
    at_opts_help(f, opts, (int)AT_ARRAY_LEN(opts));
    fprintf(f, "\n"
               "The agent dials the tracker (so it works behind NAT), measures each batch in a\n"
               "fresh sandboxed child and reconnects with back-off when the tracker goes away.\n"
               "On SIGTERM it finishes the job running, gives the others back and exits.\n");
}

/* A number flag that was given must lie in [lo, hi]. */
static int range(const char *flag, int v, int lo, int hi)
{
    return v == -1 ? 0 : at_opt_range("rpc_agent", flag, v, lo, hi);
}

int main(int argc, char **argv)
{
    agt_launcher *launcher = NULL;
    at_wire_key keys[2];
    int n_keys = 1, rc;
    char err[512];
    pthread_t sig_thread;
    int sig_started;

    at_log_set_level(AT_LOG_INFO);
    snprintf(err, sizeof err, "rpc_agent %s (protocol %d)", AT_WIRE_SOFTWARE, AT_WIRE_VERSION);
    if ((rc = at_opts_command("rpc_agent", opts, (int)AT_ARRAY_LEN(opts), argc, argv, usage,
                              &o.version, err, &o.log_level)) >= 0)
        return rc;
    if (o.device) {
        int index;
        if (agt_device_parse(o.device, &index) != 0)
            return at_usage_error("rpc_agent",
                                  "unknown device '%s' (expected cpu, cuda or cuda:N, N < 64)",
                                  o.device);
        cfg.device = o.device;
    }
    if ((rc = range("--threads", o.n_threads, 1, 1024)) ||
        (rc = range("--batch", o.max_batch, 1, 1024)) ||
        (rc = range("--mem-limit-mb", o.mem_limit_mb, 1, 1 << 30)) ||
        (rc = range("--hot-c", o.hot_c, 1, 1000)) ||
        (rc = range("--reconnect-max-ms", o.reconnect_max_ms, 1, 3600000)))
        return rc;
    if (o.n_threads > 0) cfg.n_threads = o.n_threads;
    if (o.max_batch > 0) cfg.max_batch = o.max_batch;
    if (o.mem_limit_mb > 0) cfg.mem_limit_bytes = (int64_t)o.mem_limit_mb << 20;
    if (o.hot_c > 0) cfg.hot_c = (double)o.hot_c;
    if (o.reconnect_max_ms > 0) cfg.reconnect_max_ms = o.reconnect_max_ms;
    cfg.no_seccomp = o.no_seccomp;
    cfg.no_pin = o.no_pin;
    cfg.bench_ack = o.bench_ack;
    if (o.tracker == NULL || cfg.device_key == NULL) {
        usage(stderr);
        return at_usage_error("rpc_agent", "--tracker and --key are required");
    }
    if (o.key_path == NULL) o.key_path = getenv("AT_FLEET_KEY");
    if (o.key_path == NULL || o.key_path[0] == 0)
        return at_usage_error("rpc_agent", "%s",
                              "no fleet key: give --fleet-key FILE (made by 'tracker init-fleet')");
    if (at_wire_key_load(o.key_path, &keys[0], err, sizeof err) != AT_OK) {
        fprintf(stderr, "rpc_agent: %s\n", err);
        return 1;
    }
    if (o.next_path) {
        if (at_wire_key_load(o.next_path, &keys[1], err, sizeof err) != AT_OK) {
            fprintf(stderr, "rpc_agent: %s\n", err);
            return 1;
        }
        n_keys = 2;
    }
    /* the launcher first: this process has one thread until now */
    if (!cfg.bench_ack && agt_launcher_open(&launcher, err, sizeof err) != AT_OK) {
        fprintf(stderr, "rpc_agent: cannot start the launcher: %s\n", err);
        return 1;
    }
    if (launcher && !agt_launcher_caps(launcher)->seccomp)
        at_log_warn("agent: %s", agt_launcher_caps(launcher)->note);
    /* SIGTERM and SIGINT blocked before any thread starts (nng's, the agent's): they all
    ** inherit it and the signal thread alone takes them (the launcher, forked above, keeps
    ** its own) */
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    cfg.tracker_url = o.tracker;
    cfg.keys = keys;
    cfg.n_keys = n_keys;
    cfg.launcher = launcher;
    if (agt_open(&cfg, &the_agent, err, sizeof err) != AT_OK) {
        fprintf(stderr, "rpc_agent: %s\n", err);
        agt_launcher_close(launcher);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    sig_started = pthread_create(&sig_thread, NULL, sig_main, NULL) == 0;
    if (!sig_started)
        at_log_warn("agent: no signal thread: SIGTERM and SIGINT will not stop it cleanly");
    agt_run(the_agent);
    if (sig_started) {
        if (!atomic_load(&got_sig)) /* agt_run ended by itself: end the signal thread */
            pthread_kill(sig_thread, SIGTERM);
        pthread_join(sig_thread, NULL);
    }
    agt_close(the_agent);
    agt_launcher_close(launcher);
    memset(keys, 0, sizeof keys);
    return 0;
}
