/*
 * fuzz_api_submit.c - the body handling of `POST /v1/jobs`, as
 * consumer.c's http_submit() does it before touching the store or Kafka:
 * Idempotency-Key check, job_with_key(), job_parse(), and the JSON error
 * body ({"error": reason}, built with json_pack like api_error()).
 *
 * Input: "KEY\nBODY" (the Idempotency-Key header value, then the body); an
 * input without '\n' is a body sent without the header.  The scope is the
 * default api.scope, "api".  libmicrohttpd's request parsing is not fuzzed.
 *
 * Properties, abort() on violation:
 *  - every refusal has a reason that is valid UTF-8 without control
 *    characters and that json_pack accepts, so the 400 answer is the
 *    documented JSON error body and not an empty one;
 *  - job_with_key() refuses with DD_ERR_PERMANENT only, and on success
 *    gives a JSON object whose job_key is KEY and scope is "api";
 *  - a job accepted under a key has job_key KEY, scope "api" and op_id
 *    "api:" KEY.
 */
#include <jansson.h>
#include <stdint.h>

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

/* consumer.c api_key_valid(): 1..255 printable ASCII, no '"' or '\\'. */
static bool key_valid(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 255)
        return false;
    for (; *k; k++)
        if ((unsigned char)*k < 0x20 || (unsigned char)*k > 0x7e ||
            *k == '"' || *k == '\\')
            return false;
    return true;
}

/* consumer.c api_error(): the 400 body. */
static void check_error_body(const char *what, const char *e)
{
    FUZZ_CHECK(e[0] != '\0', "%s: refused without a reason", what);
    FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)e, strlen(e)),
               "%s: reason \"%s\" is not UTF-8", what, e);
    FUZZ_CHECK(fuzz_no_ctl(e), "%s: control character in reason \"%s\"",
               what, e);
    json_t *o = json_pack("{s:s}", "error", e);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    FUZZ_CHECK(s != NULL, "%s: reason \"%s\" cannot be a JSON error body "
               "(not UTF-8?): the 400 would have no body", what, e);
    free(s);
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct job_conf conf = { 0 };
    const uint8_t *nl = memchr(data, '\n', size);
    char *key = nl ? fuzz_cstr(data, (size_t)(nl - data)) : NULL;
    const uint8_t *body = nl ? nl + 1 : data;
    size_t len = nl ? size - (size_t)(nl + 1 - data) : size;
    char *keyed = NULL;
    size_t keyed_len = len;
    struct job *job = NULL;
    char e[DD_ERRSTR_SIZE] = "";

    if (key && (memchr(data, '\0', (size_t)(nl - data)) || !key_valid(key)))
        goto out; /* 400 with a constant message */
    if (key) {
        dd_err_t err = job_with_key(body, len, key, API_SCOPE, &keyed,
                                    &keyed_len, e, sizeof(e));
        if (err) {
            FUZZ_CHECK(err == DD_ERR_PERMANENT, "job_with_key: error %d (%s)",
                       (int)err, e);
            check_error_body("job_with_key", e);
            goto out;
        }
        json_error_t je;
        json_t *o = json_loadb(keyed, keyed_len, JSON_REJECT_DUPLICATES, &je);
        FUZZ_CHECK(o && json_is_object(o), "job_with_key output does not "
                   "parse: %s", je.text);
        FUZZ_CHECK(strcmp(json_string_value(json_object_get(o, "job_key")) ?
                          json_string_value(json_object_get(o, "job_key")) :
                          "", key) == 0 &&
                   strcmp(json_string_value(json_object_get(o, "scope")) ?
                          json_string_value(json_object_get(o, "scope")) :
                          "", API_SCOPE) == 0,
                   "job_with_key output lacks job_key/scope: %s", keyed);
        json_decref(o);
    }
    const void *payload = keyed ? (const void *)keyed : (const void *)body;
    e[0] = '\0';
    dd_err_t err = job_parse(&conf, payload, keyed_len, &job, e, sizeof(e));
    if (err) {
        FUZZ_CHECK(err == DD_ERR_PERMANENT, "job_parse: error %d (%s)",
                   (int)err, e);
        check_error_body("job_parse", e);
        goto out;
    }
    if (key) {
        char want[JOB_OP_ID_MAX + 1];
        snprintf(want, sizeof(want), "%s:%s", API_SCOPE, key);
        FUZZ_CHECK(job->job_key && strcmp(job->job_key, key) == 0 &&
                   strcmp(job->scope, API_SCOPE) == 0 &&
                   strcmp(job->op_id, want) == 0,
                   "keyed job: op_id \"%s\", want \"%s\"", job->op_id, want);
    }
out:
    job_destroy(job);
    free(keyed);
    free(key);
    return 0;
}
