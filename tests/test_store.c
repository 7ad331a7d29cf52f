/*
 * Unit tests of the store (store.h): claims, fencing, leases, outbox, TTL and
 * its compaction filter, seen keys, conflicts, layout versioning.
 *
 * Cases from /work/shared/cases/cases.json covered here (store part only):
 *   C-24  complete ops are DUPLICATE for another instance, same event_key, no
 *         conflict, nothing left to publish; the changelog restore, fetch counts
 *         and offset commits belong to the pipeline.
 *   C-28  expiry boundary (expired only when expires_at < now), same answers
 *         after a manual compaction.
 *   C-29  NEW, CONFLICT (record untouched, reported once), DUPLICATE, NEW after
 *         expiry; URL normalisation (J3) is the key module's and the conflict
 *         event on scrape.conflicts is the pipeline's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <stdarg.h>
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "dd.h"
#include "jstr.h"
#include "key.h"
#include "store.h"
#include "store_codec.h"

#define T0 1000000LL              /* 1000 s, in ms */
#define OPS_TTL (3600LL * 1000)   /* C-28: ttl_s 3600 */
#define FAILED_TTL (600LL * 1000)
#define LEASE (60LL * 1000)
#define VAL_TTL (7200LL * 1000)
#define MAX_BODY (64 * 1024)

/* 64 hex chars each */
#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define EK1 "e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1"
#define EK2 "e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2e2"

static char g_dir[64];
static struct store *g_st;
static char g_err[256];

/* ---------------------------------------------------------------------- */
/* fixture                                                                 */

/* The fixture's store settings, as \p instance's run \p run_id. */
static struct store_conf fixture_conf(const char *instance,
                                      const char *run_id)
{
    return (struct store_conf){
        .path = g_dir,
        .instance = instance,
        .run_id = run_id,
        .ops_ttl_ms = OPS_TTL,
        .failed_ttl_ms = FAILED_TTL,
        .lease_ms = LEASE,
        .block_cache_bytes = 8 << 20,
        .sync = false,
        .validators_ttl_ms = VAL_TTL,
        .max_body_bytes = MAX_BODY,
    };
}

static dd_err_t open_as(const char *instance, const char *run_id)
{
    struct store_conf conf = fixture_conf(instance, run_id);
    g_err[0] = '\0';
    return store_open(&conf, &g_st, g_err, sizeof(g_err));
}

static void reopen_as(const char *instance, const char *run_id)
{
    store_close(g_st);
    g_st = NULL;
    dd_err_t err = open_as(instance, run_id);
    ck_assert_msg(err == DD_OK, "store_open: %s", g_err);
}

static void setup(void)
{
    snprintf(g_dir, sizeof(g_dir), "/tmp/dedupd-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    dd_err_t err = open_as("a", "r1");
    ck_assert_msg(err == DD_OK, "store_open: %s", g_err);
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void teardown(void)
{
    store_close(g_st);
    g_st = NULL;
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */

static enum store_claim_result claim(const char *op_id, const char *hash,
                                     int64_t now, struct store_op *op)
{
    enum store_claim_result r = 0;
    dd_err_t err = store_claim(g_st, op_id, hash, EK1, "scrape.jobs/0/40", now,
                               &r, op, g_err, sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_claim(%s): %s", op_id, g_err);
    return r;
}

static bool get(const char *op_id, int64_t now, struct store_op *op)
{
    bool found = true;
    dd_err_t err = store_op_get(g_st, op_id, now, op, &found, g_err,
                                sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_op_get(%s): %s", op_id, g_err);
    return found;
}

static bool get_in(struct store *st, const char *op_id, int64_t now,
                   struct store_op *op)
{
    bool found = true;
    dd_err_t err = store_op_get(st, op_id, now, op, &found, g_err,
                                sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_op_get(%s): %s", op_id, g_err);
    return found;
}

static uint64_t complete(const char *op_id, uint64_t gen, const char *value,
                         int64_t now)
{
    uint64_t seq = 0;
    dd_err_t err = store_complete(g_st, op_id, gen, STORE_OP_COMPLETE, NULL, 1,
                                  value, strlen(value), now, &seq, g_err,
                                  sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_complete(%s): %s", op_id, g_err);
    return seq;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Raw RocksDB access (store closed), mirroring store.c's CF list. */
static const char *const raw_cf_names[] = {
    "default", "ops", "outbox", "conflicts", "seen", "meta", "attempts",
    "receipts", "validators", "bodies"};
#define RAW_CF_N 10
#define RAW_CF_N_BEFORE_VALIDATORS 8 /* the stores of dedupd before them */
#define RAW_OPS 1
#define RAW_META 5
#define RAW_VALIDATORS 8
#define RAW_BODIES 9

struct raw {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_column_family_handle_t *cf[RAW_CF_N];
};

static void raw_open(struct raw *r)
{
    char *err = NULL;
    const rocksdb_options_t *copts[RAW_CF_N];
    store_close(g_st);
    g_st = NULL;
    r->opts = rocksdb_options_create();
    for (int i = 0; i < RAW_CF_N; i++)
        copts[i] = r->opts;
    r->db = rocksdb_open_column_families(r->opts, g_dir, RAW_CF_N,
                                         raw_cf_names, copts, r->cf, &err);
    ck_assert_msg(err == NULL, "raw open: %s", err ? err : "");
}

static void raw_put(struct raw *r, int cf, const char *k, const void *v,
                    size_t vlen)
{
    char *err = NULL;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put_cf(r->db, wo, r->cf[cf], k, strlen(k), v, vlen, &err);
    rocksdb_writeoptions_destroy(wo);
    ck_assert_msg(err == NULL, "raw put: %s", err ? err : "");
}

static bool raw_exists(struct raw *r, int cf, const char *k)
{
    char *err = NULL;
    size_t vlen = 0;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    char *v = rocksdb_get_cf(r->db, ro, r->cf[cf], k, strlen(k), &vlen, &err);
    rocksdb_readoptions_destroy(ro);
    ck_assert_msg(err == NULL, "raw get: %s", err ? err : "");
    bool found = v != NULL;
    rocksdb_free(v);
    return found;
}

static void raw_close(struct raw *r)
{
    for (int i = 0; i < RAW_CF_N; i++)
        rocksdb_column_family_handle_destroy(r->cf[i]);
    rocksdb_close(r->db);
    rocksdb_options_destroy(r->opts);
}

/* ---------------------------------------------------------------------- */
/* claim                                                                   */

START_TEST(test_store_claim_new_then_duplicate)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_NONE);
    ck_assert_uint_eq(op.generation, 1);
    ck_assert_str_eq(op.lease_owner, "a#r1");
    ck_assert_str_eq(store_owner(g_st), "a#r1");
    ck_assert_int_eq(op.lease_expires_at_ms, T0 + LEASE);
    ck_assert_int_eq(op.created_at_ms, T0);
    ck_assert_int_eq(op.updated_at_ms, T0);
    ck_assert_int_eq(op.expires_at_ms, T0 + OPS_TTL);
    ck_assert_uint_eq(op.attempts, 0);
    ck_assert_str_eq(op.request_hash, H1);
    ck_assert_str_eq(op.event_key, EK1);
    ck_assert_str_eq(op.source, "scrape.jobs/0/40");
    ck_assert_str_eq(op.category, "");

    struct store_op dup;
    ck_assert_int_eq(claim("op-1", H1, T0 + 5, &dup), STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(dup.state, STORE_OP_RUNNING);
    ck_assert_uint_eq(dup.generation, 1);
    /* a duplicate changes nothing, not even expires_at */
    ck_assert_int_eq(dup.updated_at_ms, T0);
    ck_assert_int_eq(dup.expires_at_ms, T0 + OPS_TTL);

    struct store_op got;
    ck_assert(get("op-1", T0 + 5, &got));
    ck_assert_int_eq(memcmp(&got, &op, sizeof(op)), 0);
}
END_TEST

START_TEST(test_store_claim_conflict_on_different_hash)
{
    struct store_op op, c, got;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-1", H2, T0 + 10, &c), STORE_CLAIM_CONFLICT);
    ck_assert_str_eq(c.request_hash, H1);
    ck_assert(get("op-1", T0 + 10, &got));
    ck_assert_int_eq(memcmp(&got, &op, sizeof(op)), 0);
}
END_TEST

START_TEST(test_store_claim_rejects_bad_op_id)
{
    enum store_claim_result r;
    struct store_op op;
    char big[STORE_KEY_MAX + 2];
    memset(big, 'k', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(store_claim(g_st, "", H1, EK1, "s", T0, &r, &op, g_err,
                                 sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_claim: op_id of 0 bytes (must be 1..512)");
    ck_assert_int_eq(store_claim(g_st, big, H1, EK1, "s", T0, &r, &op, g_err,
                                 sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_claim: op_id of 513 bytes (must be 1..512)");
    big[STORE_KEY_MAX] = '\0'; /* 512 bytes is fine */
    ck_assert_int_eq(claim(big, H1, T0, &op), STORE_CLAIM_NEW);
}
END_TEST

/* C-29: J1 NEW; J2 CONFLICT (J1 untouched, reported once); J3 DUPLICATE;
 * J4 NEW after J1's record expired. */
START_TEST(test_store_c29_conflict_duplicate_and_new_after_expiry)
{
    const char *id = "order-1001";
    struct store_op j1, j2, j3, j4, got;
    bool first = false;
    uint64_t seq;

    ck_assert_int_eq(claim(id, H1, T0, &j1), STORE_CLAIM_NEW);
    seq = complete(id, j1.generation, "result-of-J1", T0 + 100);
    ck_assert_uint_ge(seq, 1);
    ck_assert(get(id, T0 + 100, &j1));

    ck_assert_int_eq(claim(id, H2, T0 + 200, &j2), STORE_CLAIM_CONFLICT);
    ck_assert_str_eq(j2.request_hash, H1);
    ck_assert(get(id, T0 + 200, &got));
    ck_assert_int_eq(memcmp(&got, &j1, sizeof(j1)), 0);
    ck_assert_int_eq(store_conflict_mark(g_st, id, H2, T0 + 200, &first,
                                         g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(first);
    ck_assert_int_eq(store_conflict_mark(g_st, id, H2, T0 + 250, &first,
                                         g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!first);

    /* J3: same request_hash as J1 once normalised */
    ck_assert_int_eq(claim(id, H1, T0 + 300, &j3), STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(j3.state, STORE_OP_COMPLETE);

    /* J4: J1 complete at T0 + 100, expires at T0 + 100 + OPS_TTL */
    ck_assert_int_eq(j1.expires_at_ms, T0 + 100 + OPS_TTL);
    ck_assert_int_eq(claim(id, H2, T0 + 101 + OPS_TTL, &j4), STORE_CLAIM_NEW);
    ck_assert_str_eq(j4.request_hash, H2);
    ck_assert_uint_eq(j4.generation, 1);
    ck_assert_int_eq(j4.state, STORE_OP_RUNNING);
    ck_assert_int_eq(j4.created_at_ms, T0 + 101 + OPS_TTL);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* racing put-if-absent                                                    */

#define RACE_THREADS 8
#define RACE_IDS 2000

static atomic_int race_new_per_id[RACE_IDS];
static atomic_int race_new, race_dup, race_other, race_err;
static pthread_barrier_t race_barrier;

/* the counters are shared by the race tests (and by one process under
 * CK_FORK=no, as valgrind runs them) */
static void race_reset(void)
{
    for (int i = 0; i < RACE_IDS; i++)
        atomic_store(&race_new_per_id[i], 0);
    atomic_store(&race_new, 0);
    atomic_store(&race_dup, 0);
    atomic_store(&race_other, 0);
    atomic_store(&race_err, 0);
}

static void *race_worker(void *arg)
{
    static const int mult[RACE_THREADS] = {1, 3, 7, 9, 11, 13, 17, 19};
    int t = (int)(intptr_t)arg;
    char op_id[32];
    pthread_barrier_wait(&race_barrier);
    for (int i = 0; i < RACE_IDS; i++) {
        /* a different permutation of the ids in every thread */
        int id = (i * mult[t] + t * 250) % RACE_IDS;
        snprintf(op_id, sizeof(op_id), "race-%d", id);
        enum store_claim_result r = 0;
        struct store_op op;
        char err[256];
        if (store_claim(g_st, op_id, H1, EK1, "t/0/1", T0, &r, &op, err,
                        sizeof(err))
            != DD_OK) {
            atomic_fetch_add(&race_err, 1);
            continue;
        }
        if (r == STORE_CLAIM_NEW) {
            atomic_fetch_add(&race_new, 1);
            atomic_fetch_add(&race_new_per_id[id], 1);
        } else if (r == STORE_CLAIM_DUPLICATE) {
            atomic_fetch_add(&race_dup, 1);
        } else {
            atomic_fetch_add(&race_other, 1);
        }
    }
    return NULL;
}

START_TEST(test_store_claim_race_exactly_one_new_per_op_id)
{
    pthread_t th[RACE_THREADS];
    race_reset();
    pthread_barrier_init(&race_barrier, NULL, RACE_THREADS);
    for (int t = 0; t < RACE_THREADS; t++)
        ck_assert_int_eq(
            pthread_create(&th[t], NULL, race_worker, (void *)(intptr_t)t), 0);
    for (int t = 0; t < RACE_THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&race_barrier);

    int errs = atomic_load(&race_err), other = atomic_load(&race_other);
    int news = atomic_load(&race_new), dups = atomic_load(&race_dup);
    ck_assert_int_eq(errs, 0);
    ck_assert_int_eq(other, 0);
    ck_assert_int_eq(news, RACE_IDS);
    ck_assert_int_eq(dups, (RACE_THREADS - 1) * RACE_IDS);
    for (int i = 0; i < RACE_IDS; i++) {
        int won = atomic_load(&race_new_per_id[i]);
        ck_assert_msg(won == 1, "race-%d won %d times", i, won);
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* fencing                                                                 */

START_TEST(test_store_complete_stale_generation_is_state_error)
{
    struct store_op op;
    uint64_t seq = 0;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    /* a new run of this instance reclaims: generation 2 */
    reopen_as("a", "r2");
    ck_assert_int_eq(claim("op-1", H1, T0 + 1, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.generation, 2);
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_COMPLETE, NULL,
                                    1, "v", 1, T0 + 2, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_complete(op-1): stale generation 1, "
                            "current 2");
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);
    /* the refused completion used no seq */
    ck_assert_uint_eq(complete("op-1", 2, "v", T0 + 3), 1);
}
END_TEST

/* store_complete_batch and store_outbox_ack_batch with the record the
 * caller holds (req.held): used while the index says nothing wrote the op
 * since, and refused like a read record once something did. */
static dd_err_t complete_held(const char *op_id, const struct store_op *held,
                              struct store_op *written, int64_t now)
{
    struct store_complete_req r = {
        .op_id = op_id, .generation = held->generation,
        .state = STORE_OP_COMPLETE, .attempts = 1, .value = "v",
        .value_len = 1, .held = held, .written = written};
    ck_assert_int_eq(store_complete_batch(g_st, &r, 1, now, g_err,
                                          sizeof(g_err)), DD_OK);
    return r.err;
}

START_TEST(test_store_held_record_skips_reads_until_the_op_changes)
{
    struct store_op op, written, got;
    /* claimed, completed on the held record, acknowledged on the written
     * one: the records are what reads would have given */
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(complete_held("op-1", &op, &written, T0 + 1), DD_OK);
    ck_assert(get("op-1", T0 + 1, &got));
    ck_assert_int_eq(got.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(written.state, STORE_OP_COMPLETE);
    ck_assert_uint_eq(written.outbox_seq, got.outbox_seq);
    ck_assert_int_eq(written.outbox_state, STORE_OUTBOX_PENDING);
    struct store_outbox_ack_req a = {.seq = written.outbox_seq,
                                     .op_id = "op-1", .held = &written};
    ck_assert_int_eq(store_outbox_ack_batch(g_st, &a, 1, g_err,
                                            sizeof(g_err)), DD_OK);
    ck_assert_int_eq(a.err, DD_OK);
    ck_assert(get("op-1", T0 + 2, &got));
    ck_assert_int_eq(got.outbox_state, STORE_OUTBOX_SENT);
    ck_assert_uint_eq(got.generation, 1);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);

    /* a held claim record gone stale (forgotten since): fenced as by a
     * read, nothing written */
    ck_assert_int_eq(claim("op-2", H1, T0, &op), STORE_CLAIM_NEW);
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t vlen = 0;
    bool found = false;
    ck_assert_int_eq(store_op_forget(g_st, "op-2", T0 + 1, v, &vlen, &found,
                                     g_err, sizeof(g_err)), DD_OK);
    ck_assert(found);
    ck_assert_int_eq(complete_held("op-2", &op, &written, T0 + 2),
                     DD_ERR_STATE);
    ck_assert(get("op-2", T0 + 2, &got));
    ck_assert_int_eq(got.state, STORE_OP_FORGOTTEN);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);

    /* a held completion gone stale (forgotten before its acknowledgement):
     * the entry goes, the forgotten record is not marked sent over */
    ck_assert_int_eq(claim("op-3", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(complete_held("op-3", &op, &written, T0 + 1), DD_OK);
    ck_assert_int_eq(store_op_forget(g_st, "op-3", T0 + 2, v, &vlen, &found,
                                     g_err, sizeof(g_err)), DD_OK);
    a = (struct store_outbox_ack_req){.seq = written.outbox_seq,
                                      .op_id = "op-3", .held = &written};
    ck_assert_int_eq(store_outbox_ack_batch(g_st, &a, 1, g_err,
                                            sizeof(g_err)), DD_OK);
    ck_assert(get("op-3", T0 + 3, &got));
    ck_assert_int_eq(got.state, STORE_OP_FORGOTTEN);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);
}
END_TEST

START_TEST(test_store_deferred_claim_is_written_with_its_completion)
{
    struct store_claim_req c[3] = {
        {.op_id = "op-d", .request_hash = H1, .event_key = EK1,
         .source = "jobs/0/1", .defer_new = true},
        {.op_id = "op-d", .request_hash = H1, .event_key = EK1,
         .source = "jobs/0/2", .defer_new = true},
        {.op_id = "op-w", .request_hash = H1, .event_key = EK1,
         .source = "jobs/0/3"},
    };
    ck_assert_int_eq(store_claim_batch(g_st, c, 3, T0, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(c[0].result, STORE_CLAIM_NEW);
    ck_assert(c[0].deferred);
    ck_assert_int_eq(c[1].result, STORE_CLAIM_DUPLICATE); /* in flight */
    ck_assert_int_eq(c[2].result, STORE_CLAIM_NEW);
    ck_assert(!c[2].deferred); /* not asked: written now */
    struct store_op got, written;
    ck_assert(!get("op-d", T0, &got)); /* only the index knows it */
    ck_assert(get("op-w", T0, &got));
    /* the completion writes the whole op */
    struct store_complete_req r = {
        .op_id = "op-d", .generation = c[0].op.generation,
        .state = STORE_OP_COMPLETE, .attempts = 1, .value = "v",
        .value_len = 1, .held = &c[0].op, .held_unwritten = true,
        .written = &written};
    ck_assert_int_eq(store_complete_batch(g_st, &r, 1, T0 + 1, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert_int_eq(r.err, DD_OK);
    ck_assert(get("op-d", T0 + 1, &got));
    ck_assert_int_eq(got.state, STORE_OP_COMPLETE);
    ck_assert_uint_eq(got.generation, 1);
    ck_assert_str_eq(got.source, "jobs/0/1");
    ck_assert_uint_eq(store_outbox_pending(g_st), 1);
    /* a held record said unwritten while another record is there (a
     * forgotten op): fenced by that record, nothing written */
    ck_assert_int_eq(claim("op-f", H1, T0, &got), STORE_CLAIM_NEW);
    struct store_op held = got;
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t vlen = 0;
    bool found = false;
    ck_assert_int_eq(store_op_forget(g_st, "op-f", T0 + 1, v, &vlen, &found,
                                     g_err, sizeof(g_err)), DD_OK);
    r = (struct store_complete_req){
        .op_id = "op-f", .generation = 1, .state = STORE_OP_COMPLETE,
        .attempts = 1, .value = "v", .value_len = 1, .held = &held,
        .held_unwritten = true};
    ck_assert_int_eq(store_complete_batch(g_st, &r, 1, T0 + 2, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert_int_eq(r.err, DD_ERR_STATE);
    ck_assert(get("op-f", T0 + 2, &got));
    ck_assert_int_eq(got.state, STORE_OP_FORGOTTEN);
}
END_TEST

START_TEST(test_store_complete_by_other_owner_is_state_error)
{
    struct store_op op;
    uint64_t seq = 0;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    reopen_as("b", "r9");
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_COMPLETE, NULL,
                                    1, "v", 1, T0 + 2, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_complete(op-1): lease held by a#r1, not by "
                            "this run b#r9");
    ck_assert(get("op-1", T0 + 2, &op));
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
}
END_TEST

START_TEST(test_store_complete_twice_is_state_error)
{
    struct store_op op;
    uint64_t seq = 0;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    complete("op-1", 1, "v", T0 + 1);
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_COMPLETE, NULL,
                                    1, "v", 1, T0 + 2, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_complete(op-1): op is complete, not "
                            "running or retryable");
    ck_assert_uint_eq(store_outbox_pending(g_st), 1);
    /* an absent op cannot be completed either */
    ck_assert_int_eq(store_complete(g_st, "nope", 1, STORE_OP_COMPLETE, NULL,
                                    1, "v", 1, T0 + 2, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_complete(nope): op not found (absent or "
                            "expired)");
}
END_TEST

START_TEST(test_store_complete_rejects_non_final_state)
{
    struct store_op op;
    uint64_t seq = 0;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_RUNNING, NULL, 1,
                                    "v", 1, T0 + 2, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_complete(op-1): final state must be "
                            "complete or failed, not running");
}
END_TEST

START_TEST(test_store_lease_renew_extends_and_fences)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_lease_renew(g_st, "op-1", 1, T0 + 50000, g_err,
                                       sizeof(g_err)),
                     DD_OK);
    ck_assert(get("op-1", T0 + 50000, &op));
    ck_assert_int_eq(op.lease_expires_at_ms, T0 + 50000 + LEASE);
    ck_assert_int_eq(op.updated_at_ms, T0 + 50000);
    ck_assert_int_eq(op.expires_at_ms, T0 + OPS_TTL);
    ck_assert_int_eq(store_lease_renew(g_st, "op-1", 2, T0 + 50001, g_err,
                                       sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_lease_renew(op-1): stale generation 2, "
                            "current 1");
    /* another instance: the renewed lease is still live past the first */
    reopen_as("b", "r1");
    ck_assert_int_eq(claim("op-1", H1, T0 + LEASE + 1, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(store_lease_renew(g_st, "op-1", 1, T0 + LEASE + 1, g_err,
                                       sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_lease_renew(op-1): lease held by a#r1, "
                            "not by this run b#r1");
}
END_TEST

/* ---------------------------------------------------------------------- */
/* leases                                                                  */

START_TEST(test_store_lease_expiry_reclaims_generation_2)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    reopen_as("b", "r1"); /* another instance: waits out the lease */
    ck_assert_int_eq(claim("op-1", H1, T0 + LEASE, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_str_eq(op.lease_owner, "a#r1");
    ck_assert_int_eq(claim("op-1", H1, T0 + LEASE + 1, &op),
                     STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.generation, 2);
    ck_assert_str_eq(op.lease_owner, "b#r1");
    ck_assert_int_eq(op.lease_expires_at_ms, T0 + LEASE + 1 + LEASE);
    ck_assert_int_eq(op.created_at_ms, T0);
    ck_assert_int_eq(op.updated_at_ms, T0 + LEASE + 1);
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    /* held by this very run now: in flight, ours */
    ck_assert_int_eq(claim("op-1", H1, T0 + LEASE + 2, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_uint_eq(op.generation, 2);
    complete("op-1", 2, "v", T0 + LEASE + 3);
}
END_TEST

START_TEST(test_store_reopen_new_run_reclaims_at_once)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    reopen_as("a", "r2");
    ck_assert_str_eq(store_owner(g_st), "a#r2");
    /* the lease of a#r1 is live until T0 + LEASE, yet void */
    ck_assert_int_eq(claim("op-1", H1, T0 + 1, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.generation, 2);
    ck_assert_str_eq(op.lease_owner, "a#r2");
    /* an instance whose name extends "a" is another instance */
    reopen_as("ab", "r2");
    ck_assert_int_eq(claim("op-1", H1, T0 + 2, &op), STORE_CLAIM_DUPLICATE);
    ck_assert_str_eq(op.lease_owner, "a#r2");
}
END_TEST

/* store.path's missing parent directories are created (RocksDB makes only
 * the last one). */
START_TEST(test_store_open_creates_parent_directories)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/x/y/store", g_dir);
    struct store_conf conf = {.path = path, .instance = "a", .run_id = "r1"};
    struct store *st = NULL;
    ck_assert_msg(store_open(&conf, &st, g_err, sizeof(g_err)) == DD_OK,
                  "store_open: %s", g_err);
    store_close(st);
    struct stat sb;
    snprintf(path, sizeof(path), "%s/x/y/store/CURRENT", g_dir);
    ck_assert_int_eq(stat(path, &sb), 0);
}
END_TEST

START_TEST(test_store_open_rejects_bad_conf)
{
    struct store *st = NULL;
    struct store_conf conf = {.path = g_dir, .instance = "a#b", .run_id = "r"};
    ck_assert_int_eq(store_open(&conf, &st, g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_ptr_null(st);
    ck_assert_str_eq(g_err, "store_open: instance 'a#b' contains '#', which "
                            "separates it from the run id in lease owners");
    conf.instance = "a";
    conf.run_id = "";
    ck_assert_int_eq(store_open(&conf, &st, g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err,
                     "store_open: path, instance and run_id are required");
    store_close(NULL);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* outbox                                                                  */

struct seen_entry {
    uint64_t seq;
    char op_id[64];
    char event_key[STORE_HASH_LEN + 1];
    uint64_t generation;
    char value[64];
};

struct collect {
    int n;
    int stop_after;
    struct seen_entry e[16];
};

static int collect_cb(void *opaque, uint64_t seq, const char *op_id,
                      const char *event_key, uint64_t generation,
                      const void *value, size_t value_len)
{
    struct collect *c = opaque;
    ck_assert_int_lt(c->n, 16);
    struct seen_entry *e = &c->e[c->n++];
    e->seq = seq;
    snprintf(e->op_id, sizeof(e->op_id), "%s", op_id);
    snprintf(e->event_key, sizeof(e->event_key), "%s", event_key);
    e->generation = generation;
    snprintf(e->value, sizeof(e->value), "%.*s", (int)value_len,
             (const char *)value);
    return c->stop_after && c->n >= c->stop_after;
}

static void collect(struct collect *c, int stop_after)
{
    memset(c, 0, sizeof(*c));
    c->stop_after = stop_after;
    ck_assert_int_eq(store_outbox_foreach(g_st, collect_cb, c, g_err,
                                          sizeof(g_err)),
                     DD_OK);
}

/* The pending outbox is exactly want[0..n) ({op_id, value} each), in
 * order. */
static void outbox_is(const char *const (*want)[2], int n)
{
    struct collect c;
    collect(&c, 0);
    ck_assert_int_eq(c.n, n);
    for (int i = 0; i < n; i++) {
        ck_assert_str_eq(c.e[i].op_id, want[i][0]);
        ck_assert_str_eq(c.e[i].value, want[i][1]);
    }
}

START_TEST(test_store_outbox_complete_foreach_ack)
{
    struct store_op op;
    struct collect c;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    uint64_t seq = complete("op-1", 1, "{\"result\":1}", T0 + 10);
    ck_assert_uint_eq(seq, 1);
    ck_assert_uint_eq(store_outbox_pending(g_st), 1);

    ck_assert(get("op-1", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_PENDING);
    ck_assert_uint_eq(op.outbox_seq, seq);
    ck_assert_uint_eq(op.attempts, 1);
    ck_assert_int_eq(op.updated_at_ms, T0 + 10);
    ck_assert_int_eq(op.expires_at_ms, T0 + 10 + OPS_TTL);

    collect(&c, 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_uint_eq(c.e[0].seq, seq);
    ck_assert_str_eq(c.e[0].op_id, "op-1");
    ck_assert_str_eq(c.e[0].event_key, EK1);
    ck_assert_uint_eq(c.e[0].generation, 1);
    ck_assert_str_eq(c.e[0].value, "{\"result\":1}");

    ck_assert_int_eq(store_outbox_ack(g_st, seq, "op-1", g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);
    collect(&c, 0);
    ck_assert_int_eq(c.n, 0);
    ck_assert(get("op-1", T0 + 10, &op));
    ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_SENT);
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(op.expires_at_ms, T0 + 10 + OPS_TTL);
}
END_TEST

START_TEST(test_store_acked_completion_writes_no_outbox_entry)
{
    /* a shadow op written once, at its result's acknowledgement: COMPLETE,
     * sent, no outbox entry; a duplicate afterwards, as after an ack */
    struct store_claim_req c = {.op_id = "op-a", .request_hash = H1,
                                .event_key = EK1, .source = "jobs/0/1",
                                .defer_new = true};
    ck_assert_int_eq(store_claim_batch(g_st, &c, 1, T0, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(c.deferred);
    struct store_op written, got;
    unsigned char clog[STORE_CHANGELOG_VALUE_MAX];
    struct store_complete_req r = {
        .op_id = "op-a", .generation = c.op.generation,
        .state = STORE_OP_COMPLETE, .acked = true, .held = &c.op,
        .held_unwritten = true, .written = &written, .changelog = clog};
    ck_assert_int_eq(store_complete_batch(g_st, &r, 1, T0 + 1, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert_int_eq(r.err, DD_OK);
    ck_assert_uint_eq(r.seq, 0);
    ck_assert_uint_gt(r.changelog_len, 0);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);
    ck_assert(get("op-a", T0 + 1, &got));
    ck_assert_int_eq(got.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(got.outbox_state, STORE_OUTBOX_SENT);
    ck_assert_int_eq(written.outbox_state, STORE_OUTBOX_SENT);
    struct collect col;
    collect(&col, 0);
    ck_assert_int_eq(col.n, 0); /* nothing to replay */
    ck_assert_int_eq(claim("op-a", H1, T0 + 2, &got), STORE_CLAIM_DUPLICATE);
}
END_TEST

START_TEST(test_store_outbox_ack_is_idempotent)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    uint64_t seq = complete("op-1", 1, "v", T0 + 10);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(store_outbox_ack(g_st, seq, "op-1", g_err,
                                          sizeof(g_err)),
                         DD_OK);
        ck_assert_uint_eq(store_outbox_pending(g_st), 0);
    }
    ck_assert(get("op-1", T0 + 10, &op));
    ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_SENT);
    /* an ack of a forgotten op only removes the entry */
    ck_assert_int_eq(claim("op-2", H1, T0, &op), STORE_CLAIM_NEW);
    seq = complete("op-2", 1, "v", T0 + 10);
    bool found = false;
    ck_assert_int_eq(store_forget(g_st, "op-2", &found, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(store_outbox_ack(g_st, seq, "op-2", g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);
}
END_TEST

START_TEST(test_store_outbox_ack_of_another_ops_entry_is_inval)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    uint64_t seq = complete("op-1", 1, "v", T0 + 10);
    ck_assert_int_eq(store_outbox_ack(g_st, seq, "op-2", g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_outbox_ack(op-2): outbox entry 1 belongs "
                            "to op op-1");
    ck_assert_uint_eq(store_outbox_pending(g_st), 1);
}
END_TEST

START_TEST(test_store_outbox_reopen_keeps_pending_and_seq_grows)
{
    struct store_op op;
    struct collect c;
    uint64_t seqs[3];
    const char *ids[3] = {"op-1", "op-2", "op-3"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(claim(ids[i], H1, T0, &op), STORE_CLAIM_NEW);
        char v[32];
        snprintf(v, sizeof(v), "value-%d", i);
        seqs[i] = complete(ids[i], 1, v, T0 + 1);
    }
    ck_assert_uint_eq(seqs[0], 1);
    ck_assert_uint_eq(seqs[1], 2);
    ck_assert_uint_eq(seqs[2], 3);
    ck_assert_int_eq(store_outbox_ack(g_st, seqs[1], "op-2", g_err,
                                      sizeof(g_err)),
                     DD_OK);
    reopen_as("a", "r2");
    ck_assert_uint_eq(store_outbox_pending(g_st), 2);
    collect(&c, 0);
    ck_assert_int_eq(c.n, 2);
    ck_assert_uint_eq(c.e[0].seq, 1);
    ck_assert_str_eq(c.e[0].op_id, "op-1");
    ck_assert_str_eq(c.e[0].value, "value-0");
    ck_assert_uint_eq(c.e[1].seq, 3);
    ck_assert_str_eq(c.e[1].op_id, "op-3");
    ck_assert_str_eq(c.e[1].value, "value-2");
    /* the callback stops the walk */
    collect(&c, 1);
    ck_assert_int_eq(c.n, 1);

    ck_assert_int_eq(claim("op-4", H1, T0 + 2, &op), STORE_CLAIM_NEW);
    uint64_t s4 = complete("op-4", 1, "value-3", T0 + 3);
    ck_assert_uint_gt(s4, 3);
    ck_assert_uint_eq(store_outbox_pending(g_st), 3);
    collect(&c, 0);
    ck_assert_int_eq(c.n, 3);
    ck_assert_uint_eq(c.e[2].seq, s4);
}
END_TEST

START_TEST(test_store_outbox_seq_not_reused_after_all_acked)
{
    struct store_op op;
    uint64_t last = 0;
    for (int round = 0; round < 3; round++) {
        char id[32];
        snprintf(id, sizeof(id), "op-%d", round);
        ck_assert_int_eq(claim(id, H1, T0, &op), STORE_CLAIM_NEW);
        uint64_t seq = complete(id, 1, "v", T0 + 1);
        ck_assert_uint_gt(seq, last);
        last = seq;
        ck_assert_int_eq(store_outbox_ack(g_st, seq, id, g_err,
                                          sizeof(g_err)),
                         DD_OK);
        ck_assert_uint_eq(store_outbox_pending(g_st), 0);
        reopen_as("a", round % 2 ? "r-odd" : "r-even");
    }
}
END_TEST

/* C-24 (store part): A completed and delivered 40..42; B, holding the same
 * state (the changelog restore is the pipeline's), gets DUPLICATE x3 with A's
 * event keys, no conflict, and nothing to publish again. */
START_TEST(test_store_c24_delivered_ops_are_duplicates_for_instance_b)
{
    struct store_op op;
    struct collect c;
    const char *eks[3] = {EK1, EK2, H2};
    char id[32];
    for (int off = 40; off <= 42; off++) {
        snprintf(id, sizeof(id), "scrape.jobs-op-%d", off);
        enum store_claim_result r;
        ck_assert_int_eq(store_claim(g_st, id, H1, eks[off - 40], "x", T0, &r,
                                     &op, g_err, sizeof(g_err)),
                         DD_OK);
        ck_assert_int_eq(r, STORE_CLAIM_NEW);
        uint64_t seq = complete(id, 1, "result", T0 + 1);
        ck_assert_int_eq(store_outbox_ack(g_st, seq, id, g_err,
                                          sizeof(g_err)),
                         DD_OK);
    }
    reopen_as("b", "r1");
    int dups = 0, conflicts = 0;
    for (int off = 40; off <= 42; off++) {
        snprintf(id, sizeof(id), "scrape.jobs-op-%d", off);
        enum store_claim_result r = claim(id, H1, T0 + 2, &op);
        dups += r == STORE_CLAIM_DUPLICATE;
        conflicts += r == STORE_CLAIM_CONFLICT;
        ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
        ck_assert_int_eq(op.outbox_state, STORE_OUTBOX_SENT);
        ck_assert_str_eq(op.event_key, eks[off - 40]);
    }
    ck_assert_int_eq(dups, 3);
    ck_assert_int_eq(conflicts, 0);
    ck_assert_uint_eq(store_outbox_pending(g_st), 0);
    collect(&c, 0);
    ck_assert_int_eq(c.n, 0);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* TTL                                                                     */

/* C-28: written at 1000 s with TTL 3600 s; arrivals at 4599, 4600, 4601 s. */
START_TEST(test_store_c28_expiry_boundary_without_compaction)
{
    struct store_op op;
    ck_assert_int_eq(claim("job", H1, 1000000, &op), STORE_CLAIM_NEW);
    complete("job", 1, "v", 1000000);
    ck_assert(get("job", 0, &op));
    ck_assert_int_eq(op.expires_at_ms, 4600000);

    ck_assert_int_eq(claim("job", H1, 4599000, &op), STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(claim("job", H1, 4600000, &op), STORE_CLAIM_DUPLICATE);
    ck_assert(get("job", 4600000, &op));
    ck_assert(!get("job", 4600001, &op));
    ck_assert_int_eq(claim("job", H1, 4601000, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert_uint_eq(op.generation, 1);
    ck_assert_int_eq(op.created_at_ms, 4601000);
    ck_assert_int_eq(op.expires_at_ms, 4601000 + OPS_TTL);
}
END_TEST

START_TEST(test_store_c28_same_answers_after_manual_compaction)
{
    struct store_op op;
    ck_assert_int_eq(claim("job", H1, 1000000, &op), STORE_CLAIM_NEW);
    complete("job", 1, "v", 1000000);

    store_set_filter_clock(g_st, 4599000);
    store_compact(g_st);
    ck_assert(get("job", 0, &op)); /* physically present */
    ck_assert_int_eq(claim("job", H1, 4599000, &op), STORE_CLAIM_DUPLICATE);

    store_set_filter_clock(g_st, 4600000);
    store_compact(g_st);
    ck_assert(get("job", 0, &op)); /* same boundary as reads: kept */
    ck_assert_int_eq(claim("job", H1, 4600000, &op), STORE_CLAIM_DUPLICATE);

    store_set_filter_clock(g_st, 4601000);
    store_compact(g_st);
    ck_assert(!get("job", 0, &op)); /* gone */
    ck_assert_int_eq(claim("job", H1, 4601000, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(op.expires_at_ms, 4601000 + OPS_TTL);
}
END_TEST

START_TEST(test_store_ttl_expired_absent_before_compaction_gone_after)
{
    struct store_op op;
    bool seen = false, first = false;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    complete("op-1", 1, "v", T0);
    ck_assert_int_eq(store_mark_seen(g_st, "k", 1, 1000, T0, &seen, g_err,
                                     sizeof(g_err)),
                     DD_OK);
    ck_assert(!seen);
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H2, T0, &first, g_err,
                                         sizeof(g_err)),
                     DD_OK);
    ck_assert(first);

    /* expired: absent on read although RocksDB still holds the bytes */
    int64_t later = T0 + OPS_TTL + 1;
    ck_assert(!get("op-1", later, &op));
    ck_assert(get("op-1", 0, &op));

    /* the filter runs on compaction only, with the filter clock */
    store_compact(g_st); /* wall clock: everything at T0 is long expired */
    ck_assert(!get("op-1", 0, &op));
    ck_assert_int_eq(store_mark_seen(g_st, "k", 1, 1000, T0, &seen, g_err,
                                     sizeof(g_err)),
                     DD_OK);
    ck_assert(!seen); /* the seen record was dropped too */
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H2, T0, &first, g_err,
                                         sizeof(g_err)),
                     DD_OK);
    ck_assert(first); /* and the conflict record */
    ck_assert_int_eq(claim("op-1", H1, later, &op), STORE_CLAIM_NEW);
}
END_TEST

START_TEST(test_store_ttl_filter_keeps_unexpired_and_outbox)
{
    struct store_op op;
    struct collect c;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    complete("op-1", 1, "v", T0);
    store_set_filter_clock(g_st, T0 + 1);
    store_compact(g_st);
    ck_assert(get("op-1", T0 + 1, &op));
    /* far beyond every TTL: the op goes, the outbox entry stays */
    store_set_filter_clock(g_st, INT64_MAX);
    store_compact(g_st);
    ck_assert(!get("op-1", 0, &op));
    collect(&c, 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_uint_eq(store_outbox_pending(g_st), 1);
    store_set_filter_clock(g_st, 0);
}
END_TEST

START_TEST(test_store_failed_op_uses_failed_ttl)
{
    struct store_op op;
    uint64_t seq = 0;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_uint_eq(op.retry_epoch, 0);
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_FAILED,
                                    "timeout", 3, "dead", 4, T0 + 5, &seq,
                                    g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(get("op-1", T0 + 5, &op));
    ck_assert_int_eq(op.state, STORE_OP_FAILED);
    ck_assert_str_eq(op.category, "timeout");
    ck_assert_uint_eq(op.attempts, 3);
    /* kept for the ops TTL: a claim after failed_ttl_ms finds it */
    ck_assert_int_eq(op.expires_at_ms, T0 + 5 + OPS_TTL);
    ck_assert_int_eq(claim("op-1", H1, T0 + 5 + FAILED_TTL, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(op.state, STORE_OP_FAILED);
    /* its result not acknowledged yet: not claimed again */
    ck_assert_int_eq(claim("op-1", H1, T0 + 6 + FAILED_TTL, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(store_outbox_ack(g_st, seq, "op-1", g_err,
                                      sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(claim("op-1", H1, T0 + 6 + FAILED_TTL, &op),
                     STORE_CLAIM_RECLAIMED);
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert_uint_eq(op.generation, 2);
    ck_assert_uint_eq(op.retry_epoch, 1);
    ck_assert_str_eq(op.category, "");
    ck_assert_uint_eq(op.attempts, 3); /* the attempt log goes on */
    /* expired: a new op, at epoch 0 */
    ck_assert_int_eq(claim("op-9", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_complete(g_st, "op-9", 1, STORE_OP_FAILED,
                                    "timeout", 1, "dead", 4, T0 + 5, &seq,
                                    g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(claim("op-9", H1, T0 + 6 + OPS_TTL, &op),
                     STORE_CLAIM_NEW);
    ck_assert_uint_eq(op.retry_epoch, 0);
    ck_assert_uint_eq(op.generation, 1);
    ck_assert_str_eq(op.event_key, EK1);
}
END_TEST

/* Fail \p op_id at generation \p gen at \p now; acknowledge its result. */
static void fail_acked(const char *op_id, uint64_t gen, int64_t now)
{
    uint64_t seq = 0;
    ck_assert_int_eq(store_complete(g_st, op_id, gen, STORE_OP_FAILED,
                                    "client_error", 1, "dead", 4, now, &seq,
                                    g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(store_outbox_ack(g_st, seq, op_id, g_err,
                                      sizeof(g_err)),
                     DD_OK);
}

/* store.failed_ttl_ms near or over the ops TTL: the failed record was kept
 * for max(ops TTL, failed_ttl_ms) and so expired about when it could be
 * claimed again; its next claim was a new op at epoch 0, under the first
 * failure's event_key, which a consumer that drops replays drops.  It is
 * kept for failed_ttl_ms + half the ops TTL when that is longer. */
START_TEST(test_store_failed_op_with_failed_ttl_over_ops_ttl_gets_next_epoch)
{
    static const struct { int64_t failed, life; } ttl[] = {
        {5000, 6000}, /* over the ops TTL */
        {2000, 3000}, /* equal */
        {1999, 2999}, /* just under: a 1 ms window before */
        {1000, 2000}, /* half: the ops TTL, as before */
    };
    struct store_conf conf = fixture_conf("a", "r1");
    conf.ops_ttl_ms = 2000;
    for (size_t i = 0; i < sizeof(ttl) / sizeof(ttl[0]); i++) {
        store_close(g_st);
        g_st = NULL;
        conf.failed_ttl_ms = ttl[i].failed;
        ck_assert_int_eq(store_open(&conf, &g_st, g_err, sizeof(g_err)), DD_OK);
        ck_assert_int_eq(store_record_life_ms(2000, ttl[i].failed),
                         ttl[i].life);
        char id[16];
        snprintf(id, sizeof(id), "op-%zu", i);
        struct store_op op;
        ck_assert_int_eq(claim(id, H1, T0, &op), STORE_CLAIM_NEW);
        fail_acked(id, 1, T0); /* in the claim's ms: stamped T0 + 1 */
        ck_assert(get(id, T0 + 2, &op));
        ck_assert_int_eq(op.expires_at_ms, T0 + ttl[i].life);
        ck_assert_int_eq(claim(id, H1, T0 + 1 + ttl[i].failed, &op),
                         STORE_CLAIM_DUPLICATE);
        ck_assert_int_eq(claim(id, H1, T0 + 2 + ttl[i].failed, &op),
                         STORE_CLAIM_RECLAIMED);
        ck_assert_uint_eq(op.retry_epoch, 1);
        ck_assert_uint_eq(op.generation, 2);
        ck_assert_str_ne(op.event_key, EK1);
    }
}
END_TEST

/* DESIGN.md section 2: retry_epoch grows only when a failed op is claimed
 * again after failed_ttl_ms; its event_key is that epoch's; the record
 * keeps both through a lease reclaim, a reopen and a completion. */
START_TEST(test_store_retry_epoch_grows_only_on_a_failed_reclaim)
{
    struct store_op op;
    char ek[KEY_HEX_LEN + 1];
    int64_t t = T0;
    ck_assert_int_eq(claim("op-1", H1, t, &op), STORE_CLAIM_NEW);
    fail_acked("op-1", 1, t + 1);
    t += 2 + FAILED_TTL;
    ck_assert_int_eq(claim("op-1", H1, t, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.retry_epoch, 1);
    key_event_key_epoch("op-1", H1, 1, ek);
    ck_assert_str_eq(op.event_key, ek);
    ck_assert_str_ne(op.event_key, EK1);
    /* in flight here: a duplicate, the epoch unchanged */
    ck_assert_int_eq(claim("op-1", H1, t + 1, &op), STORE_CLAIM_DUPLICATE);
    ck_assert_uint_eq(op.retry_epoch, 1);

    /* a lease of a previous run: reclaimed, same epoch and event_key */
    reopen_as("a", "r2");
    ck_assert(get("op-1", t + 2, &op)); /* decoded from RocksDB */
    ck_assert_uint_eq(op.retry_epoch, 1);
    ck_assert_str_eq(op.event_key, ek);
    ck_assert_int_eq(claim("op-1", H1, t + 2, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.generation, 3);
    ck_assert_uint_eq(op.retry_epoch, 1);
    ck_assert_str_eq(op.event_key, ek);

    /* the result of epoch 1 goes to the outbox under its event_key */
    uint64_t seq = 0;
    ck_assert_int_eq(store_complete(g_st, "op-1", 3, STORE_OP_FAILED,
                                    "client_error", 2, "dead", 4, t + 3,
                                    &seq, g_err, sizeof(g_err)),
                     DD_OK);
    struct collect c;
    collect(&c, 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_str_eq(c.e[0].event_key, ek);
    ck_assert_int_eq(store_outbox_ack(g_st, seq, "op-1", g_err,
                                      sizeof(g_err)),
                     DD_OK);

    /* failed again: epoch 2 through the batch path (the index never
     * answers a failed op) */
    t += 4 + FAILED_TTL;
    struct store_claim_req r = {.op_id = "op-1", .request_hash = H1,
                                .event_key = EK1, .source = "t/0/2"};
    ck_assert_int_eq(store_claim_batch(g_st, &r, 1, t, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r.err, DD_OK);
    ck_assert_int_eq(r.result, STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(r.op.retry_epoch, 2);
    ck_assert_uint_eq(r.op.generation, 4);
    key_event_key_epoch("op-1", H1, 2, ek);
    ck_assert_str_eq(r.op.event_key, ek);

    /* complete: never claimed again, the epoch kept */
    ck_assert_int_eq(store_complete(g_st, "op-1", 4, STORE_OP_COMPLETE, NULL,
                                    3, "ok", 2, t + 1, &seq, g_err,
                                    sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(claim("op-1", H1, t + 2 + FAILED_TTL, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_uint_eq(op.retry_epoch, 2);
    ck_assert_str_eq(op.event_key, ek);
    /* the changelog value carries it */
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t vlen = store_changelog_encode(&op, v);
    struct store_op back;
    ck_assert_int_eq(store_codec_op_decode(v, vlen, "op-1", &back, g_err,
                                           sizeof(g_err)),
                     DD_OK);
    ck_assert_uint_eq(back.retry_epoch, 2);

    /* a conflict, a forgotten op and a new op: epoch 0 */
    ck_assert_int_eq(claim("op-1", H2, t + 3, &op), STORE_CLAIM_CONFLICT);
    ck_assert_uint_eq(op.retry_epoch, 2);
    ck_assert_int_eq(claim("op-2", H1, t, &op), STORE_CLAIM_NEW);
    ck_assert_uint_eq(op.retry_epoch, 0);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* seen and conflicts                                                      */

START_TEST(test_store_mark_seen_twice_reports_duplicate)
{
    bool seen = true;
    const char key[] = {'a', 0, 'b'}; /* bytes, not a C string */
    ck_assert_int_eq(store_mark_seen(g_st, key, sizeof(key), 1000, T0, &seen,
                                     g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!seen);
    ck_assert_int_eq(store_mark_seen(g_st, key, sizeof(key), 1000, T0 + 1000,
                                     &seen, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(seen);
    ck_assert_int_eq(store_mark_seen(g_st, "a", 1, 1000, T0, &seen, g_err,
                                     sizeof(g_err)),
                     DD_OK);
    ck_assert(!seen); /* "a" is another key than "a\0b" */
    /* expired: absent again, and a duplicate did not extend it */
    ck_assert_int_eq(store_mark_seen(g_st, key, sizeof(key), 1000, T0 + 1001,
                                     &seen, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!seen);
    ck_assert_int_eq(store_mark_seen(g_st, key, sizeof(key), 1000, T0 + 2001,
                                     &seen, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(seen);
}
END_TEST

START_TEST(test_store_mark_seen_rejects_bad_key)
{
    bool seen;
    char big[STORE_KEY_MAX + 1];
    memset(big, 'x', sizeof(big));
    ck_assert_int_eq(store_mark_seen(g_st, big, 0, 1000, T0, &seen, g_err,
                                     sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_int_eq(store_mark_seen(g_st, big, sizeof(big), 1000, T0, &seen,
                                     g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_mark_seen: key of 513 bytes (must be "
                            "1..512)");
    ck_assert_int_eq(store_mark_seen(g_st, "k", 1, -1, T0, &seen, g_err,
                                     sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_mark_seen: negative ttl_ms -1");
    ck_assert_int_eq(store_mark_seen(g_st, big, STORE_KEY_MAX, 1000, T0, &seen,
                                     g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!seen);
}
END_TEST

START_TEST(test_store_conflict_mark_first_then_second)
{
    bool first = false;
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H2, T0, &first, g_err,
                                         sizeof(g_err)),
                     DD_OK);
    ck_assert(first);
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H2, T0 + 1, &first,
                                         g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!first);
    /* another hash, another op: each reported once */
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H1, T0 + 1, &first,
                                         g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(first);
    ck_assert_int_eq(store_conflict_mark(g_st, "op-2", H2, T0 + 1, &first,
                                         g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(first);
    /* TTL = ops TTL */
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H2, T0 + OPS_TTL,
                                         &first, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!first);
    ck_assert_int_eq(store_conflict_mark(g_st, "op-1", H2, T0 + OPS_TTL + 1,
                                         &first, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(first);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* receipts of the job API                                                 */

#define RCPT_PENDING (20LL * 1000) /* api.c: the handler's 15 s wait + 5 s */
#define RAW_RECEIPTS 7

/* store_receipt_begin at \p now: its state, *existing the stored hash. */
static enum store_receipt_state rbegin(const char *key, const char *hash,
                                       int64_t now, char existing[65],
                                       char **receipt)
{
    enum store_receipt_state st = (enum store_receipt_state)-1;
    char *r = NULL;
    ck_assert_int_eq(store_receipt_begin(g_st, key, hash, now, RCPT_PENDING,
                                         OPS_TTL, &st, existing, &r, g_err,
                                         sizeof(g_err)),
                     DD_OK);
    if (receipt)
        *receipt = r;
    else
        free(r);
    return st;
}

START_TEST(test_store_receipt_pending_only_for_its_window)
{
    char ex[65];
    ck_assert_int_eq(rbegin("k1", H1, T0, ex, NULL), STORE_RECEIPT_NEW);
    /* in flight up to and at the end of its window (409) */
    ck_assert_int_eq(rbegin("k1", H1, T0 + 1, ex, NULL), STORE_RECEIPT_PENDING);
    ck_assert_str_eq(ex, H1);
    ck_assert_int_eq(rbegin("k1", H1, T0 + RCPT_PENDING, ex, NULL),
                     STORE_RECEIPT_PENDING);
    /* another payload in the window: PENDING with the first hash (422) */
    ck_assert_int_eq(rbegin("k1", H2, T0 + 2, ex, NULL), STORE_RECEIPT_PENDING);
    ck_assert_str_eq(ex, H1);
    /* past it: another payload is UNSETTLED (422, nothing written) ... */
    ck_assert_int_eq(rbegin("k1", H2, T0 + RCPT_PENDING + 1, ex, NULL),
                     STORE_RECEIPT_UNSETTLED);
    ck_assert_str_eq(ex, H1);
    ck_assert_int_eq(rbegin("k1", H2, T0 + OPS_TTL - 1, ex, NULL),
                     STORE_RECEIPT_UNSETTLED);
    /* ... the same payload takes it over: a new submit, a new window */
    int64_t t1 = T0 + OPS_TTL - 1;
    ck_assert_int_eq(rbegin("k1", H1, t1, ex, NULL), STORE_RECEIPT_NEW);
    ck_assert_int_eq(rbegin("k1", H1, t1 + RCPT_PENDING, ex, NULL),
                     STORE_RECEIPT_PENDING);
    /* the taken-over record lives its TTL from t1, not from T0 */
    ck_assert_int_eq(rbegin("k1", H2, t1 + OPS_TTL, ex, NULL),
                     STORE_RECEIPT_UNSETTLED);
    ck_assert_int_eq(rbegin("k1", H2, t1 + OPS_TTL + 1, ex, NULL),
                     STORE_RECEIPT_NEW);
    /* the window is part of the record: it survives a reopen (a crash) */
    ck_assert_int_eq(rbegin("k2", H1, T0, ex, NULL), STORE_RECEIPT_NEW);
    reopen_as("a", "r2");
    ck_assert_int_eq(rbegin("k2", H1, T0 + RCPT_PENDING, ex, NULL),
                     STORE_RECEIPT_PENDING);
    ck_assert_int_eq(rbegin("k2", H1, T0 + RCPT_PENDING + 1, ex, NULL),
                     STORE_RECEIPT_NEW);
    /* a window longer than the life, or none, is refused */
    enum store_receipt_state st;
    char *r = NULL;
    ck_assert_int_eq(store_receipt_begin(g_st, "k3", H1, T0, 0, OPS_TTL, &st,
                                         ex, &r, g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_int_eq(store_receipt_begin(g_st, "k3", H1, T0, 2, 1, &st, ex,
                                         &r, g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
}
END_TEST

START_TEST(test_store_receipt_done_lives_its_ttl)
{
    char ex[65];
    char *r = NULL;
    const char *json = "{\"op_id\":\"api:k1\",\"offset\":7}";
    ck_assert_int_eq(rbegin("k1", H1, T0, ex, NULL), STORE_RECEIPT_NEW);
    ck_assert_int_eq(store_receipt_done(g_st, "k1", H1, json, T0 + 5, OPS_TTL,
                                        g_err, sizeof(g_err)),
                     DD_OK);
    /* replayed, and another payload refused, up to now + TTL inclusive, long
     * past the pending window */
    ck_assert_int_eq(rbegin("k1", H1, T0 + RCPT_PENDING + 1, ex, &r),
                     STORE_RECEIPT_DONE);
    ck_assert_str_eq(r, json);
    free(r);
    ck_assert_int_eq(rbegin("k1", H1, T0 + 5 + OPS_TTL, ex, &r),
                     STORE_RECEIPT_DONE);
    ck_assert_str_eq(r, json);
    free(r);
    ck_assert_int_eq(rbegin("k1", H2, T0 + 5 + OPS_TTL, ex, NULL),
                     STORE_RECEIPT_DONE);
    ck_assert_str_eq(ex, H1);
    /* then gone: another payload is a new submit */
    ck_assert_int_eq(rbegin("k1", H2, T0 + 6 + OPS_TTL, ex, &r),
                     STORE_RECEIPT_NEW);
    ck_assert_ptr_null(r);
    /* abort drops a pending receipt at once */
    ck_assert_int_eq(store_receipt_abort(g_st, "k1", g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(rbegin("k1", H1, T0 + 7 + OPS_TTL, ex, NULL),
                     STORE_RECEIPT_NEW);
}
END_TEST

/* A pending record of an older dedupd (no window, 24 h TTL) no longer holds
 * its key for a day: its window has passed. */
START_TEST(test_store_receipt_pending_without_window_has_passed)
{
    unsigned char v[16 + 1 + 2 + 64 + 2];
    ck_assert_uint_eq(store_codec_receipt_encode(T0 + 86400000LL,
                                                 STORE_RECEIPT_PENDING, H1, 64,
                                                 "", 0, v, sizeof(v)),
                      sizeof(v));
    struct raw raw;
    raw_open(&raw);
    raw_put(&raw, RAW_RECEIPTS, "k1", v, sizeof(v));
    raw_close(&raw);
    reopen_as("a", "r2");
    char ex[65];
    ck_assert_int_eq(rbegin("k1", H2, T0 + 1, ex, NULL),
                     STORE_RECEIPT_UNSETTLED);
    ck_assert_int_eq(rbegin("k1", H1, T0 + 1, ex, NULL), STORE_RECEIPT_NEW);
    ck_assert_int_eq(rbegin("k1", H1, T0 + 2, ex, NULL), STORE_RECEIPT_PENDING);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* layout                                                                  */

/* Files in g_dir whose name starts with \p pre and ends with \p suf
 * (with something between); with \p bytes, their sizes summed there (a
 * file deleted meanwhile counts 0). */
static int files_like(const char *pre, const char *suf, size_t *bytes)
{
    DIR *d = opendir(g_dir);
    ck_assert_ptr_nonnull(d);
    int k = 0;
    struct dirent *e;
    char path[512];
    struct stat sb;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= strlen(pre) + strlen(suf)
            || strncmp(e->d_name, pre, strlen(pre)) != 0
            || strcmp(e->d_name + n - strlen(suf), suf) != 0)
            continue;
        k++;
        snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
        if (bytes && stat(path, &sb) == 0)
            *bytes += (size_t)sb.st_size;
    }
    closedir(d);
    return k;
}

/* RocksDB leaves an OPTIONS-*.dbtmp at each open and each column family it
 * creates (it cannot write options naming no info LOG); store_open deletes
 * them, so restarts do not pile them up. */
START_TEST(test_store_open_leaves_no_options_tmp_files)
{
    ck_assert_int_gt(files_like("MANIFEST-", "", NULL), 0);
    ck_assert_int_eq(files_like("OPTIONS-", ".dbtmp", NULL), 0);
    /* files of other names stay: only OPTIONS-<something>.dbtmp goes */
    static const char *const keep[] = {"OPTIONS-000001", "OPTIONS-.dbtmp",
                                       "xOPTIONS-1.dbtmp", "OPTIONS-1.tmp"};
    char path[512];
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", g_dir, keep[i]);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    reopen_as("a", "r2");
    reopen_as("a", "r3");
    ck_assert_int_eq(files_like("OPTIONS-", ".dbtmp", NULL), 0);
    ck_assert_int_gt(files_like("MANIFEST-", "", NULL), 0);
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", g_dir, keep[i]);
        ck_assert_msg(access(path, F_OK) == 0, "%s deleted", keep[i]);
    }
}
END_TEST

START_TEST(test_store_open_creates_column_families_and_layout_version)
{
    char *err = NULL;
    size_t n = 0;
    store_close(g_st);
    g_st = NULL;
    rocksdb_options_t *o = rocksdb_options_create();
    char **names = rocksdb_list_column_families(o, g_dir, &n, &err);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    ck_assert_uint_eq(n, RAW_CF_N);
    for (int i = 0; i < RAW_CF_N; i++) {
        bool has = false;
        for (size_t j = 0; j < n; j++)
            has = has || strcmp(names[j], raw_cf_names[i]) == 0;
        ck_assert_msg(has, "missing column family %s", raw_cf_names[i]);
    }
    rocksdb_list_column_families_destroy(names, n);
    rocksdb_options_destroy(o);

    struct raw r;
    raw_open(&r);
    size_t vlen = 0;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    char *v = rocksdb_get_cf(r.db, ro, r.cf[RAW_META], "layout_version", 14,
                             &vlen, &err);
    rocksdb_readoptions_destroy(ro);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(vlen, 4);
    ck_assert_mem_eq(v, "\x01\x00\x00\x00", 4);
    rocksdb_free(v);
    raw_close(&r);
    reopen_as("a", "r2");
}
END_TEST

START_TEST(test_store_newer_layout_version_is_fatal)
{
    struct raw r;
    raw_open(&r);
    raw_put(&r, RAW_META, "layout_version", "\x02\x00\x00\x00", 4);
    char *err = NULL;
    /* a newer dedupd may add column families: they must not hide the cause */
    rocksdb_column_family_handle_t *h =
        rocksdb_create_column_family(r.db, r.opts, "future", &err);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    rocksdb_column_family_handle_destroy(h);
    raw_close(&r);

    char want[256];
    snprintf(want, sizeof(want),
             "store at %s has layout version 2, newer than this dedupd's 1",
             g_dir);
    ck_assert_int_eq(open_as("a", "r2"), DD_ERR_FATAL);
    ck_assert_ptr_null(g_st);
    ck_assert_str_eq(g_err, want);
}
END_TEST

START_TEST(test_store_corrupt_op_record_is_fatal)
{
    struct raw r;
    raw_open(&r);
    raw_put(&r, RAW_OPS, "short", "xyz", 3);
    unsigned char future[24] = {9, 1};
    raw_put(&r, RAW_OPS, "future", future, sizeof(future));
    unsigned char truncated[20] = {1, 1};
    raw_put(&r, RAW_OPS, "truncated", truncated, sizeof(truncated));
    raw_close(&r);
    reopen_as("a", "r2");

    struct store_op op;
    bool found;
    enum store_claim_result res;
    ck_assert_int_eq(store_op_get(g_st, "short", T0, &op, &found, g_err,
                                  sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'short' is corrupt: 3 bytes, "
                            "shorter than its header");
    ck_assert_int_eq(store_claim(g_st, "future", H1, EK1, "s", T0, &res, &op,
                                 g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'future' has layout version 9 "
                            "type 1, expected version 1 type 1");
    ck_assert_int_eq(store_op_get(g_st, "truncated", T0, &op, &found, g_err,
                                  sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'truncated' is corrupt (20 "
                            "bytes, state 0, outbox state 0)");

    /* the filter keeps what it cannot read */
    store_set_filter_clock(g_st, INT64_MAX);
    store_compact(g_st);
    raw_open(&r);
    ck_assert(raw_exists(&r, RAW_OPS, "short"));
    ck_assert(raw_exists(&r, RAW_OPS, "future"));
    raw_close(&r);
    reopen_as("a", "r3");
}
END_TEST

/* ---------------------------------------------------------------------- */
/* forget                                                                  */

START_TEST(test_store_forget_drops_op)
{
    struct store_op op;
    bool found = false;
    int64_t now = wall_ms();
    ck_assert_int_eq(claim("op-1", H1, now, &op), STORE_CLAIM_NEW);
    complete("op-1", 1, "v", now);
    ck_assert_int_eq(store_forget(g_st, "op-1", &found, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(found);
    ck_assert(!get("op-1", 0, &op));
    ck_assert_int_eq(store_forget(g_st, "op-1", &found, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(!found);
    ck_assert_int_eq(claim("op-1", H2, now + 1, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_forget(g_st, "", &found, g_err, sizeof(g_err)),
                     DD_ERR_INVAL);
    /* an expired record is not "found", yet removed */
    ck_assert_int_eq(claim("op-old", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_forget(g_st, "op-old", &found, g_err,
                                  sizeof(g_err)),
                     DD_OK);
    ck_assert(!found);
    ck_assert(!get("op-old", 0, &op));
}
END_TEST

START_TEST(test_store_2str)
{
    ck_assert_str_eq(store_claim_result2str(STORE_CLAIM_NEW), "new");
    ck_assert_str_eq(store_claim_result2str(STORE_CLAIM_DUPLICATE),
                     "duplicate");
    ck_assert_str_eq(store_claim_result2str(STORE_CLAIM_CONFLICT), "conflict");
    ck_assert_str_eq(store_claim_result2str(STORE_CLAIM_RECLAIMED),
                     "reclaimed");
    ck_assert_str_eq(store_claim_result2str((enum store_claim_result)99),
                     "unknown");
    ck_assert_str_eq(store_op_state2str(STORE_OP_RUNNING), "running");
    ck_assert_str_eq(store_op_state2str(STORE_OP_RETRYABLE), "retryable");
    ck_assert_str_eq(store_op_state2str(STORE_OP_COMPLETE), "complete");
    ck_assert_str_eq(store_op_state2str(STORE_OP_FAILED), "failed");
    ck_assert_str_eq(store_op_state2str((enum store_op_state)0), "unknown");
}
END_TEST

/* ---------------------------------------------------------------------- */
/* attempts                                                                */

static struct store_attempt attempt(uint32_t number, int32_t status,
                                    const char *category, const char *error)
{
    struct store_attempt a;
    memset(&a, 0, sizeof(a));
    a.number = number;
    a.generation = 1;
    a.started_at_ms = T0 + number * 10;
    a.ended_at_ms = T0 + number * 10 + 5;
    a.status = status;
    a.bytes = 1000u * number;
    snprintf(a.session, sizeof(a.session), "s-%u", number);
    snprintf(a.exit_addr, sizeof(a.exit_addr), "proxy-%u:3128", number);
    snprintf(a.category, sizeof(a.category), "%s", category);
    snprintf(a.error, sizeof(a.error), "%s", error);
    return a;
}

static void attempts_get(const char *op_id, int64_t now,
                         struct store_attempt **out, size_t *n)
{
    ck_assert_int_eq(store_attempts_get(g_st, op_id, now, out, n, g_err,
                                        sizeof(g_err)),
                     DD_OK);
}

START_TEST(test_store_attempts_put_get_in_number_order_and_expire)
{
    struct store_attempt in[3] = {attempt(10, 200, "", ""),
                                  attempt(1, 0, "timeout", "no answer"),
                                  attempt(2, 503, "http_5xx", "busy")};
    struct store_attempt other = attempt(1, 404, "http_4xx", "gone");
    struct store_attempt *out = NULL;
    size_t n = 0;
    ck_assert_int_eq(store_attempts_put(g_st, "op", in, 3, T0, g_err,
                                        sizeof(g_err)),
                     DD_OK);
    /* ops whose ids extend "op" keep their own attempts */
    ck_assert_int_eq(store_attempts_put(g_st, "op\nxyzw", &other, 1, T0,
                                        g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(store_attempts_put(g_st, "opx", &other, 1, T0, g_err,
                                        sizeof(g_err)),
                     DD_OK);

    attempts_get("op", T0, &out, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(out[0].number, 1);
    ck_assert_uint_eq(out[1].number, 2);
    ck_assert_uint_eq(out[2].number, 10);
    ck_assert_int_eq(memcmp(&out[0], &in[1], sizeof(in[1])), 0);
    ck_assert_int_eq(memcmp(&out[1], &in[2], sizeof(in[2])), 0);
    ck_assert_int_eq(memcmp(&out[2], &in[0], sizeof(in[0])), 0);
    free(out);

    /* same number again: overwritten */
    struct store_attempt again = attempt(2, 200, "", "");
    ck_assert_int_eq(store_attempts_put(g_st, "op", &again, 1, T0 + 100,
                                        g_err, sizeof(g_err)),
                     DD_OK);
    attempts_get("op", T0, &out, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(out[1].status, 200);
    ck_assert_str_eq(out[1].category, "");
    free(out);

    attempts_get("op\nxyzw", T0, &out, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(out[0].error, "gone");
    free(out);
    attempts_get("nope", T0, &out, &n);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(out);

    /* TTL of ops from the write: 1 and 10 at T0, 2 rewritten at T0 + 100 */
    attempts_get("op", T0 + OPS_TTL, &out, &n);
    ck_assert_uint_eq(n, 3);
    free(out);
    attempts_get("op", T0 + OPS_TTL + 1, &out, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(out[0].number, 2);
    free(out);
    attempts_get("op", T0 + 101 + OPS_TTL, &out, &n);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(out);

    /* the compaction filter drops them */
    store_set_filter_clock(g_st, T0 + 101 + OPS_TTL);
    store_compact(g_st);
    store_set_filter_clock(g_st, 0);
    attempts_get("op", 0, &out, &n);
    ck_assert_uint_eq(n, 0);
    attempts_get("opx", 0, &out, &n);
    ck_assert_uint_eq(n, 0);
}
END_TEST

static dd_err_t retry_rc(const char *op_id, uint64_t gen, int64_t not_before,
                         uint32_t attempts, const char *category,
                         const struct store_attempt *a, int64_t now)
{
    return store_op_retry(g_st, op_id, gen, not_before, attempts, category, a,
                          now, g_err, sizeof(g_err));
}

static dd_err_t resume_rc(const char *op_id, uint64_t gen, int64_t now)
{
    return store_op_resume(g_st, op_id, gen, now, g_err, sizeof(g_err));
}

/* running -> retryable -> running -> complete, with every illegal step of
 * the way refused (DESIGN.md section 4). */
START_TEST(test_store_retryable_transitions_and_illegal_ones)
{
    struct store_op op;
    struct store_attempt a1 = attempt(1, 429, "throttled", "HTTP 429");
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    /* resume of a running op: illegal */
    ck_assert_int_eq(resume_rc("op-1", 1, T0 + 1),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_op_resume(op-1): op is running, not "
                            "retryable");
    /* stale generation, empty category: refused, nothing written */
    ck_assert_int_eq(retry_rc("op-1", 2, T0 + 5000, 1, "throttled", &a1, T0 + 10),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_op_retry(op-1): stale generation 2, "
                            "current 1");
    ck_assert_int_eq(retry_rc("op-1", 1, T0 + 5000, 1, "", &a1, T0 + 10),
                     DD_ERR_INVAL);
    ck_assert(get("op-1", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);

    ck_assert_int_eq(retry_rc("op-1", 1, T0 + 5000, 1, "throttled", &a1, T0 + 10),
                     DD_OK);
    ck_assert(get("op-1", T0 + 11, &op));
    ck_assert_int_eq(op.state, STORE_OP_RETRYABLE);
    ck_assert_int_eq(op.not_before_ms, T0 + 5000);
    ck_assert_uint_eq(op.attempts, 1);
    ck_assert_str_eq(op.category, "throttled");
    ck_assert_uint_eq(op.generation, 1);
    ck_assert_int_eq(op.lease_expires_at_ms, T0 + 10 + LEASE);
    struct store_attempt *as = NULL;
    size_t n = 0;
    attempts_get("op-1", T0 + 11, &as, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(as[0].status, 429);
    ck_assert_str_eq(as[0].error, "HTTP 429");
    free(as);
    /* a duplicate while it waits is in flight here, not a new claim */
    ck_assert_int_eq(claim("op-1", H1, T0 + 12, &op), STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(op.state, STORE_OP_RETRYABLE);
    enum store_op_state ist;
    ck_assert(!store_index_duplicate(g_st, "op-1", 4, H1, T0 + 12, &ist));
    /* a retry recorded while retryable (its resume was not recorded) moves
     * not_before on; the lease renews while it waits */
    ck_assert_int_eq(retry_rc("op-1", 1, T0 + 5000, 1, "throttled", NULL, T0 + 13),
                     DD_OK);
    ck_assert_int_eq(store_lease_renew(g_st, "op-1", 1, T0 + 20, g_err,
                                       sizeof(g_err)),
                     DD_OK);
    /* resume before not_before: illegal */
    ck_assert_int_eq(resume_rc("op-1", 1, T0 + 4999),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_op_resume(op-1): retryable not before "
                            "1005000, 1 ms from now");
    ck_assert_int_eq(resume_rc("op-1", 2, T0 + 5000),
                     DD_ERR_STATE);
    ck_assert_int_eq(resume_rc("op-1", 1, T0 + 5000),
                     DD_OK);
    ck_assert(get("op-1", T0 + 5001, &op));
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert_int_eq(op.not_before_ms, 0);
    ck_assert_uint_eq(op.attempts, 1);
    complete("op-1", 1, "v", T0 + 5100);
    ck_assert(get("op-1", T0 + 5101, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    /* a finished op: neither retry nor resume */
    ck_assert_int_eq(retry_rc("op-1", 1, T0 + 9000, 2, "throttled", NULL, T0 + 5200),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_op_retry(op-1): op is complete, not "
                            "running or retryable");
    ck_assert_int_eq(resume_rc("op-1", 1, T0 + 9000),
                     DD_ERR_STATE);
}
END_TEST

/* A retry wait that runs out of deadline fails from retryable; another
 * instance may not touch the op; the record survives reopen. */
START_TEST(test_store_retryable_fails_from_wait_and_fences_others)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(retry_rc("op-1", 1, T0 + 3000, 3, "server_error", NULL, T0 + 10),
                     DD_OK);
    uint64_t seq = 0;
    ck_assert_int_eq(store_complete(g_st, "op-1", 2, STORE_OP_FAILED, "timeout",
                                    3, "v", 1, T0 + 20, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_STATE);
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_FAILED, "timeout",
                                    3, "v", 1, T0 + 20, &seq, g_err,
                                    sizeof(g_err)),
                     DD_OK);
    ck_assert(get("op-1", T0 + 21, &op));
    ck_assert_int_eq(op.state, STORE_OP_FAILED);
    ck_assert_str_eq(op.category, "timeout");
    ck_assert_int_eq(op.not_before_ms, 0);
    ck_assert_int_eq(op.expires_at_ms, T0 + 20 + OPS_TTL);

    ck_assert_int_eq(claim("op-2", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(retry_rc("op-2", 1, T0 + 3000, 1, "connect", NULL, T0 + 10),
                     DD_OK);
    reopen_as("b", "r1");
    ck_assert(get("op-2", T0 + 11, &op));
    ck_assert_int_eq(op.state, STORE_OP_RETRYABLE);
    ck_assert_int_eq(op.not_before_ms, T0 + 3000);
    ck_assert_int_eq(resume_rc("op-2", 1, T0 + 3000),
                     DD_ERR_STATE);
    ck_assert_str_eq(g_err, "store_op_resume(op-2): lease held by a#r1, not "
                            "by this run b#r1");
    ck_assert_int_eq(claim("op-2", H1, T0 + 12, &op), STORE_CLAIM_DUPLICATE);
}
END_TEST

/* The holder died while the op waited: the next holder reclaims it with
 * generation + 1, keeps its attempts and must wait out not_before; the
 * stale generation can neither resume nor complete. */
START_TEST(test_store_retryable_reclaimed_keeps_not_before)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(retry_rc("op-1", 1, T0 + 30000, 2, "throttled", NULL, T0 + 10),
                     DD_OK);
    reopen_as("a", "r2"); /* a restart: the lease of a#r1 is void */
    ck_assert_int_eq(claim("op-1", H1, T0 + 100, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_int_eq(op.state, STORE_OP_RETRYABLE);
    ck_assert_uint_eq(op.generation, 2);
    ck_assert_str_eq(op.lease_owner, "a#r2");
    ck_assert_uint_eq(op.attempts, 2);
    ck_assert_int_eq(op.not_before_ms, T0 + 30000);
    /* a crash again before the wait ended: the wait is still there */
    reopen_as("a", "r3");
    ck_assert_int_eq(claim("op-1", H1, T0 + 200, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_int_eq(op.state, STORE_OP_RETRYABLE);
    ck_assert_uint_eq(op.generation, 3);
    ck_assert_int_eq(op.not_before_ms, T0 + 30000);
    ck_assert_int_eq(resume_rc("op-1", 2, T0 + 30000),
                     DD_ERR_STATE);
    ck_assert_int_eq(resume_rc("op-1", 3, T0 + 29999),
                     DD_ERR_STATE);
    ck_assert_int_eq(resume_rc("op-1", 3, T0 + 30000),
                     DD_OK);
    ck_assert(get("op-1", T0 + 30001, &op));
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert_int_eq(op.not_before_ms, 0);
    uint64_t seq = 0;
    ck_assert_int_eq(store_complete(g_st, "op-1", 1, STORE_OP_COMPLETE, NULL,
                                    3, "v", 1, T0 + 30001, &seq, g_err,
                                    sizeof(g_err)),
                     DD_ERR_STATE);
    complete("op-1", 3, "v", T0 + 30100);
    ck_assert(get("op-1", T0 + 30101, &op));
    ck_assert_int_eq(op.not_before_ms, 0);
    /* a running op reclaimed after a crash has no wait */
    ck_assert_int_eq(claim("op-2", H1, T0 + 200, &op), STORE_CLAIM_NEW);
    reopen_as("a", "r4");
    ck_assert_int_eq(claim("op-2", H1, T0 + 300, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_int_eq(op.not_before_ms, 0);
}
END_TEST

/* Group commit: a completion returns before its fsync with a ticket; the
 * store's syncer makes it durable (store_durable reaches the ticket) without
 * anyone waiting; without group commit every write is durable at once. */
START_TEST(test_store_group_commit_tickets_become_durable)
{
    struct store_op op;
    ck_assert_uint_eq(store_durable(g_st), UINT64_MAX);
    store_close(g_st);
    g_st = NULL;
    struct store_conf conf = {
        .path = g_dir, .instance = "a", .run_id = "r2", .ops_ttl_ms = OPS_TTL,
        .failed_ttl_ms = FAILED_TTL, .lease_ms = LEASE,
        .block_cache_bytes = 8 << 20, .sync = true, .group_commit = true,
        .validators_ttl_ms = VAL_TTL, .max_body_bytes = MAX_BODY,
    };
    ck_assert_msg(store_open(&conf, &g_st, g_err, sizeof(g_err)) == DD_OK,
                  "store_open: %s", g_err);
    ck_assert_uint_eq(store_durable(g_st), 0);
    uint64_t last = 0;
    for (int b = 0; b < 20; b++) {
        char id[32];
        snprintf(id, sizeof(id), "gc-%d", b);
        ck_assert_int_eq(claim(id, H1, T0, &op), STORE_CLAIM_NEW);
        struct store_complete_req r = {
            .op_id = id, .generation = 1, .state = STORE_OP_COMPLETE,
            .attempts = 1, .value = "v", .value_len = 1,
        };
        ck_assert_int_eq(store_complete_batch(g_st, &r, 1, T0 + 1, g_err,
                                              sizeof(g_err)),
                         DD_OK);
        ck_assert_int_eq(r.err, DD_OK);
        ck_assert_uint_gt(r.ticket, last); /* one ticket per batch */
        last = r.ticket;
    }
    uint64_t d = 0;
    /* up to 60 s: the syncer is a thread of its own, which a loaded
     * machine or valgrind may starve; it returns as soon as it syncs */
    for (int i = 0; i < 6000 && (d = store_durable(g_st)) < last; i++)
        usleep(10 * 1000);
    ck_assert_uint_eq(d, last);
    /* a completion pending at close is made durable by the close */
    ck_assert_int_eq(claim("gc-last", H1, T0, &op), STORE_CLAIM_NEW);
    struct store_complete_req r = {
        .op_id = "gc-last", .generation = 1, .state = STORE_OP_COMPLETE,
        .attempts = 1, .value = "v", .value_len = 1,
    };
    ck_assert_int_eq(store_complete_batch(g_st, &r, 1, T0 + 2, g_err,
                                          sizeof(g_err)),
                     DD_OK);
    ck_assert_uint_eq(r.ticket, last + 1);
    /* store_sync_now makes it durable on the caller's thread */
    ck_assert_int_eq(store_sync_now(g_st, g_err, sizeof(g_err)), DD_OK);
    ck_assert_uint_ge(store_durable(g_st), last + 1);
    ck_assert(!store_sync_failed(g_st));
    ck_assert(!store_write_failed(g_st, NULL, 0));
    reopen_as("a", "r3");
    ck_assert(get("gc-last", T0 + 3, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
}
END_TEST

START_TEST(test_store_complete_batch_one_write_fences_each_op_alone)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-a", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-b", H2, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-c", H1, T0, &op), STORE_CLAIM_NEW);
    struct store_attempt at[2] = {attempt(1, 429, "throttled", "slow down"),
                                  attempt(2, 200, "", "")};
    struct store_attempt bad = attempt(0, 200, "", "");
    struct store_complete_req r[5] = {
        {.op_id = "op-a", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 2, .value = "A", .value_len = 1, .attempt_log = at,
         .n_attempt_log = 2},
        /* stale generation: fenced, writes nothing, not even its attempts */
        {.op_id = "op-b", .generation = 7, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "B", .value_len = 1, .attempt_log = at,
         .n_attempt_log = 2},
        {.op_id = "op-c", .generation = 1, .state = STORE_OP_FAILED,
         .category = "timeout", .attempts = 3, .value = "C", .value_len = 1},
        /* the same op twice in one batch: the first wins */
        {.op_id = "op-a", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 2, .value = "A2", .value_len = 2},
        /* a bad attempt record refuses the completion alone */
        {.op_id = "op-b", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "B", .value_len = 1, .attempt_log = &bad,
         .n_attempt_log = 1},
    };
    ck_assert_int_eq(store_complete_batch(g_st, r, 5, T0 + 10, g_err,
                                          sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r[0].err, DD_OK);
    ck_assert_int_eq(r[1].err, DD_ERR_STATE);
    ck_assert_str_eq(r[1].errstr, "store_complete_batch(op-b): stale "
                                  "generation 7, current 1");
    ck_assert_int_eq(r[2].err, DD_OK);
    ck_assert_int_eq(r[3].err, DD_ERR_STATE);
    ck_assert_int_eq(r[4].err, DD_ERR_INVAL);
    /* errstr carries the first failure */
    ck_assert_str_eq(g_err, r[1].errstr);
    ck_assert_uint_eq(r[0].seq, 1);
    ck_assert_uint_eq(r[2].seq, 2);
    ck_assert_uint_eq(store_outbox_pending(g_st), 2);

    ck_assert(get("op-a", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_uint_eq(op.outbox_seq, 1);
    ck_assert_uint_eq(op.attempts, 2);
    ck_assert(get("op-b", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert(get("op-c", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_FAILED);
    ck_assert_str_eq(op.category, "timeout");
    ck_assert_int_eq(op.expires_at_ms, T0 + 10 + OPS_TTL);

    struct store_attempt *out = NULL;
    size_t n = 0;
    attempts_get("op-a", T0 + 10, &out, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(memcmp(&out[0], &at[0], sizeof(at[0])), 0);
    free(out);
    attempts_get("op-b", T0 + 10, &out, &n);
    ck_assert_uint_eq(n, 0);
    free(out);

    outbox_is((const char *const[][2]){{"op-a", "A"}, {"op-c", "C"}}, 2);
    /* an empty batch is a no-op */
    ck_assert_int_eq(store_complete_batch(g_st, r, 0, T0, g_err,
                                          sizeof(g_err)),
                     DD_OK);
}
END_TEST

/* An op_id repeated in one batch, its copies apart and among others: the
 * first copy in batch order that stands is written, every later one is
 * refused; a fenced first copy, or one refused before the stripes (a bad
 * attempt record), does not fence a later one. */
START_TEST(test_store_complete_batch_repeated_op_first_standing_wins)
{
    struct store_op op;
    ck_assert_int_eq(claim("rep-x", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("rep-a", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("rep-z", H2, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("rep-b", H2, T0, &op), STORE_CLAIM_NEW);
    struct store_attempt bad = attempt(0, 200, "", "");
    struct store_complete_req r[9] = {
        {.op_id = "rep-z", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "Z1", .value_len = 2},
        /* stale: fenced, and so not the copy that fences the next ones */
        {.op_id = "rep-x", .generation = 9, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "X1", .value_len = 2},
        {.op_id = "rep-a", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "A1", .value_len = 2},
        {.op_id = "rep-x", .generation = 1, .state = STORE_OP_FAILED,
         .category = "timeout", .attempts = 2, .value = "X2",
         .value_len = 2},
        {.op_id = "rep-z", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "Z2", .value_len = 2},
        {.op_id = "rep-x", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 3, .value = "X3", .value_len = 2},
        {.op_id = "rep-z", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "Z3", .value_len = 2},
        /* refused in the preparation: never staged, fences nothing */
        {.op_id = "rep-b", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "B1", .value_len = 2, .attempt_log = &bad,
         .n_attempt_log = 1},
        {.op_id = "rep-b", .generation = 1, .state = STORE_OP_COMPLETE,
         .attempts = 1, .value = "B2", .value_len = 2},
    };
    ck_assert_int_eq(store_complete_batch(g_st, r, 9, T0 + 10, g_err,
                                          sizeof(g_err)),
                     DD_OK);
    const dd_err_t want[9] = {DD_OK,        DD_ERR_STATE, DD_OK,
                              DD_OK,        DD_ERR_STATE, DD_ERR_STATE,
                              DD_ERR_STATE, DD_ERR_INVAL, DD_OK};
    for (size_t i = 0; i < 9; i++)
        ck_assert_msg(r[i].err == want[i], "request %zu: err %d, want %d",
                      i, (int)r[i].err, (int)want[i]);
    ck_assert_str_eq(r[1].errstr, "store_complete_batch(rep-x): stale "
                                  "generation 9, current 1");
    ck_assert_str_eq(r[4].errstr, "store_complete_batch(rep-z): completed "
                                  "twice in one batch");
    ck_assert_str_eq(r[5].errstr, "store_complete_batch(rep-x): completed "
                                  "twice in one batch");
    ck_assert_str_eq(r[6].errstr, "store_complete_batch(rep-z): completed "
                                  "twice in one batch");
    /* errstr carries the first failure in batch order */
    ck_assert_str_eq(g_err, r[1].errstr);
    for (size_t i = 4; i < 8; i++)
        ck_assert_uint_eq(r[i].seq, 0);
    ck_assert_uint_eq(store_outbox_pending(g_st), 4);
    ck_assert(get("rep-x", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_FAILED);
    ck_assert_uint_eq(op.attempts, 2);
    ck_assert(get("rep-z", T0 + 10, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    /* the outbox in staging (op_id) order; each value the first standing
     * copy's */
    outbox_is((const char *const[][2]){{"rep-a", "A1"},
                                       {"rep-b", "B2"},
                                       {"rep-x", "X2"},
                                       {"rep-z", "Z1"}},
              4);
}
END_TEST

START_TEST(test_store_attempts_put_rejects_number_0_and_bad_op_id)
{
    struct store_attempt a = attempt(0, 200, "", "");
    struct store_attempt *out = NULL;
    size_t n = 7;
    ck_assert_int_eq(store_attempts_put(g_st, "op", &a, 1, T0, g_err,
                                        sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_attempts_put(op): attempt 0 has number 0 "
                            "(must be >= 1) or an unterminated string");
    a.number = 1;
    memset(a.error, 'x', sizeof(a.error));
    ck_assert_int_eq(store_attempts_put(g_st, "op", &a, 1, T0, g_err,
                                        sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_int_eq(store_attempts_put(g_st, "", &a, 1, T0, g_err,
                                        sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_int_eq(store_attempts_get(g_st, "", T0, &out, &n, g_err,
                                        sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err, "store_attempts_get: op_id of 0 bytes (must be "
                            "1..512)");
    ck_assert_uint_eq(n, 0);
    attempts_get("op", T0, &out, &n);
    ck_assert_uint_eq(n, 0);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* batched claims and the hot index                                        */

static void wait_index_complete(struct store *st)
{
    struct store_index_stats is;
    for (int i = 0; i < 12000; i++) { /* up to 60 s (valgrind, a loaded machine) */
        store_index_stats_get(st, &is);
        if (is.complete)
            return;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    ck_abort_msg("hot index not complete after 10 s");
}

static void op_assert_eq(const struct store_op *x, const struct store_op *y,
                         const char *what)
{
    ck_assert_msg(x->state == y->state && x->outbox_state == y->outbox_state
                      && x->generation == y->generation
                      && x->lease_expires_at_ms == y->lease_expires_at_ms
                      && x->created_at_ms == y->created_at_ms
                      && x->updated_at_ms == y->updated_at_ms
                      && x->expires_at_ms == y->expires_at_ms
                      && x->attempts == y->attempts
                      && x->outbox_seq == y->outbox_seq
                      && strcmp(x->request_hash, y->request_hash) == 0
                      && strcmp(x->event_key, y->event_key) == 0
                      && strcmp(x->lease_owner, y->lease_owner) == 0
                      && strcmp(x->source, y->source) == 0
                      && strcmp(x->category, y->category) == 0,
                  "%s: ops differ (state %d/%d, gen %llu/%llu, owner %s/%s)",
                  what, x->state, y->state,
                  (unsigned long long)x->generation,
                  (unsigned long long)y->generation, x->lease_owner,
                  y->lease_owner);
}

static struct store *open_store(const char *dir, const char *instance,
                                const char *run_id, size_t index_max_bytes)
{
    struct store *st = NULL;
    struct store_conf conf = {
        .path = dir,
        .instance = instance,
        .run_id = run_id,
        .ops_ttl_ms = OPS_TTL,
        .failed_ttl_ms = FAILED_TTL,
        .lease_ms = LEASE,
        .block_cache_bytes = 8 << 20,
        .index_max_bytes = index_max_bytes,
    };
    ck_assert_msg(store_open(&conf, &st, g_err, sizeof(g_err)) == DD_OK,
                  "store_open(%s): %s", dir, g_err);
    return st;
}

#define RB_IDS 150
#define RB_ROUNDS 70
#define RB_MAX 200

/* A randomized workload through store_claim on store A and store_claim_batch
 * on store B: same answers in array order, same records afterwards.  Batches
 * repeat op_ids, conflict, meet running, finished, failed, forgotten and
 * expired ops, and reclaim after restarts (as a new run of the instance, as
 * another instance waiting out leases). */
START_TEST(test_store_claim_batch_matches_sequential_claims)
{
    char dir_b[64];
    snprintf(dir_b, sizeof(dir_b), "/tmp/dedupd-store-b-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir_b));
    struct store *sa = g_st, *sb = open_store(dir_b, "a", "r1", 0);
    static struct store_claim_req reqs[RB_MAX];
    static char ids[RB_MAX][32], srcs[RB_MAX][32];
    enum store_claim_result ra[RB_MAX];
    static struct store_op opa[RB_MAX];
    unsigned seed = 20261129;
    int64_t now = wall_ms(); /* at or past the filter clock: index answers */
    int from_index = 0, news = 0, reclaims = 0, conflicts = 0, expired = 0;
    wait_index_complete(sb);

    for (int round = 0; round < RB_ROUNDS; round++) {
        /* restarts: a new run reclaims at once; another instance waits */
        if (round == 20 || round == 35 || round == 50) {
            const char *inst = round == 35 ? "b" : "a";
            char run[16];
            snprintf(run, sizeof(run), "r%d", round);
            store_close(sa);
            store_close(sb);
            g_st = sa = open_store(g_dir, inst, run, 0);
            sb = open_store(dir_b, inst, run, 0);
            if (round != 50) /* at 50, claim during the rebuild */
                wait_index_complete(sb);
        }
        int nb = 1 + (int)(rand_r(&seed) % RB_MAX);
        for (int j = 0; j < nb; j++) {
            int id = rand_r(&seed) % 4 == 0 ? (int)(rand_r(&seed) % 8)
                                            : (int)(rand_r(&seed) % RB_IDS);
            snprintf(ids[j], sizeof(ids[j]), "rb-%d", id);
            snprintf(srcs[j], sizeof(srcs[j]), "t/0/%d", round * 1000 + j);
            bool other = rand_r(&seed) % 12 == 0;
            reqs[j] = (struct store_claim_req){
                .op_id = ids[j],
                .request_hash = other ? H2 : H1,
                .event_key = other ? EK2 : EK1,
                .source = srcs[j],
            };
            ck_assert_int_eq(store_claim(sa, ids[j], reqs[j].request_hash,
                                         reqs[j].event_key, srcs[j], now,
                                         &ra[j], &opa[j], g_err,
                                         sizeof(g_err)),
                             DD_OK);
        }
        ck_assert_int_eq(store_claim_batch(sb, reqs, (size_t)nb, now, g_err,
                                           sizeof(g_err)),
                         DD_OK);
        for (int j = 0; j < nb; j++) {
            char what[96];
            snprintf(what, sizeof(what), "round %d request %d (%s)", round, j,
                     ids[j]);
            ck_assert_int_eq(reqs[j].err, DD_OK);
            ck_assert_msg(reqs[j].result == ra[j], "%s: batch %s, single %s",
                          what, store_claim_result2str(reqs[j].result),
                          store_claim_result2str(ra[j]));
            news += ra[j] == STORE_CLAIM_NEW;
            reclaims += ra[j] == STORE_CLAIM_RECLAIMED;
            conflicts += ra[j] == STORE_CLAIM_CONFLICT;
            if (reqs[j].op.generation == 0) {
                /* answered by the index: the fields it holds */
                from_index++;
                ck_assert_int_eq(ra[j], STORE_CLAIM_DUPLICATE);
                ck_assert_int_eq(reqs[j].op.state, opa[j].state);
                ck_assert_int_eq(reqs[j].op.outbox_state,
                                 opa[j].outbox_state);
                ck_assert_int_eq(reqs[j].op.expires_at_ms,
                                 opa[j].expires_at_ms);
                ck_assert_str_eq(reqs[j].op.request_hash,
                                 opa[j].request_hash);
            } else {
                op_assert_eq(&reqs[j].op, &opa[j], what);
            }
        }

        /* the same finishing, renewing, acking and forgetting on both */
        for (int id = 0; id < RB_IDS; id++) {
            char op_id[32];
            struct store_op oa, ob;
            snprintf(op_id, sizeof(op_id), "rb-%d", id);
            bool fa = get_in(sa, op_id, now, &oa), fb = get_in(sb, op_id, now,
                                                                &ob);
            ck_assert_int_eq(fa, fb);
            if (!fa)
                continue;
            op_assert_eq(&oa, &ob, op_id);
            unsigned dice = rand_r(&seed) % 100;
            if (oa.state == STORE_OP_RUNNING
                && strcmp(oa.lease_owner, store_owner(sa)) == 0) {
                if (dice < 40 || dice >= 95) {
                    bool failed = dice >= 95;
                    uint64_t s1 = 0, s2 = 0;
                    for (int k = 0; k < 2; k++)
                        ck_assert_int_eq(
                            store_complete(k ? sb : sa, op_id, oa.generation,
                                           failed ? STORE_OP_FAILED
                                                  : STORE_OP_COMPLETE,
                                           failed ? "timeout" : NULL, 1, "v",
                                           1, now, k ? &s2 : &s1, g_err,
                                           sizeof(g_err)),
                            DD_OK);
                    ck_assert_uint_eq(s1, s2);
                } else if (dice < 60) {
                    for (int k = 0; k < 2; k++)
                        ck_assert_int_eq(store_lease_renew(k ? sb : sa, op_id,
                                                           oa.generation, now,
                                                           g_err,
                                                           sizeof(g_err)),
                                         DD_OK);
                }
            } else if (oa.outbox_state == STORE_OUTBOX_PENDING && dice < 50) {
                for (int k = 0; k < 2; k++)
                    ck_assert_int_eq(store_outbox_ack(k ? sb : sa,
                                                      oa.outbox_seq, op_id,
                                                      g_err, sizeof(g_err)),
                                     DD_OK);
            } else if (dice >= 97) {
                bool f1 = false, f2 = false;
                ck_assert_int_eq(store_forget(sa, op_id, &f1, g_err,
                                              sizeof(g_err)),
                                 DD_OK);
                ck_assert_int_eq(store_forget(sb, op_id, &f2, g_err,
                                              sizeof(g_err)),
                                 DD_OK);
                ck_assert_int_eq(f1, f2);
            }
        }

        /* time goes on: a moment, past leases, past the failed or ops TTL */
        unsigned dice = rand_r(&seed) % 100;
        if (dice < 60)
            now += 1 + rand_r(&seed) % 1000;
        else if (dice < 80)
            now += LEASE + 1;
        else if (dice < 92)
            now += FAILED_TTL + 1;
        else {
            now += OPS_TTL + 1;
            expired++;
        }
    }
    struct store_index_stats is;
    store_index_stats_get(sb, &is);
    ck_assert_msg(from_index > 100 && news > 100 && reclaims > 10
                      && conflicts > 20 && expired > 0,
                  "workload too tame: %d from index, %d new, %d reclaimed, "
                  "%d conflicts, %d expiries",
                  from_index, news, reclaims, conflicts, expired);
    ck_assert_uint_gt(is.hits, 0);
    store_close(sb);
    nftw(dir_b, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

START_TEST(test_store_claim_batch_bad_request_fails_alone)
{
    struct store_claim_req r[3] = {
        {.op_id = "ok-1", .request_hash = H1, .event_key = EK1, .source = "s"},
        {.op_id = "", .request_hash = H1, .event_key = EK1, .source = "s"},
        {.op_id = "ok-1", .request_hash = "", .event_key = EK1, .source = "s"},
    };
    g_err[0] = '\0';
    ck_assert_int_eq(store_claim_batch(g_st, r, 3, T0, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r[0].err, DD_OK);
    ck_assert_int_eq(r[0].result, STORE_CLAIM_NEW);
    ck_assert_int_eq(r[1].err, DD_ERR_INVAL);
    ck_assert_int_eq(r[2].err, DD_ERR_INVAL);
    /* errstr holds the first request's error */
    ck_assert_str_eq(g_err, "store_claim_batch: op_id of 0 bytes (must be "
                            "1..512)");
    struct store_op op;
    ck_assert(get("ok-1", T0, &op));
    ck_assert_int_eq(op.state, STORE_OP_RUNNING);
    ck_assert_int_eq(store_claim_batch(g_st, r, 0, T0, g_err, sizeof(g_err)),
                     DD_OK);
}
END_TEST

/* Claim and finish n ops "ix-<i>" through the batch API at now. */
static void claim_and_complete(struct store *st, int n, int64_t now)
{
    struct store_claim_req *r = calloc((size_t)n, sizeof(*r));
    char(*id)[32] = calloc((size_t)n, sizeof(*id));
    for (int i = 0; i < n; i++) {
        snprintf(id[i], sizeof(id[i]), "ix-%d", i);
        r[i] = (struct store_claim_req){.op_id = id[i], .request_hash = H1, .event_key = EK1, .source = "t/0/0"};
    }
    for (int i = 0; i < n; i += 1000) {
        int k = n - i < 1000 ? n - i : 1000;
        ck_assert_int_eq(store_claim_batch(st, r + i, (size_t)k, now, g_err,
                                           sizeof(g_err)),
                         DD_OK);
    }
    for (int i = 0; i < n; i++) {
        uint64_t seq;
        ck_assert_int_eq(r[i].err, DD_OK);
        ck_assert_int_eq(r[i].result, STORE_CLAIM_NEW);
        ck_assert_int_eq(store_complete(st, id[i], 1,
                                        i % 10 ? STORE_OP_COMPLETE
                                               : STORE_OP_FAILED,
                                        i % 10 ? NULL : "timeout", 1, "v", 1,
                                        now, &seq, g_err, sizeof(g_err)),
                         DD_OK);
        if (i % 2)
            ck_assert_int_eq(store_outbox_ack(st, seq, id[i], g_err,
                                              sizeof(g_err)),
                             DD_OK);
    }
    free(r);
    free(id);
}

/* Claim "ix-<from..to)" plus \p fresh new ids in one batch; check answers. */
static void claim_all_again(struct store *st, int from, int to, int fresh,
                            int64_t now)
{
    int n = to - from + fresh;
    struct store_claim_req *r = calloc((size_t)n, sizeof(*r));
    char(*id)[32] = calloc((size_t)n, sizeof(*id));
    for (int i = 0; i < n; i++) {
        if (i < to - from)
            snprintf(id[i], sizeof(id[i]), "ix-%d", from + i);
        else
            snprintf(id[i], sizeof(id[i]), "fresh-%lld-%d", (long long)now,
                     i);
        r[i] = (struct store_claim_req){.op_id = id[i], .request_hash = H1, .event_key = EK1, .source = "t/0/1"};
    }
    ck_assert_int_eq(store_claim_batch(st, r, (size_t)n, now, g_err,
                                       sizeof(g_err)),
                     DD_OK);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(r[i].err, DD_OK);
        if (i >= to - from) {
            ck_assert_int_eq(r[i].result, STORE_CLAIM_NEW);
            continue;
        }
        int x = from + i;
        ck_assert_int_eq(r[i].result, STORE_CLAIM_DUPLICATE);
        ck_assert_int_eq(r[i].op.state,
                         x % 10 ? STORE_OP_COMPLETE : STORE_OP_FAILED);
        ck_assert_int_eq(r[i].op.outbox_state,
                         x % 2 ? STORE_OUTBOX_SENT : STORE_OUTBOX_PENDING);
    }
    free(r);
    free(id);
}

/* The ops' memtable is a hash of skiplists keyed by the whole op_id
 * (store_db.c set_hash_memtable): op_ids of every length the store takes,
 * some sharing all but their last byte, each keep their own record, in the
 * memtable and after a reopen (SSTs, and the index rebuilt from them).  A
 * fixed-length prefix extractor fails it (checked with 8 bytes: RocksDB
 * aborts on the shorter keys).  What it cannot see: long keys that share a
 * bucket (slower, still correct), and an ops iterator without total order
 * (the reopen flushes the replayed WAL, so the rebuild meets an empty
 * memtable). */
START_TEST(test_store_op_ids_of_any_length_keep_their_own_records)
{
    int64_t now = wall_ms();
    static const size_t lens[] = {1, 2, 7, 8, 9, 63, 64, 65, 200,
                                  STORE_KEY_MAX};
    enum { NL = sizeof(lens) / sizeof(lens[0]) };
    char ids[2 * NL][STORE_KEY_MAX + 1];
    for (size_t i = 0; i < NL; i++)
        for (int twin = 0; twin < 2; twin++) {
            char *id = ids[2 * i + (size_t)twin];
            memset(id, 'k', lens[i]);
            id[lens[i]] = '\0';
            if (twin)
                id[lens[i] - 1] = 'z'; /* differs in its last byte only */
        }
    struct store_op op;
    for (size_t i = 0; i < 2 * NL; i++)
        ck_assert_int_eq(claim(ids[i], H1, now, &op), STORE_CLAIM_NEW);
    for (size_t i = 0; i < 2 * NL; i += 2) /* one of each pair completed */
        complete(ids[i], 1, "{}", now);
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < 2 * NL; i++) {
            ck_assert_msg(get(ids[i], now, &op), "op_id of %zu bytes lost",
                          strlen(ids[i]));
            ck_assert_int_eq(op.state, i % 2 ? STORE_OP_RUNNING
                                             : STORE_OP_COMPLETE);
        }
        for (size_t i = 0; i < 2 * NL; i += 2) {
            ck_assert_int_eq(claim(ids[i], H1, now, &op),
                             STORE_CLAIM_DUPLICATE);
            ck_assert_uint_eq(op.generation, 1);
        }
        reopen_as("a", "r2");
        wait_index_complete(g_st);
    }
    enum store_op_state st = 0;
    for (size_t i = 0; i < 2 * NL; i += 2)
        ck_assert_msg(store_index_duplicate(g_st, ids[i], strlen(ids[i]), H1,
                                            now, &st),
                      "op_id of %zu bytes not in the rebuilt index",
                      strlen(ids[i]));
}
END_TEST

START_TEST(test_store_index_rebuilt_at_open_answers_duplicates_without_reads)
{
    int64_t now = wall_ms();
    struct store_index_stats a, b;
    claim_and_complete(g_st, 3000, now);
    reopen_as("a", "r2");
    ck_assert(store_index_wait(g_st, 60000)); /* the rebuild is over */
    store_index_stats_get(g_st, &a);
    ck_assert(a.complete);
    ck_assert_uint_ge(a.entries, 3000);
    /* 64 bytes per op_id at most, beyond a floor of 64 slots per segment */
    ck_assert_uint_le(a.bytes, 64 * a.entries + (256 << 10));

    /* every duplicate of a complete op and every new op decided without
     * one RocksDB read; a failed op (one in ten) is read: whether it may
     * be claimed again (failed_ttl_ms after its failure) is in RocksDB */
    claim_all_again(g_st, 0, 3000, 500, now + 1000);
    store_index_stats_get(g_st, &b);
    ck_assert_uint_eq(b.misses - a.misses, 300);
    ck_assert_uint_eq(b.hits - a.hits, 3200);

    enum store_op_state st = 0;
    ck_assert(store_index_duplicate(g_st, "ix-11", 5, H1, now + 1000, &st));
    ck_assert_int_eq(st, STORE_OP_COMPLETE);
    ck_assert(!store_index_duplicate(g_st, "ix-10", 5, H1, now + 1000, &st));
    store_index_stats_get(g_st, &a);
    ck_assert_uint_eq(a.hits - b.hits, 1);
    ck_assert_uint_eq(a.misses - b.misses, 1);

    /* the full path still returns whole records */
    struct store_op op;
    ck_assert_int_eq(claim("ix-11", H1, now + 1000, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_uint_eq(op.generation, 1);
    ck_assert_str_eq(op.event_key, EK1);
}
END_TEST

START_TEST(test_store_index_bound_reached_is_not_complete_and_answers_stay_correct)
{
    int64_t now = wall_ms();
    struct store_index_stats is;
    store_close(g_st);
    /* 32 slots per segment: about 1600 op_ids */
    g_st = open_store(g_dir, "a", "r1", 64 << 10);
    wait_index_complete(g_st);
    claim_and_complete(g_st, 5000, now);
    store_index_stats_get(g_st, &is);
    ck_assert(!is.complete);
    ck_assert_uint_le(is.entries, is.capacity);
    ck_assert_uint_le(is.capacity * 32, 64 << 10);

    claim_all_again(g_st, 0, 5000, 300, now + 1);
    struct store_index_stats after;
    store_index_stats_get(g_st, &after);
    ck_assert_uint_gt(after.misses, is.misses); /* RocksDB answered some */
    ck_assert_uint_gt(after.hits, is.hits);     /* the index others */

    /* the fast path is never wrong, only sometimes unable */
    int proven = 0;
    for (int i = 0; i < 5000; i++) {
        char id[32];
        int n = snprintf(id, sizeof(id), "ix-%d", i);
        proven += store_index_duplicate(g_st, id, (size_t)n, H1, now + 2,
                                        NULL);
        ck_assert(!store_index_duplicate(g_st, id, (size_t)n, H2, now + 2,
                                         NULL));
    }
    ck_assert_int_gt(proven, 500);
    ck_assert_int_lt(proven, 5000);

    /* the poll batch's form (store_index_prepare, then
     * store_index_duplicate_key; 5000 keys: more than one prefetch chunk)
     * answers as the single form, key for key; keys it cannot have (NULL,
     * empty, too long) are never proven */
    enum { NB = 5003 };
    const void **ids = calloc(NB, sizeof(*ids));
    size_t *lens = calloc(NB, sizeof(*lens));
    char(*buf)[32] = calloc(NB, sizeof(*buf));
    struct store_fast_key *fk = calloc(NB, sizeof(*fk));
    static char too_long[STORE_KEY_MAX + 1];
    memset(too_long, 'x', sizeof(too_long));
    ck_assert(ids && lens && buf && fk);
    for (int i = 0; i < 5000; i++) {
        lens[i] = (size_t)snprintf(buf[i], sizeof(buf[i]), "ix-%d", i);
        ids[i] = buf[i];
    }
    lens[5000] = 4; /* NULL */
    ids[5001] = "ix-1"; /* length 0 */
    ids[5002] = too_long;
    lens[5002] = sizeof(too_long);
    store_index_prepare(g_st, ids, lens, NB, fk);
    int proven_key = 0;
    for (int i = 0; i < NB; i++) {
        bool dup = store_index_duplicate_key(g_st, &fk[i], H1, 64, now + 2,
                                             NULL);
        if (i < 5000)
            ck_assert_int_eq(dup, store_index_duplicate(g_st, buf[i],
                                                        lens[i], H1,
                                                        now + 2, NULL));
        else
            ck_assert(!dup && fk[i].k1 == 0);
        ck_assert(!store_index_duplicate_key(g_st, &fk[i], H2, 64, now + 2,
                                             NULL));
        proven_key += dup;
    }
    ck_assert_int_eq(proven_key, proven);
    free(ids);
    free(lens);
    free(buf);
    free(fk);

    /* after a reopen the rebuild hits the bound too */
    store_close(g_st);
    g_st = open_store(g_dir, "a", "r2", 64 << 10);
    /* a wait for the rebuild ends at the bound (the rest adds nothing) */
    ck_assert(store_index_wait(g_st, 60000));
    store_index_stats_get(g_st, &is);
    ck_assert(!is.complete);
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL); /* complete never: during the rebuild or after */
    store_index_stats_get(g_st, &is);
    ck_assert(!is.complete);
    claim_all_again(g_st, 0, 5000, 300, now + 3);
}
END_TEST

START_TEST(test_store_index_duplicate_false_for_conflict_running_and_expired)
{
    int64_t now = wall_ms();
    enum store_op_state st = 0;
    struct store_op op;
    uint64_t seq;
    wait_index_complete(g_st);
    ck_assert(!store_index_duplicate(g_st, "op-1", 4, H1, now, &st));
    ck_assert_int_eq(claim("op-1", H1, now, &op), STORE_CLAIM_NEW);
    /* running: in flight is not done */
    ck_assert(!store_index_duplicate(g_st, "op-1", 4, H1, now, &st));
    complete("op-1", 1, "v", now + 10);
    ck_assert(store_index_duplicate(g_st, "op-1", 4, H1, now + 10, &st));
    ck_assert_int_eq(st, STORE_OP_COMPLETE);
    /* another request_hash: a conflict, never a duplicate */
    ck_assert(!store_index_duplicate(g_st, "op-1", 4, H2, now + 10, &st));
    /* op_id bytes, not a C string */
    ck_assert(!store_index_duplicate(g_st, "op-1x", 4 + 1, H1, now, &st));
    ck_assert(!store_index_duplicate(g_st, "op-1", 0, H1, now, &st));
    /* live up to and including expires_at (C-28) */
    ck_assert(store_index_duplicate(g_st, "op-1", 4, H1, now + 10 + OPS_TTL,
                                    NULL));
    ck_assert(!store_index_duplicate(g_st, "op-1", 4, H1,
                                     now + 11 + OPS_TTL, NULL));

    /* a failed op is never proven here: it may be claimed again after
     * failed_ttl_ms, which RocksDB's record tells */
    ck_assert_int_eq(claim("op-2", H1, now, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_complete(g_st, "op-2", 1, STORE_OP_FAILED, "dns",
                                    2, "v", 1, now, &seq, g_err,
                                    sizeof(g_err)),
                     DD_OK);
    ck_assert(!store_index_duplicate(g_st, "op-2", 4, H1, now, &st));
    ck_assert(!store_index_duplicate(g_st, "op-2", 4, H1,
                                     now + FAILED_TTL + 1, &st));

    /* forgotten: gone from the index at once */
    bool found = false;
    ck_assert_int_eq(store_forget(g_st, "op-1", &found, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert(found);
    ck_assert(!store_index_duplicate(g_st, "op-1", 4, H1, now + 10, &st));
    ck_assert_int_eq(claim("op-1", H1, now + 20, &op), STORE_CLAIM_NEW);

    /* before the filter clock RocksDB answers: the filter may have run */
    ck_assert_int_eq(claim("op-3", H1, now, &op), STORE_CLAIM_NEW);
    complete("op-3", 1, "v", now);
    ck_assert(store_index_duplicate(g_st, "op-3", 4, H1, now, &st));
    store_set_filter_clock(g_st, now + OPS_TTL + 1);
    ck_assert(!store_index_duplicate(g_st, "op-3", 4, H1, now, &st));
    store_set_filter_clock(g_st, 0);
}
END_TEST

/* racing: batches and single claims on the same op_ids */

#define RACEB_CHUNK 100

static void *race_batch_worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    static const int mult[RACE_THREADS] = {1, 3, 7, 9, 11, 13, 17, 19};
    struct store_claim_req reqs[RACEB_CHUNK + RACEB_CHUNK / 10];
    char ids[RACEB_CHUNK + RACEB_CHUNK / 10][32];
    int idn[RACEB_CHUNK + RACEB_CHUNK / 10];
    char err[256];
    pthread_barrier_wait(&race_barrier);
    for (int i = 0; i < RACE_IDS; i += RACEB_CHUNK) {
        int n = 0;
        for (int j = i; j < i + RACEB_CHUNK && j < RACE_IDS; j++) {
            int id = (j * mult[t] + t * 250) % RACE_IDS;
            idn[n] = id;
            snprintf(ids[n], sizeof(ids[n]), "race-%d", id);
            n++;
            if (j % 10 == 0) { /* the same op twice in one batch */
                idn[n] = id;
                snprintf(ids[n], sizeof(ids[n]), "race-%d", id);
                n++;
            }
        }
        for (int j = 0; j < n; j++)
            reqs[j] = (struct store_claim_req){.op_id = ids[j], .request_hash = H1, .event_key = EK1, .source = "t/0/1"};
        if (store_claim_batch(g_st, reqs, (size_t)n, T0, err, sizeof(err))
            != DD_OK) {
            atomic_fetch_add(&race_err, n);
            continue;
        }
        for (int j = 0; j < n; j++) {
            if (reqs[j].err != DD_OK)
                atomic_fetch_add(&race_err, 1);
            else if (reqs[j].result == STORE_CLAIM_NEW) {
                atomic_fetch_add(&race_new, 1);
                atomic_fetch_add(&race_new_per_id[idn[j]], 1);
            } else if (reqs[j].result == STORE_CLAIM_DUPLICATE)
                atomic_fetch_add(&race_dup, 1);
            else
                atomic_fetch_add(&race_other, 1);
        }
    }
    return NULL;
}

START_TEST(test_store_claim_race_batch_and_single_exactly_one_new_per_op_id)
{
    pthread_t th[RACE_THREADS];
    race_reset();
    pthread_barrier_init(&race_barrier, NULL, RACE_THREADS);
    for (int t = 0; t < RACE_THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL,
                                        t % 2 ? race_batch_worker
                                              : race_worker,
                                        (void *)(intptr_t)t),
                         0);
    for (int t = 0; t < RACE_THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&race_barrier);

    int repeats = (RACE_THREADS / 2) * (RACE_IDS / 10);
    ck_assert_int_eq(atomic_load(&race_err), 0);
    ck_assert_int_eq(atomic_load(&race_other), 0);
    ck_assert_int_eq(atomic_load(&race_new), RACE_IDS);
    ck_assert_int_eq(atomic_load(&race_dup),
                     (RACE_THREADS - 1) * RACE_IDS + repeats);
    for (int i = 0; i < RACE_IDS; i++) {
        int won = atomic_load(&race_new_per_id[i]);
        ck_assert_msg(won == 1, "race-%d won %d times", i, won);
    }
}
END_TEST

/* ---------------------------------------------------------------------- */
/* validators and bodies (conditional refetch)                             */

/* resource keys: 64 hex chars, like dedupd's */
#define RK1 "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
#define RK2 "a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2"
#define RK3 "a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3"
#define ETAG "\"v1-abc\""
#define LASTMOD "Wed, 21 Oct 2015 07:28:00 GMT"

/* A completion of op_id (generation 1) that stores a validator of \p rk. */
static struct store_complete_req val_req(const char *op_id, const char *rk,
                                         const char *body)
{
    return (struct store_complete_req){
        .op_id = op_id, .generation = 1, .state = STORE_OP_COMPLETE,
        .attempts = 1, .value = "R", .value_len = 1,
        .resource_key = rk, .etag = ETAG, .last_modified = LASTMOD,
        .content_type = "text/html; charset=utf-8",
        .final_url = "https://example.com/page?a=1", .http_status = 200,
        .body = body, .body_len = body ? strlen(body) : 0};
}

/* Claim each op of \p r (NEW), then complete them all in one batch. */
static void claim_complete(struct store_complete_req *r, size_t n,
                           int64_t now)
{
    struct store_op op;
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(claim(r[i].op_id, H1, now, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(store_complete_batch(g_st, r, n, now, g_err,
                                          sizeof(g_err)),
                     DD_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r[i].err == DD_OK, "%s: %s", r[i].op_id, r[i].errstr);
}

static struct store_validator g_val; /* 9.7 KB: not on the stack */

static bool vget(const char *rk, int64_t now)
{
    bool found = true;
    memset(&g_val, 0, sizeof(g_val));
    dd_err_t err = store_validator_get(g_st, rk, now, &g_val, &found, g_err,
                                       sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_validator_get(%s): %s", rk, g_err);
    return found;
}

/* Is body \p digest present at \p now; when \p want, with those bytes? */
static bool bget(const char *digest, int64_t now, const char *want)
{
    void *b = (void *)1;
    size_t len = 7;
    bool found = true;
    dd_err_t err = store_body_get(g_st, digest, now, &b, &len, &found, g_err,
                                  sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_body_get(%s): %s", digest, g_err);
    if (!found) {
        ck_assert_ptr_null(b);
        ck_assert_uint_eq(len, 0);
        return false;
    }
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(((char *)b)[len], '\0');
    if (want) {
        ck_assert_uint_eq(len, strlen(want));
        ck_assert_mem_eq(b, want, len);
    }
    free(b);
    return true;
}

static size_t raw_count(struct raw *r, int cf)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(r->db, ro, r->cf[cf]);
    size_t n = 0;
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it);
         rocksdb_iter_next(it))
        n++;
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return n;
}

START_TEST(test_store_validator_put_via_complete_batch_then_get)
{
    char digest[KEY_HEX_LEN + 1];
    key_sha256_hex("<html>hello</html>", 18, digest);
    ck_assert(!vget(RK1, T0));

    struct store_complete_req r[2] = {
        val_req("op-1", RK1, "<html>hello</html>"),
        /* the caller's digest is used as given */
        val_req("op-2", RK2, "other"),
    };
    r[1].etag = NULL; /* Last-Modified alone is a validator */
    r[1].content_type = NULL;
    r[1].final_url = NULL;
    r[1].http_status = 203;
    r[1].body_sha256 = H2;
    claim_complete(r, 2, T0);
    ck_assert_int_eq(r[0].validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert_int_eq(r[1].validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert_uint_eq(r[0].seq, 1);
    ck_assert_uint_eq(r[1].seq, 2);
    struct store_op op;
    ck_assert(get("op-1", T0, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);

    ck_assert(vget(RK1, T0 + 1));
    ck_assert_str_eq(g_val.etag, ETAG);
    ck_assert_str_eq(g_val.last_modified, LASTMOD);
    ck_assert_str_eq(g_val.body_sha256, digest);
    ck_assert_uint_eq(g_val.body_len, 18);
    ck_assert_int_eq(g_val.status, 200);
    ck_assert_str_eq(g_val.content_type, "text/html; charset=utf-8");
    ck_assert_str_eq(g_val.final_url, "https://example.com/page?a=1");
    ck_assert_int_eq(g_val.stored_at_ms, T0);
    ck_assert_int_eq(g_val.expires_at_ms, T0 + VAL_TTL);
    ck_assert(bget(digest, T0 + 1, "<html>hello</html>"));

    ck_assert(vget(RK2, T0 + 1));
    ck_assert_str_eq(g_val.etag, "");
    ck_assert_str_eq(g_val.last_modified, LASTMOD);
    ck_assert_str_eq(g_val.body_sha256, H2);
    ck_assert_int_eq(g_val.status, 203);
    ck_assert_str_eq(g_val.content_type, "");
    ck_assert_str_eq(g_val.final_url, "");
    ck_assert(bget(H2, T0 + 1, "other"));

    /* unknown keys, bad arguments */
    ck_assert(!vget(RK3, T0));
    ck_assert(!bget(H1, T0, NULL));
    bool found = true;
    void *b = NULL;
    size_t len = 0;
    ck_assert_int_eq(store_validator_get(g_st, "", T0, &g_val, &found, g_err,
                                         sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert(!found);
    ck_assert_int_eq(store_body_get(g_st, "ABC", T0, &b, &len, &found, g_err,
                                    sizeof(g_err)),
                     DD_ERR_INVAL);
    ck_assert_str_eq(g_err,
                     "store_body_get: 'ABC' is not 64 lowercase hex chars");

    /* a later completion of the same resource replaces its validator */
    struct store_complete_req r2 = val_req("op-3", RK1, "v2");
    r2.etag = "W/\"v2\"";
    claim_complete(&r2, 1, T0 + 50);
    ck_assert(vget(RK1, T0 + 50));
    ck_assert_str_eq(g_val.etag, "W/\"v2\"");
    ck_assert_uint_eq(g_val.body_len, 2);
    ck_assert(bget(g_val.body_sha256, T0 + 50, "v2"));
    /* the old body stays until its own expiry (other resources may have it) */
    ck_assert(bget(digest, T0 + 50, "<html>hello</html>"));
}
END_TEST

START_TEST(test_store_same_body_stored_once_for_two_resources)
{
    const char *page = "<html>same bytes</html>";
    char digest[KEY_HEX_LEN + 1];
    key_sha256_hex(page, strlen(page), digest);
    /* two resources with one body in one batch (single-flight waiters,
     * or two accounts seeing the same page), a third in a later batch */
    struct store_complete_req r[2] = {val_req("op-1", RK1, page),
                                      val_req("op-2", RK2, page)};
    claim_complete(r, 2, T0);
    struct store_complete_req r3 = val_req("op-3", RK3, page);
    claim_complete(&r3, 1, T0 + 10);
    ck_assert_int_eq(r3.validator_write, STORE_VALIDATOR_WRITTEN);
    const char *rks[3] = {RK1, RK2, RK3};
    for (int i = 0; i < 3; i++) {
        ck_assert(vget(rks[i], T0 + 10));
        ck_assert_str_eq(g_val.body_sha256, digest);
    }
    /* the shared body takes the expiry of its latest write */
    ck_assert(bget(digest, T0 + 10 + VAL_TTL, page));
    ck_assert(!bget(digest, T0 + 11 + VAL_TTL, NULL));

    struct raw raw;
    raw_open(&raw);
    ck_assert_uint_eq(raw_count(&raw, RAW_VALIDATORS), 3);
    ck_assert_uint_eq(raw_count(&raw, RAW_BODIES), 1);
    raw_close(&raw);
    reopen_as("a", "r2");
}
END_TEST

START_TEST(test_store_validator_ttl_absent_before_compaction_gone_after)
{
    struct store_complete_req r = val_req("op-1", RK1, "body");
    claim_complete(&r, 1, T0);
    char digest[KEY_HEX_LEN + 1];
    key_sha256_hex("body", 4, digest);

    /* live up to and including expires_at (C-28), absent after: on every
     * read, before any compaction */
    ck_assert(vget(RK1, T0 + VAL_TTL));
    ck_assert(bget(digest, T0 + VAL_TTL, "body"));
    ck_assert(!vget(RK1, T0 + VAL_TTL + 1));
    ck_assert(!bget(digest, T0 + VAL_TTL + 1, NULL));
    ck_assert(vget(RK1, 0)); /* the bytes are still there */

    /* the compaction filter handles both column families, same boundary */
    store_set_filter_clock(g_st, T0 + VAL_TTL);
    store_compact(g_st);
    ck_assert(vget(RK1, 0));
    ck_assert(bget(digest, 0, "body"));
    store_set_filter_clock(g_st, T0 + VAL_TTL + 1);
    store_compact(g_st);
    ck_assert(!vget(RK1, 0));
    ck_assert(!bget(digest, 0, NULL));
    store_set_filter_clock(g_st, 0);

    struct raw raw;
    raw_open(&raw);
    ck_assert_uint_eq(raw_count(&raw, RAW_VALIDATORS), 0);
    ck_assert_uint_eq(raw_count(&raw, RAW_BODIES), 0);
    raw_close(&raw);
    reopen_as("a", "r2");
}
END_TEST

START_TEST(test_store_validator_with_missing_or_expired_body_is_absent)
{
    char dx[KEY_HEX_LEN + 1];
    key_sha256_hex("X", 1, dx);
    /* RK1 stored at T0 + 1000 with body X; RK2 with the same body by a
     * completion stamped earlier (T0: another thread's clock, or the wall
     * clock stepped back).  The body keeps the later expiry (the body
     * clock, store_body_clock: an outbox entry may name it), so RK1 stays
     * whole to its own expiry; RK2 ends at its own */
    struct store_complete_req r1 = val_req("op-1", RK1, "X");
    claim_complete(&r1, 1, T0 + 1000);
    struct store_complete_req r2 = val_req("op-2", RK2, "X");
    claim_complete(&r2, 1, T0);
    ck_assert(vget(RK1, T0 + VAL_TTL + 1000));
    ck_assert(bget(dx, T0 + VAL_TTL + 1000, "X"));
    ck_assert(!vget(RK1, T0 + VAL_TTL + 1001));
    ck_assert(vget(RK2, T0 + VAL_TTL));
    ck_assert(!vget(RK2, T0 + VAL_TTL + 1));

    /* a body gone from the store: its validator is absent */
    struct store_complete_req r3 = val_req("op-3", RK3, "Y");
    claim_complete(&r3, 1, T0);
    ck_assert(vget(RK3, T0));
    struct raw raw;
    raw_open(&raw);
    char digest[KEY_HEX_LEN + 1];
    key_sha256_hex("Y", 1, digest);
    ck_assert(raw_exists(&raw, RAW_BODIES, digest));
    char *err = NULL;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_delete_cf(raw.db, wo, raw.cf[RAW_BODIES], digest, KEY_HEX_LEN,
                      &err);
    rocksdb_writeoptions_destroy(wo);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    ck_assert(raw_exists(&raw, RAW_VALIDATORS, RK3));
    /* a body that expires before its validator (written by a dedupd with a
     * shorter store.validators_ttl_ms, say): the validator is absent once
     * the body expired, though it is live itself */
    unsigned char bv[STORE_CODEC_BODY_HEAD_LEN + 1];
    ck_assert_uint_eq(store_codec_body_head(T0 + 10, 1, bv), sizeof(bv) - 1);
    bv[sizeof(bv) - 1] = 'X';
    raw_put(&raw, RAW_BODIES, dx, bv, sizeof(bv));
    raw_close(&raw);
    reopen_as("a", "r2");
    ck_assert(!vget(RK3, T0));
    ck_assert(!bget(digest, T0, NULL));
    ck_assert(vget(RK1, T0 + 10));
    ck_assert(!vget(RK1, T0 + 11)); /* live itself, body expired */
    ck_assert(bget(dx, T0 + 10, "X"));
}
END_TEST

START_TEST(test_store_validator_refused_cleared_too_large_not_stored)
{
    static char big[MAX_BODY + 2];
    memset(big, 'b', MAX_BODY + 1);
    struct store_op op;

    /* a body above store.max_body_bytes: not stored, completion commits,
     * and the resource's older validator (now stale) goes */
    struct store_complete_req r = val_req("op-1", RK1, "old");
    claim_complete(&r, 1, T0);
    ck_assert(vget(RK1, T0));
    r = val_req("op-2", RK1, big);
    claim_complete(&r, 1, T0 + 1);
    ck_assert_int_eq(r.validator_write, STORE_VALIDATOR_TOO_LARGE);
    ck_assert(get("op-2", T0 + 1, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert(!vget(RK1, T0 + 1));
    char dbig[KEY_HEX_LEN + 1];
    key_sha256_hex(big, MAX_BODY + 1, dbig);
    ck_assert(!bget(dbig, T0 + 1, NULL));
    /* exactly at the limit: stored */
    big[MAX_BODY] = '\0';
    r = val_req("op-3", RK1, big);
    claim_complete(&r, 1, T0 + 2);
    ck_assert_int_eq(r.validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert(vget(RK1, T0 + 2));
    ck_assert_uint_eq(g_val.body_len, MAX_BODY);
    ck_assert(bget(g_val.body_sha256, T0 + 2, big));

    /* a newer answer without ETag nor Last-Modified clears it */
    r = val_req("op-4", RK1, "new");
    r.etag = "";
    r.last_modified = NULL;
    claim_complete(&r, 1, T0 + 3);
    ck_assert_int_eq(r.validator_write, STORE_VALIDATOR_CLEARED);
    ck_assert(!vget(RK1, T0 + 3));

    /* fields out of range: refused, the completion commits */
    r = val_req("op-5", RK1, "x");
    claim_complete(&r, 1, T0 + 4);
    ck_assert(vget(RK1, T0 + 4));
    struct store_complete_req bad[5] = {
        val_req("op-6", RK1, "x"), val_req("op-7", "", "x"),
        val_req("op-8", RK2, "x"), val_req("op-9", RK3, "x"),
        val_req("op-10", RK2, NULL)};
    bad[0].etag = "\"a\"\r\nX-Injected: 1"; /* sent back as a header */
    bad[2].body_sha256 = "ABCD";            /* not 64 lowercase hex */
    static char url[STORE_URL_MAX + 2];
    memset(url, 'u', STORE_URL_MAX + 1);
    bad[3].final_url = url;
    bad[4].body_len = 3; /* NULL body with a length */
    claim_complete(bad, 5, T0 + 5);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(bad[i].validator_write, STORE_VALIDATOR_REFUSED);
    ck_assert(!vget(RK1, T0 + 5));
    ck_assert(!vget(RK2, T0 + 5));
    ck_assert(!vget(RK3, T0 + 5));
    ck_assert(get("op-9", T0 + 5, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    /* a URL of exactly STORE_URL_MAX bytes is fine */
    url[STORE_URL_MAX] = '\0';
    r = val_req("op-11", RK3, "x");
    r.final_url = url;
    claim_complete(&r, 1, T0 + 6);
    ck_assert_int_eq(r.validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert(vget(RK3, T0 + 6));
    ck_assert_str_eq(g_val.final_url, url);
}
END_TEST

START_TEST(test_store_validator_not_written_by_failed_or_fenced_completion)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-1", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-2", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-3", H1, T0, &op), STORE_CLAIM_NEW);
    struct store_complete_req r[3] = {val_req("op-1", RK1, "a"),
                                      val_req("op-2", RK2, "b"),
                                      val_req("op-3", RK3, "c")};
    r[0].state = STORE_OP_FAILED; /* only a complete answer is kept */
    r[0].category = "client_error";
    r[1].generation = 9;          /* fenced: writes nothing at all */
    ck_assert_int_eq(store_complete_batch(g_st, r, 3, T0, g_err,
                                          sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r[0].err, DD_OK);
    ck_assert_int_eq(r[0].validator_write, STORE_VALIDATOR_NONE);
    ck_assert_int_eq(r[1].err, DD_ERR_STATE);
    ck_assert_int_eq(r[1].validator_write, STORE_VALIDATOR_NONE);
    ck_assert_int_eq(r[2].err, DD_OK);
    ck_assert_int_eq(r[2].validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert(!vget(RK1, T0));
    ck_assert(!vget(RK2, T0));
    ck_assert(vget(RK3, T0));
    char d[KEY_HEX_LEN + 1];
    key_sha256_hex("b", 1, d);
    ck_assert(!bget(d, T0, NULL));
    key_sha256_hex("a", 1, d);
    ck_assert(!bget(d, T0, NULL));
}
END_TEST

/* A standing completion shares its body with a fenced one that comes first
 * in the batch but after it in op_id order (the order the batch is staged
 * in): the standing one writes the body. */
START_TEST(test_store_body_written_by_the_standing_twin_of_a_fenced_completion)
{
    struct store_op op;
    ck_assert_int_eq(claim("op-z", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-a", H1, T0, &op), STORE_CLAIM_NEW);
    struct store_complete_req r[2] = {val_req("op-z", RK1, "shared page"),
                                      val_req("op-a", RK2, "shared page")};
    r[0].generation = 9; /* fenced */
    ck_assert_int_eq(store_complete_batch(g_st, r, 2, T0, g_err,
                                          sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r[0].err, DD_ERR_STATE);
    ck_assert_int_eq(r[1].err, DD_OK);
    ck_assert_int_eq(r[1].validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert(!vget(RK1, T0));
    ck_assert(vget(RK2, T0));
    char d[KEY_HEX_LEN + 1];
    key_sha256_hex("shared page", 11, d);
    ck_assert(bget(d, T0, "shared page"));
}
END_TEST

/* Bytes of the store's WAL files (*.log) in g_dir. */
static size_t wal_bytes(void)
{
    size_t sum = 0;
    files_like("", ".log", &sum);
    return sum;
}

#define WAL_BOUND ((size_t)2 << 20)
#define WAL_PAGES 40
#define WAL_PAGE ((size_t)256 << 10)

/* store.max_wal_bytes: 10 MiB of pages go through a store whose quiet
 * column families (ops, attempts, validators: a few hundred bytes a page)
 * never fill their 32 MiB memtables, nor does the bodies' (10 MiB).  Without
 * the bound nothing is flushed and all 10 MiB stay in the WAL (RocksDB's
 * default bound here is 2.5 GiB); with it, RocksDB flushes the column
 * families of the oldest WAL file once the files pass 2 MiB, and deletes
 * that file. */
START_TEST(test_store_wal_stays_within_max_wal_bytes)
{
    store_close(g_st);
    struct store_conf conf = fixture_conf("a", "r2");
    conf.max_body_bytes = WAL_PAGE;
    conf.max_wal_bytes = WAL_BOUND;
    g_st = NULL;
    ck_assert_msg(store_open(&conf, &g_st, g_err, sizeof(g_err)) == DD_OK,
                  "store_open: %s", g_err);
    char *page = malloc(WAL_PAGE + 1);
    ck_assert_ptr_nonnull(page);
    memset(page, 'p', WAL_PAGE);
    page[WAL_PAGE] = '\0';
    for (int i = 0; i < WAL_PAGES; i++) {
        char op_id[32], rk[KEY_HEX_LEN + 1];
        snprintf(op_id, sizeof(op_id), "op-%d", i);
        key_sha256_hex(op_id, strlen(op_id), rk);
        snprintf(page, 32, "<html>%08d", i); /* a distinct body each */
        page[strlen(page)] = ' ';
        struct store_complete_req r = val_req(op_id, rk, page);
        claim_complete(&r, 1, T0 + i);
        ck_assert_int_eq(r.validator_write, STORE_VALIDATOR_WRITTEN);
        /* the files this test measures are where it looks: below the
         * bound nothing is flushed, so every page is still in them */
        if (i == 5)
            ck_assert_uint_ge(wal_bytes(), 6 * WAL_PAGE);
    }
    free(page);
    /* A flush started at the bound runs while later writes go on, so the
     * files pass the bound by what is written meanwhile; the next write
     * after it finished starts the next one.  Small writes (claims of other
     * ops) until the files are within the bound: at most 60 s (valgrind at
     * nice 19 beside the other stages, as elsewhere in this file). */
    size_t wal = wal_bytes();
    struct store_op op;
    for (int i = 0; i < 1200 && wal > WAL_BOUND; i++) {
        char op_id[32];
        snprintf(op_id, sizeof(op_id), "tick-%d", i);
        ck_assert_int_eq(claim(op_id, H1, T0 + WAL_PAGES, &op),
                         STORE_CLAIM_NEW);
        usleep(50 * 1000);
        wal = wal_bytes();
    }
    ck_assert_msg(wal <= WAL_BOUND,
                  "%zu bytes of WAL after %d pages of %zu bytes (bound %zu)",
                  wal, WAL_PAGES, WAL_PAGE, WAL_BOUND);
    /* every page is still there after a reopen */
    reopen_as("a", "r3");
    for (int i = 0; i < WAL_PAGES; i += 13) {
        char op_id[32], rk[KEY_HEX_LEN + 1];
        snprintf(op_id, sizeof(op_id), "op-%d", i);
        key_sha256_hex(op_id, strlen(op_id), rk);
        ck_assert_msg(vget(rk, T0 + WAL_PAGES), "%s", op_id);
        ck_assert_msg(bget(g_val.body_sha256, T0 + WAL_PAGES, NULL), "%s",
                      op_id);
    }
}
END_TEST

START_TEST(test_store_validators_survive_reopen)
{
    struct store_complete_req r[2] = {val_req("op-1", RK1, "one"),
                                      val_req("op-2", RK2, "two")};
    claim_complete(r, 2, T0);
    reopen_as("a", "r2");
    ck_assert(vget(RK1, T0 + 5));
    ck_assert_str_eq(g_val.etag, ETAG);
    ck_assert(bget(g_val.body_sha256, T0 + 5, "one"));
    ck_assert(vget(RK2, T0 + 5));
    ck_assert(bget(g_val.body_sha256, T0 + 5, "two"));
}
END_TEST

/* A store written before the validators and bodies column families
 * existed (created here with raw RocksDB, with an op in it) opens, gets
 * them, keeps its data and stores validators. */
START_TEST(test_store_without_validator_cfs_opens_and_gets_them)
{
    store_close(g_st);
    g_st = NULL;
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);

    struct store_op old;
    memset(&old, 0, sizeof(old));
    old.state = STORE_OP_COMPLETE;
    old.outbox_state = STORE_OUTBOX_SENT;
    old.generation = 1;
    old.created_at_ms = old.updated_at_ms = T0;
    old.expires_at_ms = T0 + OPS_TTL;
    old.attempts = 1;
    snprintf(old.request_hash, sizeof(old.request_hash), "%s", H1);
    snprintf(old.event_key, sizeof(old.event_key), "%s", EK1);
    unsigned char val[1024];
    ck_assert_uint_ge(sizeof(val), STORE_CODEC_OP_VALUE_MAX);
    size_t vlen = store_codec_op_encode(&old, val, sizeof(val));
    ck_assert_uint_gt(vlen, 0);

    char *err = NULL;
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_create_missing_column_families(o, 1);
    const rocksdb_options_t *copts[RAW_CF_N_BEFORE_VALIDATORS];
    rocksdb_column_family_handle_t *h[RAW_CF_N_BEFORE_VALIDATORS];
    for (int i = 0; i < RAW_CF_N_BEFORE_VALIDATORS; i++)
        copts[i] = o;
    rocksdb_t *db = rocksdb_open_column_families(
        o, g_dir, RAW_CF_N_BEFORE_VALIDATORS, raw_cf_names, copts, h, &err);
    ck_assert_msg(err == NULL, "raw create: %s", err ? err : "");
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put_cf(db, wo, h[RAW_META], "layout_version", 14,
                   "\x01\x00\x00\x00", 4, &err);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    rocksdb_put_cf(db, wo, h[RAW_OPS], "old-op", 6, (const char *)val, vlen,
                   &err);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    rocksdb_writeoptions_destroy(wo);
    for (int i = 0; i < RAW_CF_N_BEFORE_VALIDATORS; i++)
        rocksdb_column_family_handle_destroy(h[i]);
    rocksdb_close(db);
    size_t n = 0;
    char **names = rocksdb_list_column_families(o, g_dir, &n, &err);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    ck_assert_uint_eq(n, RAW_CF_N_BEFORE_VALIDATORS);
    rocksdb_list_column_families_destroy(names, n);

    ck_assert_msg(open_as("a", "r2") == DD_OK, "store_open: %s", g_err);
    struct store_op op;
    ck_assert(get("old-op", T0, &op));
    ck_assert_int_eq(op.state, STORE_OP_COMPLETE);
    ck_assert_int_eq(claim("old-op", H1, T0 + 1, &op), STORE_CLAIM_DUPLICATE);
    ck_assert(!vget(RK1, T0));
    struct store_complete_req r = val_req("op-1", RK1, "fresh");
    claim_complete(&r, 1, T0 + 1);
    ck_assert_int_eq(r.validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert(vget(RK1, T0 + 1));
    ck_assert(bget(g_val.body_sha256, T0 + 1, "fresh"));

    /* created, and kept by the next open */
    store_close(g_st);
    g_st = NULL;
    names = rocksdb_list_column_families(o, g_dir, &n, &err);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    ck_assert_uint_eq(n, RAW_CF_N);
    rocksdb_list_column_families_destroy(names, n);
    rocksdb_options_destroy(o);
    reopen_as("a", "r3");
    ck_assert(vget(RK1, T0 + 1));
}
END_TEST

/* ---------------------------------------------------------------------- */
/* outbox entries naming their body (issue 13: the page written once)    */

#define RAW_OUTBOX 2

/* The event a fetched result would be: a head, then "body":LITERAL}. */
struct named_event {
    char *value;
    size_t len, off, lit_len;
};

static struct named_event named_event(const char *op_id, const void *body,
                                      size_t body_len)
{
    char *lit = NULL;
    size_t lit_len = 0;
    const char *key = NULL;
    ck_assert_int_eq(jstr_body_literal(body, body_len, &lit, &lit_len, &key),
                     DD_OK);
    struct named_event e = {0};
    char head[256];
    int h = snprintf(head, sizeof(head), "{\"op_id\":\"%s\",\"%s\":", op_id,
                     key);
    e.len = (size_t)h + lit_len + 1;
    e.value = malloc(e.len + 1);
    ck_assert_ptr_nonnull(e.value);
    memcpy(e.value, head, (size_t)h);
    memcpy(e.value + h, lit, lit_len);
    e.value[e.len - 1] = '}';
    e.value[e.len] = '\0';
    e.off = (size_t)h;
    e.lit_len = lit_len;
    free(lit);
    return e;
}

static struct store_complete_req named_req(const char *op_id, const char *rk,
                                           const void *body, size_t body_len,
                                           const struct named_event *e)
{
    struct store_complete_req r = val_req(op_id, rk, NULL);
    r.body = body;
    r.body_len = body_len;
    r.value = e->value;
    r.value_len = e->len;
    r.body_lit_off = e->off;
    r.body_lit_len = e->lit_len;
    return r;
}

/* Every pending entry's event, whole, in seq order. */
struct whole_events {
    int n;
    uint64_t seq[4];
    char *value[4];
    size_t len[4];
};

static int whole_cb(void *opaque, uint64_t seq, const char *op_id,
                    const char *event_key, uint64_t generation,
                    const void *value, size_t value_len)
{
    (void)op_id;
    (void)event_key;
    (void)generation;
    struct whole_events *w = opaque;
    ck_assert_int_lt(w->n, 4);
    w->seq[w->n] = seq;
    w->value[w->n] = malloc(value_len + 1);
    memcpy(w->value[w->n], value, value_len);
    w->len[w->n++] = value_len;
    return 0;
}

static dd_err_t whole_events(struct whole_events *w)
{
    memset(w, 0, sizeof(*w));
    return store_outbox_foreach(g_st, whole_cb, w, g_err, sizeof(g_err));
}

static void whole_events_free(struct whole_events *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->value[i]);
}

/* The pending entries' events, in seq order, are byte for byte those of
 * the \p n named events that follow (const struct named_event *). */
static void expect_events(int n, ...)
{
    struct whole_events w;
    ck_assert_msg(whole_events(&w) == DD_OK, "%s", g_err);
    ck_assert_int_eq(w.n, n);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const struct named_event *e = va_arg(ap, const struct named_event *);
        ck_assert_uint_eq(w.len[i], e->len);
        ck_assert_mem_eq(w.value[i], e->value, e->len);
    }
    va_end(ap);
    whole_events_free(&w);
}

/* The raw outbox entry of \p seq (store closed): its record type, and
 * whether its bytes hold \p needle. */
static int raw_outbox_kind(struct raw *raw, uint64_t seq, const char *needle,
                           bool *holds)
{
    unsigned char key[STORE_CODEC_OUTBOX_KEY_LEN];
    store_codec_outbox_key(seq, key);
    char *err = NULL;
    size_t vlen = 0;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    char *v = rocksdb_get_cf(raw->db, ro, raw->cf[RAW_OUTBOX],
                             (const char *)key, sizeof(key), &vlen, &err);
    rocksdb_readoptions_destroy(ro);
    ck_assert_msg(err == NULL, "raw get: %s", err ? err : "");
    if (!v)
        return 0;
    *holds = memmem(v, vlen, needle, strlen(needle)) != NULL;
    int kind = vlen > 1 ? (unsigned char)v[1] : -1;
    rocksdb_free(v);
    return kind;
}

START_TEST(test_store_outbox_names_the_body_it_writes_and_rebuilds_it)
{
    /* a text page (quoted) and a binary one (base64) */
    const char *page = "<p>\"quoted\" page\n\\ with some length to it</p>";
    static const unsigned char bin[] = {0x89, 'P', 'N', 'G', 0, 1, 2, 0xff};
    struct named_event e1 = named_event("op-1", page, strlen(page));
    struct named_event e2 = named_event("op-2", bin, sizeof(bin));
    ck_assert_ptr_nonnull(strstr(e2.value, "\"body_base64\":"));
    /* op-3: a literal given, but no validator (nothing in "bodies"): the
     * entry keeps the whole event */
    struct named_event e3 = named_event("op-3", page, strlen(page));
    struct store_complete_req r[3] = {
        named_req("op-1", RK1, page, strlen(page), &e1),
        named_req("op-2", RK2, bin, sizeof(bin), &e2),
        named_req("op-3", RK3, page, strlen(page), &e3),
    };
    r[2].etag = NULL;
    r[2].last_modified = NULL;
    claim_complete(r, 3, T0);
    ck_assert_int_eq(r[0].validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert_int_eq(r[1].validator_write, STORE_VALIDATOR_WRITTEN);
    ck_assert_int_eq(r[2].validator_write, STORE_VALIDATOR_CLEARED);

    struct whole_events w;
    ck_assert_int_eq(whole_events(&w), DD_OK);
    ck_assert_int_eq(w.n, 3);
    const struct named_event *want[3] = {&e1, &e2, &e3};
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(w.seq[i], r[i].seq);
        ck_assert_uint_eq(w.len[i], want[i]->len);
        ck_assert_mem_eq(w.value[i], want[i]->value, want[i]->len);
    }
    whole_events_free(&w);

    /* on disk: the page once, in "bodies"; op-3's entry holds its event */
    struct raw raw;
    raw_open(&raw);
    bool holds = true;
    ck_assert_int_eq(raw_outbox_kind(&raw, r[0].seq, "with some length",
                                     &holds), STORE_CODEC_OUTBOX_REF);
    ck_assert(!holds);
    ck_assert_int_eq(raw_outbox_kind(&raw, r[1].seq, "op-2", &holds),
                     STORE_CODEC_OUTBOX_REF);
    ck_assert(holds);
    ck_assert_int_eq(raw_outbox_kind(&raw, r[2].seq, "with some length",
                                     &holds), STORE_CODEC_OUTBOX);
    ck_assert(holds);
    raw_close(&raw);
    reopen_as("a", "r2");

    /* long past the bodies' TTL: pending entries keep their bodies from
     * compaction (reads for conditional refetch call them expired) */
    char d1[KEY_HEX_LEN + 1];
    key_sha256_hex(page, strlen(page), d1);
    store_set_filter_clock(g_st, T0 + 3 * VAL_TTL);
    store_compact(g_st);
    ck_assert(!bget(d1, T0 + VAL_TTL + 1, NULL));
    ck_assert(bget(d1, 0, page));
    ck_assert_int_eq(whole_events(&w), DD_OK);
    ck_assert_int_eq(w.n, 3);
    ck_assert_mem_eq(w.value[0], e1.value, e1.len);
    ck_assert_mem_eq(w.value[1], e2.value, e2.len);
    whole_events_free(&w);

    /* op-1 acknowledged: its body still stays, since op-2, completed in
     * the same second, is pending (the floor is a time, not a list) */
    ck_assert_int_eq(store_outbox_ack(g_st, r[0].seq, "op-1", g_err,
                                      sizeof(g_err)), DD_OK);
    store_compact(g_st);
    ck_assert(bget(d1, 0, page));
    ck_assert_int_eq(whole_events(&w), DD_OK);
    ck_assert_int_eq(w.n, 2);
    ck_assert_mem_eq(w.value[0], e2.value, e2.len);
    whole_events_free(&w);
    struct store_outbox_ack_req a[2] = {{.seq = r[1].seq, .op_id = "op-2"},
                                        {.seq = r[2].seq, .op_id = "op-3"}};
    ck_assert_int_eq(store_outbox_ack_batch(g_st, a, 2, g_err,
                                            sizeof(g_err)), DD_OK);
    ck_assert_int_eq(a[0].err, DD_OK);
    store_compact(g_st);
    store_set_filter_clock(g_st, 0);
    raw_open(&raw);
    ck_assert_uint_eq(raw_count(&raw, RAW_BODIES), 0);
    raw_close(&raw);
    reopen_as("a", "r3");
    free(e1.value);
    free(e2.value);
    free(e3.value);
}
END_TEST

/* The floor follows the oldest pending completion: a body that expired
 * before it goes, one written at or after it stays. */
START_TEST(test_store_outbox_body_floor_follows_the_oldest_pending_entry)
{
    const char *p1 = "the first page", *p2 = "the second page";
    struct named_event e1 = named_event("op-1", p1, strlen(p1));
    struct named_event e2 = named_event("op-2", p2, strlen(p2));
    struct store_complete_req r1 = named_req("op-1", RK1, p1, strlen(p1),
                                             &e1);
    struct store_complete_req r2 = named_req("op-2", RK2, p2, strlen(p2),
                                             &e2);
    int64_t t2 = T0 + VAL_TTL + 5000;
    claim_complete(&r1, 1, T0);
    claim_complete(&r2, 1, t2);
    char d1[KEY_HEX_LEN + 1], d2[KEY_HEX_LEN + 1];
    key_sha256_hex(p1, strlen(p1), d1);
    key_sha256_hex(p2, strlen(p2), d2);
    store_set_filter_clock(g_st, t2 + 2 * VAL_TTL);
    store_compact(g_st);
    ck_assert(bget(d1, 0, p1));
    ck_assert(bget(d2, 0, p2));
    ck_assert_int_eq(store_outbox_ack(g_st, r1.seq, "op-1", g_err,
                                      sizeof(g_err)), DD_OK);
    store_compact(g_st);
    ck_assert(!bget(d1, 0, NULL));
    ck_assert(bget(d2, 0, p2));
    expect_events(1, &e2);
    store_set_filter_clock(g_st, 0);
    free(e1.value);
    free(e2.value);
}
END_TEST

/* The wall clock steps back by more than the TTL: a later completion of
 * the same page (another op) puts the body again with the body clock, not
 * an earlier expiry, so the pending entry that named it keeps it. */
START_TEST(test_store_outbox_body_kept_when_the_clock_steps_back)
{
    const char *page = "one page, two ops";
    struct named_event ea = named_event("op-a", page, strlen(page));
    struct named_event eb = named_event("op-b", page, strlen(page));
    struct store_complete_req ra = named_req("op-a", RK1, page, strlen(page),
                                             &ea);
    struct store_complete_req rb = named_req("op-b", RK2, page, strlen(page),
                                             &eb);
    claim_complete(&ra, 1, T0 + 3 * VAL_TTL);
    claim_complete(&rb, 1, T0); /* the clock went back */
    ck_assert_int_eq(store_outbox_ack(g_st, rb.seq, "op-b", g_err,
                                      sizeof(g_err)), DD_OK);
    char d[KEY_HEX_LEN + 1];
    key_sha256_hex(page, strlen(page), d);
    store_set_filter_clock(g_st, T0 + 10 * VAL_TTL);
    store_compact(g_st);
    ck_assert(bget(d, 0, page));
    expect_events(1, &ea);
    store_set_filter_clock(g_st, 0);
    free(ea.value);
    free(eb.value);
}
END_TEST

/* An entry pending for half the TTL is rewritten whole and unpinned: the
 * bodies written since may expire again, and the replay gives the same
 * bytes from the entry alone. */
START_TEST(test_store_outbox_entry_pending_half_the_ttl_holds_its_page_again)
{
    const char *page = "a page the broker keeps refusing";
    struct named_event e = named_event("op-1", page, strlen(page));
    struct store_complete_req r = named_req("op-1", RK1, page, strlen(page),
                                            &e);
    claim_complete(&r, 1, T0);
    size_t n = 9;
    ck_assert_int_eq(store_outbox_unpin_old(g_st, T0 + VAL_TTL / 2 - 1000, &n,
                                            g_err, sizeof(g_err)), DD_OK);
    ck_assert_uint_eq(n, 0); /* not yet */
    ck_assert_int_eq(store_outbox_unpin_old(g_st, T0 + VAL_TTL / 2 + 1000, &n,
                                            g_err, sizeof(g_err)), DD_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(store_outbox_unpin_old(g_st, T0 + VAL_TTL / 2 + 2000, &n,
                                            g_err, sizeof(g_err)), DD_OK);
    ck_assert_uint_eq(n, 0); /* once */
    char d[KEY_HEX_LEN + 1];
    key_sha256_hex(page, strlen(page), d);
    store_set_filter_clock(g_st, T0 + 3 * VAL_TTL);
    store_compact(g_st);
    ck_assert(!bget(d, 0, NULL)); /* no pin holds it now */
    expect_events(1, &e);
    store_set_filter_clock(g_st, 0);
    struct raw raw;
    raw_open(&raw);
    bool holds = false;
    ck_assert_int_eq(raw_outbox_kind(&raw, r.seq, "keeps refusing", &holds),
                     STORE_CODEC_OUTBOX);
    ck_assert(holds);
    raw_close(&raw);
    reopen_as("a", "r2");
    ck_assert_int_eq(store_outbox_ack(g_st, r.seq, "op-1", g_err,
                                      sizeof(g_err)), DD_OK);
    free(e.value);
}
END_TEST

/* An old entry whose body is gone does not keep the others pinned: it is
 * logged and unpinned, the next one rewritten. */
START_TEST(test_store_outbox_unpin_old_goes_past_an_entry_without_its_body)
{
    const char *p1 = "first page, its body lost", *p2 = "second page";
    struct named_event e1 = named_event("op-1", p1, strlen(p1));
    struct named_event e2 = named_event("op-2", p2, strlen(p2));
    struct store_complete_req r[2] = {
        named_req("op-1", RK1, p1, strlen(p1), &e1),
        named_req("op-2", RK2, p2, strlen(p2), &e2)};
    claim_complete(r, 2, T0);
    char d1[KEY_HEX_LEN + 1];
    key_sha256_hex(p1, strlen(p1), d1);
    struct raw raw;
    raw_open(&raw);
    char *err = NULL;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_delete_cf(raw.db, wo, raw.cf[RAW_BODIES], d1, KEY_HEX_LEN, &err);
    rocksdb_writeoptions_destroy(wo);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    raw_close(&raw);
    reopen_as("a", "r2");
    /* one call may stop after the first entry (always taken): the rest
     * have a wall-clock budget (STORE_UNPIN_OLD_BUDGET_MS), which a slow
     * machine or valgrind spends on the bodiless one and its log line; the
     * calls after it go on from there, never back to it */
    size_t n = 0, rewritten = 0;
    int calls = 0;
    do {
        int64_t t = dd_now_ms();
        ck_assert_int_eq(store_outbox_unpin_old(g_st, T0 + VAL_TTL, &n, g_err,
                                                sizeof(g_err)), DD_OK);
        /* a call that stopped after the bodiless entry spent the budget
         * (20 ms); else it stopped at it, which the test is about */
        if (n == 0)
            ck_assert_int_ge(dd_now_ms() - t, 20);
        rewritten += n;
        calls++;
    } while (rewritten == 0 && calls < 3);
    ck_assert_uint_eq(rewritten, 1); /* the second, past the first */
    ck_assert_int_eq(store_outbox_unpin_old(g_st, T0 + VAL_TTL, &n, g_err,
                                            sizeof(g_err)), DD_OK);
    ck_assert_uint_eq(n, 0); /* both unpinned */
    raw_open(&raw);
    bool holds = false;
    ck_assert_int_eq(raw_outbox_kind(&raw, r[1].seq, "second page", &holds),
                     STORE_CODEC_OUTBOX);
    ck_assert(holds);
    ck_assert_int_eq(raw_outbox_kind(&raw, r[0].seq, "op-1", &holds),
                     STORE_CODEC_OUTBOX_REF);
    raw_close(&raw);
    reopen_as("a", "r3");
    free(e1.value);
    free(e2.value);
}
END_TEST

/* Twins of one page in one batch, the first fenced: the standing one's
 * entry names the body its own completion put. */
START_TEST(test_store_outbox_names_the_body_of_a_fenced_twins_batch)
{
    const char *page = "the shared page";
    struct named_event ez = named_event("op-z", page, strlen(page));
    struct named_event ea = named_event("op-a", page, strlen(page));
    struct store_op op;
    ck_assert_int_eq(claim("op-z", H1, T0, &op), STORE_CLAIM_NEW);
    ck_assert_int_eq(claim("op-a", H1, T0, &op), STORE_CLAIM_NEW);
    struct store_complete_req r[2] = {
        named_req("op-z", RK1, page, strlen(page), &ez),
        named_req("op-a", RK2, page, strlen(page), &ea)};
    r[0].generation = 9; /* fenced */
    ck_assert_int_eq(store_complete_batch(g_st, r, 2, T0, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert_int_eq(r[0].err, DD_ERR_STATE);
    ck_assert_int_eq(r[1].err, DD_OK);
    expect_events(1, &ea);
    struct raw raw;
    raw_open(&raw);
    bool holds = true;
    ck_assert_int_eq(raw_outbox_kind(&raw, r[1].seq, "the shared page",
                                     &holds), STORE_CODEC_OUTBOX_REF);
    ck_assert(!holds);
    raw_close(&raw);
    reopen_as("a", "r2");
    free(ez.value);
    free(ea.value);
}
END_TEST

/* A literal span that does not fit the value is not trusted: the entry
 * keeps the whole event. */
START_TEST(test_store_outbox_literal_span_out_of_the_value_keeps_it_whole)
{
    const char *page = "a page";
    struct named_event e = named_event("op-1", page, strlen(page));
    struct store_complete_req r = named_req("op-1", RK1, page, strlen(page),
                                            &e);
    r.body_lit_len = e.len; /* past the end */
    claim_complete(&r, 1, T0);
    struct raw raw;
    raw_open(&raw);
    bool holds = false;
    ck_assert_int_eq(raw_outbox_kind(&raw, r.seq, "a page", &holds),
                     STORE_CODEC_OUTBOX);
    ck_assert(holds);
    raw_close(&raw);
    reopen_as("a", "r2");
    free(e.value);
}
END_TEST

/* The pins come back at open: a store closed with an entry pending keeps
 * its body through compactions after the reopen; an entry whose body is
 * gone stops the replay, naming it. */
START_TEST(test_store_outbox_body_pinned_across_reopen_and_absent_is_fatal)
{
    const char *page = "a page of some bytes";
    struct named_event e = named_event("op-1", page, strlen(page));
    struct store_complete_req r = named_req("op-1", RK1, page, strlen(page),
                                            &e);
    claim_complete(&r, 1, T0);
    reopen_as("a", "r2");
    char d[KEY_HEX_LEN + 1];
    key_sha256_hex(page, strlen(page), d);
    store_set_filter_clock(g_st, T0 + 2 * VAL_TTL);
    store_compact(g_st);
    ck_assert(bget(d, 0, page));
    expect_events(1, &e);

    struct raw raw;
    raw_open(&raw);
    char *err = NULL;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_delete_cf(raw.db, wo, raw.cf[RAW_BODIES], d, KEY_HEX_LEN, &err);
    rocksdb_writeoptions_destroy(wo);
    ck_assert_msg(err == NULL, "%s", err ? err : "");
    raw_close(&raw);
    reopen_as("a", "r3");
    struct whole_events w;
    ck_assert_int_eq(whole_events(&w), DD_ERR_FATAL);
    ck_assert_int_eq(w.n, 0);
    char want[DD_ERRSTR_SIZE];
    snprintf(want, sizeof(want), "store: outbox entry %llu of op op-1 names "
             "body %s (%zu bytes), absent: its result cannot be rebuilt",
             (unsigned long long)r.seq, d, strlen(page));
    ck_assert_str_eq(g_err, want);
    free(e.value);
}
END_TEST

START_TEST(test_store_corrupt_validator_or_body_is_fatal)
{
    struct store_complete_req r = val_req("op-1", RK1, "body");
    claim_complete(&r, 1, T0);
    char digest[KEY_HEX_LEN + 1];
    key_sha256_hex("body", 4, digest);
    struct raw raw;
    raw_open(&raw);
    raw_put(&raw, RAW_VALIDATORS, RK2, "short", 5);
    unsigned char v[STORE_CODEC_HDR_LEN + 8 + 3];
    store_codec_header(STORE_CODEC_BODY, T0 + VAL_TTL, v);
    memcpy(v + STORE_CODEC_HDR_LEN, "\x09\0\0\0\0\0\0\0abc", 11); /* 9 != 3 */
    raw_put(&raw, RAW_BODIES, digest, v, sizeof(v));
    raw_close(&raw);
    reopen_as("a", "r2");

    bool found = true;
    ck_assert_int_eq(store_validator_get(g_st, RK2, T0, &g_val, &found, g_err,
                                         sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert(!found);
    ck_assert_int_eq(store_validator_get(g_st, RK1, T0, &g_val, &found, g_err,
                                         sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_msg(strstr(g_err, "bodies record") != NULL, "%s", g_err);
    void *b = NULL;
    size_t len = 0;
    ck_assert_int_eq(store_body_get(g_st, digest, T0, &b, &len, &found, g_err,
                                    sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_ptr_null(b);
}
END_TEST

/* ---------------------------------------------------------------------- */

static TCase *tcase(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    return tc;
}

/* ---------------------------------------------------------------------- */
/* the changelog's side (issue 12) and the TTL floor (issue 15)            */

/* A restored record of op_id as the changelog carries it. */
static void restore_one(const char *op_id, const struct store_op *rec,
                        int64_t now, struct store_restore_counts *c)
{
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t len = store_changelog_encode(rec, v);
    struct store_restore_rec r = {op_id, strlen(op_id), v, len};
    dd_err_t err = store_restore_apply(g_st, &r, 1, now, c, g_err,
                                       sizeof(g_err));
    ck_assert_msg(err == DD_OK, "store_restore_apply: %s", g_err);
}

START_TEST(test_store_restore_record_wins_unless_generation_lower)
{
    struct store_op op, got;
    struct store_restore_counts c = {0};
    ck_assert_int_eq(claim("op-r", H1, T0, &op), STORE_CLAIM_NEW);
    /* another owner completed it at generation 2: the record wins */
    struct store_op rec = op;
    rec.generation = 2;
    rec.state = STORE_OP_COMPLETE;
    rec.outbox_state = STORE_OUTBOX_PENDING; /* written as acknowledged */
    rec.outbox_seq = 77;
    snprintf(rec.lease_owner, sizeof(rec.lease_owner), "b#x");
    restore_one("op-r", &rec, T0 + 10, &c);
    ck_assert(get("op-r", T0 + 20, &got));
    ck_assert_int_eq(got.state, STORE_OP_COMPLETE);
    ck_assert_uint_eq(got.generation, 2);
    ck_assert_int_eq(got.outbox_state, STORE_OUTBOX_SENT);
    ck_assert_uint_eq(got.outbox_seq, 0);
    ck_assert_int_eq(claim("op-r", H1, T0 + 30, &op), STORE_CLAIM_DUPLICATE);
    /* a zombie's late record of generation 1 never wins over it */
    rec.generation = 1;
    rec.state = STORE_OP_RUNNING;
    restore_one("op-r", &rec, T0 + 40, &c);
    ck_assert(get("op-r", T0 + 50, &got));
    ck_assert_int_eq(got.state, STORE_OP_COMPLETE);
    ck_assert_uint_eq(c.applied, 1);
    ck_assert_uint_eq(c.kept, 1);
    /* an expired record is absent on both sides */
    rec.expires_at_ms = T0;
    restore_one("op-gone", &rec, T0 + 60, &c);
    ck_assert(!get("op-gone", T0 + 70, &got));
    ck_assert_uint_eq(c.expired, 1);
}
END_TEST

/* it_retryable's rare failure: the origin answered 429 in the claim's own
 * millisecond, so the local retryable record and the claim record on the
 * changelog had one generation and one updated_at; the restore at the
 * restart let the claim record win, and the reclaimed op fetched at once,
 * 8.6 s before its Retry-After.  A later change of one generation must
 * outrank the earlier even within a millisecond (and on a clock that went
 * back): each change's updated_at is after the one it replaces. */
START_TEST(test_store_restore_same_ms_claim_record_loses_to_later_retry)
{
    struct store_op claimed, got;
    struct store_restore_counts c = {0};
    ck_assert_int_eq(claim("op-s", H1, T0, &claimed), STORE_CLAIM_NEW);
    ck_assert_int_eq(retry_rc("op-s", 1, T0 + 10000, 1, "throttled", NULL, T0),
                     DD_OK);
    /* and a retry stamped before the claim (the clock stepped back) */
    ck_assert_int_eq(claim("op-b", H1, T0, &got), STORE_CLAIM_NEW);
    struct store_op claimed_b = got;
    ck_assert_int_eq(retry_rc("op-b", 1, T0 + 10000, 1, "throttled", NULL,
                              T0 - 5),
                     DD_OK);
    ck_assert(get("op-s", T0 + 1, &got));
    ck_assert_int_gt(got.updated_at_ms, claimed.updated_at_ms);
    reopen_as("a", "r2"); /* the restart, then its restore */
    restore_one("op-s", &claimed, T0 + 500, &c);
    restore_one("op-b", &claimed_b, T0 + 500, &c);
    ck_assert_uint_eq(c.kept, 2);
    ck_assert_uint_eq(c.applied, 0);
    ck_assert_int_eq(claim("op-s", H1, T0 + 600, &got), STORE_CLAIM_RECLAIMED);
    ck_assert_int_eq(got.state, STORE_OP_RETRYABLE);
    ck_assert_int_eq(got.not_before_ms, T0 + 10000);
    ck_assert_int_eq(claim("op-b", H1, T0 + 600, &got), STORE_CLAIM_RECLAIMED);
    ck_assert_int_eq(got.state, STORE_OP_RETRYABLE);
    ck_assert_int_eq(got.not_before_ms, T0 + 10000);
}
END_TEST

/* The same for a release and a completion stamped before the change they
 * replace (a clock that went back 5 ms): a release that lost to its claim
 * record kept another instance waiting out a lease it could take at once,
 * and a completion that lost to its claim record was fetched again. */
START_TEST(test_store_restore_clock_back_release_and_complete_still_win)
{
    struct store_op claimed, got;
    struct store_restore_counts c = {0};
    /* op-c: its completion is kept over its claim record */
    ck_assert_int_eq(claim("op-c", H1, T0, &claimed), STORE_CLAIM_NEW);
    complete("op-c", 1, "v", T0 - 5);
    restore_one("op-c", &claimed, T0 + 1, &c);
    ck_assert_uint_eq(c.kept, 1);
    ck_assert(get("op-c", T0 + 2, &got));
    ck_assert_int_eq(got.state, STORE_OP_COMPLETE);
    /* op-r: another instance restores its claim and release records in one
     * batch, and takes it at once */
    unsigned char vc[STORE_CHANGELOG_VALUE_MAX], vr[STORE_CHANGELOG_VALUE_MAX];
    size_t lr = 0;
    ck_assert_int_eq(claim("op-r", H1, T0, &claimed), STORE_CLAIM_NEW);
    size_t lc = store_changelog_encode(&claimed, vc);
    ck_assert_int_eq(store_op_release(g_st, "op-r", 1, T0 - 5, vr, &lr, g_err,
                                      sizeof(g_err)),
                     DD_OK);
    store_close(g_st);
    g_st = NULL;
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    ck_assert_int_eq(mkdir(g_dir, 0700), 0);
    ck_assert_int_eq(open_as("b", "r1"), DD_OK);
    struct store_restore_rec r[2] = {{"op-r", 4, vc, lc}, {"op-r", 4, vr, lr}};
    ck_assert_int_eq(store_restore_apply(g_st, r, 2, T0 + 10, &c, g_err,
                                         sizeof(g_err)),
                     DD_OK);
    ck_assert(get("op-r", T0 + 11, &got));
    ck_assert_str_eq(got.lease_owner, "");
    ck_assert_int_eq(claim("op-r", H1, T0 + 12, &got), STORE_CLAIM_RECLAIMED);
}
END_TEST

START_TEST(test_store_restore_leases_of_other_owners)
{
    struct store_op op, rec;
    struct store_restore_counts c = {0};
    ck_assert_int_eq(claim("op-x", H1, T0, &op), STORE_CLAIM_NEW);
    rec = op;
    rec.generation = 3;
    snprintf(rec.lease_owner, sizeof(rec.lease_owner), "b#x");
    rec.lease_expires_at_ms = T0 + 1; /* another clock: not trusted */
    restore_one("op-x", &rec, T0 + 100, &c);
    /* running elsewhere: a lease of LEASE from the restore, on our clock */
    ck_assert_int_eq(claim("op-x", H1, T0 + 100 + LEASE - 1, &op),
                     STORE_CLAIM_DUPLICATE);
    ck_assert_int_eq(claim("op-x", H1, T0 + 100 + LEASE + 1, &op),
                     STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.generation, 4);
    /* a release (no owner): taken at once */
    rec.generation = 9;
    rec.lease_owner[0] = '\0';
    rec.lease_expires_at_ms = 0;
    rec.expires_at_ms = T0 + OPS_TTL * 2;
    restore_one("op-x", &rec, T0 + 200, &c);
    ck_assert_int_eq(claim("op-x", H1, T0 + 201, &op), STORE_CLAIM_RECLAIMED);
    ck_assert_uint_eq(op.generation, 10);
}
END_TEST

START_TEST(test_store_release_forget_and_checkpoints)
{
    struct store_op op, got;
    unsigned char v[STORE_CHANGELOG_VALUE_MAX];
    size_t len = 0;
    ck_assert_int_eq(claim("op-f", H1, T0, &op), STORE_CLAIM_NEW);
    /* release: owner empty, lease 0; another generation is refused */
    ck_assert_int_eq(store_op_release(g_st, "op-f", 2, T0 + 1, v, &len,
                                      g_err, sizeof(g_err)), DD_ERR_STATE);
    ck_assert_int_eq(store_op_release(g_st, "op-f", 1, T0 + 1, v, &len,
                                      g_err, sizeof(g_err)), DD_OK);
    ck_assert(get("op-f", T0 + 2, &got));
    ck_assert_str_eq(got.lease_owner, "");
    ck_assert(len > 0);
    /* forget: FORGOTTEN at generation + 1; the next claim is new, at + 2,
     * and may carry another payload */
    bool found = false;
    ck_assert_int_eq(store_op_forget(g_st, "op-f", T0 + 3, v, &len, &found,
                                     g_err, sizeof(g_err)), DD_OK);
    ck_assert(found);
    ck_assert(get("op-f", T0 + 4, &got));
    ck_assert_int_eq(got.state, STORE_OP_FORGOTTEN);
    ck_assert_uint_eq(got.generation, 2);
    ck_assert_int_eq(claim("op-f", H2, T0 + 5, &op), STORE_CLAIM_NEW);
    ck_assert_uint_eq(op.generation, 3);
    ck_assert_int_eq(store_op_forget(g_st, "op-none", T0, v, &len, &found,
                                     g_err, sizeof(g_err)), DD_OK);
    ck_assert(!found);
    /* checkpoints */
    int64_t off = 0, at = 0;
    ck_assert_int_eq(store_checkpoint_get(g_st, 3, &off, &at, &found, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert(!found);
    ck_assert_int_eq(store_checkpoint_put(g_st, 3, 1234, T0, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert_int_eq(store_checkpoint_get(g_st, 3, &off, &at, &found, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert(found);
    ck_assert_int_eq(off, 1234);
    ck_assert_int_eq(at, T0);
    ck_assert_int_eq(store_checkpoint_put(g_st, 3, -1, T0, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert_int_eq(store_checkpoint_get(g_st, 3, &off, &at, &found, g_err,
                                          sizeof(g_err)), DD_OK);
    ck_assert(!found);
}
END_TEST

START_TEST(test_store_running_record_outlives_a_short_ttl)
{
    store_close(g_st);
    g_st = NULL;
    struct store_conf conf = {
        .path = g_dir, .instance = "a", .run_id = "r1", .ops_ttl_ms = 1000,
        .failed_ttl_ms = FAILED_TTL, .lease_ms = LEASE,
        .block_cache_bytes = 8 << 20, .validators_ttl_ms = VAL_TTL,
        .max_body_bytes = MAX_BODY,
    };
    ck_assert_int_eq(store_open(&conf, &g_st, g_err, sizeof(g_err)), DD_OK);
    struct store_op op, got;
    ck_assert_int_eq(claim("op-t", H1, T0, &op), STORE_CLAIM_NEW);
    /* before: expires_at T0 + 1000, so a fetch of 5 s lost its record */
    ck_assert_int_eq(op.expires_at_ms, T0 + LEASE);
    ck_assert(get("op-t", T0 + 5000, &got));
    ck_assert_int_eq(got.state, STORE_OP_RUNNING);
}
END_TEST

Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc;

    tc = tcase("changelog");
    tcase_add_test(tc, test_store_restore_record_wins_unless_generation_lower);
    tcase_add_test(tc, test_store_restore_leases_of_other_owners);
    tcase_add_test(tc, test_store_restore_same_ms_claim_record_loses_to_later_retry);
    tcase_add_test(tc, test_store_restore_clock_back_release_and_complete_still_win);
    tcase_add_test(tc, test_store_release_forget_and_checkpoints);
    tcase_add_test(tc, test_store_running_record_outlives_a_short_ttl);
    suite_add_tcase(s, tc);

    tc = tcase("claim");
    tcase_add_test(tc, test_store_claim_new_then_duplicate);
    tcase_add_test(tc, test_store_claim_conflict_on_different_hash);
    tcase_add_test(tc, test_store_claim_rejects_bad_op_id);
    tcase_add_test(tc, test_store_c29_conflict_duplicate_and_new_after_expiry);
    suite_add_tcase(s, tc);

    tc = tcase("race");
    tcase_add_test(tc, test_store_claim_race_exactly_one_new_per_op_id);
    tcase_add_test(tc,
                   test_store_claim_race_batch_and_single_exactly_one_new_per_op_id);
    suite_add_tcase(s, tc);

    tc = tcase("attempts");
    tcase_add_test(tc, test_store_attempts_put_get_in_number_order_and_expire);
    tcase_add_test(tc, test_store_attempts_put_rejects_number_0_and_bad_op_id);
    suite_add_tcase(s, tc);

    tc = tcase("batch_index");
    tcase_add_test(tc, test_store_claim_batch_matches_sequential_claims);
    tcase_add_test(tc, test_store_claim_batch_bad_request_fails_alone);
    tcase_add_test(
        tc, test_store_index_rebuilt_at_open_answers_duplicates_without_reads);
    tcase_add_test(tc, test_store_op_ids_of_any_length_keep_their_own_records);
    tcase_add_test(
        tc,
        test_store_index_bound_reached_is_not_complete_and_answers_stay_correct);
    tcase_add_test(
        tc, test_store_index_duplicate_false_for_conflict_running_and_expired);
    suite_add_tcase(s, tc);

    tc = tcase("fencing");
    tcase_add_test(tc, test_store_complete_stale_generation_is_state_error);
    tcase_add_test(tc, test_store_held_record_skips_reads_until_the_op_changes);
    tcase_add_test(tc, test_store_deferred_claim_is_written_with_its_completion);
    tcase_add_test(tc, test_store_acked_completion_writes_no_outbox_entry);
    tcase_add_test(tc, test_store_complete_by_other_owner_is_state_error);
    tcase_add_test(tc, test_store_complete_twice_is_state_error);
    tcase_add_test(tc, test_store_complete_rejects_non_final_state);
    tcase_add_test(tc, test_store_complete_batch_one_write_fences_each_op_alone);
    tcase_add_test(tc, test_store_complete_batch_repeated_op_first_standing_wins);
    tcase_add_test(tc, test_store_lease_renew_extends_and_fences);
    tcase_add_test(tc, test_store_retryable_transitions_and_illegal_ones);
    tcase_add_test(tc, test_store_retryable_fails_from_wait_and_fences_others);
    tcase_add_test(tc, test_store_retryable_reclaimed_keeps_not_before);
    tcase_add_test(tc, test_store_group_commit_tickets_become_durable);
    suite_add_tcase(s, tc);

    tc = tcase("lease");
    tcase_add_test(tc, test_store_lease_expiry_reclaims_generation_2);
    tcase_add_test(tc, test_store_reopen_new_run_reclaims_at_once);
    tcase_add_test(tc, test_store_open_rejects_bad_conf);
    tcase_add_test(tc, test_store_open_creates_parent_directories);
    suite_add_tcase(s, tc);

    tc = tcase("outbox");
    tcase_add_test(tc, test_store_outbox_complete_foreach_ack);
    tcase_add_test(tc, test_store_outbox_ack_is_idempotent);
    tcase_add_test(tc, test_store_outbox_ack_of_another_ops_entry_is_inval);
    tcase_add_test(tc, test_store_outbox_reopen_keeps_pending_and_seq_grows);
    tcase_add_test(tc, test_store_outbox_seq_not_reused_after_all_acked);
    tcase_add_test(tc,
                   test_store_c24_delivered_ops_are_duplicates_for_instance_b);
    suite_add_tcase(s, tc);

    tc = tcase("ttl");
    tcase_add_test(tc, test_store_c28_expiry_boundary_without_compaction);
    tcase_add_test(tc, test_store_c28_same_answers_after_manual_compaction);
    tcase_add_test(tc,
                   test_store_ttl_expired_absent_before_compaction_gone_after);
    tcase_add_test(tc, test_store_ttl_filter_keeps_unexpired_and_outbox);
    tcase_add_test(tc, test_store_failed_op_uses_failed_ttl);
    tcase_add_test(tc, test_store_failed_op_with_failed_ttl_over_ops_ttl_gets_next_epoch);
    tcase_add_test(tc, test_store_retry_epoch_grows_only_on_a_failed_reclaim);
    suite_add_tcase(s, tc);

    tc = tcase("seen_conflicts");
    tcase_add_test(tc, test_store_mark_seen_twice_reports_duplicate);
    tcase_add_test(tc, test_store_mark_seen_rejects_bad_key);
    tcase_add_test(tc, test_store_conflict_mark_first_then_second);
    suite_add_tcase(s, tc);

    tc = tcase("receipts");
    tcase_add_test(tc, test_store_receipt_pending_only_for_its_window);
    tcase_add_test(tc, test_store_receipt_done_lives_its_ttl);
    tcase_add_test(tc, test_store_receipt_pending_without_window_has_passed);
    suite_add_tcase(s, tc);

    tc = tcase("layout");
    tcase_add_test(tc,
                   test_store_open_creates_column_families_and_layout_version);
    tcase_add_test(tc, test_store_open_leaves_no_options_tmp_files);
    tcase_add_test(tc, test_store_newer_layout_version_is_fatal);
    tcase_add_test(tc, test_store_corrupt_op_record_is_fatal);
    suite_add_tcase(s, tc);

    tc = tcase("validators");
    tcase_add_test(tc, test_store_validator_put_via_complete_batch_then_get);
    tcase_add_test(tc, test_store_same_body_stored_once_for_two_resources);
    tcase_add_test(tc,
                   test_store_validator_ttl_absent_before_compaction_gone_after);
    tcase_add_test(tc,
                   test_store_validator_with_missing_or_expired_body_is_absent);
    tcase_add_test(tc,
                   test_store_validator_refused_cleared_too_large_not_stored);
    tcase_add_test(
        tc, test_store_validator_not_written_by_failed_or_fenced_completion);
    tcase_add_test(
        tc, test_store_body_written_by_the_standing_twin_of_a_fenced_completion);
    tcase_add_test(tc, test_store_validators_survive_reopen);
    tcase_add_test(tc, test_store_wal_stays_within_max_wal_bytes);
    tcase_add_test(tc, test_store_without_validator_cfs_opens_and_gets_them);
    tcase_add_test(tc, test_store_corrupt_validator_or_body_is_fatal);
    tcase_add_test(tc,
                   test_store_outbox_names_the_body_it_writes_and_rebuilds_it);
    tcase_add_test(
        tc, test_store_outbox_body_pinned_across_reopen_and_absent_is_fatal);
    tcase_add_test(
        tc, test_store_outbox_body_floor_follows_the_oldest_pending_entry);
    tcase_add_test(tc, test_store_outbox_body_kept_when_the_clock_steps_back);
    tcase_add_test(
        tc,
        test_store_outbox_entry_pending_half_the_ttl_holds_its_page_again);
    tcase_add_test(tc,
                   test_store_outbox_names_the_body_of_a_fenced_twins_batch);
    tcase_add_test(
        tc, test_store_outbox_unpin_old_goes_past_an_entry_without_its_body);
    tcase_add_test(
        tc, test_store_outbox_literal_span_out_of_the_value_keeps_it_whole);
    suite_add_tcase(s, tc);

    tc = tcase("forget");
    tcase_add_test(tc, test_store_forget_drops_op);
    tcase_add_test(tc, test_store_2str);
    suite_add_tcase(s, tc);

    return s;
}
