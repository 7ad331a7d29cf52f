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
 *    failed allocation, so NOMEM means a misclassified input), out NULL,
 *    and a reason by the rule every target applies to error texts
 *    (fuzz_check_text: non-empty, UTF-8 by jstr_utf8_valid() and by
 *    jansson, no control character; reasons end up in DLQ headers, logs and
 *    the API's JSON error body), and moreover printable ASCII, as key.h
 *    documents for key_url_normalize()'s errstr (job.c quotes it).
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
    FUZZ_CHECK(fuzz_url_shape_ok(n), "normalize(\"%s\") = \"%s\": not "
               "http(s):// and printable ASCII without space or '#'", u, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *u = fuzz_cstr(data, size);
    static char sentinel[] = "unset";
    char *n = sentinel, *n2 = NULL; /* key.h: *out set to NULL on failure */
    char e[DD_ERRSTR_SIZE] = "", e2[DD_ERRSTR_SIZE] = "";

    dd_err_t err = key_url_normalize(u, &n, e, sizeof(e));
    FUZZ_CHECK(n != sentinel, "normalize(\"%s\"): *out not written (%d)", u,
               (int)err);
    if (err != DD_OK) {
        /* NOMEM cannot happen here (libFuzzer's malloc limit aborts
         * instead of returning NULL): an invalid URL must be PERMANENT */
        FUZZ_CHECK(err == DD_ERR_PERMANENT,
                   "normalize(\"%s\"): error %d (%s), want DD_ERR_PERMANENT",
                   u, (int)err, e);
        FUZZ_CHECK(n == NULL, "normalize(\"%s\"): out set on error", u);
        fuzz_check_text("key_url_normalize", e);
        for (const char *p = e; *p; p++)
            FUZZ_CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
                       "normalize(\"%s\"): reason \"%s\" is not printable "
                       "ASCII (byte 0x%02x)", u, e, (unsigned char)*p);
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
