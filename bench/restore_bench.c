/*
 * restore_bench: dedupd's changelog restore at its API (issue 12): a fresh
 * store, dedupd's restore consumer, changelog_restore() of the given
 * partitions, timed.
 *
 *   restore_bench [-c config/dedupd.json] [-p 0,1,...] [--dir /tmp]
 *                 [--again] [--keep] [--warm-ms 1000] [--synthetic N]
 *
 * The configuration is loaded as dedupd loads it (the file, then the
 * DEDUPD_*__* environment); consumer.group_id names the changelog
 * "<group>-changelog", topics.jobs the jobs topic that changelog_ensure()
 * checks first (as dedupd does at start-up; not timed).  The store is opened
 * as `dedupd run` opens it (consumer.c: store.* options, group commit) in a
 * new directory under --dir, removed at the end unless --keep.  Partitions:
 * -p, else every partition of the changelog.
 *
 * Prints one JSON line:
 *
 *   {"topic":T,"partitions":P,"records":N,"bytes":B,"seconds":S,
 *    "records_per_second":R,"applied":A,"kept":K,"expired":E,
 *    "conflicts":C,"skipped":X,"from_start":F,"prefetch_kicks":K,
 *    "again":{...}}
 *
 * seconds is changelog_restore()'s own wall time (st.ms: the watermark
 * queries, the fetches, store_restore_apply of every batch and the
 * checkpoints), the figure dedupd logs.  --again runs a second
 * changelog_restore() on the same store afterwards: it starts at the
 * checkpoint the first wrote, so it must read 0 records ("again").
 * The restore consumer is created, then left --warm-ms (1000) to connect
 * before the timed restore: dedupd's is created at start-up, long before its
 * first assignment.
 *
 * --synthetic N: no Kafka; the store's side alone.  N op records as
 * changelog_fill makes them (bench_ops.h), encoded in memory beforehand,
 * go through store_restore_apply() in batches of 512 (changelog.c's
 * RESTORE_BATCH) into the fresh store: {"records","seconds",
 * "records_per_second","applied",...,"mode":"synthetic"}.
 *
 * Exit status 0 when every restore succeeded (and --again read nothing).
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_ops.h"
#include "changelog.h"
#include "config.h"
#include "dd.h"
#include "log.h"
#include "consumer.h"
#include "store.h"

extern char **environ;

#define MAX_PARTS 1024
#define BATCH 512 /* = changelog.c's RESTORE_BATCH */

/** @brief Print the usage and exit 2. */
static void usage(void)
{
    fprintf(stderr, "usage: restore_bench [-c CONFIG] [-p P1,P2,...] "
                    "[--dir DIR] [--again] [--keep]\n");
    exit(2);
}

/** @brief nftw callback: remove one entry. */
static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/** @brief Exit 1 with \p what and \p e. */
static void die(const char *what, const char *e)
{
    fprintf(stderr, "restore_bench: %s: %s\n", what, e);
    exit(1);
}

/** @brief Open a store in \p dir as `dedupd run` opens its own. */
static struct store *open_store(const struct cfg *cfg, const char *dir,
                                char *run_id, size_t run_id_size)
{
    snprintf(run_id, run_id_size, "%llx%04x", (unsigned long long)dd_now_ms(),
             (unsigned)getpid() & 0xffff);
    struct store_conf sc;
    consumer_store_conf(cfg, dir, run_id, &sc);
    struct store *st = NULL;
    char e[1024];
    if (store_open(&sc, &st, e, sizeof(e)))
        die("store_open", e);
    return st;
}

/** @brief "P1,P2,..." into \p parts.  @returns how many. */
static size_t parse_parts(const char *s, int32_t *parts)
{
    size_t n = 0;
    char *copy = strdup(s);
    for (char *t = strtok(copy, ","); t && n < MAX_PARTS; t = strtok(NULL, ","))
        parts[n++] = (int32_t)atoi(t);
    free(copy);
    return n;
}

/** @brief The stats of one restore as a JSON object (no braces' newline). */
static void print_stats(const struct changelog_restore_stats *st)
{
    double secs = (double)st->ms / 1000.0;
    printf("\"records\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"seconds\":%.3f,"
           "\"records_per_second\":%.1f,\"applied\":%" PRIu64 ",\"kept\":%"
           PRIu64 ",\"expired\":%" PRIu64 ",\"conflicts\":%" PRIu64
           ",\"skipped\":%" PRIu64 ",\"from_start\":%zu,"
           "\"prefetch_kicks\":%" PRIu64,
           st->records, st->bytes, secs,
           secs > 0 ? (double)st->records / secs : 0.0, st->counts.applied,
           st->counts.kept, st->counts.expired, st->counts.conflicts,
           st->counts.skipped, st->from_start, st->prefetch_kicks);
}

/** @returns the monotonic clock in ms. */
static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/** @brief --synthetic: \p n records through store_restore_apply() alone
 *         (see the file comment) into \p st; prints the JSON line. */
static void synthetic(struct store *st, long n)
{
    char (*ids)[KEY_HEX_LEN + 1] = calloc((size_t)n, sizeof(*ids));
    unsigned char (*vals)[STORE_CHANGELOG_VALUE_MAX] =
        calloc((size_t)n, sizeof(*vals));
    struct store_restore_rec *recs = calloc((size_t)n, sizeof(*recs));
    if (!ids || !vals || !recs)
        die("synthetic", "out of memory");
    int64_t now = dd_now_ms();
    for (long i = 0; i < n; i++) {
        struct store_op op;
        bench_op_of(i, false, "bench.jobs", 0, now, &op, ids[i],
                    sizeof(ids[i]));
        recs[i] = (struct store_restore_rec){
            ids[i], strlen(ids[i]), vals[i],
            store_changelog_encode(&op, vals[i])};
    }
    struct changelog_restore_stats s;
    memset(&s, 0, sizeof(s));
    char e[1024];
    double t0 = mono_ms();
    for (long i = 0; i < n; i += BATCH) {
        size_t k = (size_t)(n - i < BATCH ? n - i : BATCH);
        if (store_restore_apply(st, recs + i, k, dd_now_ms(), &s.counts, e,
                                sizeof(e)))
            die("store_restore_apply", e);
        s.records += k;
    }
    s.ms = (int64_t)(mono_ms() - t0 + 0.5);
    printf("{\"mode\":\"synthetic\",\"batch\":%d,", BATCH);
    print_stats(&s);
    printf("}\n");
    free(ids);
    free(vals);
    free(recs);
}

/** @brief Parse the arguments, restore, print the JSON line. */
int main(int argc, char **argv)
{
    const char *path = "config/dedupd.json", *plist = NULL, *base = "/tmp";
    bool again = false, keep = false;
    long warm_ms = 1000, synth = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--again"))
            again = true;
        else if (!strcmp(a, "--keep"))
            keep = true;
        else if (i + 1 >= argc)
            usage();
        else if (!strcmp(a, "-c"))
            path = argv[++i];
        else if (!strcmp(a, "-p"))
            plist = argv[++i];
        else if (!strcmp(a, "--dir"))
            base = argv[++i];
        else if (!strcmp(a, "--warm-ms"))
            warm_ms = atol(argv[++i]);
        else if (!strcmp(a, "--synthetic"))
            synth = atol(argv[++i]);
        else
            usage();
    }
    char e[1024];
    struct cfg *cfg = NULL;
    if (cfg_load(path, environ, &cfg, e, sizeof(e)))
        die("config", e);
    log_configure(log_level_parse(cfg->log_level), cfg->log_debug);
    char dir[4096], run_id[64], topic[CHANGELOG_TOPIC_MAX];
    snprintf(dir, sizeof(dir), "%s/restore_bench.XXXXXX", base);
    if (!mkdtemp(dir))
        die("mkdtemp", dir);
    changelog_topic_of(cfg, topic, sizeof(topic));
    if (synth > 0) {
        struct store *sst = open_store(cfg, dir, run_id, sizeof(run_id));
        synthetic(sst, synth);
        store_close(sst);
        if (!keep)
            nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        cfg_destroy(cfg);
        return 0;
    }
    struct changelog_info info;
    if (changelog_ensure(cfg, &info, e, sizeof(e)))
        die("changelog_ensure", e);
    int32_t parts[MAX_PARTS];
    size_t np = 0;
    if (plist)
        np = parse_parts(plist, parts);
    else
        for (int32_t p = 0; p < info.partitions && np < MAX_PARTS; p++)
            parts[np++] = p;
    struct store *st = open_store(cfg, dir, run_id, sizeof(run_id));
    struct changelog_restorer *r = NULL;
    if (changelog_restorer_new(cfg, &r, e, sizeof(e)))
        die("changelog_restorer_new", e);
    if (warm_ms > 0) /* dedupd's restorer is connected long before */
        usleep((useconds_t)warm_ms * 1000);
    struct changelog_restore_stats s1, s2;
    if (changelog_restore(r, st, cfg, &info, parts, np, &s1, e, sizeof(e)))
        die("changelog_restore", e);
    int rc = 0;
    if (again) {
        if (changelog_restore(r, st, cfg, &info, parts, np, &s2, e, sizeof(e)))
            die("changelog_restore (again)", e);
        rc = s2.records ? 1 : 0;
    }
    printf("{\"topic\":\"%s\",\"partitions\":%zu,", topic, np);
    print_stats(&s1);
    if (again) {
        printf(",\"again\":{");
        print_stats(&s2);
        printf("}");
    }
    printf("}\n");
    fflush(stdout);
    changelog_restorer_destroy(r);
    store_close(st);
    if (!keep)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    cfg_destroy(cfg);
    return rc;
}
