/*
 * INTERNAL to the fetch engine (fetch.c, fetch_easy.c): the op's transfer
 * state (struct xfer), the engine's (struct fetch), and the libcurl easy
 * handle set-up of fetch_easy.c (options, proxy and credentials, request,
 * cookie jar, the write/header/open-socket callbacks and the SSRF check of
 * a URL).  Not a contract for other modules: include fetch.h.
 *
 * Threads: an xfer belongs to its submitter until fetch_submit queues it,
 * then to the fetch-engine thread; struct fetch's fields above "thread-local"
 * are shared under f->lock (or atomics), the rest are the engine thread's.
 * Everything declared here runs on the fetch-engine thread unless its
 * @locality says otherwise.
 */
#ifndef DEDUPD_FETCH_INTERNAL_H
#define DEDUPD_FETCH_INTERNAL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch.h"

struct cfg;
struct fetch_host;
struct fetch_hosts;
struct guard;
struct proxy_pool;

/* One fetch_release() call: \p opaque, for the requests submitted before it
 * (seq <= \p seq). */
struct fetch_release_req {
    void *opaque;
    uint64_t seq;
};

enum xfer_state { XF_WAITING, XF_RUNNING };

/* One request of an op: the op itself, or one step of a workflow (owned). */
struct wstep {
    char *url, *method;
    char **hdr_names, **hdr_values;
    size_t n_headers;
    unsigned char *body;          /* NULL = none */
    size_t body_len;
};

struct xfer {
    struct xfer *next;            /* in waiting list or done queue */
    struct xfer *run_prev, *run_next; /* in the running list */
    /* the op's requests (owned): one, or a workflow's steps */
    struct wstep *steps;
    size_t n_steps;
    bool workflow, replayable;
    size_t step;                  /* current step */
    /* current request: the step's, changed by redirects */
    char *url;                    /* current URL (changes on redirect) */
    const char *orig_url;         /* the step's URL as submitted (borrowed) */
    char *method;
    const unsigned char *body;    /* borrowed from the step; NULL after 303 */
    size_t body_len;
    char host[256];               /* per-host limit key of url */
    bool safe;
    char country[3];
    char rotation[12];            /* the job's rotation mode, "" = provider's */
    int64_t deadline_ms;
    void *opaque;
    /* progress */
    enum xfer_state state;
    int64_t not_before_ms;
    int session;                  /* pool session number or -1 */
    bool proxied;                 /* the running attempt's session has a proxy */
    bool fresh_connect;
    uint32_t attempts, rotations, throttled, redirects;
    int64_t asked_wait_ms;        /* the last blocked answer's Retry-After
                                     wait (ms, unclamped), -1 = none */
    uint32_t step_attempts;       /* attempts of the current step in this run */
    uint32_t step_5xx;            /* same-session retries of the step on 5xx */
    uint32_t restarts;            /* workflow restarts from the first step */
    bool need_rotate;             /* next launch moves to another session */
    bool wait_slot, gate_waited;  /* held by the per-host concurrency cap */
    struct fetch_host *hs;        /* per-host slot counted while running */
    int pin;                      /* session pinned mid-way, or -1 */
    unsigned run_renewals;        /* session identity when the run bound it */
    int64_t run_epoch;
    CURLSH *jar;                  /* workflows: cookie jar of this run */
    int jar_session;              /* session the jar belongs to */
    unsigned jar_renewals;
    int64_t jar_epoch;
    struct fetch_step_result *sres; /* step outcomes of this run */
    size_t n_sres;
    CURL *easy;
    struct curl_slist *slist;
    char errbuf[CURL_ERROR_SIZE];
    bool too_large, refused_target, headers_too_large;
    size_t header_bytes;          /* of the current response's header block */
    /* response of the current attempt */
    unsigned char *rbody;
    size_t rlen, rcap;
    char *retry_after, *etag, *last_modified, *content_type;
    struct fetch *f;
    struct fetch_attempt *alog;   /* attempt records */
    size_t n_alog, cap_alog;
    size_t noted_alog;            /* attempts reported to the retry hook */
    bool retry_noted;             /* a FETCH_RETRY_WAIT awaits its START */
    /* fetch_release */
    uint64_t seq;                 /* submission number (f->submit_seq) */
    bool released;                /* released while running: the running
                                     attempt is its last */
};

struct fetch {
    const struct cfg *cfg;
    pthread_t thread;
    bool thread_started;
    CURLM *multi;
    atomic_bool stop;

    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    struct xfer *incoming;        /* submitted, not yet seen by the thread */
    struct fetch_result **done;   /* completion ring */
    size_t done_head, done_n, done_cap;
    size_t inflight;              /* submitted, not taken */

    struct xfer **incoming_tailp;
    uint64_t submit_seq;          /* requests submitted so far */
    struct fetch_release_req *rel; /* fetch_release calls not yet seen by
                                      the thread */
    size_t n_rel, cap_rel;

    /* thread-local */
    struct xfer *waiting;         /* retry timers and new work (FIFO) */
    struct xfer **waiting_tailp;
    struct xfer *run_head;        /* transfers attached to the multi handle */
    size_t running;
    struct fetch_hosts *hosts;    /* per-host limits */

    struct proxy_pool *pool;      /* sessions (engine thread once started) */
    struct guard *guard;          /* immutable */
    long *blocked;
    size_t n_blocked;
    uint64_t rnd;
    fetch_retry_cb *retry_cb;     /* set before the first submit */
    void *retry_opaque;
    fetch_done_cb *done_cb;       /* set before the first submit */
    void *done_opaque;

    atomic_uint_fast64_t st_attempts, st_rotations, st_throttled, st_bytes,
        st_completed, st_failed, st_restarts, st_host_waits,
        st_auth_suspensions, st_released;
};

/* ---- fetch_easy.c: the libcurl easy handle -------------------------------- */

/* True when the SSRF guard refuses the target of \p url (an IP literal in
 * loopback, link-local or private ranges not in fetch.allow_targets; a
 * name is not resolved here).  @locality fetch-engine thread */
bool fetch_easy_target_refused(struct fetch *f, const char *url);

/* Forget the response of the last attempt (body length, flags, the headers
 * kept, the error buffer); the body buffer stays allocated for reuse.
 * @locality fetch-engine thread */
void fetch_easy_reset_response(struct xfer *x);

/* Set up x->easy (created on first use, else reset) for an attempt of
 * \p x's current request through x->session at \p now: every option, the
 * session's proxy and credentials, the request's method, headers and body,
 * and a workflow's cookie jar (a new, empty one when the session or its
 * exit changed).  Resets the response (fetch_easy_reset_response).  Out of
 * memory: dd_oom.  @locality fetch-engine thread */
void fetch_easy_setup(struct fetch *f, struct xfer *x, int64_t now);

/* Drop the op's cookie jar (a new session starts with none); no jar: no-op.
 * @locality fetch-engine thread (or the submitter's, for a failed submit) */
void fetch_easy_jar_drop(struct xfer *x);

/* Free what a CURLOPT_COOKIEFILE set-up of a workflow's easy handle keeps
 * (libcurl 7.88 leaks it otherwise); call before a reset or cleanup.
 * @locality fetch-engine thread (or the submitter's, for a failed submit) */
void fetch_easy_cookiefile_clear(struct xfer *x);

#endif
