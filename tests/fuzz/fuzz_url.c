/*
 * fuzz_url.c - key_url_normalize() on arbitrary bytes.
 *
 * The input is copied into a buffer of exactly size + 1 bytes (NUL added;
 * bytes after an embedded NUL are ignored, as in any C string), so ASan
 * catches a read past the terminator.
 *
 * Properties, abort() on violation:
 *  - idempotence: when normalize(u) = n succeeds, normalize(n) succeeds and
 *    equals n (key.h: normalize(normalize(u)) == normalize(u));
 *  - n starts with "http://" or "https://" and is printable ASCII without
 *    space or '#' (everything else is percent-encoded, the fragment dropped);
 *  - the host is kept: the host curl connects to for n equals the one for
 *    u (fuzz_curl_host: CURLU_PUNYCODE, lower-cased, read once more as the
 *    resolver reads it, so "http://%37" is 0.0.0.7), so normalization can
 *    never move bytes between host and path and make two hosts one key;
 *  - on refusal: DD_ERR_PERMANENT (never NOMEM: libFuzzer aborts on a
 *    failed allocation, so NOMEM means a misclassified input) and a
 *    non-empty reason in UTF-8 without control characters (reasons end up
 *    in DLQ headers, logs and the API's JSON error body).
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "key.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    key_global_init();
    return 0;
}

static void check_shape(const char *u, const char *n)
{
    FUZZ_CHECK(strncmp(n, "http://", 7) == 0 || strncmp(n, "https://", 8) == 0,
               "normalize(\"%s\") = \"%s\": not http(s)://", u, n);
    for (const char *p = n; *p; p++) {
        unsigned char c = (unsigned char)*p;
        FUZZ_CHECK(c > 0x20 && c < 0x7f && c != '#',
                   "normalize(\"%s\") = \"%s\": raw byte 0x%02x at %zu", u, n,
                   c, (size_t)(p - n));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *u = fuzz_cstr(data, size);
    char *n = NULL, *n2 = NULL;
    char e[DD_ERRSTR_SIZE] = "", e2[DD_ERRSTR_SIZE] = "";

    dd_err_t err = key_url_normalize(u, &n, e, sizeof(e));
    if (err != DD_OK) {
        /* NOMEM cannot happen here (libFuzzer's malloc limit aborts
         * instead of returning NULL): an invalid URL must be PERMANENT */
        FUZZ_CHECK(err == DD_ERR_PERMANENT,
                   "normalize(\"%s\"): error %d (%s), want DD_ERR_PERMANENT",
                   u, (int)err, e);
        FUZZ_CHECK(n == NULL, "normalize(\"%s\"): out set on error", u);
        FUZZ_CHECK(e[0] != '\0', "normalize(\"%s\"): refused without reason",
                   u);
        FUZZ_CHECK(fuzz_no_ctl(e), "normalize(\"%s\"): control char in "
                   "reason \"%s\"", u, e);
        FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)e, strlen(e)),
                   "normalize(\"%s\"): reason \"%s\" is not UTF-8", u, e);
        goto out;
    }
    FUZZ_CHECK(n != NULL, "normalize(\"%s\"): DD_OK without output", u);
    check_shape(u, n);

    char *h_in = fuzz_curl_host(u), *h_out = fuzz_curl_host(n);
    FUZZ_CHECK(h_in && h_out && strcmp(h_in, h_out) == 0,
               "host changed: normalize(\"%s\") = \"%s\", host \"%s\" -> "
               "\"%s\"", u, n, h_in ? h_in : "(none)",
               h_out ? h_out : "(none)");
    free(h_in);
    free(h_out);

    err = key_url_normalize(n, &n2, e2, sizeof(e2));
    FUZZ_CHECK(err == DD_OK, "normalize(\"%s\") = \"%s\", but normalizing "
               "that fails (%d: %s)", u, n, (int)err, e2);
    FUZZ_CHECK(strcmp(n, n2) == 0, "not idempotent: normalize(\"%s\") = "
               "\"%s\", normalize(\"%s\") = \"%s\"", u, n, n, n2);
out:
    free(n2);
    free(n);
    free(u);
    return 0;
}
