/*
 * Unit tests of the store's record codec (include/store_codec.h) on its
 * own: the exact bytes of each record kind, round trips of every kind,
 * truncated, overlong and garbage values refused with their exact error,
 * the layout version and record type checks, keys and the meta values.  No
 * RocksDB.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_codec.h"

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define DIGEST \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static char g_err[DD_ERRSTR_SIZE];

static struct store_op op_sample(enum store_op_state st)
{
    struct store_op op;
    memset(&op, 0, sizeof(op));
    op.state = st;
    op.outbox_state = STORE_OUTBOX_PENDING;
    op.generation = 7;
    op.lease_expires_at_ms = 1060000;
    op.created_at_ms = 1000000;
    op.updated_at_ms = 1000500;
    op.expires_at_ms = 4600000;
    op.attempts = 3;
    op.outbox_seq = 4097;
    snprintf(op.request_hash, sizeof(op.request_hash), "%s", H1);
    snprintf(op.event_key, sizeof(op.event_key), "%s", H2);
    snprintf(op.lease_owner, sizeof(op.lease_owner), "a#r1");
    snprintf(op.source, sizeof(op.source), "jobs/0/42");
    snprintf(op.category, sizeof(op.category), "%s",
             st == STORE_OP_COMPLETE ? "" : "timeout");
    op.not_before_ms = st == STORE_OP_RETRYABLE ? 1000900 : 0;
    return op;
}

static void assert_op_eq(const struct store_op *a, const struct store_op *b)
{
    ck_assert_int_eq(a->state, b->state);
    ck_assert_int_eq(a->outbox_state, b->outbox_state);
    ck_assert_uint_eq(a->generation, b->generation);
    ck_assert_int_eq(a->lease_expires_at_ms, b->lease_expires_at_ms);
    ck_assert_int_eq(a->created_at_ms, b->created_at_ms);
    ck_assert_int_eq(a->updated_at_ms, b->updated_at_ms);
    ck_assert_int_eq(a->expires_at_ms, b->expires_at_ms);
    ck_assert_uint_eq(a->attempts, b->attempts);
    ck_assert_uint_eq(a->outbox_seq, b->outbox_seq);
    ck_assert_str_eq(a->request_hash, b->request_hash);
    ck_assert_str_eq(a->event_key, b->event_key);
    ck_assert_str_eq(a->lease_owner, b->lease_owner);
    ck_assert_str_eq(a->source, b->source);
    ck_assert_str_eq(a->category, b->category);
    ck_assert_int_eq(a->not_before_ms, b->not_before_ms);
    ck_assert_uint_eq(a->retry_epoch, b->retry_epoch);
}

/* A copy of \p n bytes of \p v in a buffer of exactly that size (ASan). */
static unsigned char *exact(const void *v, size_t n)
{
    unsigned char *c = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(c);
    if (n)
        memcpy(c, v, n);
    return c;
}

static dd_err_t op_decode_n(const unsigned char *v, size_t n,
                            struct store_op *op)
{
    unsigned char *c = exact(v, n);
    g_err[0] = '\0';
    dd_err_t err = store_codec_op_decode(c, n, "op-1", op, g_err,
                                         sizeof(g_err));
    free(c);
    return err;
}

/* ---------------------------------------------------------------------- */
/* header, numbers, the expiry rule                                        */

START_TEST(test_store_codec_header_bytes)
{
    unsigned char h[STORE_CODEC_HDR_LEN];
    memset(h, 0xaa, sizeof(h));
    ck_assert_uint_eq(store_codec_header(STORE_CODEC_BODY,
                                         INT64_C(0x0102030405060708), h),
                      16);
    static const unsigned char want[16] = {1, 8, 0, 0, 0, 0, 0, 0,
                                           8, 7, 6, 5, 4, 3, 2, 1};
    ck_assert_mem_eq(h, want, 16);
    int64_t exp = 0;
    ck_assert_int_eq(store_codec_header_decode(h, 16, STORE_CODEC_BODY, "k",
                                               1, &exp, g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(exp, INT64_C(0x0102030405060708));
}
END_TEST

START_TEST(test_store_codec_header_checks_version_type_and_length)
{
    unsigned char h[STORE_CODEC_HDR_LEN];
    int64_t exp = 0;
    store_codec_header(STORE_CODEC_SEEN, 5, h);
    ck_assert_int_eq(store_codec_header_decode(h, 15, STORE_CODEC_SEEN, "key",
                                               3, &exp, g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: seen record 'key' is corrupt: 15 bytes, "
                            "shorter than its header");
    ck_assert_int_eq(store_codec_header_decode(h, 16, STORE_CODEC_CONFLICT,
                                               "op\nh", 4, &exp, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    /* the key's "\n" (op_id "\n" request_hash) shows as '?': the reason
     * is one line (test_store_codec_reason_is_one_line_of_utf8) */
    ck_assert_str_eq(g_err, "store: conflicts record 'op?h' has layout "
                            "version 1 type 4, expected version 1 type 3");
    h[0] = 2; /* a newer layout */
    ck_assert_int_eq(store_codec_header_decode(h, 16, STORE_CODEC_SEEN, "key",
                                               3, &exp, g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: seen record 'key' has layout version 2 "
                            "type 4, expected version 1 type 4");
    /* only the first 64 bytes of a key are named */
    char key[100];
    memset(key, 'k', sizeof(key));
    ck_assert_int_eq(store_codec_header_decode(h, 3, STORE_CODEC_SEEN, key,
                                               sizeof(key), &exp, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_uint_eq(strlen(g_err), strlen("store: seen record '' is "
                                            "corrupt: 3 bytes, shorter than "
                                            "its header") + 64);
}
END_TEST

START_TEST(test_store_codec_numbers_and_expiry_rule)
{
    unsigned char b[8];
    store_codec_le64_put(b, UINT64_C(0x0102030405060708));
    ck_assert_uint_eq(b[0], 8);
    ck_assert_uint_eq(b[7], 1);
    ck_assert_uint_eq(store_codec_le64_get(b), UINT64_C(0x0102030405060708));
    store_codec_be64_put(b, UINT64_C(0x0102030405060708));
    ck_assert_uint_eq(b[0], 1);
    ck_assert_uint_eq(b[7], 8);
    ck_assert_uint_eq(store_codec_be64_get(b), UINT64_C(0x0102030405060708));
    /* C-28: live up to and including expires_at */
    ck_assert(!store_record_expired(1000, 999));
    ck_assert(!store_record_expired(1000, 1000));
    ck_assert(store_record_expired(1000, 1001));
    ck_assert(store_codec_hex64_ok(DIGEST));
    ck_assert(!store_codec_hex64_ok(H1 "0"));
    ck_assert(!store_codec_hex64_ok(
        "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"));
    ck_assert(!store_codec_hex64_ok("e3b0"));
}
END_TEST

/* ---------------------------------------------------------------------- */
/* ops                                                                     */

START_TEST(test_store_codec_op_bytes)
{
    struct store_op op = op_sample(STORE_OP_COMPLETE);
    unsigned char v[STORE_CODEC_OP_VALUE_MAX];
    size_t n = store_codec_op_encode(&op, v, sizeof(v));
    /* header, 2 u8, 4 i64, u32, u64, 5 strings of 64, 64, 4, 9, 0 bytes */
    ck_assert_uint_eq(n, 16 + 2 + 32 + 4 + 8 + 10 + 64 + 64 + 4 + 9 + 0);
    ck_assert_uint_eq(v[0], STORE_LAYOUT_V1);
    ck_assert_uint_eq(v[1], STORE_CODEC_OP);
    ck_assert_uint_eq(store_codec_le64_get(v + 8), 4600000);
    ck_assert_uint_eq(v[16], STORE_OP_COMPLETE);
    ck_assert_uint_eq(v[17], STORE_OUTBOX_PENDING);
    ck_assert_uint_eq(store_codec_le64_get(v + 18), 7);
    ck_assert_uint_eq(store_codec_le64_get(v + 26), 1060000);
    ck_assert_uint_eq(store_codec_le64_get(v + 34), 1000000);
    ck_assert_uint_eq(store_codec_le64_get(v + 42), 1000500);
    ck_assert_uint_eq(v[50], 3); /* attempts, u32 LE */
    ck_assert_uint_eq(v[51] | v[52] | v[53], 0);
    ck_assert_uint_eq(store_codec_le64_get(v + 54), 4097);
    ck_assert_uint_eq(v[62], 64); /* request_hash: u16 length */
    ck_assert_uint_eq(v[63], 0);
    ck_assert_mem_eq(v + 64, H1, 64);
    ck_assert_uint_eq(v[n - 2], 0); /* category "": u16 0, last */
    ck_assert_uint_eq(v[n - 1], 0);
}
END_TEST

/* retry_epoch: header bytes 4..7 of an op, u32 LE (store_codec.h); a record
 * of a dedupd before it (zeros there) decodes as epoch 0, and the rest of
 * the value does not move. */
START_TEST(test_store_codec_op_retry_epoch_in_header_bytes_4_to_7)
{
    struct store_op op = op_sample(STORE_OP_FAILED), back;
    unsigned char v[STORE_CODEC_OP_VALUE_MAX], w[STORE_CODEC_OP_VALUE_MAX];
    size_t n0 = store_codec_op_encode(&op, w, sizeof(w));
    static const unsigned char zero[6] = {0};
    ck_assert_mem_eq(w + 2, zero, 6); /* epoch 0: as every older dedupd */
    ck_assert_int_eq(op_decode_n(w, n0, &back), DD_OK);
    ck_assert_uint_eq(back.retry_epoch, 0);
    op.retry_epoch = 0x01020304u;
    size_t n = store_codec_op_encode(&op, v, sizeof(v));
    ck_assert_uint_eq(n, n0);
    static const unsigned char want[6] = {0, 0, 4, 3, 2, 1};
    ck_assert_mem_eq(v + 2, want, 6);
    ck_assert_mem_eq(v + 8, w + 8, n - 8); /* nothing else changes */
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_OK);
    assert_op_eq(&op, &back);
    op.retry_epoch = UINT32_MAX;
    n = store_codec_op_encode(&op, v, sizeof(v));
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_OK);
    ck_assert_uint_eq(back.retry_epoch, UINT32_MAX);
    /* bytes 2..3 stay reserved: not read */
    v[2] = 0x5a;
    v[3] = 0xa5;
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_OK);
    assert_op_eq(&op, &back);
}
END_TEST

START_TEST(test_store_codec_op_round_trips_each_state)
{
    static const enum store_op_state st[] = {
        STORE_OP_RUNNING, STORE_OP_RETRYABLE, STORE_OP_COMPLETE,
        STORE_OP_FAILED};
    for (size_t i = 0; i < 4; i++) {
        struct store_op op = op_sample(st[i]), back;
        unsigned char v[STORE_CODEC_OP_VALUE_MAX];
        size_t n = store_codec_op_encode(&op, v, sizeof(v));
        ck_assert_uint_gt(n, 0);
        ck_assert_int_eq(op_decode_n(v, n, &back), DD_OK);
        assert_op_eq(&op, &back);
    }
    /* not_before is written in state retryable only */
    struct store_op r = op_sample(STORE_OP_RETRYABLE);
    struct store_op c = op_sample(STORE_OP_RETRYABLE);
    c.state = STORE_OP_RUNNING;
    unsigned char v[STORE_CODEC_OP_VALUE_MAX], w[STORE_CODEC_OP_VALUE_MAX];
    ck_assert_uint_eq(store_codec_op_encode(&r, v, sizeof(v)),
                      store_codec_op_encode(&c, w, sizeof(w)) + 8);
    ck_assert_uint_eq(store_codec_op_encode(&r, v, sizeof(v)) - 8,
                      16 + 2 + 32 + 4 + 8 + 10 + 64 + 64 + 4 + 9 + 7);
}
END_TEST

/* The largest op (every string at its bound) fits the documented maximum. */
START_TEST(test_store_codec_op_largest_fits_its_maximum)
{
    struct store_op op = op_sample(STORE_OP_RETRYABLE), back;
    memset(op.lease_owner, 'o', STORE_OWNER_MAX);
    op.lease_owner[STORE_OWNER_MAX] = '\0';
    memset(op.source, 's', STORE_SOURCE_MAX);
    op.source[STORE_SOURCE_MAX] = '\0';
    memset(op.category, 'c', STORE_CATEGORY_MAX);
    op.category[STORE_CATEGORY_MAX] = '\0';
    unsigned char v[STORE_CODEC_OP_VALUE_MAX];
    ck_assert_uint_eq(store_codec_op_encode(&op, v, sizeof(v)),
                      STORE_CODEC_OP_VALUE_MAX);
    ck_assert_int_eq(op_decode_n(v, STORE_CODEC_OP_VALUE_MAX, &back), DD_OK);
    assert_op_eq(&op, &back);
}
END_TEST

START_TEST(test_store_codec_op_encode_refuses_what_it_cannot_write)
{
    struct store_op op = op_sample(STORE_OP_RUNNING);
    unsigned char v[STORE_CODEC_OP_VALUE_MAX];
    ck_assert_uint_eq(store_codec_op_encode(&op, v, sizeof(v) - 1), 0);
    memset(op.source, 's', sizeof(op.source)); /* no NUL in the array */
    ck_assert_uint_eq(store_codec_op_encode(&op, v, sizeof(v)), 0);
}
END_TEST

START_TEST(test_store_codec_op_refuses_every_truncation_and_a_trailing_byte)
{
    struct store_op op = op_sample(STORE_OP_RETRYABLE), back;
    unsigned char v[STORE_CODEC_OP_VALUE_MAX + 1];
    size_t n = store_codec_op_encode(&op, v, STORE_CODEC_OP_VALUE_MAX);
    for (size_t cut = 0; cut < n; cut++) {
        ck_assert_int_eq(op_decode_n(v, cut, &back), DD_ERR_FATAL);
        ck_assert_msg(g_err[0] != '\0', "cut %zu: no reason", cut);
    }
    ck_assert_int_eq(op_decode_n(v, 3, &back), DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'op-1' is corrupt: 3 bytes, "
                            "shorter than its header");
    ck_assert_int_eq(op_decode_n(v, n - 1, &back), DD_ERR_FATAL);
    char want[DD_ERRSTR_SIZE];
    snprintf(want, sizeof(want),
             "store: ops record 'op-1' is corrupt (%zu bytes, state 2, "
             "outbox state 1)", n - 1);
    ck_assert_str_eq(g_err, want);
    v[n] = 0;
    ck_assert_int_eq(op_decode_n(v, n + 1, &back), DD_ERR_FATAL);
    snprintf(want, sizeof(want),
             "store: ops record 'op-1' is corrupt (%zu bytes, state 2, "
             "outbox state 1)", n + 1);
    ck_assert_str_eq(g_err, want);
}
END_TEST

START_TEST(test_store_codec_op_refuses_states_out_of_range)
{
    struct store_op op = op_sample(STORE_OP_COMPLETE), back;
    unsigned char v[STORE_CODEC_OP_VALUE_MAX];
    size_t n = store_codec_op_encode(&op, v, sizeof(v));
    char want[DD_ERRSTR_SIZE];
    v[16] = 6; /* 5 is forgotten (issue 12) */
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_ERR_FATAL);
    snprintf(want, sizeof(want), "store: ops record 'op-1' is corrupt (%zu "
             "bytes, state 6, outbox state 1)", n);
    ck_assert_str_eq(g_err, want);
    v[16] = 0;
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_ERR_FATAL);
    v[16] = STORE_OP_COMPLETE;
    v[17] = 3;
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_ERR_FATAL);
    snprintf(want, sizeof(want), "store: ops record 'op-1' is corrupt (%zu "
             "bytes, state 3, outbox state 3)", n);
    ck_assert_str_eq(g_err, want);
    /* a negative not_before */
    op = op_sample(STORE_OP_RETRYABLE);
    op.not_before_ms = -1;
    n = store_codec_op_encode(&op, v, sizeof(v));
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_ERR_FATAL);
}
END_TEST

START_TEST(test_store_codec_op_checks_layout_version_and_type)
{
    struct store_op op = op_sample(STORE_OP_RUNNING), back;
    unsigned char v[STORE_CODEC_OP_VALUE_MAX];
    size_t n = store_codec_op_encode(&op, v, sizeof(v));
    v[0] = 2;
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'op-1' has layout version 2 "
                            "type 1, expected version 1 type 1");
    v[0] = STORE_LAYOUT_V1;
    v[1] = STORE_CODEC_ATTEMPT;
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'op-1' has layout version 1 "
                            "type 5, expected version 1 type 1");
    /* bytes 2..3 are reserved and not read; 4..7 are the retry_epoch */
    v[1] = STORE_CODEC_OP;
    memset(v + 2, 0x5a, 6);
    ck_assert_int_eq(op_decode_n(v, n, &back), DD_OK);
    op.retry_epoch = 0x5a5a5a5au;
    assert_op_eq(&op, &back);
}
END_TEST

/* The reason quotes the op_id cut at 64 bytes and goes to log lines and
 * error bodies: one line of UTF-8 (found by fuzz_record, regressions
 * record/op_id_*): the half of a character the cut leaves, a control
 * character and a byte that is not UTF-8 show as '?', the rest as it was. */
START_TEST(test_store_codec_reason_is_one_line_of_utf8)
{
    unsigned char v[8] = {0};
    struct store_op back;
    char id[80];
    memcpy(id, "api:", 4);
    memset(id + 4, 'x', 59);
    memcpy(id + 63, "\xc3\xa9-1", 5); /* the e-acute at bytes 63..64 */
    ck_assert_int_eq(store_codec_op_decode(v, sizeof(v), id, &back, g_err,
                                           sizeof(g_err)),
                     DD_ERR_FATAL);
    char want[DD_ERRSTR_SIZE];
    snprintf(want, sizeof(want), "store: ops record '%.63s?' is corrupt: 8 "
             "bytes, shorter than its header", id);
    ck_assert_str_eq(g_err, want);
    ck_assert_int_eq(store_codec_op_decode(v, sizeof(v), "a\x1b[2Jb\xff\xc3\xa9",
                                           &back, g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: ops record 'a?[2Jb?\xc3\xa9' is corrupt: 8 "
                            "bytes, shorter than its header");
    /* attempts quote op_id#number cut at 64 bytes */
    struct store_attempt a;
    int64_t exp;
    ck_assert_int_eq(store_codec_attempt_decode(v, sizeof(v), id, 2, &a, &exp,
                                                g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    snprintf(want, sizeof(want), "store: attempts record '%.63s?' is corrupt: "
             "8 bytes, shorter than its header", id);
    ck_assert_str_eq(g_err, want);
    /* a buffer that cuts the text inside a character */
    char small[25]; /* 19 + 3 + 2 bytes and the NUL */
    ck_assert_int_eq(store_codec_op_decode(v, sizeof(v), "\xe6\xb3\xa8\xe6\x96\x87",
                                           &back, small, sizeof(small)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(small, "store: ops record '\xe6\xb3\xa8??");
}
END_TEST

/* A hash longer than 64 bytes is corrupt (its array holds 64). */
START_TEST(test_store_codec_op_refuses_an_overlong_string)
{
    struct store_op op = op_sample(STORE_OP_RUNNING), back;
    unsigned char v[STORE_CODEC_OP_VALUE_MAX + 1];
    size_t n = store_codec_op_encode(&op, v, STORE_CODEC_OP_VALUE_MAX);
    /* request_hash: length 65, one more byte after its 64 */
    memmove(v + 64 + 65, v + 64 + 64, n - (64 + 64));
    v[64 + 64] = '1';
    v[62] = 65;
    ck_assert_int_eq(op_decode_n(v, n + 1, &back), DD_ERR_FATAL);
    char want[DD_ERRSTR_SIZE];
    snprintf(want, sizeof(want), "store: ops record 'op-1' is corrupt (%zu "
             "bytes, state 1, outbox state 1)", n + 1);
    ck_assert_str_eq(g_err, want);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* attempts                                                                */

static struct store_attempt attempt_sample(uint32_t number)
{
    struct store_attempt a;
    memset(&a, 0, sizeof(a));
    a.number = number;
    a.generation = 2;
    a.started_at_ms = 1000000;
    a.ended_at_ms = 1000350;
    a.status = -1; /* written as u32: -1 survives */
    a.bytes = 5120;
    snprintf(a.session, sizeof(a.session), "prov-a-17");
    snprintf(a.exit_addr, sizeof(a.exit_addr), "127.0.0.2:18888");
    snprintf(a.category, sizeof(a.category), "proxy");
    snprintf(a.error, sizeof(a.error), "CONNECT tunnel failed, response 407");
    return a;
}

START_TEST(test_store_codec_attempt_key_is_op_id_newline_big_endian_number)
{
    char key[STORE_CODEC_ATTEMPT_KEY_MAX];
    ck_assert_uint_eq(store_codec_attempt_key("op-1", 4, 0x01020304, key), 9);
    ck_assert_mem_eq(key, "op-1\n\x01\x02\x03\x04", 9);
    uint32_t number = 0;
    ck_assert(store_codec_attempt_key_number(key, 9, 4, &number));
    ck_assert_uint_eq(number, 0x01020304);
    /* op "op-1\n..." under op "op-1": another length, not its attempt */
    ck_assert(!store_codec_attempt_key_number(key, 9, 3, &number));
    ck_assert(!store_codec_attempt_key_number(key, 8, 4, &number));
}
END_TEST

START_TEST(test_store_codec_attempt_round_trip)
{
    struct store_attempt a = attempt_sample(3), back;
    unsigned char v[STORE_CODEC_ATTEMPT_VALUE_MAX];
    size_t n = store_codec_attempt_encode(&a, 4600000, v, sizeof(v));
    ck_assert_uint_eq(n, 16 + 4 + 8 + 8 + 8 + 4 + 8 + 8 + 9 + 15 + 5 + 35);
    ck_assert_uint_eq(v[1], STORE_CODEC_ATTEMPT);
    unsigned char *c = exact(v, n);
    int64_t exp = 0;
    ck_assert_int_eq(store_codec_attempt_decode(c, n, "op-1", 3, &back, &exp,
                                                g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(exp, 4600000);
    ck_assert_uint_eq(back.number, 3);
    ck_assert_uint_eq(back.generation, 2);
    ck_assert_int_eq(back.started_at_ms, 1000000);
    ck_assert_int_eq(back.ended_at_ms, 1000350);
    ck_assert_int_eq(back.status, -1);
    ck_assert_uint_eq(back.bytes, 5120);
    ck_assert_str_eq(back.session, "prov-a-17");
    ck_assert_str_eq(back.exit_addr, "127.0.0.2:18888");
    ck_assert_str_eq(back.category, "proxy");
    ck_assert_str_eq(back.error, "CONNECT tunnel failed, response 407");
    free(c);
}
END_TEST

START_TEST(test_store_codec_attempt_refuses_another_number_and_truncation)
{
    struct store_attempt a = attempt_sample(2), back;
    unsigned char v[STORE_CODEC_ATTEMPT_VALUE_MAX];
    size_t n = store_codec_attempt_encode(&a, 9, v, sizeof(v));
    int64_t exp = 0;
    char want[DD_ERRSTR_SIZE];
    ck_assert_int_eq(store_codec_attempt_decode(v, n, "op-1", 3, &back, &exp,
                                                g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    snprintf(want, sizeof(want), "store: attempts record 'op-1#3' is corrupt "
             "(%zu bytes, number 2)", n);
    ck_assert_str_eq(g_err, want);
    for (size_t cut = 16; cut < n; cut++) {
        unsigned char *c = exact(v, cut);
        ck_assert_int_eq(store_codec_attempt_decode(c, cut, "op-1", 2, &back,
                                                    &exp, g_err,
                                                    sizeof(g_err)),
                         DD_ERR_FATAL);
        free(c);
    }
    ck_assert_int_eq(store_codec_attempt_decode(v, 10, "op-1", 2, &back, &exp,
                                                g_err, sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: attempts record 'op-1#2' is corrupt: 10 "
                            "bytes, shorter than its header");
    /* an unterminated string is not written */
    memset(a.error, 'e', sizeof(a.error));
    ck_assert_uint_eq(store_codec_attempt_encode(&a, 9, v, sizeof(v)), 0);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* outbox                                                                  */

START_TEST(test_store_codec_outbox_round_trip_borrows_the_value)
{
    const struct store_codec_outbox in = {
        .op_id = "default:order-1001", .op_id_len = 18, .event_key = H2,
        .event_key_len = 64, .generation = 5,
        .value = "{\"status\":200}", .value_len = 14};
    size_t size = store_codec_outbox_size(18, 64, 14);
    ck_assert_uint_eq(size, 16 + 2 + 18 + 2 + 64 + 8 + 4 + 14);
    unsigned char *v = malloc(size);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(store_codec_outbox_encode(&in, v, size - 1), 0);
    ck_assert_uint_eq(store_codec_outbox_encode(&in, v, size), size);
    ck_assert_uint_eq(v[1], STORE_CODEC_OUTBOX);
    ck_assert_uint_eq(store_codec_le64_get(v + 8), 0); /* never expires */
    struct store_codec_outbox out;
    ck_assert_int_eq(store_codec_outbox_decode(v, size, 4097, &out, g_err,
                                               sizeof(g_err)),
                     DD_OK);
    ck_assert_ptr_eq(out.op_id, (const char *)v + 18);
    ck_assert_uint_eq(out.op_id_len, 18);
    ck_assert_mem_eq(out.op_id, "default:order-1001", 18);
    ck_assert_ptr_eq(out.event_key, (const char *)v + 38);
    ck_assert_uint_eq(out.event_key_len, 64);
    ck_assert_uint_eq(out.generation, 5);
    ck_assert_ptr_eq(out.value, v + size - 14);
    ck_assert_uint_eq(out.value_len, 14);
    ck_assert_mem_eq(out.value, "{\"status\":200}", 14);
    /* the head alone, then the value: the same bytes (what the store
     * writes as two slices of one record) */
    unsigned char head[16 + 2 + 18 + 2 + 64 + 8 + 4];
    ck_assert_uint_eq(store_codec_outbox_encode_head(&in, head,
                                                     sizeof(head) - 1), 0);
    ck_assert_uint_eq(store_codec_outbox_encode_head(&in, head, sizeof(head)),
                      sizeof(head));
    ck_assert_mem_eq(head, v, sizeof(head));
    ck_assert_uint_eq(size - sizeof(head), 14);
    /* the value length field says one byte more than there is */
    ck_assert_int_eq(store_codec_outbox_decode(v, size - 1, 4097, &out, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    char want[DD_ERRSTR_SIZE];
    snprintf(want, sizeof(want), "store: outbox entry 4097 is corrupt (%zu "
             "bytes)", size - 1);
    ck_assert_str_eq(g_err, want);
    free(v);
}
END_TEST

/* An entry naming its body: head, prefix, suffix length and suffix as the
 * store writes them (four slices) equal the whole encoding, and decode
 * back to the same fields; a cut or a literal under 2 bytes is corrupt. */
START_TEST(test_store_codec_outbox_naming_its_body_round_trips)
{
    const char *pre = "{\"op_id\":\"o\",\"body\":";
    const struct store_codec_outbox in = {
        .op_id = "default:order-1001", .op_id_len = 18, .event_key = H2,
        .event_key_len = 64, .generation = 7, .value = pre,
        .value_len = strlen(pre), .body_sha256 = H1, .body_len = 14000,
        .literal_len = 14002, .written_at_ms = INT64_C(1764000000123),
        .suffix = "}", .suffix_len = 1};
    size_t size = store_codec_outbox_len(&in);
    ck_assert_uint_eq(size, 16 + 2 + 18 + 2 + 64 + 8 + 8 + 2 + 64 + 8 + 4 + 4
                                + strlen(pre) + 4 + 1);
    unsigned char *v = malloc(size);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(store_codec_outbox_encode(&in, v, size - 1), 0);
    ck_assert_uint_eq(store_codec_outbox_encode(&in, v, size), size);
    ck_assert_uint_eq(v[1], STORE_CODEC_OUTBOX_REF);
    ck_assert_uint_eq(store_codec_le64_get(v + 8), 0);
    unsigned char head[256], mid[4];
    size_t h = store_codec_outbox_encode_head(&in, head, sizeof(head));
    ck_assert_uint_eq(store_codec_outbox_encode_mid(&in, mid), 4);
    ck_assert_mem_eq(head, v, h);
    ck_assert_mem_eq(v + h, pre, strlen(pre));
    ck_assert_mem_eq(v + h + strlen(pre), mid, 4);
    ck_assert_uint_eq(h + strlen(pre) + 4 + 1, size);
    struct store_codec_outbox out;
    ck_assert_int_eq(store_codec_outbox_decode(v, size, 9, &out, g_err,
                                               sizeof(g_err)),
                     DD_OK);
    ck_assert_mem_eq(out.op_id, "default:order-1001", 18);
    ck_assert_uint_eq(out.generation, 7);
    ck_assert_ptr_nonnull(out.body_sha256);
    ck_assert_mem_eq(out.body_sha256, H1, 64);
    ck_assert_uint_eq(out.body_len, 14000);
    ck_assert_uint_eq(out.literal_len, 14002);
    ck_assert_int_eq(out.written_at_ms, INT64_C(1764000000123));
    ck_assert_uint_eq(out.value_len, strlen(pre));
    ck_assert_mem_eq(out.value, pre, strlen(pre));
    ck_assert_uint_eq(out.suffix_len, 1);
    ck_assert_mem_eq(out.suffix, "}", 1);
    /* a whole entry has no mid part and decodes without a body */
    struct store_codec_outbox whole = in;
    whole.body_sha256 = NULL;
    ck_assert_uint_eq(store_codec_outbox_encode_mid(&whole, mid), 0);
    ck_assert_int_eq(store_codec_outbox_decode(v, size - 1, 9, &out, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    struct store_codec_outbox short_lit = in;
    short_lit.literal_len = 1;
    ck_assert_uint_eq(store_codec_outbox_encode(&short_lit, v, size), size);
    ck_assert_int_eq(store_codec_outbox_decode(v, size, 9, &out, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    free(v);
}
END_TEST

START_TEST(test_store_codec_outbox_refuses_an_empty_op_id)
{
    const struct store_codec_outbox in = {.op_id = "", .event_key = "",
                                          .generation = 1, .value = ""};
    unsigned char v[64];
    size_t n = store_codec_outbox_encode(&in, v, sizeof(v));
    ck_assert_uint_eq(n, 16 + 2 + 2 + 8 + 4);
    struct store_codec_outbox out;
    ck_assert_int_eq(store_codec_outbox_decode(v, n, 7, &out, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: outbox entry 7 is corrupt (32 bytes)");
    v[1] = STORE_CODEC_OP;
    ck_assert_int_eq(store_codec_outbox_decode(v, n, 7, &out, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: outbox record '7' has layout version 1 "
                            "type 1, expected version 1 type 2");
}
END_TEST

START_TEST(test_store_codec_outbox_key_is_big_endian)
{
    unsigned char k[STORE_CODEC_OUTBOX_KEY_LEN];
    store_codec_outbox_key(0x0102, k);
    static const unsigned char want[8] = {0, 0, 0, 0, 0, 0, 1, 2};
    ck_assert_mem_eq(k, want, 8);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* conflicts, seen, receipts, meta                                         */

START_TEST(test_store_codec_marks_and_conflict_key)
{
    char key[STORE_CODEC_CONFLICT_KEY_MAX];
    size_t n = store_codec_conflict_key("op-1", 4, H1, 64, key);
    ck_assert_uint_eq(n, 69);
    ck_assert_mem_eq(key, "op-1\n" H1, 69);
    unsigned char m[STORE_CODEC_MARK_LEN];
    ck_assert_uint_eq(store_codec_mark_encode(STORE_CODEC_CONFLICT, 4600000,
                                              1000000, m),
                      24);
    ck_assert_uint_eq(m[1], STORE_CODEC_CONFLICT);
    ck_assert_uint_eq(store_codec_le64_get(m + 8), 4600000);
    ck_assert_uint_eq(store_codec_le64_get(m + 16), 1000000);
    int64_t exp = 0;
    ck_assert_int_eq(store_codec_header_decode(m, 24, STORE_CODEC_CONFLICT,
                                               key, n, &exp, g_err,
                                               sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(exp, 4600000);
    /* a seen mark is not a conflict */
    store_codec_mark_encode(STORE_CODEC_SEEN, 1, 0, m);
    ck_assert_int_eq(store_codec_header_decode(m, 24, STORE_CODEC_CONFLICT,
                                               "x", 1, &exp, g_err,
                                               sizeof(g_err)),
                     DD_ERR_FATAL);
}
END_TEST

START_TEST(test_store_codec_receipt_round_trips_and_refuses_a_bad_state)
{
    const char *json = "{\"op_id\":\"api:k1\"}";
    size_t rl = strlen(json);
    size_t size = store_codec_receipt_size(64, rl);
    ck_assert_uint_eq(size, 16 + 1 + 2 + 64 + 2 + rl);
    unsigned char *v = malloc(size);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(store_codec_receipt_encode(9, STORE_RECEIPT_DONE, H1, 64,
                                                 json, rl, v, size),
                      size);
    struct store_codec_receipt r;
    ck_assert_int_eq(store_codec_receipt_decode(v, size, "k1", &r, g_err,
                                                sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r.state, STORE_RECEIPT_DONE);
    ck_assert_str_eq(r.request_hash, H1);
    ck_assert_uint_eq(r.receipt_len, rl);
    ck_assert_mem_eq(r.receipt, json, rl);
    v[16] = 3;
    ck_assert_int_eq(store_codec_receipt_decode(v, size, "k1", &r, g_err,
                                                sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "receipts: corrupt record at k1");
    v[16] = STORE_RECEIPT_PENDING;
    ck_assert_int_eq(store_codec_receipt_decode(v, size - 1, "k1", &r, g_err,
                                                sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "receipts: corrupt record at k1");
    v[1] = STORE_CODEC_SEEN;
    ck_assert_int_eq(store_codec_receipt_decode(v, size, "k1", &r, g_err,
                                                sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: receipts record 'k1' has layout version "
                            "1 type 4, expected version 1 type 6");
    free(v);
    /* a pending receipt has none */
    unsigned char p[16 + 1 + 2 + 64 + 2];
    ck_assert_uint_eq(store_codec_receipt_encode(9, STORE_RECEIPT_PENDING, H2,
                                                 64, "", 0, p, sizeof(p)),
                      sizeof(p));
    ck_assert_int_eq(store_codec_receipt_decode(p, sizeof(p), "k2", &r, g_err,
                                                sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r.state, STORE_RECEIPT_PENDING);
    ck_assert_str_eq(r.request_hash, H2);
    ck_assert_uint_eq(r.receipt_len, 0);
    ck_assert_int_eq(r.pending_until_ms, 0); /* an older dedupd's: none */
    /* a pending receipt with its in-flight window */
    unsigned char w[sizeof(p) + 8];
    ck_assert_uint_eq(store_codec_receipt_pending_encode(9, 5, H2, 64, w,
                                                         sizeof(w)),
                      sizeof(w));
    ck_assert_uint_eq(store_codec_receipt_pending_encode(9, 5, H2, 64, w,
                                                         sizeof(w) - 1),
                      0);
    ck_assert_mem_eq(w, p, sizeof(p)); /* an older dedupd reads it alike */
    ck_assert_int_eq(store_codec_receipt_decode(w, sizeof(w), "k2", &r, g_err,
                                                sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(r.state, STORE_RECEIPT_PENDING);
    ck_assert_str_eq(r.request_hash, H2);
    ck_assert_uint_eq(r.receipt_len, 0);
    ck_assert_int_eq(r.pending_until_ms, 5);
}
END_TEST

START_TEST(test_store_codec_layout_version_value)
{
    unsigned char v[STORE_CODEC_LAYOUT_LEN];
    store_codec_layout_encode(STORE_LAYOUT_V1, v);
    ck_assert_mem_eq(v, "\x01\x00\x00\x00", 4);
    uint32_t ver = 0;
    ck_assert(store_codec_layout_decode("\x02\x01\x00\x00", 4, &ver));
    ck_assert_uint_eq(ver, 0x102);
    ck_assert(!store_codec_layout_decode("\x01\x00\x00", 3, &ver));
    ck_assert(!store_codec_layout_decode("\x01\x00\x00\x00\x00", 5, &ver));
}
END_TEST

/* ---------------------------------------------------------------------- */
/* validators and bodies                                                   */

START_TEST(test_store_codec_validator_round_trip)
{
    const struct store_codec_validator in = {
        .stored_at_ms = 1000000,
        .status = 200,
        .body_len = 3,
        .body_sha256 = DIGEST,
        .etag = "\"v1\"",
        .last_modified = NULL,
        .content_type = "text/plain",
        .final_url = "http://origin/a",
    };
    unsigned char *v = malloc(STORE_CODEC_VALIDATOR_VALUE_MAX);
    ck_assert_ptr_nonnull(v);
    size_t n = store_codec_validator_encode(&in, 8200000, v,
                                            STORE_CODEC_VALIDATOR_VALUE_MAX);
    ck_assert_uint_eq(n, 16 + 8 + 4 + 8 + 10 + 64 + 4 + 0 + 10 + 15);
    struct store_validator *out = malloc(sizeof(*out));
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(store_codec_validator_decode(v, n, "rk", out, g_err,
                                                  sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(out->expires_at_ms, 8200000);
    ck_assert_int_eq(out->stored_at_ms, 1000000);
    ck_assert_int_eq(out->status, 200);
    ck_assert_uint_eq(out->body_len, 3);
    ck_assert_str_eq(out->body_sha256, DIGEST);
    ck_assert_str_eq(out->etag, "\"v1\"");
    ck_assert_str_eq(out->last_modified, "");
    ck_assert_str_eq(out->content_type, "text/plain");
    ck_assert_str_eq(out->final_url, "http://origin/a");
    /* a digest that is not 64 lowercase hex is corrupt */
    v[16 + 8 + 4 + 8 + 2] = 'E';
    ck_assert_int_eq(store_codec_validator_decode(v, n, "rk", out, g_err,
                                                  sizeof(g_err)),
                     DD_ERR_FATAL);
    char want[DD_ERRSTR_SIZE];
    snprintf(want, sizeof(want), "store: validators record 'rk' is corrupt "
             "(%zu bytes)", n);
    ck_assert_str_eq(g_err, want);
    ck_assert_int_eq(store_codec_validator_decode(v, 5, "rk", out, g_err,
                                                  sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: validators record 'rk' is corrupt: 5 "
                            "bytes, shorter than its header");
    free(out);
    free(v);
}
END_TEST

START_TEST(test_store_codec_validator_encode_refuses_out_of_range_fields)
{
    struct store_codec_validator in = {.body_sha256 = "e3b0", .etag = "x"};
    unsigned char *v = malloc(STORE_CODEC_VALIDATOR_VALUE_MAX);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(store_codec_validator_encode(
                          &in, 1, v, STORE_CODEC_VALIDATOR_VALUE_MAX),
                      0);
    in.body_sha256 = DIGEST;
    ck_assert_uint_gt(store_codec_validator_encode(
                          &in, 1, v, STORE_CODEC_VALIDATOR_VALUE_MAX),
                      0);
    ck_assert_uint_eq(store_codec_validator_encode(
                          &in, 1, v, STORE_CODEC_VALIDATOR_VALUE_MAX - 1),
                      0);
    char etag[STORE_ETAG_MAX + 2];
    memset(etag, 'e', STORE_ETAG_MAX + 1);
    etag[STORE_ETAG_MAX + 1] = '\0';
    in.etag = etag;
    ck_assert_uint_eq(store_codec_validator_encode(
                          &in, 1, v, STORE_CODEC_VALIDATOR_VALUE_MAX),
                      0);
    etag[STORE_ETAG_MAX] = '\0'; /* at its bound */
    ck_assert_uint_gt(store_codec_validator_encode(
                          &in, 1, v, STORE_CODEC_VALIDATOR_VALUE_MAX),
                      0);
    free(v);
}
END_TEST

START_TEST(test_store_codec_body_round_trip_and_length_check)
{
    unsigned char v[STORE_CODEC_BODY_HEAD_LEN + 3];
    ck_assert_uint_eq(store_codec_body_head(8200000, 3, v), 24);
    memcpy(v + 24, "abc", 3);
    int64_t exp = 0;
    const void *body = NULL;
    size_t len = 0;
    ck_assert_int_eq(store_codec_body_decode(v, sizeof(v), DIGEST, &exp,
                                             &body, &len, g_err,
                                             sizeof(g_err)),
                     DD_OK);
    ck_assert_int_eq(exp, 8200000);
    ck_assert_ptr_eq(body, v + 24);
    ck_assert_uint_eq(len, 3);
    store_codec_body_head(8200000, 9, v);
    ck_assert_int_eq(store_codec_body_decode(v, sizeof(v), DIGEST, &exp,
                                             &body, &len, g_err,
                                             sizeof(g_err)),
                     DD_ERR_FATAL);
    ck_assert_str_eq(g_err, "store: bodies record '" DIGEST "' is corrupt "
                            "(27 bytes, body_len 9)");
    /* an empty body */
    store_codec_body_head(1, 0, v);
    ck_assert_int_eq(store_codec_body_decode(v, 24, DIGEST, &exp, &body, &len,
                                             g_err, sizeof(g_err)),
                     DD_OK);
    ck_assert_uint_eq(len, 0);
}
END_TEST

Suite *store_codec_suite(void)
{
    Suite *s = suite_create("store_codec");
    TCase *tc = tcase_create("header");
    tcase_add_test(tc, test_store_codec_header_bytes);
    tcase_add_test(tc, test_store_codec_header_checks_version_type_and_length);
    tcase_add_test(tc, test_store_codec_numbers_and_expiry_rule);
    suite_add_tcase(s, tc);

    tc = tcase_create("ops");
    tcase_add_test(tc, test_store_codec_op_bytes);
    tcase_add_test(tc, test_store_codec_op_retry_epoch_in_header_bytes_4_to_7);
    tcase_add_test(tc, test_store_codec_op_round_trips_each_state);
    tcase_add_test(tc, test_store_codec_op_largest_fits_its_maximum);
    tcase_add_test(tc, test_store_codec_op_encode_refuses_what_it_cannot_write);
    tcase_add_test(tc,
                   test_store_codec_op_refuses_every_truncation_and_a_trailing_byte);
    tcase_add_test(tc, test_store_codec_op_refuses_states_out_of_range);
    tcase_add_test(tc, test_store_codec_op_checks_layout_version_and_type);
    tcase_add_test(tc, test_store_codec_op_refuses_an_overlong_string);
    tcase_add_test(tc, test_store_codec_reason_is_one_line_of_utf8);
    suite_add_tcase(s, tc);

    tc = tcase_create("attempts");
    tcase_add_test(tc,
                   test_store_codec_attempt_key_is_op_id_newline_big_endian_number);
    tcase_add_test(tc, test_store_codec_attempt_round_trip);
    tcase_add_test(tc,
                   test_store_codec_attempt_refuses_another_number_and_truncation);
    suite_add_tcase(s, tc);

    tc = tcase_create("outbox");
    tcase_add_test(tc, test_store_codec_outbox_round_trip_borrows_the_value);
    tcase_add_test(tc, test_store_codec_outbox_refuses_an_empty_op_id);
    tcase_add_test(tc, test_store_codec_outbox_naming_its_body_round_trips);
    tcase_add_test(tc, test_store_codec_outbox_key_is_big_endian);
    suite_add_tcase(s, tc);

    tc = tcase_create("marks");
    tcase_add_test(tc, test_store_codec_marks_and_conflict_key);
    tcase_add_test(tc,
                   test_store_codec_receipt_round_trips_and_refuses_a_bad_state);
    tcase_add_test(tc, test_store_codec_layout_version_value);
    suite_add_tcase(s, tc);

    tc = tcase_create("conditional");
    tcase_add_test(tc, test_store_codec_validator_round_trip);
    tcase_add_test(tc,
                   test_store_codec_validator_encode_refuses_out_of_range_fields);
    tcase_add_test(tc, test_store_codec_body_round_trip_and_length_check);
    suite_add_tcase(s, tc);
    return s;
}
