/*
 * bench_ops.h: the op records of the restore benchmark (changelog_fill and
 * restore_bench --synthetic make the same ones).
 */
#ifndef DEDUPD_BENCH_OPS_H
#define DEDUPD_BENCH_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "key.h"
#include "store.h"

#define BENCH_OPS_TTL_MS (72LL * 3600 * 1000)

/** @brief Op \p n's record and its op_id ("bench:<n>", or its hex SHA-256
 *         with \p hex_ids): complete, generation 1, outbox sent, hashes of
 *         "req:<n>" / "event:<n>", a lease owner, source "<jobs>/<part>/<n>",
 *         expires_at now + 72 h. */
static inline void bench_op_of(long n, bool hex_ids, const char *jobs, int32_t part,
                  int64_t now, struct store_op *op, char *op_id, size_t idsz)
{
    char tmp[64];
    int l = snprintf(tmp, sizeof(tmp), "bench:%ld", n);
    if (hex_ids)
        key_sha256_hex(tmp, (size_t)l, op_id);
    else
        snprintf(op_id, idsz, "%s", tmp);
    memset(op, 0, sizeof(*op));
    op->state = STORE_OP_COMPLETE;
    op->outbox_state = STORE_OUTBOX_SENT;
    op->generation = 1;
    op->created_at_ms = now;
    op->updated_at_ms = now;
    op->expires_at_ms = now + BENCH_OPS_TTL_MS;
    op->attempts = 1;
    l = snprintf(tmp, sizeof(tmp), "req:%ld", n);
    key_sha256_hex(tmp, (size_t)l, op->request_hash);
    l = snprintf(tmp, sizeof(tmp), "event:%ld", n);
    key_sha256_hex(tmp, (size_t)l, op->event_key);
    snprintf(op->lease_owner, sizeof(op->lease_owner),
             "dedupd-0#18f3a2b4c5d60001");
    snprintf(op->source, sizeof(op->source), "%.200s/%d/%ld", jobs,
             (int)part, n);
}

#endif
