/**
 * @file fetch_outcome.h
 * @brief INTERNAL to the fetch engine (fetch.c, fetch_outcome.c and their unit
 *        tests): the classification of a finished transfer.
 *
 * When libcurl finishes a transfer, the engine gathers its facts (the
 * CURLcode, the HTTP status, the proxy's answer to CONNECT, the proxy error,
 * what the engine's callbacks saw) and fetch_outcome_classify() turns them
 * into one outcome: a kind, the failure category of DESIGN.md section 5, the
 * status to record, the error text and, for transport failures, whether a
 * retry may re-send the request.  The classification has no side effects;
 * the engine runs one handler per kind (fetch.c, on_<kind>), which applies
 * the outcome to the session (proxy_pool_report) and to the op (retry,
 * rotation, workflow restart, result).
 *
 * Precedence, first match wins.  With CURLE_OK: a status of
 * fetch.blocked_statuses is BLOCKED ("throttled" for 429, else "blocked");
 * 407 is PROXY_AUTH; 3xx other than 304 with a Location is REDIRECT; 5xx is
 * SERVER_ERROR; 4xx is CLIENT_ERROR; anything else is an ANSWER.  Without:
 * a header block over FETCH_MAX_HEADER_BYTES is "protocol" (never retried);
 * through a proxy, 407 to CONNECT is PROXY_AUTH and another CONNECT answer of
 * 300 or more is CONNECT_REFUSED ("proxy_connect"); a SOCKS authentication
 * rejection (CURLE_PROXY with CURLPX_NO_AUTH, USER_REJECTED, LONG_USER,
 * LONG_PASSWD, IDENTD_DIFFER) is PROXY_AUTH; a SOCKS reply about the target
 * is TARGET_UNREACHABLE (below); everything else is TRANSPORT, categorised
 * by the CURLcode.
 *
 * SOCKS replies about the target (RFC 1928 section 6, read from
 * CURLINFO_PROXY_ERROR): the exit worked and reached out for the target, so
 * the failure is the target's, exactly as if dedupd had tried it directly:
 * reply 4 "host unreachable" is "dns" when the proxy was given a name to
 * resolve (socks5h / socks4a and a target that is not an IP literal; dante
 * answers 4 to a name it cannot resolve) and "connect" when it was given an
 * address; 3 "network unreachable", 5 "connection refused" and 6 "TTL
 * expired" are "connect"; a name that a socks5:// / socks4:// session failed
 * to resolve locally (CURLPX_RESOLVE_HOST) is "dns".  They retry like their
 * direct kin (RETRY_ANY: nothing reached the target) and leave the session's
 * health alone.  Every other SOCKS failure (reply 1 "general failure", 2
 * "not allowed by ruleset", 7, 8, unassigned replies, a closed or garbled
 * connection) stays "proxy_connect": it says nothing about the target.
 */
#ifndef DEDUPD_FETCH_OUTCOME_H
#define DEDUPD_FETCH_OUTCOME_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

/** The engine's cap on one response's header block, in bytes (below
 *  libcurl's own): a larger block is a protocol failure. */
#define FETCH_MAX_HEADER_BYTES (256 * 1024)

/** Size of fetch_outcome.error (curl's error buffer and some context). */
#define FETCH_OUTCOME_ERROR_SIZE (CURL_ERROR_SIZE + 64)

/** What a finished transfer was. */
enum fetch_outcome_kind {
    FETCH_OUTCOME_ANSWER = 0,     /**< a final answer (2xx, 304, a 3xx
                                       without Location, 1xx) */
    FETCH_OUTCOME_REDIRECT,       /**< 3xx other than 304, with a Location */
    FETCH_OUTCOME_CLIENT_ERROR,   /**< 4xx (not 407, not blocked) */
    FETCH_OUTCOME_SERVER_ERROR,   /**< 5xx (not blocked) */
    FETCH_OUTCOME_BLOCKED,        /**< a status of fetch.blocked_statuses */
    FETCH_OUTCOME_PROXY_AUTH,     /**< the proxy refused the credentials */
    FETCH_OUTCOME_CONNECT_REFUSED,/**< an HTTP proxy answered CONNECT with
                                       300 or more (not 407) */
    FETCH_OUTCOME_TRANSPORT,      /**< no usable answer (category, retry) */
    FETCH_OUTCOME_TARGET_UNREACHABLE, /**< a SOCKS exit worked and reported
                                       the target unreachable ("dns" or
                                       "connect", RETRY_ANY): the target's
                                       failure, not the session's */
    FETCH_OUTCOME_KINDS           /**< count */
};

/** TRANSPORT: may the request be sent again? */
enum fetch_outcome_retry {
    FETCH_OUTCOME_RETRY_IF_SAFE = 0, /**< bytes may have reached the origin:
                                          only safe requests */
    FETCH_OUTCOME_RETRY_ANY,         /**< failed before anything was sent
                                          (DNS, connect, proxy): any request */
    FETCH_OUTCOME_RETRY_NEVER,       /**< retrying cannot help (terminal) */
};

/** The facts of a finished transfer (what the engine read from libcurl and
 *  saw in its own callbacks). */
struct fetch_facts {
    CURLcode result;            /**< the transfer's result */
    long status;                /**< CURLINFO_RESPONSE_CODE, 0 if none */
    long connect_code;          /**< CURLINFO_HTTP_CONNECTCODE, 0 if none */
    long proxy_error;           /**< CURLINFO_PROXY_ERROR (a CURLproxycode)
                                     when result is CURLE_PROXY, else 0 */
    bool proxied;               /**< the transfer went through a proxy */
    bool target_name_to_proxy;  /**< the proxy was given the target's name
                                     to resolve (socks5h:// or socks4a://,
                                     and the host is not an IP literal) */
    bool has_location;          /**< CURLINFO_REDIRECT_URL is set */
    bool too_large;             /**< the body passed fetch.max_body_bytes */
    bool refused_target;        /**< the SSRF guard refused the address
                                     libcurl was to connect to */
    bool headers_too_large;     /**< a header block passed
                                     FETCH_MAX_HEADER_BYTES */
    const char *curl_error;     /**< CURLOPT_ERRORBUFFER text; NULL or "" =
                                     curl_easy_strerror(result) */
    const long *blocked;        /**< fetch.blocked_statuses (borrowed) */
    size_t n_blocked;
};

/** The classification of one transfer. */
struct fetch_outcome {
    enum fetch_outcome_kind kind;
    const char *category;       /**< static failure category; NULL for
                                     ANSWER and REDIRECT */
    long status;                /**< status to record: the HTTP status; the
                                     CONNECT answer for CONNECT_REFUSED; 407
                                     for a 407 (either kind), 0 for a SOCKS
                                     rejection */
    enum fetch_outcome_retry retry; /**< TRANSPORT and TARGET_UNREACHABLE
                                         (else IF_SAFE) */
    char error[FETCH_OUTCOME_ERROR_SIZE]; /**< error text; "" for ANSWER
                                               and REDIRECT */
};

/**
 * @brief Classify a finished transfer.  Pure: writes \p out only.
 * @param facts  Borrowed for the call.
 * @param out    Out: the outcome.
 * @locality any thread (the fetch engine calls it on its thread).
 */
void fetch_outcome_classify(const struct fetch_facts *facts,
                            struct fetch_outcome *out);

/**
 * @brief Is the target's name what the proxy gets to resolve?  True for a
 *        socks5h:// or socks4a:// proxy (the scheme, any case) and a host
 *        that is not an IP literal; false otherwise (an HTTP proxy, a
 *        socks5:// or socks4:// proxy that gets an address resolved here,
 *        no proxy, or an IPv4 / bracketed IPv6 literal).  The fact
 *        fetch_facts.target_name_to_proxy.
 * @param proxy_url  The session's proxy URL, NUL-terminated, or NULL (direct).
 * @param host       The target host as libcurl's URL parser gives it
 *                   (NUL-terminated; IPv6 in brackets).
 * @locality any thread; pure.
 */
bool fetch_outcome_name_to_proxy(const char *proxy_url, const char *host);

/** @returns the static name of \p kind ("answer", "redirect", ...).
 *  @locality any thread. */
const char *fetch_outcome_kind_name(enum fetch_outcome_kind kind);

#endif
