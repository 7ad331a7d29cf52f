/* Unit tests of result.c's op encoder, result_op_encode: the one encoder of
 * the op record that `dedupd inspect --json` (RESULT_OP_FULL) and
 * `GET /v1/ops/{op_id}` (RESULT_OP_LIVE) print.  Exact bytes: the two views
 * keep the fields, order and layout each had before they shared an encoder
 * (tests/integration/it_retryable.sh, it_admin.sh and it_secrets.sh read
 * them). */

#include <check.h>
#include <stdlib.h>
#include <string.h>

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

Suite *result_suite(void)
{
    Suite *s = suite_create("result");
    TCase *tc = tcase_create("op_encode");
    tcase_add_test(tc, test_result_op_encode_full_is_the_inspect_json);
    tcase_add_test(tc, test_result_op_encode_full_not_before_only_when_set);
    tcase_add_test(tc, test_result_op_encode_live_is_the_v1_ops_json);
    tcase_add_test(tc, test_result_op_outbox_str_names_each_state);
    suite_add_tcase(s, tc);
    return s;
}
