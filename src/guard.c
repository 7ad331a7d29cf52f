/* The SSRF guard: internal address ranges and the fetch.allow_targets
 * exemptions.  See guard.h for the contract. */
#include "guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dd.h"

struct cidr {
    int family;
    unsigned char addr[16];
    int bits;
};

struct guard {
    struct cidr *allow;
    size_t n_allow;
};

/* @locality any thread; pure */
static bool parse_cidr(const char *text, struct cidr *c)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", text);
    char *slash = strchr(buf, '/');
    int bits = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (*end || b < 0)
            return false;
        bits = (int)b;
    }
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        c->bits = bits < 0 ? 32 : bits;
        return c->bits <= 32;
    }
    if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        c->bits = bits < 0 ? 128 : bits;
        return c->bits <= 128;
    }
    return false;
}

/* @locality any thread; pure */
static bool prefix_match(const unsigned char *a, const unsigned char *b, int bits)
{
    int full = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)full))
        return false;
    if (rest) {
        unsigned char mask = (unsigned char)(0xff << (8 - rest));
        if ((a[full] & mask) != (b[full] & mask))
            return false;
    }
    return true;
}

static bool addr_is_internal(int family, const unsigned char *a);

/* RFC 8215 local-use NAT64 prefix 64:ff9b:1::/48: the operator picks the
 * prefix length inside it (RFC 6052: /48, /56, /64 or /96), which decides
 * where the IPv4 address sits.  Internal if the v4 is internal in any format
 * the address is well formed in (bits 64-71 zero, suffix zero; /96 always):
 * /48 and /56 deployments are then refused whole (their /96 reading is
 * 0.0.0.0) unless fetch.allow_targets allows them.
 * @locality any thread; pure */
static bool nat64_local_internal(const unsigned char *a)
{
    static const unsigned char at[3][5] = {
        {6, 7, 9, 10, 11}, {7, 9, 10, 11, 12}, {9, 10, 11, 12, 13}};
    if (addr_is_internal(AF_INET, a + 12))
        return true;
    if (a[8])
        return false;
    for (int f = 0; f < 3; f++) {
        bool suffix_zero = true;
        for (int i = at[f][4]; i < 16; i++)
            suffix_zero &= a[i] == 0;
        unsigned char v4[4] = {a[at[f][0]], a[at[f][1]], a[at[f][2]], a[at[f][3]]};
        if (suffix_zero && addr_is_internal(AF_INET, v4))
            return true;
    }
    return false;
}

/* Refused ranges (guard.h): the embedding IPv6 forms are judged by their
 * IPv4 address.
 * @locality any thread; pure */
static bool addr_is_internal(int family, const unsigned char *a)
{
    if (family == AF_INET) {
        uint32_t v = ((uint32_t)a[0] << 24) | ((uint32_t)a[1] << 16) |
                     ((uint32_t)a[2] << 8) | a[3];
        return (v >> 24) == 0 || (v >> 24) == 10 || (v >> 24) == 127 ||
               (v >> 16) == 0xa9fe || (v >> 20) == 0xac1 ||
               (v >> 16) == 0xc0a8 || (v >> 22) == (0x64400000u >> 22) ||
               v >= 0xe0000000u;
    }
    static const unsigned char zero[16];
    static const unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const unsigned char nat64_local[6] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
    if (!memcmp(a, zero, 10) && a[10] == 0xff && a[11] == 0xff)
        return addr_is_internal(AF_INET, a + 12); /* ::ffff:0:0/96 */
    if (!memcmp(a, zero, 8) && a[8] == 0xff && a[9] == 0xff && !a[10] && !a[11])
        return addr_is_internal(AF_INET, a + 12); /* ::ffff:0:0:0/96 */
    if (!memcmp(a, zero, 12) || !memcmp(a, nat64, 12))
        return addr_is_internal(AF_INET, a + 12); /* ::/96, 64:ff9b::/96 */
    if (!memcmp(a, nat64_local, 6))
        return nat64_local_internal(a);
    if (a[0] == 0x20 && a[1] == 0x02)
        return addr_is_internal(AF_INET, a + 2); /* 2002::/16 */
    if ((a[0] & 0xfe) == 0xfc)
        return true; /* fc00::/7 unique local */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return true; /* fe80::/10 link-local */
    if (a[0] == 0xff)
        return true; /* multicast */
    return false;
}

/* @locality any thread; pure */
static bool addr_refused(int family, const unsigned char *a,
                         const struct cidr *allow, size_t n_allow)
{
    if (!addr_is_internal(family, a))
        return false;
    for (size_t i = 0; i < n_allow; i++)
        if (allow[i].family == family && prefix_match(a, allow[i].addr, allow[i].bits))
            return false;
    return true;
}

/* @locality any thread */
dd_err_t guard_new(char *const *allow, size_t n_allow, struct guard **out,
                   char *errstr, size_t errstr_size)
{
    struct guard *g = dd_xcalloc(1, sizeof(*g), "ssrf guard");
    g->allow = dd_xcalloc(n_allow + 1, sizeof(*g->allow), "ssrf guard");
    for (size_t i = 0; i < n_allow; i++) {
        if (!parse_cidr(allow[i], &g->allow[i])) {
            dd_errstr_set(errstr, errstr_size, "'%s' is not a CIDR", allow[i]);
            guard_destroy(g);
            return DD_ERR_INVAL;
        }
        g->n_allow++;
    }
    *out = g;
    return DD_OK;
}

/* @locality any thread (no other user left) */
void guard_destroy(struct guard *g)
{
    if (!g)
        return;
    free(g->allow);
    free(g);
}

/* @locality any thread (the guard is immutable) */
bool guard_addr_refused(const struct guard *g, int family, const void *addr)
{
    if (family != AF_INET && family != AF_INET6)
        return false;
    return addr_refused(family, addr, g->allow, g->n_allow);
}

/* @locality any thread (the guard is immutable) */
bool guard_host_refused(const struct guard *g, const char *host)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", host);
    size_t n = strlen(buf);
    if (buf[0] == '[' && n > 2) {
        memmove(buf, buf + 1, n - 2);
        buf[n - 2] = '\0';
    }
    unsigned char a[16];
    if (inet_pton(AF_INET, buf, a) == 1)
        return addr_refused(AF_INET, a, g->allow, g->n_allow);
    if (inet_pton(AF_INET6, buf, a) == 1)
        return addr_refused(AF_INET6, a, g->allow, g->n_allow);
    return false;
}

/* @locality any thread (the guard is immutable) */
bool guard_ip_refused(const char *host, char *const *allow_text, size_t n_allow,
                      bool *refused)
{
    char buf[128];
    size_t n = strlen(host);
    if (n >= sizeof(buf))
        return false;
    if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
        memcpy(buf, host + 1, n - 2);
        buf[n - 2] = '\0';
    } else
        memcpy(buf, host, n + 1);
    char *pct = strchr(buf, '%'); /* zone id */
    if (pct)
        *pct = '\0';
    unsigned char a[16];
    int family;
    if (inet_pton(AF_INET, buf, a) == 1)
        family = AF_INET;
    else if (inet_pton(AF_INET6, buf, a) == 1)
        family = AF_INET6;
    else
        return false;
    struct cidr allow[64];
    size_t k = 0;
    for (size_t i = 0; i < n_allow && k < 64; i++)
        if (parse_cidr(allow_text[i], &allow[k]))
            k++;
    *refused = addr_refused(family, a, allow, k);
    return true;
}
