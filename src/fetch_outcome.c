/* The classification of a finished transfer (fetch_outcome.h): facts in,
 * outcome out, no side effects. */
#include "fetch_outcome.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* @locality any thread; pure */
static bool status_blocked(const struct fetch_facts *f, long status)
{
    for (size_t i = 0; i < f->n_blocked; i++)
        if (f->blocked[i] == status)
            return true;
    return false;
}

/* @locality any thread; pure */
static void set(struct fetch_outcome *o, enum fetch_outcome_kind kind,
                const char *category, long status)
{
    o->kind = kind;
    o->category = category;
    o->status = status;
}

/* The transfer got an HTTP answer (CURLE_OK).
 * @locality any thread; pure */
static void classify_answer(const struct fetch_facts *f, struct fetch_outcome *o)
{
    long st = f->status;
    if (status_blocked(f, st)) {
        set(o, FETCH_OUTCOME_BLOCKED, st == 429 ? "throttled" : "blocked", st);
        snprintf(o->error, sizeof(o->error), "HTTP %ld (blocked) on every attempt",
                 st);
    } else if (st == 407) {
        set(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
        snprintf(o->error, sizeof(o->error),
                 "the proxy refused the credentials (407)");
    } else if (st >= 300 && st < 400 && st != 304 && f->has_location) {
        set(o, FETCH_OUTCOME_REDIRECT, NULL, st);
    } else if (st >= 500) {
        set(o, FETCH_OUTCOME_SERVER_ERROR, "server_error", st);
        snprintf(o->error, sizeof(o->error), "HTTP %ld from the origin", st);
    } else if (st >= 400) {
        set(o, FETCH_OUTCOME_CLIENT_ERROR, "client_error", st);
        snprintf(o->error, sizeof(o->error), "HTTP %ld from the origin", st);
    } else {
        set(o, FETCH_OUTCOME_ANSWER, NULL, st);
    }
}

/* A transport failure: its category by CURLcode, and whether a retry may
 * send the request again.  o->error holds curl's text on entry.
 * @locality any thread; pure */
static void classify_transport(const struct fetch_facts *f,
                               struct fetch_outcome *o)
{
    const char *cat = "connect";
    enum fetch_outcome_retry retry = FETCH_OUTCOME_RETRY_IF_SAFE;
    switch (f->result) {
    case CURLE_WRITE_ERROR:
        if (f->too_large) {
            cat = "too_large", retry = FETCH_OUTCOME_RETRY_NEVER;
            snprintf(o->error, sizeof(o->error),
                     "response body above fetch.max_body_bytes");
        } else
            cat = "protocol";
        break;
    case CURLE_COULDNT_RESOLVE_PROXY:
        cat = "proxy_connect", retry = FETCH_OUTCOME_RETRY_ANY;
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        cat = "dns", retry = FETCH_OUTCOME_RETRY_ANY;
        break;
    case CURLE_COULDNT_CONNECT:
        if (f->refused_target) {
            cat = "forbidden_target", retry = FETCH_OUTCOME_RETRY_NEVER;
            snprintf(o->error, sizeof(o->error), "target address is loopback, "
                     "link-local or private and not in fetch.allow_targets");
        } else
            cat = f->proxied ? "proxy_connect" : "connect",
            retry = FETCH_OUTCOME_RETRY_ANY;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        cat = "timeout";
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        cat = "tls", retry = FETCH_OUTCOME_RETRY_NEVER;
        break;
    case CURLE_SSL_CONNECT_ERROR:
        cat = "tls";
        break;
    case CURLE_TOO_MANY_REDIRECTS:
        cat = "redirect_loop", retry = FETCH_OUTCOME_RETRY_NEVER;
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_OUT_OF_MEMORY: /* 7.88: a header line above its 100 KB limit */
        cat = "protocol", retry = FETCH_OUTCOME_RETRY_NEVER;
        break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        cat = "connect";
        break;
    default:
        if (f->connect_code == 407) {
            set(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
            snprintf(o->error, sizeof(o->error),
                     "the proxy refused the credentials (407)");
            return;
        }
        if (f->proxied && (f->result == CURLE_PROXY || f->connect_code >= 400))
            cat = "proxy_connect", retry = FETCH_OUTCOME_RETRY_ANY;
        else
            cat = "protocol", retry = FETCH_OUTCOME_RETRY_NEVER;
        break;
    }
    set(o, FETCH_OUTCOME_TRANSPORT, cat, f->status);
    o->retry = retry;
}

/* @locality any thread; pure */
static bool socks_auth_rejected(long pxerr)
{
    return pxerr == CURLPX_NO_AUTH || pxerr == CURLPX_USER_REJECTED ||
           pxerr == CURLPX_LONG_USER || pxerr == CURLPX_LONG_PASSWD ||
           pxerr == CURLPX_IDENTD_DIFFER;
}

/* A SOCKS reply (or local resolution) about the target, RFC 1928 section 6:
 * its category and what it means (*what), or NULL when the failure is the
 * proxy's.
 * @locality any thread; pure */
static const char *socks_target_category(const struct fetch_facts *f,
                                         const char **what)
{
    switch (f->proxy_error) {
    case CURLPX_REPLY_HOST_UNREACHABLE:
        *what = f->target_name_to_proxy
                    ? "the exit could not resolve or reach the target host "
                      "(SOCKS reply 4)"
                    : "the exit could not reach the target host (SOCKS reply 4)";
        return f->target_name_to_proxy ? "dns" : "connect";
    case CURLPX_RESOLVE_HOST:
        *what = "the target's name did not resolve (for the SOCKS request)";
        return "dns";
    case CURLPX_REPLY_NETWORK_UNREACHABLE:
        *what = "the exit has no route to the target (SOCKS reply 3)";
        return "connect";
    case CURLPX_REPLY_CONNECTION_REFUSED:
        *what = "the target refused the exit's connection (SOCKS reply 5)";
        return "connect";
    case CURLPX_REPLY_TTL_EXPIRED:
        *what = "the exit's connection to the target expired (SOCKS reply 6)";
        return "connect";
    default:
        return NULL;
    }
}

/* The exit reported the target unreachable: the target's failure.
 * @locality any thread; pure */
static void classify_target(const char *category, const char *what,
                            struct fetch_outcome *o)
{
    char curl_text[sizeof(o->error)];
    snprintf(curl_text, sizeof(curl_text), "%s", o->error);
    set(o, FETCH_OUTCOME_TARGET_UNREACHABLE, category, 0);
    o->retry = FETCH_OUTCOME_RETRY_ANY;
    snprintf(o->error, sizeof(o->error), "%s: %.*s", what,
             (int)(sizeof(o->error) - strlen(what) - 3), curl_text);
}

/* @locality any thread; pure */
void fetch_outcome_classify(const struct fetch_facts *f, struct fetch_outcome *o)
{
    const char *what = NULL;
    const char *target = f->result == CURLE_PROXY && f->proxied
                             ? socks_target_category(f, &what)
                             : NULL;
    memset(o, 0, sizeof(*o));
    if (f->result == CURLE_OK) {
        classify_answer(f, o);
        return;
    }
    snprintf(o->error, sizeof(o->error), "%s",
             f->curl_error && f->curl_error[0] ? f->curl_error
                                               : curl_easy_strerror(f->result));
    if (f->headers_too_large) {
        set(o, FETCH_OUTCOME_TRANSPORT, "protocol", f->status);
        o->retry = FETCH_OUTCOME_RETRY_NEVER;
        snprintf(o->error, sizeof(o->error),
                 "response header block above %d bytes", FETCH_MAX_HEADER_BYTES);
    } else if (f->proxied && f->connect_code == 407) {
        /* 407 to CONNECT (https through an HTTP proxy). */
        set(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 407);
        snprintf(o->error, sizeof(o->error),
                 "the proxy refused the credentials (407 to CONNECT)");
    } else if (f->proxied && f->connect_code >= 300) {
        set(o, FETCH_OUTCOME_CONNECT_REFUSED, "proxy_connect", f->connect_code);
        snprintf(o->error, sizeof(o->error), "the proxy answered %ld to CONNECT",
                 f->connect_code);
    } else if (f->result == CURLE_PROXY && socks_auth_rejected(f->proxy_error)) {
        set(o, FETCH_OUTCOME_PROXY_AUTH, "proxy_auth", 0);
    } else if (target) {
        classify_target(target, what, o);
    } else {
        classify_transport(f, o);
    }
}

/* @locality any thread; pure */
bool fetch_outcome_name_to_proxy(const char *proxy_url, const char *host)
{
    if (!proxy_url || (strncasecmp(proxy_url, "socks5h://", 10) != 0 &&
                       strncasecmp(proxy_url, "socks4a://", 10) != 0))
        return false;
    unsigned char a4[sizeof(struct in_addr)];
    return host[0] != '[' && host[0] != '\0' && inet_pton(AF_INET, host, a4) != 1;
}

/* @locality any thread; pure */
const char *fetch_outcome_kind_name(enum fetch_outcome_kind kind)
{
    static const char *const names[FETCH_OUTCOME_KINDS] = {
        [FETCH_OUTCOME_ANSWER] = "answer",
        [FETCH_OUTCOME_REDIRECT] = "redirect",
        [FETCH_OUTCOME_CLIENT_ERROR] = "client_error",
        [FETCH_OUTCOME_SERVER_ERROR] = "server_error",
        [FETCH_OUTCOME_BLOCKED] = "blocked",
        [FETCH_OUTCOME_PROXY_AUTH] = "proxy_auth",
        [FETCH_OUTCOME_CONNECT_REFUSED] = "connect_refused",
        [FETCH_OUTCOME_TRANSPORT] = "transport",
        [FETCH_OUTCOME_TARGET_UNREACHABLE] = "target_unreachable",
    };
    return (unsigned)kind < FETCH_OUTCOME_KINDS ? names[kind] : "?";
}
