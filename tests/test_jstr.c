/* Unit tests of jstr: the literal is byte for byte what jansson writes. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "jstr.h"

/* What jansson writes for the string, or NULL when it refuses the bytes. */
static char *jansson_literal(const void *p, size_t n)
{
    if (memchr(p, '\0', n))
        return NULL; /* jstr refuses NUL: result.c sends base64 */
    json_t *s = json_stringn(p, n);
    if (!s)
        return NULL;
    char *out = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(s);
    return out;
}

static void check_same(const void *p, size_t n)
{
    char *want = jansson_literal(p, n);
    char *got = NULL;
    size_t len = 0;
    dd_err_t err = jstr_quote(p, n, &got, &len);
    if (!want) {
        ck_assert_int_eq(err, DD_ERR_INVAL);
        ck_assert(got == NULL);
        ck_assert(!jstr_utf8_valid(p, n));
        return;
    }
    ck_assert_int_eq(err, DD_OK);
    ck_assert(jstr_utf8_valid(p, n));
    ck_assert_uint_eq(len, strlen(want));
    ck_assert_str_eq(got, want);
    free(got);
    free(want);
}

START_TEST(test_jstr_escapes_like_jansson)
{
    static const char *cases[] = {
        "", "plain text", "quote \" backslash \\ slash / del \x7f",
        "\b\f\n\r\t", "\x01\x02\x1f ctl", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
        "<html>\r\n<p>a\tb</p>\n</html>", "\xef\xbb\xbf BOM", "\xf4\x8f\xbf\xbf max",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
        check_same(cases[i], strlen(cases[i]));
}
END_TEST

START_TEST(test_jstr_refuses_what_jansson_refuses)
{
    static const struct {
        const char *p;
        size_t n;
    } cases[] = {
        {"a\0b", 3},              /* NUL */
        {"\xc0\xaf", 2},          /* overlong '/' */
        {"\xe0\x80\xaf", 3},      /* overlong, 3 bytes */
        {"\xf0\x80\x80\xaf", 4},  /* overlong, 4 bytes */
        {"\xed\xa0\x80", 3},      /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4},  /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4},
        {"\xff", 1},
        {"\x80", 1},              /* lone continuation */
        {"\xc3", 1},              /* cut */
        {"ok \xe2\x82", 5},       /* cut at the end */
        {"\xe2\x28\xa1", 3},      /* bad continuation */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        /* Each case is refused outright (not merely "as jansson does"): the
         * refusal is the rule (RFC 3629 section 3, RFC 8259 section 8.1),
         * and jansson agreeing is checked beside it. */
        static char untouched[] = "untouched";
        char *got = untouched;
        size_t len = 12345;
        ck_assert_int_eq(jstr_quote(cases[i].p, cases[i].n, &got, &len),
                         DD_ERR_INVAL);
        ck_assert_ptr_eq(got, untouched); /* the header: untouched on failure */
        ck_assert_uint_eq(len, 12345);
        ck_assert(!jstr_utf8_valid(cases[i].p, cases[i].n));
        ck_assert_ptr_null(jansson_literal(cases[i].p, cases[i].n));
    }
}
END_TEST

START_TEST(test_jstr_random_bytes_match_jansson)
{
    /* 20000 random strings over a skewed alphabet (ASCII, controls, UTF-8
     * lead and continuation bytes), deterministic seed */
    unsigned int seed = 12345;
    static const unsigned char alpha[] = {
        'a', 'Z', ' ', '"', '\\', '/', '\n', '\t', 0x01, 0x1f, 0x7f, 0x80,
        0xbf, 0xc2, 0xc3, 0xdf, 0xe0, 0xe2, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff,
        0xa0, 0x9f, 0x8f, 0x90};
    unsigned char buf[64];
    for (int t = 0; t < 20000; t++) {
        size_t n = (size_t)(rand_r(&seed) % (int)sizeof(buf));
        for (size_t i = 0; i < n; i++)
            buf[i] = alpha[rand_r(&seed) % (int)sizeof(alpha)];
        check_same(buf, n);
    }
}
END_TEST

START_TEST(test_jstr_large_body)
{
    size_t n = 1 << 20;
    char *p = malloc(n);
    ck_assert(p != NULL);
    for (size_t i = 0; i < n; i++)
        p[i] = "abc\"<p>\n\xc3\xa9"[i % 10];
    /* cut at a character boundary */
    n -= n % 10;
    check_same(p, n);
    free(p);
}
END_TEST

Suite *jstr_suite(void)
{
    Suite *s = suite_create("jstr");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_jstr_escapes_like_jansson);
    tcase_add_test(tc, test_jstr_refuses_what_jansson_refuses);
    tcase_add_test(tc, test_jstr_random_bytes_match_jansson);
    tcase_add_test(tc, test_jstr_large_body);
    suite_add_tcase(s, tc);
    return s;
}
