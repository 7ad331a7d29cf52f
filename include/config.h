/**
 * @file config.h
 * @brief dedupd configuration: one option table, loaded once, then frozen.
 *
 * Load order: defaults (only in the table in config.c), then one JSON file of
 * nested objects whose dotted paths are the option names
 * (`{"fetch": {"timeout_ms": 10000}}` is `fetch.timeout_ms`), then the environment:
 * `DEDUPD_` + the path upper-cased with `.` as `__` (DEDUPD_FETCH__TIMEOUT_MS).
 * Only DEDUPD_* variables that contain "__" are options (others, such as
 * DEDUPD_STACK_DIR, belong to the scripts and are ignored).
 * `kafka.*` keys pass through to librdkafka (rd_kafka_conf_set) unchanged.
 * Unknown keys, wrong types and out-of-range values stop start-up with
 * "FILE: KEY: message" (the value is never echoed for secret options).
 */
#ifndef DEDUPD_CONFIG_H
#define DEDUPD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

/** A list of strings (owned by the cfg). */
struct cfg_strlist {
    char **v;
    size_t n;
};

/** One proxy provider (proxy.providers[i]).  Strings owned by the cfg. */
struct cfg_provider {
    char *name;            /**< shown in results and logs */
    char *gateway;         /**< host or IP of the provider's gateway */
    int64_t http_port;     /**< 0 = none */
    int64_t socks_port;    /**< 0 = none (used when http_port is 0) */
    char *username;        /**< template: {user} {session} {country} */
    char *user;            /**< account name for {user} */
    char *password;        /**< secret: from password_env or password_file */
    char *rotation;        /**< sticky | timed | per_request */
    int64_t rotate_every_s;/**< timed: the provider's rotation interval */
    struct cfg_strlist countries; /**< upper-case ISO codes; empty = any */
    int64_t sessions;      /**< sessions per country */
    char *api_url;         /**< provider API base URL or "" */
    char *api_key;         /**< secret: from api_key_env or api_key_file */
};

/** proxy.providers: \p n providers (owned by the cfg). */
struct cfg_providers {
    struct cfg_provider *v;
    size_t n;
};

/** The frozen configuration.  Every field is documented in the option table. */
struct cfg {
    char *instance_id;
    char *bootstrap_servers;
    char *sasl_username;
    char *sasl_password;
    char *group_id;
    int64_t prefetch_kick_ms; /* consumer.prefetch_kick_ms, 0 = off */
    char *topic_jobs, *topic_results, *topic_conflicts, *topic_dlq;
    char *store_path;
    int64_t store_ops_ttl_ms, store_failed_ttl_ms, store_lease_ms;
    int64_t store_block_cache_bytes;
    int64_t store_max_wal_bytes;
    bool store_sync;
    int64_t fetch_timeout_ms, fetch_connect_timeout_ms;
    int64_t fetch_max_inflight, fetch_max_attempts;
    int64_t fetch_backoff_base_ms, fetch_backoff_max_ms;
    int64_t fetch_cooldown_default_ms, fetch_retry_after_max_ms;
    int64_t fetch_max_body_bytes, fetch_max_redirects;
    int64_t fetch_deadline_ms, fetch_max_rotations;
    struct cfg_strlist fetch_allow_targets;
    struct cfg_strlist fetch_blocked_statuses;
    char *fetch_user_agent;
    struct cfg_strlist proxy_exits;
    struct cfg_providers proxy_providers;
    int64_t fetch_session_max_uses, fetch_session_max_errors,
        fetch_session_max_age_ms;
    int64_t fetch_per_host_max_inflight, fetch_per_host_rate_per_min,
        fetch_per_host_burst;
    int64_t fetch_proxy_auth_cooldown_ms;
    int64_t fetch_workflow_max_restarts, fetch_workflow_step_retries;
    struct cfg_strlist identity_variance_headers;
    struct cfg_strlist identity_credential_headers;
    bool identity_trust_headers;
    int64_t store_index_max_bytes;
    int64_t store_validators_ttl_ms, store_max_body_bytes;
    int64_t limits_max_job_bytes, limits_max_result_bytes;
    char *admin_listen, *api_listen, *api_token, *api_scope;
    int64_t api_receipt_ttl_ms;
    int64_t api_max_body_bytes;
    char *log_level;
    char *log_debug;
    char *tail_store_path;
    char *tail_group_id;
    int64_t tail_ttl_ms;
    int64_t shutdown_grace_ms;
    int64_t rebalance_grace_ms;
    char *processing_guarantee; /**< "at_least_once" or "exactly_once" */
    int64_t processing_commit_interval_ms, processing_transaction_timeout_ms;
    /** kafka.* pass-through pairs (name without "kafka.", value). */
    struct cfg_strlist kafka_names, kafka_values;
};

/** @returns whether \p cfg asks for processing.guarantee exactly_once. */
bool cfg_exactly_once(const struct cfg *cfg);

/**
 * @brief Load the configuration: defaults, then \p path (may be NULL), then the
 *        environment \p envp (NULL-terminated "K=V" array; NULL = none).
 * @param path  JSON file (ConfigMap), NUL-terminated, or NULL for none
 *              (borrowed).  Duplicate keys are refused.
 * @param envp  Borrowed; entries that are not DEDUPD_*__* are ignored.
 * @param out   Out: the frozen config, owned by the caller: cfg_destroy().
 *              Untouched on failure.
 * @param errstr  Optional (may be NULL): "FILE: KEY: why" (or "FILE:LINE:COL:
 *                why (byte N)" for a JSON syntax error, "environment
 *                DEDUPD_X__Y: KEY: why", "config: KEY: why" for a cross-field
 *                rule without a file); never a secret's value.  One line
 *                of UTF-8: a control character or a byte that is not UTF-8
 *                in a quoted key or value shows as '?'.
 * @param errstr_size  Size of \p errstr in bytes (DD_ERRSTR_SIZE).
 * @returns DD_OK; DD_ERR_INVAL (unknown key, wrong type, out of range, a
 *          cross-field rule, a provider secret that cannot be read; not
 *          retriable); DD_ERR_IO (the file cannot be read; not retriable by
 *          dedupd); DD_ERR_NOMEM (the cfg itself; a string copy that fails
 *          stops the process, dd.h).
 * @locality the main thread at start-up (reads provider secrets with
 *           getenv(3) and files).
 */
dd_err_t cfg_load(const char *path, char *const *envp, struct cfg **out,
                  char *errstr, size_t errstr_size) DD_WUR;

/** @brief Free, wiping provider secrets first; cfg_destroy(NULL) is a no-op.
 *  @locality any thread, once nothing borrows from \p cfg. */
void cfg_destroy(struct cfg *cfg);

/**
 * @brief Write the effective configuration as JSON to \p fp, secrets redacted
 *        as "[redacted]" (also kafka.* names containing "password", "secret",
 *        "key.pem" or "token").
 * @param cfg  Borrowed.
 * @param fp   Open stream (borrowed); keys sorted, 2-space indent, one
 *             trailing newline.  Write errors are not reported.
 * @locality any thread.
 */
void cfg_dump(const struct cfg *cfg, FILE *fp);

/**
 * @brief Write the option table as Markdown (docs/CONFIG.md) to \p fp
 *        (borrowed): one row per option, defaults and ranges from the table.
 * @locality any thread.
 */
void cfg_doc_markdown(FILE *fp);

#endif
