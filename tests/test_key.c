/* Unit tests of key.c: URL normalization rules (DESIGN.md section 2), field
 * cases C-01, C-02, C-05, C-06, C-29 at the URL level, hashes. */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "key.h"

/* Normalize \p in, assert success and idempotence; caller frees. */
static char *norm_ok(const char *in)
{
    char err[DD_ERRSTR_SIZE] = "";
    char *out = NULL, *again = NULL;
    dd_err_t rc = key_url_normalize(in, &out, err, sizeof(err));
    ck_assert_msg(rc == DD_OK, "normalize(%s) failed: %d %s", in, rc, err);
    ck_assert_ptr_nonnull(out);
    rc = key_url_normalize(out, &again, err, sizeof(err));
    ck_assert_msg(rc == DD_OK, "normalize(normalize(%s)) failed: %s", in, err);
    ck_assert_msg(strcmp(out, again) == 0,
                  "not idempotent: %s -> %s -> %s", in, out, again);
    free(again);
    return out;
}

static void assert_norm(const char *in, const char *expected)
{
    char *out = norm_ok(in);
    ck_assert_msg(strcmp(out, expected) == 0, "normalize(%s) = %s, want %s",
                  in, out, expected);
    free(out);
}

static void assert_same(const char *a, const char *b, bool same)
{
    char *x = norm_ok(a), *y = norm_ok(b);
    ck_assert_msg((strcmp(x, y) == 0) == same, "%s (%s) vs %s (%s): want %s",
                  a, x, b, y, same ? "same" : "different");
    free(x);
    free(y);
}

static void assert_refused(const char *in, const char *reason)
{
    char err[DD_ERRSTR_SIZE] = "";
    char *out = (char *)0x1;
    dd_err_t rc = key_url_normalize(in, &out, err, sizeof(err));
    ck_assert_msg(rc == DD_ERR_PERMANENT, "normalize(%s) = %d, want PERMANENT",
                  in, rc);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err, reason) != NULL, "reason for %s: '%s', want '%s'",
                  in, err, reason);
}

/* ---- case --------------------------------------------------------------- */

START_TEST(test_key_scheme_lowercased)
{
    assert_norm("HTTP://example.com/", "http://example.com/");
    assert_norm("HtTpS://example.com/x", "https://example.com/x");
}
END_TEST

START_TEST(test_key_host_lowercased)
{
    assert_norm("http://WWW.Example.COM/", "http://www.example.com/");
    assert_norm("http://[FE80::1]:8080/", "http://[fe80::1]:8080/");
}
END_TEST

START_TEST(test_key_path_and_query_case_kept)
{
    assert_norm("http://example.com/Product/ABC?Ref=XyZ",
                "http://example.com/Product/ABC?Ref=XyZ");
    assert_same("http://example.com/a", "http://example.com/A", false);
}
END_TEST

START_TEST(test_key_c01_host_case)
{
    /* C-01: only scheme and host are case-insensitive */
    const char *a = "HTTPS://Shop.Example.COM/Product/ABC?ref=XyZ";
    const char *b = "https://shop.example.com/Product/ABC?ref=XyZ";
    const char *c = "https://shop.example.com/product/abc?ref=xyz";
    assert_norm(a, "https://shop.example.com/Product/ABC?ref=XyZ");
    assert_same(a, b, true);
    assert_same(a, c, false);
    assert_same(b, c, false);
}
END_TEST

START_TEST(test_key_idn_to_punycode)
{
    assert_norm("http://bücher.de/", "http://xn--bcher-kva.de/");
    assert_norm("http://BÜCHER.de/", "http://xn--bcher-kva.de/");
    assert_same("http://bücher.de/x", "http://xn--bcher-kva.de/x", true);
    assert_same("http://XN--BCHER-KVA.de/x", "http://bücher.de/x", true);
}
END_TEST

/* ---- percent-encoding --------------------------------------------------- */

START_TEST(test_key_pct_hex_uppercased)
{
    assert_norm("http://example.com/a%2fb%3a", "http://example.com/a%2Fb%3A");
    assert_norm("http://example.com/?q=%e2%82%ac",
                "http://example.com/?q=%E2%82%AC");
}
END_TEST

START_TEST(test_key_pct_unreserved_decoded)
{
    /* ALPHA DIGIT - . _ ~ */
    assert_norm("http://example.com/%41%7a%30%2D%2e%5F%7E",
                "http://example.com/Az0-._~");
    assert_norm("http://example.com/?%61=%62", "http://example.com/?a=b");
    assert_same("http://example.com/~user", "http://example.com/%7Euser",
                true);
}
END_TEST

START_TEST(test_key_pct_reserved_kept)
{
    static const char *const kept[] = { "%25", "%23", "%2F", "%3B", "%26",
                                        "%3D", "%3F", "%40", "%2B", "%20",
                                        "%3A", "%2C", "%21", "%24" };
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
        char in[64], want[64];
        snprintf(in, sizeof(in), "http://example.com/a%sb?x=%s", kept[i],
                 kept[i]);
        snprintf(want, sizeof(want), "http://example.com/a%sb?x=%s", kept[i],
                 kept[i]);
        assert_norm(in, want);
    }
    /* '%26' and '%3D' in the query do not split parameters */
    assert_norm("http://example.com/?b=1%262&a=x%3Dy",
                "http://example.com/?a=x%3Dy&b=1%262");
}
END_TEST

START_TEST(test_key_c02_reserved_escapes)
{
    /* C-02 */
    const char *p = "http://example.com/deals/50%25-off";
    const char *q1 = "http://example.com/a%2Fb", *q2 = "http://example.com/a/b";
    const char *r1 = "http://example.com/x%3By", *r2 = "http://example.com/x;y";
    const char *s1 = "https://example.com/item/size%2376?x=1#reviews";
    const char *s2 = "https://example.com/item/size%2376?x=1";
    const char *s3 = "https://example.com/item/size";
    /* normalized_path_of_P: /deals/50%25-off */
    assert_norm(p, "http://example.com/deals/50%25-off");
    assert_same(q1, q2, false);
    assert_same(r1, r2, false);
    assert_same(s1, s3, false);
    assert_same(s1, s2, true);
    assert_norm(s1, "https://example.com/item/size%2376?x=1");
    /* normalize_is_idempotent: checked by norm_ok for each */
    const char *all[] = { p, q1, q2, r1, r2, s1, s2, s3 };
    for (size_t i = 0; i < 8; i++)
        free(norm_ok(all[i]));
}
END_TEST

START_TEST(test_key_non_ascii_and_unsafe_bytes_encoded)
{
    assert_norm("http://example.com/ö?ä=ü",
                "http://example.com/%C3%B6?%C3%A4=%C3%BC");
    assert_same("http://example.com/caf%C3%A9", "http://example.com/café",
                true);
    assert_norm("http://example.com/\"<>^`{|}",
                "http://example.com/%22%3C%3E%5E%60%7B%7C%7D");
}
END_TEST

START_TEST(test_key_stray_percent_encoded)
{
    /* a '%' that starts no escape is a literal percent sign */
    assert_norm("http://example.com/50%-off", "http://example.com/50%25-off");
    assert_same("http://example.com/50%-off", "http://example.com/50%25-off",
                true);
    /* "%%341" must not turn into a new escape on a second pass */
    assert_norm("http://example.com/%%341", "http://example.com/%2541");
    assert_norm("http://example.com/a%2", "http://example.com/a%252");
}
END_TEST

/* ---- dot segments ------------------------------------------------------- */

START_TEST(test_key_dot_segments_removed)
{
    /* RFC 3986 5.4 examples, resolved against http://a/b/c/d;p?q */
    assert_norm("http://a/b/c/./../../g", "http://a/g");
    assert_norm("http://a/b/c/./g", "http://a/b/c/g");
    assert_norm("http://a/b/c/g/", "http://a/b/c/g/");
    assert_norm("http://a/b/c/.", "http://a/b/c/");
    assert_norm("http://a/b/c/..", "http://a/b/");
    assert_norm("http://a/b/c/../..", "http://a/");
    assert_norm("http://a/../../../g", "http://a/g");
    assert_norm("http://a/b/./../g;x=1/./y", "http://a/g;x=1/y");
    assert_norm("http://a/g.", "http://a/g.");
    assert_norm("http://a/..g", "http://a/..g");
    assert_norm("http://a/b//../c", "http://a/b/c");
    assert_norm("http://a/..", "http://a/");
    /* dot segments in the query are data */
    assert_norm("http://a/x?p=../y", "http://a/x?p=../y");
}
END_TEST

START_TEST(test_key_dot_segments_after_decoding)
{
    /* percent-encoding comes before dot segments (RFC 3986 6.2.2 order) */
    assert_norm("http://a/b/%2E%2E/c", "http://a/c");
    assert_norm("http://a/b/.%2e/c", "http://a/c");
    assert_norm("http://a/b/%2e/c", "http://a/b/c");
    /* an escaped slash is not a segment boundary */
    assert_norm("http://a/b%2F..%2Fc", "http://a/b%2F..%2Fc");
}
END_TEST

START_TEST(test_key_empty_path_becomes_slash)
{
    assert_norm("http://example.com", "http://example.com/");
    assert_norm("http://example.com?a=1", "http://example.com/?a=1");
    assert_same("http://example.com", "http://example.com/", true);
}
END_TEST

/* ---- ports -------------------------------------------------------------- */

START_TEST(test_key_default_port_dropped)
{
    assert_norm("http://example.com:80/x", "http://example.com/x");
    assert_norm("https://example.com:443/x", "https://example.com/x");
    assert_norm("http://example.com:0080/x", "http://example.com/x");
}
END_TEST

START_TEST(test_key_other_port_kept)
{
    assert_norm("https://example.com:80/x", "https://example.com:80/x");
    assert_norm("http://example.com:443/x", "http://example.com:443/x");
    assert_norm("http://example.com:8080/x", "http://example.com:8080/x");
}
END_TEST

START_TEST(test_key_empty_port_dropped)
{
    assert_norm("http://example.com:/x", "http://example.com/x");
    assert_norm("https://example.com:/", "https://example.com/");
}
END_TEST

START_TEST(test_key_c05_default_port_by_scheme)
{
    /* C-05: pairs 1-3 same, pairs 4-6 different */
    assert_same("https://example.com:443/x", "https://example.com/x", true);
    assert_same("http://example.com:80/x", "http://example.com/x", true);
    assert_same("http://example.com:/x", "http://example.com/x", true);
    assert_same("https://example.com:80/x", "https://example.com/x", false);
    assert_same("http://example.com:443/x", "http://example.com/x", false);
    assert_same("http://example.com:8080/x", "http://example.com/x", false);
    assert_norm("https://example.com:80/x", "https://example.com:80/x");
}
END_TEST

/* ---- fragment and query ------------------------------------------------- */

START_TEST(test_key_fragment_dropped)
{
    assert_norm("http://example.com/x#top", "http://example.com/x");
    assert_norm("http://example.com/x?a=1#f?g=2", "http://example.com/x?a=1");
    assert_norm("http://example.com/x#", "http://example.com/x");
}
END_TEST

START_TEST(test_key_query_sorted_by_name)
{
    assert_norm("http://example.com/?c=3&a=1&b=2",
                "http://example.com/?a=1&b=2&c=3");
    /* byte order: upper case before lower case, a prefix before longer */
    assert_norm("http://example.com/?b=1&B=2&ab=3&a=4",
                "http://example.com/?B=2&a=4&ab=3&b=1");
}
END_TEST

START_TEST(test_key_query_repeated_name_keeps_order)
{
    assert_norm("http://example.com/?t=y&a=1&t=x&t=z",
                "http://example.com/?a=1&t=y&t=x&t=z");
    assert_same("http://example.com/?t=x&t=y", "http://example.com/?t=y&t=x",
                false);
}
END_TEST

START_TEST(test_key_query_bare_name_distinct_from_empty_value)
{
    assert_same("http://example.com/?a", "http://example.com/?a=", false);
    assert_norm("http://example.com/?b&a=&a", "http://example.com/?a=&a&b");
}
END_TEST

START_TEST(test_key_query_empty_dropped)
{
    assert_norm("http://example.com/x?", "http://example.com/x");
    assert_norm("http://example.com/x?#frag", "http://example.com/x");
    assert_same("http://example.com/x?", "http://example.com/x", true);
}
END_TEST

START_TEST(test_key_query_names_compared_after_pct_normalization)
{
    /* %61 is "a": it sorts as "a", and is written as "a" */
    assert_norm("http://example.com/?b=1&%61=2", "http://example.com/?a=2&b=1");
    assert_same("http://example.com/?%61=1&b=2", "http://example.com/?b=2&a=1",
                true);
    /* '+' is not a space for identity */
    assert_same("http://example.com/?q=a+b", "http://example.com/?q=a%20b",
                false);
}
END_TEST

START_TEST(test_key_c06_query_sort)
{
    /* C-06 */
    const char *a = "https://example.com/search?B=1&A=2";
    const char *b = "https://example.com/search?A=2&B=1";
    const char *c = "https://example.com/list?tag=x&tag=y";
    const char *d = "https://example.com/list?tag=y&tag=x";
    const char *e = "https://example.com/list?tag=x&page=2&tag=y";
    const char *f = "https://example.com/list?page=2&tag=x&tag=y";
    assert_same(a, b, true);
    assert_same(e, f, true);
    assert_same(c, d, false);
    assert_norm(a, "https://example.com/search?A=2&B=1");
    assert_norm(e, "https://example.com/list?page=2&tag=x&tag=y");
}
END_TEST

START_TEST(test_key_c29_url_spelling)
{
    /* C-29: J1 and J3 must be the same request after normalization */
    assert_same("https://example.com/p/1", "HTTPS://EXAMPLE.com:443/p/1#top",
                true);
    assert_same("https://example.com/p/1", "https://example.com/p/2", false);
}
END_TEST

START_TEST(test_key_other_hosts)
{
    assert_norm("http://127.0.0.1:8080/", "http://127.0.0.1:8080/");
    assert_norm("http://ex%41mple.com/", "http://example.com/");
    assert_norm("https://[2001:DB8::1]/", "https://[2001:db8::1]/");
}
END_TEST

/* ---- refusals ----------------------------------------------------------- */

START_TEST(test_key_refuses_other_schemes)
{
    assert_refused("ftp://example.com/", "scheme 'ftp' is not http or https");
    assert_refused("FILE:///etc/passwd", "scheme 'FILE' is not http or https");
    assert_refused("mailto:a@example.com", "scheme 'mailto' is not http");
    assert_refused("gopher://x/", "is not http or https");
}
END_TEST

START_TEST(test_key_refuses_relative_and_hostless)
{
    assert_refused("example.com/x", "no scheme");
    assert_refused("/x", "no scheme");
    assert_refused("", "no scheme");
    assert_refused("http:/example.com/x", "expected '//' and a host");
    assert_refused("http:///x", "expected '//' and a host");
    assert_refused("http://", "expected '//' and a host");
}
END_TEST

START_TEST(test_key_refuses_userinfo)
{
    assert_refused("http://user:pw@example.com/", "credentials go in headers");
    assert_refused("http://user@example.com/", "credentials go in headers");
    assert_refused("http://@example.com/", "credentials go in headers");
    assert_refused("https://:pw@example.com/", "credentials go in headers");
}
END_TEST

START_TEST(test_key_refuses_bad_authority)
{
    assert_refused("http://exa mple.com/", "malformed URL");
    assert_refused("http://example.com:99999/", "malformed URL");
    assert_refused("http://example.com:0/", "port 0");
    assert_refused("http://[fe80::1%25eth0]/", "zone id");
    assert_refused("http://example.com/a b", "malformed URL");
}
END_TEST

/* ---- hashes ------------------------------------------------------------- */

START_TEST(test_key_sha256_known_answers)
{
    char hex[KEY_HEX_LEN + 1];
    key_sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca"
                          "495991b7852b855");
    key_sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb"
                          "410ff61f20015ad");
}
END_TEST

/* The FIPS 180-4 examples, one after another on the thread's reused digest
 * context (each digest starts it again) and on a second thread with its
 * own: no state carries from one digest to the next. */
static void *sha256_sequence(void *arg)
{
    static const struct {
        const char *in;
        const char *hex;
    } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    };
    int *bad = arg;
    for (int round = 0; round < 3; round++)
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
            char hex[KEY_HEX_LEN + 1];
            key_sha256_hex(v[i].in, strlen(v[i].in), hex);
            if (strcmp(hex, v[i].hex))
                (*bad)++;
        }
    return NULL;
}

START_TEST(test_key_sha256_context_reused_across_digests_and_threads)
{
    int bad_here = 0, bad_there = 0;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, sha256_sequence, &bad_there), 0);
    sha256_sequence(&bad_here);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(bad_here, 0);
    ck_assert_int_eq(bad_there, 0);
    /* the event key hashes several pieces on the same context */
    char a[KEY_HEX_LEN + 1], b[KEY_HEX_LEN + 1];
    key_event_key("op-1", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb"
                  "410ff61f20015ad", a);
    char h[KEY_HEX_LEN + 1];
    key_sha256_hex("abc", 3, h);
    key_event_key("op-1", h, b);
    ck_assert_str_eq(a, b);
    static const char in[] = "result:v1:op-1\nba7816bf8f01cfea414140de5dae2223b"
                             "00361a396177a9cb410ff61f20015ad";
    key_sha256_hex(in, sizeof(in) - 1, h);
    ck_assert_str_eq(a, h);
}
END_TEST

/* Found by fuzz_url (tests/fuzz/regressions/url/idn_greek_question_mark_...):
 * IDN mapping turned U+037E into ';', so two URLs could share one identity. */
START_TEST(test_key_idn_host_mapping_to_delimiter_is_refused)
{
    char *out = NULL;
    char e[DD_ERRSTR_SIZE] = "";
    ck_assert_int_eq(key_url_normalize("http://\xcd\xbe/", &out, e, sizeof(e)),
                     DD_ERR_PERMANENT);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(e, "not allowed in a domain name"), "%s", e);
    ck_assert_int_eq(key_url_normalize("http://b\xc3\xbc" "cher.example/", &out, e,
                                       sizeof(e)), DD_OK);
    ck_assert_str_eq(out, "http://xn--bcher-kva.example/");
    free(out);
}
END_TEST

/* Found by fuzz_url (regressions/url/host_pct_encoded_ipv4_not_idempotent):
 * curl normalizes an IPv4 number before it percent-decodes the host, so
 * "http://%37" had host "7", which the next parse reads as 0.0.0.7. */
START_TEST(test_key_pct_host_is_the_host_curl_connects_to)
{
    assert_norm("http://%37", "http://0.0.0.7/");
    assert_norm("http://%31%32%37.1/x", "http://127.0.0.1/x");
    assert_norm("http://%30x7f.1:8080/", "http://127.0.0.1:8080/");
    assert_same("http://%37/", "http://0.0.0.7/", true);
    /* a decoded host still has to be a domain name: %25 decodes to '%' */
    assert_refused("http://a%2541/", "not allowed in a domain name");
    assert_refused("http://a%2Fb/", "Bad hostname");
}
END_TEST

/* Found by fuzz_url (regressions/url/idn_host_becomes_ipv4_shorthand): IDN
 * can produce an IPv4 number that curl normalizes only on the next parse. */
START_TEST(test_key_idn_host_becoming_ipv4_is_normalized)
{
    assert_norm("http://\xc2\xb9/", "http://0.0.0.1/");       /* U+00B9 */
    assert_norm("http://\xe2\x91\xa0\xe2\x91\xa1\xe2\x91\xa6.1/",
                "http://127.0.0.1/");                         /* U+2460.. */
    assert_same("http://\xe2\x91\xa0\xe2\x91\xa1\xe2\x91\xa6.0.0.1/a",
                "http://127.0.0.1/a", true);
    assert_norm("http://%e2%91%a0/", "http://0.0.0.1/");
}
END_TEST

/* Found by fuzz_url and fuzz_job (tests/fuzz/regressions: the "nomem"
 * inputs): curl answers CURLUE_OUT_OF_MEMORY for a host its IDN step
 * refuses; that is an invalid URL (PERMANENT, DLQ), not DD_ERR_NOMEM. */
START_TEST(test_key_refused_idn_host_is_permanent)
{
    assert_refused("http://\xbb", "host is not valid UTF-8");
    assert_refused("http://ex\xff.com/", "host is not valid UTF-8");
    assert_refused("http://ex\xc3/", "host is not valid UTF-8");
    /* U+05FC: valid UTF-8, unassigned, refused by IDNA */
    assert_refused("http://b\xd7\xbc" "ch/",
                   "host is not a valid internationalized domain name");
    assert_refused("http://b\xd7\xbc" "ch",
                   "host is not a valid internationalized domain name");
    /* not UTF-8 once percent-decoded */
    assert_refused("http://ex%a0/", "host is not a valid");
    assert_refused("http://%ff%fe/", "host is not a valid");
    /* the path is not the host: bytes there are encoded, not refused */
    assert_norm("http://a/\xbb", "http://a/%BB");
}
END_TEST

START_TEST(test_key_event_key_known_answer)
{
    /* printf 'result:v1:%s\n%s' default:order-1001 \
     *   e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 |
     *   sha256sum */
    char hex[KEY_HEX_LEN + 1];
    key_event_key("default:order-1001",
                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b785"
                  "2b855",
                  hex);
    ck_assert_str_eq(hex, "d5f2c9b8922559659be1d83a639c2adf8e49517b47c02eee3"
                          "5a4099edae2d3ec");
}
END_TEST

/* DESIGN.md section 2: epoch 0 is today's event_key; epoch n > 0 hashes
 * "\n" + n (decimal) after it. */
START_TEST(test_key_event_key_epoch_known_answers)
{
    static const char id[] = "default:order-1001";
    static const char h[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"
                            "a495991b7852b855";
    char e0[KEY_HEX_LEN + 1], hex[KEY_HEX_LEN + 1];
    key_event_key(id, h, e0);
    key_event_key_epoch(id, h, 0, hex);
    ck_assert_str_eq(hex, e0);
    /* printf 'result:v1:%s\n%s\n1' default:order-1001 e3b0...b855 |
     *   sha256sum (and \n12, \n4294967295) */
    key_event_key_epoch(id, h, 1, hex);
    ck_assert_str_eq(hex, "20bda6ee95022c875df2c687d21f1223d12a3b3a45126cda8"
                          "dd451ff8e724bb6");
    key_event_key_epoch(id, h, 12, hex);
    ck_assert_str_eq(hex, "952f7b3a52e939fed8d0e5c01c9e5086f7c518f087ba68d7d"
                          "9f73a9a525c27e7");
    key_event_key_epoch(id, h, UINT32_MAX, hex);
    ck_assert_str_eq(hex, "a3920351f508f0191c6507150800e4d8a22e39ebcd5f8d9e9"
                          "85a3d249e068192");
}
END_TEST

Suite *key_suite(void)
{
    key_global_init();
    Suite *s = suite_create("key");
    TCase *tc = tcase_create("case");
    tcase_add_test(tc, test_key_scheme_lowercased);
    tcase_add_test(tc, test_key_host_lowercased);
    tcase_add_test(tc, test_key_path_and_query_case_kept);
    tcase_add_test(tc, test_key_c01_host_case);
    tcase_add_test(tc, test_key_idn_to_punycode);
    tcase_add_test(tc, test_key_other_hosts);
    suite_add_tcase(s, tc);

    tc = tcase_create("percent_encoding");
    tcase_add_test(tc, test_key_pct_hex_uppercased);
    tcase_add_test(tc, test_key_pct_unreserved_decoded);
    tcase_add_test(tc, test_key_pct_reserved_kept);
    tcase_add_test(tc, test_key_c02_reserved_escapes);
    tcase_add_test(tc, test_key_non_ascii_and_unsafe_bytes_encoded);
    tcase_add_test(tc, test_key_stray_percent_encoded);
    suite_add_tcase(s, tc);

    tc = tcase_create("dot_segments");
    tcase_add_test(tc, test_key_dot_segments_removed);
    tcase_add_test(tc, test_key_dot_segments_after_decoding);
    tcase_add_test(tc, test_key_empty_path_becomes_slash);
    suite_add_tcase(s, tc);

    tc = tcase_create("port");
    tcase_add_test(tc, test_key_default_port_dropped);
    tcase_add_test(tc, test_key_other_port_kept);
    tcase_add_test(tc, test_key_empty_port_dropped);
    tcase_add_test(tc, test_key_c05_default_port_by_scheme);
    suite_add_tcase(s, tc);

    tc = tcase_create("fragment_query");
    tcase_add_test(tc, test_key_fragment_dropped);
    tcase_add_test(tc, test_key_query_sorted_by_name);
    tcase_add_test(tc, test_key_query_repeated_name_keeps_order);
    tcase_add_test(tc, test_key_query_bare_name_distinct_from_empty_value);
    tcase_add_test(tc, test_key_query_empty_dropped);
    tcase_add_test(tc, test_key_query_names_compared_after_pct_normalization);
    tcase_add_test(tc, test_key_c06_query_sort);
    tcase_add_test(tc, test_key_c29_url_spelling);
    suite_add_tcase(s, tc);

    tc = tcase_create("refusals");
    tcase_add_test(tc, test_key_refuses_other_schemes);
    tcase_add_test(tc, test_key_refuses_relative_and_hostless);
    tcase_add_test(tc, test_key_refuses_userinfo);
    tcase_add_test(tc, test_key_refuses_bad_authority);
    suite_add_tcase(s, tc);

    tc = tcase_create("hashes");
    tcase_add_test(tc, test_key_sha256_known_answers);
    tcase_add_test(tc, test_key_sha256_context_reused_across_digests_and_threads);
    tcase_add_test(tc, test_key_event_key_known_answer);
    tcase_add_test(tc, test_key_event_key_epoch_known_answers);
    tcase_add_test(tc, test_key_idn_host_mapping_to_delimiter_is_refused);
    tcase_add_test(tc, test_key_pct_host_is_the_host_curl_connects_to);
    tcase_add_test(tc, test_key_idn_host_becoming_ipv4_is_normalized);
    tcase_add_test(tc, test_key_refused_idn_host_is_permanent);
    suite_add_tcase(s, tc);
    return s;
}
