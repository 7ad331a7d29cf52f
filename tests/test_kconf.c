/* kconf_new: one kafka.* table for every client, each client given the
 * properties of its side and the common ones (librdkafka 2.0.2's
 * CONFIGURATION.md), dedupd's fixed pairs over them. */
#include <check.h>
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kconf.h"

/* A cfg of the environment overrides \p env only (no file). */
static struct cfg *load_env(char **env)
{
    struct cfg *cfg = NULL;
    char err[DD_ERRSTR_SIZE];
    ck_assert_msg(cfg_load(NULL, env, &cfg, err, sizeof(err)) == DD_OK, "%s",
                  err);
    return cfg;
}

/* A cfg whose kafka.* sets one property of each side and a common one. */
static struct cfg *load_cfg(void)
{
    char *env[] = {"DEDUPD_KAFKA__COMPRESSION__TYPE=zstd",
                   "DEDUPD_KAFKA__GROUP__INSTANCE__ID=pod-7",
                   "DEDUPD_KAFKA__CLIENT__ID=kconf-test", NULL};
    return load_env(env);
}

/* The value \p name has in \p kc ("" when unset or unknown). */
static const char *get(rd_kafka_conf_t *kc, const char *name)
{
    static char v[256];
    size_t n = sizeof(v);
    if (rd_kafka_conf_get(kc, name, v, &n) != RD_KAFKA_CONF_OK)
        v[0] = '\0';
    return v;
}

START_TEST(test_kconf_each_side_gets_its_properties)
{
    struct cfg *cfg = load_cfg();
    static const struct {
        enum kconf_client client;
        bool codec, instance;
    } cases[] = {
        {KCONF_PRODUCER, true, false},
        {KCONF_CONSUMER, false, true},
        {KCONF_ASSIGN_CONSUMER, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        rd_kafka_conf_t *kc = NULL;
        char err[DD_ERRSTR_SIZE];
        ck_assert_int_eq(kconf_new(cfg, cases[i].client, NULL, &kc, err,
                                   sizeof(err)), DD_OK);
        ck_assert_str_eq(get(kc, "client.id"), "kconf-test");
        ck_assert_int_eq(strcmp(get(kc, "compression.codec"), "zstd") == 0,
                         cases[i].codec);
        ck_assert_int_eq(strcmp(get(kc, "group.instance.id"), "pod-7") == 0,
                         cases[i].instance);
        rd_kafka_conf_destroy(kc);
    }
    cfg_destroy(cfg);
}
END_TEST

START_TEST(test_kconf_fixed_pairs_win)
{
    struct cfg *cfg = load_cfg();
    const char *const fixed[] = {"compression.type", "lz4", NULL};
    rd_kafka_conf_t *kc = NULL;
    char err[DD_ERRSTR_SIZE];
    ck_assert_int_eq(kconf_new(cfg, KCONF_PRODUCER, fixed, &kc, err,
                               sizeof(err)), DD_OK);
    ck_assert_str_eq(get(kc, "compression.codec"), "lz4");
    rd_kafka_conf_destroy(kc);
    cfg_destroy(cfg);
}
END_TEST

START_TEST(test_kconf_producer_codec_lz4_unless_named)
{
    char *none[] = {NULL};
    char *alias[] = {"DEDUPD_KAFKA__COMPRESSION__CODEC=zstd", NULL};
    struct {
        char **env;
        const char *want;
    } cases[] = {{none, "lz4"}, {alias, "zstd"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct cfg *cfg = load_env(cases[i].env);
        rd_kafka_conf_t *kc = NULL;
        char err[DD_ERRSTR_SIZE];
        ck_assert_int_eq(kconf_new(cfg, KCONF_PRODUCER, NULL, &kc, err,
                                   sizeof(err)), DD_OK);
        ck_assert_str_eq(get(kc, "compression.codec"), cases[i].want);
        rd_kafka_conf_destroy(kc);
        cfg_destroy(cfg);
    }
}
END_TEST

Suite *kconf_suite(void)
{
    Suite *s = suite_create("kconf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_kconf_each_side_gets_its_properties);
    tcase_add_test(tc, test_kconf_fixed_pairs_win);
    tcase_add_test(tc, test_kconf_producer_codec_lz4_unless_named);
    suite_add_tcase(s, tc);
    return s;
}
