/*
 * prefetch_kick: wakes librdkafka's fetcher while a consumer drains its
 * prefetch queue, because librdkafka 2.0.2 does not.
 *
 * The rule it works around (librdkafka 2.0.2, rdkafka_fetcher.c
 * rd_kafka_toppar_fetch_decide): a partition is "not fetchable" while its
 * fetch queue holds queued.min.messages messages or
 * queued.max.messages.kbytes bytes, both counted over the queue it is
 * forwarded to (rd_kafka_q_len follows the forward: for a group consumer,
 * the consumer queue that holds every assigned partition's prefetched
 * messages); such a partition's fetch backoff is RD_TS_MAX, so its broker
 * thread decides again only when it next wakes for an op, socket IO or its
 * 1 s block timeout (rdkafka_broker.c rd_kafka_broker_consumer_serve).
 * Taking messages from the queue wakes nothing.  A consumer that drains the
 * queue in less than that second then waits with no fetch in flight
 * (librdkafka issue #2879; 2.2.0 added fetch.queue.backoff.ms, default
 * 1000 ms, for it).
 *
 * The kick: "any op enqueued on the broker ops queue (rkb_ops) will
 * automatically trigger a wakeup of the broker thread" (rdkafka_broker.c),
 * and a request to a broker is such an op.  rd_kafka_offsets_for_times() of
 * the assigned partitions at "latest" (-1) sends one ListOffsets request to
 * each partition's leader, which is the broker whose thread fetches it
 * (unless client.rack made a follower the preferred replica, KIP-392: then
 * the kick wakes the leader only); that thread then runs its fetch
 * decisions again.  The request waits for a round trip, so it is sent from
 * the kick's own thread.
 *
 * When: once per fill and drain of the queue.  After each poll the
 * consumer reports what it took (prefetch_kick_polled); the queue counts as
 * "full" once it held half of either threshold before a poll (its length
 * then is the length now plus what the poll took; the bytes are estimated
 * from the values' average size, as librdkafka counts only values), and a
 * kick is asked for when a full queue has drained below both halves.  The
 * length is librdkafka's count of the consumer queue's events: messages,
 * and the few partition-EOF, error and rebalance events among them.  A
 * trickle never fills it; a consumer at capacity keeps it full; a
 * 1M-message replay kicks 12 to 20 times.  Kicks that were not needed (a
 * fetch response that took the queue past half but not to the threshold)
 * cost one ListOffsets round trip each.
 */
#ifndef DEDUPD_PREFETCH_KICK_H
#define DEDUPD_PREFETCH_KICK_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

struct prefetch_kick;

/** Start the kick of consumer \p rk (borrowed: it must outlive
 * prefetch_kick_stop; a consumer with a group.id, whose consumer queue
 * rd_kafka_queue_get_consumer returns), at most one kick per
 * \p interval_ms (>= 1).  The thresholds are read from \p rk's
 * configuration (queued.min.messages, queued.max.messages.kbytes; half
 * of queued.min.messages is taken as at least 1).
 * @returns the kick, or NULL when \p rk has no consumer queue or no thread
 *          could be started (logged as a warning: the consumer runs on
 *          without it).
 * @locality the consumer's thread (the one that polls). */
struct prefetch_kick *prefetch_kick_start(rd_kafka_t *rk, int interval_ms);

/** Report one poll (or several: the restore reports each batch it applies,
 * up to 512 messages): the \p n messages taken, \p msgs (borrowed for the
 * call; their values' sizes are summed).  Reads the consumer queue's
 * length (one librdkafka queue lock) and
 * asks for a kick when a full queue has drained (see above); never waits
 * for the kick's request.  A no-op for NULL or \p n == 0.
 * @locality the consumer's thread (the one that polls), only. */
void prefetch_kick_polled(struct prefetch_kick *k,
                          rd_kafka_message_t *const *msgs, size_t n);

/** Stop and join the kick's thread and free \p k.  It waits for a kick in
 * flight: rd_kafka_assignment (librdkafka's main thread answers it, no
 * timeout), then the leaders' look-up and the ListOffsets request, up to
 * 250 ms each.  NULL is a no-op (returns 0).
 * @returns the kicks the brokers answered (each a ListOffsets round trip
 *          per leader through the fetching broker threads).
 * @locality the consumer's thread, before the consumer is closed. */
uint64_t prefetch_kick_stop(struct prefetch_kick *k);

#endif
