/* The changelog topic: start-up checks, the identity record, and the restore
 * of partitions' copies.  See changelog.h. */
#include "changelog.h"

#include <ctype.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "dd.h"
#include "kconf.h"
#include "key.h"
#include "log.h"
#include "metrics.h"
#include "prefetch_kick.h"
#include "store.h"

#define ADMIN_TIMEOUT_MS 30000
#define DESCRIBE_TIMEOUT_MS 2000
#define DELETE_RETENTION_MS 86400000LL /* 1 d: the changelog's tombstones */
#define JOB_DEADLINE_MAX_MS 86400000LL /* job.c: deadline_s <= 86400 */
#define RESTORE_BATCH 512
#define RESTORE_STALL_MS 60000
#define PROGRESS_MS 2000
#define RESTORE_FETCH_WAIT_MS "10"

void changelog_topic_of(const struct cfg *cfg, char *out, size_t size)
{
    snprintf(out, size, "%s-changelog", cfg->group_id);
}

int64_t changelog_retention_ms(const struct cfg *cfg)
{
    return store_record_life_ms(cfg->store_ops_ttl_ms,
                                cfg->store_failed_ttl_ms) +
           JOB_DEADLINE_MAX_MS + 3600000LL;
}

/* ---- start-up checks ------------------------------------------------------ */

/* Partitions of \p topic (0: it does not exist). */
static dd_err_t topic_partitions(rd_kafka_t *rk, const char *topic,
                                 int32_t *n, char *errstr, size_t errstr_size)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e =
        rd_kafka_metadata(rk, 0, rkt, &md, ADMIN_TIMEOUT_MS);
    rd_kafka_topic_destroy(rkt);
    if (e) {
        snprintf(errstr, errstr_size, "metadata of topic %s: %s", topic,
                 rd_kafka_err2str(e));
        return e == RD_KAFKA_RESP_ERR__TIMED_OUT ? DD_ERR_TIMEOUT : DD_ERR_IO;
    }
    *n = 0;
    if (md->topic_cnt == 1 && !md->topics[0].err)
        *n = md->topics[0].partition_cnt;
    else if (md->topic_cnt == 1 &&
             md->topics[0].err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
        snprintf(errstr, errstr_size, "metadata of topic %s: %s", topic,
                 rd_kafka_err2str(md->topics[0].err));
        rd_kafka_metadata_destroy(md);
        return DD_ERR_IO;
    }
    rd_kafka_metadata_destroy(md);
    return DD_OK;
}

/* Wait for one admin result on \p q. */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q, const char *what,
                                    dd_err_t *err, char *errstr,
                                    size_t errstr_size)
{
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, ADMIN_TIMEOUT_MS);
    *err = DD_OK;
    if (!ev) {
        snprintf(errstr, errstr_size, "%s: no answer from the brokers", what);
        *err = DD_ERR_TIMEOUT;
    } else if (rd_kafka_event_error(ev)) {
        snprintf(errstr, errstr_size, "%s: %s", what,
                 rd_kafka_event_error_string(ev));
        *err = DD_ERR_IO;
        rd_kafka_event_destroy(ev);
        ev = NULL;
    }
    return ev;
}

static dd_err_t changelog_create(rd_kafka_t *rk, const struct cfg *cfg,
                                 const char *topic, int32_t partitions,
                                 char *errstr, size_t errstr_size)
{
    char ke[512], v[32];
    rd_kafka_NewTopic_t *nt =
        rd_kafka_NewTopic_new(topic, partitions, -1, ke, sizeof(ke));
    if (!nt) {
        snprintf(errstr, errstr_size, "changelog %s: %s", topic, ke);
        return DD_ERR_INVAL;
    }
    rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact,delete");
    snprintf(v, sizeof(v), "%lld", (long long)changelog_retention_ms(cfg));
    rd_kafka_NewTopic_set_config(nt, "retention.ms", v);
    snprintf(v, sizeof(v), "%lld", CHANGELOG_SEGMENT_MS_MAX);
    rd_kafka_NewTopic_set_config(nt, "segment.ms", v);
    snprintf(v, sizeof(v), "%lld", DELETE_RETENTION_MS);
    rd_kafka_NewTopic_set_config(nt, "delete.retention.ms", v);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    dd_err_t err;
    rd_kafka_event_t *ev =
        admin_wait(q, "creating the changelog", &err, errstr, errstr_size);
    if (ev) {
        size_t n = 0;
        const rd_kafka_topic_result_t **tr =
            rd_kafka_CreateTopics_result_topics(
                rd_kafka_event_CreateTopics_result(ev), &n);
        rd_kafka_resp_err_t te = n ? rd_kafka_topic_result_error(tr[0]) : 0;
        if (te && te != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            snprintf(errstr, errstr_size, "creating the changelog %s: %s",
                     topic, rd_kafka_topic_result_error_string(tr[0]));
            err = DD_ERR_IO;
        }
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return err;
}

/* Check one described setting of an existing changelog. */
static dd_err_t check_entry(const struct cfg *cfg, const char *topic,
                            const char *name, const char *value,
                            struct changelog_info *info, char *errstr,
                            size_t errstr_size)
{
    if (!value)
        return DD_OK;
    long long n = atoll(value);
    if (!strcmp(name, "cleanup.policy") && !strstr(value, "compact")) {
        snprintf(errstr, errstr_size,
                 "changelog %s: cleanup.policy is '%s', must include compact "
                 "(compact,delete)", topic, value);
        return DD_ERR_INVAL;
    }
    if (!strcmp(name, "retention.ms") && n != -1 &&
        n < changelog_retention_ms(cfg)) {
        snprintf(errstr, errstr_size,
                 "changelog %s: retention.ms is %lld, must be at least %lld "
                 "(the longest op record life, from store.ops_ttl_ms and "
                 "store.failed_ttl_ms, + the longest deadline + 1 h): raise "
                 "the topic's retention.ms", topic, n,
                 (long long)changelog_retention_ms(cfg));
        return DD_ERR_INVAL;
    }
    if (!strcmp(name, "segment.ms") && n > CHANGELOG_SEGMENT_MS_MAX) {
        snprintf(errstr, errstr_size,
                 "changelog %s: segment.ms is %lld, must be at most %lld "
                 "(compaction never touches the active segment)", topic, n,
                 CHANGELOG_SEGMENT_MS_MAX);
        return DD_ERR_INVAL;
    }
    if (!strcmp(name, "delete.retention.ms") && n > 0)
        info->delete_retention_ms = n;
    return DD_OK;
}

static dd_err_t changelog_check(rd_kafka_t *rk, const struct cfg *cfg,
                                const char *topic, struct changelog_info *info,
                                char *errstr, size_t errstr_size)
{
    rd_kafka_ConfigResource_t *res =
        rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *ao =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    char ke[256];
    rd_kafka_AdminOptions_set_request_timeout(ao, DESCRIBE_TIMEOUT_MS, ke,
                                              sizeof(ke));
    rd_kafka_DescribeConfigs(rk, &res, 1, ao, q);
    dd_err_t err;
    rd_kafka_event_t *ev = admin_wait(q, "describing the changelog", &err,
                                      errstr, errstr_size);
    if (err) {
        /* a broker that cannot describe configs (ACLs, a test double):
         * the settings go unchecked, which is not a reason not to run */
        log_msg(LOG_WARNING, "changelog", "%s: its settings are not checked",
                errstr);
        err = DD_OK;
    }
    if (ev) {
        size_t nr = 0, ne = 0;
        const rd_kafka_ConfigResource_t **rr =
            rd_kafka_DescribeConfigs_result_resources(
                rd_kafka_event_DescribeConfigs_result(ev), &nr);
        const rd_kafka_ConfigEntry_t **ents =
            nr ? rd_kafka_ConfigResource_configs(rr[0], &ne) : NULL;
        for (size_t i = 0; i < ne && !err; i++)
            err = check_entry(cfg, topic, rd_kafka_ConfigEntry_name(ents[i]),
                              rd_kafka_ConfigEntry_value(ents[i]), info,
                              errstr, errstr_size);
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_AdminOptions_destroy(ao);
    rd_kafka_ConfigResource_destroy(res);
    return err;
}

/* The output topics exist (a missing one is a configuration error, not a
 * reason to retry every result for ever). */
static dd_err_t outputs_exist(rd_kafka_t *rk, const struct cfg *cfg,
                              char *errstr, size_t errstr_size)
{
    const char *const outs[][2] = {{"topics.results", cfg->topic_results},
                                   {"topics.conflicts", cfg->topic_conflicts},
                                   {"topics.dlq", cfg->topic_dlq}};
    for (size_t i = 0; i < sizeof(outs) / sizeof(*outs); i++) {
        int32_t n = 0;
        dd_err_t err = topic_partitions(rk, outs[i][1], &n, errstr,
                                        errstr_size);
        if (err)
            return err;
        if (!n) {
            snprintf(errstr, errstr_size,
                     "%s: topic %s does not exist (create it: dedupd topics "
                     "-c FILE%s)", outs[i][0], outs[i][1],
                     !strncmp(outs[i][1], "shadow.", 7) ? " --shadow" : "");
            return DD_ERR_INVAL;
        }
    }
    return DD_OK;
}

dd_err_t changelog_ensure(const struct cfg *cfg, struct changelog_info *info,
                          char *errstr, size_t errstr_size)
{
    memset(info, 0, sizeof(*info));
    info->delete_retention_ms = DELETE_RETENTION_MS;
    rd_kafka_conf_t *kc = NULL;
    dd_err_t err = kconf_new(cfg, KCONF_PRODUCER, NULL, &kc, errstr, errstr_size);
    if (err)
        return err;
    char ke[512], topic[CHANGELOG_TOPIC_MAX];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, ke, sizeof(ke));
    if (!rk) {
        rd_kafka_conf_destroy(kc);
        snprintf(errstr, errstr_size, "rd_kafka_new: %s", ke);
        return DD_ERR_FATAL;
    }
    changelog_topic_of(cfg, topic, sizeof(topic));
    int32_t nj = 0, nc = 0;
    err = topic_partitions(rk, cfg->topic_jobs, &nj, errstr, errstr_size);
    if (!err && !nj) {
        snprintf(errstr, errstr_size,
                 "topics.jobs: topic %s does not exist (create it: dedupd "
                 "topics -c FILE --partitions N)", cfg->topic_jobs);
        err = DD_ERR_INVAL;
    }
    err = err ? err : outputs_exist(rk, cfg, errstr, errstr_size);
    if (!err)
        err = topic_partitions(rk, topic, &nc, errstr, errstr_size);
    if (!err && !nc) {
        err = changelog_create(rk, cfg, topic, nj, errstr, errstr_size);
        if (!err) {
            info->created = true;
            log_msg(LOG_NOTICE, "changelog",
                    "created the changelog %s: %d partitions, "
                    "cleanup.policy=compact,delete, retention.ms=%lld",
                    topic, (int)nj, (long long)changelog_retention_ms(cfg));
        }
    } else if (!err && nc != nj) {
        snprintf(errstr, errstr_size,
                 "changelog %s has %d partitions, the jobs topic %s has %d: "
                 "they must be co-partitioned (same count)", topic, (int)nc,
                 cfg->topic_jobs, (int)nj);
        err = DD_ERR_INVAL;
    } else if (!err) {
        err = changelog_check(rk, cfg, topic, info, errstr, errstr_size);
    }
    info->partitions = nj;
    rd_kafka_destroy(rk);
    return err;
}

/* ---- identity ------------------------------------------------------------- */

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The list as the canonical request uses it: lower-case, sorted. */
static json_t *header_list(const struct cfg_strlist *l)
{
    char **v = dd_xcalloc(l->n + 1, sizeof(*v), "identity");
    for (size_t i = 0; i < l->n; i++) {
        v[i] = dd_xstrdup(l->v[i], "identity");
        for (char *p = v[i]; *p; p++)
            *p = (char)tolower((unsigned char)*p);
    }
    qsort(v, l->n, sizeof(*v), str_cmp);
    json_t *a = json_array();
    for (size_t i = 0; i < l->n; i++) {
        json_array_append_new(a, json_string(v[i]));
        free(v[i]);
    }
    free(v);
    return a;
}

static json_t *identity_json(const struct cfg *cfg)
{
    json_t *o = json_object();
    json_object_set_new(o, "v", json_integer(1));
    json_object_set_new(o, "variance_headers",
                        header_list(&cfg->identity_variance_headers));
    json_object_set_new(o, "credential_headers",
                        header_list(&cfg->identity_credential_headers));
    char *canon = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    if (!canon)
        dd_oom("identity record");
    char digest[KEY_HEX_LEN + 1];
    key_sha256_hex(canon, strlen(canon), digest);
    free(canon);
    json_object_set_new(o, "digest", json_string(digest));
    return o;
}

char *changelog_identity_value(const struct cfg *cfg)
{
    json_t *o = identity_json(cfg);
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (!s)
        dd_oom("identity record");
    return s;
}

dd_err_t changelog_identity_check(const struct cfg *cfg, const void *value,
                                  size_t len, char *errstr,
                                  size_t errstr_size)
{
    static const char *const names[][2] = {
        {"v", "the key version"},
        {"variance_headers", "identity.variance_headers"},
        {"credential_headers", "identity.credential_headers"},
    };
    json_t *theirs = json_loadb(value, len, 0, NULL);
    json_t *ours = identity_json(cfg);
    dd_err_t err = DD_OK;
    if (!json_is_object(theirs)) {
        snprintf(errstr, errstr_size,
                 "the changelog's identity record (%s) is not readable JSON",
                 CHANGELOG_IDENTITY_KEY);
        err = DD_ERR_INVAL;
    } else if (!json_equal(json_object_get(theirs, "digest"),
                           json_object_get(ours, "digest"))) {
        const char *which = "the identity digest";
        json_t *a = NULL, *b = NULL;
        for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
            a = json_object_get(theirs, names[i][0]);
            b = json_object_get(ours, names[i][0]);
            if (!json_equal(a, b)) {
                which = names[i][1];
                break;
            }
        }
        char *sa = a ? json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        char *sb = b ? json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        snprintf(errstr, errstr_size,
                 "%s differs from the consumer group's: the group uses %.200s, "
                 "this instance %.200s; identity settings are fixed per "
                 "consumer group (a change needs a new consumer.group_id)",
                 which, sa ? sa : "?", sb ? sb : "?");
        free(sa);
        free(sb);
        err = DD_ERR_INVAL;
    }
    json_decref(theirs);
    json_decref(ours);
    return err;
}

/* ---- restore --------------------------------------------------------------- */

struct changelog_restorer {
    rd_kafka_t *rk;
};

dd_err_t changelog_restorer_new(const struct cfg *cfg,
                                struct changelog_restorer **out, char *errstr,
                                size_t errstr_size)
{
    char gid[CHANGELOG_TOPIC_MAX];
    snprintf(gid, sizeof(gid), "%s-restore", cfg->group_id);
    const char *fixed[] = {
        "group.id", gid,
        "enable.auto.commit", "false",
        "enable.auto.offset.store", "false",
        "isolation.level", "read_committed",
        "auto.offset.reset", "error",
        "enable.partition.eof", "true",
        /* the end is only signalled by an empty fetch at it: the default
         * long poll (500 ms) would add half a second to every restore,
         * and a fetch still waiting after the restore holds up the next
         * restore's watermark query on the same connection */
        "fetch.wait.max.ms", RESTORE_FETCH_WAIT_MS,
        NULL};
    rd_kafka_conf_t *kc = NULL;
    dd_err_t err = kconf_new(cfg, KCONF_ASSIGN_CONSUMER, fixed, &kc, errstr,
                            errstr_size);
    if (err)
        return err;
    char ke[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, ke, sizeof(ke));
    if (!rk) {
        rd_kafka_conf_destroy(kc);
        snprintf(errstr, errstr_size, "restore consumer: %s", ke);
        return DD_ERR_FATAL;
    }
    *out = dd_xcalloc(1, sizeof(**out), "restore consumer");
    (*out)->rk = rk;
    return DD_OK;
}

void changelog_restorer_destroy(struct changelog_restorer *r)
{
    if (!r)
        return;
    /* it never joined its group nor committed: nothing to leave (a plain
     * rd_kafka_destroy would close it as a group member and can wait
     * forever for an unassign of messages nobody polls) */
    rd_kafka_destroy_flags(r->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    free(r);
}

/* One partition being restored. */
struct rpart {
    int32_t partition;
    int64_t from;     /* first offset read (RD_KAFKA_OFFSET_BEGINNING) */
    int64_t end;      /* high watermark at the start (for the ETA) */
    int64_t eof;      /* its end, by position; -1 until reached */
    bool done;
};

/* One restore: its partitions, the batch being applied, its counters. */
struct restore {
    struct changelog_restorer *r;
    struct store *store;
    const struct cfg *cfg;
    const char *topic;
    struct rpart *p;
    size_t n, left;
    struct store_restore_rec recs[RESTORE_BATCH];
    rd_kafka_message_t *msgs[RESTORE_BATCH];
    size_t nb;
    uint64_t expected;   /* records to read, by watermarks (ETA) */
    struct changelog_restore_stats *st;
    struct prefetch_kick *kick; /* prefetch_kick.h, NULL when off */
};

static dd_err_t restore_flush(struct restore *rs, char *errstr,
                              size_t errstr_size)
{
    dd_err_t err = DD_OK;
    prefetch_kick_polled(rs->kick, rs->msgs, rs->nb); /* one per batch */
    if (rs->nb)
        err = store_restore_apply(rs->store, rs->recs, rs->nb, dd_now_ms(),
                                  &rs->st->counts, errstr, errstr_size);
    for (size_t i = 0; i < rs->nb; i++)
        rd_kafka_message_destroy(rs->msgs[i]);
    rs->nb = 0;
    return err;
}

/* Where partition \p p starts: its checkpoint unless absent, older than
 * the tombstone retention, or outside the log. */
static dd_err_t restore_plan(struct restore *rs, struct rpart *p,
                             int64_t delete_retention_ms, char *errstr,
                             size_t errstr_size)
{
    int64_t cp = -1, taken = 0, lo = 0, hi = 0;
    bool found = false;
    dd_err_t err = store_checkpoint_get(rs->store, p->partition, &cp, &taken,
                                        &found, errstr, errstr_size);
    if (err)
        return err;
    /* a changelog created a moment ago may have no leader yet */
    rd_kafka_resp_err_t e;
    int64_t give_up = dd_now_ms() + ADMIN_TIMEOUT_MS;
    while ((e = rd_kafka_query_watermark_offsets(rs->r->rk, rs->topic,
                                                 p->partition, &lo, &hi,
                                                 ADMIN_TIMEOUT_MS)) &&
           (e == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
            e == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
            e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
            e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) &&
           dd_now_ms() < give_up)
        usleep(200 * 1000);
    if (e) {
        snprintf(errstr, errstr_size,
                 "restore: watermarks of %s [%d]: %s", rs->topic,
                 (int)p->partition, rd_kafka_err2str(e));
        return DD_ERR_TIMEOUT;
    }
    const char *why = NULL;
    if (!found)
        why = "no checkpoint";
    else if (dd_now_ms() - taken > delete_retention_ms)
        why = "checkpoint older than the changelog's delete.retention.ms";
    else if (cp > hi)
        why = "checkpoint beyond the log's end (topic recreated?)";
    else if (cp < lo)
        why = "checkpoint before the log's start";
    p->end = hi;
    p->eof = -1;
    if (why) {
        p->from = RD_KAFKA_OFFSET_BEGINNING;
        rs->st->from_start++;
        rs->expected += (uint64_t)(hi - lo);
        if (found)
            log_msg(LOG_NOTICE, "restore",
                    "partition %d: %s: restoring from the log start",
                    (int)p->partition, why);
    } else {
        p->from = cp;
        rs->expected += (uint64_t)(hi - cp);
    }
    if (hi == lo || (!why && cp == hi)) { /* nothing to read */
        p->done = true;
        p->eof = hi;
        rs->left--;
    }
    return DD_OK;
}

static struct rpart *rpart_of(struct restore *rs, int32_t partition)
{
    for (size_t i = 0; i < rs->n; i++)
        if (rs->p[i].partition == partition)
            return &rs->p[i];
    return NULL;
}

/* Assign the partitions still to read, each at its start. */
static void restore_assign(struct restore *rs)
{
    rd_kafka_topic_partition_list_t *l =
        rd_kafka_topic_partition_list_new((int)rs->n);
    for (size_t i = 0; i < rs->n; i++)
        if (!rs->p[i].done)
            rd_kafka_topic_partition_list_add(l, rs->topic,
                                              rs->p[i].partition)
                ->offset = rs->p[i].from;
    rd_kafka_assign(rs->r->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
}

/* One consumed message or event.  @returns DD_ERR_INVAL on an identity
 * mismatch; the store's errors. */
static dd_err_t restore_msg(struct restore *rs, rd_kafka_message_t *m,
                            char *errstr, size_t errstr_size)
{
    struct rpart *p = rpart_of(rs, m->partition);
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (p && !p->done) {
            p->done = true;
            p->eof = m->offset;
            rs->left--;
        }
    } else if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
               m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
        if (p && !p->done && p->from != RD_KAFKA_OFFSET_BEGINNING) {
            log_msg(LOG_NOTICE, "restore",
                    "partition %d: offset %lld out of range: restoring from "
                    "the log start", (int)p->partition, (long long)p->from);
            p->from = RD_KAFKA_OFFSET_BEGINNING;
            rs->st->from_start++;
            restore_assign(rs);
        }
    } else if (m->err) {
        log_msg(LOG_WARNING, "restore", "%s", rd_kafka_message_errstr(m));
    } else if (p && !p->done) {
        rs->st->records++;
        rs->st->bytes += m->key_len + m->len;
        if (m->key_len == sizeof(CHANGELOG_IDENTITY_KEY) - 1 &&
            !memcmp(m->key, CHANGELOG_IDENTITY_KEY, m->key_len)) {
            dd_err_t err = changelog_identity_check(rs->cfg, m->payload,
                                                    m->len, errstr,
                                                    errstr_size);
            if (err) {
                rd_kafka_message_destroy(m);
                return err;
            }
        }
        rs->recs[rs->nb] = (struct store_restore_rec){
            m->key, m->key_len, m->payload, m->len};
        rs->msgs[rs->nb++] = m;
        return rs->nb == RESTORE_BATCH ? restore_flush(rs, errstr, errstr_size)
                                       : DD_OK;
    }
    rd_kafka_message_destroy(m);
    return DD_OK;
}

static void restore_progress(struct restore *rs, int64_t t0)
{
    int64_t el = dd_now_ms() - t0;
    double rate = el > 0 ? (double)rs->st->records * 1000.0 / (double)el : 0;
    uint64_t rest = rs->expected > rs->st->records
                        ? rs->expected - rs->st->records : 0;
    log_msg(LOG_INFO, "restore",
            "restoring %zu of %zu partitions: %llu of about %llu records, "
            "%.0f records/s, ETA %.1f s", rs->left, rs->n,
            (unsigned long long)rs->st->records,
            (unsigned long long)rs->expected, rate,
            rate > 0 ? (double)rest / rate : 0.0);
}

static dd_err_t restore_consume(struct restore *rs, char *errstr,
                                size_t errstr_size)
{
    int64_t t0 = dd_now_ms(), next_log = t0 + PROGRESS_MS;
    int64_t last_progress = t0;
    dd_err_t err = DD_OK;
    while (rs->left && !err) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rs->r->rk, 100);
        int64_t now = dd_now_ms();
        if (m) {
            last_progress = now;
            err = restore_msg(rs, m, errstr, errstr_size);
        } else if (rs->nb) {
            err = restore_flush(rs, errstr, errstr_size);
        }
        if (now >= next_log) {
            restore_progress(rs, t0);
            next_log = now + PROGRESS_MS;
        }
        if (!err && now - last_progress > RESTORE_STALL_MS) {
            snprintf(errstr, errstr_size,
                     "restore of %s: no progress for %d s with %zu "
                     "partitions unfinished", rs->topic,
                     RESTORE_STALL_MS / 1000, rs->left);
            err = DD_ERR_TIMEOUT;
        }
    }
    if (!err)
        err = restore_flush(rs, errstr, errstr_size);
    else
        (void)restore_flush(rs, errstr, 0);
    return err;
}

dd_err_t changelog_restore(struct changelog_restorer *r, struct store *store,
                           const struct cfg *cfg,
                           const struct changelog_info *info,
                           const int32_t *parts, size_t n,
                           struct changelog_restore_stats *st, char *errstr,
                           size_t errstr_size)
{
    memset(st, 0, sizeof(*st));
    if (!n)
        return DD_OK;
    char topic[CHANGELOG_TOPIC_MAX];
    changelog_topic_of(cfg, topic, sizeof(topic));
    int64_t t0 = dd_now_ms();
    struct restore *rs = dd_xcalloc(1, sizeof(*rs), "restore");
    *rs = (struct restore){.r = r, .store = store, .cfg = cfg, .topic = topic,
                           .n = n, .left = n, .st = st};
    rs->p = dd_xcalloc(n, sizeof(*rs->p), "restore");
    dd_err_t err = DD_OK;
    for (size_t i = 0; i < n && !err; i++) {
        rs->p[i].partition = parts[i];
        err = restore_plan(rs, &rs->p[i], info->delete_retention_ms, errstr,
                           errstr_size);
    }
    metrics_gauge_set(METRICS_PARTITIONS_RESTORING, (int64_t)rs->left);
    if (!err && rs->left) {
        if (cfg->prefetch_kick_ms > 0)
            rs->kick = prefetch_kick_start(r->rk, (int)cfg->prefetch_kick_ms);
        restore_assign(rs);
        err = restore_consume(rs, errstr, errstr_size);
        st->prefetch_kicks = prefetch_kick_stop(rs->kick);
        rs->kick = NULL;
        rd_kafka_assign(r->rk, NULL);
    }
    int64_t now = dd_now_ms();
    for (size_t i = 0; i < n && !err; i++)
        err = store_checkpoint_put(store, rs->p[i].partition, rs->p[i].eof,
                                   now, errstr, errstr_size);
    metrics_gauge_set(METRICS_PARTITIONS_RESTORING, 0);
    st->ms = dd_now_ms() - t0;
    metrics_add(METRICS_CHANGELOG_RESTORED, st->records);
    if (!err)
        log_msg(LOG_INFO, "restore",
                "restored %zu partitions of %s: %llu records (%llu applied, "
                "%llu kept, %llu expired, %llu conflict marks) in %lld ms "
                "(%.0f records/s); %zu from the log start", n, topic,
                (unsigned long long)st->records,
                (unsigned long long)st->counts.applied,
                (unsigned long long)st->counts.kept,
                (unsigned long long)st->counts.expired,
                (unsigned long long)st->counts.conflicts, (long long)st->ms,
                st->ms > 0 ? (double)st->records * 1000.0 / (double)st->ms
                           : 0.0,
                st->from_start);
    free(rs->p);
    free(rs);
    return err;
}
