/* Unit tests of the pipeline (consumer.c) driven end to end against
 * librdkafka's mock cluster (rdkafka_mock.h; no broker) and, for real
 * fetches, a loopback HTTP origin in this process:
 *  - jobs produced to the mock jobs topic come out as one result each (a
 *    copy of a job in the same run waits for its op and adds no result);
 *  - in a later run a duplicate is decided as a duplicate (slow path, and
 *    the fast path from the dedupd-op-id / dedupd-request-hash headers),
 *    nothing new is published;
 *  - an invalid job goes to the DLQ with its reason;
 *  - the consumer group's committed offset is exactly the end of the jobs
 *    partition once the run is done;
 *  - with the fetch engine, the origin is asked once per logical job.
 * The mock cluster stands in for Kafka in unit tests only; the integration
 * tests (tests/integration/) run against a real broker. */

#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "consumer.h"
#include "dd.h"
#include "job.h"
#include "key.h"
#include "producer.h"
#include "log.h"
#include "store.h"

#define T_JOBS "t.jobs"
#define T_RESULTS "t.results"
#define T_DLQ "t.jobs.dlq"
#define T_CONFLICTS "t.conflicts"
#define GROUP "t-dedupd"

static rd_kafka_t *mk;                   /* producer hosting the mock cluster */
static char bootstraps[256];
static char store_dir[64];
static volatile sig_atomic_t run_flag = 1;

/* ---- the mock cluster ------------------------------------------------------ */

static void mock_start(void)
{
    char e[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    ck_assert(rd_kafka_conf_set(c, "test.mock.num.brokers", "1", e,
                                sizeof(e)) == RD_KAFKA_CONF_OK);
    ck_assert(rd_kafka_conf_set(c, "linger.ms", "0", e, sizeof(e)) ==
              RD_KAFKA_CONF_OK);
    mk = rd_kafka_new(RD_KAFKA_PRODUCER, c, e, sizeof(e));
    ck_assert_msg(mk != NULL, "%s", e);
    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(mk);
    ck_assert_ptr_nonnull(mc);
    snprintf(bootstraps, sizeof(bootstraps), "%s",
             rd_kafka_mock_cluster_bootstraps(mc));
    /* the changelog too: `run` creates it on a real broker (Admin API), the
     * mock cluster's metadata only needs it to exist */
    const char *topics[] = {T_JOBS, T_RESULTS, T_DLQ, T_CONFLICTS,
                            GROUP "-changelog"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_int_eq(rd_kafka_mock_topic_create(mc, topics[i], 1, 1), 0);
}

/* Produce one message to the jobs topic (key/headers optional). */
static void produce_job(const char *value, const char *key, const char *op_id,
                        const char *request_hash)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(2);
    if (op_id)
        rd_kafka_header_add(h, "dedupd-op-id", -1, op_id, -1);
    if (request_hash)
        rd_kafka_header_add(h, "dedupd-request-hash", -1, request_hash, -1);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        mk, RD_KAFKA_V_TOPIC(T_JOBS), RD_KAFKA_V_PARTITION(0),
        RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
        RD_KAFKA_V_VALUE((void *)value, strlen(value)),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
        RD_KAFKA_V_END);
    ck_assert_msg(!e, "produce: %s", rd_kafka_err2str(e));
    ck_assert_int_eq(rd_kafka_flush(mk, 10000), 0);
}

/* One message read back from a topic. */
struct rec {
    char *key;
    char *value;
    char *op_id_hdr;   /* dedupd-op-id, or NULL */
    char *error_hdr;   /* dedupd-error, or NULL */
};

static char *hdr_dup(rd_kafka_headers_t *h, const char *name)
{
    const void *v;
    size_t n;
    if (!h || rd_kafka_header_get_last(h, name, &v, &n))
        return NULL;
    return strndup(v, n);
}

/* Every message of partition 0 of \p topic, from the start to its end. */
static size_t topic_read(const char *topic, struct rec *out, size_t cap)
{
    char e[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set(c, "bootstrap.servers", bootstraps, e, sizeof(e));
    rd_kafka_conf_set(c, "group.id", "t-reader", e, sizeof(e));
    rd_kafka_conf_set(c, "enable.partition.eof", "true", e, sizeof(e));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", e, sizeof(e));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, e, sizeof(e));
    ck_assert_msg(rk != NULL, "%s", e);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, 0)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    ck_assert_int_eq(rd_kafka_assign(rk, l), 0);
    rd_kafka_topic_partition_list_destroy(l);
    size_t n = 0;
    for (int i = 0; i < 200; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            rd_kafka_message_destroy(m);
            break;
        }
        ck_assert_msg(!m->err, "consume %s: %s", topic,
                      rd_kafka_message_errstr(m));
        ck_assert_uint_lt(n, cap);
        rd_kafka_headers_t *h = NULL;
        rd_kafka_message_headers(m, &h);
        out[n].key = strndup(m->key ? m->key : "", m->key_len);
        out[n].value = strndup(m->payload ? m->payload : "", m->len);
        out[n].op_id_hdr = hdr_dup(h, "dedupd-op-id");
        out[n].error_hdr = hdr_dup(h, "dedupd-error");
        n++;
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return n;
}

static void recs_free(struct rec *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].key);
        free(r[i].value);
        free(r[i].op_id_hdr);
        free(r[i].error_hdr);
    }
}

/* The committed offset of GROUP on partition 0 of the jobs topic. */
static int64_t committed_offset(void)
{
    char e[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_conf_set(c, "bootstrap.servers", bootstraps, e, sizeof(e));
    rd_kafka_conf_set(c, "group.id", GROUP, e, sizeof(e));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, e, sizeof(e));
    ck_assert_msg(rk != NULL, "%s", e);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, T_JOBS, 0);
    rd_kafka_resp_err_t err = rd_kafka_committed(rk, l, 10000);
    ck_assert_msg(!err, "committed: %s", rd_kafka_err2str(err));
    int64_t off = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
    return off;
}

/* ---- a loopback origin ------------------------------------------------------
 * One thread; answers every request 200 "body of <path>" and closes. */

static struct {
    int fd, port;
    atomic_int requests;
    pthread_t thr;
} origin;

static void *origin_main(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(origin.fd, NULL, NULL);
        if (c < 0)
            return NULL;
        char buf[4096];
        size_t have = 0;
        while (have < sizeof(buf) - 1) {
            ssize_t n = recv(c, buf + have, sizeof(buf) - 1 - have, 0);
            if (n <= 0)
                break;
            have += (size_t)n;
            buf[have] = '\0';
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        buf[have] = '\0';
        char method[16] = "", path[512] = "";
        sscanf(buf, "%15s %511s", method, path);
        atomic_fetch_add(&origin.requests, 1);
        char body[600], resp[1024];
        int blen = snprintf(body, sizeof(body), "body of %s", path);
        int rlen = snprintf(resp, sizeof(resp),
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                            "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                            blen, body);
        ssize_t w = send(c, resp, (size_t)rlen, MSG_NOSIGNAL);
        (void)w;
        close(c);
    }
}

static void origin_start(void)
{
    origin.fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(origin.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(origin.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(origin.fd, 64), 0);
    socklen_t al = sizeof(a);
    getsockname(origin.fd, (struct sockaddr *)&a, &al);
    origin.port = ntohs(a.sin_port);
    pthread_create(&origin.thr, NULL, origin_main, NULL);
}

/* ---- running the pipeline --------------------------------------------------- */

/* The test config, with \p extra (one more DEDUPD_* variable) unless NULL. */
static struct cfg *cfg_for_test_with(const char *extra)
{
    char boot[300], store[128];
    snprintf(boot, sizeof(boot), "DEDUPD_BROKER__BOOTSTRAP_SERVERS=%s",
             bootstraps);
    snprintf(store, sizeof(store), "DEDUPD_STORE__PATH=%s/store", store_dir);
    char *env[] = {boot, store,
                   "DEDUPD_INSTANCE__ID=unit",
                   "DEDUPD_CONSUMER__GROUP_ID=" GROUP,
                   "DEDUPD_TOPICS__JOBS=" T_JOBS,
                   "DEDUPD_TOPICS__RESULTS=" T_RESULTS,
                   "DEDUPD_TOPICS__DLQ=" T_DLQ,
                   "DEDUPD_TOPICS__CONFLICTS=" T_CONFLICTS,
                   "DEDUPD_ADMIN__LISTEN=127.0.0.1:0",
                   "DEDUPD_API__LISTEN=",
                   "DEDUPD_FETCH__ALLOW_TARGETS=127.0.0.1/32",
                   "DEDUPD_LOG__LEVEL=warning",
                   "DEDUPD_KAFKA__TOPIC__METADATA__REFRESH__INTERVAL__MS=500",
                   /* a member that left is forgotten soon (the mock
                    * cluster may wait out its session) */
                   "DEDUPD_KAFKA__SESSION__TIMEOUT__MS=6000",
                   "DEDUPD_KAFKA__HEARTBEAT__INTERVAL__MS=500",
                   (char *)extra,
                   NULL};
    struct cfg *cfg = NULL;
    char e[512];
    ck_assert_msg(cfg_load(NULL, env, &cfg, e, sizeof(e)) == DD_OK, "%s", e);
    log_configure(log_level_parse(cfg->log_level), cfg->log_debug);
    return cfg;
}

static struct cfg *cfg_for_test(void)
{
    return cfg_for_test_with(NULL);
}

/* One `run --exit-when-idle 1000` (shadow or not) over what the jobs topic
 * holds. */
static void run_once(const struct cfg *cfg, bool shadow,
                     struct consumer_stats *st)
{
    struct consumer_opts opts = {.exit_when_idle_ms = 1000,
                                 .shadow = shadow,
                                 .run = &run_flag};
    struct consumer_handles h;
    char e[256] = "";
    dd_err_t err = consumer_handles_open(cfg, shadow, &h, e, sizeof(e));
    ck_assert_msg(err == DD_OK, "open: %s", e);
    ck_assert_int_eq(h.fetch == NULL, shadow);
    /* the hot index is rebuilt in the background: wait for it, so the fast
     * path can decide what it holds */
    struct store_index_stats is = {0};
    for (int i = 0; i < 500 && !is.complete; i++) {
        store_index_stats_get(h.store, &is);
        if (!is.complete)
            usleep(10000);
    }
    ck_assert(is.complete);
    err = consumer_run(cfg, &h, &opts, st, e, sizeof(e));
    ck_assert_msg(err == DD_OK, "run: %s", e);
    ck_assert_ptr_null(h.fetch); /* the run took it */
    consumer_handles_close(&h);
    ck_assert_ptr_null(h.store);
}

/* op_id and request_hash of \p value as the pipeline derives them. */
static void identity_of(const struct cfg *cfg, const char *value,
                        char *op_id, size_t op_id_size, char *hash)
{
    struct job_conf jc = {
        .variance_headers =
            (const char *const *)cfg->identity_variance_headers.v,
        .n_variance_headers = cfg->identity_variance_headers.n,
        .credential_headers =
            (const char *const *)cfg->identity_credential_headers.v,
        .n_credential_headers = cfg->identity_credential_headers.n,
        .max_job_bytes = (size_t)cfg->limits_max_job_bytes,
    };
    struct job *j = NULL;
    char e[256];
    ck_assert_msg(job_parse(&jc, value, strlen(value), &j, e, sizeof(e)) ==
                      DD_OK, "%s", e);
    snprintf(op_id, op_id_size, "%s", j->op_id);
    snprintf(hash, JOB_HEX_LEN + 1, "%s", j->request_hash);
    job_destroy(j);
}

static void setup(void)
{
    key_global_init();
    job_global_init();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(store_dir, sizeof(store_dir), "/tmp/dedupd-unit-consumer-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(store_dir));
    mock_start();
}

static void teardown(void)
{
    if (mk)
        rd_kafka_destroy(mk);
    mk = NULL;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", store_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", store_dir);
}

/* The value of \p key in the JSON object \p json, as a string ("" if none). */
static const char *json_str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* ---- tests -------------------------------------------------------------------- */

START_TEST(test_consumer_shadow_one_result_per_job_and_duplicates_decided)
{
    struct cfg *cfg = cfg_for_test();
    const char *jobs[] = {"{\"url\":\"https://example.com/a\"}",
                          "{\"url\":\"https://example.com/b\"}",
                          "{\"url\":\"https://example.com/c\"}"};
    for (size_t i = 0; i < 3; i++)
        produce_job(jobs[i], NULL, NULL, NULL);
    /* a copy of a, the same logical job in another form (same op_id) */
    produce_job("{\"url\":\"HTTPS://example.com/a#frag\"}", NULL, NULL, NULL);
    produce_job("not json", "bad-1", NULL, NULL);

    struct consumer_stats st;
    run_once(cfg, true, &st);
    ck_assert_uint_eq(st.consumed, 5);
    ck_assert_uint_eq(st.new_ops, 3);
    ck_assert_uint_eq(st.duplicates + st.duplicates_inflight, 1);
    ck_assert_uint_eq(st.invalid, 1);
    ck_assert_uint_eq(st.results, 3);
    ck_assert_uint_eq(st.conflicts, 0);
    ck_assert_uint_eq(st.fetch_attempts, 0); /* shadow: nothing fetched */

    /* one result per logical job, keyed by its event_key, outcome shadow */
    struct rec r[16];
    size_t n = topic_read(T_RESULTS, r, 16);
    ck_assert_uint_eq(n, 3);
    char ids[3][JOB_OP_ID_MAX + 1], hash[JOB_HEX_LEN + 1];
    for (size_t i = 0; i < 3; i++)
        identity_of(cfg, jobs[i], ids[i], sizeof(ids[i]), hash);
    bool seen[3] = {false, false, false};
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_loads(r[i].value, 0, NULL);
        ck_assert_ptr_nonnull(v);
        ck_assert_str_eq(json_str(v, "outcome"), "shadow");
        ck_assert_str_eq(json_str(v, "event_key"), r[i].key);
        ck_assert_str_eq(json_str(v, "op_id"), r[i].op_id_hdr);
        for (size_t k = 0; k < 3; k++)
            if (!strcmp(json_str(v, "op_id"), ids[k])) {
                ck_assert_msg(!seen[k], "two results of %s", ids[k]);
                seen[k] = true;
            }
        json_decref(v);
    }
    ck_assert(seen[0] && seen[1] && seen[2]);
    recs_free(r, n);

    /* the invalid job is in the DLQ with its reason */
    n = topic_read(T_DLQ, r, 16);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(r[0].key, "bad-1");
    ck_assert_str_eq(r[0].value, "not json");
    ck_assert_ptr_nonnull(r[0].error_hdr);
    recs_free(r, n);

    /* every consumed message is done: the committed offset is the end */
    ck_assert_int_eq(committed_offset(), 5);

    /* A later run: a copy of b (slow path) and a copy of c with the
     * submitter's headers (fast path) are duplicates; nothing is published. */
    char cid[JOB_OP_ID_MAX + 1], chash[JOB_HEX_LEN + 1];
    identity_of(cfg, jobs[2], cid, sizeof(cid), chash);
    produce_job(jobs[1], NULL, NULL, NULL);
    produce_job(jobs[2], cid, cid, chash);
    run_once(cfg, true, &st);
    ck_assert_uint_eq(st.consumed, 2);
    ck_assert_uint_eq(st.new_ops, 0);
    ck_assert_uint_eq(st.duplicates, 2);
    ck_assert_uint_eq(st.duplicates_inflight, 0);
    ck_assert_uint_eq(st.fast_path, 1);
    ck_assert_uint_eq(st.results, 0);
    n = topic_read(T_RESULTS, r, 16);
    ck_assert_uint_eq(n, 3);
    recs_free(r, n);
    ck_assert_int_eq(committed_offset(), 7);
    cfg_destroy(cfg);
}
END_TEST

START_TEST(test_consumer_fetches_each_logical_job_once_from_the_origin)
{
    origin_start();
    struct cfg *cfg = cfg_for_test();
    char jobs[3][128];
    for (int i = 0; i < 3; i++) {
        snprintf(jobs[i], sizeof(jobs[i]),
                 "{\"url\":\"http://127.0.0.1:%d/page/%d\"}", origin.port, i);
        produce_job(jobs[i], NULL, NULL, NULL);
    }
    produce_job(jobs[1], NULL, NULL, NULL); /* a re-sent copy */

    struct consumer_stats st;
    run_once(cfg, false, &st);
    ck_assert_uint_eq(st.consumed, 4);
    ck_assert_uint_eq(st.new_ops, 3);
    ck_assert_uint_eq(st.duplicates + st.duplicates_inflight, 1);
    ck_assert_uint_eq(st.results, 3);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_int_eq(atomic_load(&origin.requests), 3);
    ck_assert_uint_eq(st.fetch_attempts, 3);

    struct rec r[16];
    size_t n = topic_read(T_RESULTS, r, 16);
    ck_assert_uint_eq(n, 3);
    int bodies = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_loads(r[i].value, 0, NULL);
        ck_assert_ptr_nonnull(v);
        ck_assert_str_eq(json_str(v, "outcome"), "fetched");
        ck_assert_int_eq(json_integer_value(json_object_get(v, "status")), 200);
        for (int k = 0; k < 3; k++) {
            char want[32];
            snprintf(want, sizeof(want), "body of /page/%d", k);
            bodies += !strcmp(json_str(v, "body"), want);
        }
        json_decref(v);
    }
    ck_assert_int_eq(bodies, 3);
    recs_free(r, n);
    ck_assert_int_eq(committed_offset(), 4);

    /* the op records are complete (read after the run, store reopened) */
    struct store_conf sc = {.path = cfg->store_path, .instance = "unit",
                            .run_id = "check", .ops_ttl_ms = 3600000,
                            .failed_ttl_ms = 3600000, .lease_ms = 30000,
                            .block_cache_bytes = 1 << 20, .sync = true};
    struct store *s = NULL;
    char e[256];
    ck_assert_msg(store_open(&sc, &s, e, sizeof(e)) == DD_OK, "%s", e);
    for (int i = 0; i < 3; i++) {
        char id[JOB_OP_ID_MAX + 1], hash[JOB_HEX_LEN + 1];
        identity_of(cfg, jobs[i], id, sizeof(id), hash);
        struct store_op op;
        bool found = false;
        ck_assert(store_op_get(s, id, dd_now_ms(), &op, &found, e, sizeof(e)) == DD_OK);
        ck_assert(found);
        ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
        ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_SENT);
        ck_assert_str_eq(op.request_hash, hash);
        ck_assert_uint_eq(op.attempts, 1);
    }
    store_close(s);
    cfg_destroy(cfg);
}
END_TEST

/* A cooperative assignor through kafka.* is refused at start-up, whatever
 * the librdkafka version: DD_ERR_INVAL (exit 2 from `run`), the reason in
 * errstr, no Kafka consumer created. */
START_TEST(test_consumer_cooperative_assignor_is_refused_at_start_up)
{
    const char *values[] = {"cooperative-sticky", "roundrobin,COOPERATIVE-STICKY"};
    for (size_t i = 0; i < 2; i++) {
        char var[128];
        snprintf(var, sizeof(var),
                 "DEDUPD_KAFKA__PARTITION__ASSIGNMENT__STRATEGY=%s", values[i]);
        struct cfg *cfg = cfg_for_test_with(var);
        struct consumer_handles h;
        char e[DD_ERRSTR_SIZE] = "";
        dd_err_t err = consumer_handles_open(cfg, true, &h, e, sizeof(e));
        ck_assert_int_eq(err, DD_ERR_INVAL);
        ck_assert_ptr_null(h.consumer);
        ck_assert_msg(strstr(e, "config: kafka.partition.assignment.strategy: "
                                "cooperative-sticky is refused") &&
                          strstr(e, "eager protocol") &&
                          strstr(e, "2.6.1)"),
                      "errstr: %s", e);
        consumer_handles_close(&h);
        cfg_destroy(cfg);
    }

    /* the eager assignors are taken */
    struct cfg *cfg = cfg_for_test_with(
        "DEDUPD_KAFKA__PARTITION__ASSIGNMENT__STRATEGY=range,roundrobin");
    struct consumer_handles h;
    char e[DD_ERRSTR_SIZE] = "";
    ck_assert_msg(consumer_handles_open(cfg, true, &h, e, sizeof(e)) == DD_OK,
                  "%s", e);
    ck_assert_ptr_nonnull(h.consumer);
    consumer_handles_close(&h);
    cfg_destroy(cfg);
}
END_TEST

/* producer_warm: the output topics' leaders learned before the first
 * record; a topic whose partition has no leader is given up at the bound
 * (false, logged) instead of being waited for. */
START_TEST(test_producer_warm_learns_leaders_and_stops_at_its_bound)
{
    struct cfg *cfg = cfg_for_test();
    struct producer *p = NULL;
    char e[DD_ERRSTR_SIZE] = "";
    ck_assert_msg(producer_new(cfg, NULL, &p, e, sizeof(e)) == DD_OK, "%s",
                  e);
    const char *outs[] = {T_RESULTS, NULL, T_DLQ, "", GROUP "-changelog"};
    ck_assert(producer_warm(p, outs, 5, 10000));

    rd_kafka_mock_cluster_t *mc = rd_kafka_handle_mock_cluster(mk);
    ck_assert_int_eq(rd_kafka_mock_topic_create(mc, "t.leaderless", 1, 1), 0);
    ck_assert_int_eq(rd_kafka_mock_partition_set_leader(mc, "t.leaderless", 0,
                                                        -1), 0);
    const char *none[] = {T_CONFLICTS, "t.leaderless"};
    int64_t t0 = dd_now_ms();
    ck_assert(!producer_warm(p, none, 2, 300));
    /* it stops at its bound (one metadata request may end past it) */
    ck_assert_int_lt(dd_now_ms() - t0, 300 + 2500);
    /* 5 topics warmed so far, 3 more fit; a ninth is not tried */
    const char *more[] = {T_RESULTS, T_DLQ, T_CONFLICTS, T_JOBS};
    ck_assert(!producer_warm(p, more, 4, 10000));
    producer_destroy(p);
    cfg_destroy(cfg);
}
END_TEST

Suite *consumer_suite(void)
{
    Suite *s = suite_create("consumer");
    TCase *tc = tcase_create("mock_cluster");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_consumer_shadow_one_result_per_job_and_duplicates_decided);
    tcase_add_test(tc, test_consumer_fetches_each_logical_job_once_from_the_origin);
    tcase_add_test(tc, test_consumer_cooperative_assignor_is_refused_at_start_up);
    tcase_add_test(tc, test_producer_warm_learns_leaders_and_stops_at_its_bound);
    suite_add_tcase(s, tc);
    return s;
}
