/* tracker/trk_status.c -- the status document (JSON), its cache for other threads, the
** throughput counters, the read-only HTTP server (status.json and a small live page) and
** the table that 'tracker status' prints. */
#include <stdio.h>
#include <string.h>

#include "tracker/trk_int.h"

#include <nng/supplemental/http/http.h>

/* ---- throughput ---------------------------------------------------------------------- */

static void rate_roll(trk_tracker *t, int64_t sec)
{
    if (sec - t->rate_sec >= TRK_RATE_SLOTS) {
        memset(t->rate, 0, sizeof t->rate);
        memset(t->dispatch_rate, 0, sizeof t->dispatch_rate);
    } else {
        for (int64_t s = t->rate_sec + 1; s <= sec; s++) {
            t->rate[s % TRK_RATE_SLOTS] = 0;
            t->dispatch_rate[s % TRK_RATE_SLOTS] = 0;
        }
    }
    t->rate_sec = sec;
}

void trk__count_result(trk_tracker *t, int64_t n, int dispatched)
{
    int64_t sec = (int64_t)t->now;
    pthread_mutex_lock(&t->smu);
    if (sec != t->rate_sec) rate_roll(t, sec);
    if (dispatched)
        t->dispatch_rate[sec % TRK_RATE_SLOTS] += n;
    else
        t->rate[sec % TRK_RATE_SLOTS] += n;
    pthread_mutex_unlock(&t->smu);
}

/* Mean per second over the last 'span' whole seconds (not counting the current one). */
static double rate_over(const int64_t *ring, int64_t now_sec, int span)
{
    int64_t sum = 0;
    for (int k = 1; k <= span; k++)
        sum += ring[(now_sec - k + TRK_RATE_SLOTS * 1000) % TRK_RATE_SLOTS];
    return (double)sum / span;
}

/* ---- the document ------------------------------------------------------------------- */

static void num(at_buf *b, const char *k, double v)
{
    at_buf_printf(b, "\"%s\":", k);
    at_buf_json_num(b, v);
}

at_err trk__status_build(trk_tracker *t, at_buf *b);
at_err trk__status_build(trk_tracker *t, at_buf *b)
{
    int64_t sec = (int64_t)t->now;
    trk_stats st;
    int first;

    pthread_mutex_lock(&t->smu);
    if (sec != t->rate_sec) rate_roll(t, sec);
    st = t->stats;
    at_buf_printf(b, "{\"tracker\":{\"name\":");
    at_buf_json_str(b, t->name);
    at_buf_printf(b, ",\"id\":\"%s\",\"listen\":", t->id);
    at_buf_json_str(b, t->listen_url);
    at_buf_printf(b, ",\"protocol\":%d,\"lease_ms\":%d,\"heartbeat_ms\":%d},", AT_WIRE_VERSION,
                  t->cfg.lease_ms, t->cfg.heartbeat_ms);
    at_buf_printf(b, "\"throughput\":{");
    num(b, "results_per_s_10s", rate_over(t->rate, sec, 10));
    at_buf_putc(b, ',');
    num(b, "results_per_s_60s", rate_over(t->rate, sec, 60));
    at_buf_putc(b, ',');
    num(b, "dispatched_per_s_10s", rate_over(t->dispatch_rate, sec, 10));
    at_buf_printf(b, "},");
    pthread_mutex_unlock(&t->smu);
    at_buf_printf(b,
                  "\"totals\":{\"submitted\":%lld,\"dispatched\":%lld,\"results\":%lld,"
                  "\"requeued\":%lld,\"lost\":%lld,\"refused\":%lld,\"auth_failed\":%lld},",
                  (long long)st.n_submitted, (long long)st.n_dispatched, (long long)st.n_results,
                  (long long)st.n_requeued, (long long)st.n_lost, (long long)st.n_refused,
                  (long long)st.n_auth_failed);

    at_buf_puts(b, "\"keys\":[");
    first = 1;
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        int idle = 0;
        for (trk_link *k = p->agents.next; k != &p->agents; k = k->next)
            idle += TRK_OF(k, trk_agent, link)->n_held == 0;
        at_buf_puts(b, first ? "{\"key\":" : ",{\"key\":");
        first = 0;
        at_buf_json_str(b, p->key);
        at_buf_printf(b, ",\"agents\":%d,\"idle\":%d,\"queued\":%d,\"inflight\":%d}", p->n_agents,
                      idle, p->n_queued, p->n_inflight);
    }
    at_buf_puts(b, "],\"agents\":[");
    first = 1;
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        for (trk_link *k = p->agents.next; k != &p->agents; k = k->next) {
            trk_agent *a = TRK_OF(k, trk_agent, link);
            double quiet = t->now - a->last_seen;
            const char *health = a->parked ? "idle" : a->n_held ? "busy" : "idle";
            if (a->n_held && quiet > 3.0 * t->cfg.heartbeat_ms / 1000.0) health = "late";
            if (a->state.throttled) health = "throttled";
            at_buf_puts(b, first ? "{\"id\":" : ",{\"id\":");
            first = 0;
            at_buf_json_str(b, a->id);
            at_buf_puts(b, ",\"key\":");
            at_buf_json_str(b, p->key);
            at_buf_puts(b, ",\"peer\":");
            at_buf_json_str(b, a->sess->peer);
            at_buf_puts(b, ",\"triple\":");
            at_buf_json_str(b, a->reg.triple);
            at_buf_puts(b, ",\"fingerprint\":");
            at_buf_json_str(b, a->reg.fingerprint);
            at_buf_puts(b, ",\"arch\":");
            at_buf_json_str(b, a->reg.dev.arch);
            at_buf_puts(b, ",\"model\":");
            at_buf_json_str(b, a->reg.dev.model);
            at_buf_printf(b, ",\"cores\":%d,\"os\":", a->reg.dev.n_cores);
            at_buf_json_str(b, a->reg.dev.os);
            at_buf_puts(b, ",\"gpu\":");
            at_buf_json_str(b, a->reg.gpu);
            at_buf_printf(b,
                          ",\"sandbox\":{\"seccomp\":%s,\"rlimits\":%s,\"guard_pages\":%s,"
                          "\"note\":",
                          a->reg.sandbox.seccomp ? "true" : "false",
                          a->reg.sandbox.rlimits ? "true" : "false",
                          a->reg.sandbox.guard ? "true" : "false");
            at_buf_json_str(b, a->reg.sandbox.note);
            at_buf_printf(b,
                          "},\"bench_ack\":%s,\"threads\":%d,\"batch\":%d,\"held\":%d,"
                          "\"done\":%lld,\"failed\":%lld,\"health\":\"%s\",",
                          a->reg.bench_ack ? "true" : "false", a->reg.n_threads, a->reg.max_batch,
                          a->n_held, (long long)a->n_done, (long long)a->n_failed, health);
            num(b, "last_seen_s", quiet);
            at_buf_putc(b, ',');
            num(b, "uptime_s", t->now - a->registered_at);
            at_buf_puts(b, ",\"state\":{");
            num(b, "cpu_mhz", a->state.cpu_mhz);
            at_buf_putc(b, ',');
            num(b, "cpu_max_mhz", a->state.cpu_max_mhz);
            at_buf_putc(b, ',');
            num(b, "temp_c", a->state.temp_c);
            at_buf_putc(b, ',');
            num(b, "load1", a->state.load1);
            at_buf_printf(b, ",\"throttled\":%s,\"loaded\":%s}}",
                          a->state.throttled ? "true" : "false",
                          a->state.loaded ? "true" : "false");
        }
    }
    at_buf_puts(b, "],\"tuners\":[");
    first = 1;
    for (trk_link *l = t->clients_list.next; l != &t->clients_list; l = l->next) {
        trk_client *c = TRK_OF(l, trk_client, link);
        int q = 0, f = 0;
        for (trk_link *k = t->pools.next; k != &t->pools; k = k->next) {
            trk_pool *p = TRK_OF(k, trk_pool, link);
            for (trk_link *h = p->flows.next; h != &p->flows; h = h->next) {
                trk_flow *fl = TRK_OF(h, trk_flow, link);
                if (fl->client == c) {
                    q += fl->n_queued;
                    f += fl->n_inflight;
                }
            }
        }
        at_buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
        first = 0;
        at_buf_json_str(b, c->name);
        at_buf_printf(b,
                      ",\"id\":\"%.16s\",\"connected\":%s,\"queued\":%d,\"inflight\":%d,"
                      "\"results_waiting\":%d,\"results\":%lld}",
                      c->id, c->sess ? "true" : "false", q, f, c->n_out, (long long)c->n_results);
    }
    at_buf_puts(b, "]}");
    return b->err;
}

void trk__status_refresh(trk_tracker *t)
{
    at_buf b;
    trk_stats st;
    if (t->now - t->status_at < 0.25 && t->status_json != NULL) return;
    t->status_at = t->now;
    at_buf_init(&b);
    if (trk__status_build(t, &b) != AT_OK) {
        at_buf_fini(&b);
        return;
    }
    memset(&st, 0, sizeof st);
    for (trk_link *l = t->pools.next; l != &t->pools; l = l->next) {
        trk_pool *p = TRK_OF(l, trk_pool, link);
        st.n_agents += p->n_agents;
        st.n_queued += p->n_queued;
        st.n_inflight += p->n_inflight;
    }
    for (trk_link *l = t->clients_list.next; l != &t->clients_list; l = l->next)
        st.n_clients++;
    pthread_mutex_lock(&t->smu);
    at_free(t->status_json);
    t->status_json = at_buf_take(&b);
    t->stats.n_agents = st.n_agents;
    t->stats.n_queued = st.n_queued;
    t->stats.n_inflight = st.n_inflight;
    t->stats.n_clients = st.n_clients;
    pthread_mutex_unlock(&t->smu);
    at_buf_fini(&b);
}

void trk_get_stats(trk_tracker *t, trk_stats *out)
{
    pthread_mutex_lock(&t->smu);
    *out = t->stats;
    pthread_mutex_unlock(&t->smu);
}

at_err trk_status_json(trk_tracker *t, char **out)
{
    pthread_mutex_lock(&t->smu);
    *out = at_strdup(t->status_json ? t->status_json : "{}");
    pthread_mutex_unlock(&t->smu);
    return *out ? AT_OK : AT_ENOMEM;
}

/* ---- printing ----------------------------------------------------------------------- */

static const char *jstr(const at_json *o, const char *k)
{
    const at_json *v = at_json_get(o, k);
    return v && v->type == AT_JSON_STR ? v->str : "";
}

static double jnum(const at_json *o, const char *k)
{
    const at_json *v = at_json_get(o, k);
    return v && (v->type == AT_JSON_NUM || v->type == AT_JSON_BOOL) ? v->num : 0;
}

void trk_status_print(const char *json, FILE *f)
{
    at_arena a;
    at_json *root;
    const at_json *v, *tot, *thr;
    char err[128];

    at_arena_init(&a, 0);
    if (at_json_parse(&a, json, strlen(json), &root, err, sizeof err) != AT_OK ||
        root->type != AT_JSON_OBJ) {
        fprintf(f, "(unreadable status: %s)\n", err);
        at_arena_fini(&a);
        return;
    }
    v = at_json_get(root, "tracker");
    tot = at_json_get(root, "totals");
    thr = at_json_get(root, "throughput");
    fprintf(f, "tracker %s (id %.8s) on %s, protocol %d\n", jstr(v, "name"), jstr(v, "id"),
            jstr(v, "listen"), (int)jnum(v, "protocol"));
    fprintf(f,
            "jobs: %.0f submitted, %.0f dispatched, %.0f results, %.0f requeued, %.0f lost; "
            "%.0f frames refused, %.0f handshakes refused\n",
            jnum(tot, "submitted"), jnum(tot, "dispatched"), jnum(tot, "results"),
            jnum(tot, "requeued"), jnum(tot, "lost"), jnum(tot, "refused"),
            jnum(tot, "auth_failed"));
    fprintf(f, "throughput: %.1f results/s (10 s), %.1f results/s (60 s)\n\n",
            jnum(thr, "results_per_s_10s"), jnum(thr, "results_per_s_60s"));
    fprintf(f, "%-20s %7s %5s %7s %8s\n", "KEY", "AGENTS", "IDLE", "QUEUED", "INFLIGHT");
    v = at_json_get(root, "keys");
    for (int i = 0; v && v->type == AT_JSON_ARR && i < v->n; i++)
        fprintf(f, "%-20s %7.0f %5.0f %7.0f %8.0f\n", jstr(v->items[i], "key"),
                jnum(v->items[i], "agents"), jnum(v->items[i], "idle"), jnum(v->items[i], "queued"),
                jnum(v->items[i], "inflight"));
    fprintf(f, "\n%-22s %-10s %-16s %-22s %-16s %5s %6s %6s %-9s %s\n", "AGENT", "KEY",
            "FINGERPRINT", "MODEL", "SANDBOX", "HELD", "DONE", "FAILED", "HEALTH", "STATE");
    v = at_json_get(root, "agents");
    for (int i = 0; v && v->type == AT_JSON_ARR && i < v->n; i++) {
        const at_json *ag = v->items[i], *sb = at_json_get(ag, "sandbox"),
                      *st = at_json_get(ag, "state");
        char sand[32], state[96];
        snprintf(sand, sizeof sand, "%s", jnum(sb, "seccomp") ? "seccomp" : "process+timeout");
        snprintf(state, sizeof state, "%.0f MHz, %.0f C, load %.2f", jnum(st, "cpu_mhz"),
                 jnum(st, "temp_c"), jnum(st, "load1"));
        fprintf(f, "%-22.22s %-10.10s %-16.16s %-22.22s %-16s %5.0f %6.0f %6.0f %-9s %s\n",
                jstr(ag, "id"), jstr(ag, "key"), jstr(ag, "fingerprint"), jstr(ag, "model"), sand,
                jnum(ag, "held"), jnum(ag, "done"), jnum(ag, "failed"), jstr(ag, "health"), state);
    }
    fprintf(f, "\n%-24s %-9s %7s %8s %8s\n", "TUNER", "CONNECTED", "QUEUED", "INFLIGHT", "WAITING");
    v = at_json_get(root, "tuners");
    for (int i = 0; v && v->type == AT_JSON_ARR && i < v->n; i++)
        fprintf(f, "%-24.24s %-9s %7.0f %8.0f %8.0f\n", jstr(v->items[i], "name"),
                jnum(v->items[i], "connected") ? "yes" : "no", jnum(v->items[i], "queued"),
                jnum(v->items[i], "inflight"), jnum(v->items[i], "results_waiting"));
    at_arena_fini(&a);
}

/* ---- HTTP --------------------------------------------------------------------------- */

static const char page[] =
    "<!doctype html><html><head><meta charset=utf-8><title>tracker</title><style>"
    "body{font:14px sans-serif;margin:1em}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#eee}"
    ".late,.throttled{color:#b00}</style></head><body><h2 id=h>tracker</h2><div id=s></div>"
    "<h3>Keys</h3><table id=k></table><h3>Agents</h3><table id=a></table>"
    "<h3>Tuners</h3><table id=t></table><script>"
    "function e(x){return String(x).replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]))}"
    "function tb(id,cols,rows){let h='<tr>'+cols.map(c=>'<th>'+e(c[0])+'</th>').join('')+'</tr>';"
    "for(const r of rows)h+='<tr class=\"'+e(r.health||'')+'\">'+cols.map(c=>'<td>'+e(c[1](r))"
    "+'</td>').join('')+'</tr>';document.getElementById(id).innerHTML=h}"
    "async function up(){try{const s=await (await fetch('status.json')).json();"
    "document.getElementById('h').textContent='tracker '+s.tracker.name+' ('+s.tracker.listen+')';"
    "const T=s.totals,R=s.throughput;document.getElementById('s').textContent="
    "T.submitted+' submitted, '+T.results+' results, '+T.requeued+' requeued, '+T.lost+"
    "' lost, '+T.refused+' refused; '+R.results_per_s_10s.toFixed(1)+' results/s';"
    "tb('k',[['key',r=>r.key],['agents',r=>r.agents],['idle',r=>r.idle],['queued',r=>r.queued],"
    "['in flight',r=>r.inflight]],s.keys);"
    "tb('a',[['agent',r=>r.id],['key',r=>r.key],['peer',r=>r.peer],['fingerprint',r=>r.fingerprint]"
    ","
    "['model',r=>r.model],['cores',r=>r.cores],['sandbox',r=>r.sandbox.seccomp?'seccomp':"
    "'process+timeout'],['held',r=>r.held],['done',r=>r.done],['failed',r=>r.failed],"
    "['health',r=>r.health],['MHz',r=>r.state.cpu_mhz],['C',r=>r.state.temp_c],"
    "['load',r=>r.state.load1]],s.agents);"
    "tb('t',[['tuner',r=>r.name],['connected',r=>r.connected],['queued',r=>r.queued],"
    "['in flight',r=>r.inflight],['waiting',r=>r.results_waiting]],s.tuners)}catch(x){}}"
    "up();setInterval(up,1000)</script></body></html>";

static void status_cb(nng_aio *aio)
{
    nng_http_handler *h = nng_aio_get_input(aio, 1);
    trk_tracker *t = nng_http_handler_get_data(h);
    nng_http_res *res;
    char *json = NULL;
    if (nng_http_res_alloc(&res) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    if (trk_status_json(t, &json) != AT_OK ||
        nng_http_res_copy_data(res, json, strlen(json)) != 0) {
        at_free(json);
        nng_http_res_free(res);
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    at_free(json);
    nng_http_res_set_header(res, "Content-Type", "application/json");
    nng_http_res_set_header(res, "Cache-Control", "no-store");
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

at_err trk__http_start(trk_tracker *t, const char *url, char *errmsg, size_t n)
{
    nng_url *u = NULL;
    nng_http_server *srv = NULL;
    nng_http_handler *h;
    nng_sockaddr sa;
    int rv;

    if ((rv = nng_url_parse(&u, url)) != 0) {
        snprintf(errmsg, n, "bad status page address '%s': %s", url, nng_strerror(rv));
        return AT_EINVAL;
    }
    if ((rv = nng_http_server_hold(&srv, u)) != 0) goto fail;
    if ((rv = nng_http_handler_alloc(&h, "/status.json", status_cb)) != 0) goto fail;
    nng_http_handler_set_method(h, "GET");
    nng_http_handler_set_data(h, t, NULL);
    if ((rv = nng_http_server_add_handler(srv, h)) != 0) {
        nng_http_handler_free(h);
        goto fail;
    }
    if ((rv = nng_http_handler_alloc_static(&h, "/", page, sizeof page - 1,
                                            "text/html; charset=utf-8")) != 0)
        goto fail;
    if ((rv = nng_http_server_add_handler(srv, h)) != 0) {
        nng_http_handler_free(h);
        goto fail;
    }
    if ((rv = nng_http_server_start(srv)) != 0) goto fail;
    if (nng_http_server_get_addr(srv, &sa) == 0 && sa.s_family == NNG_AF_INET) {
        const uint8_t *pp = (const uint8_t *)&sa.s_in.sa_port;
        t->http_port = pp[0] << 8 | pp[1];
    }
    t->http = srv;
    nng_url_free(u);
    at_log_info("tracker: status page on %s (read-only)", url);
    return AT_OK;
fail:
    snprintf(errmsg, n, "cannot serve the status page on '%s': %s", url, nng_strerror(rv));
    if (srv) nng_http_server_release(srv);
    nng_url_free(u);
    return AT_EIO;
}

void trk__http_stop(trk_tracker *t)
{
    if (t->http) {
        nng_http_server_stop(t->http);
        nng_http_server_release(t->http);
        t->http = NULL;
    }
}
