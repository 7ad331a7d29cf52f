/* The proxy session pool: sessions and providers, the provider-API client,
 * pick and report, cooldowns, credential suspension, retirement and timed
 * rotation.  See proxy_pool.h for the contract.  Logs under the "fetch"
 * facility (log.debug=fetch), as the engine it serves. */
#include "proxy_pool.h"

#include <ctype.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dd.h"
#include "log.h"
#include "retry.h"

/* One proxy exit (or "direct").  Rotating an op moves it to another session,
 * or moves the session to another exit (provider API, new session id). */
struct session {
    char *proxy;             /* proxy URL, NULL = direct */
    char name[128];          /* shown in results and logs */
    int64_t cooldown_until_ms;
    uint64_t uses;
    uint64_t errors;
    int active;              /* transfers running through it */
    /* provider sessions (NULL provider: a plain exit of proxy.exits) */
    const struct cfg_provider *provider;
    char country[3];         /* upper-case, "" = any */
    char sid[48];            /* session id in the username / provider API */
    unsigned gen;            /* bumped when the session is retired */
    char *username;          /* filled template (owned) */
    int64_t created_at_ms;
    uint64_t errors_in_row;
    uint64_t uses_since_new;
    unsigned renewals;       /* bumped on every renewal (new exit) */
    int pinned;              /* workflows bound to it mid-way: not renewed */
    int64_t suspended_until_ms; /* proxy_auth: its credential set is out */
    /* timed rotation: the provider's interval the session was last seen in */
    int64_t epoch, epoch_start_ms;
};

struct proxy_pool {
    struct proxy_pool_conf conf;
    struct session *sessions;  /* allocated once in proxy_pool_new */
    size_t n_sessions;
    size_t rr;                 /* round robin cursor */
};

/* @locality any thread; pure */
int64_t proxy_pool_timed_interval(int64_t created_ms, int64_t every_s,
                                  int64_t now_ms, int64_t *start_ms)
{
    if (every_s <= 0 || now_ms < created_ms) {
        if (start_ms)
            *start_ms = created_ms;
        return 0;
    }
    int64_t e = (now_ms - created_ms) / (every_s * 1000);
    if (start_ms)
        *start_ms = created_ms + e * every_s * 1000;
    return e;
}

/* @locality any thread; pure */
static bool session_timed(const struct session *s)
{
    return s->provider && !strcmp(s->provider->rotation, "timed") &&
           s->provider->rotate_every_s > 0;
}

/* @locality fetch-engine thread (and the pool's creator) */
static int64_t pool_clock(const struct proxy_pool *pool)
{
    return pool->conf.clock_ms ? pool->conf.clock_ms() : dd_now_ms();
}

/* ---- provider sessions ------------------------------------------------------ */

/* Fill a provider's username template: {user}, {session}, {country}
 * (lower-case, as providers write it in usernames: "cc-us").
 * @locality fetch-engine thread (and the pool's creator) */
static char *fill_username(const struct cfg_provider *p, const char *sid,
                           const char *country)
{
    char out[1024];
    size_t n = 0;
    for (const char *t = p->username; *t && n + 1 < sizeof(out);) {
        const char *val = NULL;
        size_t skip = 0;
        char cc[3] = {0};
        if (!strncmp(t, "{user}", 6))
            val = p->user ? p->user : "", skip = 6;
        else if (!strncmp(t, "{session}", 9))
            val = sid, skip = 9;
        else if (!strncmp(t, "{country}", 9)) {
            cc[0] = (char)tolower((unsigned char)country[0]);
            cc[1] = country[0] ? (char)tolower((unsigned char)country[1]) : 0;
            val = cc, skip = 9;
        }
        if (val) {
            for (; *val && n + 1 < sizeof(out); val++)
                out[n++] = *val;
            t += skip;
        } else
            out[n++] = *t++;
    }
    out[n] = '\0';
    return dd_xstrdup(out, "proxy username");
}

/* @locality fetch-engine thread (and the pool's creator) */
static void session_name(struct session *s)
{
    if (s->country[0])
        snprintf(s->name, sizeof(s->name), "%s:%s:%s", s->provider->name,
                 s->country, s->sid);
    else
        snprintf(s->name, sizeof(s->name), "%s:%s", s->provider->name, s->sid);
}

/* Call the provider API (bearer key): GET /sessions or POST
 * /session/{id}/rotate.  Returns the JSON body (caller frees) or NULL.
 * Synchronous: a rotation takes one loopback-or-LAN round trip.
 * @locality fetch-engine thread (and the pool's creator) */
static char *provider_api(const struct cfg_provider *p, const char *method,
                          const char *path, char *err, size_t err_size)
{
    CURL *e = curl_easy_init();
    if (!e)
        return NULL;
    char url[1024], auth[1200];
    snprintf(url, sizeof(url), "%s%s", p->api_url, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
             p->api_key ? p->api_key : "");
    struct curl_slist *h = curl_slist_append(NULL, auth);
    struct { char *b; size_t n; } buf = {NULL, 0};
    FILE *mem = open_memstream(&buf.b, &buf.n);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, mem);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    fclose(mem);
    curl_slist_free_all(h);
    memset(auth, 0, sizeof(auth));
    curl_easy_cleanup(e);
    if (rc != CURLE_OK || status != 200) {
        snprintf(err, err_size, "%s %s%s: %s", method, p->api_url, path,
                 rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP error");
        if (rc == CURLE_OK)
            snprintf(err + strlen(err), err_size - strlen(err), " %ld", status);
        free(buf.b);
        return NULL;
    }
    return buf.b;
}

/* Set the proxy URL of a provider session from an API exit "host:port".
 * @locality fetch-engine thread (and the pool's creator) */
static void session_set_exit(struct session *s, const char *exit_hostport)
{
    char url[300];
    snprintf(url, sizeof(url), "%s://%s",
             s->provider->http_port ? "http" : "socks5h", exit_hostport);
    free(s->proxy);
    s->proxy = dd_xstrdup(url, "proxy url");
}

/* Rotate \p s to a fresh exit: through the provider API when it has one, else
 * by retiring the session id (a new id is a new exit at the provider).
 * @locality fetch-engine thread */
static void session_renew(struct proxy_pool *pool, struct session *s,
                          const char *why)
{
    if (!s->provider)
        return;
    s->uses_since_new = 0;
    s->errors_in_row = 0;
    s->created_at_ms = pool_clock(pool);
    s->renewals++;
    s->epoch = 0;
    s->epoch_start_ms = s->created_at_ms;
    if (s->provider->api_url[0]) {
        char path[128], err[256];
        snprintf(path, sizeof(path), "/session/%s/rotate", s->sid);
        char *body = provider_api(s->provider, "POST", path, err, sizeof(err));
        json_t *j = body ? json_loads(body, 0, NULL) : NULL;
        const char *ex = json_string_value(json_object_get(j, "exit"));
        if (ex)
            session_set_exit(s, ex);
        else
            log_msg(LOG_WARNING, "fetch", "provider %s: rotate %s failed: %s",
                    s->provider->name, s->sid, body ? "no exit in answer" : err);
        json_decref(j);
        free(body);
    } else {
        s->gen++;
        char base[sizeof(s->sid)];
        snprintf(base, sizeof(base), "%s", s->sid);
        char *g = strchr(base, 'g');
        if (g)
            *g = '\0';
        snprintf(s->sid, sizeof(s->sid), "%.32sg%u", base, s->gen);
        free(s->username);
        s->username = fill_username(s->provider, s->sid, s->country);
    }
    session_name(s);
    log_msg(LOG_INFO, "fetch", "session %s renewed (%s)", s->name, why);
}

/* Session \p k of provider \p p for country \p c: its id and exit from the
 * API's list \p api, else "s<k+1>" on the provider's gateway.
 * @locality the pool's creator */
static void session_init(struct proxy_pool *pool, struct session *s,
                         const struct cfg_provider *p, size_t c, size_t k,
                         json_t *api)
{
    memset(s, 0, sizeof(*s));
    s->provider = p;
    s->created_at_ms = pool_clock(pool);
    s->epoch_start_ms = s->created_at_ms;
    if (p->countries.n)
        snprintf(s->country, sizeof(s->country), "%s", p->countries.v[c]);
    if (api) {
        json_t *js = json_array_get(json_object_get(api, "sessions"), k);
        const char *id = json_string_value(json_object_get(js, "id"));
        snprintf(s->sid, sizeof(s->sid), "%s", id ? id : "?");
        const char *ex = json_string_value(json_object_get(js, "exit"));
        session_set_exit(s, ex ? ex : "0.0.0.0:1");
    } else {
        snprintf(s->sid, sizeof(s->sid), "s%zu", k + 1);
        char url[300];
        if (p->http_port)
            snprintf(url, sizeof(url), "http://%s:%lld", p->gateway,
                     (long long)p->http_port);
        else
            snprintf(url, sizeof(url), "socks5h://%s:%lld", p->gateway,
                     (long long)p->socks_port);
        s->proxy = dd_xstrdup(url, "proxy url");
    }
    s->username = fill_username(p, s->sid, s->country);
    session_name(s);
}

/* Build the provider sessions (after the plain exits).
 * @locality the pool's creator */
static dd_err_t sessions_from_providers(struct proxy_pool *pool, char *errstr,
                                        size_t errstr_size)
{
    for (size_t i = 0; i < pool->conf.n_providers; i++) {
        const struct cfg_provider *p = &pool->conf.providers[i];
        json_t *api = NULL;
        if (p->api_url[0]) {
            char err[256];
            char *body = provider_api(p, "GET", "/sessions", err, sizeof(err));
            api = body ? json_loads(body, 0, NULL) : NULL;
            free(body);
            if (!json_is_array(json_object_get(api, "sessions"))) {
                dd_errstr_set(errstr, errstr_size,
                              "provider %s: session list: %s", p->name,
                              api ? "no \"sessions\" array" : err);
                json_decref(api);
                return DD_ERR_INVAL;
            }
        }
        size_t nc = p->countries.n ? p->countries.n : 1;
        size_t per = api ? json_array_size(json_object_get(api, "sessions"))
                         : (size_t)p->sessions;
        for (size_t c = 0; c < nc; c++) {
            for (size_t k = 0; k < per; k++) {
                pool->sessions = dd_xrealloc(pool->sessions,
                                             (pool->n_sessions + 1) *
                                                 sizeof(*pool->sessions),
                                             "proxy sessions");
                session_init(pool, &pool->sessions[pool->n_sessions++], p, c,
                             k, api);
            }
        }
        json_decref(api);
    }
    return DD_OK;
}

/* @locality the thread that starts the engine */
dd_err_t proxy_pool_new(const struct proxy_pool_conf *conf,
                        struct proxy_pool **out, char *errstr,
                        size_t errstr_size)
{
    struct proxy_pool *pool = dd_xcalloc(1, sizeof(*pool), "proxy pool");
    pool->conf = *conf;
    /* Sessions: each plain exit, then the provider sessions; none = direct. */
    pool->sessions = dd_xcalloc(conf->n_exits + 1, sizeof(*pool->sessions),
                                "proxy sessions");
    pool->n_sessions = conf->n_exits;
    for (size_t i = 0; i < conf->n_exits; i++) {
        pool->sessions[i].proxy = dd_xstrdup(conf->exits[i], "proxy url");
        snprintf(pool->sessions[i].name, sizeof(pool->sessions[i].name), "%s",
                 conf->exits[i]);
    }
    dd_err_t err = sessions_from_providers(pool, errstr, errstr_size);
    if (err) {
        proxy_pool_destroy(pool);
        return err;
    }
    if (!pool->n_sessions) {
        pool->n_sessions = 1;
        snprintf(pool->sessions[0].name, sizeof(pool->sessions[0].name),
                 "direct");
    }
    *out = pool;
    return DD_OK;
}

/* @locality the thread that stops the engine */
void proxy_pool_destroy(struct proxy_pool *pool)
{
    if (!pool)
        return;
    for (size_t i = 0; i < pool->n_sessions; i++) {
        free(pool->sessions[i].proxy);
        free(pool->sessions[i].username);
    }
    free(pool->sessions);
    free(pool);
}

/* @locality fetch-engine thread */
size_t proxy_pool_size(const struct proxy_pool *pool)
{
    return pool->n_sessions;
}

/* ---- session state ----------------------------------------------------------- */

/* Retire worn sessions before use (Crawlee SessionPool's rules): too many
 * uses, too many errors in a row, too old.
 * @locality fetch-engine thread */
static void session_check_retire(struct proxy_pool *pool, struct session *s,
                                 int64_t now)
{
    const struct proxy_pool_conf *c = &pool->conf;
    if (!s->provider)
        return;
    const char *why = NULL;
    if (c->session_max_uses && s->uses_since_new >= (uint64_t)c->session_max_uses)
        why = "max uses";
    else if (c->session_max_errors &&
             s->errors_in_row >= (uint64_t)c->session_max_errors)
        why = "max errors";
    else if (c->session_max_age_ms && now - s->created_at_ms >= c->session_max_age_ms)
        why = "max age";
    if (why && s->active == 0 && s->pinned == 0)
        session_renew(pool, s, why);
}

/* Timed rotation: when the provider's interval changed since the session was
 * last seen, the session stands on a new exit: the old exit's cooldown and
 * error count no longer apply (the engine reuses no connection of the old
 * interval).
 * @locality fetch-engine thread */
static void session_timed_update(struct session *s, int64_t now)
{
    if (!session_timed(s))
        return;
    int64_t start;
    int64_t e = proxy_pool_timed_interval(s->created_at_ms,
                                          s->provider->rotate_every_s, now, &start);
    if (e == s->epoch)
        return;
    s->epoch = e;
    s->epoch_start_ms = start;
    s->cooldown_until_ms = 0;
    s->errors_in_row = 0;
    log_msg(LOG_DEBUG, "fetch", "session %s: timed rotation (interval %lld)",
            s->name, (long long)e);
}

/* @locality fetch-engine thread */
static bool session_suspended(const struct session *s, int64_t now)
{
    return s->suspended_until_ms > now;
}

/* Can \p s ever serve \p w (DESIGN.md section 3: the job's country and
 * rotation select a provider's sessions)?
 * @locality fetch-engine thread */
static bool session_serves(const struct session *s,
                           const struct proxy_pool_want *w)
{
    if (!s->provider)
        return true;
    if (w->country && w->country[0] &&
        (s->country[0] ? strcmp(s->country, w->country) != 0
                       : s->provider->countries.n > 0))
        return false;
    return !w->rotation || !w->rotation[0] ||
           !strcmp(s->provider->rotation, w->rotation);
}

/* @locality fetch-engine thread */
static int64_t session_free_at(const struct session *s, int64_t now)
{
    int64_t t = s->cooldown_until_ms;
    if (session_timed(s) && t > now) {
        int64_t start;
        proxy_pool_timed_interval(s->created_at_ms, s->provider->rotate_every_s,
                                  now, &start);
        int64_t next = start + s->provider->rotate_every_s * 1000;
        if (next < t)
            t = next;
    }
    return t > now ? t : now;
}

/* ---- pick ------------------------------------------------------------------- */

/* The least busy usable session that serves \p w, from the round robin
 * cursor on (with w->rotate, not the current one).  Returns its number or -1;
 * *earliest gets the first cooldown end among the candidates cooling down,
 * *skipped_suspended and *any say whether a suspended one was skipped and
 * whether any session serves \p w at all.
 * @locality fetch-engine thread */
static int pick_scan(struct proxy_pool *pool, const struct proxy_pool_want *w,
                     int64_t now, int64_t *earliest, bool *skipped_suspended,
                     bool *any)
{
    int best = -1;
    for (size_t k = 0; k < pool->n_sessions; k++) {
        size_t i = (pool->rr + k) % pool->n_sessions;
        struct session *s = &pool->sessions[i];
        if (!session_serves(s, w))
            continue;
        *any = true;
        if (w->rotate && (int)i == w->current && pool->n_sessions > 1)
            continue;
        if (session_suspended(s, now)) {
            *skipped_suspended = true;
            continue;
        }
        session_timed_update(s, now);
        if (s->cooldown_until_ms > now) {
            if (s->cooldown_until_ms < *earliest)
                *earliest = s->cooldown_until_ms;
            continue;
        }
        if (best < 0 || s->active < pool->sessions[best].active)
            best = (int)i;
    }
    pool->rr++;
    return best;
}

/* @locality fetch-engine thread */
enum proxy_pool_pick_result proxy_pool_pick(struct proxy_pool *pool,
                                            const struct proxy_pool_want *w,
                                            int64_t now, int *session,
                                            int64_t *wait_until_ms)
{
    if (!w->rotate && w->current >= 0) {
        struct session *cur = &pool->sessions[w->current];
        session_timed_update(cur, now);
        if (!session_suspended(cur, now) && cur->cooldown_until_ms <= now) {
            session_check_retire(pool, cur, now);
            *session = w->current;
            return PROXY_POOL_PICKED;
        }
    }
    int64_t earliest = INT64_MAX;
    bool skipped_suspended = false, any = false;
    int best = pick_scan(pool, w, now, &earliest, &skipped_suspended, &any);
    if (best < 0 && w->rotate && earliest == INT64_MAX && w->current >= 0 &&
        !session_suspended(&pool->sessions[w->current], now)) {
        /* No other session can serve it: stay (after its cooldown). */
        struct session *cur = &pool->sessions[w->current];
        if (cur->cooldown_until_ms <= now)
            best = w->current;
        else
            earliest = cur->cooldown_until_ms;
    }
    if (best < 0 && !any)
        return PROXY_POOL_UNSERVED;
    if (best < 0) {
        if (earliest == INT64_MAX && skipped_suspended)
            return PROXY_POOL_SUSPENDED;
        *wait_until_ms = earliest == INT64_MAX ? now + 100 : earliest;
        return PROXY_POOL_WAIT;
    }
    session_check_retire(pool, &pool->sessions[best], now);
    *session = best;
    return PROXY_POOL_PICKED;
}

/* @locality fetch-engine thread */
void proxy_pool_acquire(struct proxy_pool *pool, int session)
{
    struct session *s = &pool->sessions[session];
    s->uses++;
    s->uses_since_new++;
    s->active++;
}

/* ---- report ----------------------------------------------------------------- */

/* The proxy refused the credentials of \p s: suspend its credential set (a
 * provider's sessions) for fetch.proxy_auth_cooldown_ms, or cool a plain exit
 * down; then retire the session (a new session id and tunnel when it
 * returns).
 * @locality fetch-engine thread */
static void auth_failed(struct proxy_pool *pool, struct session *s,
                        const char *detail, int64_t now,
                        struct proxy_pool_effect *e)
{
    int64_t cd = pool->conf.proxy_auth_cooldown_ms;
    if (!s->provider) {
        if (now + pool->conf.cooldown_default_ms > s->cooldown_until_ms)
            s->cooldown_until_ms = now + pool->conf.cooldown_default_ms;
    } else if (cd > 0) {
        int64_t until = now + cd;
        for (size_t i = 0; i < pool->n_sessions; i++) {
            struct session *t = &pool->sessions[i];
            if (t->provider != s->provider)
                continue;
            if (t->suspended_until_ms <= now)
                e->suspended = true;
            if (t->suspended_until_ms < until)
                t->suspended_until_ms = until;
        }
        if (e->suspended)
            log_msg(LOG_WARNING, "fetch",
                    "proxy refused the credentials of provider %s (%s): not "
                    "used for %lld ms", s->provider->name,
                    detail ? detail : "407", (long long)cd);
    }
    if (s->provider && !s->provider->api_url[0] && s->active == 0 &&
        s->pinned == 0) {
        session_renew(pool, s, "proxy_auth");
        e->renewed = true;
    }
}

/* @locality fetch-engine thread */
void proxy_pool_report(struct proxy_pool *pool, int session,
                       const struct proxy_pool_outcome *o, int64_t now,
                       struct proxy_pool_effect *effect)
{
    struct session *s = &pool->sessions[session];
    struct proxy_pool_effect e = {.requested_ms = -1};
    s->active--;
    if (o->verdict == PROXY_POOL_OK) {
        s->errors_in_row = 0;
    } else if (o->verdict != PROXY_POOL_ABANDONED &&
               o->verdict != PROXY_POOL_TARGET_FAILED) {
        s->errors_in_row++;
        s->errors++;
    }
    switch (o->verdict) {
    case PROXY_POOL_THROTTLED:
        /* What the server asked for, then what the session honours. */
        if (!retry_after_parse(o->retry_after, now, INT64_MAX, &e.requested_ms))
            e.requested_ms = -1;
        if (!retry_after_parse(o->retry_after, now, pool->conf.retry_after_max_ms,
                               &e.cooldown_ms))
            e.cooldown_ms = pool->conf.cooldown_default_ms;
        if (now + e.cooldown_ms > s->cooldown_until_ms)
            s->cooldown_until_ms = now + e.cooldown_ms;
        break;
    case PROXY_POOL_PROXY_DOWN:
        e.cooldown_ms = pool->conf.cooldown_default_ms;
        s->cooldown_until_ms = now + e.cooldown_ms;
        break;
    case PROXY_POOL_AUTH_FAILED:
        auth_failed(pool, s, o->detail, now, &e);
        break;
    default:
        break;
    }
    if (effect)
        *effect = e;
}

/* @locality fetch-engine thread */
bool proxy_pool_renew(struct proxy_pool *pool, int session, const char *why)
{
    struct session *s = &pool->sessions[session];
    if (!s->provider || !s->provider->api_url[0] || s->active != 0 ||
        s->pinned != 0)
        return false;
    session_renew(pool, s, why);
    s->cooldown_until_ms = 0;
    return true;
}

/* @locality fetch-engine thread */
void proxy_pool_pin(struct proxy_pool *pool, int session)
{
    pool->sessions[session].pinned++;
}

/* @locality fetch-engine thread */
void proxy_pool_unpin(struct proxy_pool *pool, int session)
{
    pool->sessions[session].pinned--;
}

/* @locality fetch-engine thread */
void proxy_pool_refresh(struct proxy_pool *pool, int session, int64_t now_ms)
{
    session_timed_update(&pool->sessions[session], now_ms);
}

/* ---- queries ---------------------------------------------------------------- */

/* @locality fetch-engine thread */
void proxy_pool_session_get(const struct proxy_pool *pool, int session,
                            struct proxy_pool_session_info *info)
{
    const struct session *s = &pool->sessions[session];
    memset(info, 0, sizeof(*info));
    info->name = s->name;
    info->proxy = s->proxy;
    if (s->provider && s->provider->password) {
        info->username = s->username;
        info->password = s->provider->password;
    }
    info->provider = s->provider ? s->provider->name : NULL;
    info->country = s->country;
    info->per_request = s->provider && !strcmp(s->provider->rotation, "per_request");
    info->timed = session_timed(s);
    info->renewals = s->renewals;
    info->epoch = s->epoch;
    info->epoch_start_ms = s->epoch_start_ms;
    if (info->timed)
        info->rotates_at_ms = s->epoch_start_ms + s->provider->rotate_every_s * 1000;
    info->created_at_ms = s->created_at_ms;
    info->cooldown_until_ms = s->cooldown_until_ms;
    info->suspended_until_ms = s->suspended_until_ms;
    info->uses = s->uses;
    info->uses_since_new = s->uses_since_new;
    info->errors = s->errors;
    info->errors_in_row = s->errors_in_row;
    info->active = s->active;
    info->pinned = s->pinned;
}

/* @locality fetch-engine thread */
const char *proxy_pool_session_name(const struct proxy_pool *pool, int session)
{
    return pool->sessions[session].name;
}

/* @locality fetch-engine thread */
int64_t proxy_pool_session_free_at(const struct proxy_pool *pool, int session,
                                   int64_t now_ms)
{
    return session_free_at(&pool->sessions[session], now_ms);
}

/* @locality fetch-engine thread */
int64_t proxy_pool_free_at(const struct proxy_pool *pool,
                           const struct proxy_pool_want *want, int64_t now_ms)
{
    int64_t t = INT64_MAX;
    for (size_t i = 0; i < pool->n_sessions && t > now_ms; i++) {
        const struct session *s = &pool->sessions[i];
        if (!session_serves(s, want) || session_suspended(s, now_ms))
            continue;
        int64_t a = session_free_at(s, now_ms);
        if (a < t)
            t = a;
    }
    return t == INT64_MAX ? now_ms : t;
}

/* @locality fetch-engine thread */
bool proxy_pool_other_credentials(const struct proxy_pool *pool, int session,
                                  const struct proxy_pool_want *want,
                                  int64_t now_ms)
{
    const struct session *s = &pool->sessions[session];
    for (size_t i = 0; i < pool->n_sessions; i++) {
        const struct session *t = &pool->sessions[i];
        if (t == s || (s->provider && t->provider == s->provider))
            continue;
        if (!session_serves(t, want))
            continue;
        if (!session_suspended(t, now_ms))
            return true;
    }
    return false;
}
