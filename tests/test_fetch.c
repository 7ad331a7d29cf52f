/* Unit tests of fetch_outcome.c: the classification of a finished transfer
 * (facts in, outcome out; no curl handle, no network).  Every case states
 * the exact kind, category, status to record, error text and retry class
 * the engine's handlers act on (DESIGN.md section 5 categories). */
#include <check.h>
#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "fetch_outcome.h"

static const long blocked_default[] = {429};

/* Facts of a transfer that got HTTP \p status through no proxy. */
static struct fetch_facts answered(long status)
{
    return (struct fetch_facts){.result = CURLE_OK, .status = status,
                                .blocked = blocked_default, .n_blocked = 1};
}

/* Facts of a transfer that failed with \p res. */
static struct fetch_facts failed(CURLcode res)
{
    return (struct fetch_facts){.result = res, .curl_error = "curl says no",
                                .blocked = blocked_default, .n_blocked = 1};
}

static struct fetch_outcome classify(const struct fetch_facts *f)
{
    struct fetch_outcome o;
    memset(&o, 0x5a, sizeof(o)); /* garbage in: classify owns every field */
    fetch_outcome_classify(f, &o);
    return o;
}

#define EXPECT(o, k, cat, st)                                                 \
    do {                                                                      \
        ck_assert_str_eq(fetch_outcome_kind_name((o).kind),                   \
                         fetch_outcome_kind_name(k));                         \
        if ((cat) == NULL)                                                    \
            ck_assert_ptr_null((o).category);                                 \
        else                                                                  \
            ck_assert_str_eq((o).category, (const char *)(cat));              \
        ck_assert_int_eq((o).status, (st));                                   \
    } while (0)

START_TEST(test_fetch_answers)
{
    long ok[] = {200, 204, 206, 304, 100};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct fetch_facts f = answered(ok[i]);
        struct fetch_outcome o = classify(&f);
        EXPECT(o, FETCH_OUTCOME_ANSWER, NULL, ok[i]);
        ck_assert_str_eq(o.error, "");
    }
    /* a 3xx without a Location is the origin's answer */
    struct fetch_facts f = answered(302);
    struct fetch_outcome o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_ANSWER, NULL, 302);
    /* 304 is an answer even with a Location */
    f = answered(304);
    f.has_location = true;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_ANSWER, NULL, 304);
}
END_TEST

START_TEST(test_fetch_redirects)
{
    long st[] = {301, 302, 303, 307, 308, 300};
    for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
        struct fetch_facts f = answered(st[i]);
        f.has_location = true;
        struct fetch_outcome o = classify(&f);
        EXPECT(o, FETCH_OUTCOME_REDIRECT, NULL, st[i]);
        ck_assert_str_eq(o.error, "");
    }
}
END_TEST

START_TEST(test_fetch_origin_errors)
{
    struct fetch_facts f = answered(404);
    struct fetch_outcome o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_CLIENT_ERROR, "client_error", 404);
    ck_assert_str_eq(o.error, "HTTP 404 from the origin");
    f = answered(503);
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_SERVER_ERROR, "server_error", 503);
    ck_assert_str_eq(o.error, "HTTP 503 from the origin");
    f = answered(599);
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_SERVER_ERROR, "server_error", 599);
    /* 5xx with a Location is still a server error */
    f = answered(500);
    f.has_location = true;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_SERVER_ERROR, "server_error", 500);
}
END_TEST

START_TEST(test_fetch_blocked_statuses)
{
    struct fetch_facts f = answered(429);
    struct fetch_outcome o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_BLOCKED, "throttled", 429);
    ck_assert_str_eq(o.error, "HTTP 429 (blocked) on every attempt");
    /* fetch.blocked_statuses decides: 403 and 503 blocked, 429 not */
    static const long custom[] = {403, 503};
    f = answered(403);
    f.blocked = custom;
    f.n_blocked = 2;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_BLOCKED, "blocked", 403);
    ck_assert_str_eq(o.error, "HTTP 403 (blocked) on every attempt");
    f.status = 503;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_BLOCKED, "blocked", 503);
    f.status = 429;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_CLIENT_ERROR, "client_error", 429);
    /* a blocked status wins over the redirect and 407 rules */
    static const long odd[] = {302, 407};
    f = answered(302);
    f.has_location = true;
    f.blocked = odd;
    f.n_blocked = 2;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_BLOCKED, "blocked", 302);
    f.status = 407;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_BLOCKED, "blocked", 407);
}
END_TEST

START_TEST(test_fetch_proxy_auth)
{
    /* 407 from an HTTP proxy on a plain-http request */
    struct fetch_facts f = answered(407);
    f.proxied = true;
    struct fetch_outcome o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
    ck_assert_str_eq(o.error, "the proxy refused the credentials (407)");
    /* 407 to CONNECT (https through an HTTP proxy) */
    f = failed(CURLE_RECV_ERROR);
    f.proxied = true;
    f.connect_code = 407;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
    ck_assert_str_eq(o.error, "the proxy refused the credentials (407 to CONNECT)");
    /* SOCKS5 rejections: curl's error text, status 0 */
    long px[] = {CURLPX_NO_AUTH, CURLPX_USER_REJECTED, CURLPX_LONG_USER,
                 CURLPX_LONG_PASSWD, CURLPX_IDENTD_DIFFER};
    for (size_t i = 0; i < sizeof(px) / sizeof(px[0]); i++) {
        f = failed(CURLE_PROXY);
        f.proxied = true;
        f.proxy_error = px[i];
        o = classify(&f);
        EXPECT(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 0);
        ck_assert_str_eq(o.error, "curl says no");
    }
    /* a CONNECT 407 seen without a proxy configured (default branch) */
    f = failed(CURLE_SEND_FAIL_REWIND);
    f.connect_code = 407;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
    ck_assert_str_eq(o.error, "the proxy refused the credentials (407)");
}
END_TEST

START_TEST(test_fetch_connect_refused)
{
    long codes[] = {403, 502, 503, 301};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        struct fetch_facts f = failed(CURLE_COULDNT_CONNECT);
        f.proxied = true;
        f.connect_code = codes[i];
        struct fetch_outcome o = classify(&f);
        EXPECT(o, FETCH_OUTCOME_CONNECT_REFUSED, "proxy_connect", codes[i]);
        char want[64];
        snprintf(want, sizeof(want), "the proxy answered %ld to CONNECT", codes[i]);
        ck_assert_str_eq(o.error, want);
    }
    /* without a proxy the CONNECT code is not looked at (no CONNECT sent) */
    struct fetch_facts f = failed(CURLE_COULDNT_CONNECT);
    f.connect_code = 502;
    struct fetch_outcome o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_TRANSPORT, "connect", 0);
}
END_TEST

/* One row: a CURLcode (and flags) to its category and retry class. */
struct trow {
    CURLcode res;
    bool proxied, too_large, refused;
    const char *category;
    enum fetch_outcome_retry retry;
};

START_TEST(test_fetch_transport_categories)
{
    static const struct trow rows[] = {
        {CURLE_WRITE_ERROR, false, true, false, "too_large", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_WRITE_ERROR, false, false, false, "protocol", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_COULDNT_RESOLVE_PROXY, true, false, false, "proxy_connect", FETCH_OUTCOME_RETRY_ANY},
        {CURLE_COULDNT_RESOLVE_HOST, false, false, false, "dns", FETCH_OUTCOME_RETRY_ANY},
        {CURLE_COULDNT_CONNECT, false, false, false, "connect", FETCH_OUTCOME_RETRY_ANY},
        {CURLE_COULDNT_CONNECT, true, false, false, "proxy_connect", FETCH_OUTCOME_RETRY_ANY},
        {CURLE_COULDNT_CONNECT, false, false, true, "forbidden_target", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_OPERATION_TIMEDOUT, false, false, false, "timeout", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_OPERATION_TIMEDOUT, true, false, false, "timeout", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_PEER_FAILED_VERIFICATION, false, false, false, "tls", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_SSL_CACERT_BADFILE, false, false, false, "tls", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_SSL_ISSUER_ERROR, false, false, false, "tls", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_SSL_PINNEDPUBKEYNOTMATCH, false, false, false, "tls", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_SSL_CONNECT_ERROR, false, false, false, "tls", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_TOO_MANY_REDIRECTS, false, false, false, "redirect_loop", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_WEIRD_SERVER_REPLY, false, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_UNSUPPORTED_PROTOCOL, false, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_BAD_CONTENT_ENCODING, false, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_OUT_OF_MEMORY, false, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_RECV_ERROR, false, false, false, "connect", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_SEND_ERROR, true, false, false, "connect", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_GOT_NOTHING, false, false, false, "connect", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_PARTIAL_FILE, false, false, false, "connect", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_HTTP2, false, false, false, "connect", FETCH_OUTCOME_RETRY_IF_SAFE},
        {CURLE_HTTP2_STREAM, false, false, false, "connect", FETCH_OUTCOME_RETRY_IF_SAFE},
        /* default branch: a proxy error that is not authentication */
        {CURLE_PROXY, true, false, false, "proxy_connect", FETCH_OUTCOME_RETRY_ANY},
        {CURLE_PROXY, false, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_SEND_FAIL_REWIND, false, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
        {CURLE_SEND_FAIL_REWIND, true, false, false, "protocol", FETCH_OUTCOME_RETRY_NEVER},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct trow *r = &rows[i];
        struct fetch_facts f = failed(r->res);
        f.proxied = r->proxied;
        f.too_large = r->too_large;
        f.refused_target = r->refused;
        f.proxy_error = r->res == CURLE_PROXY ? CURLPX_RECV_CONNECT : 0;
        struct fetch_outcome o = classify(&f);
        ck_assert_msg(o.kind == FETCH_OUTCOME_TRANSPORT, "row %zu: kind %s", i,
                      fetch_outcome_kind_name(o.kind));
        ck_assert_msg(!strcmp(o.category, r->category), "row %zu: %s, want %s",
                      i, o.category, r->category);
        ck_assert_msg(o.retry == r->retry, "row %zu: retry %d, want %d", i,
                      (int)o.retry, (int)r->retry);
        ck_assert_int_eq(o.status, 0);
    }
}
END_TEST

START_TEST(test_fetch_transport_error_texts)
{
    /* curl's error buffer, else curl_easy_strerror */
    struct fetch_facts f = failed(CURLE_OPERATION_TIMEDOUT);
    struct fetch_outcome o = classify(&f);
    ck_assert_str_eq(o.error, "curl says no");
    f.curl_error = "";
    o = classify(&f);
    ck_assert_str_eq(o.error, curl_easy_strerror(CURLE_OPERATION_TIMEDOUT));
    f.curl_error = NULL;
    o = classify(&f);
    ck_assert_str_eq(o.error, curl_easy_strerror(CURLE_OPERATION_TIMEDOUT));
    /* the engine's own causes replace curl's text */
    f = failed(CURLE_WRITE_ERROR);
    f.too_large = true;
    f.status = 200; /* the status line had arrived */
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_TRANSPORT, "too_large", 200);
    ck_assert_str_eq(o.error, "response body above fetch.max_body_bytes");
    f = failed(CURLE_COULDNT_CONNECT);
    f.refused_target = true;
    o = classify(&f);
    ck_assert_str_eq(o.error, "target address is loopback, link-local or "
                              "private and not in fetch.allow_targets");
}
END_TEST

START_TEST(test_fetch_headers_too_large)
{
    /* first rule of the failures: beats a proxy 407 and the CURLcode */
    struct fetch_facts f = failed(CURLE_WRITE_ERROR);
    f.headers_too_large = true;
    f.status = 200;
    f.proxied = true;
    f.connect_code = 407;
    struct fetch_outcome o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_TRANSPORT, "protocol", 200);
    ck_assert_int_eq(o.retry, FETCH_OUTCOME_RETRY_NEVER);
    char want[64];
    snprintf(want, sizeof(want), "response header block above %d bytes",
             FETCH_MAX_HEADER_BYTES);
    ck_assert_str_eq(o.error, want);
    ck_assert_str_eq(o.error, "response header block above 262144 bytes");
}
END_TEST

/* One row: a SOCKS answer (CURLINFO_PROXY_ERROR with CURLE_PROXY) and
 * whether the proxy got a name, to its kind and category. */
struct srow {
    long pxerr;
    bool name;
    enum fetch_outcome_kind kind;
    const char *category;
};

START_TEST(test_fetch_socks_replies_about_the_target)
{
    /* RFC 1928 section 6: 3 network unreachable, 4 host unreachable, 5
     * connection refused, 6 TTL expired are the target's; 4 about a name the
     * exit was to resolve is "dns".  Everything else is the proxy's. */
    static const struct srow rows[] = {
        {CURLPX_REPLY_HOST_UNREACHABLE, true, FETCH_OUTCOME_TARGET_UNREACHABLE, "dns"},
        {CURLPX_REPLY_HOST_UNREACHABLE, false, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        {CURLPX_REPLY_NETWORK_UNREACHABLE, true, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        {CURLPX_REPLY_NETWORK_UNREACHABLE, false, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        {CURLPX_REPLY_CONNECTION_REFUSED, true, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        {CURLPX_REPLY_CONNECTION_REFUSED, false, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        {CURLPX_REPLY_TTL_EXPIRED, true, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        {CURLPX_REPLY_TTL_EXPIRED, false, FETCH_OUTCOME_TARGET_UNREACHABLE, "connect"},
        /* socks5:// (local resolution): the name did not resolve here */
        {CURLPX_RESOLVE_HOST, false, FETCH_OUTCOME_TARGET_UNREACHABLE, "dns"},
        /* the proxy's own failures stay proxy_connect */
        {CURLPX_REPLY_GENERAL_SERVER_FAILURE, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_REPLY_NOT_ALLOWED, false, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_REPLY_COMMAND_NOT_SUPPORTED, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_REPLY_ADDRESS_TYPE_NOT_SUPPORTED, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_REPLY_UNASSIGNED, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_CLOSED, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_RECV_CONNECT, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_BAD_VERSION, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
        {CURLPX_REQUEST_FAILED, true, FETCH_OUTCOME_TRANSPORT, "proxy_connect"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct srow *r = &rows[i];
        struct fetch_facts f = failed(CURLE_PROXY);
        f.proxied = true;
        f.proxy_error = r->pxerr;
        f.target_name_to_proxy = r->name;
        struct fetch_outcome o = classify(&f);
        ck_assert_msg(o.kind == r->kind, "row %zu: kind %s", i,
                      fetch_outcome_kind_name(o.kind));
        ck_assert_msg(!strcmp(o.category, r->category), "row %zu: %s, want %s",
                      i, o.category, r->category);
        /* nothing reached the target: any request may be retried */
        ck_assert_msg(o.retry == FETCH_OUTCOME_RETRY_ANY, "row %zu: retry %d", i,
                      (int)o.retry);
        ck_assert_int_eq(o.status, 0);
    }
    /* the error names the reply, then curl's text */
    struct fetch_facts f = failed(CURLE_PROXY);
    f.proxied = true;
    f.proxy_error = CURLPX_REPLY_HOST_UNREACHABLE;
    f.target_name_to_proxy = true;
    f.curl_error = "Can't complete SOCKS5 connection to dead.invalid. (4)";
    struct fetch_outcome o = classify(&f);
    ck_assert_str_eq(o.error, "the exit could not resolve or reach the target "
                              "host (SOCKS reply 4): Can't complete SOCKS5 "
                              "connection to dead.invalid. (4)");
    f.proxy_error = CURLPX_REPLY_CONNECTION_REFUSED;
    f.curl_error = "";
    o = classify(&f);
    ck_assert_str_eq(o.error, "the target refused the exit's connection (SOCKS "
                              "reply 5): proxy handshake error");
    /* a SOCKS reply without a proxy configured cannot be: no target kind */
    f.proxied = false;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_TRANSPORT, "protocol", 0);
    /* authentication still wins over nothing; a 407 CONNECT still wins */
    f = failed(CURLE_PROXY);
    f.proxied = true;
    f.proxy_error = CURLPX_REPLY_HOST_UNREACHABLE;
    f.connect_code = 407;
    o = classify(&f);
    EXPECT(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
}
END_TEST

START_TEST(test_fetch_name_to_proxy)
{
    ck_assert(fetch_outcome_name_to_proxy("socks5h://127.0.0.4:11080", "dead.invalid"));
    ck_assert(fetch_outcome_name_to_proxy("SOCKS5H://gw:1080", "example.com"));
    ck_assert(fetch_outcome_name_to_proxy("socks4a://gw:1080", "example.com"));
    /* an address is sent as an address */
    ck_assert(!fetch_outcome_name_to_proxy("socks5h://gw:1080", "127.0.0.1"));
    ck_assert(!fetch_outcome_name_to_proxy("socks5h://gw:1080", "[::1]"));
    ck_assert(!fetch_outcome_name_to_proxy("socks5h://gw:1080", ""));
    /* resolved here, or no SOCKS at all */
    ck_assert(!fetch_outcome_name_to_proxy("socks5://gw:1080", "example.com"));
    ck_assert(!fetch_outcome_name_to_proxy("socks4://gw:1080", "example.com"));
    ck_assert(!fetch_outcome_name_to_proxy("http://127.0.0.2:18888", "example.com"));
    ck_assert(!fetch_outcome_name_to_proxy(NULL, "example.com"));
}
END_TEST

START_TEST(test_fetch_kind_names)
{
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_ANSWER), "answer");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_REDIRECT), "redirect");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_CLIENT_ERROR), "client_error");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_SERVER_ERROR), "server_error");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_BLOCKED), "blocked");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_PROXY_AUTH), "proxy_auth");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_CONNECT_REFUSED),
                     "connect_refused");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_TRANSPORT), "transport");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_TARGET_UNREACHABLE),
                     "target_unreachable");
    ck_assert_str_eq(fetch_outcome_kind_name(FETCH_OUTCOME_KINDS), "?");
}
END_TEST

Suite *fetch_suite(void)
{
    Suite *s = suite_create("fetch");
    TCase *tc = tcase_create("classify");
    tcase_add_test(tc, test_fetch_answers);
    tcase_add_test(tc, test_fetch_redirects);
    tcase_add_test(tc, test_fetch_origin_errors);
    tcase_add_test(tc, test_fetch_blocked_statuses);
    tcase_add_test(tc, test_fetch_proxy_auth);
    tcase_add_test(tc, test_fetch_connect_refused);
    tcase_add_test(tc, test_fetch_transport_categories);
    tcase_add_test(tc, test_fetch_transport_error_texts);
    tcase_add_test(tc, test_fetch_headers_too_large);
    tcase_add_test(tc, test_fetch_socks_replies_about_the_target);
    tcase_add_test(tc, test_fetch_name_to_proxy);
    tcase_add_test(tc, test_fetch_kind_names);
    suite_add_tcase(s, tc);
    return s;
}
