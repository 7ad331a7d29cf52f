/**
 * @file kconf.h
 * @brief librdkafka configuration shared by the producer and the consumers.
 *
 * Applies broker.bootstrap_servers, the SASL options, then every kafka.* option
 * (passed to rd_kafka_conf_set unchanged, kcat-style), then the caller's fixed
 * settings, routes librdkafka's logs through log.h (rd_kafka_set_log_queue is
 * not needed: the log callback formats one JSON line).
 */
#ifndef DEDUPD_KCONF_H
#define DEDUPD_KCONF_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>

#include "err.h"

struct cfg;

/** The client a kconf_new() configuration is for. */
enum kconf_client {
    KCONF_PRODUCER,       /**< a producer (also the Admin API's handles) */
    KCONF_CONSUMER,       /**< a group consumer */
    KCONF_ASSIGN_CONSUMER /**< a consumer without a group (assign() only):
                               neither side's kafka.* properties */
};

/**
 * @brief Build a rd_kafka_conf_t for a \p client from \p cfg (a kafka.*
 *        property that librdkafka 2.0.2's CONFIGURATION.md marks for the
 *        other side only is left out: group.instance.id for a producer,
 *        compression.type for a consumer; librdkafka would warn on each)
 *        plus \p fixed name/value pairs.  A producer's codec is lz4
 *        unless kafka.compression.type (or .codec) names another
 *        (NULL-terminated array "name","value",...,NULL), which override
 *        kafka.* (they carry dedupd's guarantees, e.g. enable.idempotence).
 *        Names and values are librdkafka's (CONFIGURATION.md).
 * @param cfg    Borrowed for the call.
 * @param fixed  Optional (may be NULL): borrowed for the call.
 * @param out  Out: conf, owned by the caller (rd_kafka_new takes it on success).
 *             Untouched on failure.
 * @param errstr  Optional (may be NULL).
 * @param errstr_size  Size of \p errstr in bytes.
 * @returns DD_OK; DD_ERR_INVAL ("config: kafka.NAME: librdkafka's reason";
 *          not retriable).
 * @locality any thread.  The log callback it installs runs on librdkafka's
 *           threads.
 */
dd_err_t kconf_new(const struct cfg *cfg, enum kconf_client client,
                   const char *const *fixed, rd_kafka_conf_t **out,
                   char *errstr, size_t errstr_size) DD_WUR;

#endif
