/*
 * fuzz_api_submit.c - the body handling of `POST /v1/jobs` before the store
 * and Kafka: api.c's api_submit_parse(), which the job API's handler calls
 * (Idempotency-Key check, job_with_key(), job_parse(), the 400's JSON error
 * body).
 *
 * Input: "KEY\nBODY" (the Idempotency-Key header value, then the body); an
 * input without '\n' is a body sent without the header.  A KEY with a NUL
 * byte is skipped (an HTTP header value cannot carry one).  The scope is the
 * default api.scope, "api"; the job_conf is the default one (fuzz_job varies
 * it).  libmicrohttpd's request parsing is not fuzzed.
 *
 * Properties, abort() on violation:
 *  - the answer is 0 (go on) or 400; a 400 has a body, and it is the
 *    documented {"error": "<reason>"} with a reason by fuzz_check_text()
 *    (non-empty, UTF-8, no control character), and no job or payload;
 *  - job_with_key() and job_parse(), called one by one on the same input,
 *    refuse with DD_ERR_PERMANENT only (never NOMEM, as in every target),
 *    with a reason by fuzz_check_text(), leave their output untouched
 *    (job_with_key) or NULL (job_parse), and agree with the API's answer
 *    and payload;
 *  - a KEY is refused as malformed exactly when it breaks the documented
 *    rule (api.h: 1..255 printable ASCII, no '"' or '\\'; written here as a
 *    character set, independently of api.c's loop);
 *  - a keyed job has job_key KEY, scope "api" and op_id "api:" KEY, and the
 *    payload produced is a JSON object with that job_key and scope;
 *  - with a well-formed KEY, a body that job_parse() accepts without a key,
 *    and whose own job_key and scope (when strings) are KEY and "api", is
 *    accepted with the key too, with the same request_hash (job_key and
 *    scope are not in the canonical request): the API does not refuse a job
 *    that the Kafka path takes.
 */
#include <jansson.h>
#include <stdint.h>

#include "api.h"
#include "fuzz_common.h"
#include "job.h"
#include "key.h"

#define API_SCOPE "api"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    key_global_init();
    return 0;
}

/* api.h's rule for an Idempotency-Key, as a character set (an independent
 * oracle for api.c's api_key_valid()). */
static bool key_well_formed(const char *k)
{
    static char allowed[96];
    if (!allowed[0]) {
        size_t n = 0;
        for (int c = 0x20; c <= 0x7e; c++)
            if (c != '"' && c != '\\')
                allowed[n++] = (char)c;
    }
    size_t n = strlen(k);
    return n >= 1 && n <= 255 && strspn(k, allowed) == n;
}

/* A 400's body: {"error": "<reason>"} and nothing else. */
static void check_error_body(const char *resp)
{
    FUZZ_CHECK(resp != NULL, "400 without a body (the reason could not be a "
               "JSON string?)");
    json_error_t je;
    json_t *o = json_loads(resp, JSON_REJECT_DUPLICATES, &je);
    FUZZ_CHECK(o && json_is_object(o) && json_object_size(o) == 1 &&
                   json_is_string(json_object_get(o, "error")),
               "400 body is not {\"error\": string}: %s", resp);
    fuzz_check_text("POST /v1/jobs 400",
                    json_string_value(json_object_get(o, "error")));
    json_decref(o);
}

static const char *str_member(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct job_conf conf = { 0 };
    const uint8_t *nl = memchr(data, '\n', size);
    if (nl && memchr(data, '\0', (size_t)(nl - data)))
        return 0; /* not a header value */
    char *key = nl ? fuzz_cstr(data, (size_t)(nl - data)) : NULL;
    const uint8_t *body = nl ? nl + 1 : data;
    size_t len = nl ? size - (size_t)(nl + 1 - data) : size;
    /* what the handler would get: a NUL follows the body (http.h) */
    char *bodyz = fuzz_cstr(body, len);

    struct job *job = (struct job *)(uintptr_t)1;
    char *keyed = (char *)(uintptr_t)1, *resp = (char *)(uintptr_t)1;
    size_t keyed_len = (size_t)-1;
    int status = api_submit_parse(API_SCOPE, &conf, key, bodyz, len, &job,
                                  &keyed, &keyed_len, &resp);
    FUZZ_CHECK(status == 0 || status == 400, "status %d", status);
    if (key && !key_well_formed(key))
        FUZZ_CHECK(status == 400, "malformed Idempotency-Key \"%s\" not "
                   "refused", key);
    if (status == 400) {
        FUZZ_CHECK(job == NULL && keyed == NULL,
                   "400 with a job or a payload left");
        FUZZ_CHECK(resp != (char *)(uintptr_t)1, "400: body not written");
        check_error_body(resp);
    } else {
        FUZZ_CHECK(resp == NULL, "0 with a response body");
        FUZZ_CHECK(job != NULL && job != (struct job *)(uintptr_t)1,
                   "0 without a job");
        if (!key) {
            FUZZ_CHECK(keyed == NULL && keyed_len == len,
                       "unkeyed submit: payload is not the body");
        } else {
            FUZZ_CHECK(keyed != NULL && keyed != (char *)(uintptr_t)1 &&
                           keyed_len == strlen(keyed),
                       "keyed submit without its payload");
            json_error_t je;
            json_t *o = json_loadb(keyed, keyed_len, JSON_REJECT_DUPLICATES,
                                   &je);
            FUZZ_CHECK(o && json_is_object(o), "keyed payload does not "
                       "parse: %s", je.text);
            FUZZ_CHECK(str_member(o, "job_key") &&
                           strcmp(str_member(o, "job_key"), key) == 0 &&
                           str_member(o, "scope") &&
                           strcmp(str_member(o, "scope"), API_SCOPE) == 0,
                       "keyed payload lacks job_key/scope: %s", keyed);
            json_decref(o);
            char want[JOB_OP_ID_MAX + 1];
            snprintf(want, sizeof(want), "%s:%s", API_SCOPE, key);
            FUZZ_CHECK(job->job_key && strcmp(job->job_key, key) == 0 &&
                           strcmp(job->scope, API_SCOPE) == 0 &&
                           strcmp(job->op_id, want) == 0,
                       "keyed job: op_id \"%s\", want \"%s\"", job->op_id,
                       want);
        }
    }

    /* The steps called one by one: job_with_key() and job_parse() refuse
     * with DD_ERR_PERMANENT only (never NOMEM, as in every target), leave
     * their output untouched, and agree with api_submit_parse(). */
    if (!key || key_well_formed(key)) {
        char e[DD_ERRSTR_SIZE] = "";
        char *kd = (char *)(uintptr_t)1;
        size_t kl = (size_t)-1;
        const char *payload = bodyz;
        size_t plen = len;
        bool refused = false;
        if (key) {
            dd_err_t err = job_with_key(bodyz, len, key, API_SCOPE, &kd, &kl,
                                        e, sizeof(e));
            if (err) {
                FUZZ_CHECK(err == DD_ERR_PERMANENT, "job_with_key: error %d "
                           "(%s), want DD_ERR_PERMANENT", (int)err, e);
                FUZZ_CHECK(kd == (char *)(uintptr_t)1 && kl == (size_t)-1,
                           "job_with_key: output written on failure");
                fuzz_check_text("job_with_key", e);
                FUZZ_CHECK(status == 400, "job_with_key refused (%s) but "
                           "the API went on", e);
                refused = true;
            } else {
                FUZZ_CHECK(kd != (char *)(uintptr_t)1 && kl == strlen(kd),
                           "job_with_key: DD_OK without its output");
                FUZZ_CHECK(status == 400 || (keyed_len == kl &&
                                             memcmp(keyed, kd, kl) == 0),
                           "the API produces another payload than "
                           "job_with_key's");
                payload = kd;
                plen = kl;
            }
        }
        if (!refused) {
            struct job *j = (struct job *)(uintptr_t)1;
            dd_err_t err = job_parse(&conf, payload, plen, &j, e, sizeof(e));
            if (err) {
                FUZZ_CHECK(err == DD_ERR_PERMANENT, "job_parse: error %d "
                           "(%s), want DD_ERR_PERMANENT", (int)err, e);
                FUZZ_CHECK(j == NULL, "job_parse: *out not NULL on error");
                fuzz_check_text("job_parse", e);
                FUZZ_CHECK(status == 400, "job_parse refused (%s) but the "
                           "API went on", e);
            } else {
                FUZZ_CHECK(status == 0 && strcmp(j->request_hash,
                                                 job->request_hash) == 0,
                           "job_parse accepts the payload but the API "
                           "answered %d", status);
                job_destroy(j);
            }
        }
        if (key && !refused)
            free(kd);
    }

    /* A job the Kafka path takes is taken under a well-formed key too. */
    if (key && key_well_formed(key)) {
        struct job *plain = NULL;
        char e[DD_ERRSTR_SIZE] = "";
        json_t *root = json_loadb(bodyz, len, JSON_REJECT_DUPLICATES, NULL);
        const char *own_key = str_member(root, "job_key");
        const char *own_scope = str_member(root, "scope");
        bool compatible = (!own_key || strcmp(own_key, key) == 0) &&
                          (!own_scope || strcmp(own_scope, API_SCOPE) == 0);
        if (compatible &&
            job_parse(&conf, body, len, &plain, e, sizeof(e)) == DD_OK) {
            FUZZ_CHECK(status == 0, "a job accepted without a key is refused "
                       "under Idempotency-Key \"%s\": %s", key,
                       resp ? resp : "(no body)");
            FUZZ_CHECK(strcmp(plain->request_hash, job->request_hash) == 0,
                       "the key changed request_hash");
        }
        job_destroy(plain);
        json_decref(root);
    }

    if (status == 0) {
        job_destroy(job);
        free(keyed);
    } else {
        free(resp);
    }
    free(bodyz);
    free(key);
    return 0;
}
