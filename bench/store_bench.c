/*
 * store_bench: the store at its API (no Kafka, no parsing), against raw tuned
 * RocksDB on the same machine in the same run (issue 3, DESIGN.md section 10).
 *
 *   cmake --build build --target store_bench      (bench/CMakeLists.txt)
 *   ./store_bench [--sizes 1000000,10000000] [--batch 1000] [--dir /tmp]
 *                 [--index-mb 1024] [--cache-mb 64] [--dups 2000000]
 *                 [--no-raw] [--keep]
 *
 * For each size (cumulative: 1M, then 9M more to 10M):
 *   new        new claims/s: store_claim_batch of fresh op_ids, store opened
 *              with sync=true; claim batches go to the WAL without fsync (the
 *              completions' group commit makes them durable: store.h), so this
 *              is the claim path's rate, not an fsync'd one
 *   complete   store_complete of those ops (store reopened with sync=false,
 *              2 threads; only to have finished ops, printed for information)
 *   rebuild    reopen, time until the hot index is complete
 *   dup batch  duplicate decisions/s: store_claim_batch of random existing
 *              finished op_ids (the index answers; checked)
 *   dup fast   store_index_duplicate alone, 1 and 2 threads
 *   RSS        VmRSS after the duplicate phases (VmHWM: the peak from the
 *              reopen through the rebuild and the duplicate phases)
 * and, in a child process forked before anything else (so that its memory and
 * RocksDB's threads are its own), raw RocksDB with the store's tuned options:
 *   new        batched MultiGet (sorted) of the batch + WriteBatch Put of a
 *              record of the op record's size, sync=true
 *   dup        batched MultiGet (sorted) of random existing keys
 *
 * op_ids are 32 bytes, "op-" + 16 hex digits of a mixed counter + 13 digits, so
 * they arrive in random key order as real ones do.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>

#include "store.h"

#define HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define EKEY "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define MAX_SIZES 8
#define ID_LEN 32
#define RAW_VALUE_LEN 220 /* about an op record: see include/store_codec.h */

struct opts {
    long sizes[MAX_SIZES];
    int nsizes;
    int batch;
    const char *dir;
    size_t index_bytes;
    size_t cache_bytes;
    long dups;
    bool raw;
    bool keep;
};

struct row {
    long size;
    double new_s, complete_s, rebuild_s, dup_batch_s, dup_fast1_s,
        dup_fast2_s;
    double raw_new_s, raw_dup_s;
    long rss_kb, hwm_kb, raw_rss_kb;
    uint64_t idx_entries, idx_bytes;
};

static struct opts o = {
    .sizes = {1000000, 10000000},
    .nsizes = 2,
    .batch = 1000,
    .dir = "/tmp",
    .index_bytes = (size_t)1024 << 20,
    .cache_bytes = (size_t)64 << 20,
    .dups = 2000000,
    .raw = true,
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t mix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static void op_id_of(long i, char out[ID_LEN + 1])
{
    snprintf(out, ID_LEN + 1, "op-%016llx%013llu",
             (unsigned long long)mix64((uint64_t)i),
             (unsigned long long)i % 10000000000000ULL);
}

static void status_kb(long *rss, long *hwm)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    *rss = *hwm = 0;
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss = atol(line + 6);
        else if (strncmp(line, "VmHWM:", 6) == 0)
            *hwm = atol(line + 6);
    }
    fclose(f);
}

/* Linux: writing 5 to clear_refs resets VmHWM to the current RSS. */
static void reset_hwm(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "store_bench: %s: %s\n", what, err);
    exit(1);
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* ---------------------------------------------------------------------- */
/* the store                                                               */

static struct store *st;
static char store_dir[512];

static void store_reopen(bool sync)
{
    char err[DD_ERRSTR_SIZE];
    static int run;
    char run_id[16];
    store_close(st);
    st = NULL;
    (void)run; /* one run: completions need the claims' lease */
    snprintf(run_id, sizeof(run_id), "r1");
    struct store_conf conf = {
        .path = store_dir,
        .instance = "bench",
        .run_id = run_id,
        .block_cache_bytes = o.cache_bytes,
        .sync = sync,
        .index_max_bytes = o.index_bytes,
    };
    if (store_open(&conf, &st, err, sizeof(err)) != DD_OK)
        die("store_open", err);
}

static double wait_index(void)
{
    double t0 = now_s();
    struct store_index_stats is;
    for (;;) {
        store_index_stats_get(st, &is);
        if (is.complete)
            return now_s() - t0;
        usleep(10000);
    }
}

/* fresh claims of ops [from, to): durable (the store is open with sync) */
static double store_new(long from, long to)
{
    char err[DD_ERRSTR_SIZE];
    int b = o.batch;
    struct store_claim_req *r = calloc((size_t)b, sizeof(*r));
    char(*ids)[ID_LEN + 1] = calloc((size_t)b, sizeof(*ids));
    double t0 = now_s();
    for (long i = from; i < to; i += b) {
        int n = to - i < b ? (int)(to - i) : b;
        for (int j = 0; j < n; j++) {
            op_id_of(i + j, ids[j]);
            r[j] = (struct store_claim_req){.op_id = ids[j],
                                            .request_hash = HASH,
                                            .event_key = EKEY,
                                            .source = "bench/0/0"};
        }
        if (store_claim_batch(st, r, (size_t)n, wall_ms(), err, sizeof(err))
            != DD_OK)
            die("store_claim_batch", err);
        for (int j = 0; j < n; j++)
            if (r[j].err || r[j].result != STORE_CLAIM_NEW)
                die("store_claim_batch", "not NEW");
    }
    double dt = now_s() - t0;
    free(r);
    free(ids);
    return (double)(to - from) / dt;
}

struct range {
    long from, to;
    int step, off;
};

static void *complete_worker(void *arg)
{
    struct range *rg = arg;
    char id[ID_LEN + 1], err[DD_ERRSTR_SIZE];
    for (long i = rg->from + rg->off; i < rg->to; i += rg->step) {
        uint64_t seq;
        op_id_of(i, id);
        if (store_complete(st, id, 1, STORE_OP_COMPLETE, NULL, 1, "r", 1,
                           wall_ms(), &seq, err, sizeof(err))
            != DD_OK)
            die("store_complete", err);
    }
    return NULL;
}

static double store_complete_all(long from, long to)
{
    pthread_t th[2];
    struct range rg[2];
    double t0 = now_s();
    for (int t = 0; t < 2; t++) {
        rg[t] = (struct range){from, to, 2, t};
        pthread_create(&th[t], NULL, complete_worker, &rg[t]);
    }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    return (double)(to - from) / (now_s() - t0);
}

static double store_dup_batch(long size)
{
    char err[DD_ERRSTR_SIZE];
    int b = o.batch;
    struct store_claim_req *r = calloc((size_t)b, sizeof(*r));
    char(*ids)[ID_LEN + 1] = calloc((size_t)b, sizeof(*ids));
    uint64_t x = 42;
    long done = 0;
    double t0 = now_s();
    while (done < o.dups) {
        for (int j = 0; j < b; j++) {
            x = mix64(x);
            op_id_of((long)(x % (uint64_t)size), ids[j]);
            r[j] = (struct store_claim_req){.op_id = ids[j],
                                            .request_hash = HASH,
                                            .event_key = EKEY,
                                            .source = "bench/0/1"};
        }
        if (store_claim_batch(st, r, (size_t)b, wall_ms(), err, sizeof(err))
            != DD_OK)
            die("store_claim_batch", err);
        for (int j = 0; j < b; j++)
            if (r[j].err || r[j].result != STORE_CLAIM_DUPLICATE
                || r[j].op.state != STORE_OP_COMPLETE
                || r[j].op.generation != 0)
                die("store_claim_batch", "not an index duplicate");
        done += b;
    }
    double dt = now_s() - t0;
    free(r);
    free(ids);
    return (double)done / dt;
}

struct fast_arg {
    long size, n;
    uint64_t seed;
};

static void *fast_worker(void *arg)
{
    struct fast_arg *a = arg;
    char id[ID_LEN + 1];
    uint64_t x = a->seed;
    int64_t now = wall_ms();
    for (long i = 0; i < a->n; i++) {
        x = mix64(x);
        op_id_of((long)(x % (uint64_t)a->size), id);
        if (!store_index_duplicate(st, id, ID_LEN, HASH, now, NULL))
            die("store_index_duplicate", "false for a finished op");
    }
    return NULL;
}

static double store_dup_fast(long size, int threads)
{
    pthread_t th[2];
    struct fast_arg a[2];
    double t0 = now_s();
    for (int t = 0; t < threads; t++) {
        a[t] = (struct fast_arg){size, o.dups, (uint64_t)t + 7};
        pthread_create(&th[t], NULL, fast_worker, &a[t]);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    return (double)o.dups * threads / (now_s() - t0);
}

static void run_store(struct row *rows)
{
    snprintf(store_dir, sizeof(store_dir), "%s/store-bench-XXXXXX", o.dir);
    if (!mkdtemp(store_dir))
        die("mkdtemp", store_dir);
    long prev = 0;
    for (int k = 0; k < o.nsizes; k++) {
        struct row *w = &rows[k];
        long size = o.sizes[k];
        w->size = size;
        store_reopen(true);
        wait_index();
        w->new_s = store_new(prev, size);
        fprintf(stderr, "store %ld: %.0f new/s\n", size, w->new_s);
        store_reopen(false);
        w->complete_s = store_complete_all(prev, size);
        fprintf(stderr, "store %ld: %.0f complete/s\n", size, w->complete_s);
        store_reopen(true);
        reset_hwm(); /* the peak of the rebuild and the duplicate phases */
        w->rebuild_s = wait_index();
        fprintf(stderr, "store %ld: index rebuilt in %.1f s\n", size,
                w->rebuild_s);
        w->dup_batch_s = store_dup_batch(size);
        w->dup_fast1_s = store_dup_fast(size, 1);
        w->dup_fast2_s = store_dup_fast(size, 2);
        struct store_index_stats is;
        store_index_stats_get(st, &is);
        w->idx_entries = is.entries;
        w->idx_bytes = is.bytes;
        status_kb(&w->rss_kb, &w->hwm_kb);
        fprintf(stderr,
                "store %ld: dup batch %.0f/s, fast %.0f/s (2 threads "
                "%.0f/s), RSS %ld kB\n",
                size, w->dup_batch_s, w->dup_fast1_s, w->dup_fast2_s,
                w->rss_kb);
        prev = size;
    }
    store_close(st);
    st = NULL;
    if (!o.keep)
        nftw(store_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---------------------------------------------------------------------- */
/* raw RocksDB with the store's tuned options (mirrors set_options)         */

struct raw {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_block_based_table_options_t *bbto;
    rocksdb_cache_t *cache;
    rocksdb_readoptions_t *ro;
    rocksdb_writeoptions_t *wo;
    rocksdb_column_family_handle_t *cf[2];
};

static void raw_open(struct raw *r, const char *dir)
{
    char *err = NULL;
    r->cache = rocksdb_cache_create_lru(o.cache_bytes);
    r->bbto = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_filter_policy(
        r->bbto, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_whole_key_filtering(r->bbto, 1);
    rocksdb_block_based_options_set_block_cache(r->bbto, r->cache);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(r->bbto, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(
        r->bbto, 1);
    rocksdb_block_based_options_set_data_block_index_type(
        r->bbto,
        rocksdb_block_based_table_data_block_index_type_binary_search_and_hash);
    r->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(r->opts, 1);
    rocksdb_options_set_create_missing_column_families(r->opts, 1);
    rocksdb_options_set_block_based_table_factory(r->opts, r->bbto);
    rocksdb_options_set_memtable_whole_key_filtering(r->opts, 1);
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(r->opts, 0.1);
    rocksdb_options_set_write_buffer_size(r->opts, (size_t)32 << 20);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(r->opts, 1);
    rocksdb_options_set_compression(r->opts, rocksdb_no_compression);
    const char *names[2] = {"default", "ops"};
    const rocksdb_options_t *copts[2] = {r->opts, r->opts};
    r->db = rocksdb_open_column_families(r->opts, dir, 2, names, copts, r->cf,
                                         &err);
    if (err)
        die("rocksdb_open", err);
    r->ro = rocksdb_readoptions_create();
    r->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(r->wo, 1);
}

static void raw_close(struct raw *r)
{
    for (int i = 0; i < 2; i++)
        rocksdb_column_family_handle_destroy(r->cf[i]);
    rocksdb_close(r->db);
    rocksdb_options_destroy(r->opts);
    rocksdb_block_based_options_destroy(r->bbto);
    rocksdb_cache_destroy(r->cache);
    rocksdb_readoptions_destroy(r->ro);
    rocksdb_writeoptions_destroy(r->wo);
}

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, ID_LEN); /* equal lengths */
}

/* MultiGet the sorted ids; returns how many were found. */
static int raw_multiget(struct raw *r, char (*ids)[ID_LEN + 1], int n)
{
    static const char **keys;
    static size_t *sizes;
    static rocksdb_pinnableslice_t **vals;
    static char **errs;
    int found = 0;
    if (!keys) { /* one thread only */
        keys = calloc((size_t)o.batch, sizeof(*keys));
        sizes = calloc((size_t)o.batch, sizeof(*sizes));
        vals = calloc((size_t)o.batch, sizeof(*vals));
        errs = calloc((size_t)o.batch, sizeof(*errs));
    }
    for (int j = 0; j < n; j++) {
        keys[j] = ids[j];
        sizes[j] = ID_LEN;
    }
    rocksdb_batched_multi_get_cf(r->db, r->ro, r->cf[1], (size_t)n, keys,
                                 sizes, vals, errs, true);
    for (int j = 0; j < n; j++) {
        if (errs[j])
            die("rocksdb_batched_multi_get_cf", errs[j]);
        if (vals[j]) {
            found++;
            rocksdb_pinnableslice_destroy(vals[j]);
        }
    }
    return found;
}

static double raw_new(struct raw *r, long from, long to)
{
    int b = o.batch;
    char(*ids)[ID_LEN + 1] = calloc((size_t)b, sizeof(*ids));
    char value[RAW_VALUE_LEN];
    memset(value, 'v', sizeof(value));
    double t0 = now_s();
    for (long i = from; i < to; i += b) {
        int n = to - i < b ? (int)(to - i) : b;
        for (int j = 0; j < n; j++)
            op_id_of(i + j, ids[j]);
        qsort(ids, (size_t)n, sizeof(*ids), id_cmp);
        if (raw_multiget(r, ids, n) != 0)
            die("raw new", "a fresh key exists");
        rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
        for (int j = 0; j < n; j++)
            rocksdb_writebatch_put_cf(wb, r->cf[1], ids[j], ID_LEN, value,
                                      sizeof(value));
        char *err = NULL;
        rocksdb_write(r->db, r->wo, wb, &err);
        rocksdb_writebatch_destroy(wb);
        if (err)
            die("rocksdb_write", err);
    }
    double dt = now_s() - t0;
    free(ids);
    return (double)(to - from) / dt;
}

static double raw_dup(struct raw *r, long size)
{
    int b = o.batch;
    char(*ids)[ID_LEN + 1] = calloc((size_t)b, sizeof(*ids));
    uint64_t x = 42;
    long done = 0;
    double t0 = now_s();
    while (done < o.dups) {
        for (int j = 0; j < b; j++) {
            x = mix64(x);
            op_id_of((long)(x % (uint64_t)size), ids[j]);
        }
        qsort(ids, (size_t)b, sizeof(*ids), id_cmp);
        if (raw_multiget(r, ids, b) != b)
            die("raw dup", "an existing key is missing");
        done += b;
    }
    double dt = now_s() - t0;
    free(ids);
    return (double)done / dt;
}

static void run_raw(struct row *rows)
{
    char dir[512];
    struct raw r;
    snprintf(dir, sizeof(dir), "%s/raw-bench-XXXXXX", o.dir);
    if (!mkdtemp(dir))
        die("mkdtemp", dir);
    raw_open(&r, dir);
    long prev = 0, hwm;
    for (int k = 0; k < o.nsizes; k++) {
        rows[k].raw_new_s = raw_new(&r, prev, o.sizes[k]);
        rows[k].raw_dup_s = raw_dup(&r, o.sizes[k]);
        status_kb(&rows[k].raw_rss_kb, &hwm);
        fprintf(stderr, "raw %ld: %.0f new/s, %.0f dup/s, RSS %ld kB\n",
                o.sizes[k], rows[k].raw_new_s, rows[k].raw_dup_s,
                rows[k].raw_rss_kb);
        prev = o.sizes[k];
    }
    raw_close(&r);
    if (!o.keep)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---------------------------------------------------------------------- */

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--sizes N[,N...]] [--batch N] [--dir DIR] "
            "[--index-mb N] [--cache-mb N] [--dups N] [--no-raw] [--keep]\n",
            argv0);
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-raw") == 0)
            o.raw = false;
        else if (strcmp(a, "--keep") == 0)
            o.keep = true;
        else if (!v)
            usage(argv[0]);
        else if (strcmp(a, "--sizes") == 0) {
            char *end = NULL;
            o.nsizes = 0;
            for (const char *p = v; *p && o.nsizes < MAX_SIZES; p = end) {
                o.sizes[o.nsizes] = strtol(p, &end, 10);
                if (end == p || o.sizes[o.nsizes] <= 0
                    || (o.nsizes && o.sizes[o.nsizes] <= o.sizes[o.nsizes - 1]))
                    usage(argv[0]);
                o.nsizes++;
                if (*end == ',')
                    end++;
            }
            i++;
        } else if (strcmp(a, "--batch") == 0) {
            o.batch = atoi(v);
            i++;
        } else if (strcmp(a, "--dir") == 0) {
            o.dir = v;
            i++;
        } else if (strcmp(a, "--index-mb") == 0) {
            o.index_bytes = (size_t)atol(v) << 20;
            i++;
        } else if (strcmp(a, "--cache-mb") == 0) {
            o.cache_bytes = (size_t)atol(v) << 20;
            i++;
        } else if (strcmp(a, "--dups") == 0) {
            o.dups = atol(v);
            i++;
        } else
            usage(argv[0]);
    }
    if (o.batch <= 0 || o.batch > 100000 || o.nsizes == 0 || o.dups <= 0)
        usage(argv[0]);

    static struct row rows[MAX_SIZES];
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(la);
    }
    if (o.raw) {
        /* raw RocksDB in a child forked before any RocksDB thread exists */
        int fd[2];
        if (pipe(fd) != 0)
            die("pipe", "failed");
        pid_t pid = fork();
        if (pid == 0) {
            close(fd[0]);
            run_raw(rows);
            ssize_t w = write(fd[1], rows, sizeof(rows));
            _exit(w == (ssize_t)sizeof(rows) ? 0 : 1);
        }
        close(fd[1]);
        static struct row got[MAX_SIZES];
        size_t have = 0;
        while (have < sizeof(got)) {
            ssize_t n = read(fd[0], (char *)got + have, sizeof(got) - have);
            if (n <= 0)
                break;
            have += (size_t)n;
        }
        close(fd[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        if (have != sizeof(got) || !WIFEXITED(status)
            || WEXITSTATUS(status) != 0)
            die("raw RocksDB child", "failed");
        for (int k = 0; k < o.nsizes; k++) {
            rows[k].raw_new_s = got[k].raw_new_s;
            rows[k].raw_dup_s = got[k].raw_dup_s;
            rows[k].raw_rss_kb = got[k].raw_rss_kb;
        }
    }
    run_store(rows);

    printf("store_bench: batch %d, %ld duplicate decisions per measure, "
           "block cache %zu MiB, index bound %zu MiB, load average at start "
           "%.2f %.2f %.2f, %ld CPUs\n",
           o.batch, o.dups, o.cache_bytes >> 20, o.index_bytes >> 20, load[0],
           load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN));
    printf("| keys | store new/s (WAL, no fsync) | store dup/s claim_batch | store "
           "dup/s index_duplicate 1 thr | 2 thr | RocksDB new/s (sync) | "
           "RocksDB dup/s | store RSS MiB (HWM) | budget MiB | index MiB, "
           "B/op | RocksDB RSS MiB | rebuild s | complete/s |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "\n");
    for (int k = 0; k < o.nsizes; k++) {
        struct row *w = &rows[k];
        double budget = 256.0 + 64.0 * (double)w->idx_entries / 1048576.0;
        printf("| %ld | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f "
               "(%.0f) | %.0f | %.0f, %.1f | %.0f | %.1f | %.0f |\n",
               w->size, w->new_s, w->dup_batch_s, w->dup_fast1_s,
               w->dup_fast2_s, w->raw_new_s, w->raw_dup_s,
               w->rss_kb / 1024.0, w->hwm_kb / 1024.0, budget,
               w->idx_bytes / 1048576.0,
               w->idx_entries ? (double)w->idx_bytes / (double)w->idx_entries
                              : 0.0,
               w->raw_rss_kb / 1024.0, w->rebuild_s, w->complete_s);
    }
    return 0;
}
