/* Config loading: every error path names the source and the key, and secrets
 * never appear in errors or in the dump. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "changelog.h"
#include "config.h"

static char g_path[64];
static char g_err[DD_ERRSTR_SIZE];

static const char *write_cfg(const char *text)
{
    snprintf(g_path, sizeof(g_path), "/tmp/dedupd-test-cfg-XXXXXX");
    int fd = mkstemp(g_path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return g_path;
}

static dd_err_t load(const char *text, char *const *env, struct cfg **out)
{
    g_err[0] = '\0';
    dd_err_t err = cfg_load(text ? write_cfg(text) : NULL, env, out, g_err,
                            sizeof(g_err));
    if (text)
        unlink(g_path);
    return err;
}

static void expect_error(const char *text, char *const *env, const char *want)
{
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load(text, env, &cfg), DD_ERR_INVAL);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strstr(g_err, want), "error '%s' lacks '%s'", g_err, want);
}

START_TEST(test_config_defaults_load)
{
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load(NULL, NULL, &cfg), DD_OK);
    ck_assert_int_eq(cfg->fetch_timeout_ms, 30000);
    ck_assert_str_eq(cfg->topic_jobs, "scrape.jobs");
    ck_assert(cfg->identity_trust_headers);
    ck_assert(!cfg_exactly_once(cfg));
    ck_assert_int_eq(cfg->processing_commit_interval_ms, 500);
    cfg_destroy(cfg);
    const char *env[] = {"DEDUPD_PROCESSING__GUARANTEE=exactly_once", NULL};
    ck_assert_int_eq(load(NULL, (char *const *)env, &cfg), DD_OK);
    ck_assert(cfg_exactly_once(cfg));
    cfg_destroy(cfg);
}
END_TEST

/* The changelog keeps an op's last record as long as the op can live: a
 * failed op lives store.failed_ttl_ms + half the ops TTL when that is longer
 * (store_record_life_ms); the retention counted the ops TTL alone, so
 * time-based deletion could take a failed op's record while it lived. */
START_TEST(test_config_changelog_retention_covers_the_longest_record_life)
{
    const int64_t tail = 86400000LL + 3600000LL; /* longest deadline + 1 h */
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load(NULL, NULL, &cfg), DD_OK);
    ck_assert_int_eq(changelog_retention_ms(cfg), 259200000LL + tail);
    cfg_destroy(cfg);
    const char *env[] = {"DEDUPD_STORE__OPS_TTL_MS=7200000",
                         "DEDUPD_STORE__FAILED_TTL_MS=86400000", NULL};
    ck_assert_int_eq(load(NULL, (char *const *)env, &cfg), DD_OK);
    ck_assert_int_eq(changelog_retention_ms(cfg),
                     86400000LL + 3600000LL + tail);
    cfg_destroy(cfg);
}
END_TEST

START_TEST(test_config_nested_file_and_env_override)
{
    char *env[] = {"DEDUPD_FETCH__TIMEOUT_MS=1234", "DEDUPD_STACK_DIR=/ignored",
                   "DEDUPD_KAFKA__SOCKET__TIMEOUT__MS=5000", NULL};
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load("{\"fetch\": {\"timeout_ms\": 999, \"max_attempts\": 3}}",
                          env, &cfg), DD_OK);
    ck_assert_int_eq(cfg->fetch_timeout_ms, 1234); /* env wins over file */
    ck_assert_int_eq(cfg->fetch_max_attempts, 3);
    ck_assert_uint_eq(cfg->kafka_names.n, 1);
    ck_assert_str_eq(cfg->kafka_names.v[0], "socket.timeout.ms");
    ck_assert_str_eq(cfg->kafka_values.v[0], "5000");
    cfg_destroy(cfg);
}
END_TEST

/* A list from the environment splits on commas and on white space (what
 * `scripts/stack.sh env` prints for PROXY_EXITS). */
START_TEST(test_config_env_list_commas_or_spaces)
{
    char *env[] = {"DEDUPD_PROXY__EXITS= http://127.0.0.2:18888  http://127.0.0.3:18888,"
                   "http://127.0.0.4:18888 ,",
                   NULL};
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load("{}", env, &cfg), DD_OK);
    ck_assert_uint_eq(cfg->proxy_exits.n, 3);
    ck_assert_str_eq(cfg->proxy_exits.v[0], "http://127.0.0.2:18888");
    ck_assert_str_eq(cfg->proxy_exits.v[1], "http://127.0.0.3:18888");
    ck_assert_str_eq(cfg->proxy_exits.v[2], "http://127.0.0.4:18888");
    cfg_destroy(cfg);
}
END_TEST

START_TEST(test_config_unknown_key_names_file_and_key)
{
    expect_error("{\"fetch\": {\"timeout\": 5}}", NULL, ": fetch.timeout: unknown option");
    ck_assert_msg(strncmp(g_err, "/tmp/dedupd-test-cfg-", 21) == 0, "%s", g_err);
}
END_TEST

START_TEST(test_config_wrong_types)
{
    expect_error("{\"fetch\": {\"timeout_ms\": \"10\"}}", NULL,
                 "fetch.timeout_ms: must be an integer");
    expect_error("{\"store\": {\"sync\": 1}}", NULL, "store.sync: must be a boolean");
    expect_error("{\"topics\": {\"jobs\": 7}}", NULL, "topics.jobs: must be a string");
    expect_error("{\"proxy\": {\"exits\": \"http://x:1\"}}", NULL,
                 "proxy.exits: must be an array of strings");
    expect_error("{\"kafka\": {\"acks\": [1]}}", NULL,
                 "kafka.acks: must be a string, integer or boolean");
}
END_TEST

START_TEST(test_config_out_of_range_shows_range_and_unit)
{
    expect_error("{\"fetch\": {\"timeout_ms\": 5}}", NULL,
                 "fetch.timeout_ms: 5 is out of range [100, 600000] ms");
}
END_TEST

START_TEST(test_config_env_errors)
{
    char *e1[] = {"DEDUPD_FETCH__TIMEOUT_MS=abc", NULL};
    expect_error(NULL, e1, "environment DEDUPD_FETCH__TIMEOUT_MS: fetch.timeout_ms: "
                           "'abc' is not an integer");
    char *e2[] = {"DEDUPD_FETCH__NOPE=1", NULL};
    expect_error(NULL, e2, "fetch.nope: unknown option");
    char *e3[] = {"DEDUPD_STORE__SYNC=maybe", NULL};
    expect_error(NULL, e3, "store.sync: 'maybe' is not a boolean");
}
END_TEST

/* The message is one line of UTF-8 (found by fuzz_config): a control
 * character or a byte that is not UTF-8 in a quoted key or value shows as
 * '?', the rest as it was. */
START_TEST(test_config_error_is_one_line_of_utf8)
{
    expect_error("{\"a\\u007fb\\nc\xc3\xa9\": 1}", NULL,
                 ": a?b?c\xc3\xa9: unknown option");
    char *env[] = {"DEDUPD_STORE__SYNC=x\033[2Jy\xc3", NULL};
    expect_error(NULL, env, "store.sync: 'x?[2Jy?' is not a boolean");
}
END_TEST

START_TEST(test_config_json_syntax_error_has_line)
{
    expect_error("{\n  \"fetch\": {\n    \"timeout_ms\": ,\n  }\n}", NULL, ":3:");
}
END_TEST

START_TEST(test_config_missing_file)
{
    struct cfg *cfg = NULL;
    ck_assert_int_ne(cfg_load("/nonexistent/dedupd.json", NULL, &cfg, g_err,
                              sizeof(g_err)), DD_OK);
    ck_assert_msg(strstr(g_err, "/nonexistent/dedupd.json: unable to open"), "%s",
                  g_err);
}
END_TEST

START_TEST(test_config_cross_field_rules)
{
    expect_error("{\"log\": {\"level\": \"loud\"}}", NULL, "log.level: 'loud'");
    expect_error("{\"processing\": {\"guarantee\": \"exactly-once\"}}", NULL,
                 "processing.guarantee: 'exactly-once' is not one of "
                 "at_least_once, exactly_once");
    expect_error("{\"fetch\": {\"backoff_base_ms\": 500, \"backoff_max_ms\": 100}}",
                 NULL, "fetch.backoff_max_ms: must be at least");
    expect_error("{\"fetch\": {\"blocked_statuses\": [200]}}", NULL,
                 "fetch.blocked_statuses: '200'");
    expect_error("{\"fetch\": {\"allow_targets\": [\"127.0.0.1/99\"]}}", NULL,
                 "fetch.allow_targets: '127.0.0.1/99' is not");
    expect_error("{\"proxy\": {\"exits\": [\"ftp://x:1\"]}}", NULL,
                 "proxy.exits: 'ftp://x:1' must start with");
    /* issue 15: an op must outlive its lease and its default deadline */
    expect_error("{\"store\": {\"ops_ttl_ms\": 1000}}", NULL,
                 "store.ops_ttl_ms: 1000 ms ends before a lease");
    /* issue 15: a receipt lives as long as the op it answers for */
    expect_error("{\"api\": {\"receipt_ttl_ms\": 86400000}}", NULL,
                 ": api.receipt_ttl_ms: 86400000 ms ends before the op "
                 "it answers for (store.ops_ttl_ms 259200000)");
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load(NULL, NULL, &cfg), DD_OK);
    ck_assert_int_eq(cfg->api_receipt_ttl_ms, 0); /* the op's life */
    cfg_destroy(cfg);
    char *at_ops_ttl[] = {"DEDUPD_API__RECEIPT_TTL_MS=259200000", NULL};
    ck_assert_int_eq(load(NULL, at_ops_ttl, &cfg), DD_OK);
    cfg_destroy(cfg);
    /* issue 12: a drained revoke fits between a fetch and the poll interval */
    expect_error("{\"rebalance\": {\"grace_ms\": 1000}}", NULL,
                 "rebalance.grace_ms: 1000 must be at least fetch.timeout_ms");
    expect_error("{\"rebalance\": {\"grace_ms\": 400000}}", NULL,
                 "and below kafka.max.poll.interval.ms (300000)");
}
END_TEST

/* With several rules broken, the first in the fixed order is the one named:
 * log.level, backoff, blocked statuses, proxy exits, allow_targets.  Each
 * error names "config" when there is no file. */
START_TEST(test_config_cross_field_rules_first_in_order)
{
    /* one fault per rule, in rule order (a rule's fault may take two
     * variables: an empty second one is skipped) */
    static char *fault[5][2] = {
        {"DEDUPD_LOG__LEVEL=loud", NULL},
        {"DEDUPD_FETCH__BACKOFF_BASE_MS=500", "DEDUPD_FETCH__BACKOFF_MAX_MS=100"},
        {"DEDUPD_FETCH__BLOCKED_STATUSES=200", NULL},
        {"DEDUPD_PROXY__EXITS=ftp://x:1", NULL},
        {"DEDUPD_FETCH__ALLOW_TARGETS=127.0.0.1/99", NULL},
    };
    static const char *const want[] = {
        "config: log.level: 'loud' is not one of error, warning, notice, "
        "info, debug",
        "config: fetch.backoff_max_ms: must be at least fetch.backoff_base_ms",
        "config: fetch.blocked_statuses: '200' is not an HTTP status 400..599",
        "config: proxy.exits: 'ftp://x:1' must start with http://, socks5:// "
        "or socks5h://",
        "config: fetch.allow_targets: '127.0.0.1/99' is not an IPv4 or IPv6 "
        "CIDR (e.g. 127.0.0.1/32)",
    };
    /* faults k..4 set: the one of rule k is named */
    char *env[11];
    for (size_t k = 0; k < 5; k++) {
        size_t n = 0;
        for (size_t i = k; i < 5; i++)
            for (size_t j = 0; j < 2 && fault[i][j]; j++)
                env[n++] = fault[i][j];
        env[n] = NULL;
        struct cfg *cfg = NULL;
        ck_assert_int_eq(load(NULL, env, &cfg), DD_ERR_INVAL);
        ck_assert_ptr_null(cfg);
        ck_assert_str_eq(g_err, want[k]);
    }
}
END_TEST

/* A provider's countries are kept upper-cased, in order; its fields get
 * their defaults. */
START_TEST(test_config_provider_countries_and_defaults)
{
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load("{\"proxy\": {\"providers\": [{\"name\": \"p\", "
                          "\"gateway\": \"g\", \"socks_port\": 1080, "
                          "\"countries\": [\"de\", \"Us\", \"FR\"]}]}}",
                          NULL, &cfg), DD_OK);
    ck_assert_uint_eq(cfg->proxy_providers.n, 1);
    const struct cfg_provider *p = &cfg->proxy_providers.v[0];
    ck_assert_uint_eq(p->countries.n, 3);
    ck_assert_str_eq(p->countries.v[0], "DE");
    ck_assert_str_eq(p->countries.v[1], "US");
    ck_assert_str_eq(p->countries.v[2], "FR");
    ck_assert_str_eq(p->username, "{user}");
    ck_assert_str_eq(p->user, "");
    ck_assert_str_eq(p->rotation, "sticky");
    ck_assert_str_eq(p->api_url, "");
    ck_assert_int_eq(p->http_port, 0);
    ck_assert_int_eq(p->socks_port, 1080);
    ck_assert_int_eq(p->sessions, 1);
    ck_assert_int_eq(p->rotate_every_s, 0);
    ck_assert_ptr_null(p->password);
    ck_assert_ptr_null(p->api_key);
    cfg_destroy(cfg);
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", "
                 "\"gateway\": \"g\", \"http_port\": 1, \"countries\": \"de\"}]}}",
                 NULL, ": proxy.providers[0].countries: must be an array of "
                       "ISO 3166-1 alpha-2 codes");
    expect_error("{\"proxy\": {\"providers\": [5]}}", NULL,
                 ": proxy.providers[0]: must be an object");
    expect_error("[]", NULL, ": top level must be an object");
}
END_TEST

START_TEST(test_config_credentials_in_exit_url_refused_without_echo)
{
    expect_error("{\"proxy\": {\"exits\": [\"http://u:hunter2@x:1\"]}}", NULL,
                 "carries credentials");
    ck_assert_msg(!strstr(g_err, "hunter2"), "secret echoed: %s", g_err);
}
END_TEST

START_TEST(test_config_secret_value_never_in_errors)
{
    char *env[] = {"DEDUPD_API__TOKEN=s3cret-token", "DEDUPD_FETCH__NOPE=1", NULL};
    expect_error(NULL, env, "unknown option");
    ck_assert(!strstr(g_err, "s3cret-token"));
}
END_TEST

START_TEST(test_config_providers_errors)
{
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\"}]}}", NULL,
                 "proxy.providers[0]: name and gateway are required");
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", \"gateway\": \"g\"}]}}",
                 NULL, "proxy.providers[0]: http_port or socks_port is required");
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", \"gateway\": \"g\", "
                 "\"http_port\": 1, \"pasword_env\": \"X\"}]}}", NULL,
                 "proxy.providers[0].pasword_env: unknown field");
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", \"gateway\": \"g\", "
                 "\"http_port\": 1, \"password_env\": \"DD_TEST_UNSET_VAR\"}]}}",
                 NULL, "proxy.providers[0].password_env: the environment "
                       "variable it names is not set");
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", \"gateway\": \"g\", "
                 "\"http_port\": 1, \"rotation\": \"often\"}]}}", NULL,
                 "rotation: 'often' is not sticky, timed or per_request");
    char *env[] = {"DEDUPD_PROXY__PROVIDERS=x", NULL};
    expect_error(NULL, env, "set providers in the configuration file");
}
END_TEST

/* jansson's error text quotes up to 20 bytes near the error: a short token
 * with a typo.  The error keeps the kind, line, column and byte only. */
START_TEST(test_config_json_syntax_error_never_quotes_the_file)
{
    static const char *const bad[] = {
        "{\"api\": {\"token\": \"Mc7e6d5c4b}}",
        "{\"api\": {\"token\": \"Mc7e6d5c4b\\q\"}}",
        "{\"api\": {\"token\": Mc7e6d5c4b}}",
        "{\"api\": {\"token\": \"Mc7e6d5c4b\n\"}}",
        "{\"api\": {\"token\": \"Mc7e6d5c4b\"}} Mc7e6d5c4b",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_error(bad[i], NULL, ":1:");
        ck_assert_msg(!strstr(g_err, "Mc7e6d5c4b"), "file echoed: %s", g_err);
        ck_assert_msg(!strstr(g_err, "near '"), "file quoted: %s", g_err);
        ck_assert_msg(strstr(g_err, "(byte "), "no byte position: %s", g_err);
    }
    expect_error("{\"api\": {\n  \"token\": \"Mc7e6d5c4b\\q\"}}", NULL,
                 ":2:24: invalid escape (byte ");
    expect_error("{\"api\": {\"token\": ", NULL, "near end of file");
}
END_TEST

/* password_env / api_key_env name a variable; a secret pasted there instead
 * must not be echoed when no such variable is set. */
START_TEST(test_config_unset_secret_variable_not_echoed)
{
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", \"gateway\": \"g\", "
                 "\"http_port\": 1, \"password_env\": \"hunter2-p@ss:%41\"}]}}",
                 NULL, ": proxy.providers[0].password_env: the environment "
                       "variable it names is not set");
    ck_assert_msg(!strstr(g_err, "hunter2"), "secret echoed: %s", g_err);
    expect_error("{\"proxy\": {\"providers\": [{\"name\": \"p\", \"gateway\": \"g\", "
                 "\"http_port\": 1}, {\"name\": \"q\", \"gateway\": \"g\", "
                 "\"http_port\": 1, \"api_key_env\": \"hunter2-k3y\"}]}}",
                 NULL, ": proxy.providers[1].api_key_env: the environment "
                       "variable it names is not set");
    ck_assert_msg(!strstr(g_err, "hunter2"), "secret echoed: %s", g_err);
}
END_TEST

/* A secret reference of another type than string stops start-up (it was
 * taken as absent: the provider ran without its credentials). */
START_TEST(test_config_secret_reference_must_be_a_string)
{
    static const struct {
        const char *field, *want;
    } c[] = {
        {"\"password_env\": 5", "proxy.providers[0].password_env: must be a string"},
        {"\"password_file\": true", "proxy.providers[0].password_file: must be a string"},
        {"\"api_key_env\": [\"hunter2\"]", "proxy.providers[0].api_key_env: must be a string"},
        {"\"api_key_file\": {\"v\": \"hunter2\"}", "proxy.providers[0].api_key_file: must be a string"},
        {"\"password_env\": null", "proxy.providers[0].password_env: must be a string"},
        {"\"password_env\": \"DD_TEST_SET_VAR\", \"password_file\": 7",
         "proxy.providers[0].password_file: must be a string"},
    };
    setenv("DD_TEST_SET_VAR", "x", 1);
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{\"proxy\": {\"providers\": [{\"name\": \"p\", "
                 "\"gateway\": \"g\", \"http_port\": 1, %s}]}}", c[i].field);
        expect_error(text, NULL, c[i].want);
        ck_assert_msg(strncmp(g_err, "/tmp/dedupd-test-cfg-", 21) == 0, "%s", g_err);
        ck_assert_msg(!strstr(g_err, "hunter2"), "value echoed: %s", g_err);
    }
    unsetenv("DD_TEST_SET_VAR");
}
END_TEST

/* "FILE: proxy.providers[N].KEY: why": the key path is never cut, however
 * long the file path (a fixed buffer held both). */
START_TEST(test_config_provider_errors_name_key_with_long_path)
{
    char dir[] = "/tmp/dedupd-test-cfg-dir-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sub[256], path[512]; /* about 330 bytes (255 at most a name) */
    int n = snprintf(sub, sizeof(sub), "%s/", dir);
    while (n < 180)
        sub[n++] = 's';
    sub[n] = '\0';
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    n = snprintf(path, sizeof(path), "%s/", sub);
    while (n < 330)
        path[n++] = 'p';
    strcpy(path + n, ".json");
    static const struct {
        const char *field, *want;
    } c[] = {
        {"\"password_env\": \"DD_TEST_UNSET_VAR\"",
         "proxy.providers[1].password_env: the environment variable it names "
         "is not set"},
        {"\"api_key_file\": 5", "proxy.providers[1].api_key_file: must be a string"},
        {"\"pasword_env\": \"X\"", "proxy.providers[1].pasword_env: unknown field"},
        {"\"user\": 5", "proxy.providers[1].user: must be a string"},
        {"\"sessions\": 0", "proxy.providers[1].sessions: must be an integer in"},
        {"\"rotation\": \"often\"", "proxy.providers[1].rotation: 'often' is not"},
        {"\"countries\": [\"usa\"]", "proxy.providers[1].countries[0]: not an ISO"},
        {"\"password_file\": \"/nonexistent/pw\"",
         "proxy.providers[1].password_file: /nonexistent/pw: No such file"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text), "{\"proxy\": {\"providers\": [{\"name\": \"p\", "
                 "\"gateway\": \"g\", \"http_port\": 1}, {\"name\": \"q\", "
                 "\"gateway\": \"g\", \"http_port\": 1, %s}]}}", c[i].field);
        FILE *fp = fopen(path, "w");
        ck_assert_ptr_nonnull(fp);
        fputs(text, fp);
        fclose(fp);
        char err[1024] = "";
        struct cfg *cfg = NULL;
        ck_assert_int_eq(cfg_load(path, NULL, &cfg, err, sizeof(err)), DD_ERR_INVAL);
        char want[1024];
        snprintf(want, sizeof(want), "%s: %s", path, c[i].want);
        ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error '%s', want '%s...'",
                      err, want);
    }
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}
END_TEST

START_TEST(test_config_dump_redacts_every_secret)
{
    setenv("DD_TEST_PROXY_PW", "pr0xy-p@ss%41", 1);
    char *env[] = {"DEDUPD_API__TOKEN=tok-9f8e", "DEDUPD_BROKER__SASL_PASSWORD=sasl-7d6c",
                   "DEDUPD_BROKER__SASL_USERNAME=user", NULL};
    struct cfg *cfg = NULL;
    ck_assert_int_eq(load("{\"kafka\": {\"sasl.password\": \"k-5b4a\", "
                          "\"ssl.key.password\": \"k-3c2b\"}, "
                          "\"proxy\": {\"providers\": [{\"name\": \"p\", "
                          "\"gateway\": \"g\", \"http_port\": 1, "
                          "\"password_env\": \"DD_TEST_PROXY_PW\"}]}}",
                          env, &cfg), DD_OK);
    ck_assert_str_eq(cfg->proxy_providers.v[0].password, "pr0xy-p@ss%41");
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    cfg_dump(cfg, fp);
    fclose(fp);
    const char *secrets[] = {"tok-9f8e", "sasl-7d6c", "k-5b4a", "k-3c2b",
                             "pr0xy-p@ss%41"};
    for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++)
        ck_assert_msg(!strstr(buf, secrets[i]), "dump shows %s", secrets[i]);
    ck_assert(strstr(buf, "[redacted]"));
    free(buf);
    cfg_destroy(cfg);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_config_defaults_load);
    tcase_add_test(tc, test_config_nested_file_and_env_override);
    tcase_add_test(tc, test_config_env_list_commas_or_spaces);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_config_unknown_key_names_file_and_key);
    tcase_add_test(tc, test_config_wrong_types);
    tcase_add_test(tc, test_config_out_of_range_shows_range_and_unit);
    tcase_add_test(tc, test_config_env_errors);
    tcase_add_test(tc, test_config_error_is_one_line_of_utf8);
    tcase_add_test(tc, test_config_json_syntax_error_has_line);
    tcase_add_test(tc, test_config_missing_file);
    tcase_add_test(tc, test_config_cross_field_rules);
    tcase_add_test(tc, test_config_changelog_retention_covers_the_longest_record_life);
    tcase_add_test(tc, test_config_cross_field_rules_first_in_order);
    tcase_add_test(tc, test_config_provider_countries_and_defaults);
    tcase_add_test(tc, test_config_providers_errors);
    tcase_add_test(tc, test_config_secret_reference_must_be_a_string);
    tcase_add_test(tc, test_config_provider_errors_name_key_with_long_path);
    suite_add_tcase(s, tc);
    tc = tcase_create("secrets");
    tcase_add_test(tc, test_config_credentials_in_exit_url_refused_without_echo);
    tcase_add_test(tc, test_config_secret_value_never_in_errors);
    tcase_add_test(tc, test_config_json_syntax_error_never_quotes_the_file);
    tcase_add_test(tc, test_config_unset_secret_variable_not_echoed);
    tcase_add_test(tc, test_config_dump_redacts_every_secret);
    suite_add_tcase(s, tc);
    return s;
}
