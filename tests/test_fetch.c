/* Unit tests of fetch.c: the SSRF guard on IP literals (fetch_ip_refused),
 * IPv6 forms that embed an IPv4 address included. */
#include <check.h>
#include <stdbool.h>
#include <stddef.h>

#include "fetch.h"

static void expect(const char *host, char *const *allow, size_t n_allow,
                   bool want_refused)
{
    bool refused = !want_refused;
    ck_assert_msg(fetch_ip_refused(host, allow, n_allow, &refused),
                  "%s: not taken as an IP literal", host);
    ck_assert_msg(refused == want_refused, "%s: %s, want %s", host,
                  refused ? "refused" : "allowed",
                  want_refused ? "refused" : "allowed");
}

#define REFUSED(h) expect((h), NULL, 0, true)
#define PASSES(h) expect((h), NULL, 0, false)

START_TEST(test_fetch_plain_ranges)
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
    ck_assert(!fetch_ip_refused("localhost", NULL, 0, &refused));
}
END_TEST

/* IPv4-compatible ::/96 (deprecated; Linux does not route it, but must not
 * be the way round the guard) */
START_TEST(test_fetch_v4_compatible)
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

START_TEST(test_fetch_nat64)
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

START_TEST(test_fetch_6to4)
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

START_TEST(test_fetch_allow_targets)
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

Suite *fetch_suite(void)
{
    Suite *s = suite_create("fetch");
    TCase *tc = tcase_create("ssrf_guard");
    tcase_add_test(tc, test_fetch_plain_ranges);
    tcase_add_test(tc, test_fetch_v4_compatible);
    tcase_add_test(tc, test_fetch_nat64);
    tcase_add_test(tc, test_fetch_6to4);
    tcase_add_test(tc, test_fetch_allow_targets);
    suite_add_tcase(s, tc);
    return s;
}
