/*
 * parse_bench: job_parse() alone on one thread, no Kafka, no store: the
 * share of the decision path that parses a job (JSON, URL normalization,
 * canonical request, op_id / request_hash / event_key), measured without the
 * broker's noise so that a change to job.c or key.c can be compared.
 *
 *   cmake --build build --target parse_bench      (bench/CMakeLists.txt)
 *   bench/gen_jobs.sh 100000 pb unique > /tmp/jobs.ndjson
 *   build/bench/parse_bench /tmp/jobs.ndjson [rounds=5] [threads=1]
 *
 * Each round parses every line of the file (one job per line) and destroys
 * the job; prints one JSON line: jobs, rounds, the fastest and the median
 * round's ns per job, and invalid lines (those count as parses too).  With
 * threads > 1, each thread parses the whole file in each round and only
 * jobs_per_second (summed over the threads) is printed: what parsing on more
 * threads could give at most.
 */
#include "job.h"
#include "key.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct line {
    char *p;
    size_t n;
};

static struct line *lines;
static size_t n_lines;
static struct job_conf jc;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* one round over every line; returns the invalid ones */
static size_t round_all(void)
{
    size_t bad = 0;
    char e[256];
    for (size_t i = 0; i < n_lines; i++) {
        struct job *j = NULL;
        if (job_parse(&jc, lines[i].p, lines[i].n, &j, e, sizeof(e)))
            bad++;
        job_destroy(j);
    }
    return bad;
}

static void *thread_main(void *a)
{
    int rounds = *(int *)a;
    for (int r = 0; r < rounds; r++)
        round_all();
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: parse_bench JOBS.ndjson [rounds=5] [threads=1]\n");
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    if (rounds < 1 || rounds > 1000 || threads < 1 || threads > 64) {
        fprintf(stderr, "parse_bench: rounds 1..1000, threads 1..64\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    size_t cap = 0;
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t got;
    while ((got = getline(&buf, &bcap, f)) > 0) {
        while (got && (buf[got - 1] == '\n' || buf[got - 1] == '\r'))
            got--;
        if (!got)
            continue;
        if (n_lines == cap) {
            cap = cap ? cap * 2 : 1024;
            lines = realloc(lines, cap * sizeof(*lines));
            if (!lines)
                return 1;
        }
        lines[n_lines].p = malloc((size_t)got);
        if (!lines[n_lines].p)
            return 1;
        memcpy(lines[n_lines].p, buf, (size_t)got);
        lines[n_lines++].n = (size_t)got;
    }
    free(buf);
    fclose(f);
    if (!n_lines) {
        fprintf(stderr, "parse_bench: %s has no jobs\n", argv[1]);
        return 1;
    }
    key_global_init();
    job_global_init();
    size_t bad = round_all(); /* warm-up: allocator, OpenSSL, libcurl */
    double *ns = calloc((size_t)rounds, sizeof(*ns));
    if (!ns)
        return 1;
    double t_all = now_s();
    if (threads == 1) {
        for (int r = 0; r < rounds; r++) {
            double t = now_s();
            round_all();
            ns[r] = (now_s() - t) * 1e9 / (double)n_lines;
        }
    } else {
        pthread_t th[64];
        for (int i = 0; i < threads; i++)
            if (pthread_create(&th[i], NULL, thread_main, &rounds))
                return 1;
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
    }
    double wall = now_s() - t_all;
    printf("{\"jobs\":%zu,\"rounds\":%d,\"threads\":%d,\"invalid\":%zu,",
           n_lines, rounds, threads, bad);
    if (threads == 1) { /* per round: one thread's time per job */
        qsort(ns, (size_t)rounds, sizeof(*ns), cmp_d);
        printf("\"ns_per_job_min\":%.0f,\"ns_per_job_median\":%.0f,",
               ns[0], ns[(rounds - 1) / 2]);
    }
    printf("\"jobs_per_second\":%.0f}\n",
           (double)n_lines * rounds * threads / wall);
    free(ns);
    for (size_t i = 0; i < n_lines; i++)
        free(lines[i].p);
    free(lines);
    return 0;
}
