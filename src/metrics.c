/* The process-wide metrics registry: static atomics, rendered on demand in the
 * Prometheus text exposition format 0.0.4.
 *
 * Threads: every function runs on any thread (updates come from the pipeline,
 * the fetch engine and the store; metrics_render from the admin listener);
 * the registry is only ever touched through relaxed atomics. */
#include "metrics.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DEDUPD_VERSION
#define DEDUPD_VERSION "unknown"
#endif

/* Updates must never take a lock: the pipeline counts on its hot path. */
static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
static_assert(sizeof(double) == sizeof(unsigned long long),
              "histogram sums keep a double in 64 atomic bits");

#define MAX_BUCKETS 16

/* ---- the fixed tables --------------------------------------------------- */

static const char *const job_outcome_names[METRICS_JOB__N] = {
    "new", "duplicate", "duplicate_inflight", "conflict", "invalid",
    "reclaimed", "misrouted",
};

static const char *const result_outcome_names[METRICS_RESULT__N] = {
    "fetched", "failed", "shadow",
};

/* fetch.h categories; the last entry catches every other name. */
static const char *const fetch_category_names[] = {
    "ok", "throttled", "blocked", "proxy_auth", "proxy_connect", "dns",
    "connect", "timeout", "tls", "server_error", "client_error",
    "redirect_loop", "protocol", "forbidden_target", "too_large", "canceled",
    "other",
};
static_assert(sizeof(fetch_category_names) / sizeof(fetch_category_names[0])
                  == METRICS_FETCH_CATEGORY_N,
              "fetch category table and METRICS_FETCH_CATEGORY_N disagree");
#define CATEGORY_OK 0
#define CATEGORY_OTHER (METRICS_FETCH_CATEGORY_N - 1)

struct family_desc {
    const char *name; /* full series name (counters include _total) */
    const char *help;
};

static const struct family_desc counter_desc[METRICS_COUNTER__N] = {
    [METRICS_FAST_PATH_DECISIONS] = {"dedupd_fast_path_decisions_total",
        "Jobs decided on the fast path (answered without a fetch)."},
    [METRICS_ROTATIONS] = {"dedupd_rotations_total",
        "Ops moved to another proxy session after a blocked answer."},
    [METRICS_FETCHED_BYTES] = {"dedupd_fetched_bytes_total",
        "Body bytes received by fetches, in bytes."},
    [METRICS_CONFLICTS_REPORTED] = {"dedupd_conflicts_reported_total",
        "Conflict records published (same op_id, different request_hash)."},
    [METRICS_DLQ] = {"dedupd_dlq_total",
        "Messages sent to the dead-letter topic."},
    [METRICS_LEASE_RECOVERIES] = {"dedupd_lease_recoveries_total",
        "Expired leases of running ops taken over."},
    [METRICS_OUTBOX_REPLAYED] = {"dedupd_outbox_replayed_total",
        "Outbox records produced again after a restart or producer reset."},
    [METRICS_SINGLE_FLIGHT] = {"dedupd_single_flight_shared_total",
        "Ops answered by another op's transfer of the same resource (single-flight)."},
    [METRICS_WORKFLOW_RESTARTS] = {"dedupd_workflow_restarts_total",
        "Workflows restarted from their first step after a session failed mid-way."},
    [METRICS_HOST_WAITS] = {"dedupd_host_waits_total",
        "Requests held by a per-host limit (concurrency cap or rate) before they started."},
    [METRICS_PROXY_AUTH_SUSPENSIONS] = {"dedupd_proxy_auth_suspensions_total",
        "Provider credential sets suspended after the proxy refused them (407, SOCKS5 auth)."},
    [METRICS_RETRY_WAITS] = {"dedupd_retry_waits_total",
        "Failed attempts followed by a retry wait (the op was retryable)."},
    [METRICS_PRODUCER_RESETS] = {"dedupd_producer_resets_total",
        "Producers recreated after a fatal producer error (their messages sent again)."},
    [METRICS_CHANGELOG_RESTORED] = {"dedupd_changelog_restored_records_total",
        "Changelog records read by the restore of assigned partitions."},
    [METRICS_CHANGELOG_RECORDS] = {"dedupd_changelog_records_total",
        "Changelog records (claims, results, releases, conflict marks) acknowledged by the broker."},
    [METRICS_JOBS_MISROUTED] = {"dedupd_jobs_misrouted_total",
        "Jobs that arrived on another partition than their op_id's (re-produced there keyed by op_id)."},
    [METRICS_RELEASES] = {"dedupd_releases_total",
        "Unfinished ops released at a revoke (their next owner takes them at once)."},
    [METRICS_TXN_COMMITTED] = {"dedupd_transactions_committed_total",
        "exactly_once: transactions committed (results, records and offsets made visible)."},
    [METRICS_TXN_ABORTED] = {"dedupd_transactions_aborted_total",
        "exactly_once: transactions aborted (the local copy was dropped and restored from the changelog)."},
    [METRICS_PREFETCH_KICKS] = {"dedupd_prefetch_kicks_total",
        "Wake-ups of librdkafka's fetcher answered by the brokers, sent once a full prefetch queue drained (consumer.prefetch_kick_ms)."},
};

static const struct family_desc gauge_desc[METRICS_GAUGE__N] = {
    [METRICS_OUTBOX_PENDING] = {"dedupd_outbox_pending",
        "Outbox records written but not yet acknowledged by Kafka."},
    [METRICS_CONSUMER_LAG_MESSAGES] = {"dedupd_consumer_lag_messages",
        "Consumer lag summed over the assigned partitions, in messages."},
    [METRICS_OPS_INFLIGHT] = {"dedupd_ops_inflight",
        "Ops claimed and not yet completed."},
    [METRICS_STORE_SIZE_BYTES] = {"dedupd_store_size_bytes",
        "Estimated size of the RocksDB store, in bytes."},
    [METRICS_INDEX_ENTRIES] = {"dedupd_index_entries",
        "Estimated number of entries in the dedup index."},
    [METRICS_READY] = {"dedupd_ready",
        "1 when the instance is ready to serve (readiness probe), else 0."},
    [METRICS_START_TIME_SECONDS] = {"dedupd_start_time_seconds",
        "Start time of the process since the Unix epoch, in seconds."},
    [METRICS_PARTITIONS_RESTORING] = {"dedupd_partitions_restoring",
        "Assigned partitions whose changelog restore is in progress."},
    [METRICS_PARTITIONS_ASSIGNED] = {"dedupd_partitions_assigned",
        "Partitions of the jobs topic assigned to this instance."},
    [METRICS_INDEX_COMPLETE] = {"dedupd_index_complete",
        "1 while the hot index holds every live op_id; 0 while it is rebuilt "
        "at start-up, and once store.index_max_bytes is reached (new ops' "
        "claims then read RocksDB)."},
};

struct hist_desc {
    const char *name;
    const char *help;
    size_t n_bounds; /* finite upper bounds; +Inf is implicit */
    double bounds[MAX_BUCKETS - 1];
};

static const struct hist_desc hist_desc[METRICS_HIST__N] = {
    [METRICS_JOB_ATTEMPTS] = {"dedupd_job_attempts",
        "Fetch attempts per completed job.", 6, {1, 2, 3, 5, 8, 13}},
    [METRICS_FETCH_DURATION_SECONDS] = {"dedupd_fetch_duration_seconds",
        "Duration of one fetch attempt, in seconds.", 13,
        {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}},
    [METRICS_JOB_LATENCY_SECONDS] = {"dedupd_job_latency_seconds",
        "Time from the job message's timestamp to its result acknowledged, "
        "in seconds.", 13,
        {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}},
};

/* ---- the registry (static: zero at start, one per process) -------------- */

struct hist {
    atomic_ullong buckets[MAX_BUCKETS]; /* non-cumulative; [n_bounds] = +Inf */
    atomic_ullong sum_bits;             /* a double's bits */
};

static struct {
    atomic_ullong jobs[METRICS_JOB__N];
    atomic_ullong results[METRICS_RESULT__N];
    atomic_ullong fetch_attempts[METRICS_FETCH_CATEGORY_N];
    atomic_ullong counters[METRICS_COUNTER__N];
    atomic_llong gauges[METRICS_GAUGE__N];
    struct hist hists[METRICS_HIST__N];
} reg;

#define RELAXED memory_order_relaxed

/* ---- updates ------------------------------------------------------------ */

void metrics_job(enum metrics_job_outcome o)
{
    assert((unsigned)o < METRICS_JOB__N);
    atomic_fetch_add_explicit(&reg.jobs[o], 1, RELAXED);
}

void metrics_result(enum metrics_result_outcome o)
{
    assert((unsigned)o < METRICS_RESULT__N);
    atomic_fetch_add_explicit(&reg.results[o], 1, RELAXED);
}

/* @locality any thread; pure. */
static size_t category_index(const char *category)
{
    if (!category || !*category)
        return CATEGORY_OK;
    for (size_t i = 0; i < CATEGORY_OTHER; i++)
        if (strcmp(category, fetch_category_names[i]) == 0)
            return i;
    return CATEGORY_OTHER;
}

void metrics_fetch_attempt(const char *category, double duration_s)
{
    atomic_fetch_add_explicit(&reg.fetch_attempts[category_index(category)],
                              1, RELAXED);
    if (isfinite(duration_s) && duration_s >= 0)
        metrics_observe(METRICS_FETCH_DURATION_SECONDS, duration_s);
}

void metrics_add(enum metrics_counter c, uint64_t n)
{
    assert((unsigned)c < METRICS_COUNTER__N);
    if (n)
        atomic_fetch_add_explicit(&reg.counters[c], n, RELAXED);
}

void metrics_gauge_set(enum metrics_gauge g, int64_t v)
{
    assert((unsigned)g < METRICS_GAUGE__N);
    atomic_store_explicit(&reg.gauges[g], v, RELAXED);
}

void metrics_gauge_add(enum metrics_gauge g, int64_t delta)
{
    assert((unsigned)g < METRICS_GAUGE__N);
    atomic_fetch_add_explicit(&reg.gauges[g], delta, RELAXED);
}

int64_t metrics_gauge_get(enum metrics_gauge g)
{
    assert((unsigned)g < METRICS_GAUGE__N);
    return atomic_load_explicit(&reg.gauges[g], RELAXED);
}

/* @locality any thread; pure. */
static double bits2double(unsigned long long b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* @locality any thread; pure. */
static unsigned long long double2bits(double d)
{
    unsigned long long b;
    memcpy(&b, &d, sizeof b);
    return b;
}

void metrics_observe(enum metrics_hist h, double v)
{
    assert((unsigned)h < METRICS_HIST__N);
    if (isnan(v))
        return;
    const struct hist_desc *d = &hist_desc[h];
    struct hist *s = &reg.hists[h];
    size_t i = 0;
    while (i < d->n_bounds && v > d->bounds[i])
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, RELAXED);

    /* No atomic add for doubles: CAS on the bits (lock-free, retried only
     * when another observer raced us). */
    unsigned long long old = atomic_load_explicit(&s->sum_bits, RELAXED);
    unsigned long long nw;
    do {
        nw = double2bits(bits2double(old) + v);
    } while (!atomic_compare_exchange_weak_explicit(&s->sum_bits, &old, nw,
                                                    RELAXED, RELAXED));
}

void metrics_reset(void)
{
    for (size_t i = 0; i < METRICS_JOB__N; i++)
        atomic_store_explicit(&reg.jobs[i], 0, RELAXED);
    for (size_t i = 0; i < METRICS_RESULT__N; i++)
        atomic_store_explicit(&reg.results[i], 0, RELAXED);
    for (size_t i = 0; i < METRICS_FETCH_CATEGORY_N; i++)
        atomic_store_explicit(&reg.fetch_attempts[i], 0, RELAXED);
    for (size_t i = 0; i < METRICS_COUNTER__N; i++)
        atomic_store_explicit(&reg.counters[i], 0, RELAXED);
    for (size_t i = 0; i < METRICS_GAUGE__N; i++)
        atomic_store_explicit(&reg.gauges[i], 0, RELAXED);
    for (size_t h = 0; h < METRICS_HIST__N; h++) {
        for (size_t i = 0; i < MAX_BUCKETS; i++)
            atomic_store_explicit(&reg.hists[h].buckets[i], 0, RELAXED);
        atomic_store_explicit(&reg.hists[h].sum_bits, double2bits(0.0),
                              RELAXED);
    }
}

/* ---- rendering ---------------------------------------------------------- */

/* A growable text buffer; after the first allocation failure it only
 * remembers that it failed (one check at the end). */
struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* @locality any thread (metrics_render's caller: the admin listener). */
static void buf_printf(struct buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2;
        while (cap - b->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Shortest text that reads back as the same double (Go's strconv 'g', -1
 * in spirit), with Prometheus' spellings of the special values.
 * @locality any thread; pure. */
static void fmt_double(char *out, size_t out_size, double v)
{
    if (isnan(v)) {
        snprintf(out, out_size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, out_size, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, out_size, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            break;
    }
    /* %g switches to an exponent once the exponent reaches the precision
     * ("6e+01" for 60): print such integers plainly while they are exact. */
    const char *e = strchr(out, 'e');
    if (e) {
        int exp10 = atoi(e + 1);
        if (exp10 >= 0 && exp10 < 17)
            snprintf(out, out_size, "%.*g", exp10 + 1, v);
    }
}

/* Label values: escape backslash, double quote and line feed (0.0.4).
 * @locality any thread (metrics_render's caller). */
static void buf_label_value(struct buf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            buf_printf(b, "\\\\");
        else if (*v == '"')
            buf_printf(b, "\\\"");
        else if (*v == '\n')
            buf_printf(b, "\\n");
        else
            buf_printf(b, "%c", *v);
    }
}

/* @locality any thread (metrics_render's caller: the admin listener). */
static void buf_head(struct buf *b, const char *name, const char *help,
                     const char *type)
{
    /* HELP texts are constants of this file without '\\' or '\n'. */
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* @locality any thread (metrics_render's caller: the admin listener). */
static void render_labelled(struct buf *b, const char *name, const char *help,
                            const char *label, const char *const *values,
                            atomic_ullong *series, size_t n)
{
    buf_head(b, name, help, "counter");
    for (size_t i = 0; i < n; i++)
        buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, values[i],
                   atomic_load_explicit(&series[i], RELAXED));
}

/* @locality any thread (metrics_render's caller: the admin listener). */
static void render_hist(struct buf *b, enum metrics_hist h)
{
    const struct hist_desc *d = &hist_desc[h];
    struct hist *s = &reg.hists[h];
    char num[64];
    unsigned long long cum = 0;

    buf_head(b, d->name, d->help, "histogram");
    for (size_t i = 0; i <= d->n_bounds; i++) {
        cum += atomic_load_explicit(&s->buckets[i], RELAXED);
        if (i < d->n_bounds)
            fmt_double(num, sizeof num, d->bounds[i]);
        else
            snprintf(num, sizeof num, "+Inf");
        buf_printf(b, "%s_bucket{le=\"%s\"} %llu\n", d->name, num, cum);
    }
    fmt_double(num, sizeof num,
               bits2double(atomic_load_explicit(&s->sum_bits, RELAXED)));
    buf_printf(b, "%s_sum %s\n%s_count %llu\n", d->name, num, d->name, cum);
}

char *metrics_render(size_t *len)
{
    struct buf b = {.cap = 8192};
    *len = 0;
    b.p = malloc(b.cap);
    if (!b.p)
        return NULL;
    b.p[0] = '\0';

    render_labelled(&b, "dedupd_jobs_total",
                    "Jobs seen on the claim path, by outcome.", "outcome",
                    job_outcome_names, reg.jobs, METRICS_JOB__N);
    render_labelled(&b, "dedupd_fetch_attempts_total",
                    "Fetch attempts, by category (ok or failure class).",
                    "category", fetch_category_names, reg.fetch_attempts,
                    METRICS_FETCH_CATEGORY_N);
    render_labelled(&b, "dedupd_results_total",
                    "Results published, by outcome.", "outcome",
                    result_outcome_names, reg.results, METRICS_RESULT__N);
    for (size_t c = 0; c < METRICS_COUNTER__N; c++) {
        buf_head(&b, counter_desc[c].name, counter_desc[c].help, "counter");
        buf_printf(&b, "%s %llu\n", counter_desc[c].name,
                   atomic_load_explicit(&reg.counters[c], RELAXED));
    }
    for (size_t h = 0; h < METRICS_HIST__N; h++)
        render_hist(&b, (enum metrics_hist)h);
    for (size_t g = 0; g < METRICS_GAUGE__N; g++) {
        buf_head(&b, gauge_desc[g].name, gauge_desc[g].help, "gauge");
        buf_printf(&b, "%s %lld\n", gauge_desc[g].name,
                   atomic_load_explicit(&reg.gauges[g], RELAXED));
    }
    buf_head(&b, "dedupd_build_info",
             "Build information; the value is always 1.", "gauge");
    buf_printf(&b, "dedupd_build_info{version=\"");
    buf_label_value(&b, DEDUPD_VERSION);
    buf_printf(&b, "\"} 1\n");

    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
