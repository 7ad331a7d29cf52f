/* Unit tests of jstr: the literal is byte for byte what jansson writes. */
#include <check.h>
#include <jansson.h>
#include <stdbool.h>
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

START_TEST(test_jstr_every_byte_at_every_word_offset)
{
    /* quote_into and quoted_size copy runs of plain bytes a step at a time
     * (16 bytes with SSE2, else a word of 8: scan_plain): every byte value
     * at every offset of three steps inside plain text must still be
     * escaped, copied or refused as jansson does */
    unsigned char buf[51];
    for (int v = 0; v < 256; v++)
        for (size_t k = 0; k < 48; k++)
            for (size_t n = k + 1; n <= sizeof(buf); n += 2) {
                memset(buf, 'a', sizeof(buf));
                buf[k] = (unsigned char)v;
                check_same(buf, n);
            }
}
END_TEST

START_TEST(test_jstr_large_body)
{
    /* under 1 MiB jstr_quote writes into room for the longest literal;
     * past it, it sizes the literal first: both ways, and a refusal at the
     * very end of each */
    const size_t sizes[] = {(1 << 20) - 6, (1 << 20) + 4};
    for (size_t c = 0; c < 2; c++) {
        size_t n = sizes[c];
        char *p = malloc(n);
        ck_assert(p != NULL);
        for (size_t i = 0; i < n; i++)
            p[i] = "abc\"<p>\n\xc3\xa9"[i % 10];
        /* both sizes end at a character boundary */
        ck_assert_uint_eq(n % 10, 0);
        check_same(p, n);
        p[n - 1] = '\0'; /* the NUL refuses it, and cuts a sequence */
        check_same(p, n);
        p[n - 2] = 'a';   /* the NUL alone, at the very end */
        check_same(p, n);
        free(p);
    }
}
END_TEST

/* A random jansson value over what a canonical request holds (objects,
 * arrays, strings from the skewed alphabet, integers, true, false, null);
 * reals only when \p reals. */
static json_t *random_value(unsigned int *seed, int depth, bool reals)
{
    static const char *const alpha[] = {"a", "Z", "\"", "\\", "/", "\n",
                                        "\x01", "\x7f", "\xc3\xa9",
                                        "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                        " ", "k", "\x1f"};
    int kind = rand_r(seed) % (depth > 3 ? 6 : 8);
    char buf[64] = "";
    size_t n = (size_t)(rand_r(seed) % 6);
    for (size_t i = 0; i < n; i++)
        strcat(buf, alpha[rand_r(seed) % (int)(sizeof(alpha) / sizeof(*alpha))]);
    switch (kind) {
    case 0: return json_string(buf);
    case 1: return json_integer((json_int_t)rand_r(seed) - RAND_MAX / 2);
    case 2: return json_true();
    case 3: return json_false();
    case 4: return json_null();
    case 5: return reals ? json_real(rand_r(seed) / 7.0) : json_integer(-1);
    case 6: {
        json_t *a = json_array();
        for (int i = rand_r(seed) % 4; i > 0; i--)
            json_array_append_new(a, random_value(seed, depth + 1, reals));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (int i = rand_r(seed) % 6; i > 0; i--) {
            char key[64] = "";
            for (int j = rand_r(seed) % 4; j > 0; j--)
                strcat(key, alpha[rand_r(seed) % (int)(sizeof(alpha) / sizeof(*alpha))]);
            json_object_set_new(o, key, random_value(seed, depth + 1, reals));
        }
        return o;
    }
    }
}

START_TEST(test_jstr_dump_compact_matches_jansson)
{
    /* 20000 random trees, sorted and in insertion order: byte for byte
     * json_dumps(JSON_COMPACT [| JSON_SORT_KEYS]) */
    unsigned int seed = 4242;
    for (int t = 0; t < 20000; t++) {
        json_t *v = random_value(&seed, 0, false);
        for (int sort = 0; sort < 2; sort++) {
            char *want = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT
                                           | (sort ? JSON_SORT_KEYS : 0));
            char *got = NULL;
            size_t len = 0;
            ck_assert_int_eq(jstr_dump_compact(v, sort, &got, &len), DD_OK);
            ck_assert_ptr_nonnull(want);
            ck_assert_uint_eq(len, strlen(want));
            ck_assert_str_eq(got, want);
            free(got);
            free(want);
        }
        json_decref(v);
    }
    /* keys that are prefixes of each other, bytes above 0x7f */
    json_t *o = json_pack("{s:i,s:i,s:i,s:i,s:[i,{s:n,s:b}]}", "ab", 1, "a", 2,
                          "b\xc3\xa9", 3, "", 4, "Z", 5, "y", "x", 1);
    char *want = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS), *got = NULL;
    size_t len;
    ck_assert_int_eq(jstr_dump_compact(o, true, &got, &len), DD_OK);
    ck_assert_str_eq(got, want);
    free(got);
    free(want);
    json_decref(o);
}
END_TEST

START_TEST(test_jstr_dump_compact_leaves_reals_to_jansson)
{
    json_t *o = json_pack("{s:f,s:s}", "x", 0.5, "y", "z");
    char *got = NULL;
    size_t len = 0;
    ck_assert_int_eq(jstr_dump_compact(o, true, &got, &len), DD_ERR_INVAL);
    ck_assert_ptr_null(got);
    json_decref(o);
    json_t *nul = json_stringn("a\0b", 3);
    ck_assert_int_eq(jstr_dump_compact(nul, true, &got, &len), DD_ERR_INVAL);
    ck_assert_ptr_null(got);
    json_decref(nul);
}
END_TEST

/* jstr_load_object against json_loadb: when it loads the bytes, jansson
 * loads the same tree (json_equal) with its members in the same order (the
 * compact dumps agree).  @returns whether it loaded them. */
static bool check_load(const void *p, size_t n)
{
    json_t *a = jstr_load_object(p, n);
    json_error_t je;
    json_t *b = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (a) {
        ck_assert_msg(b != NULL, "loaded what jansson refuses (%s): %.*s",
                      je.text, (int)n, (const char *)p);
        ck_assert(json_equal(a, b));
        char *x = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
        char *y = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
        ck_assert_str_eq(x, y);
        free(x);
        free(y);
    }
    bool loaded = a != NULL;
    json_decref(a);
    json_decref(b);
    return loaded;
}

START_TEST(test_jstr_load_object_cases)
{
    static const char *const loaded[] = {
        "{}", " {\t\"a\" :\r\n1 } \n", "{\"\":\"\"}",
        "{\"a\":[1,-2,true,false,null,{\"b\":\"\xc3\xa9\xe2\x82\xac\"}],\"c\":[]}",
        "{\"url\":\"http://x/?a=1&b=2\",\"meta\":{\"n\":123456789012345678}}",
        "{\"k\":-9,\"l\":0,\"m\":{\"n\":{\"o\":{}}}}",
        "{\"max\":999999999999999999,\"min\":-999999999999999999}",
        "{\"del\":\"\x7f\",\"long\":\"0123456789abcdef0123456789abcdef0\"}",
    };
    for (size_t i = 0; i < sizeof(loaded) / sizeof(*loaded); i++)
        ck_assert_msg(check_load(loaded[i], strlen(loaded[i])), "%s",
                      loaded[i]);
    /* left to jansson (which loads some and refuses the rest) */
    static const char *const left[] = {
        "{\"a\":1,\"a\":2}", "{\"a\":1.5}", "{\"a\":1e3}", "{\"a\":2E1}",
        "{\"a\":-0}", "{\"a\":01}", "{\"a\":\"\\u00e9\"}", "{\"a\":\"\\\"\"}",
        "{\"a\":\"x\ny\"}", "{\"a\":1234567890123456789}", "[1]", "\"a\"",
        "\xef\xbb\xbf{}", "{} x", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}",
        "{,}", "{\"a\":tru}", "{\"a\":\"\xc3\"}", "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":-}", "{\"a\":[1,]}", "", " ", "{\"a\":nul}", "{\"a\":+1}",
        "{\"a\":-1234567890123456789}", "{\f\"a\":1}", "{\"a\":1\v}",
        "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xf4\x90\x80\x80\"}",
        "{\"a\":\"\xe2\x82\"}",
    };
    for (size_t i = 0; i < sizeof(left) / sizeof(*left); i++)
        ck_assert_msg(!check_load(left[i], strlen(left[i])), "%s", left[i]);
    ck_assert(!check_load("{\"a\":\"b\0c\"}", 11)); /* a NUL */
    /* 32 levels are loaded here, 33 left to jansson */
    char deep[80];
    for (int levels = 32; levels <= 33; levels++) {
        size_t k = 0;
        for (int i = 0; i < levels; i++)
            k += (size_t)sprintf(deep + k, i ? "[" : "{\"a\":");
        for (int i = 1; i < levels; i++)
            deep[k++] = ']';
        deep[k++] = '}';
        ck_assert_int_eq(check_load(deep, k), levels == 32);
    }
}
END_TEST

START_TEST(test_jstr_load_object_random_matches_jansson)
{
    /* random trees written by jansson in several styles, then the same
     * texts with one byte changed or cut short: whatever is loaded is what
     * jansson loads, and the untouched compact and indented texts without
     * an escape are loaded */
    static const char edits[] = {'"', '\\', '0', '-', '.', 'e', ',', '}', ']',
                                 ':', ' ', '\0', '\xc3', '\x80', '1', '{', 'n'};
    static const size_t flags[] = {JSON_COMPACT, JSON_INDENT(2),
                                   JSON_COMPACT | JSON_ENSURE_ASCII};
    unsigned int seed = 1303;
    size_t loaded = 0, edited_loaded = 0, total = 0;
    for (int i = 0; i < 3000; i++) {
        json_t *o = json_object();
        for (int k = rand_r(&seed) % 5; k >= 0; k--) {
            char key[8];
            snprintf(key, sizeof(key), "k%d", rand_r(&seed) % 8);
            json_object_set_new(o, key, random_value(&seed, 1, i % 4 == 0));
        }
        for (size_t f = 0; f < sizeof(flags) / sizeof(*flags); f++) {
            char *t = json_dumps(o, flags[f]);
            ck_assert(t != NULL);
            size_t n = strlen(t);
            total++;
            bool plain = !strchr(t, '\\') && !strchr(t, '.');
            bool got = check_load(t, n);
            if (plain && !(flags[f] & JSON_ENSURE_ASCII) && i % 4 != 0)
                ck_assert_msg(got, "not loaded: %s", t);
            loaded += got;
            char *m = strdup(t);
            size_t at = (size_t)rand_r(&seed) % n;
            m[at] = edits[rand_r(&seed) % (int)sizeof(edits)];
            edited_loaded += check_load(m, n);
            check_load(m, at);
            free(m);
            free(t);
        }
        json_decref(o);
    }
    /* not vacuous: most texts take the loader, and some edited ones too */
    ck_assert_uint_gt(loaded, total / 3);
    ck_assert_uint_gt(edited_loaded, 0);
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
    tcase_add_test(tc, test_jstr_every_byte_at_every_word_offset);
    tcase_add_test(tc, test_jstr_large_body);
    tcase_add_test(tc, test_jstr_dump_compact_matches_jansson);
    tcase_add_test(tc, test_jstr_dump_compact_leaves_reals_to_jansson);
    tcase_add_test(tc, test_jstr_load_object_cases);
    tcase_add_test(tc, test_jstr_load_object_random_matches_jansson);
    suite_add_tcase(s, tc);
    return s;
}
