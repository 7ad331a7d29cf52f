/*
 * fuzz_config.c - cfg_load() of arbitrary bytes as the configuration file,
 * with an empty environment; cfg_dump() of every config that loads.
 *
 * cfg_load() takes a path, so the input goes into a memfd (created once) and
 * the path is /proc/self/fd/N: no file system traffic, nothing added to src/.
 *
 * Properties, abort() on violation:
 *  - failure: DD_ERR_INVAL (bad key, type or value; a JSON syntax error is
 *    also INVAL since the file exists), a non-empty "FILE..." message, *out
 *    left untouched;
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char *const envp[] = { NULL };
    if (ftruncate(mfd, 0) != 0 ||
        (size && pwrite(mfd, data, size, 0) != (ssize_t)size)) {
        perror("memfd write");
        abort();
    }
    struct cfg *cfg = (struct cfg *)(uintptr_t)1; /* must stay untouched */
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = cfg_load(path, envp, &cfg, e, sizeof(e));
    if (err != DD_OK) {
        FUZZ_CHECK(err == DD_ERR_INVAL || err == DD_ERR_NOMEM,
                   "unexpected error %d (%s)", (int)err, e);
        FUZZ_CHECK(cfg == (struct cfg *)(uintptr_t)1, "*out written on error");
        FUZZ_CHECK(e[0] != '\0', "refused without a message");
        return 0;
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
    return 0;
}
