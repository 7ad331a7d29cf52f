/* Unit tests of guard.c, the SSRF guard: IP literals against a CIDR list in
 * text (guard_ip_refused; these cases were test_fetch.c's before the guard
 * left fetch.c), IPv6 forms that embed an IPv4 address included; then a
 * guard built from fetch.allow_targets (guard_new) judging URL hosts
 * (guard_host_refused) and connect addresses (guard_addr_refused). */
#include <check.h>
#include <stdbool.h>
#include <stddef.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "guard.h"

static void expect(const char *host, char *const *allow, size_t n_allow,
                   bool want_refused)
{
    bool refused = !want_refused;
    ck_assert_msg(guard_ip_refused(host, allow, n_allow, &refused),
                  "%s: not taken as an IP literal", host);
    ck_assert_msg(refused == want_refused, "%s: %s, want %s", host,
                  refused ? "refused" : "allowed",
                  want_refused ? "refused" : "allowed");
}

#define REFUSED(h) expect((h), NULL, 0, true)
#define PASSES(h) expect((h), NULL, 0, false)

START_TEST(test_guard_plain_ranges)
{
    REFUSED("127.0.0.1");
    REFUSED("169.254.169.254");
    REFUSED("10.1.2.3");
    REFUSED("192.168.0.1");
    REFUSED("100.64.0.1");
    REFUSED("[::1]");
    REFUSED("::");
    REFUSED("fe80::1");
    REFUSED("fd00::1");
    REFUSED("::ffff:127.0.0.1");
    REFUSED("[::ffff:a9fe:a9fe]");
    PASSES("93.184.216.34");
    PASSES("[2606:4700:4700::1111]");
    PASSES("::ffff:8.8.8.8");
    bool refused = true;
    ck_assert(!guard_ip_refused("localhost", NULL, 0, &refused));
}
END_TEST

/* IPv4-compatible ::/96 (deprecated; Linux does not route it, but must not
 * be the way round the guard) */
START_TEST(test_guard_v4_compatible)
{
    REFUSED("[::127.0.0.2]");
    REFUSED("::127.0.0.1");
    REFUSED("::7f00:1");
    REFUSED("::a9fe:a9fe");
    REFUSED("::10.0.0.1");
    REFUSED("[::192.168.1.1]");
    PASSES("::8.8.8.8");
    /* IPv4-translated ::ffff:0:0:0/96 (RFC 2765) */
    REFUSED("::ffff:0:127.0.0.1");
    PASSES("::ffff:0:8.8.8.8");
}
END_TEST

START_TEST(test_guard_nat64)
{
    /* 64:ff9b::/96 (RFC 6052): the metadata address through a translator */
    REFUSED("[64:ff9b::a9fe:a9fe]");
    REFUSED("64:ff9b::169.254.169.254");
    REFUSED("64:ff9b::127.0.0.1");
    REFUSED("64:ff9b::10.1.2.3");
    REFUSED("64:ff9b::c0a8:1");
    REFUSED("64:ff9b::100.64.0.1");
    PASSES("64:ff9b::8.8.8.8");
    PASSES("64:ff9b::5db8:d822");
    /* 64:ff9b:1::/48 (RFC 8215): /96 under it, and the /48, /56, /64 formats */
    REFUSED("64:ff9b:1::a9fe:a9fe");
    REFUSED("64:ff9b:1:abcd:0:1:a9fe:a9fe");
    PASSES("64:ff9b:1::8.8.8.8");
    PASSES("64:ff9b:1:abcd:0:1:808:808");
    REFUSED("64:ff9b:1:a9fe:a9:fe00::");   /* /48: 169.254.169.254 */
    REFUSED("64:ff9b:1:7f:0:1::");         /* /56: 127.0.0.1 */
    REFUSED("64:ff9b:1:0:a:102:300::");    /* /64: 10.1.2.3 */
    PASSES("64:ff9b:1:0:8:808:800::");     /* /64: 8.8.8.8 */
    /* not NAT64: 64:ff9b:2:: is an ordinary (unassigned) address */
    PASSES("64:ff9b:2::a9fe:a9fe");
}
END_TEST

START_TEST(test_guard_6to4)
{
    /* 2002:V4ADDR::/48 (RFC 3056) */
    REFUSED("2002:7f00:1::");
    REFUSED("[2002:7f00:1::1]");
    REFUSED("2002:a9fe:a9fe::1");
    REFUSED("2002:a00:1:1::1");
    REFUSED("2002:c0a8:101::1");
    REFUSED("2002::1");                    /* 0.0.0.0 */
    PASSES("2002:808:808::1");
    PASSES("2002:5db8:d822:1::1");
}
END_TEST

START_TEST(test_guard_allow_targets)
{
    char *v4[] = {"127.0.0.1/32"};
    expect("127.0.0.1", v4, 1, false);
    expect("127.0.0.2", v4, 1, true);
    /* a v4 CIDR does not allow the v6 forms of its addresses */
    expect("::ffff:127.0.0.1", v4, 1, true);
    expect("::127.0.0.1", v4, 1, true);
    expect("64:ff9b::127.0.0.1", v4, 1, true);
    expect("2002:7f00:1::1", v4, 1, true);
    /* a v6 CIDR over the embedding form does */
    char *v6[] = {"64:ff9b::/96", "2002:a00::/24", "::127.0.0.2/128"};
    expect("64:ff9b::a9fe:a9fe", v6, 3, false);
    expect("2002:a00:1::1", v6, 3, false);
    expect("::127.0.0.2", v6, 3, false);
    expect("::127.0.0.3", v6, 3, true);
    expect("64:ff9b:1::a9fe:a9fe", v6, 3, true);
}
END_TEST

/* ---- a guard built from fetch.allow_targets -------------------------------- */

static struct guard *guard_of(char *const *allow, size_t n)
{
    struct guard *g = NULL;
    char err[256] = "";
    ck_assert_msg(guard_new(allow, n, &g, err, sizeof(err)) == DD_OK, "%s", err);
    ck_assert_ptr_nonnull(g);
    return g;
}

START_TEST(test_guard_new_rejects_bad_cidr)
{
    const char *bad[] = {"10.0.0.0/33", "::/129", "10.0.0.0/x", "10.0.0.0/-1",
                         "example.com", "", "10.0.0/8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *allow[] = {"127.0.0.1/32", (char *)bad[i]};
        struct guard *g = (struct guard *)0x1;
        char err[256] = "";
        ck_assert_int_eq(guard_new(allow, 2, &g, err, sizeof(err)), DD_ERR_INVAL);
        ck_assert_ptr_eq(g, (struct guard *)0x1); /* *out untouched */
        char want[256];
        snprintf(want, sizeof(want), "'%s' is not a CIDR", bad[i]);
        ck_assert_str_eq(err, want);
    }
    /* errstr may be NULL */
    char *allow[] = {"nope"};
    struct guard *g = NULL;
    ck_assert_int_eq(guard_new(allow, 1, &g, NULL, 0), DD_ERR_INVAL);
    ck_assert_ptr_null(g);
    guard_destroy(NULL);
}
END_TEST

START_TEST(test_guard_host_refused_literals_only)
{
    struct guard *g = guard_of(NULL, 0);
    ck_assert(guard_host_refused(g, "127.0.0.1"));
    ck_assert(guard_host_refused(g, "169.254.169.254"));
    ck_assert(guard_host_refused(g, "[::1]"));
    ck_assert(guard_host_refused(g, "[64:ff9b::a9fe:a9fe]"));
    ck_assert(guard_host_refused(g, "[::ffff:10.0.0.1]"));
    ck_assert(!guard_host_refused(g, "93.184.216.34"));
    ck_assert(!guard_host_refused(g, "[2606:4700:4700::1111]"));
    /* names are not decided here (the connect-time check decides) */
    ck_assert(!guard_host_refused(g, "localhost"));
    ck_assert(!guard_host_refused(g, "metadata.google.internal"));
    ck_assert(!guard_host_refused(g, ""));
    ck_assert(!guard_host_refused(g, "[]"));
    /* an unbracketed v6 literal is still a literal */
    ck_assert(guard_host_refused(g, "::1"));
    guard_destroy(g);
}
END_TEST

START_TEST(test_guard_host_refused_allow_list)
{
    char *allow[] = {"127.0.0.1/32", "10.1.0.0/16", "fd00::/8"};
    struct guard *g = guard_of(allow, 3);
    ck_assert(!guard_host_refused(g, "127.0.0.1"));
    ck_assert(guard_host_refused(g, "127.0.0.2"));
    ck_assert(!guard_host_refused(g, "10.1.255.255"));
    ck_assert(guard_host_refused(g, "10.2.0.1"));
    ck_assert(!guard_host_refused(g, "[fd12::1]"));
    ck_assert(guard_host_refused(g, "[fe80::1]"));
    /* a v4 CIDR does not allow the v6 forms of its addresses */
    ck_assert(guard_host_refused(g, "[::ffff:127.0.0.1]"));
    guard_destroy(g);
    /* a bare address is a host route */
    char *one[] = {"192.168.1.7"};
    g = guard_of(one, 1);
    ck_assert(!guard_host_refused(g, "192.168.1.7"));
    ck_assert(guard_host_refused(g, "192.168.1.8"));
    guard_destroy(g);
}
END_TEST

START_TEST(test_guard_addr_refused_bytes)
{
    char *allow[] = {"127.0.0.1/32"};
    struct guard *g = guard_of(allow, 1);
    struct in_addr v4;
    struct in6_addr v6;
    ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.1", &v4), 1);
    ck_assert(!guard_addr_refused(g, AF_INET, &v4));
    ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.53", &v4), 1);
    ck_assert(guard_addr_refused(g, AF_INET, &v4));
    ck_assert_int_eq(inet_pton(AF_INET, "172.16.0.1", &v4), 1);
    ck_assert(guard_addr_refused(g, AF_INET, &v4));
    ck_assert_int_eq(inet_pton(AF_INET, "172.32.0.1", &v4), 1);
    ck_assert(!guard_addr_refused(g, AF_INET, &v4));
    ck_assert_int_eq(inet_pton(AF_INET, "224.0.0.1", &v4), 1);
    ck_assert(guard_addr_refused(g, AF_INET, &v4));
    ck_assert_int_eq(inet_pton(AF_INET6, "::1", &v6), 1);
    ck_assert(guard_addr_refused(g, AF_INET6, &v6));
    ck_assert_int_eq(inet_pton(AF_INET6, "2002:a9fe:a9fe::1", &v6), 1);
    ck_assert(guard_addr_refused(g, AF_INET6, &v6));
    ck_assert_int_eq(inet_pton(AF_INET6, "2001:db8::1", &v6), 1);
    ck_assert(!guard_addr_refused(g, AF_INET6, &v6));
    /* other families are not judged */
    unsigned char zero[16] = {0};
    ck_assert(!guard_addr_refused(g, AF_UNIX, zero));
    guard_destroy(g);
}
END_TEST

/* Both entry points agree on every literal of the tables above. */
START_TEST(test_guard_host_matches_ip_refused)
{
    const char *hosts[] = {"127.0.0.1", "10.1.2.3", "100.64.0.1", "8.8.8.8",
                           "[::1]", "[fe80::1]", "[::127.0.0.2]",
                           "[64:ff9b:1:a9fe:a9:fe00::]", "[2002:808:808::1]",
                           "[64:ff9b::5db8:d822]"};
    char *allow[] = {"10.0.0.0/8", "64:ff9b::/96"};
    struct guard *g = guard_of(allow, 2);
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        bool refused = false;
        ck_assert(guard_ip_refused(hosts[i], allow, 2, &refused));
        ck_assert_msg(guard_host_refused(g, hosts[i]) == refused, "%s", hosts[i]);
    }
    guard_destroy(g);
}
END_TEST

Suite *guard_suite(void)
{
    Suite *s = suite_create("guard");
    TCase *tc = tcase_create("ssrf_guard");
    tcase_add_test(tc, test_guard_plain_ranges);
    tcase_add_test(tc, test_guard_v4_compatible);
    tcase_add_test(tc, test_guard_nat64);
    tcase_add_test(tc, test_guard_6to4);
    tcase_add_test(tc, test_guard_allow_targets);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("guard_object");
    tcase_add_test(tg, test_guard_new_rejects_bad_cidr);
    tcase_add_test(tg, test_guard_host_refused_literals_only);
    tcase_add_test(tg, test_guard_host_refused_allow_list);
    tcase_add_test(tg, test_guard_addr_refused_bytes);
    tcase_add_test(tg, test_guard_host_matches_ip_refused);
    suite_add_tcase(s, tg);
    return s;
}
