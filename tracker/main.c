/* tracker/main.c -- the 'tracker' command: serve, create the fleet key, show the status.
**
**   tracker [--port 9190] --key FILE [flags]      serve (docs/fleet.md lists the flags)
**   tracker init-fleet --key FILE                 write a new fleet key (mode 0600)
**   tracker status [--tracker HOST:PORT] --key FILE [--json]
**
** Exit status: 0 clean stop, 1 failure, 2 bad command line. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/wire.h"
#include "tracker/tracker.h"

static trk_tracker *the_tracker;

static void on_signal(int sig)
{
    (void)sig;
    if (the_tracker) trk_stop(the_tracker);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tracker [flags]                          serve\n"
               "       tracker init-fleet --key FILE            create the fleet key\n"
               "       tracker status [--tracker HOST:PORT] --key FILE [--json]\n"
               "\n"
               "serving flags:\n"
               "  --port N            TCP port to listen on (default 9190; 0: any free port)\n"
               "  --bind ADDR         address to listen on (default 0.0.0.0)\n"
               "  --listen URL        tcp://HOST:PORT (tcp4://, tcp6://) instead of --bind/--port\n"
               "  --key FILE          the fleet key (or $AT_FLEET_KEY)\n"
               "  --next-key FILE     a second key accepted during a key rotation\n"
               "  --http ADDR:PORT    status page and status.json (default 127.0.0.1:PORT+1)\n"
               "  --no-http           no status page\n"
               "  --lease-ms N        an agent silent this long loses its jobs (default 10000)\n"
               "  --heartbeat-ms N    agents' heartbeat period (default 1000)\n"
               "  --hold-ms N         long-poll hold (default 1000)\n"
               "  --grace-ms N        a disconnected tuner's jobs wait this long (default 60000)\n"
               "  --max-attempts N    a job lost this often ends as DEVICE_LOST (default 3)\n"
               "  --max-unauth N      TCP connections waiting unauthenticated at once; a new one\n"
               "                      closes the oldest (default 64)\n"
               "  --auth-timeout-ms N a connection must authenticate this soon (default 10000)\n"
               "  --name NAME         shown on the status page\n"
               "  --log-level LEVEL   debug, info, warn, error, off (default info)\n"
               "  --version           print the version\n"
               "\n"
               "On SIGTERM or SIGINT the tracker stops; agents and tuners reconnect to its next\n"
               "start and resubmit what has no result.  It prints 'tracker ready port=N http=M'\n"
               "on stdout once it serves.\n");
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "tracker: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(tracker --help for usage)\n");
    return 2;
}

static int int_arg(const char *name, const char *v, int lo, int *out)
{
    int64_t x;
    if (v == NULL || at_parse_i64(v, &x) != AT_OK || x < lo || x > 1000000000)
        return bad_usage("%s needs a number", name);
    *out = (int)x;
    return 0;
}

static int load_keys(const char *key_path, const char *next_path, at_wire_key *keys, int *n)
{
    char err[512];
    *n = 0;
    if (key_path == NULL) key_path = getenv("AT_FLEET_KEY");
    if (key_path == NULL || key_path[0] == 0) {
        fprintf(stderr, "tracker: no fleet key: give --key FILE (create one with 'tracker "
                        "init-fleet --key FILE')\n");
        return 2;
    }
    if (at_wire_key_load(key_path, &keys[0], err, sizeof err) != AT_OK) {
        fprintf(stderr, "tracker: %s\n", err);
        return 1;
    }
    *n = 1;
    if (next_path) {
        if (at_wire_key_load(next_path, &keys[1], err, sizeof err) != AT_OK) {
            fprintf(stderr, "tracker: %s\n", err);
            return 1;
        }
        *n = 2;
    }
    return 0;
}

static int cmd_init_fleet(int argc, char **argv)
{
    const char *path = NULL;
    char err[512], id[9];
    at_wire_key key;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--key") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: tracker init-fleet --key FILE\n"
                   "Write a new random fleet key to FILE (mode 0600; never overwrites).  Copy it\n"
                   "to every agent and tuner host (docs/security.md).\n");
            return 0;
        } else
            return bad_usage("init-fleet: unexpected argument '%s'", argv[i]);
    }
    if (path == NULL) return bad_usage("%s", "init-fleet needs --key FILE");
    if (at_wire_key_generate(path, &key, err, sizeof err) != AT_OK) {
        fprintf(stderr, "tracker: %s\n", err);
        return 1;
    }
    at_wire_key_id_hex(&key, id);
    printf("wrote fleet key %s (key id %s); copy it to every agent and tuner host with mode "
           "0600\n",
           path, id);
    return 0;
}

static int cmd_status(int argc, char **argv)
{
    const char *addr = "127.0.0.1:9190", *key_path = NULL;
    int json = 0, n_keys, rc, fresh;
    at_wire_key keys[2];
    at_wire_client *c;
    at_wire_msg req, rep;
    char err[512];
    at_err e;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tracker") == 0 && i + 1 < argc)
            addr = argv[++i];
        else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc)
            key_path = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
            at_log_level lv;
            if (at_log_parse_level(argv[++i], &lv) != AT_OK)
                return bad_usage("unknown log level '%s'", argv[i]);
            at_log_set_level(lv);
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: tracker status [--tracker HOST:PORT] --key FILE [--json]\n"
                   "Ask a running tracker (an authenticated connection) for its agents with\n"
                   "their fingerprints and health, keys, queues, jobs in flight and throughput.\n");
            return 0;
        } else
            return bad_usage("status: unexpected argument '%s'", argv[i]);
    }
    if ((rc = load_keys(key_path, NULL, keys, &n_keys)) != 0) return rc;
    if (at_wire_client_open(&(at_wire_client_cfg){.url = addr,
                                                  .role = AT_WIRE_ROLE_STATUS,
                                                  .name = "tracker status",
                                                  .keys = keys,
                                                  .n_keys = n_keys},
                            &c, err, sizeof err) != AT_OK) {
        fprintf(stderr, "tracker status: %s\n", err);
        return 1;
    }
    if ((e = at_wire_client_ensure(c, 5000, &fresh, err, sizeof err)) != AT_OK) {
        fprintf(stderr, "tracker status: cannot reach the tracker at %s: %s\n", addr,
                e == AT_ETIMEDOUT ? "no answer within 5 s" : err);
        at_wire_client_close(c);
        return 1;
    }
    at_wire_msg_init(&req, AT_WIRE_T_STATUS_QUERY);
    e = at_wire_client_call(c, &req, 5000, &rep, err, sizeof err);
    if (e != AT_OK || rep.type != AT_WIRE_T_STATUS) {
        fprintf(stderr, "tracker status: %s\n", e != AT_OK ? err : "unexpected answer");
        at_wire_msg_fini(&rep);
        at_wire_client_close(c);
        return 1;
    }
    if (json)
        printf("%s\n", rep.u.status.json);
    else
        trk_status_print(rep.u.status.json, stdout);
    at_wire_msg_fini(&rep);
    at_wire_client_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    const char *bind = "0.0.0.0", *listen = NULL, *key_path = NULL, *next_path = NULL, *http = NULL,
               *name = NULL;
    int port = 9190, no_http = 0, rc, n_keys;
    trk_config cfg;
    at_wire_key keys[2];
    char url[512], http_url[512], err[512];
    struct sigaction sa;

    at_log_set_level(AT_LOG_INFO);
    if (argc > 1 && strcmp(argv[1], "init-fleet") == 0) return cmd_init_fleet(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "status") == 0) return cmd_status(argc - 1, argv + 1);
    memset(&cfg, 0, sizeof cfg);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("tracker %s (protocol %d)\n", AT_WIRE_SOFTWARE, AT_WIRE_VERSION);
            return 0;
        } else if (strcmp(a, "--port") == 0) {
            bad = int_arg(a, v, 0, &port);
            i++;
        } else if (strcmp(a, "--bind") == 0 && v) {
            bind = v;
            i++;
        } else if (strcmp(a, "--listen") == 0 && v) {
            listen = v;
            i++;
        } else if (strcmp(a, "--key") == 0 && v) {
            key_path = v;
            i++;
        } else if (strcmp(a, "--next-key") == 0 && v) {
            next_path = v;
            i++;
        } else if (strcmp(a, "--http") == 0 && v) {
            http = v;
            i++;
        } else if (strcmp(a, "--no-http") == 0) {
            no_http = 1;
        } else if (strcmp(a, "--name") == 0 && v) {
            name = v;
            i++;
        } else if (strcmp(a, "--lease-ms") == 0) {
            bad = int_arg(a, v, 1, &cfg.lease_ms);
            i++;
        } else if (strcmp(a, "--heartbeat-ms") == 0) {
            bad = int_arg(a, v, 1, &cfg.heartbeat_ms);
            i++;
        } else if (strcmp(a, "--hold-ms") == 0) {
            bad = int_arg(a, v, 1, &cfg.hold_ms);
            i++;
        } else if (strcmp(a, "--grace-ms") == 0) {
            bad = int_arg(a, v, 1, &cfg.client_grace_ms);
            i++;
        } else if (strcmp(a, "--max-attempts") == 0) {
            bad = int_arg(a, v, 1, &cfg.max_attempts);
            i++;
        } else if (strcmp(a, "--max-unauth") == 0) {
            bad = int_arg(a, v, 1, &cfg.max_unauth);
            i++;
        } else if (strcmp(a, "--auth-timeout-ms") == 0) {
            bad = int_arg(a, v, 100, &cfg.auth_timeout_ms);
            i++;
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
    if ((rc = load_keys(key_path, next_path, keys, &n_keys)) != 0) return rc;
    if (listen)
        snprintf(url, sizeof url, "%s", listen);
    else
        snprintf(url, sizeof url, "tcp://%s:%d", bind, port);
    if (!no_http) {
        if (http)
            snprintf(http_url, sizeof http_url, "http://%s", http);
        else
            snprintf(http_url, sizeof http_url, "http://127.0.0.1:%d", port ? port + 1 : 0);
    }
    cfg.listen_url = url;
    cfg.keys = keys;
    cfg.n_keys = n_keys;
    cfg.http_url = no_http ? NULL : http_url;
    cfg.name = name;
    if (trk_open(&cfg, &the_tracker, err, sizeof err) != AT_OK) {
        fprintf(stderr, "tracker: %s\n", err);
        return 1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    printf("tracker ready port=%d http=%d\n", trk_port(the_tracker), trk_http_port(the_tracker));
    fflush(stdout);
    trk_run(the_tracker);
    trk_close(the_tracker);
    memset(keys, 0, sizeof keys);
    return 0;
}
