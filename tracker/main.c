/* tracker/main.c -- the 'tracker' command: serve, create the fleet key, show the status.
**
**   tracker [--port 9190] --fleet-key FILE [flags]   serve (docs/fleet.md lists the flags)
**   tracker init-fleet --fleet-key FILE              write a new fleet key (mode 0600)
**   tracker status [--tracker HOST:PORT] --fleet-key FILE [--json]
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

/* The serving flags (one table: parsing, --help and the old spellings). */
static struct {
    const char *bind, *listen, *key, *next_key, *http, *name, *log_level;
    int port, no_http, version;
} sv = {.bind = "0.0.0.0", .port = 9190};
/* -1: not given (trk_open's default) */
static trk_config cfg = {.lease_ms = -1,
                         .heartbeat_ms = -1,
                         .hold_ms = -1,
                         .client_grace_ms = -1,
                         .max_attempts = -1,
                         .max_unauth = -1,
                         .auth_timeout_ms = -1};

static const at_opt serve_opts[] = {
    {"port", 0, AT_OPT_INT, &sv.port, "N",
     "TCP port to listen on (default 9190; 0: any free port)"},
    {"bind", 0, AT_OPT_STR, &sv.bind, "ADDR", "address to listen on (default 0.0.0.0)"},
    {"listen", 0, AT_OPT_STR, &sv.listen, "URL",
     "tcp://HOST:PORT (tcp4://, tcp6://) instead of --bind/--port"},
    {"fleet-key", 0, AT_OPT_STR, &sv.key, "FILE", "the fleet key (or $AT_FLEET_KEY)"},
    {"next-fleet-key", 0, AT_OPT_STR, &sv.next_key, "FILE",
     "a second key accepted during a key rotation"},
    {"key", 0, AT_OPT_STR, &sv.key, "FILE", AT_OPT_OLD("fleet-key")},
    {"next-key", 0, AT_OPT_STR, &sv.next_key, "FILE", AT_OPT_OLD("next-fleet-key")},
    {"http", 0, AT_OPT_STR, &sv.http, "ADDR:PORT",
     "status page and status.json (default 127.0.0.1:PORT+1)"},
    {"no-http", 0, AT_OPT_BOOL, &sv.no_http, NULL, "no status page"},
    {"lease-ms", 0, AT_OPT_INT, &cfg.lease_ms, "MS",
     "an agent silent this long loses its jobs (default 10000)"},
    {"heartbeat-ms", 0, AT_OPT_INT, &cfg.heartbeat_ms, "MS",
     "agents' heartbeat period (default 1000)"},
    {"hold-ms", 0, AT_OPT_INT, &cfg.hold_ms, "MS", "long-poll hold (default 1000)"},
    {"grace-ms", 0, AT_OPT_INT, &cfg.client_grace_ms, "MS",
     "a disconnected tuner's jobs wait this long (default 60000)"},
    {"max-attempts", 0, AT_OPT_INT, &cfg.max_attempts, "N",
     "a job lost this often ends as DEVICE_LOST (default 3)"},
    {"max-unauth", 0, AT_OPT_INT, &cfg.max_unauth, "N",
     "TCP connections waiting unauthenticated; a new one closes the oldest (64)"},
    {"auth-timeout-ms", 0, AT_OPT_INT, &cfg.auth_timeout_ms, "MS",
     "a connection must authenticate this soon (default 10000)"},
    {"name", 0, AT_OPT_STR, &sv.name, "NAME", "shown on the status page"},
    {"log-level", 0, AT_OPT_STR, &sv.log_level, "LEVEL",
     "debug, info, warn, error, off (default info)"},
    {"version", 0, AT_OPT_BOOL, &sv.version, NULL, "print the version"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tracker [flags]                                serve\n"
               "       tracker init-fleet --fleet-key FILE            create the fleet key\n"
               "       tracker status [--tracker HOST:PORT] --fleet-key FILE [--json]\n"
               "\n"
               "serving flags:\n");
    at_opts_help(f, serve_opts, (int)AT_ARRAY_LEN(serve_opts));
    fprintf(f, "\n"
               "On SIGTERM or SIGINT the tracker stops; agents and tuners reconnect to its next\n"
               "start and resubmit what has no result.  It prints 'tracker ready port=N http=M'\n"
               "on stdout once it serves.\n");
}

static int load_keys(const char *key_path, const char *next_path, at_wire_key *keys, int *n)
{
    char err[512];
    *n = 0;
    if (key_path == NULL) key_path = getenv("AT_FLEET_KEY");
    if (key_path == NULL || key_path[0] == 0) {
        fprintf(stderr, "tracker: no fleet key: give --fleet-key FILE (create one with "
                        "'tracker init-fleet --fleet-key FILE')\n");
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
    int n_pos, help;
    const at_opt opts[] = {
        {"fleet-key", 0, AT_OPT_STR, &path, "FILE", "where to write the key (mode 0600)"},
        {"key", 0, AT_OPT_STR, &path, "FILE", AT_OPT_OLD("fleet-key")},
    };
    if (at_opts_parse("tracker init-fleet", opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                      &help))
        return 2;
    if (help) {
        printf("usage: tracker init-fleet --fleet-key FILE\n"
               "Write a new random fleet key to FILE (mode 0600; never overwrites).  Copy it\n"
               "to every agent and tuner host (docs/security.md).\n\nflags:\n");
        at_opts_help(stdout, opts, (int)AT_ARRAY_LEN(opts));
        return 0;
    }
    if (n_pos > 0) return at_usage_error("tracker init-fleet", "unexpected argument '%s'", argv[1]);
    if (path == NULL) return at_usage_error("tracker init-fleet", "needs --fleet-key FILE");
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

    const char *level = NULL;
    int n_pos, help;
    const at_opt opts[] = {
        {"tracker", 0, AT_OPT_STR, &addr, "HOST:PORT", "the tracker (default 127.0.0.1:9190)"},
        {"fleet-key", 0, AT_OPT_STR, &key_path, "FILE", "the fleet key (or $AT_FLEET_KEY)"},
        {"key", 0, AT_OPT_STR, &key_path, "FILE", AT_OPT_OLD("fleet-key")},
        {"json", 0, AT_OPT_BOOL, &json, NULL, "the status document as JSON"},
        {"log-level", 0, AT_OPT_STR, &level, "LEVEL", "debug, info, warn, error, off"},
    };
    if (at_opts_parse("tracker status", opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &help))
        return 2;
    if (help) {
        printf("usage: tracker status [--tracker HOST:PORT] --fleet-key FILE [--json]\n"
               "Ask a running tracker (an authenticated connection) for its agents with\n"
               "their fingerprints and health, keys, queues, jobs in flight and throughput.\n"
               "\nflags:\n");
        at_opts_help(stdout, opts, (int)AT_ARRAY_LEN(opts));
        return 0;
    }
    if (n_pos > 0) return at_usage_error("tracker status", "unexpected argument '%s'", argv[1]);
    if ((rc = at_opts_log_level("tracker status", level)) != 0) return rc;
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
    int rc, n_keys;
    at_wire_key keys[2];
    char url[512], http_url[512], err[512];
    struct sigaction sa;

    at_log_set_level(AT_LOG_INFO);
    if (argc > 1 && strcmp(argv[1], "init-fleet") == 0) return cmd_init_fleet(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "status") == 0) return cmd_status(argc - 1, argv + 1);
    snprintf(err, sizeof err, "tracker %s (protocol %d)", AT_WIRE_SOFTWARE, AT_WIRE_VERSION);
    if ((rc = at_opts_command("tracker", serve_opts, (int)AT_ARRAY_LEN(serve_opts), argc, argv,
                              usage, &sv.version, err, &sv.log_level)) >= 0)
        return rc;
    if ((rc = at_opt_range("tracker", "--port", sv.port, 0, 65535)) != 0) return rc;
    {
        static const struct {
            const char *flag;
            int *v, lo;
        } ranges[] = {{"--lease-ms", &cfg.lease_ms, 1},
                      {"--heartbeat-ms", &cfg.heartbeat_ms, 1},
                      {"--hold-ms", &cfg.hold_ms, 1},
                      {"--grace-ms", &cfg.client_grace_ms, 1},
                      {"--max-attempts", &cfg.max_attempts, 1},
                      {"--max-unauth", &cfg.max_unauth, 1},
                      {"--auth-timeout-ms", &cfg.auth_timeout_ms, 100}};
        for (size_t i = 0; i < AT_ARRAY_LEN(ranges); i++)
            if (*ranges[i].v != -1 && (rc = at_opt_range("tracker", ranges[i].flag, *ranges[i].v,
                                                         ranges[i].lo, 1000000000)) != 0)
                return rc;
    }
    if ((rc = load_keys(sv.key, sv.next_key, keys, &n_keys)) != 0) return rc;
    if (sv.listen)
        snprintf(url, sizeof url, "%s", sv.listen);
    else
        snprintf(url, sizeof url, "tcp://%s:%d", sv.bind, sv.port);
    if (!sv.no_http) {
        if (sv.http)
            snprintf(http_url, sizeof http_url, "http://%s", sv.http);
        else
            snprintf(http_url, sizeof http_url, "http://127.0.0.1:%d", sv.port ? sv.port + 1 : 0);
    }
    cfg.listen_url = url;
    cfg.keys = keys;
    cfg.n_keys = n_keys;
    cfg.http_url = sv.no_http ? NULL : http_url;
    cfg.name = sv.name;
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
