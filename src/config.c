/* The option table and its loader.  Defaults live only in cfg_options[]. */
#include "config.h"
#include "dd.h"
#include "jstr.h"
#include "log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum cfg_type { CFG_INT, CFG_BOOL, CFG_STR, CFG_LIST, CFG_PROVIDERS };

#define CFG_F_SECRET 0x1
#define CFG_OFF(f) offsetof(struct cfg, f)

struct cfg_option {
    const char *name;
    enum cfg_type type;
    size_t off;
    int64_t vmin, vmax;
    const char *vdef; /* default as text (CFG_LIST: comma-separated) */
    const char *unit;
    int flags;
    const char *desc;
};

static const struct cfg_option cfg_options[] = {
    {"instance.id", CFG_STR, CFG_OFF(instance_id), 0, 0, "", "",
     0, "Instance name used in lease owners (a restart of the same instance "
        "takes its ops back at once); empty = $POD_NAME, else the host name. "
        "Static membership is kafka.group.instance.id (the helm chart sets it "
        "to the pod name)."},
    {"broker.bootstrap_servers", CFG_STR, CFG_OFF(bootstrap_servers), 0, 0,
     "127.0.0.1:19092", "", 0, "Kafka bootstrap servers (host:port,...)."},
    {"broker.sasl_username", CFG_STR, CFG_OFF(sasl_username), 0, 0, "", "", 0,
     "SASL username; empty = no SASL."},
    {"broker.sasl_password", CFG_STR, CFG_OFF(sasl_password), 0, 0, "", "",
     CFG_F_SECRET, "SASL password."},
    {"consumer.group_id", CFG_STR, CFG_OFF(group_id), 0, 0, "dedupd", "", 0,
     "Consumer group of the jobs topic."},
    {"consumer.prefetch_kick_ms", CFG_INT, CFG_OFF(prefetch_kick_ms), 0, 1000,
     "20", "ms", 0,
     "Once the jobs consumer or a changelog restore has drained a full "
     "prefetch queue, wake "
     "librdkafka's fetcher (a ListOffsets request to each partition "
     "leader), at most once per this interval: librdkafka 2.0.2 stops "
     "fetching at queued.min.messages / queued.max.messages.kbytes and "
     "looks again only up to 1 s later, so a fast drain waits with nothing "
     "fetched (librdkafka #2879). 0 = off (librdkafka 2.2 and later offer "
     "kafka.fetch.queue.backoff.ms instead, 1000 ms by default)."},
    {"topics.jobs", CFG_STR, CFG_OFF(topic_jobs), 0, 0, "scrape.jobs", "", 0,
     "Topic of scrape jobs (input)."},
    {"topics.results", CFG_STR, CFG_OFF(topic_results), 0, 0, "scrape.results",
     "", 0, "Topic of results, keyed by event_key."},
    {"topics.conflicts", CFG_STR, CFG_OFF(topic_conflicts), 0, 0,
     "scrape.conflicts", "", 0,
     "Topic of conflict records (same op_id, different request_hash)."},
    {"topics.dlq", CFG_STR, CFG_OFF(topic_dlq), 0, 0, "scrape.jobs.dlq", "", 0,
     "Dead-letter topic for jobs that are not valid data."},
    {"store.path", CFG_STR, CFG_OFF(store_path), 0, 0, "/var/lib/dedupd/store",
     "", 0, "RocksDB directory of this instance."},
    {"store.ops_ttl_ms", CFG_INT, CFG_OFF(store_ops_ttl_ms), 1000,
     INT64_C(31536000000), "259200000", "ms", 0,
     "Time a complete op is remembered (72 h)."},
    {"store.failed_ttl_ms", CFG_INT, CFG_OFF(store_failed_ttl_ms), 1000,
     INT64_C(31536000000), "3600000", "ms", 0,
     "Delay after a failure before a job of the same op is tried again, under "
     "its next retry_epoch (1 h)."},
    {"store.lease_ms", CFG_INT, CFG_OFF(store_lease_ms), 1000, 3600000,
     "60000", "ms", 0, "Lease of a running op; renewed while its fetch lives."},
    {"store.block_cache_bytes", CFG_INT, CFG_OFF(store_block_cache_bytes),
     1048576, INT64_C(68719476736), "67108864", "bytes", 0,
     "RocksDB LRU block cache size."},
    {"store.max_wal_bytes", CFG_INT, CFG_OFF(store_max_wal_bytes), 33554432,
     INT64_C(68719476736), "134217728", "bytes", 0,
     "Bound of the local store's WAL files together (RocksDB "
     "max_total_wal_size); past it the column families that hold the "
     "oldest WAL file are flushed so that file can go. Disk, or memory for "
     "a store on an in-memory emptyDir, and what the next start replays. "
     "A soft bound: writes go on while that flush runs. At least one memtable "
     "(32 MiB): below, nearly every write batch would flush."},
    {"store.sync", CFG_BOOL, CFG_OFF(store_sync), 0, 0, "false", "", 0,
     "fsync the local store's WAL (group commit: a store thread fsyncs as soon "
     "as the previous fsync ended; a job's offset then also waits for its "
     "completion to be on disk). Not needed for correctness: the changelog "
     "topic is the durable record and a lost local write is restored from it; "
     "true only shortens the restore after a crash of the machine."},
    {"store.validators_ttl_ms", CFG_INT, CFG_OFF(store_validators_ttl_ms),
     1000, INT64_C(31536000000), "604800000", "ms", 0,
     "Time the validators (ETag, Last-Modified) of a resource and the body "
     "they name are kept for conditional refetch (7 d); a validator whose "
     "body is gone is ignored."},
    {"store.max_body_bytes", CFG_INT, CFG_OFF(store_max_body_bytes), 1024,
     INT64_C(268435456), "8388608", "bytes", 0,
     "Largest body stored for conditional refetch; a response with a larger "
     "body completes as usual but keeps no validator."},
    {"fetch.timeout_ms", CFG_INT, CFG_OFF(fetch_timeout_ms), 100, 600000,
     "30000", "ms", 0, "Total time allowed for one HTTP attempt."},
    {"fetch.connect_timeout_ms", CFG_INT, CFG_OFF(fetch_connect_timeout_ms), 100,
     600000, "10000", "ms", 0, "Time allowed to connect (to the proxy)."},
    {"fetch.max_inflight", CFG_INT, CFG_OFF(fetch_max_inflight), 1, 100000,
     "256", "ops", 0,
     "Ops fetched concurrently; beyond it consumption pauses (backpressure)."},
    {"fetch.max_attempts", CFG_INT, CFG_OFF(fetch_max_attempts), 1, 100, "6",
     "attempts", 0, "Attempts per op before it fails with its last category."},
    {"fetch.max_rotations", CFG_INT, CFG_OFF(fetch_max_rotations), 0, 1000, "10",
     "rotations", 0, "Session rotations per op (counted apart from retries)."},
    {"fetch.backoff_base_ms", CFG_INT, CFG_OFF(fetch_backoff_base_ms), 1, 600000,
     "200", "ms", 0, "Base of exponential backoff with full jitter."},
    {"fetch.backoff_max_ms", CFG_INT, CFG_OFF(fetch_backoff_max_ms), 1, 3600000,
     "10000", "ms", 0, "Cap of one backoff delay."},
    {"fetch.deadline_ms", CFG_INT, CFG_OFF(fetch_deadline_ms), 100, 86400000,
     "120000", "ms", 0,
     "Default total budget of all attempts of an op (job deadline_s overrides)."},
    {"fetch.cooldown_default_ms", CFG_INT, CFG_OFF(fetch_cooldown_default_ms), 0,
     3600000, "5000", "ms", 0,
     "Session cooldown after a 429 without a valid Retry-After."},
    {"fetch.retry_after_max_ms", CFG_INT, CFG_OFF(fetch_retry_after_max_ms), 0,
     86400000, "300000", "ms", 0, "Clamp of any Retry-After value."},
    {"fetch.max_body_bytes", CFG_INT, CFG_OFF(fetch_max_body_bytes), 1024,
     INT64_C(1073741824), "8388608", "bytes", 0,
     "Response body cap (decoded), enforced while receiving."},
    {"fetch.max_redirects", CFG_INT, CFG_OFF(fetch_max_redirects), 0, 50, "5",
     "redirects", 0, "Redirects followed per attempt."},
    {"fetch.allow_targets", CFG_LIST, CFG_OFF(fetch_allow_targets), 0, 0, "", "",
     0, "CIDRs exempt from the SSRF guard (loopback, link-local and private "
        "ranges are refused otherwise)."},
    {"fetch.blocked_statuses", CFG_LIST, CFG_OFF(fetch_blocked_statuses), 0, 0,
     "429", "", 0,
     "HTTP statuses that mean the exit is blocked: cooldown, rotate, retry."},
    {"fetch.user_agent", CFG_STR, CFG_OFF(fetch_user_agent), 0, 0,
     "dedupd/" DEDUPD_VERSION, "", 0,
     "User-Agent sent when the job sets none."},
    {"proxy.exits", CFG_LIST, CFG_OFF(proxy_exits), 0, 0, "", "", 0,
     "Proxy exits (http://host:port or socks5h://host:port); each is a "
     "session of the pool; empty = fetch direct."},
    {"proxy.providers", CFG_PROVIDERS, CFG_OFF(proxy_providers), 0, 0, "", "", 0,
     "Proxy providers: an array of objects {name, gateway, http_port, "
     "socks_port, username (template with {user} {session} {country}), user, "
     "password_env | password_file, rotation (sticky|timed|per_request), "
     "rotate_every_s, countries, sessions, api_url, api_key_env | api_key_file}; "
     "file only.  Passwords never appear in logs, results or config --dump."},
    {"fetch.session_max_uses", CFG_INT, CFG_OFF(fetch_session_max_uses), 0,
     INT64_C(1000000000), "0", "requests", 0,
     "Retire a provider session after this many requests (0 = no limit)."},
    {"fetch.session_max_errors", CFG_INT, CFG_OFF(fetch_session_max_errors), 0,
     1000000, "5", "errors", 0,
     "Retire a provider session after this many errors in a row."},
    {"fetch.session_max_age_ms", CFG_INT, CFG_OFF(fetch_session_max_age_ms), 0,
     INT64_C(604800000), "1800000", "ms", 0,
     "Retire a provider session at this age (0 = no limit)."},
    {"fetch.per_host_max_inflight", CFG_INT, CFG_OFF(fetch_per_host_max_inflight),
     0, 100000, "64", "requests", 0,
     "Requests to one target host (name or IP, any port) running at once; more "
     "wait in the engine (0 = no cap)."},
    {"fetch.per_host_rate_per_min", CFG_INT, CFG_OFF(fetch_per_host_rate_per_min),
     0, 60000000, "0", "requests/min", 0,
     "Requests started per minute to one target host (token bucket, refilled "
     "continuously; attempts, redirect hops and workflow steps all count); "
     "0 = no limit."},
    {"fetch.per_host_burst", CFG_INT, CFG_OFF(fetch_per_host_burst), 1, 100000,
     "1", "requests", 0,
     "Token bucket size of fetch.per_host_rate_per_min: requests a host may get "
     "at once after a quiet period."},
    {"fetch.proxy_auth_cooldown_ms", CFG_INT, CFG_OFF(fetch_proxy_auth_cooldown_ms),
     0, 86400000, "300000", "ms", 0,
     "After a 407 or SOCKS authentication rejection, the provider's sessions "
     "(its credential set) are not used for this long; ops move to another "
     "provider or fail with proxy_auth.  A plain exit cools down for "
     "fetch.cooldown_default_ms instead."},
    {"fetch.workflow_max_restarts", CFG_INT, CFG_OFF(fetch_workflow_max_restarts),
     0, 100, "3", "restarts", 0,
     "Times a restartable workflow (every step safe, or \"replayable\": true) "
     "restarts from its first step on another session after a session failure."},
    {"fetch.workflow_step_retries", CFG_INT, CFG_OFF(fetch_workflow_step_retries),
     0, 100, "1", "retries", 0,
     "Retries of a safe workflow step on the same session after a 5xx, before "
     "the workflow restarts (or fails)."},
    {"identity.variance_headers", CFG_LIST,
     CFG_OFF(identity_variance_headers), 0, 0, "accept,accept-language", "", 0,
     "Request headers that are part of a job's identity."},
    {"identity.credential_headers", CFG_LIST,
     CFG_OFF(identity_credential_headers), 0, 0, "", "", 0,
     "Credential headers beyond authorization, cookie, proxy-authorization and "
     "x-api-key (identity keeps their SHA-256 only)."},
    {"identity.trust_headers", CFG_BOOL, CFG_OFF(identity_trust_headers), 0, 0,
     "true", "", 0,
     "Decide duplicates from the Kafka key and the dedupd-op-id / "
     "dedupd-request-hash headers when the hot index proves them (fast path)."},
    {"store.index_max_bytes", CFG_INT, CFG_OFF(store_index_max_bytes), 0,
     INT64_C(68719476736), "67108864", "bytes", 0,
     "Bound of the in-memory hot index (at most 64 bytes per op_id; the "
     "default holds about 1.68M); past it the index is only a cache and "
     "each new op's claim reads RocksDB."},
    {"limits.max_job_bytes", CFG_INT, CFG_OFF(limits_max_job_bytes), 256,
     INT64_C(104857600), "1048576", "bytes", 0, "Largest accepted job."},
    {"limits.max_result_bytes", CFG_INT, CFG_OFF(limits_max_result_bytes), 1024,
     INT64_C(104857600), "921600", "bytes", 0,
     "Largest result event; above it the result is failed/too_large."},
    {"admin.listen", CFG_STR, CFG_OFF(admin_listen), 0, 0, "0.0.0.0:9464", "",
     0, "Probes and metrics listener (/healthz, /readyz, /metrics), ADDR:PORT; "
        "read-only; port 0 picks a free port (logged)."},
    {"api.listen", CFG_STR, CFG_OFF(api_listen), 0, 0, "127.0.0.1:9465", "", 0,
     "Job API listener (POST /v1/jobs, GET /v1/ops/{op_id}), ADDR:PORT; "
     "empty = off."},
    {"api.token", CFG_STR, CFG_OFF(api_token), 0, 0, "", "", CFG_F_SECRET,
     "Bearer token the job API requires; empty = none."},
    {"api.scope", CFG_STR, CFG_OFF(api_scope), 0, 0, "api", "", 0,
     "Scope of jobs submitted through POST /v1/jobs with an Idempotency-Key "
     "(op_id = scope:key)."},
    {"api.receipt_ttl_ms", CFG_INT, CFG_OFF(api_receipt_ttl_ms), 0,
     INT64_C(31536000000), "0", "ms", 0,
     "Deprecated. How long a done submit receipt is kept for Idempotency-Key "
     "replays: 0 (default) = as long as the op it answers for "
     "(store.ops_ttl_ms, or store.failed_ttl_ms + half of it when longer; + "
     "the longest job deadline, 24 h, + 1 h); a larger "
     "value keeps it longer; a value below store.ops_ttl_ms is refused."},
    {"api.max_body_bytes", CFG_INT, CFG_OFF(api_max_body_bytes), 256,
     INT64_C(104857600), "1048576", "bytes", 0,
     "Largest request body the job API reads (413 beyond)."},
    {"log.level", CFG_STR, CFG_OFF(log_level), 0, 0, "info", "", 0,
     "error, warning, notice, info or debug."},
    {"log.debug", CFG_STR, CFG_OFF(log_debug), 0, 0, "", "", 0,
     "Facilities logged at debug level (e.g. store,fetch; all)."},
    {"tail.store_path", CFG_STR, CFG_OFF(tail_store_path), 0, 0,
     "/var/lib/dedupd/tail", "", 0, "RocksDB directory of `dedupd tail`."},
    {"tail.group_id", CFG_STR, CFG_OFF(tail_group_id), 0, 0, "dedupd-tail", "",
     0, "Consumer group of `dedupd tail`."},
    {"tail.ttl_ms", CFG_INT, CFG_OFF(tail_ttl_ms), 1000, INT64_C(31536000000),
     "259200000", "ms", 0,
     "How long tail remembers an event_key (at least store.ops_ttl_ms)."},
    {"shutdown.grace_ms", CFG_INT, CFG_OFF(shutdown_grace_ms), 0, 3600000,
     "20000", "ms", 0, "Time to finish in-flight work on SIGTERM."},
    {"rebalance.grace_ms", CFG_INT, CFG_OFF(rebalance_grace_ms), 1000, 3600000,
     "60000", "ms", 0,
     "Time a revoke waits for the revoked partitions' fetches in flight to "
     "finish (and their results and changelog records to be acknowledged) "
     "before releasing what did not finish; at least fetch.timeout_ms + "
     "kafka.request.timeout.ms and below kafka.max.poll.interval.ms."},
    {"processing.guarantee", CFG_STR, CFG_OFF(processing_guarantee), 0, 0,
     "at_least_once", "", 0,
     "at_least_once (results may repeat under their event_key after a "
     "crash, revoke or zombie: consumers drop replays) or exactly_once (one "
     "Kafka transaction per commit interval holds results, DLQ and conflict "
     "records, changelog records and the consumed offsets: a read_committed "
     "consumer sees each event_key once; DESIGN.md section 6)."},
    {"processing.commit_interval_ms", CFG_INT,
     CFG_OFF(processing_commit_interval_ms), 10, 2000, "500", "ms", 0,
     "exactly_once: how often the open transaction is committed (results "
     "become visible to read_committed consumers then; each commit waits for "
     "the transaction's messages, so a shorter interval costs throughput: "
     "bench/run.sh row 6c)."},
    {"processing.transaction_timeout_ms", CFG_INT,
     CFG_OFF(processing_transaction_timeout_ms), 1000, 900000, "10000", "ms", 0,
     "exactly_once: the producer's transaction.timeout.ms: the coordinator "
     "aborts a transaction open longer (a zombie's, a broker outage's); a "
     "new owner of its partitions waits at most this long for it."},
};

#define N_OPTIONS (sizeof(cfg_options) / sizeof(cfg_options[0]))

static void list_free(struct cfg_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Append a copy of the \p n bytes at \p s (NUL added). */
static void list_push_n(struct cfg_strlist *l, const char *s, size_t n)
{
    l->v = dd_xrealloc(l->v, (l->n + 1) * sizeof(*l->v), "config list");
    char *item = dd_xmalloc(n + 1, "config list item");
    memcpy(item, s, n);
    item[n] = '\0';
    l->v[l->n++] = item;
}

static void list_push(struct cfg_strlist *l, const char *s)
{
    list_push_n(l, s, strlen(s));
}

/* A list from the environment: items separated by commas or white space
 * (none of the list options' items can hold either), so both
 * "a,b" and "a b" (what `scripts/stack.sh env` prints) work. */
static bool list_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Split separated text into a list (items trimmed, empty ones skipped). */
static void list_set_csv(struct cfg_strlist *l, const char *text)
{
    list_free(l);
    const char *p = text;
    while (*p) {
        while (*p && list_sep(*p))
            p++;
        const char *e = p;
        while (*e && !list_sep(*e))
            e++;
        if (e > p)
            list_push_n(l, p, (size_t)(e - p));
        p = e;
    }
}

static dd_err_t set_text(struct cfg *cfg, const struct cfg_option *o,
                         const char *text, const char *src, char *errstr,
                         size_t errstr_size)
{
    void *field = (char *)cfg + o->off;
    const char *shown = (o->flags & CFG_F_SECRET) ? "[redacted]" : text;
    switch (o->type) {
    case CFG_STR:
        free(*(char **)field);
        *(char **)field = dd_xstrdup(text, "config string");
        return DD_OK;
    case CFG_LIST:
        list_set_csv((struct cfg_strlist *)field, text);
        return DD_OK;
    case CFG_PROVIDERS:
        if (*text) {
            dd_errstr_set(errstr, errstr_size,
                          "%s: %s: set providers in the configuration file "
                          "(an array of objects)", src, o->name);
            return DD_ERR_INVAL;
        }
        return DD_OK;
    case CFG_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes"))
            *(bool *)field = true;
        else if (!strcmp(text, "false") || !strcmp(text, "0") ||
                 !strcmp(text, "no"))
            *(bool *)field = false;
        else {
            dd_errstr_set(errstr, errstr_size,
                          "%s: %s: '%s' is not a boolean (true or false)", src,
                          o->name, shown);
            return DD_ERR_INVAL;
        }
        return DD_OK;
    case CFG_INT: {
        errno = 0;
        char *end = NULL;
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end) {
            dd_errstr_set(errstr, errstr_size, "%s: %s: '%s' is not an integer",
                          src, o->name, shown);
            return DD_ERR_INVAL;
        }
        if (v < o->vmin || v > o->vmax) {
            dd_errstr_set(errstr, errstr_size,
                          "%s: %s: %s is out of range [%lld, %lld] %s", src,
                          o->name, shown, (long long)o->vmin,
                          (long long)o->vmax, o->unit);
            return DD_ERR_INVAL;
        }
        *(int64_t *)field = v;
        return DD_OK;
    }
    }
    return DD_ERR_INVAL;
}

/* "ADDR" or "ADDR/BITS" with ADDR an IPv4 or IPv6 literal. */
static bool cidr_valid(const char *text)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", text);
    char *slash = strchr(buf, '/');
    long bits = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        errno = 0;
        bits = strtol(slash + 1, &end, 10);
        if (errno || end == slash + 1 || *end || bits < 0)
            return false;
    }
    unsigned char a[16];
    if (inet_pton(AF_INET, buf, a) == 1)
        return bits <= 32;
    if (inet_pton(AF_INET6, buf, a) == 1)
        return bits <= 128;
    return false;
}

static const struct cfg_option *find_option(const char *name)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (!strcmp(cfg_options[i].name, name))
            return &cfg_options[i];
    return NULL;
}

static void kafka_set(struct cfg *cfg, const char *name, const char *value)
{
    for (size_t i = 0; i < cfg->kafka_names.n; i++) {
        if (!strcmp(cfg->kafka_names.v[i], name)) {
            free(cfg->kafka_values.v[i]);
            cfg->kafka_values.v[i] = dd_xstrdup(value, "config kafka.*");
            return;
        }
    }
    list_push(&cfg->kafka_names, name);
    list_push(&cfg->kafka_values, value);
}


static char *opt_strdup(const char *s)
{
    return s ? dd_xstrdup(s, "config provider") : NULL;
}

static void providers_free(struct cfg_providers *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        struct cfg_provider *p = &ps->v[i];
        free(p->name);
        free(p->gateway);
        free(p->username);
        free(p->user);
        if (p->password)
            memset(p->password, 0, strlen(p->password));
        free(p->password);
        free(p->rotation);
        list_free(&p->countries);
        free(p->api_url);
        if (p->api_key)
            memset(p->api_key, 0, strlen(p->api_key));
        free(p->api_key);
    }
    free(ps->v);
    ps->v = NULL;
    ps->n = 0;
}

/* Read a secret: the environment variable \p env, else the file \p file
 * (exact bytes: a mounted Secret has no trailing newline; one trailing "\n"
 * is dropped, as `echo` adds it).  The value is never echoed in errors, nor
 * the variable's name (a secret written there by mistake).  Errors are
 * "SRC: WHAT: why". */
static dd_err_t secret_read(const char *env, const char *file, char **out,
                            const char *src, const char *what, char *errstr,
                            size_t errstr_size)
{
    if (env) {
        const char *v = getenv(env);
        if (!v) {
            dd_errstr_set(errstr, errstr_size, "%s: %s: the environment "
                          "variable it names is not set", src, what);
            return DD_ERR_INVAL;
        }
        *out = dd_xstrdup(v, "config secret");
        return DD_OK;
    }
    FILE *fp = fopen(file, "rb");
    if (!fp) {
        dd_errstr_set(errstr, errstr_size, "%s: %s: %s: %s", src, what, file,
                      strerror(errno));
        return DD_ERR_INVAL;
    }
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    bool more = fread(buf + n, 1, 1, fp) == 1;
    fclose(fp);
    if (more || memchr(buf, '\0', n)) {
        dd_errstr_set(errstr, errstr_size, "%s: %s: %s: longer than 4095 "
                      "bytes or holds a NUL byte", src, what, file);
        return DD_ERR_INVAL;
    }
    if (n && buf[n - 1] == '\n')
        n--;
    buf[n] = '\0';
    *out = dd_xstrdup(buf, "config secret");
    memset(buf, 0, sizeof(buf));
    return DD_OK;
}

/* A provider secret from "<name>_env" or "<name>_file" (neither: none).  A
 * reference that is not a string stops start-up (taken as absent, the
 * provider would run without its credentials); its value is not echoed.
 * \p what is the provider's key path ("proxy.providers[N]", short: the file
 * path \p src is never in a fixed buffer, so the key is never cut). */
static dd_err_t provider_secret(json_t *o, const char *name, const char *src,
                                const char *what, char **out, char *errstr,
                                size_t errstr_size)
{
    char kenv[32], kfile[32], w2[96];
    snprintf(kenv, sizeof(kenv), "%s_env", name);
    snprintf(kfile, sizeof(kfile), "%s_file", name);
    json_t *jenv = json_object_get(o, kenv), *jfile = json_object_get(o, kfile);
    if ((jenv && !json_is_string(jenv)) || (jfile && !json_is_string(jfile))) {
        dd_errstr_set(errstr, errstr_size, "%s: %s.%s: must be a string", src,
                      what, jenv && !json_is_string(jenv) ? kenv : kfile);
        return DD_ERR_INVAL;
    }
    const char *env = json_string_value(jenv);
    const char *file = json_string_value(jfile);
    if (!env && !file)
        return DD_OK;
    snprintf(w2, sizeof(w2), "%s.%s", what, env ? kenv : kfile);
    return secret_read(env, file, out, src, w2, errstr, errstr_size);
}

/* Refuse a field of a provider object that is not one of \p known. */
static dd_err_t provider_check_known(json_t *o, const char *src,
                                     const char *what, char *errstr,
                                     size_t errstr_size)
{
    static const char *const known[] = {
        "name", "gateway", "http_port", "socks_port", "username", "user",
        "password_env", "password_file", "rotation", "rotate_every_s",
        "countries", "sessions", "api_url", "api_key_env", "api_key_file", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool ok = false;
        for (size_t j = 0; known[j]; j++)
            ok |= !strcmp(k, known[j]);
        if (!ok) {
            dd_errstr_set(errstr, errstr_size, "%s: %s.%s: unknown field", src,
                          what, k);
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

/* A provider's "countries": ISO 3166-1 alpha-2 codes, kept upper-cased. */
static dd_err_t provider_countries_set(struct cfg_provider *p, json_t *c,
                                       const char *src, const char *what,
                                       char *errstr, size_t errstr_size)
{
    size_t j;
    json_t *cc;
    if (!json_is_array(c)) {
        dd_errstr_set(errstr, errstr_size, "%s: %s.countries: must be "
                      "an array of ISO 3166-1 alpha-2 codes", src, what);
        return DD_ERR_INVAL;
    }
    json_array_foreach(c, j, cc)
    {
        const char *t = json_string_value(cc);
        if (!t || strlen(t) != 2 || !isalpha((unsigned char)t[0]) ||
            !isalpha((unsigned char)t[1])) {
            dd_errstr_set(errstr, errstr_size, "%s: %s.countries[%zu]: "
                          "not an ISO 3166-1 alpha-2 code", src, what, j);
            return DD_ERR_INVAL;
        }
        char up[3] = {(char)toupper((unsigned char)t[0]),
                      (char)toupper((unsigned char)t[1]), 0};
        list_push(&p->countries, up);
    }
    return DD_OK;
}

/* One provider object \p o into \p p (what it set is freed with the list,
 * also on failure).  \p what is its key path, "proxy.providers[N]". */
static dd_err_t provider_set(struct cfg_provider *p, json_t *o,
                             const char *src, const char *what, char *errstr,
                             size_t errstr_size)
{
    dd_err_t err = provider_check_known(o, src, what, errstr, errstr_size);
    if (err)
        return err;
#define PSTR(field, key, def)                                                  \
    do {                                                                       \
        json_t *x = json_object_get(o, key);                                   \
        if (x && !json_is_string(x)) {                                         \
            dd_errstr_set(errstr, errstr_size, "%s: %s.%s: must be a string", \
                          src, what, key);                                     \
            return DD_ERR_INVAL;                                               \
        }                                                                      \
        p->field = opt_strdup(x ? json_string_value(x) : (def));               \
    } while (0)
#define PINT(field, key, def, lo, hi)                                          \
    do {                                                                       \
        json_t *x = json_object_get(o, key);                                   \
        if (x && (!json_is_integer(x) || json_integer_value(x) < (lo) ||       \
                  json_integer_value(x) > (hi))) {                             \
            dd_errstr_set(errstr, errstr_size, "%s: %s.%s: must be an integer "\
                          "in [%d, %d]", src, what, key, (int)(lo), (int)(hi));\
            return DD_ERR_INVAL;                                               \
        }                                                                      \
        p->field = x ? json_integer_value(x) : (def);                          \
    } while (0)
    PSTR(name, "name", NULL);
    PSTR(gateway, "gateway", NULL);
    PSTR(username, "username", "{user}");
    PSTR(user, "user", "");
    PSTR(rotation, "rotation", "sticky");
    PSTR(api_url, "api_url", "");
    PINT(http_port, "http_port", 0, 0, 65535);
    PINT(socks_port, "socks_port", 0, 0, 65535);
    PINT(sessions, "sessions", 1, 1, 10000);
    PINT(rotate_every_s, "rotate_every_s", 0, 0, 86400);
#undef PSTR
#undef PINT
    if (!p->name || !*p->name || !p->gateway || !*p->gateway) {
        dd_errstr_set(errstr, errstr_size, "%s: %s: name and gateway are "
                      "required", src, what);
        return DD_ERR_INVAL;
    }
    if (!p->http_port && !p->socks_port) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: %s: http_port or socks_port is required", src, what);
        return DD_ERR_INVAL;
    }
    if (strcmp(p->rotation, "sticky") && strcmp(p->rotation, "timed") &&
        strcmp(p->rotation, "per_request")) {
        dd_errstr_set(errstr, errstr_size, "%s: %s.rotation: '%s' is not "
                      "sticky, timed or per_request", src, what, p->rotation);
        return DD_ERR_INVAL;
    }
    json_t *c = json_object_get(o, "countries");
    if (c)
        err = provider_countries_set(p, c, src, what, errstr, errstr_size);
    if (!err)
        err = provider_secret(o, "password", src, what, &p->password, errstr,
                              errstr_size);
    if (!err)
        err = provider_secret(o, "api_key", src, what, &p->api_key, errstr,
                              errstr_size);
    return err;
}

static dd_err_t providers_set(struct cfg_providers *ps, json_t *arr,
                              const char *src, char *errstr, size_t errstr_size)
{
    providers_free(ps);
    ps->v = calloc(json_array_size(arr) + 1, sizeof(*ps->v));
    if (!ps->v)
        return DD_ERR_NOMEM;
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o)
    {
        struct cfg_provider *p = &ps->v[ps->n++];
        char what[48]; /* the key path; errors are "SRC: WHAT...: why" */
        snprintf(what, sizeof(what), "proxy.providers[%zu]", i);
        if (!json_is_object(o)) {
            dd_errstr_set(errstr, errstr_size, "%s: %s: must be an object", src,
                          what);
            return DD_ERR_INVAL;
        }
        dd_err_t err = provider_set(p, o, src, what, errstr, errstr_size);
        if (err)
            return err;
    }
    return DD_OK;
}

/* Apply one JSON value at dotted path \p name. */
static dd_err_t set_json(struct cfg *cfg, const char *name, json_t *v,
                         const char *src, char *errstr, size_t errstr_size)
{
    if (!strncmp(name, "kafka.", 6)) {
        char buf[64];
        const char *text;
        if (json_is_string(v))
            text = json_string_value(v);
        else if (json_is_integer(v)) {
            snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
            text = buf;
        } else if (json_is_boolean(v))
            text = json_is_true(v) ? "true" : "false";
        else {
            dd_errstr_set(errstr, errstr_size,
                          "%s: %s: must be a string, integer or boolean", src,
                          name);
            return DD_ERR_INVAL;
        }
        kafka_set(cfg, name + 6, text);
        return DD_OK;
    }
    const struct cfg_option *o = find_option(name);
    if (!o) {
        dd_errstr_set(errstr, errstr_size, "%s: %s: unknown option", src, name);
        return DD_ERR_INVAL;
    }
    char buf[64];
    switch (o->type) {
    case CFG_STR:
        if (!json_is_string(v))
            goto wrong_type;
        return set_text(cfg, o, json_string_value(v), src, errstr, errstr_size);
    case CFG_BOOL:
        if (!json_is_boolean(v))
            goto wrong_type;
        *(bool *)((char *)cfg + o->off) = json_is_true(v);
        return DD_OK;
    case CFG_INT:
        if (!json_is_integer(v))
            goto wrong_type;
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        return set_text(cfg, o, buf, src, errstr, errstr_size);
    case CFG_PROVIDERS:
        if (!json_is_array(v))
            goto wrong_type;
        return providers_set((struct cfg_providers *)((char *)cfg + o->off), v,
                             src, errstr, errstr_size);
    case CFG_LIST: {
        if (!json_is_array(v))
            goto wrong_type;
        struct cfg_strlist *l = (struct cfg_strlist *)((char *)cfg + o->off);
        list_free(l);
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item)
        {
            if (json_is_string(item))
                list_push(l, json_string_value(item));
            else if (json_is_integer(item)) {
                snprintf(buf, sizeof(buf), "%lld",
                         (long long)json_integer_value(item));
                list_push(l, buf);
            } else
                goto wrong_type;
        }
        return DD_OK;
    }
    }
wrong_type:
    dd_errstr_set(errstr, errstr_size, "%s: %s: must be %s", src, name,
                  o->type == CFG_STR    ? "a string"
                  : o->type == CFG_BOOL ? "a boolean"
                  : o->type == CFG_INT  ? "an integer"
                  : o->type == CFG_PROVIDERS ? "an array of provider objects"
                                        : "an array of strings");
    return DD_ERR_INVAL;
}

static dd_err_t walk(struct cfg *cfg, json_t *obj, const char *prefix,
                     const char *src, char *errstr, size_t errstr_size)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        char name[256];
        snprintf(name, sizeof(name), "%s%s%s", prefix, *prefix ? "." : "", k);
        dd_err_t err;
        /* Objects nest (dotted paths), except below kafka.* where librdkafka's
         * own dotted names may also be written flat. */
        if (json_is_object(v))
            err = walk(cfg, v, name, src, errstr, errstr_size);
        else
            err = set_json(cfg, name, v, src, errstr, errstr_size);
        if (err)
            return err;
    }
    return DD_OK;
}

/* DEDUPD_FETCH__TIMEOUT_MS -> fetch.timeout_ms */
static void env_to_name(const char *env, char *out, size_t size)
{
    size_t j = 0;
    for (size_t i = 0; env[i] && j + 1 < size; i++) {
        if (env[i] == '_' && env[i + 1] == '_') {
            out[j++] = '.';
            i++;
        } else
            out[j++] = (char)tolower((unsigned char)env[i]);
    }
    out[j] = '\0';
}

/* Every option at its table default. */
static dd_err_t load_defaults(struct cfg *cfg, char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        dd_err_t err = set_text(cfg, &cfg_options[i], cfg_options[i].vdef,
                                "default", errstr, errstr_size);
        if (err)
            return err;
    }
    return DD_OK;
}

/* A file jansson could not load: "FILE:LINE:COL: kind (byte N)", or
 * "FILE: kind" without a position.  DD_ERR_IO when the file could not be
 * read at all (no position), DD_ERR_INVAL for its contents. */
static dd_err_t file_error(const char *path, const json_error_t *jerr,
                           char *errstr, size_t errstr_size)
{
    /* jansson's text quotes the bytes near the error (a short api.token or
     * password with a typo): only the kind is kept */
    const char *near = strstr(jerr->text, " near '");
    int kind = near ? (int)(near - jerr->text) : (int)strlen(jerr->text);
    if (jerr->line < 0)
        dd_errstr_set(errstr, errstr_size, "%s: %.*s", path, kind, jerr->text);
    else
        dd_errstr_set(errstr, errstr_size, "%s:%d:%d: %.*s (byte %d)", path,
                      jerr->line, jerr->column, kind, jerr->text,
                      jerr->position);
    return jerr->line <= 0 && jerr->position == 0 ? DD_ERR_IO : DD_ERR_INVAL;
}

/* The JSON file at \p path (an object of nested objects) over \p cfg. */
static dd_err_t load_file(struct cfg *cfg, const char *path, char *errstr,
                          size_t errstr_size)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return file_error(path, &jerr, errstr, errstr_size);
    dd_err_t err;
    if (!json_is_object(root)) {
        dd_errstr_set(errstr, errstr_size, "%s: top level must be an object",
                      path);
        err = DD_ERR_INVAL;
    } else {
        err = walk(cfg, root, "", path, errstr, errstr_size);
    }
    json_decref(root);
    return err;
}

/* One "DEDUPD_..._...=value" entry of the environment over \p cfg; other
 * entries are not ours and are skipped. */
static dd_err_t load_env_var(struct cfg *cfg, const char *var, char *errstr,
                             size_t errstr_size)
{
    if (strncmp(var, "DEDUPD_", 7))
        return DD_OK;
    const char *eq = strchr(var, '=');
    if (!eq)
        return DD_OK;
    /* Options are "section.key", so their variables contain "__"
     * (DEDUPD_FETCH__TIMEOUT_MS); other DEDUPD_* variables belong to the
     * scripts (DEDUPD_STACK_DIR, ...) and are not ours to refuse. */
    const char *dunder = strstr(var, "__");
    if (!dunder || dunder > eq)
        return DD_OK;
    char envname[256], name[256];
    snprintf(envname, sizeof(envname), "%.*s", (int)(eq - var - 7), var + 7);
    env_to_name(envname, name, sizeof(name));
    char src[300];
    snprintf(src, sizeof(src), "environment DEDUPD_%s", envname);
    if (!strncmp(name, "kafka.", 6)) {
        /* librdkafka names use '.', which the environment cannot carry:
         * DEDUPD_KAFKA__SOCKET__TIMEOUT__MS -> kafka.socket.timeout.ms,
         * single '_' kept as is. */
        kafka_set(cfg, name + 6, eq + 1);
        return DD_OK;
    }
    const struct cfg_option *o = find_option(name);
    if (!o) {
        dd_errstr_set(errstr, errstr_size, "%s: %s: unknown option", src, name);
        return DD_ERR_INVAL;
    }
    return set_text(cfg, o, eq + 1, src, errstr, errstr_size);
}

/* fetch.blocked_statuses: each an HTTP error status, 400..599. */
static dd_err_t check_blocked_statuses(const struct cfg *cfg, const char *src,
                                       char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < cfg->fetch_blocked_statuses.n; i++) {
        char *end;
        long s = strtol(cfg->fetch_blocked_statuses.v[i], &end, 10);
        if (*end || s < 400 || s > 599) {
            dd_errstr_set(errstr, errstr_size,
                          "%s: fetch.blocked_statuses: '%s' is not an HTTP "
                          "status 400..599", src, cfg->fetch_blocked_statuses.v[i]);
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

/* proxy.exits: http://, socks5:// or socks5h:// URLs without credentials. */
static dd_err_t check_proxy_exits(const struct cfg *cfg, const char *src,
                                  char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < cfg->proxy_exits.n; i++) {
        const char *e = cfg->proxy_exits.v[i];
        if (strncmp(e, "http://", 7) && strncmp(e, "socks5h://", 10) &&
            strncmp(e, "socks5://", 9)) {
            dd_errstr_set(errstr, errstr_size,
                          "%s: proxy.exits: '%s' must start with http://, "
                          "socks5:// or socks5h://", src, e);
            return DD_ERR_INVAL;
        }
        if (strchr(e, '@')) {
            dd_errstr_set(errstr, errstr_size,
                          "%s: proxy.exits: entry %zu carries credentials; "
                          "they never go in a URL", src, i);
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

/* fetch.allow_targets: each an IPv4 or IPv6 CIDR. */
static dd_err_t check_allow_targets(const struct cfg *cfg, const char *src,
                                    char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < cfg->fetch_allow_targets.n; i++) {
        if (!cidr_valid(cfg->fetch_allow_targets.v[i])) {
            dd_errstr_set(errstr, errstr_size,
                          "%s: fetch.allow_targets: '%s' is not an IPv4 or IPv6 "
                          "CIDR (e.g. 127.0.0.1/32)", src,
                          cfg->fetch_allow_targets.v[i]);
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

/* The rules no single row can check (a value against a list or another
 * option), once every source is applied; errors name \p src. */
/* A kafka.* option's value as a number, or \p def when unset. */
static long long kafka_num(const struct cfg *cfg, const char *name,
                           long long def)
{
    for (size_t i = 0; i < cfg->kafka_names.n; i++)
        if (!strcmp(cfg->kafka_names.v[i], name))
            return atoll(cfg->kafka_values.v[i]);
    return def;
}

/* DESIGN.md section 6: fetch.timeout_ms + request.timeout.ms <= grace <
 * max.poll.interval.ms (a drained revoke runs inside the consumer poll). */
static dd_err_t check_grace(const struct cfg *cfg, const char *src,
                            char *errstr, size_t errstr_size)
{
    long long req = kafka_num(cfg, "request.timeout.ms", 30000);
    long long poll = kafka_num(cfg, "max.poll.interval.ms", 300000);
    long long g = cfg->rebalance_grace_ms;
    if (g < cfg->fetch_timeout_ms + req || g >= poll) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: rebalance.grace_ms: %lld must be at least "
                      "fetch.timeout_ms + kafka.request.timeout.ms (%lld + "
                      "%lld) and below kafka.max.poll.interval.ms (%lld)",
                      src, g, (long long)cfg->fetch_timeout_ms, req, poll);
        return DD_ERR_INVAL;
    }
    return DD_OK;
}

static dd_err_t check_rules(const struct cfg *cfg, const char *src,
                            char *errstr, size_t errstr_size)
{
    if (log_level_parse(cfg->log_level) < 0) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: log.level: '%s' is not one of error, warning, "
                      "notice, info, debug", src, cfg->log_level);
        return DD_ERR_INVAL;
    }
    if (cfg->fetch_backoff_max_ms < cfg->fetch_backoff_base_ms) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: fetch.backoff_max_ms: must be at least "
                      "fetch.backoff_base_ms", src);
        return DD_ERR_INVAL;
    }
    if (cfg->store_ops_ttl_ms < cfg->store_lease_ms ||
        cfg->store_ops_ttl_ms < cfg->fetch_deadline_ms) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: store.ops_ttl_ms: %lld ms ends before a lease "
                      "(store.lease_ms %lld) or the default deadline "
                      "(fetch.deadline_ms %lld): an op must outlive its "
                      "fetch", src, (long long)cfg->store_ops_ttl_ms,
                      (long long)cfg->store_lease_ms,
                      (long long)cfg->fetch_deadline_ms);
        return DD_ERR_INVAL;
    }
    if (cfg->api_receipt_ttl_ms &&
        cfg->api_receipt_ttl_ms < cfg->store_ops_ttl_ms) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: api.receipt_ttl_ms: %lld ms ends before the op it "
                      "answers for (store.ops_ttl_ms %lld): the same key "
                      "with another payload would be accepted, then become "
                      "a conflict; set 0 (the op's life) or remove it", src,
                      (long long)cfg->api_receipt_ttl_ms,
                      (long long)cfg->store_ops_ttl_ms);
        return DD_ERR_INVAL;
    }
    if (strcmp(cfg->processing_guarantee, "at_least_once") &&
        strcmp(cfg->processing_guarantee, "exactly_once")) {
        dd_errstr_set(errstr, errstr_size,
                      "%s: processing.guarantee: '%s' is not one of "
                      "at_least_once, exactly_once", src,
                      cfg->processing_guarantee);
        return DD_ERR_INVAL;
    }
    dd_err_t err = check_grace(cfg, src, errstr, errstr_size);
    if (!err)
        err = check_blocked_statuses(cfg, src, errstr, errstr_size);
    if (!err)
        err = check_proxy_exits(cfg, src, errstr, errstr_size);
    if (!err)
        err = check_allow_targets(cfg, src, errstr, errstr_size);
    return err;
}

dd_err_t cfg_load(const char *path, char *const *envp, struct cfg **out,
                  char *errstr, size_t errstr_size)
{
    dd_err_t err;
    struct cfg *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return DD_ERR_NOMEM;
    err = load_defaults(cfg, errstr, errstr_size);
    if (err)
        goto out;
    if (path) {
        err = load_file(cfg, path, errstr, errstr_size);
        if (err)
            goto out;
    }
    for (size_t i = 0; envp && envp[i]; i++) {
        err = load_env_var(cfg, envp[i], errstr, errstr_size);
        if (err)
            goto out;
    }
    /* Cross-field rules; errors name the file (or "config" without one). */
    err = check_rules(cfg, path ? path : "config", errstr, errstr_size);
out:
    if (err) {
        /* The message is the one line dedupd prints before it exits, and
         * it quotes keys and values of the file and the environment: a
         * control character there, or a byte that starts no well-formed
         * UTF-8 sequence (an environment value, or a character cut by the
         * buffer), becomes '?' (found by fuzz_config). */
        jstr_text_clean(errstr, errstr_size);
        cfg_destroy(cfg);
        return err;
    }
    *out = cfg;
    return DD_OK;
}

void cfg_destroy(struct cfg *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < N_OPTIONS; i++) {
        void *field = (char *)cfg + cfg_options[i].off;
        if (cfg_options[i].type == CFG_STR)
            free(*(char **)field);
        else if (cfg_options[i].type == CFG_LIST)
            list_free((struct cfg_strlist *)field);
        else if (cfg_options[i].type == CFG_PROVIDERS)
            providers_free((struct cfg_providers *)field);
    }
    list_free(&cfg->kafka_names);
    list_free(&cfg->kafka_values);
    free(cfg);
}

static bool kafka_name_secret(const char *name)
{
    return strstr(name, "password") || strstr(name, "secret") ||
           strstr(name, "key.pem") || strstr(name, "token");
}

void cfg_dump(const struct cfg *cfg, FILE *fp)
{
    json_t *root = json_object();
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct cfg_option *o = &cfg_options[i];
        const void *field = (const char *)cfg + o->off;
        json_t *v = NULL;
        if (o->flags & CFG_F_SECRET) {
            const char *s = *(char *const *)field;
            v = json_string(s && *s ? "[redacted]" : "");
        } else if (o->type == CFG_PROVIDERS) {
            const struct cfg_providers *ps = field;
            v = json_array();
            for (size_t j = 0; j < ps->n; j++) {
                const struct cfg_provider *p = &ps->v[j];
                json_t *po = json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:I, "
                                       "s:I, s:s, s:s, s:s}",
                                       "name", p->name, "gateway", p->gateway,
                                       "http_port", (json_int_t)p->http_port,
                                       "socks_port", (json_int_t)p->socks_port,
                                       "username", p->username, "user", p->user,
                                       "rotation", p->rotation,
                                       "rotate_every_s", (json_int_t)p->rotate_every_s,
                                       "sessions", (json_int_t)p->sessions,
                                       "api_url", p->api_url,
                                       "password", p->password ? "[redacted]" : "",
                                       "api_key", p->api_key ? "[redacted]" : "");
                json_t *cs = json_array();
                for (size_t k = 0; k < p->countries.n; k++)
                    json_array_append_new(cs, json_string(p->countries.v[k]));
                json_object_set_new(po, "countries", cs);
                json_array_append_new(v, po);
            }
        } else if (o->type == CFG_STR)
            v = json_string(*(char *const *)field);
        else if (o->type == CFG_INT)
            v = json_integer(*(const int64_t *)field);
        else if (o->type == CFG_BOOL)
            v = json_boolean(*(const bool *)field);
        else {
            const struct cfg_strlist *l = field;
            v = json_array();
            for (size_t j = 0; j < l->n; j++)
                json_array_append_new(v, json_string(l->v[j]));
        }
        json_object_set_new(root, o->name, v);
    }
    for (size_t i = 0; i < cfg->kafka_names.n; i++) {
        char name[256];
        snprintf(name, sizeof(name), "kafka.%s", cfg->kafka_names.v[i]);
        json_object_set_new(root, name,
                            json_string(kafka_name_secret(cfg->kafka_names.v[i])
                                            ? "[redacted]"
                                            : cfg->kafka_values.v[i]));
    }
    json_dumpf(root, fp, JSON_INDENT(2) | JSON_SORT_KEYS);
    fputc('\n', fp);
    json_decref(root);
}

void cfg_doc_markdown(FILE *fp)
{
    fprintf(fp, "# dedupd configuration\n\n"
                "Generated by `dedupd config --doc` from the option table in "
                "src/config.c. Environment: `DEDUPD_` + the name upper-cased with "
                "`.` as `__`. `kafka.*` passes through to librdkafka.\n\n"
                "| option | environment | type | default | range | unit | "
                "description |\n|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct cfg_option *o = &cfg_options[i];
        char env[256];
        size_t j = 0;
        for (const char *p = o->name; *p && j + 3 < sizeof(env); p++) {
            if (*p == '.') {
                env[j++] = '_';
                env[j++] = '_';
            } else
                env[j++] = (char)toupper((unsigned char)*p);
        }
        env[j] = '\0';
        char range[96] = "";
        if (o->type == CFG_INT)
            snprintf(range, sizeof(range), "%lld..%lld", (long long)o->vmin,
                     (long long)o->vmax);
        static const char *tn[] = {"int", "bool", "string", "list", "providers"};
        fprintf(fp, "| `%s` | `DEDUPD_%s` | %s | `%s` | %s | %s | %s%s |\n",
                o->name, env, tn[o->type], o->vdef, range, o->unit, o->desc,
                (o->flags & CFG_F_SECRET) ? " (secret: never logged)" : "");
    }
}

bool cfg_exactly_once(const struct cfg *cfg)
{
    return !strcmp(cfg->processing_guarantee, "exactly_once");
}
