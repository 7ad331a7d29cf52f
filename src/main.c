/* dedupd command line.  Only main.c exits.  Exit codes:
 *   0  success
 *   1  runtime failure (Kafka, store, I/O)
 *   2  usage or configuration error
 *   3  submit/key: some input was not a valid job (submit sent none of it)
 *   4  inspect: the op is not in the store
 *   128 + N  run: left at once on a second signal N (143 for SIGTERM, 130
 *      for SIGINT): nothing lost (offsets only moved on acknowledgements;
 *      the next run replays the outbox and takes the leases over)
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dd.h"
#include "config.h"
#include "consumer.h"
#include "job.h"
#include "kconf.h"
#include "key.h"
#include "log.h"
#include "producer.h"
#include "result.h"
#include "store.h"

extern char **environ;

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define EXIT_INVALID_INPUT 3
#define EXIT_NOT_FOUND 4

static volatile sig_atomic_t run = 1, hurry = 0, hurry_sig = 0;

/* First SIGTERM/SIGINT: drain within shutdown.grace_ms; second: leave now
 * (within a second; `run` then exits 128 + the second signal's number).
 * @locality a signal handler on any thread: only sets the sig_atomic_t flags. */
static void on_signal(int sig)
{
    if (!run) {
        hurry_sig = sig;
        hurry = 1;
    }
    run = 0;
}


static const char *usage_text =
    "usage: dedupd COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run     -c FILE [--shadow] [--exit-when-idle MS] [--stats-json]\n"
    "          consume jobs, claim, fetch once, publish results\n"
    "  submit  -c FILE [--allow-invalid] [JOBS.ndjson|-]\n"
    "          produce jobs keyed by op_id; prints one JSON receipt per job\n"
    "  tail    -c FILE [--exit-when-idle MS]\n"
    "          print each result once (drops event_keys already seen)\n"
    "  key     [-c FILE] JOB.json|-   show canonical request, op_id, hashes\n"
    "  inspect -c FILE OP_ID [--json]     the op record and its attempts\n"
    "  forget  -c FILE OP_ID              drop an op (a control message to its\n"
    "                                     owner): its next job is fetched again\n"
    "  redrive -c FILE [--dry-run] [--all]  DLQ records back to the jobs topic\n"
    "          (valid ones re-keyed by op_id; still-invalid ones kept unless --all)\n"
    "  topics  -c FILE [--partitions N] [--replication-factor N] [--shadow]\n"
    "          create the configured topics if missing (4 partitions; replication\n"
    "          factor: the broker's default; --shadow: the shadow.* output topics)\n"
    "  config  -c FILE --dump | --doc\n"
    "  version\n"
    "\n"
    "Configuration: -c FILE (JSON), then DEDUPD_* environment variables.\n"
    "Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error,\n"
    "3 invalid job input (submit sent none of the invalid lines), 4 op not found.\n";

static void usage(FILE *fp)
{
    fputs(usage_text, fp);
}

static struct cfg *load_cfg(const char *path)
{
    struct cfg *cfg = NULL;
    char e[DD_ERRSTR_SIZE];
    if (cfg_load(path, environ, &cfg, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        return NULL;
    }
    log_configure(log_level_parse(cfg->log_level), cfg->log_debug);
    if (!cfg->instance_id[0]) {
        const char *pod = getenv("POD_NAME");
        char host[256] = "dedupd";
        if (!pod || !*pod) {
            gethostname(host, sizeof(host) - 1);
            pod = host;
        }
        free(cfg->instance_id);
        cfg->instance_id = dd_xstrdup(pod, "instance.id");
    }
    return cfg;
}

static void job_conf_from(const struct cfg *cfg, struct job_conf *jc)
{
    memset(jc, 0, sizeof(*jc));
    jc->variance_headers = (const char *const *)cfg->identity_variance_headers.v;
    jc->n_variance_headers = cfg->identity_variance_headers.n;
    jc->credential_headers = (const char *const *)cfg->identity_credential_headers.v;
    jc->n_credential_headers = cfg->identity_credential_headers.n;
    jc->max_job_bytes = (size_t)cfg->limits_max_job_bytes;
}

/* Shadow mode never touches live state: its own store, consumer group and
 * output topics under the prefix "shadow." (the jobs topic is the live one). */
static void shadow_rename(struct cfg *cfg)
{
    char buf[1024];
    char **fields[] = {&cfg->topic_results, &cfg->topic_conflicts,
                       &cfg->topic_dlq, &cfg->group_id};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        snprintf(buf, sizeof(buf), "shadow.%s", *fields[i]);
        free(*fields[i]);
        *fields[i] = dd_xstrdup(buf, "shadow name");
    }
    snprintf(buf, sizeof(buf), "%s.shadow", cfg->store_path);
    free(cfg->store_path);
    cfg->store_path = dd_xstrdup(buf, "shadow store.path");
}

/* ---- run ----------------------------------------------------------------- */

/* exactly_once's in-process restart: how often and how long apart it tries
 * to open the handles again when the broker does not answer. */
#define RESTART_OPEN_TRIES 60
#define RESTART_OPEN_WAIT_S 5

static int cmd_run(int argc, char **argv)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'},
        {"shadow", no_argument, 0, 's'},
        {"exit-when-idle", required_argument, 0, 'i'},
        {"stats-json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *path = NULL;
    struct consumer_opts opts = {.run = &run, .hurry = &hurry};
    bool stats_json = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 's': opts.shadow = true; break;
        case 'i': opts.exit_when_idle_ms = strtoll(optarg, NULL, 10); break;
        case 'j': stats_json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    if (opts.shadow)
        shadow_rename(cfg);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct consumer_stats st = {0};
    struct consumer_handles h;
    char e[DD_ERRSTR_SIZE];
    dd_err_t err;
    unsigned open_failures = 0;
    for (unsigned restarts = 0;; restarts++) {
        err = consumer_handles_open(cfg, opts.shadow, &h, e, sizeof(e));
        if (err && restarts > 0 && run && !hurry &&
            open_failures++ < RESTART_OPEN_TRIES) {
            /* a restart after an abort (often a broker outage): the broker
             * may still be away; the marker keeps the copy to be dropped */
            log_msg(LOG_WARNING, "main", "starting the pipeline again: %s; "
                    "trying again in %d s (%u of %d)", e, RESTART_OPEN_WAIT_S,
                    open_failures, RESTART_OPEN_TRIES);
            consumer_handles_close(&h);
            for (int s = 0; s < RESTART_OPEN_WAIT_S && run && !hurry; s++)
                sleep(1);
            continue;
        }
        if (!err) {
            open_failures = 0;
            err = consumer_run(cfg, &h, &opts, &st, e, sizeof(e));
        }
        /* exactly_once: an aborted transaction drops the local copy (the
         * next open does) and the pipeline starts again: rejoin, restore */
        bool again = err && h.wipe && run && !hurry && restarts < 1000;
        consumer_handles_close(&h);
        if (!again)
            break;
        log_msg(LOG_WARNING, "main", "%s; starting the pipeline again (%u)",
                e, restarts + 1);
        sleep(1);
    }
    if (err)
        log_msg(LOG_ERR, "main", "%s", e);
    if (stats_json)
        consumer_stats_print(&st, stdout);
    cfg_destroy(cfg);
    if (err)
        return err == DD_ERR_INVAL ? EXIT_USAGE : EXIT_RUNTIME;
    return hurry ? 128 + hurry_sig : 0;
}

/* ---- submit -------------------------------------------------------------- */

/* What the delivery reports of `dedupd submit` count. */
struct submit_tally {
    long delivered, delivery_failed;
};

/* The per-message opaque of one submitted line (freed by its report). */
struct receipt {
    struct submit_tally *tally;
    long line;
    char op_id[JOB_OP_ID_MAX + 1];
    char event_key[JOB_HEX_LEN + 1];
    bool valid;
};

/* One `dedupd submit` run: its settings, producer and counts. */
struct submit_run {
    const struct cfg *cfg;
    struct job_conf jc;
    struct producer *p;
    bool allow_invalid;
    struct submit_tally tally;
    long invalid, sent, not_sent;
};

/* Prints the receipt line of an acknowledged job.
 * @locality the thread calling producer_poll()/producer_flush() (main). */
static void submit_dr(void *opaque, dd_err_t err, const char *errtext,
                      int32_t partition, int64_t offset)
{
    struct receipt *r = opaque;
    if (err) {
        r->tally->delivery_failed++;
        fprintf(stderr, "dedupd: submit: line %ld: delivery failed: %s\n",
                r->line, errtext);
    } else {
        r->tally->delivered++;
        if (r->valid)
            printf("{\"line\":%ld,\"op_id\":\"%s\",\"event_key\":\"%s\","
                   "\"partition\":%d,\"offset\":%lld}\n",
                   r->line, r->op_id, r->event_key, (int)partition,
                   (long long)offset);
        else
            printf("{\"line\":%ld,\"invalid\":true,\"partition\":%d,"
                   "\"offset\":%lld}\n",
                   r->line, (int)partition, (long long)offset);
    }
    free(r);
}

/* Produce one input line (\p n bytes, no newline) to the jobs topic: a valid
 * job keyed by its op_id with the dedupd-op-id and dedupd-request-hash
 * headers; an invalid one only with --allow-invalid, keyed by the digest of
 * its bytes.  A line that cannot be sent is counted and skipped. */
static void submit_line(struct submit_run *s, const char *line, size_t n,
                        long lineno)
{
    struct job *job = NULL;
    struct receipt *r = dd_xcalloc(1, sizeof(*r), "submit receipt");
    r->tally = &s->tally;
    r->line = lineno;
    struct producer_header h[2];
    size_t nh = 0;
    char key[JOB_OP_ID_MAX + 1];
    char e[DD_ERRSTR_SIZE];
    if (job_parse(&s->jc, line, n, &job, e, sizeof(e))) {
        s->invalid++;
        fprintf(stderr, "dedupd: submit: line %ld: %s%s\n", lineno, e,
                s->allow_invalid ? " (sent anyway: --allow-invalid)" : "");
        if (!s->allow_invalid) {
            free(r);
            return;
        }
        /* Keyed by the digest of its bytes: never an empty key. */
        char digest[KEY_HEX_LEN + 1];
        key_sha256_hex(line, n, digest);
        snprintf(key, sizeof(key), "invalid:%s", digest);
    } else {
        r->valid = true;
        snprintf(r->op_id, sizeof(r->op_id), "%s", job->op_id);
        snprintf(r->event_key, sizeof(r->event_key), "%s", job->event_key);
        snprintf(key, sizeof(key), "%s", job->op_id);
        h[0] = (struct producer_header){"dedupd-op-id", r->op_id};
        h[1] = (struct producer_header){"dedupd-request-hash", job->request_hash};
        nh = 2;
    }
    dd_err_t err;
    /* librdkafka's queue full (queue.buffering.max.messages or .kbytes):
     * serve delivery reports until there is room, as its producer docs ask
     * (rd_kafka_produce: RD_KAFKA_RESP_ERR__QUEUE_FULL), instead of leaving
     * the line unsent (a 1M-line bench submit lost its last line so) */
    while ((err = producer_send(s->p, s->cfg->topic_jobs, key, strlen(key),
                                line, n, h, nh, r, e, sizeof(e))) ==
           DD_ERR_TRANSIENT)
        producer_poll(s->p, 100);
    job_destroy(job);
    if (err) {
        /* This line is not sent (e.g. larger than the broker accepts);
         * the others still are. */
        fprintf(stderr, "dedupd: submit: line %ld: %s\n", lineno, e);
        free(r);
        s->not_sent++;
        return;
    }
    s->sent++;
    producer_poll(s->p, 0);
}

static int cmd_submit(int argc, char **argv)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'},
        {"allow-invalid", no_argument, 0, 'a'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *path = NULL;
    struct submit_run s = {0};
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'a': s.allow_invalid = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    const char *input = optind < argc ? argv[optind] : "-";
    FILE *in = strcmp(input, "-") ? fopen(input, "r") : stdin;
    if (!in) {
        fprintf(stderr, "dedupd: submit: %s: %s\n", input, strerror(errno));
        return EXIT_USAGE;
    }
    struct cfg *cfg = load_cfg(path);
    if (!cfg) {
        if (in != stdin)
            fclose(in);
        return EXIT_USAGE;
    }
    s.cfg = cfg;
    job_conf_from(cfg, &s.jc);
    char e[DD_ERRSTR_SIZE];
    if (producer_new(cfg, submit_dr, &s.p, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        cfg_destroy(cfg);
        if (in != stdin)
            fclose(in);
        return EXIT_USAGE;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n > 0)
            submit_line(&s, line, (size_t)n, lineno);
    }
    free(line);
    if (in != stdin)
        fclose(in);
    long unacked = 0;
    if (producer_flush(s.p, 60000)) {
        unacked = producer_outq_len(s.p);
        fprintf(stderr, "dedupd: submit: %ld messages unacknowledged after 60 s "
                        "(is the broker at %s reachable?)\n",
                unacked, cfg->bootstrap_servers);
        rc = EXIT_RUNTIME;
    }
    producer_destroy(s.p);
    fflush(stdout);
    fprintf(stderr, "dedupd: submit: %ld lines, %ld sent, %ld acknowledged, "
                    "%ld invalid, %ld not sent, %ld failed, %ld unacknowledged\n",
            lineno, s.sent, s.tally.delivered, s.invalid, s.not_sent,
            s.tally.delivery_failed, unacked);
    cfg_destroy(cfg);
    if (!rc && (s.tally.delivery_failed || s.not_sent))
        rc = EXIT_RUNTIME;
    if (!rc && s.invalid && !s.allow_invalid)
        rc = EXIT_INVALID_INPUT;
    return rc;
}

/* A consumer for the CLI's readers (tail, redrive), subscribed to \p topic.
 * Prints the reason and returns NULL on failure. */
static rd_kafka_t *cli_consumer_new(const struct cfg *cfg,
                                    const char *const *fixed, const char *topic)
{
    char e[DD_ERRSTR_SIZE], ke[512];
    rd_kafka_conf_t *kc = NULL;
    if (kconf_new(cfg, KCONF_CONSUMER, fixed, &kc, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, ke, sizeof(ke));
    if (!rk) {
        fprintf(stderr, "dedupd: rd_kafka_new: %s\n", ke);
        rd_kafka_conf_destroy(kc);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *t = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(t, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, t);
    rd_kafka_topic_partition_list_destroy(t);
    if (err) {
        fprintf(stderr, "dedupd: subscribe %s: %s\n", topic, rd_kafka_err2str(err));
        rd_kafka_destroy(rk);
        return NULL;
    }
    return rk;
}

/* ---- tail ---------------------------------------------------------------- */

static int cmd_tail(int argc, char **argv)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'},
        {"exit-when-idle", required_argument, 0, 'i'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *path = NULL;
    int64_t idle_ms = 0;
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'i': idle_ms = strtoll(optarg, NULL, 10); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    if (cfg->tail_ttl_ms < cfg->store_ops_ttl_ms) {
        fprintf(stderr, "dedupd: config: tail.ttl_ms: %lld is below "
                        "store.ops_ttl_ms (%lld): replays would pass\n",
                (long long)cfg->tail_ttl_ms, (long long)cfg->store_ops_ttl_ms);
        cfg_destroy(cfg);
        return EXIT_USAGE;
    }
    char e[DD_ERRSTR_SIZE];
    struct store *store = NULL;
    char run_id[32];
    snprintf(run_id, sizeof(run_id), "%lld", (long long)dd_now_ms());
    struct store_conf sc = {.path = cfg->tail_store_path,
                            .instance = "tail",
                            .run_id = run_id,
                            .block_cache_bytes = 8 << 20,
                            .sync = false};
    if (store_open(&sc, &store, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        cfg_destroy(cfg);
        return EXIT_RUNTIME;
    }
    const char *fixed[] = {"group.id", cfg->tail_group_id,
                           "auto.offset.reset", "earliest",
                           "enable.partition.eof", "true",
                           "enable.auto.offset.store", "true", NULL};
    rd_kafka_t *rk = cli_consumer_new(cfg, fixed, cfg->topic_results);
    if (!rk) {
        store_close(store);
        cfg_destroy(cfg);
        return EXIT_RUNTIME;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    long printed = 0, dropped = 0, eofs = 0;
    int64_t last = dd_now_ms();
    int rc = 0;
    while (run) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m) {
            if (idle_ms > 0 && eofs > 0 && dd_now_ms() - last >= idle_ms)
                break;
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            eofs++;
        } else if (m->err) {
            fprintf(stderr, "dedupd: tail: %s\n", rd_kafka_message_errstr(m));
        } else if (m->key && m->key_len) {
            last = dd_now_ms();
            /* Print and flush first, then remember the event_key: a crash in
             * between prints the result again (at least once), never loses
             * it. */
            bool seen = false;
            dd_err_t err = store_seen_contains(store, m->key, m->key_len,
                                               dd_now_ms(), &seen, e, sizeof(e));
            if (!err && !seen) {
                fwrite(m->payload, 1, m->len, stdout);
                fputc('\n', stdout);
                fflush(stdout);
                printed++;
                err = store_mark_seen(store, m->key, m->key_len,
                                      cfg->tail_ttl_ms, dd_now_ms(), &seen, e,
                                      sizeof(e));
            } else if (!err)
                dropped++;
            if (err) {
                fprintf(stderr, "dedupd: tail: %s\n", e);
                rc = EXIT_RUNTIME;
                rd_kafka_message_destroy(m);
                break;
            }
        }
        rd_kafka_message_destroy(m);
    }
    fflush(stdout);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    store_close(store);
    cfg_destroy(cfg);
    fprintf(stderr, "dedupd: tail: %ld printed, %ld replays dropped\n", printed,
            dropped);
    return rc;
}

/* ---- key ----------------------------------------------------------------- */

static int cmd_key(int argc, char **argv)
{
    const char *path = NULL, *input = "-";
    int c;
    static const struct option lo[] = {{"config", required_argument, 0, 'c'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        if (c == 'c')
            path = optarg;
        else if (c == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc)
        input = argv[optind];
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    FILE *in = strcmp(input, "-") ? fopen(input, "r") : stdin;
    if (!in) {
        fprintf(stderr, "dedupd: key: %s: %s\n", input, strerror(errno));
        cfg_destroy(cfg);
        return EXIT_USAGE;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            buf = dd_xrealloc(buf, cap, "key input");
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    if (in != stdin)
        fclose(in);
    struct job_conf jc;
    job_conf_from(cfg, &jc);
    struct job *job = NULL;
    char e[DD_ERRSTR_SIZE];
    int rc = 0;
    if (job_parse(&jc, buf ? buf : "", len, &job, e, sizeof(e))) {
        fprintf(stderr, "dedupd: key: %s\n", e);
        rc = EXIT_INVALID_INPUT;
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "canonical", json_string(job->canonical));
        json_object_set_new(o, "normalized_url", json_string(job->req.normalized_url));
        json_object_set_new(o, "op_id", json_string(job->op_id));
        json_object_set_new(o, "request_hash", json_string(job->request_hash));
        json_object_set_new(o, "event_key", json_string(job->event_key));
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(o);
        job_destroy(job);
    }
    free(buf);
    cfg_destroy(cfg);
    return rc;
}


/* ---- topics -------------------------------------------------------------- */

/* Create the configured topics (jobs, results, conflicts, dlq) if missing,
 * with the Admin API (rd_kafka_CreateTopics).  An existing topic is fine.
 * Replication factor -1 = the broker's default.replication.factor (KIP-464,
 * Kafka brokers >= 2.4.0; rd_kafka_NewTopic_new). */
static int cmd_topics(int argc, char **argv)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'},
        {"partitions", required_argument, 0, 'p'},
        {"replication-factor", required_argument, 0, 'r'},
        {"shadow", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *path = NULL;
    bool shadow = false;
    int partitions = 4, replication = -1, c;
    while ((c = getopt_long(argc, argv, "c:p:r:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'p': partitions = atoi(optarg); break;
        case 'r': replication = atoi(optarg); break;
        case 's': shadow = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (partitions < 1 || partitions > 10000) {
        fprintf(stderr, "dedupd: topics: --partitions must be 1..10000\n");
        return EXIT_USAGE;
    }
    if (replication != -1 && (replication < 1 || replication > 32)) {
        fprintf(stderr, "dedupd: topics: --replication-factor must be 1..32 "
                        "(or -1: the broker's default.replication.factor)\n");
        return EXIT_USAGE;
    }
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    char e[DD_ERRSTR_SIZE];
    rd_kafka_conf_t *kc = NULL;
    if (kconf_new(cfg, KCONF_PRODUCER, NULL, &kc, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        cfg_destroy(cfg);
        return EXIT_USAGE;
    }
    char ke[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, ke, sizeof(ke));
    if (!rk) {
        fprintf(stderr, "dedupd: rd_kafka_new: %s\n", ke);
        rd_kafka_conf_destroy(kc);
        cfg_destroy(cfg);
        return EXIT_RUNTIME;
    }
    if (shadow)
        shadow_rename(cfg);
    const char *names[] = {cfg->topic_jobs, cfg->topic_results,
                           cfg->topic_conflicts, cfg->topic_dlq};
    rd_kafka_NewTopic_t *nt[4];
    for (int i = 0; i < 4; i++)
        nt[i] = rd_kafka_NewTopic_new(names[i], partitions, replication, ke,
                                      sizeof(ke));
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, nt, 4, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = 0;
    if (!ev) {
        fprintf(stderr, "dedupd: topics: no answer from %s within 30 s\n",
                cfg->bootstrap_servers);
        rc = EXIT_RUNTIME;
    } else if (rd_kafka_event_error(ev)) {
        fprintf(stderr, "dedupd: topics: %s\n", rd_kafka_event_error_string(ev));
        rc = EXIT_RUNTIME;
    } else {
        const rd_kafka_CreateTopics_result_t *res =
            rd_kafka_event_CreateTopics_result(ev);
        size_t n;
        const rd_kafka_topic_result_t **tr = rd_kafka_CreateTopics_result_topics(res, &n);
        for (size_t i = 0; i < n; i++) {
            rd_kafka_resp_err_t te = rd_kafka_topic_result_error(tr[i]);
            if (te && te != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
                fprintf(stderr, "dedupd: topics: %s: %s\n",
                        rd_kafka_topic_result_name(tr[i]),
                        rd_kafka_topic_result_error_string(tr[i]));
                rc = EXIT_RUNTIME;
            } else
                printf("%s %s\n", rd_kafka_topic_result_name(tr[i]),
                       te ? "exists" : "created");
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy_array(nt, 4);
    rd_kafka_destroy(rk);
    cfg_destroy(cfg);
    return rc;
}


/* ---- inspect, forget ------------------------------------------------------ */

/* Open the store of inspect.  *rc: EXIT_NOT_FOUND when there is no
 * store at store.path (never created there: nothing to answer from), else
 * EXIT_RUNTIME; a store that `run` holds (RocksDB's LOCK) says so. */
static struct store *open_store_for_cli(const struct cfg *cfg, int *rc)
{
    char e[DD_ERRSTR_SIZE], run_id[32];
    char current[4096];
    snprintf(current, sizeof(current), "%s/CURRENT", cfg->store_path);
    if (access(current, F_OK) != 0) {
        fprintf(stderr, "dedupd: no store at %s (store.path; a relative path "
                        "is taken from the current directory)\n",
                cfg->store_path);
        *rc = EXIT_NOT_FOUND;
        return NULL;
    }
    *rc = EXIT_RUNTIME;
    snprintf(run_id, sizeof(run_id), "cli%lld", (long long)dd_now_ms());
    /* run's settings (TTLs, WAL bound, validators, bodies), with a small
     * cache and index for one command, and each write fsync'd before the
     * command answers */
    struct store_conf sc;
    consumer_store_conf(cfg, cfg->store_path, run_id, &sc);
    sc.block_cache_bytes = 8 << 20;
    sc.index_max_bytes = 0;
    sc.sync = true;
    sc.group_commit = false;
    struct store *st = NULL;
    if (store_open(&sc, &st, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        if (strstr(e, "LOCK"))
            fprintf(stderr, "dedupd: the store is in use, most likely by "
                            "`dedupd run`; while it runs, ask it: GET "
                            "/v1/ops/{op_id} on its api listener\n");
        return NULL;
    }
    return st;
}

static void time_text(int64_t ms, char *buf, size_t size)
{
    if (ms <= 0)
        snprintf(buf, size, "-");
    else
        result_time_format(ms, buf, size);
}

/* The text view of `dedupd inspect`: the op record, then one line per
 * attempt. */
static void inspect_print_text(const char *op_id, const struct store_op *op,
                               const struct store_attempt *att, size_t n_att)
{
    char t1[40], t2[40], t3[40], t4[40];
    time_text(op->created_at_ms, t1, sizeof(t1));
    time_text(op->updated_at_ms, t2, sizeof(t2));
    time_text(op->expires_at_ms, t3, sizeof(t3));
    time_text(op->lease_expires_at_ms, t4, sizeof(t4));
    printf("op_id         %s\n"
           "state         %s%s%s\n"
           "request_hash  %s\n"
           "event_key     %s\n"
           "generation    %llu\n"
           "retry epoch   %u\n"
           "lease         %s until %s\n"
           "created       %s\n"
           "updated       %s\n"
           "expires       %s\n"
           "outbox        %s\n"
           "first source  %s\n"
           "attempts      %u\n",
           op_id, store_op_state2str(op->state), op->category[0] ? " / " : "",
           op->category, op->request_hash, op->event_key,
           (unsigned long long)op->generation, (unsigned)op->retry_epoch,
           op->lease_owner, t4, t1, t2, t3,
           result_op_outbox_str(op), op->source, op->attempts);
    if (op->not_before_ms) {
        time_text(op->not_before_ms, t1, sizeof(t1));
        printf("not before    %s (next attempt)\n", t1);
    }
    for (size_t i = 0; i < n_att; i++) {
        time_text(att[i].started_at_ms, t1, sizeof(t1));
        printf("  #%u gen %llu  %s  %lld ms  status %d  %llu bytes  %s via %s%s%s%s%s\n",
               att[i].number, (unsigned long long)att[i].generation, t1,
               (long long)(att[i].ended_at_ms - att[i].started_at_ms),
               att[i].status, (unsigned long long)att[i].bytes,
               att[i].exit_addr[0] ? att[i].exit_addr : "-", att[i].session,
               att[i].category[0] ? "  " : "", att[i].category,
               att[i].error[0] ? ": " : "", att[i].error);
    }
}

/* `dedupd inspect OP_ID [--json]`: the op record and its attempts.
 * Exit 0 when found, 4 when the op is absent or expired. */
static int cmd_inspect(int argc, char **argv)
{
    static const struct option lo[] = {{"config", required_argument, 0, 'c'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *path = NULL;
    bool as_json = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'j': as_json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "dedupd: inspect: missing OP_ID\n");
        return EXIT_USAGE;
    }
    const char *op_id = argv[optind];
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    int orc = 0;
    struct store *st = open_store_for_cli(cfg, &orc);
    if (!st) {
        cfg_destroy(cfg);
        return orc;
    }
    char e[DD_ERRSTR_SIZE];
    struct store_op op;
    bool found = false;
    int rc = 0;
    struct store_attempt *att = NULL;
    size_t n_att = 0;
    char *json = NULL;
    if (store_op_get(st, op_id, dd_now_ms(), &op, &found, e, sizeof(e)) ||
        store_attempts_get(st, op_id, dd_now_ms(), &att, &n_att, e, sizeof(e))) {
        fprintf(stderr, "dedupd: inspect: %s\n", e);
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (!found) {
        fprintf(stderr, "dedupd: inspect: op %s is not in the store at %s "
                        "(never claimed here, expired, or forgotten)\n",
                op_id, cfg->store_path);
        rc = EXIT_NOT_FOUND;
        goto out;
    }
    if (!as_json)
        inspect_print_text(op_id, &op, att, n_att);
    else if (result_op_encode(op_id, &op, att, n_att, RESULT_OP_FULL, &json))
        dd_oom("inspect JSON");
    else
        printf("%s\n", json);
out:
    free(json);
    free(att);
    store_close(st);
    cfg_destroy(cfg);
    return rc;
}

/* What the delivery report of `dedupd forget` says. */
struct forget_report {
    bool done;
    dd_err_t err;
    int32_t partition;
    char errtext[256];
};

static void forget_dr(void *opaque, dd_err_t err, const char *errtext,
                      int32_t partition, int64_t offset)
{
    struct forget_report *f = opaque;
    (void)offset;
    f->done = true;
    f->err = err;
    f->partition = partition;
    if (errtext)
        snprintf(f->errtext, sizeof(f->errtext), "%s", errtext);
}

/* `dedupd forget OP_ID`: a control message to the op's partition of the
 * jobs topic (key op_id, header dedupd-control: forget; DESIGN.md section
 * 6); the partition's owner drops the op (a FORGOTTEN record, also in the
 * changelog), so its next job is fetched again.  Exit 0 once the broker
 * acknowledged the message. */
static int cmd_forget(int argc, char **argv)
{
    static const struct option lo[] = {{"config", required_argument, 0, 'c'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *path = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc || !*argv[optind] ||
        strlen(argv[optind]) > JOB_OP_ID_MAX) {
        fprintf(stderr, "dedupd: forget: missing or too long OP_ID\n");
        return EXIT_USAGE;
    }
    const char *op_id = argv[optind];
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    char e[DD_ERRSTR_SIZE];
    struct producer *p = NULL;
    struct forget_report f = {0};
    int rc = 0;
    const struct producer_header h[] = {{"dedupd-control", "forget"}};
    if (producer_new(cfg, forget_dr, &p, e, sizeof(e)) ||
        producer_send(p, cfg->topic_jobs, op_id, strlen(op_id), "", 0, h, 1,
                      &f, e, sizeof(e))) {
        fprintf(stderr, "dedupd: forget: %s\n", e);
        rc = EXIT_RUNTIME;
    } else if (producer_flush(p, 30000) || (producer_poll(p, 0), !f.done)) {
        fprintf(stderr, "dedupd: forget: no acknowledgement from %s within "
                "30 s\n", cfg->bootstrap_servers);
        rc = EXIT_RUNTIME;
    } else if (f.err) {
        fprintf(stderr, "dedupd: forget: %s\n", f.errtext);
        rc = EXIT_RUNTIME;
    } else {
        printf("forget %s sent to %s partition %d: its owner drops the op\n",
               op_id, cfg->topic_jobs, (int)f.partition);
    }
    producer_destroy(p);
    cfg_destroy(cfg);
    return rc;
}


/* ---- redrive -------------------------------------------------------------- */

/* What the delivery reports of `dedupd redrive` count (their opaque). */
struct redrive_tally {
    long acked, failed;
};

/* @locality the thread calling producer_poll()/producer_flush() (main). */
static void redrive_dr(void *opaque, dd_err_t err, const char *errtext,
                       int32_t partition, int64_t offset)
{
    struct redrive_tally *t = opaque;
    (void)partition, (void)offset;
    if (err) {
        t->failed++;
        fprintf(stderr, "dedupd: redrive: delivery failed: %s\n", errtext);
    } else
        t->acked++;
}

/* One `dedupd redrive` run: its settings, clients and counts. */
struct redrive_run {
    const struct cfg *cfg;
    struct job_conf jc;
    rd_kafka_t *rk;       /* the DLQ consumer */
    struct producer *p;   /* NULL with --dry-run */
    bool dry, all;
    struct redrive_tally tally;
    long seen, sent, kept;
};

/* Has the DLQ been read to its end?  Quiet for 2 s after an end of
 * partition, or for 30 s at all (said on stderr). */
static bool redrive_idle(const struct redrive_run *rr, long eofs,
                         int64_t last_ms)
{
    if (eofs > 0 && dd_now_ms() - last_ms >= 2000)
        return true;
    if (dd_now_ms() - last_ms >= 30000) {
        fprintf(stderr, "dedupd: redrive: nothing from %s in 30 s\n",
                rr->cfg->topic_dlq);
        return true;
    }
    return false;
}

/* One DLQ record \p m (borrowed): a valid job goes back to the jobs topic
 * re-keyed by its op_id, and its DLQ position is committed once it is
 * acknowledged; a record still invalid is kept (its position committed)
 * unless --all, which sends it back under its own key.
 * @returns 0; EXIT_RUNTIME when the run must stop (not sent or not
 *          acknowledged: the position stays uncommitted). */
static int redrive_record(struct redrive_run *rr, rd_kafka_message_t *m)
{
    const struct cfg *cfg = rr->cfg;
    struct job *job = NULL;
    char key[JOB_OP_ID_MAX + 80], e[DD_ERRSTR_SIZE];
    struct producer_header h[2];
    size_t nh = 0;
    int rc = 0;
    if (job_parse(&rr->jc, m->payload ? m->payload : "", m->len, &job, e,
                  sizeof(e)) == DD_OK) {
        snprintf(key, sizeof(key), "%s", job->op_id);
        h[0] = (struct producer_header){"dedupd-op-id", job->op_id};
        h[1] = (struct producer_header){"dedupd-request-hash", job->request_hash};
        nh = 2;
    } else if (rr->all) {
        snprintf(key, sizeof(key), "%.*s", (int)(m->key_len < 200 ? m->key_len : 200),
                 m->key ? (const char *)m->key : "redrive");
    } else {
        printf("{\"partition\":%d,\"offset\":%lld,\"kept\":true}\n",
               (int)m->partition, (long long)m->offset);
        fprintf(stderr, "dedupd: redrive: %s/%d/%lld still invalid (%s): kept\n",
                cfg->topic_dlq, (int)m->partition, (long long)m->offset, e);
        rr->kept++;
        /* A dry run only reports: it moves the group's position past nothing
         * (a later redrive, or --all, must still see every record). */
        if (!rr->dry)
            rd_kafka_commit_message(rr->rk, m, 0);
        return 0;
    }
    if (!rr->dry) {
        if (producer_send(rr->p, cfg->topic_jobs, key, strlen(key), m->payload,
                          m->len, h, nh, &rr->tally, e, sizeof(e))) {
            fprintf(stderr, "dedupd: redrive: %s\n", e);
            rc = EXIT_RUNTIME;
            goto out;
        }
        producer_poll(rr->p, 0);
        /* Commit the DLQ position only once the job is back. */
        if (producer_flush(rr->p, 30000)) {
            fprintf(stderr, "dedupd: redrive: not acknowledged in 30 s\n");
            rc = EXIT_RUNTIME;
            goto out;
        }
        rd_kafka_commit_message(rr->rk, m, 0);
    }
    printf("{\"partition\":%d,\"offset\":%lld,\"key\":\"%s\",\"redriven\":%s}\n",
           (int)m->partition, (long long)m->offset, job ? job->op_id : "",
           rr->dry ? "false" : "true");
    rr->sent++;
out:
    job_destroy(job);
    return rc;
}

/* `dedupd redrive`: send the DLQ's records back to the jobs topic, after an
 * operator fixed their cause.  Valid jobs are re-keyed by op_id (with the
 * dedupd-op-id / dedupd-request-hash headers); records that still do not parse
 * are left in the DLQ (reported, not sent) unless --all.  Reads the DLQ with
 * its own consumer group (redrive.group_id is "dedupd-redrive"), so each
 * record is redriven once; --dry-run only reports. */
static int cmd_redrive(int argc, char **argv)
{
    static const struct option lo[] = {{"config", required_argument, 0, 'c'},
                                       {"dry-run", no_argument, 0, 'n'},
                                       {"all", no_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *path = NULL;
    struct redrive_run rr = {0};
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'n': rr.dry = true; break;
        case 'a': rr.all = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    rr.cfg = cfg;
    job_conf_from(cfg, &rr.jc);
    char e[DD_ERRSTR_SIZE], group[300];
    snprintf(group, sizeof(group), "%s-redrive", cfg->group_id);
    const char *fixed[] = {"group.id", group,
                           "auto.offset.reset", "earliest",
                           "enable.partition.eof", "true",
                           "enable.auto.commit", "false", NULL};
    if (!rr.dry && producer_new(cfg, redrive_dr, &rr.p, e, sizeof(e))) {
        fprintf(stderr, "dedupd: %s\n", e);
        cfg_destroy(cfg);
        return EXIT_USAGE;
    }
    rr.rk = cli_consumer_new(cfg, fixed, cfg->topic_dlq);
    if (!rr.rk) {
        producer_destroy(rr.p);
        cfg_destroy(cfg);
        return EXIT_RUNTIME;
    }
    long eofs = 0;
    int64_t last = dd_now_ms();
    int rc = 0;
    while (run && !rc) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rr.rk, 200);
        if (!m) {
            if (redrive_idle(&rr, eofs, last))
                break;
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            eofs++;
        } else if (m->err) {
            fprintf(stderr, "dedupd: redrive: %s\n", rd_kafka_message_errstr(m));
        } else {
            last = dd_now_ms();
            rr.seen++;
            rc = redrive_record(&rr, m);
        }
        rd_kafka_message_destroy(m);
    }
    fflush(stdout);
    rd_kafka_consumer_close(rr.rk);
    rd_kafka_destroy(rr.rk);
    producer_destroy(rr.p);
    fprintf(stderr, "dedupd: redrive: %ld DLQ records, %ld %s, %ld kept (still "
                    "invalid), %ld failed\n",
            rr.seen, rr.sent, rr.dry ? "would be redriven" : "redriven", rr.kept,
            rr.tally.failed);
    cfg_destroy(cfg);
    if (!rc && rr.tally.failed)
        rc = EXIT_RUNTIME;
    return rc;
}

/* ---- config, version ------------------------------------------------------ */

static int cmd_config(int argc, char **argv)
{
    const char *path = NULL;
    bool dump = false, doc = false;
    static const struct option lo[] = {{"config", required_argument, 0, 'c'},
                                       {"dump", no_argument, 0, 'd'},
                                       {"doc", no_argument, 0, 'D'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'd': dump = true; break;
        case 'D': doc = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (doc) {
        cfg_doc_markdown(stdout);
        return 0;
    }
    if (!dump) {
        fprintf(stderr, "dedupd: config: say --dump (effective config) or --doc "
                        "(option table)\n");
        return EXIT_USAGE;
    }
    struct cfg *cfg = load_cfg(path);
    if (!cfg)
        return EXIT_USAGE;
    cfg_dump(cfg, stdout);
    cfg_destroy(cfg);
    return 0;
}

static int cmd_version(void)
{
    printf("dedupd %s (librdkafka %s, RocksDB 7.x, %s, jansson %s)\n",
           DEDUPD_VERSION, rd_kafka_version_str(), curl_version(),
           JANSSON_VERSION);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    key_global_init();
    job_global_init();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *cmd = argv[1];
    int rc;
    argv++;
    argc--;
    if (!strcmp(cmd, "run"))
        rc = cmd_run(argc, argv);
    else if (!strcmp(cmd, "submit"))
        rc = cmd_submit(argc, argv);
    else if (!strcmp(cmd, "tail"))
        rc = cmd_tail(argc, argv);
    else if (!strcmp(cmd, "key"))
        rc = cmd_key(argc, argv);
    else if (!strcmp(cmd, "inspect"))
        rc = cmd_inspect(argc, argv);
    else if (!strcmp(cmd, "forget"))
        rc = cmd_forget(argc, argv);
    else if (!strcmp(cmd, "redrive"))
        rc = cmd_redrive(argc, argv);
    else if (!strcmp(cmd, "topics"))
        rc = cmd_topics(argc, argv);
    else if (!strcmp(cmd, "config"))
        rc = cmd_config(argc, argv);
    else if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        rc = cmd_version();
    else if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        rc = 0;
    } else {
        fprintf(stderr, "dedupd: unknown command '%s'\n", cmd);
        usage(stderr);
        rc = EXIT_USAGE;
    }
    curl_global_cleanup();
    return rc;
}
