/*
 * store_bench: claims per second through store.h (not part of the build).
 *
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Iinclude bench/store_bench.c src/store.c \
 *       src/err.c src/log.c $(pkg-config --cflags --libs rocksdb) -lpthread \
 *       -o store_bench
 *   ./store_bench [keys=200000] [threads=2] [dir=/tmp] [sync=0]
 *
 * Phases: NEW claims of distinct 32-byte op_ids, the same claims again
 * (DUPLICATE: the replay path), complete + ack of every op.  Each thread takes
 * an interleaved share of the keys.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store.h"

#define HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

enum phase { PH_NEW, PH_DUP, PH_DONE };

static struct store *st;
static long nkeys;
static int nthreads;
static enum phase phase;
static atomic_long failures;

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

static void *worker(void *arg)
{
    long t = (long)(intptr_t)arg;
    char op_id[33], err[DD_ERRSTR_SIZE];
    enum store_claim_result want =
        phase == PH_NEW ? STORE_CLAIM_NEW : STORE_CLAIM_DUPLICATE;
    for (long i = t; i < nkeys; i += nthreads) {
        snprintf(op_id, sizeof(op_id), "op-%029ld", i);
        int64_t now = wall_ms();
        if (phase == PH_DONE) {
            uint64_t seq;
            if (store_complete(st, op_id, 1, STORE_OP_COMPLETE, NULL, 1, "r",
                               1, now, &seq, err, sizeof(err))
                    != DD_OK
                || store_outbox_ack(st, seq, op_id, err, sizeof(err))
                       != DD_OK)
                atomic_fetch_add(&failures, 1);
            continue;
        }
        enum store_claim_result r;
        struct store_op op;
        if (store_claim(st, op_id, HASH, HASH, "bench/0/0", now, &r, &op, err,
                        sizeof(err))
                != DD_OK
            || r != want)
            atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

static void run(enum phase ph, const char *name)
{
    pthread_t th[64];
    phase = ph;
    double t0 = now_s();
    for (int t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    double dt = now_s() - t0;
    printf("%-18s %9ld ops %8.2f s %10.0f ops/s\n", name, nkeys, dt,
           nkeys / dt);
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    nkeys = argc > 1 ? atol(argv[1]) : 200000;
    nthreads = argc > 2 ? atoi(argv[2]) : 2;
    const char *base = argc > 3 ? argv[3] : "/tmp";
    bool sync = argc > 4 && atoi(argv[4]) != 0;
    if (nkeys <= 0 || nthreads <= 0 || nthreads > 64) {
        fprintf(stderr, "usage: %s [keys] [threads 1..64] [dir] [sync]\n",
                argv[0]);
        return 2;
    }
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/store-bench-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    struct store_conf conf = {.path = dir, .instance = "bench",
                              .run_id = "r1", .sync = sync};
    char err[DD_ERRSTR_SIZE];
    if (store_open(&conf, &st, err, sizeof(err)) != DD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("keys %ld, threads %d, sync %d, dir %s\n", nkeys, nthreads,
           (int)sync, dir);
    run(PH_NEW, "claim new");
    run(PH_DUP, "claim duplicate");
    run(PH_DONE, "complete + ack");
    store_compact(st);
    store_close(st);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    long f = atomic_load(&failures);
    if (f)
        fprintf(stderr, "%ld unexpected results\n", f);
    return f ? 1 : 0;
}
