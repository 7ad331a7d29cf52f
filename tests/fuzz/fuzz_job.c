/*
 * fuzz_job.c - job_parse() on arbitrary bytes, with the default job_conf
 * (variance headers accept/accept-language, built-in credential headers,
 * max 1 MiB).
 *
 * This is also the fuzz target for `POST /v1/jobs`: http.c only checks the
 * method, Content-Type and size and hands the body bytes to the submit
 * callback, which parses them with job_parse() exactly as the consumer does
 * for a Kafka payload.  Fuzzing libmicrohttpd's own request parsing is out of
 * scope here (heavy, and not our code).
 *
 * Properties, abort() on violation:
 *  - success: op_id non-empty; request_hash and event_key 64 lower-case hex;
 *    canonical is a JSON object that re-serializes (compact, sorted keys) to
 *    itself, with "v": 1 and every documented key; request_hash is the
 *    SHA-256 of canonical; event_key is key_event_key(op_id, request_hash);
 *    op_id is request_hash without job_key, scope ":" job_key with it;
 *    every request's normalized_url is a fixed point of key_url_normalize
 *    and has the host curl connects to for its url (fuzz_curl_host: no
 *    host/path confusion, IPv4 forms that appear after percent-decoding or
 *    IDN read as the resolver reads them);
 *    a NUL follows each body; header names/values have no CR, LF or NUL.
 *  - failure: DD_ERR_PERMANENT (never NOMEM: libFuzzer aborts on a failed
 *    allocation, so NOMEM means a misclassified input), a non-empty reason
 *    in valid UTF-8 without control characters (it becomes the dedupd-error
 *    Kafka header, a log line and the API's JSON error body), *out left
 *    NULL.
 */
#include <jansson.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "job.h"
#include "key.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    key_global_init();
    return 0;
}

static void check_request(const struct job_request *r)
{
    FUZZ_CHECK(r->url && r->normalized_url && r->method, "request field NULL");
    char *n2 = NULL;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = key_url_normalize(r->normalized_url, &n2, e, sizeof(e));
    FUZZ_CHECK(err == DD_OK && strcmp(n2, r->normalized_url) == 0,
               "normalized_url \"%s\" is not a fixed point (%d: %s -> %s)",
               r->normalized_url, (int)err, e, n2 ? n2 : "(null)");
    free(n2);
    char *h_in = fuzz_curl_host(r->url);
    char *h_out = fuzz_curl_host(r->normalized_url);
    FUZZ_CHECK(h_in && h_out && strcmp(h_in, h_out) == 0,
               "host changed: url \"%s\", normalized_url \"%s\", host "
               "\"%s\" -> \"%s\"", r->url, r->normalized_url,
               h_in ? h_in : "(none)", h_out ? h_out : "(none)");
    free(h_in);
    free(h_out);
    for (size_t i = 0; i < r->n_headers; i++) {
        const struct job_header *h = &r->headers[i];
        FUZZ_CHECK(h->name[0] != '\0' && !strpbrk(h->name, "\r\n:"),
                   "bad header name \"%s\"", h->name);
        FUZZ_CHECK(!strpbrk(h->value, "\r\n"), "CR/LF in header value");
    }
    if (r->body)
        FUZZ_CHECK(r->body[r->body_len] == '\0', "body not NUL-terminated");
    else
        FUZZ_CHECK(r->body_len == 0, "body_len %zu without body", r->body_len);
}

static void check_job(const struct job *job)
{
    static const char *const keys[] = {
        "body_sha256", "country", "credentials", "headers", "method",
        "parser_version", "scheduled_for", "steps", "url", "v",
    };
    FUZZ_CHECK(job->op_id[0] != '\0', "empty op_id");
    FUZZ_CHECK(strlen(job->op_id) <= JOB_OP_ID_MAX, "op_id too long");
    FUZZ_CHECK(fuzz_is_hex(job->request_hash, JOB_HEX_LEN),
               "request_hash \"%s\"", job->request_hash);
    FUZZ_CHECK(fuzz_is_hex(job->event_key, JOB_HEX_LEN), "event_key \"%s\"",
               job->event_key);
    FUZZ_CHECK(job->canonical != NULL, "canonical NULL");
    FUZZ_CHECK(job->scope != NULL, "scope NULL");

    json_error_t je;
    json_t *c = json_loads(job->canonical, JSON_REJECT_DUPLICATES, &je);
    FUZZ_CHECK(c && json_is_object(c), "canonical does not parse: %s (%s)",
               je.text, job->canonical);
    char *again = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    FUZZ_CHECK(again && strcmp(again, job->canonical) == 0,
               "canonical is not in canonical form:\n  %s\n  %s",
               job->canonical, again ? again : "(null)");
    free(again);
    FUZZ_CHECK(json_object_size(c) == sizeof(keys) / sizeof(keys[0]),
               "canonical has %zu keys", json_object_size(c));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        FUZZ_CHECK(json_object_get(c, keys[i]) != NULL,
                   "canonical lacks \"%s\"", keys[i]);
    FUZZ_CHECK(json_integer_value(json_object_get(c, "v")) == 1, "v != 1");
    json_decref(c);

    char hex[KEY_HEX_LEN + 1];
    key_sha256_hex(job->canonical, strlen(job->canonical), hex);
    FUZZ_CHECK(strcmp(hex, job->request_hash) == 0,
               "request_hash is not sha256(canonical)");
    key_event_key(job->op_id, job->request_hash, hex);
    FUZZ_CHECK(strcmp(hex, job->event_key) == 0, "event_key mismatch");
    if (job->job_key) {
        size_t sl = strlen(job->scope);
        FUZZ_CHECK(strncmp(job->op_id, job->scope, sl) == 0 &&
                   job->op_id[sl] == ':' &&
                   strcmp(job->op_id + sl + 1, job->job_key) == 0,
                   "op_id \"%s\" is not scope:job_key", job->op_id);
    } else {
        FUZZ_CHECK(strcmp(job->op_id, job->request_hash) == 0,
                   "op_id \"%s\" is not request_hash", job->op_id);
    }

    if (job->steps) {
        FUZZ_CHECK(job->n_steps >= 1 && job->n_steps <= 32, "n_steps %zu",
                   job->n_steps);
        for (size_t i = 0; i < job->n_steps; i++)
            check_request(&job->steps[i]);
        FUZZ_CHECK(job->req.url == job->steps[0].url, "req is not steps[0]");
    } else {
        FUZZ_CHECK(job->n_steps == 0, "n_steps %zu without steps",
                   job->n_steps);
        check_request(&job->req);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct job_conf conf = { 0 };
    struct job *job = (struct job *)(uintptr_t)1; /* must be reset */
    char e[DD_ERRSTR_SIZE] = "";

    dd_err_t err = job_parse(&conf, data, size, &job, e, sizeof(e));
    if (err != DD_OK) {
        /* NOMEM cannot happen here (libFuzzer's malloc limit aborts instead
         * of returning NULL): an invalid job must be PERMANENT. */
        FUZZ_CHECK(err == DD_ERR_PERMANENT,
                   "error %d (%s), want DD_ERR_PERMANENT", (int)err, e);
        FUZZ_CHECK(job == NULL, "*out set on error");
        FUZZ_CHECK(e[0] != '\0', "refused without a reason");
        FUZZ_CHECK(fuzz_no_ctl(e), "control character in reason \"%s\"", e);
        FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)e, strlen(e)),
                   "reason \"%s\" is not UTF-8", e);
        return 0;
    }
    FUZZ_CHECK(job != NULL, "DD_OK without a job");
    check_job(job);
    job_destroy(job);
    return 0;
}
