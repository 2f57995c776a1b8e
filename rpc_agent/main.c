/* rpc_agent/main.c -- the 'rpc_agent' command.
**
**   rpc_agent --tracker HOST:9190 --key pixel7 --fleet-key FILE [flags]
**
** Exit status: 0 clean stop (SIGTERM/SIGINT), 1 failure, 2 bad command line. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/wire.h"
#include "rpc_agent/rpc_agent.h"

static agt_agent *the_agent;

static void on_signal(int sig)
{
    (void)sig;
    if (the_agent) agt_stop(the_agent);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: rpc_agent --tracker HOST:PORT --key DEVICE_KEY --fleet-key FILE [flags]\n"
               "\n"
               "  --tracker ADDR       the tracker (HOST:PORT, or an nng URL); required\n"
               "  --key NAME           the device key this agent serves (e.g. pixel7); required\n"
               "  --device DEV         cpu (default) or cuda:N: measure on NVIDIA GPU N (the\n"
               "                       CUDA driver is loaded at run time; docs/gpu.md)\n"
               "  --fleet-key FILE     the fleet key (or $AT_FLEET_KEY)\n"
               "  --next-fleet-key F   a second key accepted during a key rotation\n"
               "  --name NAME          shown by the tracker (default host:pid)\n"
               "  --threads N          kernel threads (default: online CPUs)\n"
               "  --batch N            jobs per sandboxed child (default 16)\n"
               "  --no-seccomp         do not enter the seccomp filter (process isolation only)\n"
               "  --mem-limit-mb N     address-space limit of a child (default none)\n"
               "  --hot-c C            flag results measured above C degrees (default 85)\n"
               "  --bench-ack          benchmark mode: acknowledge jobs without running them\n"
               "  --reconnect-max-ms N longest pause between reconnection attempts (5000)\n"
               "  --log-level LEVEL    debug, info, warn, error, off (default info)\n"
               "  --version            print the version\n"
               "\n"
               "The agent dials the tracker (so it works behind NAT), measures each batch in a\n"
               "fresh sandboxed child and reconnects with back-off when the tracker goes away.\n"
               "On SIGTERM it finishes the job running, gives the others back and exits.\n");
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "rpc_agent: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(rpc_agent --help for usage)\n");
    return 2;
}

static int int_arg(const char *name, const char *v, int lo, int64_t hi, int64_t *out)
{
    int64_t x;
    if (v == NULL || at_parse_i64(v, &x) != AT_OK || x < lo || x > hi)
        return bad_usage("%s needs a number", name);
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    const char *tracker = NULL, *key_path = NULL, *next_path = NULL;
    agt_config cfg;
    agt_launcher *launcher = NULL;
    at_wire_key keys[2];
    int n_keys = 1;
    char err[512];
    struct sigaction sa;

    at_log_set_level(AT_LOG_INFO);
    memset(&cfg, 0, sizeof cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x = 0;
        int bad = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("rpc_agent %s (protocol %d)\n", AT_WIRE_SOFTWARE, AT_WIRE_VERSION);
            return 0;
        } else if (strcmp(a, "--tracker") == 0 && v) {
            tracker = v;
            i++;
        } else if (strcmp(a, "--key") == 0 && v) {
            cfg.device_key = v;
            i++;
        } else if (strcmp(a, "--fleet-key") == 0 && v) {
            key_path = v;
            i++;
        } else if (strcmp(a, "--next-fleet-key") == 0 && v) {
            next_path = v;
            i++;
        } else if (strcmp(a, "--device") == 0 && v) {
            int index;
            if (agt_device_parse(v, &index) != 0)
                return bad_usage("unknown device '%s' (expected cpu, cuda or cuda:N, N < 64)", v);
            cfg.device = v;
            i++;
        } else if (strcmp(a, "--name") == 0 && v) {
            cfg.name = v;
            i++;
        } else if (strcmp(a, "--threads") == 0) {
            bad = int_arg(a, v, 1, 1024, &x);
            cfg.n_threads = (int)x;
            i++;
        } else if (strcmp(a, "--batch") == 0) {
            bad = int_arg(a, v, 1, 1024, &x);
            cfg.max_batch = (int)x;
            i++;
        } else if (strcmp(a, "--mem-limit-mb") == 0) {
            bad = int_arg(a, v, 1, 1 << 30, &x);
            cfg.mem_limit_bytes = x << 20;
            i++;
        } else if (strcmp(a, "--hot-c") == 0) {
            bad = int_arg(a, v, 1, 1000, &x);
            cfg.hot_c = (double)x;
            i++;
        } else if (strcmp(a, "--reconnect-max-ms") == 0) {
            bad = int_arg(a, v, 1, 3600000, &x);
            cfg.reconnect_max_ms = (int)x;
            i++;
        } else if (strcmp(a, "--no-seccomp") == 0) {
            cfg.no_seccomp = 1;
        } else if (strcmp(a, "--bench-ack") == 0) {
            cfg.bench_ack = 1;
        } else if (strcmp(a, "--log-level") == 0 && v) {
            at_log_level lv;
            if (at_log_parse_level(v, &lv) != AT_OK) return bad_usage("unknown log level '%s'", v);
            at_log_set_level(lv);
            i++;
        } else {
            return bad_usage("unknown argument '%s'", a);
        }
        if (bad) return bad;
    }
    if (tracker == NULL || cfg.device_key == NULL) {
        usage(stderr);
        return bad_usage("%s", "--tracker and --key are required");
    }
    if (key_path == NULL) key_path = getenv("AT_FLEET_KEY");
    if (key_path == NULL || key_path[0] == 0)
        return bad_usage("%s",
                         "no fleet key: give --fleet-key FILE (made by 'tracker init-fleet')");
    if (at_wire_key_load(key_path, &keys[0], err, sizeof err) != AT_OK) {
        fprintf(stderr, "rpc_agent: %s\n", err);
        return 1;
    }
    if (next_path) {
        if (at_wire_key_load(next_path, &keys[1], err, sizeof err) != AT_OK) {
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
    cfg.tracker_url = tracker;
    cfg.keys = keys;
    cfg.n_keys = n_keys;
    cfg.launcher = launcher;
    if (agt_open(&cfg, &the_agent, err, sizeof err) != AT_OK) {
        fprintf(stderr, "rpc_agent: %s\n", err);
        agt_launcher_close(launcher);
        return 1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    agt_run(the_agent);
    agt_close(the_agent);
    agt_launcher_close(launcher);
    memset(keys, 0, sizeof keys);
    return 0;
}
