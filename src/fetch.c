/* The fetch engine: libcurl multi loop on its own thread, session pool, retry
 * timers.  See fetch.h for the contract. */
#include "dd.h"
#include "fetch.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "config.h"
#include "key.h"
#include "log.h"
#include "metrics.h"
#include "retry.h"

/* ---- session pool ------------------------------------------------------ */

/* A session is one proxy exit (or "direct"): each plain exit of proxy.exits,
 * and each provider session (a session id in the username, or a session of the
 * provider's API).  Rotating an op moves it to another session, or moves the
 * session to another exit (provider API, new session id). */
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

static bool session_timed(const struct session *s)
{
    return s->provider && !strcmp(s->provider->rotation, "timed") &&
           s->provider->rotate_every_s > 0;
}

struct cidr {
    int family;
    unsigned char addr[16];
    int bits;
};

enum xfer_state { XF_WAITING, XF_RUNNING };

/* One request of an op: the op itself, or one step of a workflow (owned). */
struct wstep {
    char *url, *method;
    char **hdr_names, **hdr_values;
    size_t n_headers;
    unsigned char *body;          /* NULL = none */
    size_t body_len;
};

/* Per-host limits: running requests and the token bucket of one host. */
struct host_slot {
    struct host_slot *next;
    char *host;
    int inflight;
    struct fetch_bucket bucket;
    int64_t last_ms;
};
#define HOST_BUCKETS 1024

struct xfer {
    struct xfer *next;            /* in waiting list or done queue */
    struct xfer *run_prev, *run_next; /* in the running list */
    /* the op's requests (owned): one, or a workflow's steps */
    struct wstep *steps;
    size_t n_steps;
    bool workflow, replayable;
    size_t step;                  /* current step */
    /* current request: the step's, changed by redirects */
    char *url;                    /* current URL (changes on redirect) */
    const char *orig_url;         /* the step's URL as submitted (borrowed) */
    char *method;
    const unsigned char *body;    /* borrowed from the step; NULL after 303 */
    size_t body_len;
    char host[256];               /* per-host limit key of url */
    bool safe;
    char country[3];
    char rotation[12];            /* the job's rotation mode, "" = provider's */
    int64_t deadline_ms;
    void *opaque;
    /* progress */
    enum xfer_state state;
    int64_t not_before_ms;
    int session;                  /* index or -1 */
    bool fresh_connect;
    uint32_t attempts, rotations, throttled, redirects;
    uint32_t step_attempts;       /* attempts of the current step in this run */
    uint32_t step_5xx;            /* same-session retries of the step on 5xx */
    uint32_t restarts;            /* workflow restarts from the first step */
    bool need_rotate;             /* next launch moves to another session */
    bool wait_slot, gate_waited;  /* held by the per-host concurrency cap */
    struct host_slot *hs;         /* slot counted while running */
    int pin;                      /* session pinned mid-way, or -1 */
    unsigned run_renewals;        /* session identity when the run bound it */
    int64_t run_epoch;
    CURLSH *jar;                  /* workflows: cookie jar of this run */
    int jar_session;              /* session the jar belongs to */
    unsigned jar_renewals;
    int64_t jar_epoch;
    struct fetch_step_result *sres; /* step outcomes of this run */
    size_t n_sres;
    CURL *easy;
    struct curl_slist *slist;
    char errbuf[CURL_ERROR_SIZE];
    bool too_large, refused_target, headers_too_large;
    size_t header_bytes;          /* of the current response's header block */
    /* response of the current attempt */
    unsigned char *rbody;
    size_t rlen, rcap;
    char *retry_after, *etag, *last_modified, *content_type;
    struct fetch *f;
    struct fetch_attempt *alog;   /* attempt records */
    size_t n_alog, cap_alog;
    size_t noted_alog;            /* attempts reported to the retry hook */
    bool retry_noted;             /* a FETCH_RETRY_WAIT awaits its START */
};

struct fetch {
    const struct cfg *cfg;
    pthread_t thread;
    bool thread_started;
    CURLM *multi;
    atomic_bool stop;

    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    struct xfer *incoming;        /* submitted, not yet seen by the thread */
    struct fetch_result **done;   /* completion ring */
    size_t done_head, done_n, done_cap;
    size_t inflight;              /* submitted, not taken */

    struct xfer **incoming_tailp;

    /* thread-local */
    struct xfer *waiting;         /* retry timers and new work (FIFO) */
    struct xfer **waiting_tailp;
    struct xfer *run_head;        /* transfers attached to the multi handle */
    size_t running;
    struct host_slot *hosts[HOST_BUCKETS];
    size_t n_hosts;
    int64_t hosts_swept_ms;

    struct session *sessions;
    size_t n_sessions;
    size_t rr;                    /* round robin cursor */
    struct cidr *allow;
    size_t n_allow;
    long *blocked;
    size_t n_blocked;
    uint64_t rnd;
    fetch_retry_cb *retry_cb;     /* set before the first submit */
    void *retry_opaque;

    atomic_uint_fast64_t st_attempts, st_rotations, st_throttled, st_bytes,
        st_completed, st_failed, st_restarts, st_host_waits,
        st_auth_suspensions;
};

#define FETCH_MAX_HEADER_BYTES (256 * 1024) /* one response's header block */


int64_t fetch_bucket_take(struct fetch_bucket *b, int64_t now, int64_t rate_per_min,
                          int64_t burst)
{
    if (rate_per_min <= 0)
        return 0;
    if (burst < 1)
        burst = 1;
    if (b->at_ms == 0) {
        b->tokens = (double)burst;
        b->at_ms = now;
    } else if (now > b->at_ms) {
        b->tokens += (double)(now - b->at_ms) * (double)rate_per_min / 60000.0;
        if (b->tokens > (double)burst)
            b->tokens = (double)burst;
        b->at_ms = now;
    }
    if (b->tokens >= 1.0 - 1e-9) {
        b->tokens -= 1.0;
        return 0;
    }
    double ms = (1.0 - b->tokens) * 60000.0 / (double)rate_per_min;
    int64_t w = (int64_t)ceil(ms - 1e-6); /* float noise must not add 1 ms */
    return w < 1 ? 1 : w;
}

int64_t fetch_timed_interval(int64_t created_ms, int64_t every_s, int64_t now,
                             int64_t *start_ms)
{
    if (every_s <= 0 || now < created_ms) {
        if (start_ms)
            *start_ms = created_ms;
        return 0;
    }
    int64_t e = (now - created_ms) / (every_s * 1000);
    if (start_ms)
        *start_ms = created_ms + e * every_s * 1000;
    return e;
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* ---- SSRF guard ---------------------------------------------------------- */

static bool parse_cidr(const char *text, struct cidr *c)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", text);
    char *slash = strchr(buf, '/');
    int bits = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (*end || b < 0)
            return false;
        bits = (int)b;
    }
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        c->bits = bits < 0 ? 32 : bits;
        return c->bits <= 32;
    }
    if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        c->bits = bits < 0 ? 128 : bits;
        return c->bits <= 128;
    }
    return false;
}

static bool prefix_match(const unsigned char *a, const unsigned char *b, int bits)
{
    int full = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)full))
        return false;
    if (rest) {
        unsigned char mask = (unsigned char)(0xff << (8 - rest));
        if ((a[full] & mask) != (b[full] & mask))
            return false;
    }
    return true;
}

static bool addr_is_internal(int family, const unsigned char *a);

/* RFC 8215 local-use NAT64 prefix 64:ff9b:1::/48: the operator picks the
 * prefix length inside it (RFC 6052: /48, /56, /64 or /96), which decides
 * where the IPv4 address sits.  Internal if the v4 is internal in any format
 * the address is well formed in (bits 64-71 zero, suffix zero; /96 always):
 * /48 and /56 deployments are then refused whole (their /96 reading is
 * 0.0.0.0) unless fetch.allow_targets allows them. */
static bool nat64_local_internal(const unsigned char *a)
{
    static const unsigned char at[3][5] = {
        {6, 7, 9, 10, 11}, {7, 9, 10, 11, 12}, {9, 10, 11, 12, 13}};
    if (addr_is_internal(AF_INET, a + 12))
        return true;
    if (a[8])
        return false;
    for (int f = 0; f < 3; f++) {
        bool suffix_zero = true;
        for (int i = at[f][4]; i < 16; i++)
            suffix_zero &= a[i] == 0;
        unsigned char v4[4] = {a[at[f][0]], a[at[f][1]], a[at[f][2]], a[at[f][3]]};
        if (suffix_zero && addr_is_internal(AF_INET, v4))
            return true;
    }
    return false;
}

/* Refused ranges: loopback, link-local (cloud metadata), private, unspecified,
 * CGNAT, and their IPv6 counterparts.  IPv6 forms that embed an IPv4 address
 * are judged by it: v4-mapped ::ffff:0:0/96, IPv4-translated ::ffff:0:0:0/96
 * (RFC 2765), IPv4-compatible ::/96 (:: and ::1 fall in 0.0.0.0/8), NAT64
 * 64:ff9b::/96 (RFC 6052) and 64:ff9b:1::/48 (RFC 8215), 6to4 2002::/16
 * (RFC 3056). */
static bool addr_is_internal(int family, const unsigned char *a)
{
    if (family == AF_INET) {
        uint32_t v = ((uint32_t)a[0] << 24) | ((uint32_t)a[1] << 16) |
                     ((uint32_t)a[2] << 8) | a[3];
        return (v >> 24) == 0 || (v >> 24) == 10 || (v >> 24) == 127 ||
               (v >> 16) == 0xa9fe || (v >> 20) == 0xac1 ||
               (v >> 16) == 0xc0a8 || (v >> 22) == (0x64400000u >> 22) ||
               v >= 0xe0000000u;
    }
    static const unsigned char zero[16];
    static const unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const unsigned char nat64_local[6] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
    if (!memcmp(a, zero, 10) && a[10] == 0xff && a[11] == 0xff)
        return addr_is_internal(AF_INET, a + 12); /* ::ffff:0:0/96 */
    if (!memcmp(a, zero, 8) && a[8] == 0xff && a[9] == 0xff && !a[10] && !a[11])
        return addr_is_internal(AF_INET, a + 12); /* ::ffff:0:0:0/96 */
    if (!memcmp(a, zero, 12) || !memcmp(a, nat64, 12))
        return addr_is_internal(AF_INET, a + 12); /* ::/96, 64:ff9b::/96 */
    if (!memcmp(a, nat64_local, 6))
        return nat64_local_internal(a);
    if (a[0] == 0x20 && a[1] == 0x02)
        return addr_is_internal(AF_INET, a + 2); /* 2002::/16 */
    if ((a[0] & 0xfe) == 0xfc)
        return true; /* fc00::/7 unique local */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return true; /* fe80::/10 link-local */
    if (a[0] == 0xff)
        return true; /* multicast */
    return false;
}

static bool addr_refused(int family, const unsigned char *a,
                         const struct cidr *allow, size_t n_allow)
{
    if (!addr_is_internal(family, a))
        return false;
    for (size_t i = 0; i < n_allow; i++)
        if (allow[i].family == family && prefix_match(a, allow[i].addr, allow[i].bits))
            return false;
    return true;
}

bool fetch_ip_refused(const char *host, char *const *allow_text, size_t n_allow,
                      bool *refused)
{
    char buf[128];
    size_t n = strlen(host);
    if (n >= sizeof(buf))
        return false;
    if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
        memcpy(buf, host + 1, n - 2);
        buf[n - 2] = '\0';
    } else
        memcpy(buf, host, n + 1);
    char *pct = strchr(buf, '%'); /* zone id */
    if (pct)
        *pct = '\0';
    unsigned char a[16];
    int family;
    if (inet_pton(AF_INET, buf, a) == 1)
        family = AF_INET;
    else if (inet_pton(AF_INET6, buf, a) == 1)
        family = AF_INET6;
    else
        return false;
    struct cidr allow[64];
    size_t k = 0;
    for (size_t i = 0; i < n_allow && k < 64; i++)
        if (parse_cidr(allow_text[i], &allow[k]))
            k++;
    *refused = addr_refused(family, a, allow, k);
    return true;
}

/* Refuse the target of \p url if it is an internal IP literal. */
static bool url_target_refused(struct fetch *f, const char *url)
{
    CURLU *u = curl_url();
    bool refused = false;
    char *host = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", host);
        size_t n = strlen(buf);
        if (buf[0] == '[' && n > 2) {
            memmove(buf, buf + 1, n - 2);
            buf[n - 2] = '\0';
        }
        unsigned char a[16];
        if (inet_pton(AF_INET, buf, a) == 1)
            refused = addr_refused(AF_INET, a, f->allow, f->n_allow);
        else if (inet_pton(AF_INET6, buf, a) == 1)
            refused = addr_refused(AF_INET6, a, f->allow, f->n_allow);
    }
    curl_free(host);
    curl_url_cleanup(u);
    return refused;
}

/* Direct fetches: check the address libcurl is about to connect to (it has
 * resolved the name), so a name that resolves inside is refused too. */
static curl_socket_t open_socket_cb(void *clientp, curlsocktype purpose,
                                    struct curl_sockaddr *addr)
{
    struct xfer *x = clientp;
    (void)purpose;
    if (x->session < 0 || !x->f->sessions[x->session].proxy) {
        const unsigned char *a = NULL;
        if (addr->family == AF_INET)
            a = (const unsigned char *)&((struct sockaddr_in *)&addr->addr)->sin_addr;
        else if (addr->family == AF_INET6)
            a = (const unsigned char *)&((struct sockaddr_in6 *)&addr->addr)->sin6_addr;
        if (a && addr_refused(addr->family, a, x->f->allow, x->f->n_allow)) {
            x->refused_target = true;
            return CURL_SOCKET_BAD;
        }
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}


/* ---- provider sessions ----------------------------------------------------- */

/* Fill a provider's username template: {user}, {session}, {country}
 * (lower-case, as providers write it in usernames: "cc-us"). */
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
    return strdup(out);
}

/* libcurl before 8.8.0 URL-decodes CURLOPT_PROXYUSERNAME and
 * CURLOPT_PROXYPASSWORD (curl issue 13265), so "%41" would reach the proxy as
 * "A".  On those versions every byte outside RFC 3986 unreserved is
 * percent-encoded, which that decoding turns back into the exact bytes. */
static char *cred_for_curl(const char *v)
{
    static int must_encode = -1;
    if (must_encode < 0) {
        const curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
        must_encode = vi->version_num < 0x080800;
    }
    if (!must_encode)
        return strdup(v);
    size_t n = strlen(v);
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out)
        abort();
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~')
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    *o = '\0';
    return out;
}

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
 * Synchronous: a rotation takes one loopback-or-LAN round trip. */
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

/* Set the proxy URL of a provider session from an API exit "host:port". */
static void session_set_exit(struct session *s, const char *exit_hostport)
{
    char url[300];
    snprintf(url, sizeof(url), "%s://%s",
             s->provider->http_port ? "http" : "socks5h", exit_hostport);
    free(s->proxy);
    s->proxy = strdup(url);
}

/* Rotate \p s to a fresh exit: through the provider API when it has one, else
 * by retiring the session id (a new id is a new exit at the provider). */
static void session_renew(struct fetch *f, struct session *s, const char *why)
{
    if (!s->provider)
        return;
    s->uses_since_new = 0;
    s->errors_in_row = 0;
    s->created_at_ms = dd_now_ms();
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
    atomic_fetch_add(&f->st_rotations, 0); /* counted by the caller */
    log_msg(LOG_INFO, "fetch", "session %s renewed (%s)", s->name, why);
}

/* Build the provider sessions (after the plain exits). */
static dd_err_t sessions_from_providers(struct fetch *f, char *errstr,
                                        size_t errstr_size)
{
    const struct cfg_providers *ps = &f->cfg->proxy_providers;
    for (size_t i = 0; i < ps->n; i++) {
        const struct cfg_provider *p = &ps->v[i];
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
                f->sessions = realloc(f->sessions,
                                      (f->n_sessions + 1) * sizeof(*f->sessions));
                if (!f->sessions)
                    abort();
                struct session *s = &f->sessions[f->n_sessions++];
                memset(s, 0, sizeof(*s));
                s->provider = p;
                s->created_at_ms = dd_now_ms();
                s->epoch_start_ms = s->created_at_ms;
                if (p->countries.n)
                    snprintf(s->country, sizeof(s->country), "%s",
                             p->countries.v[c]);
                if (api) {
                    json_t *js = json_array_get(json_object_get(api, "sessions"), k);
                    snprintf(s->sid, sizeof(s->sid), "%s",
                             json_string_value(json_object_get(js, "id"))
                                 ? json_string_value(json_object_get(js, "id"))
                                 : "?");
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
                    s->proxy = strdup(url);
                }
                s->username = fill_username(p, s->sid, s->country);
                session_name(s);
            }
        }
        json_decref(api);
    }
    return DD_OK;
}

/* Retire worn sessions before use (Crawlee SessionPool's rules): too many
 * uses, too many errors in a row, too old. */
static void session_check_retire(struct fetch *f, struct session *s, int64_t now)
{
    const struct cfg *c = f->cfg;
    if (!s->provider)
        return;
    const char *why = NULL;
    if (c->fetch_session_max_uses && s->uses_since_new >= (uint64_t)c->fetch_session_max_uses)
        why = "max uses";
    else if (c->fetch_session_max_errors &&
             s->errors_in_row >= (uint64_t)c->fetch_session_max_errors)
        why = "max errors";
    else if (c->fetch_session_max_age_ms &&
             now - s->created_at_ms >= c->fetch_session_max_age_ms)
        why = "max age";
    if (why && s->active == 0 && s->pinned == 0)
        session_renew(f, s, why);
}

/* Timed rotation: when the provider's interval changed since the session was
 * last seen, the session stands on a new exit: the old exit's cooldown and
 * error count no longer apply (connections of the old interval are not
 * reused: start_attempt). */
static void session_timed_update(struct session *s, int64_t now)
{
    if (!session_timed(s))
        return;
    int64_t start;
    int64_t e = fetch_timed_interval(s->created_at_ms, s->provider->rotate_every_s,
                                     now, &start);
    if (e == s->epoch)
        return;
    s->epoch = e;
    s->epoch_start_ms = start;
    s->cooldown_until_ms = 0;
    s->errors_in_row = 0;
    log_msg(LOG_DEBUG, "fetch", "session %s: timed rotation (interval %lld)",
            s->name, (long long)e);
}

static bool session_suspended(const struct session *s, int64_t now)
{
    return s->suspended_until_ms > now;
}

/* ---- transfers ----------------------------------------------------------- */

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct xfer *x = userdata;
    size_t n = size * nmemb;
    size_t max = (size_t)x->f->cfg->fetch_max_body_bytes;
    if (x->rlen + n > max) {
        x->too_large = true;
        return 0; /* aborts with CURLE_WRITE_ERROR */
    }
    if (x->rlen + n + 1 > x->rcap) {
        size_t cap = x->rcap ? x->rcap : 16384;
        while (cap < x->rlen + n + 1)
            cap *= 2;
        unsigned char *p = realloc(x->rbody, cap);
        if (!p)
            return 0;
        x->rbody = p;
        x->rcap = cap;
    }
    memcpy(x->rbody + x->rlen, ptr, n);
    x->rlen += n;
    return n;
}

static void set_str(char **dst, const char *v, size_t n)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    free(*dst);
    *dst = strndup(v, n);
}

static size_t header_cb(char *buf, size_t size, size_t nitems, void *userdata)
{
    struct xfer *x = userdata;
    size_t n = size * nitems;
    /* Our own cap on a header block, below libcurl's (300 KB in 7.88, other
     * codes in other versions): oversized headers are a protocol failure. */
    x->header_bytes += n;
    if (x->header_bytes > FETCH_MAX_HEADER_BYTES) {
        x->headers_too_large = true;
        return 0;
    }
    if (n >= 5 && !strncmp(buf, "HTTP/", 5)) {
        x->header_bytes = n;
        /* A new header block (after CONNECT, 1xx or a redirect): reset. */
        free(x->retry_after), x->retry_after = NULL;
        free(x->etag), x->etag = NULL;
        free(x->last_modified), x->last_modified = NULL;
        free(x->content_type), x->content_type = NULL;
        return n;
    }
    static const struct { const char *name; size_t off; } want[] = {
        {"retry-after:", offsetof(struct xfer, retry_after)},
        {"etag:", offsetof(struct xfer, etag)},
        {"last-modified:", offsetof(struct xfer, last_modified)},
        {"content-type:", offsetof(struct xfer, content_type)},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        size_t k = strlen(want[i].name);
        if (n > k && !strncasecmp(buf, want[i].name, k)) {
            set_str((char **)((char *)x + want[i].off), buf + k, n - k);
            break;
        }
    }
    return n;
}

static void xfer_reset_response(struct xfer *x)
{
    x->rlen = 0;
    x->too_large = x->refused_target = x->headers_too_large = false;
    x->header_bytes = 0;
    free(x->retry_after), x->retry_after = NULL;
    free(x->etag), x->etag = NULL;
    free(x->last_modified), x->last_modified = NULL;
    free(x->content_type), x->content_type = NULL;
    x->errbuf[0] = '\0';
}

static void wstep_free(struct wstep *w)
{
    free(w->url);
    free(w->method);
    for (size_t i = 0; i < w->n_headers; i++) {
        free(w->hdr_names[i]);
        free(w->hdr_values[i]);
    }
    free(w->hdr_names);
    free(w->hdr_values);
    free(w->body);
}

static void sres_free(struct fetch_step_result *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].final_url);
    free(v);
}

/* Drop the op's cookie jar (a new session starts with none). */
static void jar_drop(struct xfer *x)
{
    if (!x->jar)
        return;
    if (x->easy)
        curl_easy_setopt(x->easy, CURLOPT_SHARE, NULL);
    curl_share_cleanup(x->jar);
    x->jar = NULL;
}

/* libcurl 7.88 keeps CURLOPT_COOKIEFILE names in a list that only a
 * transfer start consumes, and neither curl_easy_reset nor
 * curl_easy_cleanup frees it (LeakSanitizer: 16 + 1 bytes per set-up that
 * never ran); setting it to NULL frees the list (lib/setopt.c) and leaves a
 * shared jar's cookies alone. */
static void cookiefile_clear(struct xfer *x)
{
    if (x->easy && x->workflow)
        curl_easy_setopt(x->easy, CURLOPT_COOKIEFILE, (char *)NULL);
}

static void xfer_free(struct xfer *x)
{
    if (!x)
        return;
    cookiefile_clear(x);
    if (x->easy)
        curl_easy_cleanup(x->easy);
    x->easy = NULL;
    jar_drop(x);
    curl_slist_free_all(x->slist);
    free(x->url);
    free(x->method);
    for (size_t i = 0; i < x->n_steps; i++)
        wstep_free(&x->steps[i]);
    free(x->steps);
    sres_free(x->sres, x->n_sres);
    free(x->rbody);
    free(x->retry_after);
    free(x->etag);
    free(x->last_modified);
    free(x->content_type);
    free(x->alog);
    free(x);
}

/* The per-host limit key of \p url: its host, lower-case (any port). */
static void url_host_key(const char *url, char *out, size_t size)
{
    CURLU *u = curl_url();
    char *host = NULL;
    out[0] = '\0';
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        size_t i = 0;
        for (; host[i] && i + 1 < size; i++)
            out[i] = (char)tolower((unsigned char)host[i]);
        out[i] = '\0';
    }
    curl_free(host);
    curl_url_cleanup(u);
}

static void xfer_set_url(struct xfer *x, char *url)
{
    free(x->url);
    x->url = url;
    url_host_key(url, x->host, sizeof(x->host));
}

/* Make step \p i the current request (a new run of it: no redirects yet). */
static void xfer_load_step(struct xfer *x, size_t i)
{
    struct wstep *w = &x->steps[i];
    x->step = i;
    xfer_set_url(x, strdup(w->url));
    x->orig_url = w->url;
    free(x->method);
    x->method = strdup(w->method);
    x->body = w->body;
    x->body_len = w->body_len;
    x->redirects = 0;
    x->step_attempts = 0;
    x->step_5xx = 0;
}

/* ---- per-host limits ------------------------------------------------------ */

static uint64_t host_hash(const char *h)
{
    return dd_fnv1a64_str(h);
}

static struct host_slot *host_get(struct fetch *f, const char *host)
{
    struct host_slot **b = &f->hosts[host_hash(host) % HOST_BUCKETS];
    for (struct host_slot *h = *b; h; h = h->next)
        if (!strcmp(h->host, host))
            return h;
    struct host_slot *h = calloc(1, sizeof(*h));
    if (!h || !(h->host = strdup(host)))
        abort();
    h->next = *b;
    *b = h;
    f->n_hosts++;
    return h;
}

/* Forget hosts idle long enough that their bucket is full again. */
static void hosts_sweep(struct fetch *f, int64_t now)
{
    if (now - f->hosts_swept_ms < 10000)
        return;
    f->hosts_swept_ms = now;
    const struct cfg *c = f->cfg;
    int64_t idle = 60000;
    if (c->fetch_per_host_rate_per_min > 0) {
        int64_t refill = c->fetch_per_host_burst * 60000 / c->fetch_per_host_rate_per_min + 1;
        if (refill > idle)
            idle = refill;
    }
    for (size_t i = 0; i < HOST_BUCKETS; i++) {
        struct host_slot **pp = &f->hosts[i];
        while (*pp) {
            struct host_slot *h = *pp;
            if (h->inflight == 0 && now - h->last_ms > idle) {
                *pp = h->next;
                free(h->host);
                free(h);
                f->n_hosts--;
            } else
                pp = &h->next;
        }
    }
}

static void host_release(struct xfer *x)
{
    if (x->hs) {
        x->hs->inflight--;
        x->hs = NULL;
    }
}

/* ---- queues ---------------------------------------------------------------- */

static bool wf_midway(const struct xfer *x);

/* Can \p s ever serve \p x (DESIGN.md section 3: the job's country and
 * rotation select a provider's sessions)?  A session of a provider with a
 * countries list serves only its country; a job's rotation mode takes only
 * sessions of providers with that mode.  A plain exit (proxy.exits) or direct
 * fetching serves any job. */
static bool session_serves(const struct session *s, const struct xfer *x)
{
    if (!s->provider)
        return true;
    if (x->country[0] && (s->country[0] ? strcmp(s->country, x->country) != 0
                                        : s->provider->countries.n > 0))
        return false;
    return !x->rotation[0] || !strcmp(s->provider->rotation, x->rotation);
}

/* When \p s can take a request again: its cooldown's end (a timed session's
 * cooldown ends at its next interval at the latest), or \p now. */
static int64_t session_free_at(const struct session *s, int64_t now)
{
    int64_t t = s->cooldown_until_ms;
    if (session_timed(s) && t > now) {
        int64_t start;
        fetch_timed_interval(s->created_at_ms, s->provider->rotate_every_s, now,
                             &start);
        int64_t next = start + s->provider->rotate_every_s * 1000;
        if (next < t)
            t = next;
    }
    return t > now ? t : now;
}

/* The earliest time a retry of \p x can start as things stand: its own
 * not_before, or later when every session that could serve it cools down
 * (or the one it is bound to mid-way does).  The caller makes it the op's
 * not_before, so what the store records is never earlier than the start. */
static int64_t retry_not_before(struct fetch *f, const struct xfer *x)
{
    int64_t now = dd_now_ms(), t = INT64_MAX;
    if (x->session >= 0 && wf_midway(x) && !x->need_rotate) {
        t = session_free_at(&f->sessions[x->session], now);
    } else {
        for (size_t i = 0; i < f->n_sessions && t > now; i++) {
            const struct session *s = &f->sessions[i];
            if (!session_serves(s, x))
                continue;
            if (session_suspended(s, now))
                continue;
            int64_t a = session_free_at(s, now);
            if (a < t)
                t = a;
        }
    }
    if (t == INT64_MAX)
        t = now;
    return t > x->not_before_ms ? t : x->not_before_ms;
}

static void host_wait_count(struct fetch *f)
{
    atomic_fetch_add(&f->st_host_waits, 1);
    metrics_add(METRICS_HOST_WAITS, 1);
}

static void waiting_push(struct fetch *f, struct xfer *x)
{
    /* An op back in the queue after a failed attempt waits for a retry:
     * tell the hook once per failed attempt. */
    if (f->retry_cb && x->n_alog > x->noted_alog) {
        const struct fetch_attempt *a = &x->alog[x->n_alog - 1];
        if (a->ended_at_ms && a->category[0]) {
            x->noted_alog = x->n_alog;
            x->retry_noted = true;
            metrics_add(METRICS_RETRY_WAITS, 1);
            /* The time reported is the one kept: the launcher does not
             * start the retry earlier even if a session frees up sooner. */
            x->not_before_ms = retry_not_before(f, x);
            f->retry_cb(f->retry_opaque, x->opaque, FETCH_RETRY_WAIT,
                        x->not_before_ms, (uint32_t)x->n_alog, a);
        }
    }
    x->next = NULL;
    x->state = XF_WAITING;
    *f->waiting_tailp = x;
    f->waiting_tailp = &x->next;
}

/* Pick a session for \p x: keep its bound one unless \p rotate; otherwise the
 * least used session that is not cooling down, not suspended (proxy_auth) and
 * not the current one.  Returns -1 when every candidate cools down
 * (*wait_until then says until when), -2 when no session outside a suspended
 * credential set can serve the op. */
static int session_pick(struct fetch *f, struct xfer *x, bool rotate,
                        int64_t now, int64_t *wait_until)
{
    if (f->n_sessions == 0)
        return -1;
    if (!rotate && x->session >= 0) {
        struct session *cur = &f->sessions[x->session];
        session_timed_update(cur, now);
        if (!session_suspended(cur, now) && cur->cooldown_until_ms <= now) {
            session_check_retire(f, cur, now);
            return x->session;
        }
    }
    int best = -1;
    int64_t earliest = INT64_MAX;
    bool skipped_suspended = false, any = false;
    for (size_t k = 0; k < f->n_sessions; k++) {
        size_t i = (f->rr + k) % f->n_sessions;
        struct session *s = &f->sessions[i];
        if (!session_serves(s, x))
            continue;
        any = true;
        if (rotate && (int)i == x->session && f->n_sessions > 1)
            continue;
        if (session_suspended(s, now)) {
            skipped_suspended = true;
            continue;
        }
        session_timed_update(s, now);
        if (s->cooldown_until_ms > now) {
            if (s->cooldown_until_ms < earliest)
                earliest = s->cooldown_until_ms;
            continue;
        }
        if (best < 0 || s->active < f->sessions[best].active)
            best = (int)i;
    }
    f->rr++;
    if (best < 0 && rotate && earliest == INT64_MAX && x->session >= 0 &&
        !session_suspended(&f->sessions[x->session], now)) {
        /* No other session can serve it: stay (after its cooldown). */
        struct session *cur = &f->sessions[x->session];
        if (cur->cooldown_until_ms <= now)
            best = x->session;
        else
            earliest = cur->cooldown_until_ms;
    }
    if (best < 0 && !any)
        return -3;
    if (best < 0) {
        if (earliest == INT64_MAX && skipped_suspended)
            return -2;
        *wait_until = earliest == INT64_MAX ? now + 100 : earliest;
    } else
        session_check_retire(f, &f->sessions[best], now);
    return best;
}

static void finish(struct fetch *f, struct xfer *x, bool ok, long status,
                   const char *category, const char *error);

/* Close the current attempt record with its outcome (first close wins). */
static void att_close(struct xfer *x, long status, const char *category,
                      const char *error)
{
    if (!x->n_alog)
        return;
    struct fetch_attempt *a = &x->alog[x->n_alog - 1];
    if (a->ended_at_ms)
        return;
    a->ended_at_ms = dd_now_ms();
    a->status = status;
    a->bytes = x->rlen;
    snprintf(a->category, sizeof(a->category), "%s", category ? category : "");
    snprintf(a->error, sizeof(a->error), "%s", error ? error : "");
    metrics_fetch_attempt(a->category,
                          (double)(a->ended_at_ms - a->started_at_ms) / 1000.0);
    metrics_add(METRICS_FETCHED_BYTES, a->bytes);
    if (x->easy) {
        char *ip = NULL;
        long port = 0;
        curl_easy_getinfo(x->easy, CURLINFO_PRIMARY_IP, &ip);
        curl_easy_getinfo(x->easy, CURLINFO_PRIMARY_PORT, &port);
        if (ip && *ip)
            snprintf(a->exit_addr, sizeof(a->exit_addr), "%s:%ld", ip, port);
    }
}

static bool is_blocked(struct fetch *f, long status)
{
    for (size_t i = 0; i < f->n_blocked; i++)
        if (f->blocked[i] == status)
            return true;
    return false;
}

/* A workflow between its first and last step: bound to its session. */
static bool wf_midway(const struct xfer *x)
{
    return x->workflow && x->step > 0;
}

/* Restarting re-sends every step: only when each is safe or the job allows. */
static bool wf_restartable(const struct xfer *x)
{
    return x->workflow && (x->safe || x->replayable);
}

static void unpin(struct fetch *f, struct xfer *x)
{
    if (x->pin >= 0) {
        f->sessions[x->pin].pinned--;
        x->pin = -1;
    }
}

static void start_attempt(struct fetch *f, struct xfer *x, int64_t now)
{
    if (x->retry_noted) {
        x->retry_noted = false;
        f->retry_cb(f->retry_opaque, x->opaque, FETCH_RETRY_START, now,
                    (uint32_t)x->n_alog, NULL);
    }
    if (url_target_refused(f, x->url)) {
        finish(f, x, false, 0, "forbidden_target",
               "target address is loopback, link-local or private and not in "
               "fetch.allow_targets");
        return;
    }
    struct session *s = &f->sessions[x->session];
    struct wstep *w = &x->steps[x->step];
    xfer_reset_response(x);
    if (!x->easy)
        x->easy = curl_easy_init();
    else {
        cookiefile_clear(x);
        curl_easy_reset(x->easy);
    }
    CURL *e = x->easy;
    const struct cfg *c = f->cfg;
    curl_easy_setopt(e, CURLOPT_URL, x->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->fetch_timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->fetch_connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L); /* followed by hand */
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, c->fetch_user_agent);
    if (x->fresh_connect) {
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        x->fresh_connect = false;
    }
    if (x->workflow) {
        /* The op's cookie jar: a per-op share, so that cookies survive
         * curl_easy_reset and never meet another op's.  A jar belongs to one
         * session (and one exit of it): a new one starts empty. */
        if (x->jar && (x->jar_session != x->session ||
                       x->jar_renewals != s->renewals || x->jar_epoch != s->epoch))
            jar_drop(x);
        if (!x->jar) {
            x->jar = curl_share_init();
            if (!x->jar)
                abort();
            curl_share_setopt(x->jar, CURLSHOPT_SHARE, CURL_LOCK_DATA_COOKIE);
            x->jar_session = x->session;
            x->jar_renewals = s->renewals;
            x->jar_epoch = s->epoch;
        }
        curl_easy_setopt(e, CURLOPT_SHARE, x->jar);
        curl_easy_setopt(e, CURLOPT_COOKIEFILE, "");
    }
    if (s->proxy) {
        curl_easy_setopt(e, CURLOPT_PROXY, s->proxy);
        if (s->provider && s->provider->password) {
            /* Never spliced into the proxy URL (DESIGN.md section 5). */
            char *u = cred_for_curl(s->username);
            char *pw = cred_for_curl(s->provider->password);
            curl_easy_setopt(e, CURLOPT_PROXYUSERNAME, u);
            curl_easy_setopt(e, CURLOPT_PROXYPASSWORD, pw);
            memset(pw, 0, strlen(pw));
            free(u);
            free(pw);
        }
        if ((s->provider && !strcmp(s->provider->rotation, "per_request")) ||
            !strcmp(x->rotation, "per_request")) {
            curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
            curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
        } else if (session_timed(s)) {
            /* No connection (tunnel) of an earlier interval: its exit is
             * gone.  CURLOPT_MAXLIFETIME_CONN counts whole seconds of a
             * connection's age, so early in an interval every connection is
             * fresh, later only those younger than the interval are reused. */
            session_timed_update(s, now);
            int64_t in = now - s->epoch_start_ms;
            if (in < 2000)
                curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
            else
                curl_easy_setopt(e, CURLOPT_MAXLIFETIME_CONN, (long)(in / 1000 - 1));
        }
    } else {
        curl_easy_setopt(e, CURLOPT_PROXY, "");
    }
    curl_slist_free_all(x->slist);
    x->slist = NULL;
    for (size_t i = 0; i < w->n_headers; i++) {
        size_t n = strlen(w->hdr_names[i]) + strlen(w->hdr_values[i]) + 3;
        char *line = malloc(n);
        if (!line)
            abort();
        if (w->hdr_values[i][0])
            snprintf(line, n, "%s: %s", w->hdr_names[i], w->hdr_values[i]);
        else
            snprintf(line, n, "%s;", w->hdr_names[i]);
        x->slist = curl_slist_append(x->slist, line);
        free(line);
    }
    if (x->slist)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->slist);
    if (!strcmp(x->method, "HEAD"))
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(x->method, "GET") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x->method);
    if (x->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
    }
    x->attempts++;
    x->step_attempts++;
    if (x->n_alog == 0 || x->alog[x->n_alog - 1].ended_at_ms) {
        if (x->n_alog == x->cap_alog) {
            x->cap_alog = x->cap_alog ? x->cap_alog * 2 : 4;
            x->alog = realloc(x->alog, x->cap_alog * sizeof(*x->alog));
            if (!x->alog)
                abort();
        }
        memset(&x->alog[x->n_alog], 0, sizeof(*x->alog));
        x->alog[x->n_alog].started_at_ms = dd_now_ms();
        x->alog[x->n_alog].step = (uint32_t)x->step;
        snprintf(x->alog[x->n_alog].session, sizeof(x->alog[0].session), "%s",
                 s->name);
        x->n_alog++;
    }
    s->uses++;
    s->uses_since_new++;
    s->active++;
    atomic_fetch_add(&f->st_attempts, 1);
    x->state = XF_RUNNING;
    f->running++;
    x->run_prev = NULL;
    x->run_next = f->run_head;
    if (f->run_head)
        f->run_head->run_prev = x;
    f->run_head = x;
    curl_multi_add_handle(f->multi, e);
}

/* Schedule \p x again: for a retry (attempt cap and deadline permitting).
 * Returns false if the op must fail instead. */
static bool schedule_retry(struct fetch *f, struct xfer *x, int64_t delay_ms)
{
    int64_t now = dd_now_ms();
    if ((int64_t)x->step_attempts >= f->cfg->fetch_max_attempts)
        return false;
    if (now + delay_ms >= x->deadline_ms)
        return false;
    x->not_before_ms = now + delay_ms;
    waiting_push(f, x);
    return true;
}

static struct fetch_result *result_from(struct xfer *x)
{
    struct fetch_result *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    r->opaque = x->opaque;
    r->attempts = x->attempts;
    r->rotations = x->rotations;
    r->throttled = x->throttled;
    r->restarts = x->restarts;
    r->fetched_at_ms = dd_now_ms();
    if (x->session >= 0) {
        const struct session *s = &x->f->sessions[x->session];
        snprintf(r->session, sizeof(r->session), "%s", s->name);
        if (session_timed(s))
            r->session_rotates_at_ms =
                s->epoch_start_ms + s->provider->rotate_every_s * 1000;
    }
    return r;
}

/* Failures after the status line whose body is cut short: never publish
 * that partial body.  Nor the proxy's own answer (407 page, CONNECT
 * refusal): it is not the origin's. */
static bool category_partial(const char *category)
{
    return category && (!strcmp(category, "too_large") ||
                        !strcmp(category, "timeout") ||
                        !strcmp(category, "connect") ||
                        !strcmp(category, "protocol") ||
                        !strcmp(category, "canceled") ||
                        !strcmp(category, "proxy_auth") ||
                        !strcmp(category, "proxy_connect"));
}

/* Record the outcome of the current workflow step (this run). */
static void sres_record(struct xfer *x, long status, const char *category)
{
    if (!x->workflow)
        return;
    if (!x->sres) {
        x->sres = calloc(x->n_steps, sizeof(*x->sres));
        if (!x->sres)
            abort();
    }
    if (x->n_sres >= x->n_steps)
        return;
    struct fetch_step_result *sr = &x->sres[x->n_sres++];
    sr->status = status;
    sr->final_url = x->url ? strdup(x->url) : NULL;
    sr->bytes = x->rlen;
    if (status && (!category || !category_partial(category)) && x->rbody)
        key_sha256_hex(x->rbody, x->rlen, sr->body_sha256);
    else if (status && (!category || !category_partial(category)))
        key_sha256_hex("", 0, sr->body_sha256);
    sr->attempts = x->step_attempts;
    snprintf(sr->category, sizeof(sr->category), "%s", category ? category : "");
    if (x->session >= 0)
        snprintf(sr->session, sizeof(sr->session), "%s",
                 x->f->sessions[x->session].name);
    if (x->n_alog)
        snprintf(sr->exit_addr, sizeof(sr->exit_addr), "%s",
                 x->alog[x->n_alog - 1].exit_addr);
    sr->ended_at_ms = dd_now_ms();
}

static void finish(struct fetch *f, struct xfer *x, bool ok, long status,
                   const char *category, const char *error)
{
    att_close(x, status, ok ? NULL : category, ok ? NULL : error);
    sres_record(x, status, ok ? NULL : category);
    unpin(f, x);
    host_release(x);
    struct fetch_result *r = result_from(x);
    r->attempt_log = x->alog;
    r->n_attempt_log = x->n_alog;
    x->alog = NULL;
    x->n_alog = x->cap_alog = 0;
    if (x->workflow) {
        r->steps = x->sres;
        r->n_steps = x->n_sres;
        r->n_steps_total = x->n_steps;
        x->sres = NULL;
        x->n_sres = 0;
    }
    r->ok = ok;
    r->status = status;
    if (!ok) {
        r->category = strdup(category);
        r->error = strdup(error ? error : category);
        atomic_fetch_add(&f->st_failed, 1);
    } else
        atomic_fetch_add(&f->st_completed, 1);
    r->final_url = strdup(x->url);
    if (ok || (status && !category_partial(category))) {
        r->body = x->rbody;
        r->body_len = x->rlen;
        if (r->body)
            r->body[r->body_len] = '\0';
        x->rbody = NULL;
        x->rlen = x->rcap = 0;
        r->content_type = x->content_type, x->content_type = NULL;
        r->etag = x->etag, x->etag = NULL;
        r->last_modified = x->last_modified, x->last_modified = NULL;
    }
    xfer_free(x);
    pthread_mutex_lock(&f->lock);
    if (f->done_n == f->done_cap) {
        size_t cap = f->done_cap ? f->done_cap * 2 : 256;
        struct fetch_result **d = malloc(cap * sizeof(*d));
        if (!d)
            abort();
        for (size_t i = 0; i < f->done_n; i++)
            d[i] = f->done[(f->done_head + i) % f->done_cap];
        free(f->done);
        f->done = d;
        f->done_head = 0;
        f->done_cap = cap;
    }
    f->done[(f->done_head + f->done_n) % f->done_cap] = r;
    f->done_n++;
    pthread_cond_signal(&f->done_cond);
    pthread_mutex_unlock(&f->lock);
}

static void fail_or_retry(struct fetch *f, struct xfer *x, long status,
                          const char *category, const char *error,
                          bool retryable)
{
    att_close(x, status, category, error);
    if (retryable) {
        int64_t d = retry_backoff_ms((int)x->step_attempts - 1,
                                     f->cfg->fetch_backoff_base_ms,
                                     f->cfg->fetch_backoff_max_ms,
                                     xorshift(&f->rnd));
        if (schedule_retry(f, x, d)) {
            log_msg(LOG_DEBUG, "fetch", "retry %s in %lld ms after %s",
                    x->orig_url, (long long)d, category);
            return;
        }
    }
    finish(f, x, false, status, category, error);
}

/* A session failure during a workflow (the attempt, if any, is closed): the
 * partial run is discarded and the workflow restarts from its first step on
 * another session when it may (wf_restartable, restarts left, deadline);
 * otherwise it fails with \p category. */
static void wf_restart_or_fail(struct fetch *f, struct xfer *x, long status,
                               const char *category, const char *error)
{
    if (!wf_restartable(x) ||
        (int64_t)x->restarts >= f->cfg->fetch_workflow_max_restarts) {
        finish(f, x, false, status, category, error);
        return;
    }
    int64_t d = retry_backoff_ms((int)x->restarts, f->cfg->fetch_backoff_base_ms,
                                 f->cfg->fetch_backoff_max_ms, xorshift(&f->rnd));
    if (dd_now_ms() + d >= x->deadline_ms) {
        finish(f, x, false, status, category, error);
        return;
    }
    log_msg(LOG_INFO, "fetch",
            "workflow %s: %s at step %zu of %zu through %s; restarting from "
            "the first step (on another session when one is free)",
            x->steps[0].url, category,
            x->step + 1, x->n_steps,
            x->session >= 0 ? f->sessions[x->session].name : "-");
    x->restarts++;
    atomic_fetch_add(&f->st_restarts, 1);
    metrics_add(METRICS_WORKFLOW_RESTARTS, 1);
    unpin(f, x);
    sres_free(x->sres, x->n_sres);
    x->sres = NULL;
    x->n_sres = 0;
    jar_drop(x);
    xfer_load_step(x, 0);
    xfer_reset_response(x);
    x->rlen = 0;
    x->need_rotate = (int64_t)x->rotations < f->cfg->fetch_max_rotations;
    x->fresh_connect = true;
    x->not_before_ms = dd_now_ms() + d;
    waiting_push(f, x);
}

/* A step answered: the workflow goes on with its next step on the same
 * session, or the op is done. */
static void step_ok(struct fetch *f, struct xfer *x, long status)
{
    if (!x->workflow || x->step + 1 >= x->n_steps) {
        finish(f, x, true, status, NULL, NULL);
        return;
    }
    att_close(x, status, NULL, NULL);
    sres_record(x, status, NULL);
    if (x->pin < 0 && x->session >= 0) {
        /* From here the workflow is bound to this session (and its exit). */
        struct session *s = &f->sessions[x->session];
        x->pin = x->session;
        s->pinned++;
        x->run_renewals = s->renewals;
        x->run_epoch = s->epoch;
    }
    xfer_load_step(x, x->step + 1);
    xfer_reset_response(x);
    x->rlen = 0;
    x->not_before_ms = 0;
    waiting_push(f, x);
}

/* Can a session of another credential set than \p s serve \p x (country,
 * not suspended; cooling down is fine: it will come back)? */
static bool other_credentials(struct fetch *f, struct xfer *x,
                              const struct session *s, int64_t now)
{
    for (size_t i = 0; i < f->n_sessions; i++) {
        const struct session *t = &f->sessions[i];
        if (t == s || (s->provider && t->provider == s->provider))
            continue;
        if (!session_serves(t, x))
            continue;
        if (!session_suspended(t, now))
            return true;
    }
    return false;
}

/* 407 or a SOCKS authentication rejection: retire the session, suspend its
 * credential set (a provider's sessions) for fetch.proxy_auth_cooldown_ms,
 * and move the op to a session of another credential set, else fail.  A
 * plain exit of proxy.exits has no credentials to suspend: it cools down
 * (fetch.cooldown_default_ms) like a blocked exit. */
static void proxy_auth_failed(struct fetch *f, struct xfer *x, long status,
                              const char *error)
{
    struct session *s = &f->sessions[x->session];
    int64_t now = dd_now_ms();
    att_close(x, status, "proxy_auth", error);
    s->errors++;
    int64_t cd = f->cfg->fetch_proxy_auth_cooldown_ms;
    if (!s->provider) {
        if (now + f->cfg->fetch_cooldown_default_ms > s->cooldown_until_ms)
            s->cooldown_until_ms = now + f->cfg->fetch_cooldown_default_ms;
    } else if (cd > 0) {
        int64_t until = now + cd;
        bool newly = false;
        for (size_t i = 0; i < f->n_sessions; i++) {
            struct session *t = &f->sessions[i];
            if (t->provider != s->provider)
                continue;
            if (t->suspended_until_ms <= now)
                newly = true;
            if (t->suspended_until_ms < until)
                t->suspended_until_ms = until;
        }
        if (newly) {
            atomic_fetch_add(&f->st_auth_suspensions, 1);
            metrics_add(METRICS_PROXY_AUTH_SUSPENSIONS, 1);
            log_msg(LOG_WARNING, "fetch",
                    "proxy refused the credentials of provider %s (%s): not "
                    "used for %lld ms", s->provider->name,
                    error ? error : "407", (long long)cd);
        }
    }
    /* Retire the session: a new session id (and tunnel) when it returns. */
    int others_pinned = s->pinned - (x->pin == x->session ? 1 : 0);
    if (s->provider && !s->provider->api_url[0] && s->active == 0 &&
        others_pinned == 0)
        session_renew(f, s, "proxy_auth");
    x->fresh_connect = true;
    if (wf_midway(x) && !wf_restartable(x)) {
        finish(f, x, false, status, "proxy_auth", error);
        return;
    }
    if ((int64_t)x->rotations >= f->cfg->fetch_max_rotations ||
        !other_credentials(f, x, s, now)) {
        char msg[320];
        snprintf(msg, sizeof(msg), "%s; no session of another credential set "
                 "is available", error ? error : "the proxy refused the credentials");
        finish(f, x, false, status, "proxy_auth", msg);
        return;
    }
    if (wf_midway(x)) {
        wf_restart_or_fail(f, x, status, "proxy_auth", error);
        return;
    }
    /* Nothing reached the origin: retried whatever the method. */
    x->need_rotate = true;
    if (!schedule_retry(f, x, 0))
        finish(f, x, false, status, "proxy_auth", error);
}

/* Classify a finished attempt (see DESIGN.md section 5 categories). */
static void on_done(struct fetch *f, struct xfer *x, CURLcode res)
{
    struct session *s = &f->sessions[x->session];
    s->active--;
    f->running--;
    host_release(x);
    if (x->run_prev)
        x->run_prev->run_next = x->run_next;
    else
        f->run_head = x->run_next;
    if (x->run_next)
        x->run_next->run_prev = x->run_prev;
    x->run_prev = x->run_next = NULL;
    curl_multi_remove_handle(f->multi, x->easy);
    long status = 0, connect_code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->easy, CURLINFO_HTTP_CONNECTCODE, &connect_code);
    curl_off_t dl = 0;
    curl_easy_getinfo(x->easy, CURLINFO_SIZE_DOWNLOAD_T, &dl);
    atomic_fetch_add(&f->st_bytes, (uint64_t)dl);
    bool proxied = s->proxy != NULL;
    bool midway = wf_midway(x);
    if (res == CURLE_OK && status < 500 && !is_blocked(f, status) && status != 407)
        s->errors_in_row = 0;
    else
        s->errors_in_row++;
    char err[CURL_ERROR_SIZE + 64];
    snprintf(err, sizeof(err), "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));

    if (res == CURLE_OK) {
        if (is_blocked(f, status)) {
            x->throttled++;
            atomic_fetch_add(&f->st_throttled, 1);
            int64_t now = dd_now_ms(), delay;
            if (!retry_after_parse(x->retry_after, now,
                                   f->cfg->fetch_retry_after_max_ms, &delay))
                delay = f->cfg->fetch_cooldown_default_ms;
            if (now + delay > s->cooldown_until_ms)
                s->cooldown_until_ms = now + delay;
            s->errors++;
            log_msg(LOG_INFO, "fetch",
                    "HTTP %ld from %s through %s: session cools down %lld ms",
                    status, x->orig_url, s->name, (long long)delay);
            char msg[96];
            snprintf(msg, sizeof(msg), "HTTP %ld (blocked) on every attempt", status);
            const char *cat = status == 429 ? "throttled" : "blocked";
            if (midway) {
                if (wf_restartable(x)) {
                    att_close(x, status, cat, msg);
                    wf_restart_or_fail(f, x, status, cat, msg);
                } else {
                    /* Bound to this exit: wait out its Retry-After and send
                     * the step again (a blocked request was not acted on). */
                    fail_or_retry(f, x, status, cat, msg, true);
                }
                return;
            }
            if (s->provider && s->provider->api_url[0] && s->active == 0 &&
                s->pinned == 0 &&
                (int64_t)x->rotations < f->cfg->fetch_max_rotations) {
                /* The provider moves this session to another exit: the op
                 * keeps its session (and the old exit's cooldown no longer
                 * applies); a fresh tunnel follows. */
                session_renew(f, s, "blocked status");
                s->cooldown_until_ms = 0;
                x->rotations++;
                x->fresh_connect = true;
                atomic_fetch_add(&f->st_rotations, 1);
                metrics_add(METRICS_ROTATIONS, 1);
            } else if (f->n_sessions > 1 &&
                (int64_t)x->rotations < f->cfg->fetch_max_rotations) {
                int64_t wait_until = 0;
                int next = session_pick(f, x, true, now, &wait_until);
                if (next >= 0 && next != x->session) {
                    x->session = next;
                    x->rotations++;
                    x->fresh_connect = true;
                    atomic_fetch_add(&f->st_rotations, 1);
                    metrics_add(METRICS_ROTATIONS, 1);
                }
            }
            /* Backoff is short: the cooldown keeps the old exit out, and the
             * op waits for Retry-After only if no other session is free. */
            fail_or_retry(f, x, status, cat, msg, true);
            return;
        }
        if (status == 407) {
            proxy_auth_failed(f, x, status, "the proxy refused the credentials (407)");
            return;
        }
        if (status >= 300 && status < 400 && status != 304) {
            char *loc = NULL;
            curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &loc);
            if (loc) {
                if ((int64_t)x->redirects >= f->cfg->fetch_max_redirects) {
                    finish(f, x, false, status, "redirect_loop",
                           "too many redirects");
                    return;
                }
                if (strncasecmp(loc, "http://", 7) && strncasecmp(loc, "https://", 8)) {
                    finish(f, x, false, status, "forbidden_target",
                           "redirect to a scheme other than http or https");
                    return;
                }
                if (url_target_refused(f, loc)) {
                    finish(f, x, false, status, "forbidden_target",
                           "redirect to a loopback, link-local or private "
                           "address not in fetch.allow_targets");
                    return;
                }
                x->redirects++;
                xfer_set_url(x, strdup(loc));
                if (status == 303 || ((status == 301 || status == 302) &&
                                      strcmp(x->method, "GET") && strcmp(x->method, "HEAD"))) {
                    free(x->method);
                    x->method = strdup("GET");
                    x->body = NULL;
                    x->body_len = 0;
                }
                /* A redirect hop is part of the same attempt; it passes the
                 * per-host limits of its target like any request. */
                x->attempts--;
                x->step_attempts--;
                x->not_before_ms = 0;
                waiting_push(f, x);
                return;
            }
        }
        if (status >= 500) {
            s->errors++;
            char msg[64];
            snprintf(msg, sizeof(msg), "HTTP %ld from the origin", status);
            if (midway) {
                if (x->safe && (int64_t)x->step_5xx < f->cfg->fetch_workflow_step_retries) {
                    x->step_5xx++;
                    fail_or_retry(f, x, status, "server_error", msg, true);
                } else {
                    att_close(x, status, "server_error", msg);
                    wf_restart_or_fail(f, x, status, "server_error", msg);
                }
                return;
            }
            fail_or_retry(f, x, status, "server_error", msg, x->safe);
            return;
        }
        if (status >= 400) {
            char msg[64];
            snprintf(msg, sizeof(msg), "HTTP %ld from the origin", status);
            finish(f, x, false, status, "client_error", msg);
            return;
        }
        step_ok(f, x, status);
        return;
    }

    s->errors++;
    const char *cat = "connect";
    bool retry = x->safe, before_send = false, terminal = false;
    if (x->headers_too_large) {
        snprintf(err, sizeof(err), "response header block above %d bytes",
                 FETCH_MAX_HEADER_BYTES);
        fail_or_retry(f, x, status, "protocol", err, false);
        return;
    }
    if (proxied && connect_code == 407) {
        /* 407 to CONNECT (https through an HTTP proxy). */
        proxy_auth_failed(f, x, 407,
                          "the proxy refused the credentials (407 to CONNECT)");
        return;
    }
    if (proxied && connect_code >= 300) {
        snprintf(err, sizeof(err), "the proxy answered %ld to CONNECT", connect_code);
        if (midway) {
            att_close(x, connect_code, "proxy_connect", err);
            if (wf_restartable(x)) {
                s->cooldown_until_ms = dd_now_ms() + f->cfg->fetch_cooldown_default_ms;
                wf_restart_or_fail(f, x, connect_code, "proxy_connect", err);
            } else
                fail_or_retry(f, x, connect_code, "proxy_connect", err, true);
            return;
        }
        fail_or_retry(f, x, connect_code, "proxy_connect", err, true);
        return;
    }
    if (res == CURLE_PROXY) {
        long pxerr = 0;
        curl_easy_getinfo(x->easy, CURLINFO_PROXY_ERROR, &pxerr);
        if (pxerr == CURLPX_NO_AUTH || pxerr == CURLPX_USER_REJECTED ||
            pxerr == CURLPX_LONG_USER || pxerr == CURLPX_LONG_PASSWD ||
            pxerr == CURLPX_IDENTD_DIFFER) {
            proxy_auth_failed(f, x, 0, err);
            return;
        }
    }
    switch (res) {
    case CURLE_WRITE_ERROR:
        if (x->too_large) {
            cat = "too_large", terminal = true;
            snprintf(err, sizeof(err), "response body above fetch.max_body_bytes");
        } else
            cat = "protocol";
        break;
    case CURLE_COULDNT_RESOLVE_PROXY:
        cat = "proxy_connect", before_send = true;
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        cat = "dns", before_send = true;
        break;
    case CURLE_COULDNT_CONNECT:
        if (x->refused_target) {
            cat = "forbidden_target", terminal = true;
            snprintf(err, sizeof(err), "target address is loopback, link-local "
                     "or private and not in fetch.allow_targets");
        } else
            cat = proxied ? "proxy_connect" : "connect", before_send = true;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        cat = "timeout";
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        cat = "tls", terminal = true;
        break;
    case CURLE_SSL_CONNECT_ERROR:
        cat = "tls";
        break;
    case CURLE_TOO_MANY_REDIRECTS:
        cat = "redirect_loop", terminal = true;
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_OUT_OF_MEMORY: /* 7.88: a header line above its 100 KB limit */
        cat = "protocol", terminal = true;
        break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        cat = "connect";
        break;
    default:
        if (connect_code == 407) {
            proxy_auth_failed(f, x, 407, "the proxy refused the credentials (407)");
            return;
        } else if (proxied && (res == CURLE_PROXY || connect_code >= 400)) {
            cat = "proxy_connect", before_send = true;
        } else
            cat = "protocol", terminal = true;
        break;
    }
    if (terminal)
        retry = false;
    else if (before_send)
        retry = true;
    if (midway && !terminal) {
        /* The bound session failed under the workflow. */
        if (wf_restartable(x)) {
            att_close(x, status, cat, err);
            if (!strcmp(cat, "proxy_connect"))
                s->cooldown_until_ms = dd_now_ms() + f->cfg->fetch_cooldown_default_ms;
            wf_restart_or_fail(f, x, status, cat, err);
            return;
        }
        fail_or_retry(f, x, status, cat, err, retry);
        return;
    }
    if (!strcmp(cat, "proxy_connect") && f->n_sessions > 1) {
        /* The exit is unusable: move the op elsewhere. */
        int64_t wait_until = 0;
        s->cooldown_until_ms = dd_now_ms() + f->cfg->fetch_cooldown_default_ms;
        int next = session_pick(f, x, true, dd_now_ms(), &wait_until);
        if (next >= 0 && next != x->session) {
            x->session = next;
            x->rotations++;
            atomic_fetch_add(&f->st_rotations, 1);
            metrics_add(METRICS_ROTATIONS, 1);
        }
    }
    fail_or_retry(f, x, status, cat, err, retry);
}

/* Launch what may start now.  Per waiting op: its timer; the per-host limits
 * of its current target (concurrency cap, then token bucket); a session (its
 * bound one mid-way through a workflow, another after a session failure, else
 * session_pick); then the attempt. */
static void launch_ready(struct fetch *f)
{
    const struct cfg *c = f->cfg;
    int64_t now = dd_now_ms();
    struct xfer **pp = &f->waiting;
    while (*pp) {
        struct xfer *x = *pp;
#define UNLINK()                                                               \
    do {                                                                       \
        *pp = x->next;                                                         \
        if (f->waiting_tailp == &x->next)                                      \
            f->waiting_tailp = pp;                                             \
        x->next = NULL;                                                        \
    } while (0)
        if (!x->wait_slot && x->not_before_ms > now) {
            pp = &x->next;
            continue;
        }
        if (now >= x->deadline_ms && (x->attempts > 0 || x->gate_waited)) {
            UNLINK();
            finish(f, x, false, 0, "timeout",
                   x->gate_waited && x->wait_slot
                       ? "deadline passed while waiting for the per-host limits"
                       : "deadline passed before a retry");
            continue;
        }
        /* Per-host limits: check the cap first, take a token last. */
        struct host_slot *hs = NULL;
        if (c->fetch_per_host_max_inflight > 0 || c->fetch_per_host_rate_per_min > 0) {
            hs = host_get(f, x->host);
            hs->last_ms = now;
            if (c->fetch_per_host_max_inflight > 0 &&
                hs->inflight >= c->fetch_per_host_max_inflight) {
                if (!x->gate_waited)
                    host_wait_count(f);
                x->wait_slot = x->gate_waited = true;
                pp = &x->next;
                continue;
            }
            x->wait_slot = false;
            if (c->fetch_per_host_rate_per_min > 0) {
                struct fetch_bucket probe = hs->bucket;
                int64_t w = fetch_bucket_take(&probe, now, c->fetch_per_host_rate_per_min,
                                              c->fetch_per_host_burst);
                if (w > 0) {
                    if (!x->gate_waited)
                        host_wait_count(f);
                    x->gate_waited = true;
                    x->not_before_ms = now + w;
                    pp = &x->next;
                    continue;
                }
            }
        }
        int64_t wait_until = 0;
        int s;
        if (wf_midway(x) && !x->need_rotate) {
            /* Bound to its session: no rotation mid-way. */
            struct session *b = &f->sessions[x->session];
            session_timed_update(b, now);
            if (b->renewals != x->run_renewals || b->epoch != x->run_epoch) {
                if (wf_restartable(x)) {
                    UNLINK();
                    wf_restart_or_fail(f, x, 0, "connect",
                                       "the session's exit changed mid-way "
                                       "(rotation)");
                    continue;
                }
                log_msg(LOG_NOTICE, "fetch",
                        "workflow %s: session %s changed exit mid-way; the "
                        "workflow is not replayable and goes on", x->steps[0].url,
                        b->name);
                x->run_renewals = b->renewals;
                x->run_epoch = b->epoch;
            }
            if (session_suspended(b, now)) {
                UNLINK();
                if (wf_restartable(x))
                    wf_restart_or_fail(f, x, 0, "proxy_auth",
                                       "the session's credential set is suspended");
                else
                    finish(f, x, false, 0, "proxy_auth",
                           "the session's credential set is suspended");
                continue;
            }
            if (b->cooldown_until_ms > now && wf_restartable(x)) {
                /* Its exit is blocked (another op met a blocked status
                 * there): start again elsewhere rather than wait. */
                UNLINK();
                wf_restart_or_fail(f, x, 429, "throttled",
                                   "the workflow's session is cooling down "
                                   "after a blocked status");
                continue;
            }
            if (b->cooldown_until_ms > now) {
                if (b->cooldown_until_ms >= x->deadline_ms) {
                    UNLINK();
                    finish(f, x, false, 429, "throttled",
                           "the workflow's session was cooling down until the "
                           "deadline");
                    continue;
                }
                x->not_before_ms = b->cooldown_until_ms;
                pp = &x->next;
                continue;
            }
            s = x->session;
        } else {
            s = session_pick(f, x, x->need_rotate, now, &wait_until);
        }
        if (s == -3) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "no proxy session serves this job (country %s, rotation "
                     "%s): no provider of proxy.providers offers it",
                     x->country[0] ? x->country : "any",
                     x->rotation[0] ? x->rotation : "any");
            UNLINK();
            finish(f, x, false, 0, "proxy_connect", msg);
            continue;
        }
        if (s == -2) {
            UNLINK();
            finish(f, x, false, 0, "proxy_auth",
                   "every session that could serve this op belongs to a "
                   "credential set suspended after proxy authentication failures");
            continue;
        }
        if (s < 0) {
            /* Every session cools down: wait for the first to come back
             * (this is where Retry-After is waited out). */
            if (wait_until >= x->deadline_ms) {
                UNLINK();
                finish(f, x, false, 429, "throttled",
                       "every session was cooling down until the deadline");
                continue;
            }
            x->not_before_ms = wait_until;
            pp = &x->next;
            continue;
        }
        if (x->session >= 0 && s != x->session) {
            x->rotations++;
            x->fresh_connect = true;
            atomic_fetch_add(&f->st_rotations, 1);
            metrics_add(METRICS_ROTATIONS, 1);
        }
        x->need_rotate = false;
        x->session = s;
        if (hs) {
            if (c->fetch_per_host_rate_per_min > 0)
                (void)fetch_bucket_take(&hs->bucket, now, c->fetch_per_host_rate_per_min,
                                        c->fetch_per_host_burst);
            hs->inflight++;
            x->hs = hs;
        }
        x->gate_waited = false;
        UNLINK();
        start_attempt(f, x, now); /* may finish (and free) x */
#undef UNLINK
    }
}

static int64_t next_timer(struct fetch *f)
{
    int64_t t = INT64_MAX;
    for (struct xfer *x = f->waiting; x; x = x->next) {
        /* Ops held by the concurrency cap wake on a completion (or their
         * deadline). */
        int64_t at = x->wait_slot ? x->deadline_ms : x->not_before_ms;
        if (at < t)
            t = at;
    }
    return t;
}

static void *fetch_main(void *arg)
{
    struct fetch *f = arg;
    while (!atomic_load(&f->stop)) {
        pthread_mutex_lock(&f->lock);
        struct xfer *in = f->incoming;
        f->incoming = NULL;
        f->incoming_tailp = &f->incoming;
        pthread_mutex_unlock(&f->lock);
        while (in) {
            struct xfer *n = in->next;
            waiting_push(f, in);
            in = n;
        }
        launch_ready(f);
        int still = 0;
        curl_multi_perform(f->multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(f->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            on_done(f, x, m->data.result);
        }
        launch_ready(f);
        int64_t now = dd_now_ms();
        hosts_sweep(f, now);
        int64_t t = next_timer(f);
        int timeout = 1000;
        if (t != INT64_MAX)
            timeout = t <= now ? 0 : (int)(t - now < 1000 ? t - now : 1000);
        curl_multi_poll(f->multi, NULL, 0, timeout, NULL);
    }
    /* Shutdown: cancel whatever still runs or waits. */
    while (f->run_head) {
        struct xfer *x = f->run_head;
        f->run_head = x->run_next;
        curl_multi_remove_handle(f->multi, x->easy);
        f->sessions[x->session].active--;
        host_release(x);
        finish(f, x, false, 0, "canceled", "canceled at shutdown");
    }
    while (f->waiting) {
        struct xfer *x = f->waiting;
        f->waiting = x->next;
        finish(f, x, false, 0, "canceled", "canceled at shutdown");
    }
    f->waiting_tailp = &f->waiting;
    return NULL;
}
dd_err_t fetch_new(const struct cfg *cfg, struct fetch **out, char *errstr,
                   size_t errstr_size)
{
    struct fetch *f = calloc(1, sizeof(*f));
    if (!f)
        return DD_ERR_NOMEM;
    f->cfg = cfg;
    f->rnd = (uint64_t)dd_now_ms() * 0x9E3779B97F4A7C15ull | 1;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->done_cond, NULL);
    f->incoming_tailp = &f->incoming;
    f->waiting_tailp = &f->waiting;
    /* Sessions: each plain exit, then the provider sessions; none = direct. */
    f->sessions = calloc(cfg->proxy_exits.n + 1, sizeof(*f->sessions));
    f->n_sessions = cfg->proxy_exits.n;
    for (size_t i = 0; i < cfg->proxy_exits.n; i++) {
        f->sessions[i].proxy = strdup(cfg->proxy_exits.v[i]);
        snprintf(f->sessions[i].name, sizeof(f->sessions[i].name), "%s",
                 cfg->proxy_exits.v[i]);
    }
    dd_err_t perr = sessions_from_providers(f, errstr, errstr_size);
    if (perr) {
        fetch_destroy(f);
        return perr;
    }
    if (!f->n_sessions) {
        f->n_sessions = 1;
        snprintf(f->sessions[0].name, sizeof(f->sessions[0].name), "direct");
    }
    f->allow = calloc(cfg->fetch_allow_targets.n + 1, sizeof(*f->allow));
    for (size_t i = 0; i < cfg->fetch_allow_targets.n; i++) {
        if (!parse_cidr(cfg->fetch_allow_targets.v[i], &f->allow[i])) {
            dd_errstr_set(errstr, errstr_size,
                          "config: fetch.allow_targets: '%s' is not a CIDR",
                          cfg->fetch_allow_targets.v[i]);
            fetch_destroy(f);
            return DD_ERR_INVAL;
        }
        f->n_allow++;
    }
    f->blocked = calloc(cfg->fetch_blocked_statuses.n + 1, sizeof(long));
    for (size_t i = 0; i < cfg->fetch_blocked_statuses.n; i++)
        f->blocked[f->n_blocked++] = strtol(cfg->fetch_blocked_statuses.v[i], NULL, 10);
    f->multi = curl_multi_init();
    if (!f->multi) {
        dd_errstr_set(errstr, errstr_size, "curl_multi_init failed");
        fetch_destroy(f);
        return DD_ERR_FATAL;
    }
    curl_multi_setopt(f->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 64L);
    if (pthread_create(&f->thread, NULL, fetch_main, f)) {
        dd_errstr_set(errstr, errstr_size, "pthread_create failed");
        fetch_destroy(f);
        return DD_ERR_FATAL;
    }
    f->thread_started = true;
    *out = f;
    return DD_OK;
}

void fetch_destroy(struct fetch *f)
{
    if (!f)
        return;
    if (f->thread_started) {
        atomic_store(&f->stop, true);
        curl_multi_wakeup(f->multi);
        pthread_join(f->thread, NULL);
    }
    if (f->multi)
        curl_multi_cleanup(f->multi);
    while (f->incoming) {
        struct xfer *x = f->incoming;
        f->incoming = x->next;
        xfer_free(x);
    }
    for (size_t i = 0; i < HOST_BUCKETS; i++)
        while (f->hosts[i]) {
            struct host_slot *h = f->hosts[i];
            f->hosts[i] = h->next;
            free(h->host);
            free(h);
        }
    for (size_t i = 0; i < f->done_n; i++)
        fetch_result_destroy(f->done[(f->done_head + i) % f->done_cap]);
    free(f->done);
    for (size_t i = 0; i < f->n_sessions; i++) {
        free(f->sessions[i].proxy);
        free(f->sessions[i].username);
    }
    free(f->sessions);
    free(f->allow);
    free(f->blocked);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->done_cond);
    free(f);
}

static bool wstep_copy(struct wstep *w, const char *url, const char *method,
                       const struct fetch_header *h, size_t n, const void *body,
                       size_t body_len)
{
    w->url = strdup(url ? url : "");
    w->method = strdup(method ? method : "GET");
    w->n_headers = n;
    w->hdr_names = calloc(n + 1, sizeof(char *));
    w->hdr_values = calloc(n + 1, sizeof(char *));
    if (!w->url || !w->method || !w->hdr_names || !w->hdr_values)
        return false;
    for (size_t i = 0; i < n; i++) {
        w->hdr_names[i] = strdup(h[i].name);
        w->hdr_values[i] = strdup(h[i].value);
        if (!w->hdr_names[i] || !w->hdr_values[i])
            return false;
    }
    if (body) {
        w->body = malloc(body_len + 1);
        if (!w->body)
            return false;
        memcpy(w->body, body, body_len);
        w->body[body_len] = '\0';
        w->body_len = body_len;
    }
    return true;
}

dd_err_t fetch_submit(struct fetch *f, const struct fetch_req *req)
{
    struct xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return DD_ERR_NOMEM;
    x->f = f;
    x->pin = -1;
    x->jar_session = -1;
    x->workflow = req->n_steps > 0;
    x->n_steps = x->workflow ? req->n_steps : 1;
    x->steps = calloc(x->n_steps, sizeof(*x->steps));
    if (!x->steps) {
        free(x);
        return DD_ERR_NOMEM;
    }
    bool ok = true;
    if (x->workflow)
        for (size_t i = 0; i < req->n_steps && ok; i++) {
            const struct fetch_step *st = &req->steps[i];
            ok = wstep_copy(&x->steps[i], st->url, st->method, st->headers,
                            st->n_headers, st->body, st->body_len);
        }
    else
        ok = wstep_copy(&x->steps[0], req->url, req->method, req->headers,
                        req->n_headers, req->body, req->body_len);
    if (!ok) {
        xfer_free(x);
        return DD_ERR_NOMEM;
    }
    xfer_load_step(x, 0);
    if (!x->url || !x->method) {
        xfer_free(x);
        return DD_ERR_NOMEM;
    }
    x->replayable = req->replayable;
    x->safe = req->safe;
    if (req->country)
        snprintf(x->country, sizeof(x->country), "%s", req->country);
    if (req->rotation)
        snprintf(x->rotation, sizeof(x->rotation), "%s", req->rotation);
    x->deadline_ms = req->deadline_ms;
    x->not_before_ms = req->not_before_ms;
    /* a resumed wait: its first attempt is the retry it waited for */
    x->retry_noted = req->not_before_ms != 0 && f->retry_cb;
    x->opaque = req->opaque;
    x->session = -1;
    pthread_mutex_lock(&f->lock);
    x->next = NULL;
    *f->incoming_tailp = x;
    f->incoming_tailp = &x->next;
    f->inflight++;
    pthread_mutex_unlock(&f->lock);
    curl_multi_wakeup(f->multi);
    return DD_OK;
}

void fetch_set_retry_hook(struct fetch *f, fetch_retry_cb *cb, void *opaque)
{
    f->retry_cb = cb;
    f->retry_opaque = opaque;
}

struct fetch_result *fetch_take(struct fetch *f, int timeout_ms)
{
    struct fetch_result *r = NULL;
    pthread_mutex_lock(&f->lock);
    if (f->done_n == 0 && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&f->done_cond, &f->lock, &ts);
    }
    if (f->done_n) {
        r = f->done[f->done_head];
        f->done_head = (f->done_head + 1) % f->done_cap;
        f->done_n--;
        f->inflight--;
    }
    pthread_mutex_unlock(&f->lock);
    return r;
}

size_t fetch_inflight(struct fetch *f)
{
    pthread_mutex_lock(&f->lock);
    size_t n = f->inflight;
    pthread_mutex_unlock(&f->lock);
    return n;
}

void fetch_stats_get(struct fetch *f, struct fetch_stats *st)
{
    st->attempts = atomic_load(&f->st_attempts);
    st->rotations = atomic_load(&f->st_rotations);
    st->throttled = atomic_load(&f->st_throttled);
    st->bytes = atomic_load(&f->st_bytes);
    st->completed = atomic_load(&f->st_completed);
    st->failed = atomic_load(&f->st_failed);
    st->restarts = atomic_load(&f->st_restarts);
    st->host_waits = atomic_load(&f->st_host_waits);
    st->auth_suspensions = atomic_load(&f->st_auth_suspensions);
}

void fetch_result_destroy(struct fetch_result *r)
{
    if (!r)
        return;
    free(r->category);
    free(r->error);
    free(r->final_url);
    free(r->content_type);
    free(r->etag);
    free(r->last_modified);
    free(r->body);
    free(r->attempt_log);
    sres_free(r->steps, r->n_steps);
    free(r);
}
