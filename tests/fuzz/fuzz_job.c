/*
 * fuzz_job.c - job_parse() on arbitrary bytes, under three job_confs: the
 * default (variance headers accept/accept-language, the built-in credential
 * headers, max 1 MiB), an alternate one whose lists hold other names (so the
 * header names of the input reach the configured lists too: "accept" a
 * credential, "x-variant" a variance header, "x-both" in both lists, which
 * makes it a credential) with max_job_bytes exactly the input's size, and one
 * whose max_job_bytes is one byte short.
 *
 * This is also the fuzz target for `POST /v1/jobs` bodies without a key
 * (fuzz_api_submit drives the API's own body handling, api_submit_parse()).
 *
 * Properties, abort() on violation:
 *  - success: op_id non-empty; request_hash and event_key 64 lower-case hex;
 *    canonical is a JSON object that re-serializes (compact, sorted keys) to
 *    itself, with "v": 1 and every documented key; request_hash is the
 *    SHA-256 of canonical; event_key is key_event_key(op_id, request_hash);
 *    op_id is request_hash without job_key, scope ":" job_key with it;
 *    every request's normalized_url is key_url_normalize(url), a fixed point
 *    of it, of the shape fuzz_url checks (http(s)://, printable ASCII), and
 *    has the host curl connects to for its url (fuzz_curl_host: no
 *    host/path confusion, IPv4 forms that appear after percent-decoding or
 *    IDN read as the resolver reads them);
 *    each request's canonical object (the top level, or steps[i]) has its
 *    url, method and body_sha256, and holds every credential header (the
 *    built-in four and the conf's list, job.h; job_is_credential_header()
 *    agrees) only as the SHA-256 of its value
 *    trimmed of SP/HTAB under "credentials", every other variance header
 *    (the conf's list) trimmed under "headers", and nothing else;
 *    the method is an upper-case token and not CONNECT; header names are
 *    tokens (RFC 9110 tchar, checked here with that simpler definition) and
 *    not Content-Length or Transfer-Encoding; values have no control
 *    character but HTAB (job.h); a NUL follows each body;
 *  - failure: DD_ERR_PERMANENT (never NOMEM: libFuzzer aborts on a failed
 *    allocation, so NOMEM means a misclassified input), *out NULL, and a
 *    reason by fuzz_check_text() (non-empty, UTF-8 by jstr_utf8_valid() and
 *    by jansson, no control character: it becomes the dedupd-error Kafka
 *    header, a log line and the API's JSON error body);
 *  - jstr_load_object (job_parse's one-pass loader) loads only what
 *    json_loadb loads, to the same tree with its members in the same order;
 *  - the conf changes identity only: a job accepted under one conf is
 *    accepted under the other, and one refused under both is refused with
 *    the same reason; one byte over max_job_bytes is refused.
 */
#include <jansson.h>
#include <stdint.h>
#include <strings.h>

#include "fuzz_common.h"
#include "job.h"
#include "jstr.h"
#include "key.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    key_global_init();
    return 0;
}

/* RFC 9110 5.6.2: token = 1*tchar (written out here, independently of
 * job.c's is_tchar()). */
static bool is_token(const char *s)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                "abcdefghijklmnopqrstuvwxyz";
    return s[0] != '\0' && strspn(s, tchar) == strlen(s);
}

/* A job_conf with the lists it was built with (job_conf has NULL for the
 * default variance list): what canonical must follow, by job.h's rule. */
struct conf_run {
    const char *name;
    struct job_conf conf;
    const char *const *variance;
    size_t n_variance;
    const char *const *credentials; /* beyond the built-in ones */
    size_t n_credentials;
};

/* job.h: the built-in credential headers. */
static const char *const builtin_credentials[] = {
    "authorization", "cookie", "proxy-authorization", "x-api-key",
};

static bool in_list_ci(const char *name, const char *const *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(name, l[i]) == 0)
            return true;
    return false;
}

/* \p s trimmed of SP/HTAB (job.h: the form identity uses). */
static const char *trim(const char *s, size_t *len)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    *len = n;
    return s;
}

static bool json_str_is(json_t *v, const char *s, size_t n)
{
    return json_is_string(v) && json_string_length(v) == n &&
           memcmp(json_string_value(v), s, n) == 0;
}

/* The canonical object \p cr of request \p r under \p run. */
static void check_canonical_request(const struct conf_run *run,
                                    const struct job_request *r, json_t *cr)
{
    char hex[KEY_HEX_LEN + 1];
    FUZZ_CHECK(json_is_object(cr), "[%s] canonical request not an object",
               run->name);
    FUZZ_CHECK(json_str_is(json_object_get(cr, "url"), r->normalized_url,
                           strlen(r->normalized_url)) &&
                   json_str_is(json_object_get(cr, "method"), r->method,
                               strlen(r->method)),
               "[%s] canonical url/method are not the request's", run->name);
    key_sha256_hex(r->body ? (const void *)r->body : "", r->body_len, hex);
    FUZZ_CHECK(json_str_is(json_object_get(cr, "body_sha256"), hex,
                           KEY_HEX_LEN),
               "[%s] canonical body_sha256 is not the body's", run->name);
    json_t *hdrs = json_object_get(cr, "headers");
    json_t *creds = json_object_get(cr, "credentials");
    FUZZ_CHECK(json_is_object(hdrs) && json_is_object(creds),
               "[%s] canonical headers/credentials not objects", run->name);
    size_t n_hdrs = 0, n_creds = 0;
    for (size_t i = 0; i < r->n_headers; i++) {
        const struct job_header *h = &r->headers[i];
        char *lname = strdup(h->name);
        if (!lname)
            abort();
        for (char *p = lname; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        size_t vlen;
        const char *v = trim(h->value, &vlen);
        json_t *in_h = json_object_get(hdrs, lname);
        json_t *in_c = json_object_get(creds, lname);
        bool cred = in_list_ci(h->name, builtin_credentials, 4) ||
                    in_list_ci(h->name, run->credentials, run->n_credentials);
        FUZZ_CHECK(job_is_credential_header(&run->conf, h->name) == cred,
                   "[%s] job_is_credential_header(\"%s\") is %d", run->name,
                   h->name, !cred);
        if (cred) {
            key_sha256_hex(v, vlen, hex);
            FUZZ_CHECK(!in_h && json_str_is(in_c, hex, KEY_HEX_LEN),
                       "[%s] credential header '%s' is not only its digest "
                       "in canonical", run->name, h->name);
            n_creds++;
        } else if (in_list_ci(h->name, run->variance, run->n_variance)) {
            FUZZ_CHECK(!in_c && json_str_is(in_h, v, vlen),
                       "[%s] variance header '%s' is not its trimmed value "
                       "in canonical", run->name, h->name);
            n_hdrs++;
        } else {
            FUZZ_CHECK(!in_h && !in_c, "[%s] header '%s' is neither a "
                       "variance nor a credential header but is in "
                       "canonical", run->name, h->name);
        }
        free(lname);
    }
    FUZZ_CHECK(json_object_size(hdrs) == n_hdrs &&
                   json_object_size(creds) == n_creds,
               "[%s] canonical has headers the request does not", run->name);
}

static void check_request(const struct conf_run *run,
                          const struct job_request *r, json_t *cr)
{
    FUZZ_CHECK(r->url && r->normalized_url && r->method, "request field NULL");
    char *n1 = NULL, *n2 = NULL;
    char e[DD_ERRSTR_SIZE] = "";
    dd_err_t err = key_url_normalize(r->url, &n1, e, sizeof(e));
    FUZZ_CHECK(err == DD_OK && strcmp(n1, r->normalized_url) == 0,
               "normalized_url \"%s\" is not key_url_normalize(\"%s\") "
               "(%d: %s -> %s)", r->normalized_url, r->url, (int)err, e,
               n1 ? n1 : "(null)");
    FUZZ_CHECK(fuzz_url_shape_ok(r->normalized_url),
               "normalized_url \"%s\" is not http(s):// and printable ASCII",
               r->normalized_url);
    err = key_url_normalize(r->normalized_url, &n2, e, sizeof(e));
    FUZZ_CHECK(err == DD_OK && strcmp(n2, r->normalized_url) == 0,
               "normalized_url \"%s\" is not a fixed point (%d: %s -> %s)",
               r->normalized_url, (int)err, e, n2 ? n2 : "(null)");
    free(n1);
    free(n2);
    char *h_in = fuzz_curl_host(r->url);
    char *h_out = fuzz_curl_host(r->normalized_url);
    FUZZ_CHECK(h_in && h_out && strcmp(h_in, h_out) == 0,
               "host changed: url \"%s\", normalized_url \"%s\", host "
               "\"%s\" -> \"%s\"", r->url, r->normalized_url,
               h_in ? h_in : "(none)", h_out ? h_out : "(none)");
    free(h_in);
    free(h_out);
    FUZZ_CHECK(is_token(r->method) && strcmp(r->method, "CONNECT") != 0,
               "method \"%s\" is not a token, or CONNECT", r->method);
    for (const char *p = r->method; *p; p++)
        FUZZ_CHECK(!(*p >= 'a' && *p <= 'z'), "method \"%s\" not upper-cased",
                   r->method);
    for (size_t i = 0; i < r->n_headers; i++) {
        const struct job_header *h = &r->headers[i];
        FUZZ_CHECK(is_token(h->name), "header name \"%s\" is not a token",
                   h->name);
        FUZZ_CHECK(strcasecmp(h->name, "content-length") != 0 &&
                       strcasecmp(h->name, "transfer-encoding") != 0,
                   "header \"%s\" accepted", h->name);
        for (const unsigned char *p = (const unsigned char *)h->value; *p;
             p++)
            FUZZ_CHECK(*p == '\t' || (*p >= 0x20 && *p != 0x7f),
                       "header %s: control character 0x%02x in value",
                       h->name, *p);
    }
    if (r->body)
        FUZZ_CHECK(r->body[r->body_len] == '\0', "body not NUL-terminated");
    else
        FUZZ_CHECK(r->body_len == 0, "body_len %zu without body", r->body_len);
    check_canonical_request(run, r, cr);
}

static void check_job(const struct conf_run *run, const struct job *job)
{
    static const char *const keys[] = {
        "body_sha256", "country", "credentials", "headers", "method",
        "parser_version", "scheduled_for", "steps", "url", "v",
    };
    FUZZ_CHECK(job->op_id[0] != '\0', "empty op_id");
    FUZZ_CHECK(strlen(job->op_id) <= JOB_OP_ID_MAX, "op_id too long");
    FUZZ_CHECK(fuzz_is_hex(job->request_hash, JOB_HEX_LEN),
               "request_hash \"%s\"", job->request_hash);
    FUZZ_CHECK(fuzz_is_hex(job->event_key, JOB_HEX_LEN), "event_key \"%s\"",
               job->event_key);
    FUZZ_CHECK(job->canonical != NULL, "canonical NULL");
    FUZZ_CHECK(job->scope != NULL, "scope NULL");

    json_error_t je;
    json_t *c = json_loads(job->canonical, JSON_REJECT_DUPLICATES, &je);
    FUZZ_CHECK(c && json_is_object(c), "canonical does not parse: %s (%s)",
               je.text, job->canonical);
    char *again = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    FUZZ_CHECK(again && strcmp(again, job->canonical) == 0,
               "canonical is not in canonical form:\n  %s\n  %s",
               job->canonical, again ? again : "(null)");
    free(again);
    FUZZ_CHECK(json_object_size(c) == sizeof(keys) / sizeof(keys[0]),
               "canonical has %zu keys", json_object_size(c));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        FUZZ_CHECK(json_object_get(c, keys[i]) != NULL,
                   "canonical lacks \"%s\"", keys[i]);
    FUZZ_CHECK(json_integer_value(json_object_get(c, "v")) == 1, "v != 1");

    char hex[KEY_HEX_LEN + 1];
    key_sha256_hex(job->canonical, strlen(job->canonical), hex);
    FUZZ_CHECK(strcmp(hex, job->request_hash) == 0,
               "request_hash is not sha256(canonical)");
    key_event_key(job->op_id, job->request_hash, hex);
    FUZZ_CHECK(strcmp(hex, job->event_key) == 0, "event_key mismatch");
    if (job->job_key) {
        size_t sl = strlen(job->scope);
        FUZZ_CHECK(strncmp(job->op_id, job->scope, sl) == 0 &&
                   job->op_id[sl] == ':' &&
                   strcmp(job->op_id + sl + 1, job->job_key) == 0,
                   "op_id \"%s\" is not scope:job_key", job->op_id);
    } else {
        FUZZ_CHECK(strcmp(job->op_id, job->request_hash) == 0,
                   "op_id \"%s\" is not request_hash", job->op_id);
    }

    if (job->steps) {
        FUZZ_CHECK(job->n_steps >= 1 && job->n_steps <= 32, "n_steps %zu",
                   job->n_steps);
        json_t *steps = json_object_get(c, "steps");
        FUZZ_CHECK(json_is_array(steps) &&
                       json_array_size(steps) == job->n_steps,
                   "canonical steps are not the %zu steps", job->n_steps);
        for (size_t i = 0; i < job->n_steps; i++)
            check_request(run, &job->steps[i], json_array_get(steps, i));
        FUZZ_CHECK(job->req.url == job->steps[0].url, "req is not steps[0]");
    } else {
        FUZZ_CHECK(job->n_steps == 0, "n_steps %zu without steps",
                   job->n_steps);
        FUZZ_CHECK(json_is_null(json_object_get(c, "steps")),
                   "canonical steps without steps");
        check_request(run, &job->req, c);
    }
    json_decref(c);
}

/* job_parse() under \p run; checks the job or the refusal.  Returns the
 * error; the reason in \p e. */
static dd_err_t parse_one(const struct conf_run *run, const uint8_t *data,
                          size_t size, char e[DD_ERRSTR_SIZE])
{
    struct job *job = (struct job *)(uintptr_t)1; /* must be reset */
    e[0] = '\0';
    dd_err_t err = job_parse(&run->conf, data, size, &job, e, DD_ERRSTR_SIZE);
    if (err != DD_OK) {
        /* NOMEM cannot happen here (libFuzzer's malloc limit aborts instead
         * of returning NULL): an invalid job must be PERMANENT. */
        FUZZ_CHECK(err == DD_ERR_PERMANENT,
                   "[%s] error %d (%s), want DD_ERR_PERMANENT", run->name,
                   (int)err, e);
        FUZZ_CHECK(job == NULL, "[%s] *out not NULL on error", run->name);
        fuzz_check_text("job_parse", e);
        return err;
    }
    FUZZ_CHECK(job != NULL && job != (struct job *)(uintptr_t)1,
               "[%s] DD_OK without a job", run->name);
    check_job(run, job);
    /* the direct writer of the canonical request (job.c) is the jansson
     * tree's bytes: the same job through the tree, the same identity */
    struct job_conf tree_conf = run->conf;
    tree_conf.canonical_tree = true;
    struct job *tree = NULL;
    char te[DD_ERRSTR_SIZE];
    FUZZ_CHECK(job_parse(&tree_conf, data, size, &tree, te, sizeof(te)) ==
                   DD_OK, "[%s] the tree refused what the writer took: %s",
               run->name, te);
    FUZZ_CHECK(strcmp(job->canonical, tree->canonical) == 0 &&
                   strcmp(job->resource_key, tree->resource_key) == 0,
               "[%s] canonical request %s, the tree's %s", run->name,
               job->canonical, tree->canonical);
    job_destroy(tree);
    job_destroy(job);
    return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const def_variance[] = { "accept", "accept-language" };
    static const char *const alt_variance[] = { "accept-language", "x-variant",
                                                "x-both" };
    static const char *const alt_credentials[] = { "x-session", "accept",
                                                   "x-both" };
    struct conf_run def = { "default", { 0 }, def_variance, 2, NULL, 0 };
    struct conf_run alt = {
        "alternate",
        { .variance_headers = alt_variance, .n_variance_headers = 3,
          .credential_headers = alt_credentials, .n_credential_headers = 3,
          .max_job_bytes = size },
        alt_variance, 3, alt_credentials, 3,
    };
    char e_def[DD_ERRSTR_SIZE], e_alt[DD_ERRSTR_SIZE];

    /* job_parse loads with jstr_load_object first: what it loads is what
     * jansson loads, members in the same order */
    json_t *fast = jstr_load_object(data, size);
    if (fast) {
        json_error_t je;
        json_t *slow = json_loadb((const char *)data, size,
                                  JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
                                  &je);
        FUZZ_CHECK(slow != NULL, "jstr_load_object loaded what jansson "
                   "refuses: %s", je.text);
        char *x = json_dumps(fast, JSON_COMPACT | JSON_ENCODE_ANY);
        char *y = json_dumps(slow, JSON_COMPACT | JSON_ENCODE_ANY);
        FUZZ_CHECK(json_equal(fast, slow) && x && y && strcmp(x, y) == 0,
                   "jstr_load_object and jansson differ: %s / %s",
                   x ? x : "?", y ? y : "?");
        free(x);
        free(y);
        json_decref(slow);
        json_decref(fast);
    }

    dd_err_t err_def = parse_one(&def, data, size, e_def);
    dd_err_t err_alt = parse_one(&alt, data, size, e_alt);
    if (size <= (size_t)1 << 20) /* both limits hold */
        FUZZ_CHECK(err_def == err_alt &&
                       (err_def == DD_OK || strcmp(e_def, e_alt) == 0),
                   "the conf changed validity: default %d (%s), alternate "
                   "%d (%s)", (int)err_def, err_def ? e_def : "",
                   (int)err_alt, err_alt ? e_alt : "");
    if (size > 1) { /* max_job_bytes 0 would mean the default */
        struct conf_run small = alt;
        small.name = "max_job_bytes = size - 1";
        small.conf.max_job_bytes = size - 1;
        FUZZ_CHECK(parse_one(&small, data, size, e_alt) != DD_OK,
                   "%zu bytes accepted with max_job_bytes %zu", size,
                   size - 1);
    }
    return 0;
}
