/* Unit tests of proxy_pool.c, without curl or network (no provider API): the
 * sessions built from exits and providers, pick by country and rotation
 * mode, round robin over the least busy, cooldown after a blocked status
 * with its Retry-After (and without; the wait asked for before the clamp),
 * proxy-down cooldowns, target failures that leave a session alone, credential
 * suspension and retirement after a proxy authentication failure,
 * retirement rules, timed rotation.  A fake clock (proxy_pool_conf.clock_ms)
 * makes every time exact. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "proxy_pool.h"

static int64_t fake_now;

static int64_t fake_clock(void)
{
    return fake_now;
}

static char *no_countries[1];

/* A provider without API on gateway "gw". */
static struct cfg_provider provider(const char *name, const char *rotation,
                                    int64_t sessions, char **countries,
                                    size_t n_countries)
{
    return (struct cfg_provider){
        .name = (char *)name, .gateway = "gw", .http_port = 8080,
        .username = "{user}-cc-{country}-sid-{session}", .user = "acct",
        .password = "pw", .rotation = (char *)rotation,
        .countries = {.v = countries ? countries : no_countries,
                      .n = n_countries},
        .sessions = sessions, .api_url = "", .api_key = NULL};
}

static struct proxy_pool_conf conf_base(void)
{
    return (struct proxy_pool_conf){.cooldown_default_ms = 30000,
                                    .retry_after_max_ms = 60000,
                                    .proxy_auth_cooldown_ms = 120000,
                                    .clock_ms = fake_clock};
}

static struct proxy_pool *pool_new(const struct proxy_pool_conf *c)
{
    struct proxy_pool *p = NULL;
    char err[256] = "";
    ck_assert_msg(proxy_pool_new(c, &p, err, sizeof(err)) == DD_OK, "%s", err);
    ck_assert_ptr_nonnull(p);
    return p;
}

static struct proxy_pool_session_info info(struct proxy_pool *p, int s)
{
    struct proxy_pool_session_info i;
    proxy_pool_session_get(p, s, &i);
    return i;
}

/* Pick for an op with these constraints; returns the result, *s the session. */
static enum proxy_pool_pick_result pick(struct proxy_pool *p, const char *country,
                                        const char *rotation, int current,
                                        bool rotate, int64_t now, int *s,
                                        int64_t *wait_until)
{
    struct proxy_pool_want w = {.country = country, .rotation = rotation,
                                .current = current, .rotate = rotate};
    *s = -7;
    *wait_until = -7;
    return proxy_pool_pick(p, &w, now, s, wait_until);
}

static int pick_ok(struct proxy_pool *p, const char *country, const char *rotation,
                   int current, bool rotate, int64_t now)
{
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, country, rotation, current, rotate, now, &s, &wu),
                     PROXY_POOL_PICKED);
    return s;
}

static void report(struct proxy_pool *p, int s, enum proxy_pool_verdict v,
                   const char *retry_after, int64_t now,
                   struct proxy_pool_effect *e)
{
    struct proxy_pool_outcome o = {.verdict = v, .retry_after = retry_after,
                                   .detail = "test"};
    proxy_pool_report(p, s, &o, now, e);
}

static void setup(void)
{
    fake_now = 10000;
}

/* ---- sessions and pick ------------------------------------------------------ */

START_TEST(test_pool_direct_when_nothing_configured)
{
    struct proxy_pool_conf c = conf_base();
    struct proxy_pool *p = pool_new(&c);
    ck_assert_uint_eq(proxy_pool_size(p), 1);
    struct proxy_pool_session_info i = info(p, 0);
    ck_assert_str_eq(i.name, "direct");
    ck_assert_ptr_null(i.proxy);
    ck_assert_ptr_null(i.username);
    ck_assert_ptr_null(i.provider);
    ck_assert_int_eq(pick_ok(p, "US", "timed", -1, false, 1000), 0);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, true, 1000), 0); /* nowhere else */
    proxy_pool_destroy(p);
    proxy_pool_destroy(NULL);
}
END_TEST

START_TEST(test_pool_exits_round_robin_least_busy)
{
    char *exits[] = {"http://a:1", "http://b:2", "socks5h://c:3"};
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 3;
    struct proxy_pool *p = pool_new(&c);
    ck_assert_uint_eq(proxy_pool_size(p), 3);
    ck_assert_str_eq(proxy_pool_session_name(p, 2), "socks5h://c:3");
    ck_assert_str_eq(info(p, 1).proxy, "http://b:2");
    ck_assert_ptr_null(info(p, 1).username);
    /* idle: round robin */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 1000), 0);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 1000), 1);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 1000), 2);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 1000), 0);
    /* the least busy wins over the cursor */
    proxy_pool_acquire(p, 0);
    proxy_pool_acquire(p, 1);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 1000), 2);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 1000), 2);
    ck_assert_int_eq(info(p, 0).active, 1);
    ck_assert_uint_eq(info(p, 0).uses, 1);
    /* an op keeps its usable session (sticky), whatever is busier */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 1, false, 1000), 1);
    /* rotate: never the current one */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 2, true, 1000), 0);
    /* an abandoned attempt is released without counting a failure */
    report(p, 0, PROXY_POOL_ABANDONED, NULL, 1000, NULL);
    ck_assert_int_eq(info(p, 0).active, 0);
    ck_assert_uint_eq(info(p, 0).errors, 0);
    ck_assert_uint_eq(info(p, 0).errors_in_row, 0);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_pick_honours_country)
{
    char *cc[] = {"US", "DE"};
    struct cfg_provider pv[2] = {provider("geo", "sticky", 2, cc, 2),
                                 provider("any", "sticky", 1, NULL, 0)};
    struct proxy_pool_conf c = conf_base();
    c.providers = pv;
    c.n_providers = 1;
    struct proxy_pool *p = pool_new(&c);
    ck_assert_uint_eq(proxy_pool_size(p), 4);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "geo:US:s1");
    ck_assert_str_eq(proxy_pool_session_name(p, 1), "geo:US:s2");
    ck_assert_str_eq(proxy_pool_session_name(p, 2), "geo:DE:s1");
    ck_assert_str_eq(proxy_pool_session_name(p, 3), "geo:DE:s2");
    struct proxy_pool_session_info i = info(p, 2);
    ck_assert_str_eq(i.proxy, "http://gw:8080");
    ck_assert_str_eq(i.username, "acct-cc-de-sid-s1");
    ck_assert_str_eq(i.password, "pw");
    ck_assert_str_eq(i.provider, "geo");
    ck_assert_str_eq(i.country, "DE");
    ck_assert(!i.timed && !i.per_request);
    ck_assert_int_eq(i.rotates_at_ms, 0);
    ck_assert_int_eq(pick_ok(p, "DE", NULL, -1, false, 1000), 2);
    ck_assert_int_eq(pick_ok(p, "DE", NULL, -1, false, 1000), 2);
    proxy_pool_acquire(p, 2);
    ck_assert_int_eq(pick_ok(p, "DE", NULL, -1, false, 1000), 3);
    ck_assert_int_eq(pick_ok(p, "US", NULL, -1, false, 1000), 0);
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, "FR", NULL, -1, false, 1000, &s, &wu),
                     PROXY_POOL_UNSERVED);
    ck_assert_int_eq(s, -7); /* untouched */
    /* no country asked: any session */
    ck_assert_int_ge(pick_ok(p, "", NULL, -1, false, 1000), 0);
    proxy_pool_destroy(p);
    /* a provider without a countries list serves every country */
    c.providers = &pv[1];
    p = pool_new(&c);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "any:s1");
    ck_assert_str_eq(info(p, 0).username, "acct-cc--sid-s1");
    ck_assert_int_eq(pick_ok(p, "FR", NULL, -1, false, 1000), 0);
    proxy_pool_destroy(p);
    /* a plain exit serves every country too */
    char *exits[] = {"http://x:1"};
    c.exits = exits;
    c.n_exits = 1;
    c.providers = pv;
    p = pool_new(&c);
    ck_assert_int_eq(pick_ok(p, "FR", NULL, -1, false, 1000), 0);
    ck_assert_int_eq(pick_ok(p, "DE", NULL, 0, true, 1000), 3);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_pick_honours_rotation_mode)
{
    struct cfg_provider pv[2] = {provider("stick", "sticky", 1, NULL, 0),
                                 provider("timer", "timed", 1, NULL, 0)};
    pv[0].http_port = 0;
    pv[0].socks_port = 1080;
    pv[1].rotate_every_s = 3;
    struct proxy_pool_conf c = conf_base();
    c.providers = pv;
    c.n_providers = 2;
    struct proxy_pool *p = pool_new(&c);
    ck_assert_str_eq(info(p, 0).proxy, "socks5h://gw:1080");
    ck_assert(!info(p, 0).timed);
    ck_assert(info(p, 1).timed);
    ck_assert_int_eq(pick_ok(p, NULL, "timed", -1, false, 1000), 1);
    ck_assert_int_eq(pick_ok(p, NULL, "timed", -1, false, 1000), 1);
    ck_assert_int_eq(pick_ok(p, NULL, "sticky", -1, false, 1000), 0);
    ck_assert_int_eq(pick_ok(p, NULL, "sticky", -1, false, 1000), 0);
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, NULL, "per_request", -1, false, 1000, &s, &wu),
                     PROXY_POOL_UNSERVED);
    /* a sticky op asked to rotate with no other sticky session stays */
    ck_assert_int_eq(pick_ok(p, NULL, "sticky", 0, true, 1000), 0);
    proxy_pool_destroy(p);
    struct cfg_provider pr = provider("fresh", "per_request", 1, NULL, 0);
    c.providers = &pr;
    c.n_providers = 1;
    p = pool_new(&c);
    ck_assert(info(p, 0).per_request);
    ck_assert_int_eq(pick_ok(p, NULL, "per_request", -1, false, 1000), 0);
    proxy_pool_destroy(p);
}
END_TEST

/* ---- cooldowns ---------------------------------------------------------------- */

START_TEST(test_pool_throttled_retry_after_cools_down)
{
    char *exits[] = {"http://a:1", "http://b:2"};
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 2;
    struct proxy_pool *p = pool_new(&c);
    proxy_pool_acquire(p, 0);
    struct proxy_pool_effect e;
    report(p, 0, PROXY_POOL_THROTTLED, "5", 1000, &e);
    ck_assert_int_eq(e.cooldown_ms, 5000);
    ck_assert(!e.suspended && !e.renewed);
    struct proxy_pool_session_info i = info(p, 0);
    ck_assert_int_eq(i.cooldown_until_ms, 6000);
    ck_assert_int_eq(i.active, 0);
    ck_assert_uint_eq(i.errors, 1);
    ck_assert_uint_eq(i.errors_in_row, 1);
    /* the op bound to it moves on; nobody gets it until 6000 */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, false, 1000), 1);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 5999), 1);
    ck_assert_int_eq(proxy_pool_session_free_at(p, 0, 2000), 6000);
    ck_assert_int_eq(proxy_pool_session_free_at(p, 1, 2000), 2000);
    struct proxy_pool_want any = {.current = -1};
    ck_assert_int_eq(proxy_pool_free_at(p, &any, 2000), 2000);
    /* both cool down: wait for the first */
    proxy_pool_acquire(p, 1);
    report(p, 1, PROXY_POOL_THROTTLED, "8", 1000, &e);
    ck_assert_int_eq(info(p, 1).cooldown_until_ms, 9000);
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, NULL, NULL, -1, false, 5999, &s, &wu), PROXY_POOL_WAIT);
    ck_assert_int_eq(wu, 6000);
    ck_assert_int_eq(proxy_pool_free_at(p, &any, 2000), 6000);
    ck_assert_int_eq(pick(p, NULL, NULL, 0, true, 5999, &s, &wu), PROXY_POOL_WAIT);
    ck_assert_int_eq(wu, 9000); /* rotating away from 0: only 1 is left */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 6000), 0);
    /* a success clears the errors in a row, not the error count */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_OK, NULL, 6000, &e);
    ck_assert_uint_eq(info(p, 0).errors_in_row, 0);
    ck_assert_uint_eq(info(p, 0).errors, 1);
    ck_assert_int_eq(e.cooldown_ms, 0);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_throttled_default_and_clamp)
{
    char *exits[] = {"http://a:1"};
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 1;
    struct proxy_pool *p = pool_new(&c);
    struct proxy_pool_effect e;
    /* no Retry-After, or one that does not parse: fetch.cooldown_default_ms */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, NULL, 1000, &e);
    ck_assert_int_eq(e.cooldown_ms, 30000);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 31000);
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "soon", 1000, &e);
    ck_assert_int_eq(e.cooldown_ms, 30000);
    /* clamped to fetch.retry_after_max_ms */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "3600", 1000, &e);
    ck_assert_int_eq(e.cooldown_ms, 60000);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 61000);
    /* a shorter Retry-After does not shorten the cooldown */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "1", 2000, &e);
    ck_assert_int_eq(e.cooldown_ms, 1000);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 61000);
    ck_assert_uint_eq(info(p, 0).errors_in_row, 4);
    /* the one session: an op wanting to leave it waits for it */
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, NULL, NULL, 0, true, 60999, &s, &wu), PROXY_POOL_WAIT);
    ck_assert_int_eq(wu, 61000);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, true, 61000), 0);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_proxy_down_replaces_cooldown)
{
    char *exits[] = {"http://a:1", "http://b:2"};
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 2;
    struct proxy_pool *p = pool_new(&c);
    struct proxy_pool_effect e;
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "60", 1000, &e);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 61000);
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_PROXY_DOWN, NULL, 2000, &e);
    ck_assert_int_eq(e.cooldown_ms, 30000);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 32000);
    /* a failure the op stays on cools nothing down */
    proxy_pool_acquire(p, 1);
    report(p, 1, PROXY_POOL_FAILED, NULL, 2000, &e);
    ck_assert_int_eq(e.cooldown_ms, 0);
    ck_assert_int_eq(info(p, 1).cooldown_until_ms, 0);
    ck_assert_uint_eq(info(p, 1).errors_in_row, 1);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, true, 2000), 1);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_throttled_reports_the_requested_wait)
{
    char *exits[] = {"http://a:1"};
    struct proxy_pool_conf c = conf_base(); /* clamp 60000 */
    c.exits = exits;
    c.n_exits = 1;
    struct proxy_pool *p = pool_new(&c);
    struct proxy_pool_effect e;
    /* what the server asked for, before the clamp, and what is honoured */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "600", 1000, &e);
    ck_assert_int_eq(e.requested_ms, 600000);
    ck_assert_int_eq(e.cooldown_ms, 60000);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 61000);
    /* a date: the wait it means */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "Thu, 01 Jan 1970 00:01:40 GMT", 1000, &e);
    ck_assert_int_eq(e.requested_ms, 99000);
    ck_assert_int_eq(e.cooldown_ms, 60000);
    /* none, or none valid: -1 (the default cooldown applies) */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, NULL, 1000, &e);
    ck_assert_int_eq(e.requested_ms, -1);
    ck_assert_int_eq(e.cooldown_ms, 30000);
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "-5", 1000, &e);
    ck_assert_int_eq(e.requested_ms, -1);
    /* other verdicts ask for nothing */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_FAILED, "600", 1000, &e);
    ck_assert_int_eq(e.requested_ms, -1);
    ck_assert_int_eq(e.cooldown_ms, 0);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_target_failure_leaves_health_alone)
{
    /* a provider session one failure short of retirement, and a plain exit */
    struct cfg_provider pv = provider("p", "sticky", 1, NULL, 0);
    char *exits[] = {"socks5h://x:1"};
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 1;
    c.providers = &pv;
    c.n_providers = 1;
    c.session_max_errors = 2;
    struct proxy_pool *p = pool_new(&c);
    proxy_pool_acquire(p, 1);
    report(p, 1, PROXY_POOL_FAILED, NULL, 1000, NULL);
    ck_assert_uint_eq(info(p, 1).errors_in_row, 1);
    /* the exit worked; the target did not: released, nothing else */
    struct proxy_pool_effect e;
    for (int k = 0; k < 5; k++) {
        for (int s = 0; s < 2; s++) {
            proxy_pool_acquire(p, s);
            report(p, s, PROXY_POOL_TARGET_FAILED, NULL, 1000, &e);
            ck_assert_int_eq(e.cooldown_ms, 0);
            ck_assert(!e.suspended && !e.renewed);
        }
    }
    struct proxy_pool_session_info i = info(p, 1);
    ck_assert_int_eq(i.active, 0);
    ck_assert_uint_eq(i.errors, 1);
    ck_assert_uint_eq(i.errors_in_row, 1); /* neither cleared nor counted */
    ck_assert_int_eq(i.cooldown_until_ms, 0);
    ck_assert_uint_eq(i.uses, 6);
    i = info(p, 0);
    ck_assert_uint_eq(i.errors, 0);
    ck_assert_int_eq(i.cooldown_until_ms, 0);
    /* still picked as it was: the op stays, no retirement */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 1, false, 1000), 1);
    ck_assert_str_eq(proxy_pool_session_name(p, 1), "p:s1");
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, false, 1000), 0);
    proxy_pool_destroy(p);
}
END_TEST

/* ---- proxy authentication ------------------------------------------------------ */

START_TEST(test_pool_auth_failure_suspends_credential_set)
{
    char *exits[] = {"http://e:1"};
    struct cfg_provider pv = provider("sq", "sticky", 2, NULL, 0);
    pv.username = "{user}-{session}";
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 1;
    c.providers = &pv;
    c.n_providers = 1;
    struct proxy_pool *p = pool_new(&c);
    ck_assert_str_eq(proxy_pool_session_name(p, 1), "sq:s1");
    ck_assert_str_eq(info(p, 1).username, "acct-s1");
    fake_now = 1000;
    proxy_pool_acquire(p, 1);
    struct proxy_pool_effect e;
    report(p, 1, PROXY_POOL_AUTH_FAILED, NULL, 1000, &e);
    ck_assert(e.suspended);
    ck_assert(e.renewed);
    struct proxy_pool_session_info i = info(p, 1);
    ck_assert_int_eq(i.suspended_until_ms, 121000);
    ck_assert_str_eq(i.name, "sq:s1g1"); /* retired: a new session id */
    ck_assert_str_eq(i.username, "acct-s1g1");
    ck_assert_uint_eq(i.renewals, 1);
    ck_assert_uint_eq(i.errors_in_row, 0);
    ck_assert_int_eq(i.created_at_ms, 1000);
    ck_assert_int_eq(info(p, 2).suspended_until_ms, 121000);
    ck_assert_str_eq(proxy_pool_session_name(p, 2), "sq:s2"); /* not retired */
    ck_assert_int_eq(info(p, 0).suspended_until_ms, 0);
    /* only the plain exit serves until the suspension ends */
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 2000), 0);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 2, false, 2000), 0);
    struct proxy_pool_want any = {.current = -1};
    ck_assert(proxy_pool_other_credentials(p, 1, &any, 2000));
    ck_assert(!proxy_pool_other_credentials(p, 0, &any, 2000));
    /* a second failure extends it but is no new suspension */
    proxy_pool_acquire(p, 2);
    report(p, 2, PROXY_POOL_AUTH_FAILED, NULL, 2000, &e);
    ck_assert(!e.suspended);
    ck_assert_int_eq(info(p, 1).suspended_until_ms, 122000);
    ck_assert_int_eq(info(p, 2).suspended_until_ms, 122000);
    ck_assert_str_eq(proxy_pool_session_name(p, 2), "sq:s2g1");
    /* the set is back at its end */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, true, 122000), 1);
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_auth_failure_without_other_credentials)
{
    struct cfg_provider pv = provider("sq", "sticky", 2, NULL, 0);
    struct proxy_pool_conf c = conf_base();
    c.providers = &pv;
    c.n_providers = 1;
    struct proxy_pool *p = pool_new(&c);
    proxy_pool_acquire(p, 0);
    proxy_pool_acquire(p, 0);
    proxy_pool_pin(p, 1);
    struct proxy_pool_effect e;
    report(p, 0, PROXY_POOL_AUTH_FAILED, NULL, 1000, &e);
    ck_assert(e.suspended);
    ck_assert(!e.renewed); /* another attempt still runs through it */
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "sq:s1");
    proxy_pool_acquire(p, 1);
    report(p, 1, PROXY_POOL_AUTH_FAILED, NULL, 1000, &e);
    ck_assert(!e.renewed); /* a workflow is bound to it */
    ck_assert_str_eq(proxy_pool_session_name(p, 1), "sq:s2");
    struct proxy_pool_want any = {.current = -1};
    ck_assert(!proxy_pool_other_credentials(p, 0, &any, 1000));
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, NULL, NULL, -1, false, 1000, &s, &wu),
                     PROXY_POOL_SUSPENDED);
    ck_assert_int_eq(pick(p, NULL, NULL, 0, true, 120999, &s, &wu),
                     PROXY_POOL_SUSPENDED);
    /* suspended sessions are no candidates for a retry's time */
    ck_assert_int_eq(proxy_pool_free_at(p, &any, 5000), 5000);
    /* back at the end: the idle one before the one still running */
    ck_assert_int_eq(info(p, 0).active, 1);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 121000), 1);
    proxy_pool_destroy(p);
    /* fetch.proxy_auth_cooldown_ms = 0: no suspension, still retired */
    c.proxy_auth_cooldown_ms = 0;
    p = pool_new(&c);
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_AUTH_FAILED, NULL, 1000, &e);
    ck_assert(!e.suspended);
    ck_assert(e.renewed);
    ck_assert_int_eq(info(p, 0).suspended_until_ms, 0);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "sq:s1g1");
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_auth_failure_on_plain_exit_cools_down)
{
    char *exits[] = {"http://a:1", "http://b:2"};
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 2;
    struct proxy_pool *p = pool_new(&c);
    proxy_pool_acquire(p, 0);
    struct proxy_pool_effect e;
    report(p, 0, PROXY_POOL_AUTH_FAILED, NULL, 1000, &e);
    ck_assert(!e.suspended && !e.renewed);
    ck_assert_int_eq(info(p, 0).suspended_until_ms, 0);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 31000);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "http://a:1");
    struct proxy_pool_want any = {.current = -1};
    ck_assert(proxy_pool_other_credentials(p, 0, &any, 1000)); /* exit b */
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, false, 1000), 1);
    proxy_pool_destroy(p);
}
END_TEST

/* ---- retirement and renewal ------------------------------------------------------ */

START_TEST(test_pool_retirement_rules)
{
    struct cfg_provider pv = provider("p", "sticky", 1, NULL, 0);
    struct proxy_pool_conf c = conf_base();
    c.providers = &pv;
    c.n_providers = 1;
    c.session_max_uses = 2;
    struct proxy_pool *p = pool_new(&c);
    for (int k = 0; k < 2; k++) {
        ck_assert_str_eq(proxy_pool_session_name(p, pick_ok(p, NULL, NULL, -1, false, 1000)),
                         "p:s1");
        proxy_pool_acquire(p, 0);
        report(p, 0, PROXY_POOL_OK, NULL, 1000, NULL);
    }
    fake_now = 2000;
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, false, 2000), 0);
    struct proxy_pool_session_info i = info(p, 0);
    ck_assert_str_eq(i.name, "p:s1g1"); /* max uses */
    ck_assert_uint_eq(i.renewals, 1);
    ck_assert_uint_eq(i.uses_since_new, 0);
    ck_assert_uint_eq(i.uses, 2);
    ck_assert_int_eq(i.created_at_ms, 2000);
    proxy_pool_destroy(p);

    c.session_max_uses = 0;
    c.session_max_errors = 2;
    p = pool_new(&c);
    for (int k = 0; k < 2; k++) {
        proxy_pool_acquire(p, 0);
        report(p, 0, PROXY_POOL_FAILED, NULL, 1000, NULL);
    }
    /* busy or bound sessions are not retired */
    proxy_pool_acquire(p, 0);
    pick_ok(p, NULL, NULL, -1, false, 1000);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1");
    report(p, 0, PROXY_POOL_ABANDONED, NULL, 1000, NULL);
    proxy_pool_pin(p, 0);
    pick_ok(p, NULL, NULL, -1, false, 1000);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1");
    proxy_pool_unpin(p, 0);
    pick_ok(p, NULL, NULL, -1, false, 1000);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1g1"); /* max errors */
    ck_assert_uint_eq(info(p, 0).errors_in_row, 0);
    proxy_pool_destroy(p);

    c.session_max_errors = 0;
    c.session_max_age_ms = 5000;
    fake_now = 10000;
    p = pool_new(&c);
    pick_ok(p, NULL, NULL, -1, false, 14999);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1");
    fake_now = 15000;
    pick_ok(p, NULL, NULL, -1, false, 15000);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1g1"); /* max age */
    pick_ok(p, NULL, NULL, -1, false, 19999);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1g1");
    fake_now = 20000;
    pick_ok(p, NULL, NULL, -1, false, 20000);
    ck_assert_str_eq(proxy_pool_session_name(p, 0), "p:s1g2");
    ck_assert_str_eq(info(p, 0).username, "acct-cc--sid-s1g2");
    proxy_pool_destroy(p);
}
END_TEST

START_TEST(test_pool_renew_needs_provider_api)
{
    char *exits[] = {"http://a:1"};
    struct cfg_provider pv = provider("p", "sticky", 1, NULL, 0);
    struct proxy_pool_conf c = conf_base();
    c.exits = exits;
    c.n_exits = 1;
    c.providers = &pv;
    c.n_providers = 1;
    struct proxy_pool *p = pool_new(&c);
    proxy_pool_acquire(p, 1);
    report(p, 1, PROXY_POOL_THROTTLED, "5", 1000, NULL);
    ck_assert_int_eq(info(p, 1).active, 0);
    ck_assert_int_eq(info(p, 1).pinned, 0);
    ck_assert(!proxy_pool_renew(p, 0, "test")); /* plain exit */
    ck_assert(!proxy_pool_renew(p, 1, "test")); /* provider without API */
    ck_assert_int_eq(info(p, 1).cooldown_until_ms, 6000);
    ck_assert_uint_eq(info(p, 1).renewals, 0);
    proxy_pool_destroy(p);
}
END_TEST

/* ---- timed rotation --------------------------------------------------------------- */

START_TEST(test_pool_timed_interval)
{
    int64_t start = -1;
    ck_assert_int_eq(proxy_pool_timed_interval(1000, 3, 1000, &start), 0);
    ck_assert_int_eq(start, 1000);
    ck_assert_int_eq(proxy_pool_timed_interval(1000, 3, 3999, &start), 0);
    ck_assert_int_eq(proxy_pool_timed_interval(1000, 3, 4000, &start), 1);
    ck_assert_int_eq(start, 4000);
    ck_assert_int_eq(proxy_pool_timed_interval(1000, 3, 10500, &start), 3);
    ck_assert_int_eq(start, 10000);
    ck_assert_int_eq(proxy_pool_timed_interval(1000, 0, 10500, &start), 0);
    ck_assert_int_eq(proxy_pool_timed_interval(1000, 3, 500, NULL), 0);
}
END_TEST

START_TEST(test_pool_timed_rotation_clears_cooldown)
{
    struct cfg_provider pv = provider("t", "timed", 1, NULL, 0);
    pv.rotate_every_s = 3;
    struct proxy_pool_conf c = conf_base();
    c.providers = &pv;
    c.n_providers = 1;
    fake_now = 10000;
    struct proxy_pool *p = pool_new(&c);
    struct proxy_pool_session_info i = info(p, 0);
    ck_assert(i.timed);
    ck_assert_int_eq(i.created_at_ms, 10000);
    ck_assert_int_eq(i.epoch, 0);
    ck_assert_int_eq(i.epoch_start_ms, 10000);
    ck_assert_int_eq(i.rotates_at_ms, 13000);
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "60", 11000, NULL);
    ck_assert_int_eq(info(p, 0).cooldown_until_ms, 71000);
    /* the exit it cools down on is gone at 13000 */
    ck_assert_int_eq(proxy_pool_session_free_at(p, 0, 11000), 13000);
    struct proxy_pool_want any = {.current = -1};
    ck_assert_int_eq(proxy_pool_free_at(p, &any, 11000), 13000);
    int s;
    int64_t wu;
    ck_assert_int_eq(pick(p, NULL, NULL, -1, false, 12999, &s, &wu), PROXY_POOL_WAIT);
    ck_assert_int_eq(wu, 71000);
    ck_assert_int_eq(info(p, 0).epoch, 0);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, -1, false, 13000), 0);
    i = info(p, 0);
    ck_assert_int_eq(i.epoch, 1);
    ck_assert_int_eq(i.epoch_start_ms, 13000);
    ck_assert_int_eq(i.rotates_at_ms, 16000);
    ck_assert_int_eq(i.cooldown_until_ms, 0);
    ck_assert_uint_eq(i.errors_in_row, 0);
    ck_assert_uint_eq(i.errors, 1);
    ck_assert_uint_eq(i.renewals, 0); /* the provider rotated, not dedupd */
    /* refresh brings the interval up to date without a pick */
    proxy_pool_refresh(p, 0, 19500);
    i = info(p, 0);
    ck_assert_int_eq(i.epoch, 3);
    ck_assert_int_eq(i.epoch_start_ms, 19000);
    ck_assert_int_eq(i.rotates_at_ms, 22000);
    /* a cooldown inside an interval still holds until its end */
    proxy_pool_acquire(p, 0);
    report(p, 0, PROXY_POOL_THROTTLED, "1", 19500, NULL);
    ck_assert_int_eq(proxy_pool_session_free_at(p, 0, 19600), 20500);
    ck_assert_int_eq(pick(p, NULL, NULL, 0, false, 20499, &s, &wu), PROXY_POOL_WAIT);
    ck_assert_int_eq(wu, 20500);
    ck_assert_int_eq(pick_ok(p, NULL, NULL, 0, false, 20500), 0);
    ck_assert_int_eq(info(p, 0).epoch, 3);
    proxy_pool_destroy(p);
}
END_TEST

Suite *proxy_pool_suite(void)
{
    Suite *s = suite_create("proxy_pool");
    TCase *tp = tcase_create("pick");
    tcase_add_checked_fixture(tp, setup, NULL);
    tcase_add_test(tp, test_pool_direct_when_nothing_configured);
    tcase_add_test(tp, test_pool_exits_round_robin_least_busy);
    tcase_add_test(tp, test_pool_pick_honours_country);
    tcase_add_test(tp, test_pool_pick_honours_rotation_mode);
    suite_add_tcase(s, tp);
    TCase *tc = tcase_create("cooldown");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_pool_throttled_retry_after_cools_down);
    tcase_add_test(tc, test_pool_throttled_default_and_clamp);
    tcase_add_test(tc, test_pool_proxy_down_replaces_cooldown);
    tcase_add_test(tc, test_pool_throttled_reports_the_requested_wait);
    tcase_add_test(tc, test_pool_target_failure_leaves_health_alone);
    suite_add_tcase(s, tc);
    TCase *ta = tcase_create("proxy_auth");
    tcase_add_checked_fixture(ta, setup, NULL);
    tcase_add_test(ta, test_pool_auth_failure_suspends_credential_set);
    tcase_add_test(ta, test_pool_auth_failure_without_other_credentials);
    tcase_add_test(ta, test_pool_auth_failure_on_plain_exit_cools_down);
    suite_add_tcase(s, ta);
    TCase *tr = tcase_create("rotation");
    tcase_add_checked_fixture(tr, setup, NULL);
    tcase_add_test(tr, test_pool_retirement_rules);
    tcase_add_test(tr, test_pool_renew_needs_provider_api);
    tcase_add_test(tr, test_pool_timed_interval);
    tcase_add_test(tr, test_pool_timed_rotation_clears_cooldown);
    suite_add_tcase(s, tr);
    return s;
}
