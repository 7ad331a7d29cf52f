/* Unit tests of job.c: validation (DESIGN.md section 3) and identity
 * (section 2); field cases C-01, C-02, C-05, C-06, C-11, C-24, C-26, C-29
 * at the identity level.  Case inputs are read from cases.json. */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "key.h"

#define EMPTY_SHA256 \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static const struct job_conf default_conf = { 0 };

/* ---- helpers ------------------------------------------------------------ */

static struct job *parse_conf(const struct job_conf *conf, const char *json)
{
    char err[DD_ERRSTR_SIZE] = "";
    struct job *job = NULL;
    dd_err_t rc = job_parse(conf, json, strlen(json), &job, err, sizeof(err));
    ck_assert_msg(rc == DD_OK, "job_parse(%s) = %d: %s", json, rc, err);
    ck_assert_ptr_nonnull(job);
    return job;
}

static struct job *parse(const char *json)
{
    return parse_conf(&default_conf, json);
}

static void assert_invalid_conf(const struct job_conf *conf, const void *p,
                                size_t len, const char *reason)
{
    char err[DD_ERRSTR_SIZE] = "";
    struct job *job = (struct job *)0x1;
    dd_err_t rc = job_parse(conf, p, len, &job, err, sizeof(err));
    ck_assert_msg(rc == DD_ERR_PERMANENT,
                  "job_parse(%.*s) = %d, want PERMANENT", (int)len,
                  (const char *)p, rc);
    ck_assert_ptr_null(job);
    ck_assert_msg(strstr(err, reason) != NULL,
                  "job_parse(%.*s): reason '%s' lacks '%s'", (int)len,
                  (const char *)p, err, reason);
}

static void assert_invalid(const char *json, const char *reason)
{
    assert_invalid_conf(&default_conf, json, strlen(json), reason);
}

/* request_hash of two payloads: equal or not, as \p same says */
static void assert_same_hash_conf(const struct job_conf *conf, const char *a,
                                  const char *b, bool same)
{
    struct job *x = parse_conf(conf, a), *y = parse_conf(conf, b);
    ck_assert_msg((strcmp(x->request_hash, y->request_hash) == 0) == same,
                  "%s vs %s: want %s request_hash\n%s\n%s", a, b,
                  same ? "same" : "different", x->canonical, y->canonical);
    job_destroy(x);
    job_destroy(y);
}

static void assert_same_hash(const char *a, const char *b, bool same)
{
    assert_same_hash_conf(&default_conf, a, b, same);
}

/* The case \p id of cases.json (a new reference). */
static json_t *load_case(const char *id)
{
    json_error_t je;
    json_t *all = json_load_file(CASES_JSON, 0, &je);
    ck_assert_msg(all != NULL, "%s: %s", CASES_JSON, je.text);
    size_t i;
    json_t *c;
    json_array_foreach(all, i, c) {
        if (strcmp(json_string_value(json_object_get(c, "id")), id) == 0) {
            json_incref(c);
            json_decref(all);
            return c;
        }
    }
    json_decref(all);
    ck_abort_msg("case %s not in cases.json", id);
    return NULL;
}

/* Parse input.jobs.<name> of a case (fields outside the job, such as C-29's
 * "arrives", are dropped first). */
static struct job *parse_case_job(json_t *c, const char *name)
{
    json_t *in = json_object_get(c, "input");
    json_t *jobs = json_object_get(in, "jobs");
    if (!jobs)
        jobs = json_object_get(in, "jobs_in_order"); /* C-29 */
    json_t *j = json_object_get(jobs, name);
    ck_assert_msg(json_is_object(j), "job %s", name);
    json_t *copy = json_deep_copy(j);
    json_object_del(copy, "arrives");
    char *payload = json_dumps(copy, JSON_COMPACT);
    json_decref(copy);
    struct job *job = parse(payload);
    free(payload);
    return job;
}

static const char *expected_str(json_t *c, const char *key)
{
    const char *s = json_string_value(
        json_object_get(json_object_get(c, "expected"), key));
    ck_assert_msg(s != NULL, "expected.%s", key);
    return s;
}

/* Claim decision a store would make from identity alone (no expiry). */
struct claims {
    char op_id[16][JOB_OP_ID_MAX + 1];
    char hash[16][JOB_HEX_LEN + 1];
    size_t n;
};

static const char *claim(struct claims *t, const struct job *job)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->op_id[i], job->op_id) == 0)
            return strcmp(t->hash[i], job->request_hash) == 0 ? "DUPLICATE"
                                                               : "CONFLICT";
    ck_assert_uint_lt(t->n, 16);
    strcpy(t->op_id[t->n], job->op_id);
    strcpy(t->hash[t->n], job->request_hash);
    t->n++;
    return "NEW";
}

/* ---- field cases -------------------------------------------------------- */

START_TEST(test_job_resource_key_ignores_observation_fields)
{
    struct job *a = parse("{\"url\":\"https://a.example/p?x=1\",\"job_key\":\"k1\"}");
    struct job *b = parse("{\"url\":\"https://A.example/p?x=1\",\"job_key\":\"k2\","
                          "\"parser_version\":3,\"scheduled_for\":\"2026-01-01T00:00:00Z\"}");
    struct job *c = parse("{\"url\":\"https://a.example/p?x=2\"}");
    struct job *d = parse("{\"url\":\"https://a.example/p?x=1\",\"country\":\"de\"}");
    ck_assert_uint_eq(strlen(a->resource_key), 64);
    /* same request, other observation fields: one resource, two requests */
    ck_assert_str_eq(a->resource_key, b->resource_key);
    ck_assert_str_ne(a->request_hash, b->request_hash);
    /* another URL or another country is another resource */
    ck_assert_str_ne(a->resource_key, c->resource_key);
    ck_assert_str_ne(a->resource_key, d->resource_key);
    /* never the request_hash itself */
    ck_assert_str_ne(a->resource_key, a->request_hash);
    job_destroy(a);
    job_destroy(b);
    job_destroy(c);
    job_destroy(d);
}
END_TEST

/* request_hash and resource_key are persisted (the store, the changelog, the
 * results' event_key): their bytes must never change with the code that
 * computes them.  Golden values of this version (jansson's compact,
 * sorted-keys serialization of the canonical request); a faster serializer
 * must reproduce them. */
START_TEST(test_job_identity_golden_values)
{
    static const struct {
        const char *json, *request_hash, *resource_key;
    } g[] = {
        {"{\"url\":\"http://Example.com:80/a/b?y=2&x=1\"}",
         "296de10db4578372e340cd705166360c4986f3e97f0b186830a0b016adde044f",
         "7cfc54edadacbf172647f63dd44078d8ac2599762e33c413e84877a758cd9636"},
        {"{\"url\":\"https://example.com/p\",\"method\":\"POST\",\"headers\":"
         "{\"Accept\":\"text/html\",\"X-Other\":\"1\"},\"body\":\"k=v\","
         "\"country\":\"de\",\"parser_version\":3,\"scheduled_for\":"
         "\"2026-12-01T00:00:00Z\",\"job_key\":\"k1\"}",
         "5c15b96757064cd608cc6dfba28b8c050a634669c4c868d6e7e1c6f8041e8d7f",
         "2e5490ca6c1de221b9413e987fdd6acc7eca82556d91c55b4705b2e9327d0247"},
        {"{\"steps\":[{\"url\":\"http://example.com/login\",\"method\":\"GET\"},"
         "{\"url\":\"http://example.com/data?\\u00e9=1\",\"headers\":"
         "{\"Accept-Language\":\"de, \\\"en\\\"\"}}],\"scheduled_for\":"
         "\"2026-12-01T10:00:00Z\"}",
         "d34fec7e3d8a35e85477069e1fbf6a4c0dfb00c1c4f1f6c3d44b8ad325aabc24",
         "0e3731b873ae1e16705b8888e29f85daaf2793692dc175923a539f31aab0f7b2"},
    };
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
        struct job *j = parse(g[i].json);
        ck_assert_msg(!strcmp(j->request_hash, g[i].request_hash),
                      "job %zu: request_hash %s, want %s\n%s", i,
                      j->request_hash, g[i].request_hash, j->canonical);
        ck_assert_str_eq(j->resource_key, g[i].resource_key);
        job_destroy(j);
    }
}
END_TEST

START_TEST(test_job_c01_host_case_request_hash)
{
    json_t *c = load_case("C-01");
    struct job *a = parse_case_job(c, "A"), *b = parse_case_job(c, "B");
    struct job *cc = parse_case_job(c, "C");
    ck_assert_str_eq(a->request_hash, b->request_hash);
    ck_assert_str_ne(a->request_hash, cc->request_hash);
    ck_assert_str_ne(b->request_hash, cc->request_hash);
    ck_assert_str_eq(a->req.normalized_url,
                     expected_str(c, "normalized_url_of_A"));
    ck_assert_str_eq(a->req.normalized_url,
                     "https://shop.example.com/Product/ABC?ref=XyZ");
    /* the request goes out to the URL as submitted */
    ck_assert_str_eq(a->req.url,
                     "HTTPS://Shop.Example.COM/Product/ABC?ref=XyZ");
    job_destroy(a);
    job_destroy(b);
    job_destroy(cc);
    json_decref(c);
}
END_TEST

static struct job *job_for_url(const char *url)
{
    json_t *o = json_pack("{s:s}", "url", url);
    char *payload = json_dumps(o, JSON_COMPACT);
    struct job *job = parse(payload);
    free(payload);
    json_decref(o);
    return job;
}

static void assert_case_url_pair(json_t *urls, const char *a, const char *b,
                                 bool same)
{
    struct job *x = job_for_url(json_string_value(json_object_get(urls, a)));
    struct job *y = job_for_url(json_string_value(json_object_get(urls, b)));
    ck_assert_msg((strcmp(x->request_hash, y->request_hash) == 0) == same,
                  "%s (%s) vs %s (%s)", a, x->req.normalized_url, b,
                  y->req.normalized_url);
    job_destroy(x);
    job_destroy(y);
}

START_TEST(test_job_c02_reserved_escapes_request_hash)
{
    json_t *c = load_case("C-02");
    json_t *urls = json_object_get(json_object_get(c, "input"), "urls");
    assert_case_url_pair(urls, "Q1", "Q2", false);
    assert_case_url_pair(urls, "R1", "R2", false);
    assert_case_url_pair(urls, "S1", "S3", false);
    assert_case_url_pair(urls, "S1", "S2", true);
    struct job *s1 =
        job_for_url(json_string_value(json_object_get(urls, "S1")));
    ck_assert_str_eq(s1->req.normalized_url,
                     expected_str(c, "normalized_url_of_S1"));
    job_destroy(s1);
    struct job *p = job_for_url(json_string_value(json_object_get(urls, "P")));
    ck_assert_str_eq(p->req.normalized_url,
                     "http://example.com/deals/50%25-off");
    ck_assert_ptr_nonnull(strstr(p->req.normalized_url,
                                 expected_str(c, "normalized_path_of_P")));
    job_destroy(p);
    /* normalize_is_idempotent, through the job's normalized_url */
    const char *k;
    json_t *v;
    json_object_foreach(urls, k, v) {
        struct job *j = job_for_url(json_string_value(v));
        struct job *j2 = job_for_url(j->req.normalized_url);
        ck_assert_str_eq(j->req.normalized_url, j2->req.normalized_url);
        ck_assert_str_eq(j->request_hash, j2->request_hash);
        job_destroy(j);
        job_destroy(j2);
    }
    json_decref(c);
}
END_TEST

START_TEST(test_job_c05_default_port_request_hash)
{
    json_t *c = load_case("C-05");
    json_t *pairs = json_object_get(json_object_get(c, "input"), "pairs");
    ck_assert_uint_eq(json_array_size(pairs), 6);
    for (size_t i = 0; i < 6; i++) {
        json_t *pair = json_array_get(pairs, i);
        struct job *x = job_for_url(json_string_value(json_array_get(pair, 0)));
        struct job *y = job_for_url(json_string_value(json_array_get(pair, 1)));
        bool same = strcmp(x->request_hash, y->request_hash) == 0;
        /* same_request_hash: pairs 1, 2, 3; different: pairs 4, 5, 6 */
        ck_assert_msg(same == (i < 3), "pair %zu: %s vs %s", i + 1,
                      x->req.normalized_url, y->req.normalized_url);
        if (i == 3) {
            ck_assert_str_eq(x->req.normalized_url,
                             "https://example.com:80/x");
            ck_assert_str_eq(x->req.url, "https://example.com:80/x");
        }
        job_destroy(x);
        job_destroy(y);
    }
    json_decref(c);
}
END_TEST

START_TEST(test_job_c06_query_order_request_hash)
{
    json_t *c = load_case("C-06");
    json_t *urls = json_object_get(json_object_get(c, "input"), "urls");
    assert_case_url_pair(urls, "A", "B", true);
    assert_case_url_pair(urls, "E", "F", true);
    assert_case_url_pair(urls, "C", "D", false);
    /* request_line_sent_for_A: the submitted order is kept for the wire */
    struct job *a = job_for_url(json_string_value(json_object_get(urls, "A")));
    ck_assert_str_eq(a->req.url, "https://example.com/search?B=1&A=2");
    ck_assert_str_eq(a->req.normalized_url,
                     "https://example.com/search?A=2&B=1");
    job_destroy(a);
    json_decref(c);
}
END_TEST

START_TEST(test_job_c11_method_and_body_in_identity)
{
    json_t *c = load_case("C-11");
    const char *names[] = { "A", "B", "C", "D", "E" };
    struct job *j[5];
    for (int i = 0; i < 5; i++)
        j[i] = parse_case_job(c, names[i]);
    ck_assert_str_eq(j[0]->request_hash, j[2]->request_hash); /* A C */
    ck_assert_str_eq(j[0]->request_hash, j[4]->request_hash); /* A E */
    ck_assert_str_ne(j[0]->request_hash, j[1]->request_hash); /* A B */
    ck_assert_str_ne(j[0]->request_hash, j[3]->request_hash); /* A D */
    ck_assert_str_ne(j[1]->request_hash, j[3]->request_hash); /* B D */
    ck_assert_str_eq(j[4]->req.method, "POST");
    /* claims_in_order_A_B_C_D_E, from identity (no job_key: op_id = hash) */
    json_t *want = json_object_get(json_object_get(c, "expected"),
                                   "claims_in_order_A_B_C_D_E");
    static const char *const literal[] = { "NEW", "NEW", "DUPLICATE", "NEW",
                                           "DUPLICATE" };
    struct claims t = { .n = 0 };
    for (int i = 0; i < 5; i++) {
        const char *got = claim(&t, j[i]);
        ck_assert_str_eq(got, json_string_value(json_array_get(want, i)));
        ck_assert_str_eq(got, literal[i]);
        ck_assert_str_eq(j[i]->op_id, j[i]->request_hash);
    }
    for (int i = 0; i < 5; i++)
        job_destroy(j[i]);
    json_decref(c);
}
END_TEST

START_TEST(test_job_c24_replay_keeps_event_key)
{
    /* C-24: a redelivered job (instance B) keys exactly as the first
     * delivery (instance A): identity depends on the bytes only */
    const char *payload = "{\"job_key\":\"order-1001\",\"url\":"
                          "\"https://example.com/p/1\",\"country\":\"US\"}";
    struct job *a = parse(payload), *b = parse(payload);
    ck_assert_str_eq(a->op_id, b->op_id);
    ck_assert_str_eq(a->request_hash, b->request_hash);
    ck_assert_str_eq(a->event_key, b->event_key);
    job_destroy(a);
    job_destroy(b);
}
END_TEST

START_TEST(test_job_c26_op_id_is_the_kafka_key)
{
    /* C-26: the fourth key, "default:order-1001", is the op_id of a job with
     * job_key order-1001 and the default scope */
    json_t *c = load_case("C-26");
    json_t *keys = json_object_get(json_object_get(c, "input"), "keys");
    const char *k = json_string_value(
        json_object_get(json_array_get(keys, 3), "key"));
    struct job *j = parse("{\"job_key\":\"order-1001\",\"url\":\"https://"
                          "example.com/p/1\"}");
    ck_assert_str_eq(j->op_id, k);
    ck_assert_str_eq(j->op_id, "default:order-1001");
    job_destroy(j);
    json_decref(c);
}
END_TEST

START_TEST(test_job_c29_conflict_identity)
{
    json_t *c = load_case("C-29");
    struct job *j1 = parse_case_job(c, "J1"), *j2 = parse_case_job(c, "J2");
    struct job *j3 = parse_case_job(c, "J3"), *j4 = parse_case_job(c, "J4");
    /* one op_id for all four */
    ck_assert_str_eq(j1->op_id, "default:order-1001");
    ck_assert_str_eq(j2->op_id, j1->op_id);
    ck_assert_str_eq(j3->op_id, j1->op_id);
    ck_assert_str_eq(j4->op_id, j1->op_id);
    /* J2 CONFLICT: same op_id, different request_hash */
    ck_assert_str_ne(j2->request_hash, j1->request_hash);
    /* J3 DUPLICATE: same request_hash after normalization (URL spelling,
     * port, fragment, country case) */
    ck_assert_str_eq(j3->request_hash, j1->request_hash);
    ck_assert_str_eq(j3->country, "US");
    ck_assert_str_eq(j3->event_key, j1->event_key);
    struct claims t = { .n = 0 };
    ck_assert_str_eq(claim(&t, j1), "NEW");
    ck_assert_str_eq(claim(&t, j2), "CONFLICT");
    ck_assert_str_eq(claim(&t, j3), "DUPLICATE");
    /* J4 after J1 expired: the store treats the op as absent, so NEW; its
     * event_key differs from J1's, so downstream never drops it as a replay */
    struct claims expired = { .n = 0 };
    ck_assert_str_eq(claim(&expired, j4), "NEW");
    ck_assert_str_ne(j4->event_key, j1->event_key);
    ck_assert_str_eq(j4->request_hash, j2->request_hash);
    job_destroy(j1);
    job_destroy(j2);
    job_destroy(j3);
    job_destroy(j4);
    json_decref(c);
}
END_TEST

/* ---- identity ----------------------------------------------------------- */

START_TEST(test_job_canonical_typical)
{
    struct job *j = parse(
        "{\"url\":\"https://Example.com/p?b=2&a=1#x\",\"method\":\"post\","
        "\"headers\":{\"Accept\":\" text/html \",\"User-Agent\":\"bot/1\","
        "\"Authorization\":\"Bearer s3cret\",\"X-Trace\":\"1\"},"
        "\"body\":\"hello\",\"country\":\"us\",\"parser_version\":3,"
        "\"scheduled_for\":\"2026-01-02T03:04:05.120+01:00\","
        "\"job_key\":\"order-1\",\"meta\":{\"b\":1,\"a\":\"x\"}}");
    ck_assert_str_eq(
        j->canonical,
        "{\"body_sha256\":\"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e7"
        "3043362938b9824\",\"country\":\"US\",\"credentials\":{\"authorizati"
        "on\":\"0c9ae6066b41d3711dea4667cfcc513f60cfe047fb1bf4056ca7d1a8d089c"
        "f5a\"},\"headers\":{\"accept\":\"text/html\"},\"method\":\"POST\","
        "\"parser_version\":3,\"scheduled_for\":\"2026-01-02T02:04:05.12Z\","
        "\"steps\":null,\"url\":\"https://example.com/p?a=1&b=2\",\"v\":1}");
    /* sha256sum of the string above */
    ck_assert_str_eq(j->request_hash, "48b1dfbd970a32685430955f449c9a3ee00d25"
                                      "e1209d52c2601abe774ba3b13c");
    ck_assert_str_eq(j->op_id, "default:order-1");
    /* printf 'result:v1:%s\n%s' default:order-1 <request_hash> | sha256sum */
    ck_assert_str_eq(j->event_key, "47e2ac6b08ac286d6b32867ab42c49bee948da4ad"
                                   "80ecc2fe1b062f71472929b");
    ck_assert_str_eq(j->meta_json, "{\"b\":1,\"a\":\"x\"}");
    ck_assert_str_eq(j->req.method, "POST");
    ck_assert_uint_eq(j->req.n_headers, 4);
    ck_assert_uint_eq(j->req.body_len, 5);
    ck_assert_mem_eq(j->req.body, "hello", 5);
    ck_assert(!j->safe);
    job_destroy(j);
}
END_TEST

START_TEST(test_job_canonical_defaults_explicit)
{
    struct job *j = parse("{\"url\":\"http://example.com\"}");
    ck_assert_str_eq(j->canonical,
                     "{\"body_sha256\":\"" EMPTY_SHA256 "\",\"country\":null,"
                     "\"credentials\":{},\"headers\":{},\"method\":\"GET\","
                     "\"parser_version\":0,\"scheduled_for\":null,"
                     "\"steps\":null,\"url\":\"http://example.com/\",\"v\":1}");
    ck_assert_str_eq(j->request_hash, "7608c06c2d99c7b75ef958b0f2b76e2d82c55e"
                                      "fd0fda031783057feb4333e1fe");
    /* no job_key: op_id is the request_hash */
    ck_assert_str_eq(j->op_id, j->request_hash);
    ck_assert_str_eq(j->event_key, "d052075afdbd9fe1f497551372c411c76bad98fd9"
                                   "52db8c7b32f76ab00872ec1");
    ck_assert_str_eq(j->scope, "default");
    ck_assert_ptr_null(j->job_key);
    ck_assert_ptr_null(j->country);
    ck_assert_ptr_null(j->scheduled_for);
    ck_assert_ptr_null(j->rotation);
    ck_assert_ptr_null(j->meta_json);
    ck_assert_ptr_null(j->steps);
    ck_assert_ptr_null(j->req.body);
    ck_assert_int_eq(j->parser_version, 0);
    ck_assert_int_eq(j->deadline_s, 0);
    ck_assert_str_eq(j->req.method, "GET");
    ck_assert(j->safe);
    ck_assert(!j->replayable);
    job_destroy(j);
}
END_TEST

START_TEST(test_job_event_key_known_answer)
{
    char hex[KEY_HEX_LEN + 1];
    struct job *j = parse("{\"job_key\":\"order-1001\",\"url\":"
                          "\"https://example.com/p/1\"}");
    key_event_key(j->op_id, j->request_hash, hex);
    ck_assert_str_eq(j->event_key, hex);
    job_destroy(j);
    /* printf 'result:v1:%s\n%s' default:order-1001 <empty sha256> |
     *   sha256sum */
    key_event_key("default:order-1001", EMPTY_SHA256, hex);
    ck_assert_str_eq(hex, "d5f2c9b8922559659be1d83a639c2adf8e49517b47c02eee3"
                          "5a4099edae2d3ec");
}
END_TEST

START_TEST(test_job_op_id_with_and_without_job_key)
{
    struct job *a = parse("{\"url\":\"http://a/\",\"job_key\":\"k 1\"}");
    struct job *b = parse("{\"url\":\"http://a/\",\"job_key\":\"k 1\","
                          "\"scope\":\"shop.eu-1_x\"}");
    struct job *c = parse("{\"url\":\"http://a/\"}");
    ck_assert_str_eq(a->op_id, "default:k 1");
    ck_assert_str_eq(b->op_id, "shop.eu-1_x:k 1");
    ck_assert_str_eq(c->op_id, c->request_hash);
    /* job_key and scope are not part of the canonical request */
    ck_assert_str_eq(a->request_hash, c->request_hash);
    ck_assert_str_eq(b->request_hash, c->request_hash);
    ck_assert_str_ne(a->event_key, b->event_key);
    ck_assert_str_ne(a->event_key, c->event_key);
    ck_assert_ptr_null(strstr(a->canonical, "k 1"));
    job_destroy(a);
    job_destroy(b);
    job_destroy(c);
    /* the longest op_id fits */
    char payload[512], key[257], scope[65];
    memset(key, 'k', 256);
    key[256] = '\0';
    memset(scope, 's', 64);
    scope[64] = '\0';
    snprintf(payload, sizeof(payload),
             "{\"url\":\"http://a/\",\"job_key\":\"%s\",\"scope\":\"%s\"}", key,
             scope);
    struct job *l = parse(payload);
    ck_assert_uint_eq(strlen(l->op_id), JOB_OP_ID_MAX);
    job_destroy(l);
}
END_TEST

START_TEST(test_job_credentials_never_raw)
{
    static const char *const conf_creds[] = { "x-session-token" };
    struct job_conf conf = { .credential_headers = conf_creds,
                             .n_credential_headers = 1 };
    struct job *j = parse_conf(
        &conf, "{\"url\":\"http://a/\",\"headers\":{"
               "\"Authorization\":\"Bearer AAA-secret\","
               "\"Cookie\":\"sid=BBB-secret\","
               "\"Proxy-Authorization\":\"Basic CCC-secret\","
               "\"X-Api-Key\":\"DDD-secret\","
               "\"X-Session-Token\":\"EEE-secret\"}}");
    ck_assert_ptr_null(strstr(j->canonical, "secret"));
    char hex[KEY_HEX_LEN + 1];
    key_sha256_hex("Bearer AAA-secret", 17, hex);
    ck_assert_ptr_nonnull(strstr(j->canonical, hex));
    static const char *const names[] = { "\"authorization\":",
                                         "\"cookie\":",
                                         "\"proxy-authorization\":",
                                         "\"x-api-key\":",
                                         "\"x-session-token\":" };
    for (size_t i = 0; i < 5; i++)
        ck_assert_msg(strstr(j->canonical, names[i]) != NULL, "%s in %s",
                      names[i], j->canonical);
    /* the raw values stay on the request for the wire */
    ck_assert_str_eq(job_header_get(&j->req, "authorization"),
                     "Bearer AAA-secret");
    job_destroy(j);
    /* a credential header listed as a variance header is still a digest */
    static const char *const var[] = { "authorization", "accept" };
    struct job_conf vconf = { .variance_headers = var,
                              .n_variance_headers = 2 };
    j = parse_conf(&vconf, "{\"url\":\"http://a/\",\"headers\":{"
                           "\"Authorization\":\"Bearer AAA-secret\"}}");
    ck_assert_ptr_null(strstr(j->canonical, "secret"));
    job_destroy(j);
}
END_TEST

START_TEST(test_job_credentials_separate_accounts)
{
    assert_same_hash("{\"url\":\"http://a/\",\"headers\":{\"Cookie\":\"a=1\"}}",
                     "{\"url\":\"http://a/\",\"headers\":{\"Cookie\":\"a=2\"}}",
                     false);
    assert_same_hash("{\"url\":\"http://a/\",\"headers\":{\"Cookie\":\"a=1\"}}",
                     "{\"url\":\"http://a/\",\"headers\":{\"cookie\":"
                     "\" a=1\"}}",
                     true);
    assert_same_hash("{\"url\":\"http://a/\",\"headers\":{\"X-Api-Key\":"
                     "\"k\"}}",
                     "{\"url\":\"http://a/\"}", false);
    /* an extra credential header only counts when configured */
    static const char *const creds[] = { "x-tenant" };
    struct job_conf conf = { .credential_headers = creds,
                             .n_credential_headers = 1 };
    const char *t1 = "{\"url\":\"http://a/\",\"headers\":{\"X-Tenant\":\"1\"}}";
    const char *t2 = "{\"url\":\"http://a/\",\"headers\":{\"X-Tenant\":\"2\"}}";
    assert_same_hash(t1, t2, true);
    assert_same_hash_conf(&conf, t1, t2, false);
}
END_TEST

START_TEST(test_job_is_credential_header)
{
    static const char *const creds[] = { "x-tenant" };
    struct job_conf conf = { .credential_headers = creds,
                             .n_credential_headers = 1 };
    ck_assert(job_is_credential_header(&default_conf, "Authorization"));
    ck_assert(job_is_credential_header(&default_conf, "COOKIE"));
    ck_assert(job_is_credential_header(&default_conf, "proxy-authorization"));
    ck_assert(job_is_credential_header(&default_conf, "X-API-Key"));
    ck_assert(!job_is_credential_header(&default_conf, "X-Tenant"));
    ck_assert(job_is_credential_header(&conf, "X-Tenant"));
    ck_assert(!job_is_credential_header(&conf, "Accept"));
}
END_TEST

START_TEST(test_job_variance_headers)
{
    /* default list: accept, accept-language; names any case, values trimmed */
    assert_same_hash(
        "{\"url\":\"http://a/\",\"headers\":{\"Accept\":\"text/html\"}}",
        "{\"url\":\"http://a/\",\"headers\":{\"ACCEPT\":\"\\ttext/html  \"}}",
        true);
    assert_same_hash(
        "{\"url\":\"http://a/\",\"headers\":{\"Accept-Language\":\"de\"}}",
        "{\"url\":\"http://a/\",\"headers\":{\"Accept-Language\":\"fr\"}}",
        false);
    assert_same_hash("{\"url\":\"http://a/\",\"headers\":{\"Accept\":\"a\"}}",
                     "{\"url\":\"http://a/\"}", false);
    /* user-agent only when listed: fleets rotate it */
    const char *ua1 =
        "{\"url\":\"http://a/\",\"headers\":{\"User-Agent\":\"bot/1\"}}";
    const char *ua2 =
        "{\"url\":\"http://a/\",\"headers\":{\"User-Agent\":\"bot/2\"}}";
    assert_same_hash(ua1, ua2, true);
    assert_same_hash(ua1, "{\"url\":\"http://a/\"}", true);
    static const char *const var[] = { "accept", "user-agent" };
    struct job_conf conf = { .variance_headers = var, .n_variance_headers = 2 };
    assert_same_hash_conf(&conf, ua1, ua2, false);
    struct job *j = parse_conf(&conf, ua1);
    ck_assert_ptr_nonnull(strstr(j->canonical,
                                 "\"headers\":{\"user-agent\":\"bot/1\"}"));
    job_destroy(j);
    /* an empty configured list: no variance header at all */
    struct job_conf none = { .variance_headers = var, .n_variance_headers = 0 };
    assert_same_hash_conf(
        &none, "{\"url\":\"http://a/\",\"headers\":{\"Accept\":\"a\"}}",
        "{\"url\":\"http://a/\"}", true);
}
END_TEST

START_TEST(test_job_body_and_body_base64_same_hash)
{
    assert_same_hash("{\"url\":\"http://a/\",\"method\":\"POST\","
                     "\"body\":\"hello\"}",
                     "{\"url\":\"http://a/\",\"method\":\"POST\","
                     "\"body_base64\":\"aGVsbG8=\"}",
                     true);
    assert_same_hash("{\"url\":\"http://a/\",\"body\":\"ab\"}",
                     "{\"url\":\"http://a/\",\"body_base64\":\"YWI=\"}", true);
    assert_same_hash("{\"url\":\"http://a/\",\"body\":\"a\"}",
                     "{\"url\":\"http://a/\",\"body_base64\":\"YQ==\"}", true);
    assert_same_hash("{\"url\":\"http://a/\",\"body\":\"hello\"}",
                     "{\"url\":\"http://a/\",\"body\":\"hellO\"}", false);
    /* binary bytes, NUL included, through base64 */
    struct job *j =
        parse("{\"url\":\"http://a/\",\"body_base64\":\"AAEC/w==\"}");
    ck_assert_uint_eq(j->req.body_len, 4);
    ck_assert_mem_eq(j->req.body, "\x00\x01\x02\xff", 4);
    char hex[KEY_HEX_LEN + 1];
    key_sha256_hex("\x00\x01\x02\xff", 4, hex);
    ck_assert_ptr_nonnull(strstr(j->canonical, hex));
    job_destroy(j);
}
END_TEST

START_TEST(test_job_absent_and_empty_body_same_hash)
{
    const char *absent = "{\"url\":\"http://a/\",\"method\":\"POST\"}";
    assert_same_hash(absent,
                     "{\"url\":\"http://a/\",\"method\":\"POST\","
                     "\"body\":\"\"}",
                     true);
    assert_same_hash(absent,
                     "{\"url\":\"http://a/\",\"method\":\"POST\","
                     "\"body_base64\":\"\"}",
                     true);
    assert_same_hash(absent,
                     "{\"url\":\"http://a/\",\"method\":\"POST\","
                     "\"body\":null}",
                     true);
    struct job *j = parse("{\"url\":\"http://a/\",\"body\":\"\"}");
    ck_assert_ptr_nonnull(j->req.body); /* present, empty */
    ck_assert_uint_eq(j->req.body_len, 0);
    ck_assert_ptr_nonnull(strstr(j->canonical, EMPTY_SHA256));
    job_destroy(j);
}
END_TEST

START_TEST(test_job_scheduled_for_normalized)
{
    static const char *const cases[][2] = {
        { "2026-01-02T03:04:05.120+01:00", "2026-01-02T02:04:05.12Z" },
        { "2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z" },
        { "2026-01-02t03:04:05z", "2026-01-02T03:04:05Z" },
        { "2026-01-02T03:04:05.000Z", "2026-01-02T03:04:05Z" },
        { "2026-01-02T03:04:05.5Z", "2026-01-02T03:04:05.5Z" },
        { "2026-01-02T03:04:05.123456789Z", "2026-01-02T03:04:05.123456789Z" },
        { "2026-01-01T00:30:00+01:00", "2025-12-31T23:30:00Z" },
        { "2025-12-31T23:30:00-00:30", "2026-01-01T00:00:00Z" },
        { "2026-01-02T03:04:05-00:00", "2026-01-02T03:04:05Z" },
        { "2024-02-29T23:00:00-05:00", "2024-03-01T04:00:00Z" },
        { "2026-03-01T01:00:00+05:45", "2026-02-28T19:15:00Z" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char payload[128];
        snprintf(payload, sizeof(payload),
                 "{\"url\":\"http://a/\",\"scheduled_for\":\"%s\"}",
                 cases[i][0]);
        struct job *j = parse(payload);
        ck_assert_str_eq(j->scheduled_for, cases[i][1]);
        char want[64];
        snprintf(want, sizeof(want), "\"scheduled_for\":\"%s\"", cases[i][1]);
        ck_assert_ptr_nonnull(strstr(j->canonical, want));
        job_destroy(j);
    }
    /* the same instant in two spellings is one observation */
    assert_same_hash(
        "{\"url\":\"http://a/\",\"scheduled_for\":"
        "\"2026-01-02T03:04:05.120+01:00\"}",
        "{\"url\":\"http://a/\",\"scheduled_for\":\"2026-01-02T02:04:05.12Z\"}",
        true);
    /* a new observation is a new request */
    assert_same_hash(
        "{\"url\":\"http://a/\",\"scheduled_for\":\"2026-01-02T02:04:05Z\"}",
        "{\"url\":\"http://a/\",\"scheduled_for\":\"2026-01-02T02:04:06Z\"}",
        false);
    assert_same_hash("{\"url\":\"http://a/\",\"parser_version\":1}",
                     "{\"url\":\"http://a/\",\"parser_version\":2}", false);
    assert_same_hash("{\"url\":\"http://a/\",\"parser_version\":0}",
                     "{\"url\":\"http://a/\"}", true);
}
END_TEST

START_TEST(test_job_steps)
{
    struct job *j = parse(
        "{\"steps\":[{\"url\":\"https://example.com/login\","
        "\"method\":\"POST\","
        "\"body\":\"u=1\"},{\"url\":\"https://example.com/data\"}],"
        "\"replayable\":true}");
    ck_assert_uint_eq(j->n_steps, 2);
    ck_assert_str_eq(j->canonical,
        "{\"body_sha256\":null,\"country\":null,\"credentials\":null,"
        "\"headers\":null,\"method\":null,\"parser_version\":0,"
        "\"scheduled_for\":null,\"steps\":[{\"body_sha256\":\"7fa211acd935f6"
        "2457ad10c390d8c690f3af35df44f65d9d3097f95010ebfb7d\",\"credentials\""
        ":{},\"headers\":{},\"method\":\"POST\",\"url\":\"https://example.com/"
        "login\"},{\"body_sha256\":\"" EMPTY_SHA256 "\",\"credentials\":{},"
        "\"headers\":{},\"method\":\"GET\",\"url\":\"https://example.com/data"
        "\"}],\"url\":null,\"v\":1}");
    ck_assert_str_eq(j->request_hash, "3c4eb9f8ea12d070c36aa540713843cd4c0c81"
                                      "5f3e5ef899cc86fecd8c6c8822");
    /* req is a shallow copy of the first step (borrowed pointers) */
    ck_assert_ptr_eq(j->req.url, j->steps[0].url);
    ck_assert_ptr_eq(j->req.body, j->steps[0].body);
    ck_assert_str_eq(j->req.method, "POST");
    ck_assert_str_eq(j->steps[1].normalized_url, "https://example.com/data");
    ck_assert(!j->safe); /* a POST step */
    ck_assert(j->replayable);
    job_destroy(j);
    /* step order matters */
    assert_same_hash("{\"steps\":[{\"url\":\"http://a/1\"},"
                     "{\"url\":\"http://a/2\"}]}",
                     "{\"steps\":[{\"url\":\"http://a/2\"},"
                     "{\"url\":\"http://a/1\"}]}",
                     false);
    /* a one-step workflow is not the plain job */
    assert_same_hash("{\"steps\":[{\"url\":\"http://a/1\"}]}",
                     "{\"url\":\"http://a/1\"}", false);
    j = parse("{\"steps\":[{\"url\":\"http://a/1\"},{\"url\":\"http://a/2\","
              "\"method\":\"head\"}]}");
    ck_assert(j->safe);
    job_destroy(j);
}
END_TEST

/* job_parse hands out one block: every pointer of the job (steps, header
 * arrays, strings, body) lies inside it, the values are the parse's, and
 * job_destroy frees it at once (valgrind and ASan runs of this suite catch
 * a pointer left to freed parse memory or a double free). */
static void assert_inside(const struct job *j, const void *p, size_t n)
{
    /* the block ends at its last string's NUL: canonical is copied last */
    const char *lo = (const char *)j;
    const char *hi = j->canonical + strlen(j->canonical) + 1;
    if (!p)
        return;
    ck_assert_msg((const char *)p >= lo && (const char *)p + n <= hi,
                  "pointer outside the job's block");
}

#if defined(__SANITIZE_ADDRESS__)
#define TEST_JOB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_JOB_ASAN 1
#endif
#endif
#ifndef TEST_JOB_ASAN
#define TEST_JOB_ASAN 0
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TEST_JOB_VALGRIND RUNNING_ON_VALGRIND
#endif
#endif
#ifndef TEST_JOB_VALGRIND
#define TEST_JOB_VALGRIND 0
#endif

/* The parse arena (job_global_init): every jansson block of a parse is
 * freed by its end, valid or not, workflow or not, with reals in meta (the
 * json_dumps fallback, outside the arena), and past the arena's 64 KB
 * (malloc); the jobs stay whole after later parses reuse the arena. */
START_TEST(test_job_parse_arena_is_empty_after_each_parse)
{
    json_malloc_t m = NULL;
    json_free_t f = NULL;
    json_get_alloc_funcs(&m, &f);
    /* installed, unless a memory checker watches jansson's own blocks */
    bool checked = TEST_JOB_ASAN || TEST_JOB_VALGRIND;
    if (!checked)
        ck_assert_msg(m != malloc && f != free, "job_global_init installed "
                      "no arena");
    const char *good[] = {
        "{\"url\":\"https://example.com/a?x=1\",\"meta\":{\"n\":1,\"tags\":"
        "[\"a\",\"b\"]}}",
        "{\"url\":\"https://example.com/r\",\"meta\":{\"price\":1.5,\"e\":"
        "[2.25e10,{\"z\":-0.5}]}}",
        "{\"steps\":[{\"url\":\"https://example.com/login\",\"method\":"
        "\"POST\",\"body\":\"u=a\"},{\"url\":\"https://example.com/b\","
        "\"headers\":{\"Accept\":\"text/html\"}}],\"job_key\":\"k1\"}",
    };
    const char *bad[] = {
        "{\"url\":\"https://example.com/\",\"job_kee\":\"x\"}",
        "{\"url\":\"https://example.com/\",\"url\":\"https://example.com/\"}",
        "{\"url\":\"https://example.com/\",\"meta\":[1,2,{\"a\":",
        "[1,2,3]",
        "{\"url\":\"ftp://example.com/\"}",
    };
    struct job *kept[3] = {NULL};
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
            uint64_t served = job_arena_served();
            struct job *j = parse(good[i]);
            ck_assert_uint_eq(job_arena_live(), 0);
            /* the parse's blocks came from the arena (a dozen at least) */
            if (!checked)
                ck_assert_uint_gt(job_arena_served(), served + 10);
            if (round == 0)
                kept[i] = j;
            else
                job_destroy(j);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
            char err[DD_ERRSTR_SIZE] = "";
            struct job *j = NULL;
            ck_assert_int_eq(job_parse(&default_conf, bad[i], strlen(bad[i]),
                                       &j, err, sizeof(err)),
                             DD_ERR_PERMANENT);
            ck_assert_ptr_null(j);
            ck_assert_uint_eq(job_arena_live(), 0);
        }
    }
    /* a job larger than the arena: its blocks past it from malloc */
    size_t n = 200 * 1024;
    char *big = malloc(n + 128);
    ck_assert_ptr_nonnull(big);
    int k = snprintf(big, 128, "{\"url\":\"https://example.com/big\",\"method\":"
                     "\"POST\",\"body\":\"");
    memset(big + k, 'b', n);
    strcpy(big + k + n, "\"}");
    struct job *j = parse(big);
    ck_assert_uint_eq(job_arena_live(), 0);
    ck_assert_uint_eq(j->req.body_len, n);
    ck_assert_int_eq(j->req.body[n - 1], 'b');
    job_destroy(j);
    free(big);
    /* the first round's jobs, after the arena served nine parses since */
    ck_assert_str_eq(kept[0]->req.url, "https://example.com/a?x=1");
    ck_assert_str_eq(kept[1]->req.url, "https://example.com/r");
    ck_assert_str_eq(kept[1]->meta_json, "{\"price\":1.5,\"e\":[22500000000.0,"
                     "{\"z\":-0.5}]}");
    ck_assert_uint_eq(kept[2]->n_steps, 2);
    ck_assert_str_eq(kept[2]->steps[1].url, "https://example.com/b");
    for (size_t i = 0; i < 3; i++)
        job_destroy(kept[i]);
}
END_TEST

START_TEST(test_job_one_block)
{
    struct job *j = parse(
        "{\"steps\":[{\"url\":\"https://example.com/login\","
        "\"method\":\"POST\",\"headers\":{\"Accept\":\"text/html\","
        "\"X-Api-Key\":\"k\"},\"body\":\"u=1\"},"
        "{\"url\":\"https://example.com/data\"}],"
        "\"job_key\":\"jk-1\",\"scope\":\"s\",\"country\":\"de\","
        "\"rotation\":\"sticky\",\"meta\":{\"a\":[1,\"x\"]}}");
    ck_assert(j->one_block);
    ck_assert_uint_eq(j->n_steps, 2);
    assert_inside(j, j->steps, 2 * sizeof(*j->steps));
    for (size_t s = 0; s < j->n_steps; s++) {
        const struct job_request *r = &j->steps[s];
        assert_inside(j, r->url, strlen(r->url) + 1);
        assert_inside(j, r->normalized_url, strlen(r->normalized_url) + 1);
        assert_inside(j, r->method, strlen(r->method) + 1);
        assert_inside(j, r->headers, r->n_headers * sizeof(*r->headers));
        for (size_t h = 0; h < r->n_headers; h++) {
            assert_inside(j, r->headers[h].name, strlen(r->headers[h].name) + 1);
            assert_inside(j, r->headers[h].value,
                          strlen(r->headers[h].value) + 1);
        }
        if (r->body)
            assert_inside(j, r->body, r->body_len + 1);
    }
    ck_assert_ptr_eq(j->req.url, j->steps[0].url); /* still the shallow copy */
    ck_assert_ptr_eq(j->req.headers, j->steps[0].headers);
    ck_assert_uint_eq(j->steps[0].n_headers, 2);
    ck_assert_str_eq(job_header_get(&j->req, "accept"), "text/html");
    ck_assert_uint_eq(j->req.body_len, 3);
    ck_assert_mem_eq(j->req.body, "u=1", 4); /* with its NUL */
    ck_assert_ptr_null(j->steps[1].body);
    ck_assert_str_eq(j->job_key, "jk-1");
    ck_assert_str_eq(j->scope, "s");
    ck_assert_str_eq(j->country, "DE");
    ck_assert_str_eq(j->rotation, "sticky");
    ck_assert_str_eq(j->meta_json, "{\"a\":[1,\"x\"]}");
    ck_assert_str_eq(j->op_id, "s:jk-1");
    assert_inside(j, j->job_key, 5);
    assert_inside(j, j->meta_json, strlen(j->meta_json) + 1);
    job_destroy(j);
    /* a plain job: no steps array, its own request */
    j = parse("{\"url\":\"http://a/x\",\"body\":\"\"}");
    ck_assert(j->one_block);
    ck_assert_ptr_null(j->steps);
    assert_inside(j, j->req.url, strlen(j->req.url) + 1);
    ck_assert_ptr_nonnull(j->req.body); /* given, empty */
    ck_assert_uint_eq(j->req.body_len, 0);
    assert_inside(j, j->req.body, 1);
    job_destroy(j);
}
END_TEST

/* ---- other accepted fields ---------------------------------------------- */

START_TEST(test_job_optional_fields)
{
    struct job *j = parse(
        "{\"url\":\"http://a/\",\"rotation\":\"per_request\",\"deadline_s\":"
        "86400,\"replayable\":true,\"parser_version\":9007199254740993,"
        "\"meta\":{\"b\":1,\"a\":[1,2],\"c\":{\"d\":null},\"u\":\"\\u00e9\"}}");
    ck_assert_str_eq(j->rotation, "per_request");
    ck_assert_int_eq(j->deadline_s, 86400);
    ck_assert(j->replayable);
    ck_assert_int_eq(j->parser_version, INT64_C(9007199254740993));
    ck_assert_str_eq(j->meta_json,
                     "{\"b\":1,\"a\":[1,2],\"c\":{\"d\":null},"
                     "\"u\":\"\xc3\xa9\"}");
    job_destroy(j);
    /* meta, rotation, deadline_s, safe, replayable are not identity */
    assert_same_hash("{\"url\":\"http://a/\",\"meta\":{\"x\":1},\"rotation\":"
                     "\"sticky\",\"deadline_s\":5,\"safe\":true,"
                     "\"replayable\":true}",
                     "{\"url\":\"http://a/\"}", true);
    /* country upper-cased */
    assert_same_hash("{\"url\":\"http://a/\",\"country\":\"de\"}",
                     "{\"url\":\"http://a/\",\"country\":\"DE\"}", true);
    assert_same_hash("{\"url\":\"http://a/\",\"country\":\"de\"}",
                     "{\"url\":\"http://a/\",\"country\":\"fr\"}", false);
}
END_TEST

START_TEST(test_job_null_fields_are_absent)
{
    assert_same_hash("{\"url\":\"http://a/\",\"country\":null,\"job_key\":null,"
                     "\"scope\":null,\"headers\":null,\"method\":null,"
                     "\"scheduled_for\":null,\"parser_version\":null,"
                     "\"meta\":null,\"steps\":null,\"safe\":null}",
                     "{\"url\":\"http://a/\"}", true);
}
END_TEST

START_TEST(test_job_safe_flag)
{
    static const struct {
        const char *json;
        bool safe;
    } cases[] = {
        { "{\"url\":\"http://a/\"}", true },
        { "{\"url\":\"http://a/\",\"method\":\"head\"}", true },
        { "{\"url\":\"http://a/\",\"method\":\"POST\"}", false },
        { "{\"url\":\"http://a/\",\"method\":\"OPTIONS\"}", false },
        { "{\"url\":\"http://a/\",\"method\":\"POST\",\"safe\":true}", true },
        { "{\"url\":\"http://a/\",\"method\":\"GET\",\"safe\":false}", false },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct job *j = parse(cases[i].json);
        ck_assert_msg(j->safe == cases[i].safe, "%s", cases[i].json);
        job_destroy(j);
    }
}
END_TEST

START_TEST(test_job_headers_kept_for_the_wire)
{
    struct job *j = parse("{\"url\":\"http://a/\",\"headers\":{"
                          "\"X-Custom\":\" v \",\"accept\":\"x\"}}");
    ck_assert_uint_eq(j->req.n_headers, 2);
    ck_assert_str_eq(j->req.headers[0].name, "X-Custom");
    ck_assert_str_eq(j->req.headers[0].value, " v ");
    ck_assert_str_eq(job_header_get(&j->req, "x-custom"), " v ");
    ck_assert_str_eq(job_header_get(&j->req, "ACCEPT"), "x");
    ck_assert_ptr_null(job_header_get(&j->req, "cookie"));
    job_destroy(j);
}
END_TEST

START_TEST(test_job_max_job_bytes)
{
    const char *p = "{\"url\":\"http://a/\"}"; /* 19 bytes */
    struct job_conf conf = { .max_job_bytes = 19 };
    struct job *j = parse_conf(&conf, p);
    job_destroy(j);
    conf.max_job_bytes = 18;
    assert_invalid_conf(&conf, p, strlen(p),
                        "payload is 19 bytes, over limits.max_job_bytes (18)");
    /* default limit 1 MiB */
    size_t n = 1024 * 1024 + 1;
    char *big = malloc(n);
    memset(big, ' ', n);
    memcpy(big, p, strlen(p));
    assert_invalid_conf(&default_conf, big, n, "over limits.max_job_bytes");
    j = NULL;
    char err[DD_ERRSTR_SIZE];
    ck_assert_int_eq(job_parse(&default_conf, big, n - 1, &j, err, sizeof(err)),
                     DD_OK);
    job_destroy(j);
    free(big);
}
END_TEST

/* ---- refusals ----------------------------------------------------------- */

START_TEST(test_job_rejects_bad_payload)
{
    assert_invalid("", "payload is not valid JSON");
    assert_invalid("{", "payload is not valid JSON");
    assert_invalid("{\"url\":\"http://a/\"} x", "payload is not valid JSON");
    assert_invalid("[1]", "payload must be a JSON object");
    assert_invalid("\"http://a/\"", "payload must be a JSON object");
    assert_invalid("null", "payload must be a JSON object");
    assert_invalid("{\"url\":\"http://a/\",\"url\":\"http://b/\"}",
                   "duplicate object key");
    assert_invalid("{\"url\":\"http://a/\",\"body\":\"a\\u0000b\"}",
                   "NUL character");
    assert_invalid("{\"url\":\"http://a/\",\"body\":\"\xff\"}",
                   "payload is not valid UTF-8");
    assert_invalid("{\"url\":\"http://a/\",\"body\":\"\xc3\x28\"}",
                   "payload is not valid UTF-8");
    const char nul[] = "{\"url\":\"http://a/\"}\0";
    assert_invalid_conf(&default_conf, nul, sizeof(nul) - 1,
                        "payload is not valid JSON");
    assert_invalid("{\"url\":\"http://a/\",\"parser_version\":NaN}",
                   "payload is not valid JSON");
    assert_invalid("{\"url\":\"http://a/\",\"parser_version\":"
                   "99999999999999999999}",
                   "payload is not valid JSON");
}
END_TEST

START_TEST(test_job_rejects_unknown_fields)
{
    assert_invalid("{\"url\":\"http://a/\",\"job_kee\":\"x\"}",
                   "unknown field 'job_kee' (did you mean 'job_key'?)");
    assert_invalid("{\"URL\":\"http://a/\"}",
                   "unknown field 'URL' (did you mean 'url'?)");
    assert_invalid("{\"url\":\"http://a/\",\"priority\":1}",
                   "unknown field 'priority'");
    /* control characters are not echoed into the reason */
    assert_invalid("{\"url\":\"http://a/\",\"a\\nb\\u0007\":1}",
                   "unknown field 'a?b?'");
    assert_invalid("{\"steps\":[{\"url\":\"http://a/\",\"headr\":{}}]}",
                   "unknown field 'steps[0].headr' (did you mean "
                   "'steps[0].headers'?)");
    assert_invalid("{\"steps\":[{\"url\":\"http://a/\",\"country\":\"US\"}]}",
                   "unknown field 'steps[0].country'");
}
END_TEST

START_TEST(test_job_rejects_bad_url)
{
    assert_invalid("{}", "field 'url': required (or give 'steps')");
    assert_invalid("{\"url\":null}", "field 'url': required");
    assert_invalid("{\"url\":5}", "field 'url': must be a string");
    assert_invalid("{\"url\":\"ftp://example.com/f\"}",
                   "field 'url': scheme 'ftp' is not http or https");
    assert_invalid("{\"url\":\"http://user:pw@example.com/\"}",
                   "field 'url': userinfo (user:pass@) is refused: "
                   "credentials go in headers");
    assert_invalid("{\"url\":\"example.com/x\"}",
                   "field 'url': not an absolute");
    assert_invalid("{\"url\":\"http://exa mple.com/\"}",
                   "field 'url': malformed URL");
}
END_TEST

/* Found by fuzz_job (tests/fuzz/regressions/job/, the "nomem" inputs): a
 * host that curl's IDN step refuses was DD_ERR_NOMEM ("job_parse: out of
 * memory"); it is an invalid job. */
START_TEST(test_job_rejects_refused_idn_host)
{
    assert_invalid("{\"url\":\"http://b\xd7\xbc" "ch/\"}",
                   "field 'url': host is not a valid internationalized "
                   "domain name");
    assert_invalid("{\"url\":\"http://b\\u05fcch/\"}",
                   "field 'url': host is not a valid internationalized");
    assert_invalid("{\"url\":\"http://ex%a0/\"}",
                   "field 'url': host is not a valid domain name once "
                   "percent-decoded");
}
END_TEST

/* Found by fuzz_job (regressions/job/idn_host_becomes_ipv4_number_...): the
 * normalized URL is the host curl connects to, so it is a fixed point. */
START_TEST(test_job_idn_and_pct_hosts_normalized_to_ipv4)
{
    struct job *a = parse("{\"url\":\"http://\\u00b9/\"}");
    struct job *b = parse("{\"url\":\"http://0.0.0.1/\"}");
    struct job *c = parse("{\"url\":\"http://%37/\"}");
    ck_assert_str_eq(a->req.normalized_url, "http://0.0.0.1/");
    ck_assert_str_eq(a->request_hash, b->request_hash);
    ck_assert_str_eq(c->req.normalized_url, "http://0.0.0.7/");
    /* the request still goes out to the URL as submitted */
    ck_assert_str_eq(a->req.url, "http://\xc2\xb9/");
    job_destroy(a);
    job_destroy(b);
    job_destroy(c);
}
END_TEST

/* A reason is valid UTF-8 without control characters: it is the JSON body of
 * the API's 400 (json_pack refuses anything else: the answer went out
 * empty), a Kafka header and a log line. */
static bool reason_ok(const char *r)
{
    const unsigned char *s = (const unsigned char *)r;
    size_t n = strlen(r);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1
                   : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3
                   : 9;
        if (c < 0x20 || c == 0x7f || k == 9 || i + k >= n)
            return false;
        for (size_t j = 1; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xbf)
                return false;
        i += k + 1;
    }
    json_t *o = json_pack("{s:s}", "error", r);
    json_decref(o);
    return o != NULL;
}

static void assert_reason_utf8(const char *json, size_t len, const char *want)
{
    char err[DD_ERRSTR_SIZE] = "";
    struct job *job = NULL;
    ck_assert_int_eq(job_parse(&default_conf, json, len, &job, err,
                               sizeof(err)), DD_ERR_PERMANENT);
    ck_assert_msg(reason_ok(err), "reason not UTF-8: '%s'", err);
    ck_assert_msg(strstr(err, want), "reason '%s' lacks '%s'", err, want);
    /* every buffer size: never cut inside a character */
    for (size_t sz = 1; sz <= sizeof(err); sz++) {
        char small[DD_ERRSTR_SIZE];
        memset(small, 'x', sizeof(small));
        ck_assert_int_eq(job_parse(&default_conf, json, len, &job, small, sz),
                         DD_ERR_PERMANENT);
        ck_assert_msg(memchr(small, '\0', sz) != NULL, "size %zu: no NUL", sz);
        ck_assert_msg(reason_ok(small), "size %zu: not UTF-8: '%s'", sz,
                      small);
    }
}

/* Found by fuzz_api_submit (tests/fuzz/regressions/api_submit/): a field
 * name or method cut at 64 (32) bytes inside a UTF-8 sequence, and
 * jansson's error text quoting a partial sequence, made reasons that are
 * not UTF-8. */
START_TEST(test_job_reasons_are_utf8)
{
    char big[512];
    /* a field name of 1 + 40 x U+00E9: cut at a character boundary */
    strcpy(big, "{\"url\":\"http://a/\",\"a");
    for (int i = 0; i < 40; i++)
        strcat(big, "\xc3\xa9");
    strcat(big, "\":1}");
    assert_reason_utf8(big, strlen(big), "unknown field 'a\xc3\xa9\xc3\xa9");
    strcpy(big, "{\"url\":\"http://a/\",\"method\":\"a");
    for (int i = 0; i < 40; i++)
        strcat(big, "\xc3\xa9");
    strcat(big, "\"}");
    assert_reason_utf8(big, strlen(big), "is not an HTTP method token");
    /* jansson quotes the bytes near the error (here a sequence cut in two):
     * the quote is dropped, the kind and place kept */
    assert_reason_utf8("\"\\\xc5\x8e", 4, "payload is not valid JSON: invalid "
                       "escape at line 1 column ");
    assert_reason_utf8("{\"url\":\"\\\xc3\xa9\"}", 13,
                       "payload is not valid JSON: invalid escape");
    /* well-formed UTF-8 is echoed as it is */
    static const char cafe[] = "{\"url\":\"http://a/\",\"caf\xc3\xa9\":1}";
    assert_reason_utf8(cafe, sizeof(cafe) - 1, "unknown field 'caf\xc3\xa9'");
}
END_TEST

START_TEST(test_job_with_key_reasons_are_utf8)
{
    char err[DD_ERRSTR_SIZE] = "";
    char *out = NULL;
    size_t out_len = 0;
    static const char body[] = "{\"url\":\"\\\xc3\xa9\"}";
    ck_assert_int_eq(job_with_key(body, sizeof(body) - 1, "k", "api", &out,
                                  &out_len, err, sizeof(err)),
                     DD_ERR_PERMANENT);
    ck_assert_ptr_null(out);
    ck_assert_msg(reason_ok(err), "not UTF-8: '%s'", err);
    ck_assert_msg(strstr(err, "the body is not a JSON object: invalid "
                              "escape at line 1 column "), "%s", err);
    ck_assert_msg(!strstr(err, "near '"), "%s", err);
    /* an Idempotency-Key that cannot be a JSON string */
    static const char ok[] = "{\"url\":\"http://a/\"}";
    ck_assert_int_eq(job_with_key(ok, sizeof(ok) - 1, "k\xff", "api", &out,
                                  &out_len, err, sizeof(err)),
                     DD_ERR_PERMANENT);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err, "Idempotency-Key is not valid UTF-8"), "%s",
                  err);
    ck_assert_int_eq(job_with_key(ok, sizeof(ok) - 1, "k", "api", &out,
                                  &out_len, err, sizeof(err)), DD_OK);
    ck_assert_str_eq(out, "{\"url\":\"http://a/\",\"job_key\":\"k\","
                          "\"scope\":\"api\"}");
    ck_assert_uint_eq(out_len, strlen(out));
    free(out);
}
END_TEST

/* jansson's error text quotes up to 20 bytes near the error: a credential
 * header value cut short or mis-escaped.  The reason (DLQ header
 * dedupd-error, logs, the API's 400) keeps the kind of error and where, never
 * the job's bytes. */
START_TEST(test_job_json_errors_never_quote_the_job)
{
    static const char *const bad[] = {
        "{\"url\":\"http://a/\",\"headers\":{\"Cookie\":\"Mk5e4f3a2b",
        "{\"url\":\"http://a/\",\"headers\":{\"Authorization\":\"Mk5e4f3a2b\\q\"}}",
        "{\"url\":\"http://a/\",\"headers\":{\"Cookie\":Mk5e4f3a2b}}",
        "{\"url\":\"http://a/\",\"headers\":{\"Cookie\":\"Mk5e4f3a2b\n\"}}",
        "{\"url\":\"http://a/\",\"headers\":{\"Mk5e4f3a2b\":\"v\",\"Mk5e4f3a2b\":\"v\"}}",
        "{\"url\":\"http://a/\",\"headers\":{\"Cookie\":\"Mk5e4f3a2b\"} Mk5e4f3a2b",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[DD_ERRSTR_SIZE] = "";
        struct job *job = NULL;
        ck_assert_int_eq(job_parse(&default_conf, bad[i], strlen(bad[i]), &job,
                                   err, sizeof(err)), DD_ERR_PERMANENT);
        ck_assert_msg(!strstr(err, "Mk5e4f3a2b"), "job echoed: %s", err);
        ck_assert_msg(!strstr(err, "near '"), "job quoted: %s", err);
        ck_assert_msg(strstr(err, "at line 1 column "), "no place: %s", err);
        char *out = NULL;
        size_t out_len = 0;
        ck_assert_int_eq(job_with_key(bad[i], strlen(bad[i]), "k", "api", &out,
                                      &out_len, err, sizeof(err)),
                         DD_ERR_PERMANENT);
        ck_assert_msg(!strstr(err, "Mk5e4f3a2b"), "job echoed: %s", err);
        ck_assert_msg(strstr(err, "the body is not a JSON object: "), "%s", err);
    }
    /* the kind, line, column and byte position stay */
    assert_invalid("{\"url\":\"http://a/\",\n \"h\":\"Mk5e4f3a2b",
                   "payload is not valid JSON: premature end of input at line "
                   "2 column ");
    assert_invalid("{\"url\":\"http://a/\",\n \"h\":\"Mk5e4f3a2b\\q\"}",
                   "payload is not valid JSON: invalid escape at line 2 column "
                   "18 (byte ");
    /* "near end of file" quotes nothing: kept */
    assert_invalid("{\"url\":", "near end of file");
}
END_TEST

START_TEST(test_job_rejects_bad_method)
{
    assert_invalid("{\"url\":\"http://a/\",\"method\":5}",
                   "field 'method': must be a string");
    assert_invalid("{\"url\":\"http://a/\",\"method\":\"GE T\"}",
                   "field 'method': 'GE T' is not an HTTP method token");
    assert_invalid("{\"url\":\"http://a/\",\"method\":\"\"}",
                   "field 'method': '' is not an HTTP method token");
    assert_invalid("{\"url\":\"http://a/\",\"method\":\"GET\\r\\n\"}",
                   "field 'method': 'GET?\?' is not an HTTP method token");
    assert_invalid("{\"url\":\"http://a/\",\"method\":\"connect\"}",
                   "field 'method': CONNECT is not a fetch");
}
END_TEST

START_TEST(test_job_rejects_bad_headers)
{
    assert_invalid("{\"url\":\"http://a/\",\"headers\":[]}",
                   "field 'headers': must be an object of strings");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"X\":1}}",
                   "field 'headers': header 'X' must be a string");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"X\":\"a\\r\\nHost: "
                   "evil\"}}",
                   "field 'headers': header 'X' contains a control character");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"X\":\"a\\nb\"}}",
                   "contains a control character");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"X Y\":\"1\"}}",
                   "field 'headers': header name 'X Y' is not an HTTP token");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"X:Y\":\"1\"}}",
                   "is not an HTTP token");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"\":\"1\"}}",
                   "is not an HTTP token");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"X\\r\\nY\":\"1\"}}",
                   "header name 'X??Y' is not an HTTP token");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"Accept\":\"a\","
                   "\"accept\":\"b\"}}",
                   "field 'headers': header 'accept' is given twice");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"Content-Length\":"
                   "\"5\"}}",
                   "header 'Content-Length' is not allowed");
    assert_invalid("{\"url\":\"http://a/\",\"headers\":{\"transfer-encoding\":"
                   "\"chunked\"}}",
                   "header 'transfer-encoding' is not allowed");
    /* HTAB is allowed in a value */
    struct job *j =
        parse("{\"url\":\"http://a/\",\"headers\":{\"X\":\"a\\tb\"}}");
    job_destroy(j);
}
END_TEST

START_TEST(test_job_rejects_bad_body)
{
    assert_invalid("{\"url\":\"http://a/\",\"body\":\"a\",\"body_base64\":"
                   "\"YQ==\"}",
                   "fields 'body' and 'body_base64' are exclusive");
    assert_invalid("{\"url\":\"http://a/\",\"body\":5}",
                   "field 'body': must be a string");
    assert_invalid("{\"url\":\"http://a/\",\"body\":{\"a\":1}}",
                   "field 'body': must be a string");
    assert_invalid("{\"url\":\"http://a/\",\"body_base64\":7}",
                   "field 'body_base64': must be a string");
    static const char *const bad[] = {
        "abc", "YQ", "Y===", "=YQ=", "YQ=a", "Y Q==", "YQ==\\n", " YQ==",
        "YQ-_", "YR==", "YWJ=", "YQ==YQ==", "****",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char payload[128];
        snprintf(payload, sizeof(payload),
                 "{\"url\":\"http://a/\",\"body_base64\":\"%s\"}", bad[i]);
        assert_invalid(payload, "field 'body_base64': not valid base64");
    }
}
END_TEST

START_TEST(test_job_rejects_bad_identity_fields)
{
    char payload[512], s[300];
    assert_invalid("{\"url\":\"http://a/\",\"job_key\":\"\"}",
                   "field 'job_key': must be 1..256 bytes, not 0");
    memset(s, 'k', 257);
    s[257] = '\0';
    snprintf(payload, sizeof(payload),
             "{\"url\":\"http://a/\",\"job_key\":\"%s\"}", s);
    assert_invalid(payload, "field 'job_key': must be 1..256 bytes, not 257");
    assert_invalid("{\"url\":\"http://a/\",\"job_key\":\"a\\tb\"}",
                   "field 'job_key': contains a control character");
    assert_invalid("{\"url\":\"http://a/\",\"job_key\":\"a\\u007fb\"}",
                   "field 'job_key': contains a control character");
    assert_invalid("{\"url\":\"http://a/\",\"job_key\":17}",
                   "field 'job_key': must be a string");
    assert_invalid("{\"url\":\"http://a/\",\"scope\":\"a b\"}",
                   "field 'scope': must match [A-Za-z0-9._-]{1,64}");
    assert_invalid("{\"url\":\"http://a/\",\"scope\":\"a:b\"}",
                   "field 'scope': must match");
    assert_invalid("{\"url\":\"http://a/\",\"scope\":\"\"}",
                   "field 'scope': must match");
    memset(s, 's', 65);
    s[65] = '\0';
    snprintf(payload, sizeof(payload),
             "{\"url\":\"http://a/\",\"scope\":\"%s\"}", s);
    assert_invalid(payload, "field 'scope': must match");
    assert_invalid("{\"url\":\"http://a/\",\"scope\":1}",
                   "field 'scope': must be a string");
    static const char *const countries[] = { "\"USA\"", "\"U\"", "\"U1\"",
                                             "\"\"", "5", "\"\xc3\x9cS\"" };
    for (size_t i = 0; i < 6; i++) {
        snprintf(payload, sizeof(payload),
                 "{\"url\":\"http://a/\",\"country\":%s}", countries[i]);
        assert_invalid(payload,
                       "field 'country': must be an ISO 3166-1 alpha-2 code");
    }
    static const char *const versions[] = { "-1", "1.5", "\"1\"", "true",
                                            "1e3" };
    for (size_t i = 0; i < 5; i++) {
        snprintf(payload, sizeof(payload),
                 "{\"url\":\"http://a/\",\"parser_version\":%s}", versions[i]);
        assert_invalid(payload,
                       "field 'parser_version': must be an integer >= 0");
    }
}
END_TEST

/* A job with a fault in every field names the same one each time: the
 * request first, then the fields in a fixed order (job_key, scope, country,
 * parser_version, scheduled_for, rotation, deadline_s, meta, replayable),
 * then safe.  Each payload below drops the fault that was named before. */
START_TEST(test_job_fields_checked_in_fixed_order)
{
    static const char *const fault[][2] = {
        { "\"url\":\"ftp://a/\"", "field 'url': scheme 'ftp' is not http or https" },
        { "\"job_key\":\"\"", "field 'job_key': must be 1..256 bytes, not 0" },
        { "\"scope\":\"a b\"", "field 'scope': must match [A-Za-z0-9._-]{1,64}" },
        { "\"country\":\"USA\"", "field 'country': must be an ISO 3166-1 alpha-2 "
                                "code (two letters)" },
        { "\"parser_version\":-1", "field 'parser_version': must be an integer >= 0" },
        { "\"scheduled_for\":\"x\"", "field 'scheduled_for': not an RFC 3339 "
                                     "date-time (YYYY-MM-DDTHH:MM:SSZ)" },
        { "\"rotation\":\"often\"", "field 'rotation': must be sticky, timed or "
                                    "per_request" },
        { "\"deadline_s\":0", "field 'deadline_s': must be an integer 1..86400" },
        { "\"meta\":[]", "field 'meta': must be an object" },
        { "\"replayable\":1", "field 'replayable': must be true or false" },
        { "\"safe\":\"yes\"", "field 'safe': must be true or false" },
    };
    size_t n = sizeof(fault) / sizeof(fault[0]);
    for (size_t k = 0; k < n; k++) {
        /* faults k..n-1, with a valid url once the url fault is dropped */
        char payload[1024] = "{";
        if (k > 0)
            strcat(payload, "\"url\":\"http://a/\"");
        for (size_t i = k; i < n; i++) {
            if (strlen(payload) > 1)
                strcat(payload, ",");
            strcat(payload, fault[i][0]);
        }
        strcat(payload, "}");
        char err[DD_ERRSTR_SIZE] = "";
        struct job *job = NULL;
        ck_assert_int_eq(job_parse(&default_conf, payload, strlen(payload), &job,
                                   err, sizeof(err)),
                         DD_ERR_PERMANENT);
        ck_assert_ptr_null(job);
        ck_assert_msg(strcmp(err, fault[k][1]) == 0, "%s: '%s', want '%s'",
                      payload, err, fault[k][1]);
    }
}
END_TEST

#define NO_TZ "not an RFC 3339 date-time (time zone must be Z or +HH:MM)"

START_TEST(test_job_rejects_bad_scheduled_for)
{
    static const char *const bad[][2] = {
        { "\"2026-02-30T00:00:00Z\"", "date or time out of range" },
        { "\"2026-13-01T00:00:00Z\"", "date or time out of range" },
        { "\"2026-01-01T24:00:00Z\"", "date or time out of range" },
        { "\"2026-01-02 03:04:05Z\"", "not an RFC 3339 date-time" },
        { "\"2026-01-02\"", "not an RFC 3339 date-time" },
        { "\"2026-01-02T03:04:05\"", NO_TZ },
        { "\"2026-01-02T03:04:05+0100\"", NO_TZ },
        { "\"2026-01-02T03:04:05Z \"", NO_TZ },
        { "\"2026-01-02T03:04:05.Z\"",
          "not an RFC 3339 date-time (digits must follow '.')" },
        { "\"2026-01-02T03:04:05.1234567891Z\"", "more than 9 fractional" },
        { "\"2016-12-31T23:59:60Z\"", "leap seconds are not supported" },
        { "\"2026-01-02T03:04:05+24:00\"", "time zone offset out of range" },
        { "\"0000-01-01T00:00:00+01:00\"", "date out of range in UTC" },
        { "1767322800", "must be an RFC 3339 date-time string" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char payload[128], reason[128];
        snprintf(payload, sizeof(payload),
                 "{\"url\":\"http://a/\",\"scheduled_for\":%s}", bad[i][0]);
        snprintf(reason, sizeof(reason), "field 'scheduled_for': %s",
                 bad[i][1]);
        assert_invalid(payload, reason);
    }
}
END_TEST

START_TEST(test_job_rejects_bad_steps)
{
    assert_invalid("{\"steps\":[]}",
                   "field 'steps': must be an array of 1..32 request objects");
    assert_invalid("{\"steps\":{}}", "field 'steps': must be an array");
    assert_invalid("{\"steps\":[5]}",
                   "field 'steps[0]': must be a request object");
    assert_invalid("{\"steps\":[{}]}", "field 'steps[0].url': required");
    assert_invalid("{\"steps\":[{\"url\":\"http://a/\"},{\"url\":"
                   "\"ftp://b/\"}]}",
                   "field 'steps[1].url': scheme 'ftp' is not http or https");
    assert_invalid("{\"steps\":[{\"url\":\"http://a/\",\"headers\":{\"X\":"
                   "\"a\\r\\nb\"}}]}",
                   "field 'steps[0].headers': header 'X' contains a control");
    assert_invalid("{\"steps\":[{\"url\":\"http://a/\",\"body\":\"x\","
                   "\"body_base64\":\"eA==\"}]}",
                   "fields 'steps[0].body' and 'steps[0].body_base64' are "
                   "exclusive");
    assert_invalid("{\"url\":\"http://a/\",\"steps\":[{\"url\":"
                   "\"http://a/\"}]}",
                   "field 'url': not allowed with 'steps'");
    assert_invalid("{\"method\":\"POST\",\"steps\":[{\"url\":\"http://a/\"}]}",
                   "field 'method': not allowed with 'steps'");
    /* 32 steps pass, 33 do not */
    char payload[2048] = "{\"steps\":[";
    for (int i = 0; i < 33; i++) {
        if (i == 32) {
            strcat(payload, "]}");
            struct job *j = parse(payload);
            ck_assert_uint_eq(j->n_steps, 32);
            job_destroy(j);
            payload[strlen(payload) - 2] = '\0';
        }
        strcat(payload, i ? "," : "");
        strcat(payload, "{\"url\":\"http://a/\"}");
    }
    strcat(payload, "]}");
    assert_invalid(payload, "field 'steps': must be an array of 1..32");
}
END_TEST

START_TEST(test_job_rejects_bad_policy_fields)
{
    static const char *const bad[][2] = {
        { "\"rotation\":\"random\"",
          "field 'rotation': must be sticky, timed or per_request" },
        { "\"rotation\":\"Sticky\"", "field 'rotation': must be sticky" },
        { "\"rotation\":1", "field 'rotation': must be sticky" },
        { "\"deadline_s\":0",
          "field 'deadline_s': must be an integer 1..86400" },
        { "\"deadline_s\":86401", "field 'deadline_s': must be an integer" },
        { "\"deadline_s\":\"10\"", "field 'deadline_s': must be an integer" },
        { "\"deadline_s\":1.5", "field 'deadline_s': must be an integer" },
        { "\"meta\":[]", "field 'meta': must be an object" },
        { "\"meta\":\"x\"", "field 'meta': must be an object" },
        { "\"safe\":\"yes\"", "field 'safe': must be true or false" },
        { "\"safe\":1", "field 'safe': must be true or false" },
        { "\"replayable\":1", "field 'replayable': must be true or false" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char payload[128];
        snprintf(payload, sizeof(payload), "{\"url\":\"http://a/\",%s}",
                 bad[i][0]);
        assert_invalid(payload, bad[i][1]);
    }
}
END_TEST

/* ---- example jobs in tests/data/job ------------------------------------- */

static size_t for_each_file(const char *dir, void (*fn)(const char *path))
{
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "opendir %s", dir);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        fn(path);
        n++;
    }
    closedir(d);
    return n;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "fopen %s", path);
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static void data_valid(const char *path)
{
    size_t len;
    char *buf = read_all(path, &len);
    char err[DD_ERRSTR_SIZE] = "";
    struct job *j = NULL;
    dd_err_t rc = job_parse(&default_conf, buf, len, &j, err, sizeof(err));
    ck_assert_msg(rc == DD_OK, "%s: %s", path, err);
    job_destroy(j);
    free(buf);
}

static void data_invalid(const char *path)
{
    size_t len;
    char *buf = read_all(path, &len);
    char err[DD_ERRSTR_SIZE] = "";
    struct job *j = NULL;
    dd_err_t rc = job_parse(&default_conf, buf, len, &j, err, sizeof(err));
    ck_assert_msg(rc == DD_ERR_PERMANENT, "%s: want PERMANENT, got %d", path,
                  rc);
    ck_assert_msg(err[0] != '\0', "%s: no reason", path);
    free(buf);
}

START_TEST(test_job_data_files)
{
    ck_assert_uint_ge(for_each_file(TEST_DATA_DIR "/job/valid", data_valid), 3);
    ck_assert_uint_ge(for_each_file(TEST_DATA_DIR "/job/invalid", data_invalid),
                      3);
}
END_TEST

/* The direct writer of the canonical request (job.c canonical_direct) and
 * the jansson tree it replaced give the same bytes, hence the same
 * request_hash, resource_key and op_id, on 5000 generated jobs: headers in
 * every case, repeated, padded, credential and variance ones, bodies, steps,
 * country, scheduled_for, parser_version, three header configurations. */
START_TEST(test_job_canonical_direct_is_the_trees)
{
    /* the h-th header of a job from group h: no two alike in one JSON
     * object, case variants of one name in different groups */
    static const char *const names[6][3] = {
        {"Accept", "X-Custom", "Authorization"},
        {"accept", "x-custom", "authorization"},
        {"ACCEPT", "Accept-Language", "Cookie"},
        {"accept-language", "X-Api-Key", "User-Agent"},
        {"Proxy-Authorization", "X-\u00e9", "x-api-key"},
        {"X-CUSTOM", "cookie", "aCCept"}};
    static const char *const values[] = {
        "text/html", " padded\t", "", "\u00e9t\u00e9 \u20ac", "a\\\"q\\\\b",
        "Bearer s3cr3t", "x\\ty", "  "};
    static const char *const xvar[] = {"x-custom", "accept"};
    static const char *const xcred[] = {"x-custom", "x-\u00e9"};
    struct job_conf confs[3] = {
        {0},
        {.variance_headers = xvar, .n_variance_headers = 2},
        {.credential_headers = xcred, .n_credential_headers = 2,
         .variance_headers = xvar + 1, .n_variance_headers = 1},
    };
    unsigned seed = 7;
    char json[4096], req[1024];
    for (int t = 0; t < 5000; t++) {
        size_t nsteps = rand_r(&seed) % 4 == 0 ? 1 + rand_r(&seed) % 3 : 0;
        size_t n = 0;
        n += (size_t)snprintf(json + n, sizeof(json) - n, "{");
        for (size_t st = 0; st < (nsteps ? nsteps : 1); st++) {
            size_t r = 0;
            r += (size_t)snprintf(req + r, sizeof(req) - r,
                                  "\"url\":\"https://Example.com/p%d?b=2&a=%d\"",
                                  t, rand_r(&seed) % 3);
            if (rand_r(&seed) % 2)
                r += (size_t)snprintf(req + r, sizeof(req) - r,
                                      ",\"method\":\"%s\"",
                                      rand_r(&seed) % 2 ? "post" : "GET");
            if (rand_r(&seed) % 3) {
                r += (size_t)snprintf(req + r, sizeof(req) - r,
                                      ",\"headers\":{");
                int nh = rand_r(&seed) % 7;
                for (int h = 0; h < nh; h++) /* distinct JSON keys */
                    r += (size_t)snprintf(
                        req + r, sizeof(req) - r, "%s\"%s\":\"%s\"",
                        h ? "," : "",
                        names[h][rand_r(&seed) % 3],
                        values[rand_r(&seed) % (sizeof(values) /
                                                sizeof(*values))]);
                r += (size_t)snprintf(req + r, sizeof(req) - r, "}");
            }
            if (rand_r(&seed) % 3 == 0)
                r += (size_t)snprintf(req + r, sizeof(req) - r,
                                      ",\"body\":\"k=%d\"", t);
            if (nsteps)
                n += (size_t)snprintf(json + n, sizeof(json) - n,
                                      "%s{%s}", st ? "," : "\"steps\":[",
                                      req);
            else
                n += (size_t)snprintf(json + n, sizeof(json) - n, "%s", req);
        }
        if (nsteps)
            n += (size_t)snprintf(json + n, sizeof(json) - n, "]");
        if (rand_r(&seed) % 2)
            n += (size_t)snprintf(json + n, sizeof(json) - n,
                                  ",\"country\":\"de\"");
        if (rand_r(&seed) % 2)
            n += (size_t)snprintf(json + n, sizeof(json) - n,
                                  ",\"scheduled_for\":\"2026-01-01T00:00:00Z\"");
        if (rand_r(&seed) % 2)
            n += (size_t)snprintf(json + n, sizeof(json) - n,
                                  ",\"parser_version\":%d", rand_r(&seed) % 5);
        if (rand_r(&seed) % 2)
            n += (size_t)snprintf(json + n, sizeof(json) - n,
                                  ",\"job_key\":\"k%d\"", t);
        snprintf(json + n, sizeof(json) - n, "}");
        struct job_conf direct = confs[t % 3], tree = confs[t % 3];
        tree.canonical_tree = true;
        struct job *a = NULL, *b = NULL;
        char e1[256], e2[256];
        dd_err_t ea = job_parse(&direct, json, strlen(json), &a, e1, sizeof(e1));
        dd_err_t eb = job_parse(&tree, json, strlen(json), &b, e2, sizeof(e2));
        ck_assert_msg(ea == eb, "%s: %d vs %d", json, ea, eb);
        if (ea) {
            ck_assert_str_eq(e1, e2);
            continue;
        }
        ck_assert_msg(strcmp(a->canonical, b->canonical) == 0, "%s:\n%s\n%s",
                      json, a->canonical, b->canonical);
        ck_assert_str_eq(a->request_hash, b->request_hash);
        ck_assert_str_eq(a->resource_key, b->resource_key);
        ck_assert_str_eq(a->op_id, b->op_id);
        ck_assert_str_eq(a->event_key, b->event_key);
        job_destroy(a);
        job_destroy(b);
    }
}
END_TEST

Suite *job_suite(void)
{
    key_global_init();
    job_global_init();
    Suite *s = suite_create("job");
    TCase *tc = tcase_create("cases");
    /* 5,000 jobs through both canonical writers: about 2 s under ASan,
     * near Check's 4 s default on a slower machine */
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_job_resource_key_ignores_observation_fields);
    tcase_add_test(tc, test_job_identity_golden_values);
    tcase_add_test(tc, test_job_canonical_direct_is_the_trees);
    tcase_add_test(tc, test_job_c01_host_case_request_hash);
    tcase_add_test(tc, test_job_c02_reserved_escapes_request_hash);
    tcase_add_test(tc, test_job_c05_default_port_request_hash);
    tcase_add_test(tc, test_job_c06_query_order_request_hash);
    tcase_add_test(tc, test_job_c11_method_and_body_in_identity);
    tcase_add_test(tc, test_job_c24_replay_keeps_event_key);
    tcase_add_test(tc, test_job_c26_op_id_is_the_kafka_key);
    tcase_add_test(tc, test_job_c29_conflict_identity);
    suite_add_tcase(s, tc);

    tc = tcase_create("identity");
    tcase_add_test(tc, test_job_canonical_typical);
    tcase_add_test(tc, test_job_canonical_defaults_explicit);
    tcase_add_test(tc, test_job_event_key_known_answer);
    tcase_add_test(tc, test_job_op_id_with_and_without_job_key);
    tcase_add_test(tc, test_job_credentials_never_raw);
    tcase_add_test(tc, test_job_credentials_separate_accounts);
    tcase_add_test(tc, test_job_is_credential_header);
    tcase_add_test(tc, test_job_variance_headers);
    tcase_add_test(tc, test_job_body_and_body_base64_same_hash);
    tcase_add_test(tc, test_job_absent_and_empty_body_same_hash);
    tcase_add_test(tc, test_job_scheduled_for_normalized);
    tcase_add_test(tc, test_job_steps);
    tcase_add_test(tc, test_job_one_block);
    tcase_add_test(tc, test_job_parse_arena_is_empty_after_each_parse);
    suite_add_tcase(s, tc);

    tc = tcase_create("fields");
    tcase_add_test(tc, test_job_optional_fields);
    tcase_add_test(tc, test_job_null_fields_are_absent);
    tcase_add_test(tc, test_job_safe_flag);
    tcase_add_test(tc, test_job_headers_kept_for_the_wire);
    tcase_add_test(tc, test_job_max_job_bytes);
    tcase_add_test(tc, test_job_data_files);
    suite_add_tcase(s, tc);

    tc = tcase_create("refusals");
    tcase_add_test(tc, test_job_rejects_bad_payload);
    tcase_add_test(tc, test_job_rejects_unknown_fields);
    tcase_add_test(tc, test_job_rejects_bad_url);
    tcase_add_test(tc, test_job_rejects_refused_idn_host);
    tcase_add_test(tc, test_job_idn_and_pct_hosts_normalized_to_ipv4);
    tcase_add_test(tc, test_job_reasons_are_utf8);
    tcase_add_test(tc, test_job_with_key_reasons_are_utf8);
    tcase_add_test(tc, test_job_json_errors_never_quote_the_job);
    tcase_add_test(tc, test_job_rejects_bad_method);
    tcase_add_test(tc, test_job_rejects_bad_headers);
    tcase_add_test(tc, test_job_rejects_bad_body);
    tcase_add_test(tc, test_job_rejects_bad_identity_fields);
    tcase_add_test(tc, test_job_rejects_bad_scheduled_for);
    tcase_add_test(tc, test_job_rejects_bad_steps);
    tcase_add_test(tc, test_job_fields_checked_in_fixed_order);
    tcase_add_test(tc, test_job_rejects_bad_policy_fields);
    suite_add_tcase(s, tc);
    return s;
}
