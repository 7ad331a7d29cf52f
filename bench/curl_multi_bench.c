/*
 * curl_multi_bench: the fetch ceiling of the benchmarks (issue 6).  A bare
 * libcurl multi client that GETs every URL of a file (one per line) with N
 * transfers in flight, optionally through a proxy, and prints one JSON line:
 *
 *   {"requests":N,"ok":K,"failed":F,"bytes":B,"concurrency":C,"seconds":S,
 *    "requests_per_second":R}
 *
 *   curl_multi_bench --urls FILE [-c 256] [--proxy URL] [--tunnel]
 *                    [--max-host N] [--timeout-ms 30000]
 *
 * ok = transfers that ended with a 2xx status.  bytes = decoded body bytes.
 * Each transfer is set up as dedupd's fetch engine sets it up (GET,
 * Accept-Encoding: every codec libcurl has, NOSIGNAL, connection reuse on, no
 * redirects), without the engine's per-op work (sessions, SSRF guard, result
 * encoding), so the ratio shows what that work costs.  --tunnel asks the HTTP
 * proxy for a CONNECT tunnel even for http:// URLs (CURLOPT_HTTPPROXYTUNNEL;
 * dedupd does not), --max-host caps connections per host
 * (CURLMOPT_MAX_HOST_CONNECTIONS, dedupd uses 64); 0 = no cap.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t g_bytes;

static size_t write_cb(char *p, size_t sz, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    g_bytes += sz * n;
    return sz * n;
}

static void usage(void)
{
    fprintf(stderr, "usage: curl_multi_bench --urls FILE [-c N] [--proxy URL] "
                    "[--tunnel] [--max-host N] [--timeout-ms MS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *file = NULL, *proxy = NULL;
    long conc = 256, max_host = 0, timeout_ms = 30000;
    bool tunnel = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tunnel")) {
            tunnel = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--urls"))
            file = v;
        else if (!strcmp(a, "-c"))
            conc = atol(v);
        else if (!strcmp(a, "--proxy"))
            proxy = v;
        else if (!strcmp(a, "--max-host"))
            max_host = atol(v);
        else if (!strcmp(a, "--timeout-ms"))
            timeout_ms = atol(v);
        else
            usage();
    }
    if (!file || conc < 1)
        usage();

    FILE *f = fopen(file, "r");
    if (!f) {
        perror(file);
        return 1;
    }
    size_t n = 0, cap = 1024;
    char **urls = malloc(cap * sizeof(*urls));
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (!len)
            continue;
        if (n == cap)
            urls = realloc(urls, (cap *= 2) * sizeof(*urls));
        urls[n++] = strdup(line);
    }
    free(line);
    fclose(f);

    curl_global_init(CURL_GLOBAL_ALL);
    CURLM *m = curl_multi_init();
    if (max_host > 0)
        curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, max_host);
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, conc);

    size_t next = 0, done = 0, ok = 0, failed = 0;
    long running = 0;
    double t0 = now_s();
    /* A pool of easy handles, reused (kept connections go with the multi). */
    CURL **pool = calloc((size_t)conc, sizeof(*pool));
    long free_n = 0;
    for (long i = 0; i < conc; i++)
        pool[free_n++] = curl_easy_init();

    while (done < n) {
        while (free_n > 0 && next < n) {
            CURL *e = pool[--free_n];
            curl_easy_reset(e);
            curl_easy_setopt(e, CURLOPT_URL, urls[next++]);
            curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
            curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
            curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
            curl_easy_setopt(e, CURLOPT_USERAGENT, "curl_multi_bench");
            curl_easy_setopt(e, CURLOPT_PROXY, proxy ? proxy : "");
            if (tunnel)
                curl_easy_setopt(e, CURLOPT_HTTPPROXYTUNNEL, 1L);
            curl_multi_add_handle(m, e);
            running++;
        }
        int still = 0;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            CURL *e = msg->easy_handle;
            long code = 0;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
            if (msg->data.result == CURLE_OK && code >= 200 && code < 300)
                ok++;
            else {
                if (failed < 5)
                    fprintf(stderr, "curl_multi_bench: %s (HTTP %ld)\n",
                            curl_easy_strerror(msg->data.result), code);
                failed++;
            }
            curl_multi_remove_handle(m, e);
            pool[free_n++] = e;
            running--;
            done++;
        }
        if (done < n && (free_n == 0 || next >= n))
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double secs = now_s() - t0;
    printf("{\"requests\":%zu,\"ok\":%zu,\"failed\":%zu,\"bytes\":%llu,"
           "\"concurrency\":%ld,\"seconds\":%.3f,\"requests_per_second\":%.1f}\n",
           n, ok, failed, (unsigned long long)g_bytes, conc, secs,
           secs > 0 ? (double)n / secs : 0.0);
    for (long i = 0; i < free_n; i++)
        curl_easy_cleanup(pool[i]);
    free(pool);
    curl_multi_cleanup(m);
    for (size_t i = 0; i < n; i++)
        free(urls[i]);
    free(urls);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
