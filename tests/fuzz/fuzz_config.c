/*
 * fuzz_config.c - cfg_load() of arbitrary bytes as the configuration file
 * and as environment entries; cfg_dump() of every config that loads.
 *
 * Input: FILE, optionally followed by "\0\0" and environment entries
 * separated by "\0" ("DEDUPD_FETCH__TIMEOUT_MS=5"; entries that are not
 * DEDUPD_*__* are ignored by cfg_load, as in a real environment).  A FILE
 * may hold single NUL bytes.  cfg_load() takes a path, so FILE goes into a
 * memfd (created once) and the path is /proc/self/fd/N: no file system
 * traffic, nothing added to src/.
 *
 * Properties, abort() on violation:
 *  - failure: DD_ERR_INVAL (bad key, type or value; a JSON syntax error is
 *    also INVAL since the file exists; never NOMEM: libFuzzer aborts on a
 *    failed allocation, so NOMEM means a misclassified input, as in the
 *    other targets), *out left untouched, and a message that starts with
 *    the file ("FILE: ..." or "FILE:LINE:COL: ...") or, for an environment
 *    entry, "environment DEDUPD_", and that is text by the rule every target
 *    applies (fuzz_check_text: non-empty, UTF-8, no control character): it
 *    is the one line dedupd prints on stderr before it exits;
 *  - success: the cfg_dump() output (to a memory stream, then discarded) is
 *    one JSON object that jansson parses back.
 *
 * Note: proxy.providers[].password_file / api_key_file read whatever path the
 * input names and password_env / api_key_env read the process environment
 * (getenv, not envp): harmless here, but run.sh gives the fuzzer /dev/null
 * as stdin so that "/dev/stdin" cannot block.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <jansson.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz_common.h"

static int mfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    mfd = memfd_create("fuzz_config", MFD_CLOEXEC);
    if (mfd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
    return 0;
}

/* The environment part of the input: "\0"-separated entries (malloc'd
 * copies, NULL-terminated array). */
static char **env_split(const uint8_t *p, size_t n)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += p[i] == '\0';
    char **envp = calloc(cap + 1, sizeof(*envp));
    if (!envp)
        abort();
    size_t k = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || p[i] == '\0') {
            if (i > start)
                envp[k++] = fuzz_cstr(p + start, i - start);
            start = i + 1;
        }
    }
    return envp;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t flen = size;
    char **envp;
    const uint8_t *sep = NULL;
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == '\0' && data[i + 1] == '\0') {
            sep = data + i;
            break;
        }
    if (sep) {
        flen = (size_t)(sep - data);
        envp = env_split(sep + 2, size - flen - 2);
    } else {
        envp = env_split(data, 0);
    }
    if (ftruncate(mfd, 0) != 0 ||
        (flen && pwrite(mfd, data, flen, 0) != (ssize_t)flen)) {
        perror("memfd write");
        abort();
    }
    struct cfg *cfg = (struct cfg *)(uintptr_t)1; /* must stay untouched */
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = cfg_load(path, envp, &cfg, e, sizeof(e));
    if (err != DD_OK) {
        FUZZ_CHECK(err == DD_ERR_INVAL, "error %d (%s), want DD_ERR_INVAL",
                   (int)err, e);
        FUZZ_CHECK(cfg == (struct cfg *)(uintptr_t)1, "*out written on error");
        size_t pl = strlen(path);
        FUZZ_CHECK((strncmp(e, path, pl) == 0 && e[pl] == ':') ||
                       (envp[0] &&
                        strncmp(e, "environment DEDUPD_", 19) == 0),
                   "message \"%s\" names neither the file nor a variable", e);
        fuzz_check_text("cfg_load", e);
        goto out;
    }
    FUZZ_CHECK(cfg != NULL && cfg != (struct cfg *)(uintptr_t)1,
               "DD_OK without a config");

    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (!fp)
        abort();
    cfg_dump(cfg, fp);
    fclose(fp);
    json_error_t je;
    json_t *d = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    FUZZ_CHECK(d && json_is_object(d), "cfg_dump output does not parse: %s "
               "at %d:%d", je.text, je.line, je.column);
    json_decref(d);
    free(buf);
    cfg_destroy(cfg);
out:
    for (size_t i = 0; envp[i]; i++)
        free(envp[i]);
    free(envp);
    return 0;
}
