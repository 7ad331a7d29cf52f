/* Unit tests of metrics.c: the Prometheus text format 0.0.4 and lock-free
 * counting from several threads. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static void setup(void)
{
    metrics_reset();
}

static char *render(void)
{
    size_t len = 0;
    char *text = metrics_render(&len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(strlen(text), len);
    ck_assert_msg(len > 0 && text[len - 1] == '\n', "must end in a newline");
    return text;
}

/* Value of the sample whose name+labels are exactly \p series; -1 if absent. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        if (line[0] != '#' && (size_t)(eol - line) > n
            && strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = *eol ? eol + 1 : eol;
    }
    return -1;
}

/* ---- format ------------------------------------------------------------- */

/* Family of a sample: its name without labels, and for histogram series
 * without the _bucket/_sum/_count suffix. */
static void family_of(const char *line, char *fam, size_t fam_size)
{
    size_t n = strcspn(line, "{ ");
    ck_assert_uint_lt(n, fam_size);
    memcpy(fam, line, n);
    fam[n] = '\0';
}

static bool strip_suffix(char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    if (n > m && strcmp(s + n - m, suffix) == 0) {
        s[n - m] = '\0';
        return true;
    }
    return false;
}

START_TEST(test_metrics_every_family_has_help_and_type)
{
    char *text = render();
    char help[64][96], type[64][96], kind[64][16];
    size_t n_help = 0, n_type = 0, n_samples = 0;

    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            ck_assert_uint_lt(n_help, 64);
            sscanf(line + 7, "%95s", help[n_help++]);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            ck_assert_uint_lt(n_type, 64);
            ck_assert_int_eq(sscanf(line + 7, "%95s %15s", type[n_type],
                                    kind[n_type]), 2);
            /* TYPE follows the HELP of the same family */
            ck_assert_str_eq(type[n_type], help[n_help - 1]);
            n_type++;
            continue;
        }
        ck_assert_msg(line[0] != '#', "unexpected comment: %s", line);
        char fam[96];
        family_of(line, fam, sizeof fam);
        ck_assert_msg(n_type > 0, "sample before any TYPE: %s", line);
        /* samples belong to the family declared last */
        const char *cur = type[n_type - 1];
        if (strcmp(kind[n_type - 1], "histogram") == 0)
            ck_assert_msg(strip_suffix(fam, "_bucket")
                              || strip_suffix(fam, "_sum")
                              || strip_suffix(fam, "_count"),
                          "histogram sample without suffix: %s", line);
        ck_assert_msg(strcmp(fam, cur) == 0, "sample %s under family %s",
                      line, cur);
        n_samples++;
    }
    ck_assert_uint_eq(n_help, n_type);
    ck_assert_uint_ge(n_type, 21); /* the families of the brief */
    ck_assert_uint_gt(n_samples, n_type);

    /* every family named once */
    for (size_t i = 0; i < n_type; i++)
        for (size_t j = i + 1; j < n_type; j++)
            ck_assert_str_ne(type[i], type[j]);

    /* counters end in _total, nothing else does */
    for (size_t i = 0; i < n_type; i++) {
        size_t l = strlen(type[i]);
        bool total = l > 6 && strcmp(type[i] + l - 6, "_total") == 0;
        if (strcmp(kind[i], "counter") == 0)
            ck_assert_msg(total, "counter %s must end in _total", type[i]);
        else
            ck_assert_msg(!total, "%s %s must not end in _total", kind[i],
                          type[i]);
        ck_assert_msg(strncmp(type[i], "dedupd_", 7) == 0,
                      "%s lacks the dedupd_ prefix", type[i]);
    }
    free(text);
}
END_TEST

START_TEST(test_metrics_required_series_present_at_zero)
{
    static const char *const series[] = {
        "dedupd_jobs_total{outcome=\"new\"}",
        "dedupd_jobs_total{outcome=\"duplicate\"}",
        "dedupd_jobs_total{outcome=\"duplicate_inflight\"}",
        "dedupd_jobs_total{outcome=\"conflict\"}",
        "dedupd_jobs_total{outcome=\"invalid\"}",
        "dedupd_jobs_total{outcome=\"reclaimed\"}",
        "dedupd_jobs_total{outcome=\"misrouted\"}",
        "dedupd_fast_path_decisions_total",
        "dedupd_fetch_attempts_total{category=\"ok\"}",
        "dedupd_fetch_attempts_total{category=\"throttled\"}",
        "dedupd_fetch_attempts_total{category=\"blocked\"}",
        "dedupd_fetch_attempts_total{category=\"proxy_auth\"}",
        "dedupd_fetch_attempts_total{category=\"proxy_connect\"}",
        "dedupd_fetch_attempts_total{category=\"dns\"}",
        "dedupd_fetch_attempts_total{category=\"connect\"}",
        "dedupd_fetch_attempts_total{category=\"timeout\"}",
        "dedupd_fetch_attempts_total{category=\"tls\"}",
        "dedupd_fetch_attempts_total{category=\"server_error\"}",
        "dedupd_fetch_attempts_total{category=\"client_error\"}",
        "dedupd_fetch_attempts_total{category=\"redirect_loop\"}",
        "dedupd_fetch_attempts_total{category=\"protocol\"}",
        "dedupd_fetch_attempts_total{category=\"forbidden_target\"}",
        "dedupd_fetch_attempts_total{category=\"too_large\"}",
        "dedupd_fetch_attempts_total{category=\"canceled\"}",
        "dedupd_fetch_attempts_total{category=\"other\"}",
        "dedupd_rotations_total",
        "dedupd_fetched_bytes_total",
        "dedupd_results_total{outcome=\"fetched\"}",
        "dedupd_results_total{outcome=\"failed\"}",
        "dedupd_results_total{outcome=\"shadow\"}",
        "dedupd_conflicts_reported_total",
        "dedupd_dlq_total",
        "dedupd_lease_recoveries_total",
        "dedupd_outbox_replayed_total",
        "dedupd_single_flight_shared_total",
        "dedupd_workflow_restarts_total",
        "dedupd_host_waits_total",
        "dedupd_proxy_auth_suspensions_total",
        "dedupd_retry_waits_total",
        "dedupd_producer_resets_total",
        "dedupd_job_attempts_count",
        "dedupd_fetch_duration_seconds_count",
        "dedupd_job_latency_seconds_count",
        "dedupd_outbox_pending",
        "dedupd_consumer_lag_messages",
        "dedupd_ops_inflight",
        "dedupd_store_size_bytes",
        "dedupd_index_entries",
        "dedupd_index_complete",
        "dedupd_ready",
        "dedupd_start_time_seconds",
    };
    char *text = render();
    for (size_t i = 0; i < sizeof series / sizeof series[0]; i++)
        ck_assert_msg(sample(text, series[i]) == 0, "%s missing or not 0",
                      series[i]);
    ck_assert_msg(strstr(text, "\ndedupd_build_info{version=\"") != NULL,
                  "build_info missing");
    ck_assert(strstr(text, "\"} 1\n") != NULL);
    free(text);
}
END_TEST

START_TEST(test_metrics_counters_and_gauges_rendered)
{
    metrics_job(METRICS_JOB_NEW);
    metrics_job(METRICS_JOB_NEW);
    metrics_job(METRICS_JOB_MISROUTED);
    metrics_result(METRICS_RESULT_SHADOW);
    metrics_add(METRICS_FETCHED_BYTES, 123456789012ULL);
    metrics_add(METRICS_DLQ, 0);
    metrics_add(METRICS_ROTATIONS, 3);
    metrics_gauge_set(METRICS_CONSUMER_LAG_MESSAGES, 42);
    metrics_gauge_set(METRICS_READY, 1);
    metrics_gauge_set(METRICS_START_TIME_SECONDS, 1748779200);
    metrics_gauge_set(METRICS_OUTBOX_PENDING, -1);
    metrics_gauge_add(METRICS_OPS_INFLIGHT, 5);
    metrics_gauge_add(METRICS_OPS_INFLIGHT, -2);
    ck_assert_int_eq(metrics_gauge_get(METRICS_OPS_INFLIGHT), 3);

    char *text = render();
    ck_assert(strstr(text, "\ndedupd_jobs_total{outcome=\"new\"} 2\n"));
    ck_assert(strstr(text, "\ndedupd_jobs_total{outcome=\"misrouted\"} 1\n"));
    ck_assert(strstr(text, "\ndedupd_results_total{outcome=\"shadow\"} 1\n"));
    ck_assert(strstr(text, "\ndedupd_fetched_bytes_total 123456789012\n"));
    ck_assert(strstr(text, "\ndedupd_dlq_total 0\n"));
    ck_assert(strstr(text, "\ndedupd_rotations_total 3\n"));
    ck_assert(strstr(text, "\ndedupd_consumer_lag_messages 42\n"));
    ck_assert(strstr(text, "\ndedupd_ready 1\n"));
    ck_assert(strstr(text, "\ndedupd_start_time_seconds 1748779200\n"));
    ck_assert(strstr(text, "\ndedupd_outbox_pending -1\n"));
    ck_assert(strstr(text, "\ndedupd_ops_inflight 3\n"));
    free(text);

    metrics_reset();
    text = render();
    ck_assert(strstr(text, "\ndedupd_jobs_total{outcome=\"new\"} 0\n"));
    ck_assert(strstr(text, "\ndedupd_ops_inflight 0\n"));
    free(text);
}
END_TEST

/* Check one histogram: buckets cumulative, ascending le, ending in +Inf equal
 * to _count; returns _count and _sum. */
static void check_histogram(const char *text, const char *name,
                            double *count, double *sum)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "\n%s_bucket{le=\"", name);
    size_t plen = strlen(prefix);
    double prev_le = -INFINITY, prev = 0;
    size_t n = 0;
    bool inf = false;
    for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
        ck_assert_msg(!inf, "%s: bucket after +Inf", name);
        const char *le = p + plen;
        double bound = strncmp(le, "+Inf\"", 5) == 0 ? INFINITY
                                                      : strtod(le, NULL);
        ck_assert_msg(bound > prev_le, "%s: le not ascending", name);
        const char *v = strstr(le, "} ");
        ck_assert_ptr_nonnull(v);
        double c = strtod(v + 2, NULL);
        ck_assert_msg(c >= prev, "%s: buckets not cumulative", name);
        prev = c;
        prev_le = bound;
        inf = isinf(bound);
        n++;
    }
    ck_assert_msg(inf, "%s: no +Inf bucket", name);
    ck_assert_uint_ge(n, 2);
    char series[128];
    snprintf(series, sizeof series, "%s_count", name);
    *count = sample(text, series);
    ck_assert_msg(*count == prev, "%s: _count %g != +Inf bucket %g", name,
                  *count, prev);
    snprintf(series, sizeof series, "%s_sum", name);
    *sum = sample(text, series);
}

START_TEST(test_metrics_histogram_buckets_cumulative_with_inf_sum_count)
{
    metrics_observe(METRICS_JOB_ATTEMPTS, 1);
    metrics_observe(METRICS_JOB_ATTEMPTS, 1);
    metrics_observe(METRICS_JOB_ATTEMPTS, 4);  /* le="5" */
    metrics_observe(METRICS_JOB_ATTEMPTS, 13); /* le="13" (inclusive) */
    metrics_observe(METRICS_JOB_ATTEMPTS, 40); /* +Inf only */
    metrics_observe(METRICS_JOB_ATTEMPTS, NAN); /* ignored */
    metrics_observe(METRICS_FETCH_DURATION_SECONDS, 0.004);
    metrics_observe(METRICS_FETCH_DURATION_SECONDS, 0.25);
    metrics_observe(METRICS_FETCH_DURATION_SECONDS, 61);
    metrics_observe(METRICS_JOB_LATENCY_SECONDS, 1.5);

    char *text = render();
    double count, sum;
    check_histogram(text, "dedupd_job_attempts", &count, &sum);
    ck_assert(count == 5);
    ck_assert(sum == 59);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"1\"}") == 2);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"2\"}") == 2);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"3\"}") == 2);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"5\"}") == 3);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"8\"}") == 3);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"13\"}") == 4);
    ck_assert(sample(text, "dedupd_job_attempts_bucket{le=\"+Inf\"}") == 5);

    check_histogram(text, "dedupd_fetch_duration_seconds", &count, &sum);
    ck_assert(count == 3);
    ck_assert_double_eq_tol(sum, 61.254, 1e-9);
    ck_assert(sample(text,
                     "dedupd_fetch_duration_seconds_bucket{le=\"0.005\"}")
              == 1);
    ck_assert(sample(text, "dedupd_fetch_duration_seconds_bucket{le=\"60\"}")
              == 2);
    /* the bucket bounds of the brief, 0.005 .. 60, written plainly */
    static const char *const plain[] = {
        "\ndedupd_fetch_duration_seconds_bucket{le=\"0.005\"} ",
        "\ndedupd_fetch_duration_seconds_bucket{le=\"2.5\"} ",
        "\ndedupd_fetch_duration_seconds_bucket{le=\"60\"} ",
        "\ndedupd_job_latency_seconds_bucket{le=\"600\"} ",
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        ck_assert_msg(strstr(text, plain[i]), "missing%s", plain[i]);

    check_histogram(text, "dedupd_job_latency_seconds", &count, &sum);
    ck_assert(count == 1);
    ck_assert(sum == 1.5);
    free(text);
}
END_TEST

START_TEST(test_metrics_unknown_fetch_category_counts_as_other)
{
    metrics_fetch_attempt("dns", 0.1);
    metrics_fetch_attempt("throttled", -1); /* duration unknown */
    metrics_fetch_attempt("", 0.2);         /* success */
    metrics_fetch_attempt(NULL, 0.3);       /* success */
    metrics_fetch_attempt("no_such_category", 0.4);
    metrics_fetch_attempt("evil\"}\nsecret=hunter2", NAN);
    metrics_fetch_attempt("DNS", 0.5); /* names are case-sensitive */

    char *text = render();
    ck_assert(sample(text, "dedupd_fetch_attempts_total{category=\"dns\"}")
              == 1);
    ck_assert(
        sample(text, "dedupd_fetch_attempts_total{category=\"throttled\"}")
        == 1);
    ck_assert(sample(text, "dedupd_fetch_attempts_total{category=\"ok\"}")
              == 2);
    ck_assert(sample(text, "dedupd_fetch_attempts_total{category=\"other\"}")
              == 3);
    /* only finite, non-negative durations are observed */
    ck_assert(sample(text, "dedupd_fetch_duration_seconds_count") == 5);
    /* caller text never reaches the output */
    ck_assert_ptr_null(strstr(text, "no_such_category"));
    ck_assert_ptr_null(strstr(text, "hunter2"));
    ck_assert_ptr_null(strstr(text, "evil"));
    free(text);
}
END_TEST

/* ---- concurrency -------------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 200000

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        metrics_job(METRICS_JOB_DUPLICATE);
        metrics_add(METRICS_FETCHED_BYTES, 3);
        metrics_fetch_attempt(i % 2 ? "timeout" : "bogus", 0.5);
        metrics_observe(METRICS_JOB_ATTEMPTS, 2);
        metrics_gauge_add(METRICS_OPS_INFLIGHT, 1);
    }
    return NULL;
}

START_TEST(test_metrics_concurrent_increments_sum_exactly)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, NULL), 0);
    /* a scrape while they count must stay well-formed */
    for (int i = 0; i < 20; i++) {
        char *text = render();
        double count, sum;
        check_histogram(text, "dedupd_job_attempts", &count, &sum);
        free(text);
    }
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);

    const double total = (double)THREADS * PER_THREAD;
    char *text = render();
    ck_assert(sample(text, "dedupd_jobs_total{outcome=\"duplicate\"}")
              == total);
    ck_assert(sample(text, "dedupd_fetched_bytes_total") == 3 * total);
    ck_assert(sample(text, "dedupd_fetch_attempts_total{category=\"timeout\"}")
              == total / 2);
    ck_assert(sample(text, "dedupd_fetch_attempts_total{category=\"other\"}")
              == total / 2);
    ck_assert(sample(text, "dedupd_job_attempts_count") == total);
    ck_assert(sample(text, "dedupd_job_attempts_sum") == 2 * total);
    ck_assert(sample(text, "dedupd_fetch_duration_seconds_sum")
              == 0.5 * total);
    ck_assert(sample(text, "dedupd_ops_inflight") == total);
    free(text);
}
END_TEST

Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");

    TCase *tc = tcase_create("format");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_metrics_every_family_has_help_and_type);
    tcase_add_test(tc, test_metrics_required_series_present_at_zero);
    tcase_add_test(tc, test_metrics_counters_and_gauges_rendered);
    tcase_add_test(
        tc, test_metrics_histogram_buckets_cumulative_with_inf_sum_count);
    tcase_add_test(tc, test_metrics_unknown_fetch_category_counts_as_other);
    suite_add_tcase(s, tc);

    tc = tcase_create("concurrency");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_metrics_concurrent_increments_sum_exactly);
    suite_add_tcase(s, tc);
    return s;
}
