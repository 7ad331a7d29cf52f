/* Unit tests of result.c's op encoder, result_op_encode: the one encoder of
 * the op record that `dedupd inspect --json` (RESULT_OP_FULL) and
 * `GET /v1/ops/{op_id}` (RESULT_OP_LIVE) print.  Exact bytes: the two views
 * keep the fields, order and layout each had before they shared an encoder
 * (tests/integration/it_retryable.sh, it_admin.sh and it_secrets.sh read
 * them). */

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fetch.h"
#include "job.h"
#include "jstr.h"
#include "key.h"
#include "result.h"
#include "store.h"

static void op_fill(struct store_op *op, struct store_attempt *a)
{
    memset(op, 0, sizeof(*op));
    op->state = STORE_OP_FAILED;
    op->outbox_state = STORE_OUTBOX_SENT;
    op->generation = 2;
    op->retry_epoch = 1;
    op->lease_expires_at_ms = 1700000030000;
    op->created_at_ms = 1700000000000;
    op->updated_at_ms = 1700000020000;
    op->expires_at_ms = 1700259200000;
    op->attempts = 1;
    strcpy(op->request_hash, "ab12");
    strcpy(op->event_key, "cd34");
    strcpy(op->lease_owner, "pod-0#r1");
    strcpy(op->source, "jobs/0/7");
    strcpy(op->category, "client_error");
    memset(a, 0, sizeof(*a));
    a->number = 1;
    a->generation = 2;
    a->started_at_ms = 1700000010000;
    a->ended_at_ms = 1700000010250;
    a->status = 404;
    a->bytes = 9;
    strcpy(a->session, "exit-a");
    strcpy(a->exit_addr, "10.0.0.1:3128");
    strcpy(a->category, "client_error");
    strcpy(a->error, "HTTP 404");
}

START_TEST(test_result_op_encode_full_is_the_inspect_json)
{
    struct store_op op;
    struct store_attempt a;
    op_fill(&op, &a);
    char *s = NULL;
    ck_assert_int_eq(result_op_encode("scope:k1", &op, &a, 1, RESULT_OP_FULL,
                                      &s), DD_OK);
    ck_assert_str_eq(s,
        "{\n"
        "  \"op_id\": \"scope:k1\",\n"
        "  \"state\": \"failed\",\n"
        "  \"request_hash\": \"ab12\",\n"
        "  \"event_key\": \"cd34\",\n"
        "  \"generation\": 2,\n"
        "  \"retry_epoch\": 1,\n"
        "  \"lease_owner\": \"pod-0#r1\",\n"
        "  \"lease_expires_at_ms\": 1700000030000,\n"
        "  \"created_at_ms\": 1700000000000,\n"
        "  \"updated_at_ms\": 1700000020000,\n"
        "  \"expires_at_ms\": 1700259200000,\n"
        "  \"attempts\": 1,\n"
        "  \"outbox\": \"sent\",\n"
        "  \"first_source\": \"jobs/0/7\",\n"
        "  \"category\": \"client_error\",\n"
        "  \"attempt_log\": [\n"
        "    {\n"
        "      \"number\": 1,\n"
        "      \"generation\": 2,\n"
        "      \"started_at_ms\": 1700000010000,\n"
        "      \"ended_at_ms\": 1700000010250,\n"
        "      \"status\": 404,\n"
        "      \"bytes\": 9,\n"
        "      \"session\": \"exit-a\",\n"
        "      \"exit\": \"10.0.0.1:3128\",\n"
        "      \"category\": \"client_error\",\n"
        "      \"error\": \"HTTP 404\"\n"
        "    }\n"
        "  ]\n"
        "}");
    free(s);
}
END_TEST

START_TEST(test_result_op_encode_full_not_before_only_when_set)
{
    struct store_op op;
    struct store_attempt a;
    op_fill(&op, &a);
    op.state = STORE_OP_RETRYABLE;
    op.category[0] = '\0';
    op.outbox_state = STORE_OUTBOX_NONE;
    char *s = NULL;
    ck_assert_int_eq(result_op_encode("x", &op, NULL, 0, RESULT_OP_FULL, &s),
                     DD_OK);
    /* an empty category is still written; no not_before_ms while 0 */
    ck_assert_ptr_nonnull(strstr(s, "\"outbox\": \"none\",\n"
                                    "  \"first_source\": \"jobs/0/7\",\n"
                                    "  \"category\": \"\",\n"
                                    "  \"attempt_log\": []\n}"));
    free(s);
    op.not_before_ms = 1700000040000;
    ck_assert_int_eq(result_op_encode("x", &op, NULL, 0, RESULT_OP_FULL, &s),
                     DD_OK);
    ck_assert_ptr_nonnull(strstr(s, "  \"category\": \"\",\n"
                                    "  \"not_before_ms\": 1700000040000,\n"
                                    "  \"attempt_log\": []\n}"));
    free(s);
}
END_TEST

START_TEST(test_result_op_encode_live_is_the_v1_ops_json)
{
    struct store_op op;
    struct store_attempt a;
    op_fill(&op, &a);
    char *s = NULL;
    /* attempts given to the live view are not shown */
    ck_assert_int_eq(result_op_encode("scope:k1", &op, &a, 1, RESULT_OP_LIVE,
                                      &s), DD_OK);
    ck_assert_str_eq(s, "{\"op_id\":\"scope:k1\",\"state\":\"failed\","
                        "\"request_hash\":\"ab12\",\"event_key\":\"cd34\","
                        "\"generation\":2,\"retry_epoch\":1,"
                        "\"attempts\":1,\"outbox\":\"sent\","
                        "\"category\":\"client_error\","
                        "\"expires_at_ms\":1700259200000}");
    free(s);

    /* retryable: not_before_ms shown (even 0); no category when empty */
    op.state = STORE_OP_RETRYABLE;
    op.outbox_state = STORE_OUTBOX_PENDING;
    op.category[0] = '\0';
    op.not_before_ms = 0;
    ck_assert_int_eq(result_op_encode("y", &op, NULL, 0, RESULT_OP_LIVE, &s),
                     DD_OK);
    ck_assert_str_eq(s, "{\"op_id\":\"y\",\"state\":\"retryable\","
                        "\"request_hash\":\"ab12\",\"event_key\":\"cd34\","
                        "\"generation\":2,\"retry_epoch\":1,\"attempts\":1,"
                        "\"outbox\":\"pending\",\"not_before_ms\":0,"
                        "\"expires_at_ms\":1700259200000}");
    free(s);

    /* running with a retry time left over: not shown by the live view */
    op.state = STORE_OP_RUNNING;
    op.not_before_ms = 5;
    ck_assert_int_eq(result_op_encode("y", &op, NULL, 0, RESULT_OP_LIVE, &s),
                     DD_OK);
    ck_assert_ptr_null(strstr(s, "not_before_ms"));
    free(s);
}
END_TEST

START_TEST(test_result_op_outbox_str_names_each_state)
{
    struct store_op op;
    memset(&op, 0, sizeof(op));
    op.outbox_state = STORE_OUTBOX_NONE;
    ck_assert_str_eq(result_op_outbox_str(&op), "none");
    op.outbox_state = STORE_OUTBOX_PENDING;
    ck_assert_str_eq(result_op_outbox_str(&op), "pending");
    op.outbox_state = STORE_OUTBOX_SENT;
    ck_assert_str_eq(result_op_outbox_str(&op), "sent");
}
END_TEST

/* The shadow result as result.c's jansson tree writes it (the members and
 * order of encode(): the reference the direct writer must equal). */
static char *shadow_reference(const struct job *j, uint64_t generation)
{
    json_t *o = json_object();
    json_object_set_new(o, "event_key", json_string(j->event_key));
    json_object_set_new(o, "op_id", json_string(j->op_id));
    json_object_set_new(o, "request_hash", json_string(j->request_hash));
    json_object_set_new(o, "generation", json_integer((json_int_t)generation));
    json_object_set_new(o, "retry_epoch",
                        json_integer((json_int_t)j->retry_epoch));
    json_object_set_new(o, "job_key",
                        j->job_key ? json_string(j->job_key) : json_null());
    json_object_set_new(o, "url", json_string(j->req.url));
    if (j->meta_json) {
        json_t *m = json_loads(j->meta_json, 0, NULL);
        json_object_set_new(o, "meta", m ? m : json_null());
    }
    json_object_set_new(o, "outcome", json_string("shadow"));
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

START_TEST(test_result_shadow_is_the_trees_bytes)
{
    key_global_init();
    static const char *const jobs[] = {
        "{\"url\":\"https://example.com/a\"}",
        "{\"url\":\"https://example.com/b?q=1\",\"job_key\":\"k \\\"quoted\\\" \\u00e9\","
        "\"meta\":{\"z\":1,\"a\":[true,null,\"x\\n\\u0001\"],\"n\":{\"b\":-2}}}",
        "{\"url\":\"https://example.com/c\",\"meta\":{\"r\":0.1,\"s\":\"\\u20ac\"}}",
        "{\"url\":\"https://example.com/d\",\"job_key\":\"/slash/ \\u00e9x\"}",
        "{\"url\":\"https://example.com/e\",\"meta\":{}}",
    };
    struct job_conf jc = {0};
    for (size_t i = 0; i < sizeof(jobs) / sizeof(*jobs); i++) {
        struct job *j = NULL;
        char e[256];
        ck_assert_msg(job_parse(&jc, jobs[i], strlen(jobs[i]), &j, e,
                                sizeof(e)) == DD_OK, "%s: %s", jobs[i], e);
        j->retry_epoch = (uint32_t)i;
        uint64_t gens[] = {1, 4294967296ULL, (uint64_t)INT64_MAX};
        for (size_t g = 0; g < 3; g++) {
            char *want = shadow_reference(j, gens[g]);
            char *got = NULL;
            size_t len = 0;
            const char *outcome = NULL;
            ck_assert_int_eq(result_encode(j, NULL, gens[g], 1 << 20, &got,
                                           &len, &outcome, NULL), DD_OK);
            ck_assert_str_eq(outcome, "shadow");
            ck_assert_uint_eq(len, strlen(want));
            ck_assert_str_eq(got, want);
            free(got);
            /* above max_bytes: the smaller forms of the tree */
            ck_assert_int_eq(result_encode(j, NULL, gens[g], strlen(want) - 1,
                                           &got, &len, &outcome, NULL), DD_OK);
            ck_assert_str_eq(outcome, "failed");
            ck_assert_ptr_nonnull(strstr(got, "\"too_large\""));
            free(got);
            free(want);
        }
        job_destroy(j);
    }
}
END_TEST

/* body_at: where the body's literal starts; the literal runs to the
 * closing brace and is jstr_body_literal of the body (what the store keeps
 * apart, store_complete_req.body_lit_off); 0 without a body, or when the
 * body was dropped for max_bytes. */
START_TEST(test_result_body_at_is_the_literal_of_the_body)
{
    key_global_init();
    struct job_conf jc = {0};
    const char *src = "{\"url\":\"https://example.com/a\"}";
    struct job *j = NULL;
    char e[256];
    ck_assert_msg(job_parse(&jc, src, strlen(src), &j, e, sizeof(e)) == DD_OK,
                  "%s", e);
    static unsigned char text[] = "<p>\"a\" page\n</p>";
    static unsigned char bin[] = {0x89, 'P', 'N', 'G', 0, 1};
    struct { unsigned char *b; size_t n; } bodies[] = {
        {text, sizeof(text) - 1}, {bin, sizeof(bin)}};
    for (size_t i = 0; i < 2; i++) {
        struct fetch_result r;
        memset(&r, 0, sizeof(r));
        r.ok = true;
        r.status = 200;
        r.body = bodies[i].b;
        r.body_len = bodies[i].n;
        r.attempts = 1;
        char *out = NULL;
        size_t len = 0, at = 99;
        const char *outcome = NULL;
        ck_assert_int_eq(result_encode(j, &r, 1, 1 << 20, &out, &len,
                                       &outcome, &at), DD_OK);
        ck_assert_str_eq(outcome, "fetched");
        char *lit = NULL;
        size_t lit_len = 0;
        ck_assert_int_eq(jstr_body_literal(bodies[i].b, bodies[i].n, &lit,
                                           &lit_len, NULL), DD_OK);
        ck_assert_uint_gt(at, 0);
        ck_assert_uint_eq(at + lit_len + 1, len);
        ck_assert_mem_eq(out + at, lit, lit_len);
        ck_assert_int_eq(out[len - 1], '}');
        const char *key = i ? "\"body_base64\":" : "\"body\":";
        ck_assert_mem_eq(out + at - strlen(key), key, strlen(key));
        json_t *o = json_loads(out, 0, NULL);
        ck_assert_ptr_nonnull(o);
        json_decref(o);
        free(out);
        /* too large with the body: re-encoded without it, body_at 0 */
        at = 99;
        ck_assert_int_eq(result_encode(j, &r, 1, len - 1, &out, &len,
                                       &outcome, &at), DD_OK);
        ck_assert_str_eq(outcome, "failed");
        ck_assert_uint_eq(at, 0);
        free(out);
        free(lit);
    }
    /* no body */
    struct fetch_result r;
    memset(&r, 0, sizeof(r));
    r.ok = true;
    r.status = 204;
    char *out = NULL;
    size_t len = 0, at = 99;
    const char *outcome = NULL;
    ck_assert_int_eq(result_encode(j, &r, 1, 1 << 20, &out, &len, &outcome,
                                   &at), DD_OK);
    ck_assert_uint_eq(at, 0);
    free(out);
    job_destroy(j);
}
END_TEST

Suite *result_suite(void)
{
    Suite *s = suite_create("result");
    TCase *tc = tcase_create("op_encode");
    tcase_add_test(tc, test_result_op_encode_full_is_the_inspect_json);
    tcase_add_test(tc, test_result_op_encode_full_not_before_only_when_set);
    tcase_add_test(tc, test_result_op_encode_live_is_the_v1_ops_json);
    tcase_add_test(tc, test_result_op_outbox_str_names_each_state);
    tcase_add_test(tc, test_result_shadow_is_the_trees_bytes);
    tcase_add_test(tc, test_result_body_at_is_the_literal_of_the_body);
    suite_add_tcase(s, tc);
    return s;
}
