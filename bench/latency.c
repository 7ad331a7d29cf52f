/*
 * latency: job produced -> result visible, at a fixed offered load (issue 6,
 * scenario 5).  While dedupd runs, it produces COUNT new jobs at RATE jobs/s,
 * each keyed and tagged as `dedupd submit` does (key = op_id, headers
 * dedupd-op-id and dedupd-request-hash, murmur2_random, linger.ms 5), with
 * {"meta":{"i":N,"sent_us":T}} (T = wall clock just before the produce call),
 * and consumes the results topic, where dedupd echoes meta.  Prints one JSON
 * line:
 *
 *   {"offered_rate":R,"achieved_rate":A,"sent":N,"received":K,
 *    "p50_ms":..,"p99_ms":..,"max_ms":..,"mean_ms":..,
 *    "produced_p50_ms":..,"produced_p99_ms":..,"produced_max_ms":..,
 *    "job_bytes_avg":..,"result_bytes_avg":..}
 *
 *   latency -b HOST:PORT --jobs TOPIC --results TOPIC --pages FILE --tag TAG
 *           [--rate 2000] [--count 20000] [--drain-s 60]
 *
 * p50/p99/max: from sent_us to the moment this process polled the result
 * (the result was acknowledged by the broker, acks=all, and is visible to a
 * consumer: the latency a downstream consumer sees).  produced_*: to the
 * result message's Kafka CreateTime (when dedupd produced it; ms resolution).
 * URLs: the lines of FILE in turn, each with "?t=TAG&i=N", so every job is a
 * new op.  One warm-up job (meta.i = -1, not counted) goes first and its
 * result is awaited, so connection set-up is not in the figures.  Identity comes from dedupd's own job_parse (dedupd_core).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "job.h"

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr, "usage: latency -b BOOTSTRAP --jobs TOPIC --results TOPIC "
                    "--pages FILE --tag TAG [--rate R] [--count N] [--drain-s S]\n");
    exit(2);
}

static void setc(rd_kafka_conf_t *c, const char *k, const char *v)
{
    char e[512];
    if (rd_kafka_conf_set(c, k, v, e, sizeof(e)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "latency: %s=%s: %s\n", k, v, e);
        exit(2);
    }
}

static long count = 20000;
static int64_t *lat_recv_us; /* per job index; 0 = not yet seen */
static int64_t *lat_prod_us;
static atomic_long received;
static atomic_bool stop_consumer;
static atomic_bool warm_seen;
static uint64_t result_bytes;
static rd_kafka_t *crk;

static void *consume_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_consumer)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(crk, 50);
        if (!m)
            continue;
        int64_t now = wall_us();
        if (!m->err && m->payload) {
            /* meta is echoed verbatim: find "i": and "sent_us": in it */
            const char *p = memmem(m->payload, m->len, "\"sent_us\":", 10);
            const char *q = memmem(m->payload, m->len, "\"meta\":{\"i\":", 12);
            if (p && q) {
                long i = strtol(q + 12, NULL, 10);
                int64_t sent = strtoll(p + 10, NULL, 10);
                if (i == -1)
                    atomic_store(&warm_seen, true);
                else if (i >= 0 && i < count && !lat_recv_us[i]) {
                    lat_recv_us[i] = now - sent > 0 ? now - sent : 1;
                    int64_t ts = rd_kafka_message_timestamp(m, NULL);
                    lat_prod_us[i] = ts > 0 ? ts * 1000 - sent : 0;
                    result_bytes += m->len;
                    atomic_fetch_add(&received, 1);
                }
            }
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const int64_t *sorted, long n, double q)
{
    if (n <= 0)
        return 0;
    long k = (long)(q * (double)(n - 1) + 0.5);
    return (double)sorted[k] / 1000.0;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *jobs = NULL, *results = NULL, *pages = NULL,
               *tag = NULL;
    double rate = 2000, drain_s = 60;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "-b"))
            brokers = v;
        else if (!strcmp(a, "--jobs"))
            jobs = v;
        else if (!strcmp(a, "--results"))
            results = v;
        else if (!strcmp(a, "--pages"))
            pages = v;
        else if (!strcmp(a, "--tag"))
            tag = v;
        else if (!strcmp(a, "--rate"))
            rate = atof(v);
        else if (!strcmp(a, "--count"))
            count = atol(v);
        else if (!strcmp(a, "--drain-s"))
            drain_s = atof(v);
        else
            usage();
    }
    if (!brokers || !jobs || !results || !pages || !tag || rate <= 0 || count <= 0)
        usage();

    /* pages */
    FILE *pf = fopen(pages, "r");
    if (!pf) {
        perror(pages);
        return 1;
    }
    size_t np = 0, pcap = 256;
    char **pg = malloc(pcap * sizeof(*pg));
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, pf)) > 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (!len)
            continue;
        if (np == pcap)
            pg = realloc(pg, (pcap *= 2) * sizeof(*pg));
        pg[np++] = strdup(line);
    }
    free(line);
    fclose(pf);
    if (!np) {
        fprintf(stderr, "latency: %s: no pages\n", pages);
        return 1;
    }

    lat_recv_us = calloc((size_t)count, sizeof(int64_t));
    lat_prod_us = calloc((size_t)count, sizeof(int64_t));
    char e[512];

    /* consumer of the results topic: every partition from the beginning
     * (the topic is this run's own) */
    rd_kafka_conf_t *cc = rd_kafka_conf_new();
    setc(cc, "bootstrap.servers", brokers);
    char gid[128];
    snprintf(gid, sizeof(gid), "latency-%d", (int)getpid());
    setc(cc, "group.id", gid);
    setc(cc, "enable.auto.commit", "false");
    setc(cc, "fetch.wait.max.ms", "100");
    crk = rd_kafka_new(RD_KAFKA_CONSUMER, cc, e, sizeof(e));
    if (!crk) {
        fprintf(stderr, "latency: %s\n", e);
        return 1;
    }
    rd_kafka_poll_set_consumer(crk);
    int nparts = 0;
    for (int tries = 0; tries < 50 && !nparts; tries++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(crk, results, NULL);
        const struct rd_kafka_metadata *md = NULL;
        if (!rd_kafka_metadata(crk, 0, rkt, &md, 5000)) {
            if (md->topic_cnt == 1 && !md->topics[0].err)
                nparts = md->topics[0].partition_cnt;
            rd_kafka_metadata_destroy(md);
        }
        rd_kafka_topic_destroy(rkt);
        if (!nparts)
            usleep(100000);
    }
    if (!nparts) {
        fprintf(stderr, "latency: topic %s: no partitions\n", results);
        return 1;
    }
    rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(nparts);
    for (int p = 0; p < nparts; p++)
        rd_kafka_topic_partition_list_add(tl, results, p)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(crk, tl);
    rd_kafka_topic_partition_list_destroy(tl);
    pthread_t th;
    pthread_create(&th, NULL, consume_main, NULL);

    /* producer, configured as dedupd submit's */
    rd_kafka_conf_t *pc = rd_kafka_conf_new();
    setc(pc, "bootstrap.servers", brokers);
    setc(pc, "enable.idempotence", "true");
    setc(pc, "acks", "all");
    setc(pc, "partitioner", "murmur2_random");
    setc(pc, "linger.ms", "5");
    setc(pc, "compression.type", "lz4");
    rd_kafka_t *prk = rd_kafka_new(RD_KAFKA_PRODUCER, pc, e, sizeof(e));
    if (!prk) {
        fprintf(stderr, "latency: %s\n", e);
        return 1;
    }

    struct job_conf jc;
    memset(&jc, 0, sizeof(jc));
    char buf[4096];

    /* Warm-up, not timed: one job (meta.i = -1) produced and acknowledged,
     * and its result (or, on one topic, itself) seen, so that the idempotent
     * producer's id, the connections and the consumers' fetches are all in
     * place before the first timed job. */
    {
        int n = snprintf(buf, sizeof(buf),
                         "{\"url\":\"%s?t=%s&i=warmup\",\"meta\":{\"i\":-1,"
                         "\"sent_us\":%" PRId64 "}}",
                         pg[0], tag, wall_us());
        struct job *job = NULL;
        if (job_parse(&jc, buf, (size_t)n, &job, e, sizeof(e))) {
            fprintf(stderr, "latency: warm-up job: %s\n", e);
            return 1;
        }
        rd_kafka_producev(prk, RD_KAFKA_V_TOPIC(jobs),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(job->op_id, strlen(job->op_id)),
                          RD_KAFKA_V_VALUE(buf, (size_t)n), RD_KAFKA_V_END);
        job_destroy(job);
        rd_kafka_flush(prk, 10000);
        double until = mono_s() + 20;
        while (!atomic_load(&warm_seen) && mono_s() < until)
            usleep(10000);
        if (!atomic_load(&warm_seen))
            fprintf(stderr, "latency: warm-up result not seen in 20 s; going on\n");
    }
    uint64_t job_bytes = 0;
    long sent = 0;
    double t0 = mono_s();
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < count; i++) {
        /* pace: job i leaves at start + i/rate */
        double at = (double)i / rate;
        struct timespec due = start;
        due.tv_sec += (time_t)at;
        due.tv_nsec += (long)((at - (double)(time_t)at) * 1e9);
        if (due.tv_nsec >= 1000000000L) {
            due.tv_sec++;
            due.tv_nsec -= 1000000000L;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
        rd_kafka_poll(prk, 0);
        const char *page = pg[(size_t)i % np];
        /* identity first (meta is not identity), then stamp the send time */
        int n = snprintf(buf, sizeof(buf),
                         "{\"url\":\"%s?t=%s&i=%ld\",\"meta\":{\"i\":%ld,"
                         "\"sent_us\":%" PRId64 "}}",
                         page, tag, i, i, wall_us());
        struct job *job = NULL;
        if (job_parse(&jc, buf, (size_t)n, &job, e, sizeof(e))) {
            fprintf(stderr, "latency: job %ld: %s\n", i, e);
            return 1;
        }
        n = snprintf(buf, sizeof(buf),
                     "{\"url\":\"%s?t=%s&i=%ld\",\"meta\":{\"i\":%ld,"
                     "\"sent_us\":%" PRId64 "}}",
                     page, tag, i, i, wall_us());
        rd_kafka_headers_t *h = rd_kafka_headers_new(2);
        rd_kafka_header_add(h, "dedupd-op-id", -1, job->op_id, -1);
        rd_kafka_header_add(h, "dedupd-request-hash", -1, job->request_hash, -1);
        rd_kafka_resp_err_t err;
        while ((err = rd_kafka_producev(
                    prk, RD_KAFKA_V_TOPIC(jobs), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_KEY(job->op_id, strlen(job->op_id)),
                    RD_KAFKA_V_VALUE(buf, (size_t)n), RD_KAFKA_V_HEADERS(h),
                    RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(prk, 10);
        if (err) {
            fprintf(stderr, "latency: produce: %s\n", rd_kafka_err2str(err));
            rd_kafka_headers_destroy(h);
            return 1;
        }
        job_destroy(job);
        job_bytes += (uint64_t)n;
        sent++;
    }
    double t_sent = mono_s() - t0;
    rd_kafka_flush(prk, 30000);

    double until = mono_s() + drain_s;
    while (atomic_load(&received) < sent && mono_s() < until)
        usleep(20000);
    atomic_store(&stop_consumer, true);
    pthread_join(th, NULL);

    long k = 0;
    int64_t *rs = malloc((size_t)count * sizeof(int64_t));
    int64_t *ps = malloc((size_t)count * sizeof(int64_t));
    double sum = 0;
    for (long i = 0; i < count; i++)
        if (lat_recv_us[i]) {
            rs[k] = lat_recv_us[i];
            ps[k] = lat_prod_us[i];
            sum += (double)lat_recv_us[i];
            k++;
        }
    qsort(rs, (size_t)k, sizeof(int64_t), cmp64);
    qsort(ps, (size_t)k, sizeof(int64_t), cmp64);
    printf("{\"offered_rate\":%.0f,\"achieved_rate\":%.1f,\"sent\":%ld,"
           "\"received\":%ld,\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.2f,"
           "\"mean_ms\":%.2f,\"produced_p50_ms\":%.2f,\"produced_p99_ms\":%.2f,"
           "\"produced_max_ms\":%.2f,\"job_bytes_avg\":%.0f,"
           "\"result_bytes_avg\":%.0f}\n",
           rate, t_sent > 0 ? (double)sent / t_sent : 0.0, sent, k,
           pct(rs, k, 0.50), pct(rs, k, 0.99), k ? (double)rs[k - 1] / 1000.0 : 0.0,
           k ? sum / (double)k / 1000.0 : 0.0, pct(ps, k, 0.50), pct(ps, k, 0.99),
           k ? (double)ps[k - 1] / 1000.0 : 0.0,
           sent ? (double)job_bytes / (double)sent : 0.0,
           k ? (double)result_bytes / (double)k : 0.0);
    fflush(stdout);
    free(rs);
    free(ps);
    rd_kafka_destroy(prk);
    rd_kafka_consumer_close(crk);
    rd_kafka_destroy(crk);
    return k == sent ? 0 : 1;
}
