/**
 * @file guard.h
 * @brief The SSRF guard: which addresses a fetch target may resolve to.
 *
 * A target is refused when its address is internal and no CIDR of
 * fetch.allow_targets allows it.  Internal ranges: loopback, link-local
 * (cloud metadata), private, unspecified, CGNAT 100.64.0.0/10, multicast and
 * above (224.0.0.0/3), and their IPv6 counterparts (fc00::/7, fe80::/10,
 * ff00::/8).  IPv6 forms that embed an IPv4 address are judged by it:
 * v4-mapped ::ffff:0:0/96, IPv4-translated ::ffff:0:0:0/96 (RFC 2765),
 * IPv4-compatible ::/96 (:: and ::1 fall in 0.0.0.0/8), NAT64 64:ff9b::/96
 * (RFC 6052) and 64:ff9b:1::/48 (RFC 8215, in each prefix format it allows)
 * and 6to4 2002::/16 (RFC 3056).  An allow CIDR matches its own family only:
 * a v4 CIDR does not allow the v6 forms of its addresses.
 *
 * The fetch engine asks twice: before an attempt (and a redirect hop), on the
 * IP-literal host of the URL (guard_host_refused), and, when fetching direct,
 * on the address libcurl is about to connect to (guard_addr_refused from the
 * open-socket callback), so a name that resolves inside is refused too.
 * Through a proxy the proxy resolves names; only IP literals are checked.
 *
 * Invariants: a guard is immutable after guard_new(), so any thread may use it.
 * No libcurl type: the engine hands in host text and address bytes.
 */
#ifndef DEDUPD_GUARD_H
#define DEDUPD_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

struct guard;

/**
 * @brief Build a guard that allows the CIDRs \p allow.
 * @param allow    Array of \p n_allow NUL-terminated CIDRs ("10.0.0.0/8",
 *                 "::1/128"; a bare address is a host route) (borrowed: copied).
 *                 May be NULL when \p n_allow is 0.
 * @param out      Out: the guard; free with guard_destroy().
 * @param errstr   Optional (may be NULL): "'TEXT' is not a CIDR".
 * @returns DD_OK; DD_ERR_INVAL (a CIDR does not parse; not retriable).
 *          Out of memory: dd_oom (aborts), per dd.h.
 * @locality any thread.
 */
dd_err_t guard_new(char *const *allow, size_t n_allow, struct guard **out,
                   char *errstr, size_t errstr_size) DD_WUR;

/** @brief Free \p g; guard_destroy(NULL) is a no-op. @locality any thread. */
void guard_destroy(struct guard *g);

/**
 * @brief Is the address \p addr of family \p family refused?
 * @param family  AF_INET (\p addr 4 bytes) or AF_INET6 (16 bytes); any other
 *                family is not refused.
 * @param addr    Network byte order (borrowed).
 * @returns true when the address is internal and not allowed.
 * @locality any thread (the fetch engine calls it from libcurl's
 *           open-socket callback).
 */
bool guard_addr_refused(const struct guard *g, int family, const void *addr);

/**
 * @brief Is the host part of a URL an IP literal that is refused?
 * @param host  NUL-terminated host as a URL parser returns it: a name, an
 *              IPv4 literal, or an IPv6 literal in brackets ("[::1]");
 *              hosts of 128 bytes or more are never literals (borrowed).
 * @returns true when \p host is an IP literal, internal and not allowed;
 *          false for names (nothing decided: the connection check decides).
 * @locality any thread.
 */
bool guard_host_refused(const struct guard *g, const char *host);

/**
 * @brief Stand-alone check of one IP literal against a CIDR list in text.
 * @param host     NUL-terminated IPv4 or IPv6 literal, brackets and an IPv6
 *                 zone id ("%eth0") allowed (borrowed).
 * @param allow    \p n_allow CIDRs in text; ones that do not parse are
 *                 skipped, and only the first 64 that parse count.
 * @param refused  Out, written only when true is returned: true when the
 *                 target must be refused.
 * @returns true if \p host is an IP literal (false: a name; nothing decided).
 * @locality any thread; pure.
 */
bool guard_ip_refused(const char *host, char *const *allow, size_t n_allow,
                      bool *refused);

#endif
