package dedupd.peer;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * Benchmark peer (shared BENCH-PEERS.md): the dedup a JVM team would build with the
 * Kafka Streams Processor API. One source (IN_TOPIC, key = op_id, value = job JSON
 * bytes, not parsed), one persistent RocksDB key-value store with its changelog
 * (op_id -> first-seen wall-clock ms), get-then-put (putIfAbsent) per record, a
 * wall-clock punctuator deleting entries older than TTL_MS, and one small record to
 * OUT_TOPIC per new op_id keyed by hex SHA-256("result:v1:" + op_id).
 *
 * Prints one JSON line on stdout at exit; logs go to stderr; exit code 1 on error.
 */
public final class KStreamsPeer {
    static final String STORE = "dedup-store";

    // Counters shared by the tasks' processors (all in one stream thread by default,
    // atomics so that NUM_STREAM_THREADS > 1 stays correct) and read by the main thread.
    static final AtomicLong CONSUMED = new AtomicLong();
    static final AtomicLong NEW = new AtomicLong();
    static final AtomicLong DUPLICATES = new AtomicLong();
    static final AtomicLong FIRST_NS = new AtomicLong(Long.MIN_VALUE);
    static volatile long lastNs = Long.MIN_VALUE;
    // process CPU time at the first consumed message (diagnostics on stderr only)
    static volatile long firstCpuNs = -1;

    static long processCpuNs() {
        java.lang.management.OperatingSystemMXBean os = java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        return os instanceof com.sun.management.OperatingSystemMXBean sun ? sun.getProcessCpuTime() : -1;
    }

    static final class DedupProcessor implements Processor<String, byte[], String, byte[]> {
        private final long ttlMs;
        private final long punctuateMs;
        private ProcessorContext<String, byte[]> ctx;
        private KeyValueStore<String, Long> store;
        private MessageDigest sha;
        private final HexFormat hex = HexFormat.of();

        DedupProcessor(long ttlMs, long punctuateMs) {
            this.ttlMs = ttlMs;
            this.punctuateMs = punctuateMs;
        }

        @Override
        public void init(ProcessorContext<String, byte[]> context) {
            ctx = context;
            store = context.getStateStore(STORE);
            try {
                sha = MessageDigest.getInstance("SHA-256");
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
            // TTL: every punctuateMs of wall-clock time, delete the claims older than ttlMs.
            context.schedule(Duration.ofMillis(punctuateMs), PunctuationType.WALL_CLOCK_TIME, this::expire);
        }

        private void expire(long nowMs) {
            long cutoff = nowMs - ttlMs;
            List<String> old = new ArrayList<>();
            try (KeyValueIterator<String, Long> it = store.all()) {
                while (it.hasNext()) {
                    KeyValue<String, Long> kv = it.next();
                    if (kv.value != null && kv.value < cutoff) old.add(kv.key);
                }
            }
            for (String k : old) store.delete(k);
        }

        @Override
        public void process(Record<String, byte[]> rec) {
            long now = System.nanoTime();
            if (FIRST_NS.compareAndSet(Long.MIN_VALUE, now)) firstCpuNs = processCpuNs();
            String opId = rec.key();
            if (opId == null || opId.isEmpty()) {
                // not a job of the contract: counted as consumed, nothing decided
                CONSUMED.incrementAndGet();
                lastNs = now;
                return;
            }
            if (store.get(opId) == null) {
                store.put(opId, System.currentTimeMillis());
                byte[] digest = sha.digest(("result:v1:" + opId).getBytes(StandardCharsets.UTF_8));
                String outKey = hex.formatHex(digest);
                byte[] value = ("{\"op_id\":\"" + opId + "\",\"status\":\"new\"}").getBytes(StandardCharsets.UTF_8);
                ctx.forward(new Record<>(outKey, value, rec.timestamp()));
                NEW.incrementAndGet();
            } else {
                DUPLICATES.incrementAndGet();
            }
            lastNs = now;
            CONSUMED.incrementAndGet();
        }
    }

    static String env(String name, String dflt) {
        String v = System.getenv(name);
        return (v == null || v.isEmpty()) ? dflt : v;
    }

    static long envLong(String name, long dflt) {
        String v = env(name, null);
        if (v == null) return dflt;
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + " must be an integer, not '" + v + "'");
        }
    }

    /** OUT_TOPIC is created (if missing) with IN_TOPIC's partition count. */
    static void ensureOutTopic(String bootstrap, String in, String out) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            Map<String, TopicDescription> d = admin.describeTopics(Set.of(in)).allTopicNames().get();
            int parts = d.get(in).partitions().size();
            try {
                admin.createTopics(List.of(new NewTopic(out, Optional.of(parts), Optional.empty()))).all().get();
                System.err.println("kstreams-peer: created " + out + " with " + parts + " partitions");
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
    }

    public static void main(String[] args) {
        try {
            System.exit(run());
        } catch (Throwable t) {
            System.err.println("kstreams-peer: error: " + t);
            t.printStackTrace(System.err);
            System.exit(1);
        }
    }

    static int run() throws Exception {
        String bootstrap = env("KAFKA_BOOTSTRAP", null);
        if (bootstrap == null) {
            System.err.println("kstreams-peer: KAFKA_BOOTSTRAP is required");
            return 2;
        }
        String in = env("IN_TOPIC", "scrape.jobs");
        String out = env("OUT_TOPIC", "peer.results");
        String group = env("GROUP", "peer-ks-" + System.currentTimeMillis());
        long maxMessages = envLong("MAX_MESSAGES", Long.MAX_VALUE);
        long idleMs = envLong("IDLE_MS", 5000);
        long startTimeoutMs = envLong("START_TIMEOUT_MS", 120_000);
        long ttlMs = envLong("TTL_MS", 86_400_000L);
        long punctuateMs = envLong("PUNCTUATE_MS", 60_000);
        boolean caching = !env("STORE_CACHING", "0").equals("0");
        String guarantee = env("GUARANTEE", "at_least_once").toLowerCase(Locale.ROOT);
        if (!guarantee.equals(StreamsConfig.AT_LEAST_ONCE) && !guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
            System.err.println("kstreams-peer: GUARANTEE must be at_least_once or exactly_once_v2");
            return 2;
        }
        String stateDir = env("STATE_DIR", null);
        final Path tempState = stateDir == null ? Files.createTempDirectory("peer-ks-state-") : null;
        if (tempState != null) stateDir = tempState.toString();
        try {
            return runWith(bootstrap, in, out, group, maxMessages, idleMs, startTimeoutMs, ttlMs, punctuateMs,
                    caching, guarantee, stateDir);
        } finally {
            if (tempState != null) deleteTree(tempState); // our own temp dir: removed after close
        }
    }

    static void deleteTree(Path root) {
        try (java.util.stream.Stream<Path> walk = Files.walk(root)) {
            walk.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (java.io.IOException e) {
            System.err.println("kstreams-peer: could not remove " + root + ": " + e);
        }
    }

    static int runWith(String bootstrap, String in, String out, String group, long maxMessages, long idleMs,
            long startTimeoutMs, long ttlMs, long punctuateMs, boolean caching, String guarantee,
            String stateDir) throws Exception {

        ensureOutTopic(bootstrap, in, out);

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, group);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        // Extra Streams/client settings for a named tuning row: STREAMS_PROPS="k=v;k=v"
        // (e.g. "commit.interval.ms=1000;producer.linger.ms=5"). Unset = the defaults.
        String extra = env("STREAMS_PROPS", "");
        for (String kv : extra.split(";")) {
            kv = kv.trim();
            if (kv.isEmpty()) continue;
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("STREAMS_PROPS: bad entry '" + kv + "'");
            props.put(kv.substring(0, eq).trim(), kv.substring(eq + 1).trim());
        }

        StoreBuilder<KeyValueStore<String, Long>> storeBuilder = Stores
                .keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long())
                .withLoggingEnabled(Map.of());
        if (caching) storeBuilder = storeBuilder.withCachingEnabled();

        Topology topo = new Topology();
        topo.addSource("jobs", new StringDeserializer(), new ByteArrayDeserializer(), in);
        topo.addProcessor("dedup", () -> new DedupProcessor(ttlMs, punctuateMs), "jobs");
        topo.addStateStore(storeBuilder, "dedup");
        topo.addSink("results", out, new StringSerializer(), new ByteArraySerializer(), "dedup");

        AtomicReference<Throwable> failure = new AtomicReference<>();
        KafkaStreams streams = new KafkaStreams(topo, props);
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        System.err.println("kstreams-peer: " + guarantee + " application.id=" + group + " in=" + in
                + " out=" + out + " state.dir=" + stateDir + " caching=" + caching
                + (extra.isEmpty() ? "" : " extra=" + extra));
        long startNs = System.nanoTime();
        streams.start();

        String stopReason;
        while (true) {
            Thread.sleep(5);
            if (failure.get() != null) { stopReason = "error"; break; }
            KafkaStreams.State st = streams.state();
            if (st == KafkaStreams.State.ERROR || st == KafkaStreams.State.NOT_RUNNING
                    || st == KafkaStreams.State.PENDING_ERROR) {
                stopReason = "streams state " + st;
                break;
            }
            long now = System.nanoTime();
            if (CONSUMED.get() >= maxMessages) { stopReason = "max_messages"; break; }
            if (FIRST_NS.get() == Long.MIN_VALUE) {
                if ((now - startNs) / 1_000_000 > startTimeoutMs) { stopReason = "no message"; break; }
            } else if ((now - lastNs) / 1_000_000 >= idleMs) {
                stopReason = "idle";
                break;
            }
        }
        // snapshot before close: the close (final commit, flush) is outside the measurement
        long consumed = CONSUMED.get(), nw = NEW.get(), dup = DUPLICATES.get();
        long first = FIRST_NS.get(), last = lastNs;
        long cpuNs = processCpuNs();
        System.err.println("kstreams-peer: stopping (" + stopReason + "), closing");
        boolean closed = streams.close(Duration.ofSeconds(120));
        Throwable f = failure.get();
        if (f != null) {
            System.err.println("kstreams-peer: stream thread failed: " + f);
            f.printStackTrace(System.err);
            return 1;
        }
        if (!closed) {
            System.err.println("kstreams-peer: close timed out");
            return 1;
        }
        if (stopReason.startsWith("streams state") || stopReason.equals("no message")) {
            System.err.println("kstreams-peer: " + stopReason);
            return 1;
        }
        // the counts may have moved between the snapshot and close only if more
        // records were in flight; re-read so the line matches what was processed
        consumed = CONSUMED.get(); nw = NEW.get(); dup = DUPLICATES.get(); last = lastNs;
        double seconds = consumed > 0 ? (last - first) / 1e9 : 0.0;
        double rate = seconds > 0 ? consumed / seconds : 0.0;
        if (firstCpuNs >= 0 && cpuNs >= 0)
            System.err.printf(Locale.ROOT, "kstreams-peer: process CPU %.2f s over the measured %.2f s%n",
                    (cpuNs - firstCpuNs) / 1e9, seconds);
        System.out.printf(Locale.ROOT,
                "{\"peer\": \"kstreams-%s\", \"consumed\": %d, \"new\": %d, \"duplicates\": %d, \"seconds\": %.3f, \"msgs_per_s\": %.1f}%n",
                guarantee, consumed, nw, dup, seconds, rate);
        System.out.flush();
        return 0;
    }
}
