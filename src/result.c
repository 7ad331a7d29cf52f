/* result.c - the events dedupd publishes, encoded with jansson (result.h).
 * @locality any thread, every function: reentrant, no shared state.  Caller:
 * the pipeline (and `dedupd inspect` for result_time_format). */
#include "result.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dd.h"
#include "fetch.h"
#include "job.h"
#include "jstr.h"
#include "key.h"
#include "store.h"

void result_time_format(int64_t ms, char *buf, size_t size)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ms % 1000));
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* Detail levels of a result: everything; without the body; minimal (no body,
 * meta, URLs or error text: what is left when even that is too large). */
enum detail { FULL, NO_BODY, MINIMAL };

/* The result object; at detail FULL the body's literal goes to *body (NULL
 * when there is none) for result_encode to splice in as the last member. */
struct body_out {
    char *lit;
    size_t len;
    const char *key;
};

static json_t *encode(const struct job *job, const struct fetch_result *r,
                      uint64_t generation, enum detail detail,
                      const char **outcome, struct body_out *body)
{
    bool with_body = detail == FULL;
    json_t *o = json_object();
    json_object_set_new(o, "event_key", json_string(job->event_key));
    json_object_set_new(o, "op_id", json_string(job->op_id));
    json_object_set_new(o, "request_hash", json_string(job->request_hash));
    json_object_set_new(o, "generation", json_integer((json_int_t)generation));
    json_object_set_new(o, "retry_epoch",
                        json_integer((json_int_t)job->retry_epoch));
    if (detail == MINIMAL) {
        char digest[KEY_HEX_LEN + 1];
        key_sha256_hex(job->req.url, strlen(job->req.url), digest);
        json_object_set_new(o, "url_sha256", json_string(digest));
        *outcome = "failed";
        json_object_set_new(o, "outcome", json_string("failed"));
        if (r) {
            json_object_set_new(o, "status", json_integer(r->status));
            json_object_set_new(o, "attempts", json_integer(r->attempts));
        }
        return o;
    }
    json_object_set_new(o, "job_key", str_or_null(job->job_key));
    json_object_set_new(o, "url", json_string(job->req.url));
    if (job->meta_json && detail == FULL) {
        json_t *m = json_loads(job->meta_json, 0, NULL);
        json_object_set_new(o, "meta", m ? m : json_null());
    }
    if (!r) {
        *outcome = "shadow";
        json_object_set_new(o, "outcome", json_string(*outcome));
        return o;
    }
    /* a 304 to the validators dedupd sent, answered from the stored body */
    *outcome = !r->ok ? "failed" : r->status == 304 ? "not_modified" : "fetched";
    json_object_set_new(o, "outcome", json_string(*outcome));
    if (!r->ok)
        json_object_set_new(o, "category", json_string(r->category));
    if (!r->ok && r->error)
        json_object_set_new(o, "error", json_string(r->error));
    json_object_set_new(o, "final_url", str_or_null(r->final_url));
    json_object_set_new(o, "status", json_integer(r->status));
    json_t *h = json_object();
    if (r->content_type)
        json_object_set_new(h, "content-type", json_string(r->content_type));
    if (r->etag)
        json_object_set_new(h, "etag", json_string(r->etag));
    if (r->last_modified)
        json_object_set_new(h, "last-modified", json_string(r->last_modified));
    json_object_set_new(o, "headers", h);
    char when[40];
    result_time_format(r->fetched_at_ms, when, sizeof(when));
    json_object_set_new(o, "fetched_at", json_string(when));
    json_object_set_new(o, "attempts", json_integer(r->attempts));
    json_object_set_new(o, "rotations", json_integer(r->rotations));
    json_object_set_new(o, "throttled", json_integer(r->throttled));
    json_t *sess = json_object();
    json_object_set_new(sess, "exit", json_string(r->session));
    if (r->session_rotates_at_ms > 0) {
        char at[40];
        result_time_format(r->session_rotates_at_ms, at, sizeof(at));
        json_object_set_new(sess, "rotates_at", json_string(at));
    }
    json_object_set_new(o, "session", sess);
    if (r->n_steps_total > 0) {
        /* A workflow: one record per step of the run that produced this
         * result (every step when fetched; up to the failing one when not). */
        json_object_set_new(o, "restarts", json_integer(r->restarts));
        json_t *steps = json_array();
        for (size_t i = 0; i < r->n_steps; i++) {
            const struct fetch_step_result *sr = &r->steps[i];
            json_t *st = json_object();
            json_object_set_new(st, "step", json_integer((json_int_t)i));
            if (i < job->n_steps) {
                json_object_set_new(st, "method", json_string(job->steps[i].method));
                json_object_set_new(st, "url", json_string(job->steps[i].url));
            }
            json_object_set_new(st, "status", json_integer(sr->status));
            if (sr->final_url && (i >= job->n_steps ||
                                  strcmp(sr->final_url, job->steps[i].url)))
                json_object_set_new(st, "final_url", json_string(sr->final_url));
            json_object_set_new(st, "bytes", json_integer((json_int_t)sr->bytes));
            if (sr->body_sha256[0])
                json_object_set_new(st, "body_sha256", json_string(sr->body_sha256));
            json_object_set_new(st, "attempts", json_integer(sr->attempts));
            json_object_set_new(st, "exit", json_string(sr->session));
            if (sr->category[0])
                json_object_set_new(st, "category", json_string(sr->category));
            json_array_append_new(steps, st);
        }
        json_object_set_new(o, "steps", steps);
    }
    if (r->body) {
        char digest[KEY_HEX_LEN + 1];
        if (r->body_sha256[0]) /* the fetch engine's (fetch.h) */
            memcpy(digest, r->body_sha256, sizeof(digest));
        else
            key_sha256_hex(r->body, r->body_len, digest);
        json_object_set_new(o, "body_sha256", json_string(digest));
        json_object_set_new(o, "bytes", json_integer((json_int_t)r->body_len));
        if (with_body && jstr_body_literal(r->body, r->body_len, &body->lit,
                                           &body->len, &body->key)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* A shadow result written straight into its buffer: the bytes the tree
 * below dumps (same members, same order), without the tree (issue 13: the
 * tree, its dump and the meta's reparse were 6% of a shadow run).  DD_OK,
 * DD_ERR_NOMEM, or DD_ERR_INVAL when the tree must decide: a string jstr
 * refuses, a meta with \u0000 (its reparse gives null there), a result above
 * max_bytes (the smaller forms). */
static dd_err_t shadow_encode(const struct job *job, uint64_t generation,
                              size_t max_bytes, char **out, size_t *out_len)
{
    const char *strs[5] = {job->event_key, job->op_id, job->request_hash,
                           job->job_key, job->req.url};
    size_t room = 200 + (job->meta_json ? strlen(job->meta_json) : 0);
    for (size_t i = 0; i < 5; i++)
        room += strs[i] ? 6 * strlen(strs[i]) + 2 : 4;
    if (job->meta_json && strstr(job->meta_json, "\\u0000"))
        return DD_ERR_INVAL;
    /* written on the stack when it fits, then copied to a block of its
     * size: the worst case (6 bytes a character) is about 2 KB, and each
     * glibc request of 1 KB or more (a large bin's) first merges every
     * freed fast-bin block (malloc_consolidate; with the malloc, 1.5% of
     * a shadow run's samples) */
    char stack[2048];
    char *b = room <= sizeof(stack) ? stack : malloc(room), *w = b;
    if (!b)
        return DD_ERR_NOMEM;
    static const char *const names[5] = {"{\"event_key\":", ",\"op_id\":",
                                         ",\"request_hash\":", ",\"job_key\":",
                                         ",\"url\":"};
    for (size_t i = 0; i < 5 && w; i++) {
        size_t nl = strlen(names[i]);
        memcpy(w, names[i], nl);
        w += nl;
        if (!strs[i]) {
            memcpy(w, "null", 4);
            w += 4;
        } else {
            w = jstr_quote_into(strs[i], strlen(strs[i]), w);
        }
        if (w && i == 2) { /* json_integer's "%lld" of each */
            static const char g[] = ",\"generation\":";
            static const char r[] = ",\"retry_epoch\":";
            memcpy(w, g, sizeof(g) - 1);
            w += sizeof(g) - 1;
            w += dd_fmt_i64(w, (int64_t)(json_int_t)generation);
            memcpy(w, r, sizeof(r) - 1);
            w += sizeof(r) - 1;
            w += dd_fmt_i64(w, (int64_t)(json_int_t)job->retry_epoch);
        }
    }
    if (w && job->meta_json) {
        static const char m[] = ",\"meta\":";
        size_t ml = strlen(job->meta_json);
        memcpy(w, m, sizeof(m) - 1);
        w += sizeof(m) - 1;
        memcpy(w, job->meta_json, ml);
        w += ml;
    }
    if (w) {
        static const char tail[] = ",\"outcome\":\"shadow\"}";
        memcpy(w, tail, sizeof(tail)); /* with its NUL */
        w += sizeof(tail) - 1;
    }
    if (!w || (size_t)(w - b) > max_bytes) {
        if (b != stack)
            free(b);
        return DD_ERR_INVAL;
    }
    size_t n = (size_t)(w - b);
    if (b == stack) {
        b = malloc(n + 1);
        if (!b)
            return DD_ERR_NOMEM;
        memcpy(b, stack, n + 1);
    }
    *out = b;
    *out_len = n;
    return DD_OK;
}

dd_err_t result_encode(const struct job *job, const struct fetch_result *r,
                       uint64_t generation, size_t max_bytes, char **out,
                       size_t *out_len, const char **outcome,
                       size_t *body_at)
{
    size_t at = 0;
    if (body_at)
        *body_at = 0;
    if (!r) {
        dd_err_t err = shadow_encode(job, generation, max_bytes, out, out_len);
        if (err != DD_ERR_INVAL) {
            *outcome = "shadow";
            return err;
        }
    }
    /* Full result; above max_bytes a failed/too_large result without body
     * and meta; if even that is too large (a huge URL), a minimal one. */
    char *s = NULL;
    size_t n = 0;
    for (enum detail d = FULL; d <= MINIMAL; d++) {
        struct body_out body = {NULL, 0, NULL};
        json_t *o = encode(job, r, generation, d, outcome, &body);
        if (!o)
            return DD_ERR_NOMEM;
        if (d != FULL) {
            *outcome = "failed";
            json_object_set_new(o, "outcome", json_string("failed"));
            json_object_set_new(o, "category", json_string("too_large"));
            json_object_set_new(o, "error",
                                json_string("result above limits.max_result_bytes"));
        }
        free(s);
        s = NULL;
        /* the bytes json_dumps(JSON_COMPACT) writes, in one pass; jansson
         * itself for what jstr leaves to it (a real in meta) */
        dd_err_t derr = jstr_dump_compact(o, false, &s, &n);
        if (derr == DD_ERR_INVAL)
            s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!s) {
            free(body.lit);
            return DD_ERR_NOMEM;
        }
        n = strlen(s);
        if (body.lit) {
            /* ...} -> ...,"KEY":LITERAL} (the object is never empty) */
            size_t klen = strlen(body.key);
            size_t total = n + 4 + klen + body.len;
            char *t = total <= max_bytes ? malloc(total + 1) : NULL;
            if (t) {
                memcpy(t, s, n - 1);
                char *w = t + n - 1;
                *w++ = ',';
                *w++ = '"';
                memcpy(w, body.key, klen);
                w += klen;
                *w++ = '"';
                *w++ = ':';
                at = (size_t)(w - t);
                memcpy(w, body.lit, body.len);
                w += body.len;
                *w++ = '}';
                *w = '\0';
                free(s);
                s = t;
            }
            free(body.lit);
            n = total;
            if (!t && total <= max_bytes) {
                free(s);
                return DD_ERR_NOMEM;
            }
        }
        if (n <= max_bytes)
            break;
        at = 0;
    }
    *out = s;
    *out_len = n;
    if (body_at)
        *body_at = at;
    return DD_OK;
}

dd_err_t result_conflict_encode(const char *op_id, const char *first_hash,
                                const char *first_source, const char *new_hash,
                                const char *new_source, char **out,
                                size_t *out_len)
{
    json_t *o = json_object();
    json_object_set_new(o, "op_id", json_string(op_id));
    json_object_set_new(o, "request_hash", json_string(first_hash));
    json_object_set_new(o, "request_source", json_string(first_source));
    json_object_set_new(o, "conflicting_request_hash", json_string(new_hash));
    json_object_set_new(o, "conflicting_source", json_string(new_source));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return DD_ERR_NOMEM;
    *out = s;
    *out_len = strlen(s);
    return DD_OK;
}

const char *result_op_outbox_str(const struct store_op *op)
{
    return op->outbox_state == STORE_OUTBOX_PENDING ? "pending"
           : op->outbox_state == STORE_OUTBOX_SENT  ? "sent"
                                                    : "none";
}

static json_t *attempt_log_encode(const struct store_attempt *att, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_object();
        json_object_set_new(a, "number", json_integer(att[i].number));
        json_object_set_new(a, "generation",
                            json_integer((json_int_t)att[i].generation));
        json_object_set_new(a, "started_at_ms",
                            json_integer(att[i].started_at_ms));
        json_object_set_new(a, "ended_at_ms", json_integer(att[i].ended_at_ms));
        json_object_set_new(a, "status", json_integer(att[i].status));
        json_object_set_new(a, "bytes", json_integer((json_int_t)att[i].bytes));
        json_object_set_new(a, "session", json_string(att[i].session));
        json_object_set_new(a, "exit", json_string(att[i].exit_addr));
        json_object_set_new(a, "category", json_string(att[i].category));
        json_object_set_new(a, "error", json_string(att[i].error));
        json_array_append_new(arr, a);
    }
    return arr;
}

dd_err_t result_op_encode(const char *op_id, const struct store_op *op,
                          const struct store_attempt *att, size_t n_att,
                          enum result_op_view view, char **out)
{
    bool full = view == RESULT_OP_FULL;
    json_t *o = json_object();
    json_object_set_new(o, "op_id", json_string(op_id));
    json_object_set_new(o, "state", json_string(store_op_state2str(op->state)));
    json_object_set_new(o, "request_hash", json_string(op->request_hash));
    json_object_set_new(o, "event_key", json_string(op->event_key));
    json_object_set_new(o, "generation", json_integer((json_int_t)op->generation));
    json_object_set_new(o, "retry_epoch",
                        json_integer((json_int_t)op->retry_epoch));
    if (full) {
        json_object_set_new(o, "lease_owner", json_string(op->lease_owner));
        json_object_set_new(o, "lease_expires_at_ms",
                            json_integer(op->lease_expires_at_ms));
        json_object_set_new(o, "created_at_ms", json_integer(op->created_at_ms));
        json_object_set_new(o, "updated_at_ms", json_integer(op->updated_at_ms));
        json_object_set_new(o, "expires_at_ms", json_integer(op->expires_at_ms));
    }
    json_object_set_new(o, "attempts", json_integer(op->attempts));
    json_object_set_new(o, "outbox", json_string(result_op_outbox_str(op)));
    if (full) {
        json_object_set_new(o, "first_source", json_string(op->source));
        json_object_set_new(o, "category", json_string(op->category));
        if (op->not_before_ms)
            json_object_set_new(o, "not_before_ms",
                                json_integer(op->not_before_ms));
        json_object_set_new(o, "attempt_log", attempt_log_encode(att, n_att));
    } else {
        if (op->category[0])
            json_object_set_new(o, "category", json_string(op->category));
        if (op->state == STORE_OP_RETRYABLE)
            json_object_set_new(o, "not_before_ms",
                                json_integer(op->not_before_ms));
        json_object_set_new(o, "expires_at_ms", json_integer(op->expires_at_ms));
    }
    *out = json_dumps(o, full ? JSON_INDENT(2) : JSON_COMPACT);
    json_decref(o);
    return *out ? DD_OK : DD_ERR_NOMEM;
}
