/* common/common.h -- shared utilities of every module (prefix at_).
**
**   at_err         one list of error codes (AT_ERR_MAP) and at_strerror()
**   at_malloc ...  the one allocation hook; tests can make it fail on demand
**   at_arena       bump allocator for objects that die together
**   at_buf         growable text/byte buffer with a sticky error
**   at_log_*       timestamped logging to stderr with a level
**   at_sha256      SHA-256, for workload keys and content hashes
**   at_rng         explicit, seedable random source (xoshiro256**)
**   at_json_*      a small JSON DOM parser (arena-backed, line:column errors)
**   at_run_parts   work split in shares, each in a thread of its own
**   at_time_*      monotonic and wall clocks
**
** Nothing here keeps global state except the log level and the test allocation
** limit; every function is safe to call from any thread unless it says otherwise. */
#ifndef AT_COMMON_H
#define AT_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mbedtls/sha256.h>

/* ---- errors ------------------------------------------------------------------------- */

#define AT_ERR_MAP(X)                                                                      \
    X(OK, "success")                                                                       \
    X(ENOMEM, "out of memory")                                                             \
    X(EINVAL, "invalid argument")                                                          \
    X(EIO, "I/O error")                                                                    \
    X(EPROTO, "malformed or unexpected message")                                           \
    X(EVERSION, "written by a newer version")                                              \
    X(EPARSE, "syntax error")                                                              \
    X(ENOTFOUND, "not found")                                                              \
    X(ESCHED, "invalid schedule step")                                                     \
    X(ECODEGEN, "code generation failed")                                                  \
    X(ELOAD, "cannot load kernel object")                                                  \
    X(ETIMEDOUT, "timed out")                                                              \
    X(EBUSY, "busy")                                                                       \
    X(EEXIST, "already exists")                                                            \
    X(EUNSUPPORTED, "not supported")                                                       \
    X(EAUTH, "authentication failed")                                                      \
    X(ECORRUPT, "corrupt or foreign data")                                                 \
    X(ECLOSED, "closed")

typedef enum {
#define X(name, text) AT_##name,
    AT_ERR_MAP(X)
#undef X
        AT_N_ERRS
} at_err;

/* Short English text of 'e'; never NULL. */
const char *at_strerror(at_err e);

/* Name of 'e' as in the enum without the prefix ("ENOMEM"); never NULL. */
const char *at_errname(at_err e);

/* ---- element types ------------------------------------------------------------------ */

/* Element types of tensors.  The numbers are stored in records and sent on the wire:
** append, never renumber. */
#define AT_DTYPE_MAP(X)                                                                    \
    X(F32, "float32", 4)                                                                   \
    X(I32, "int32", 4)                                                                     \
    X(BOOL, "bool", 1)                                                                     \
    X(F16, "float16", 2)                                                                   \
    X(I8, "int8", 1)                                                                       \
    X(F64, "float64", 8)                                                                   \
    X(I64, "int64", 8)

typedef enum {
#define X(id, name, bytes) AT_DT_##id,
    AT_DTYPE_MAP(X)
#undef X
        AT_N_DTYPES
} at_dtype;

const char *at_dtype_name(at_dtype t); /* "float32"; "?" when out of range */
int at_dtype_bytes(at_dtype t);        /* 4 for float32; 0 when out of range */
int at_dtype_is_float(at_dtype t);
/* Parse "float32" (also "f32"), "int32" ("i32"), ...; AT_EINVAL when unknown. */
at_err at_dtype_parse(const char *s, size_t n, at_dtype *out);

/* ---- memory ------------------------------------------------------------------------- */

/* Every allocation of the project goes through these.  They behave like the libc
** functions; at_free(NULL) is fine. */
void *at_malloc(size_t n);
void *at_calloc(size_t n, size_t size);
void *at_realloc(void *p, size_t n);
void at_free(void *p);
char *at_strdup(const char *s);
char *at_strndup(const char *s, size_t n);

/* Test hooks: after at_test_alloc_limit(k), the next k allocations succeed and later
** ones fail (return NULL) until the limit is set to SIZE_MAX again.  Counts are global
** and approximate under threads; use from single-threaded tests. */
void at_test_alloc_limit(size_t n_allowed);
long at_test_live_allocs(void);

/* ---- arena -------------------------------------------------------------------------- */

typedef struct at_arena_chunk at_arena_chunk;
typedef struct at_arena {
    at_arena_chunk *head; /* newest chunk first */
    size_t chunk_bytes;   /* default size of a new chunk */
    size_t used_bytes;    /* total handed out, for statistics */
} at_arena;

void at_arena_init(at_arena *a, size_t chunk_bytes); /* chunk_bytes 0: 16 KiB */
void at_arena_fini(at_arena *a);                     /* frees every chunk */
void at_arena_reset(at_arena *a);                    /* keeps the first chunk, drops the rest */
/* 16-byte aligned, zero-filled memory that lives until the arena is reset or
** finalised; NULL when out of memory. */
void *at_arena_alloc(at_arena *a, size_t n);
char *at_arena_strdup(at_arena *a, const char *s);
char *at_arena_strndup(at_arena *a, const char *s, size_t n);

/* ---- growable buffer ---------------------------------------------------------------- */

/* A byte buffer that is always NUL-terminated when 'data' is non-NULL.  After one
** failed allocation 'err' is AT_ENOMEM and every later append does nothing, so a long
** run of appends is checked once at the end. */
typedef struct at_buf {
    char *data;
    size_t len, cap;
    at_err err;
} at_buf;

void at_buf_init(at_buf *b);
void at_buf_fini(at_buf *b);
void at_buf_reset(at_buf *b); /* len = 0, keeps storage and clears err */
void at_buf_put(at_buf *b, const void *p, size_t n);
void at_buf_puts(at_buf *b, const char *s);
void at_buf_putc(at_buf *b, char c);
void at_buf_printf(at_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void at_buf_vprintf(at_buf *b, const char *fmt, va_list ap);
/* Append 's' as a JSON string literal with quotes and escapes. */
void at_buf_json_str(at_buf *b, const char *s);
/* Append a double the shortest way that reads back to the same value ("%.17g" style but
** trimmed); integers print without a fraction. */
void at_buf_json_num(at_buf *b, double v);
/* Hand the storage to the caller (at_free), leaving 'b' empty; NULL if b->err. */
char *at_buf_take(at_buf *b);

/* ---- growable arrays ------------------------------------------------------------------ */

/* at_vec_push(&arr, &n, &cap, value): append to a plain C array, growing it with
** at_realloc.  Returns AT_OK or AT_ENOMEM (then nothing changed). */
#define at_vec_push(parr, pn, pcap, value)                                                 \
    (at_vec__grow((void **)(parr), (pn), (pcap), sizeof(**(parr))) != AT_OK                 \
         ? AT_ENOMEM                                                                        \
         : ((*(parr))[(*(pn))++] = (value), AT_OK))
at_err at_vec__grow(void **parr, int *pn, int *pcap, size_t elem_size);

/* ---- logging ------------------------------------------------------------------------ */

typedef enum { AT_LOG_DEBUG, AT_LOG_INFO, AT_LOG_WARN, AT_LOG_ERROR, AT_LOG_OFF } at_log_level;

void at_log_set_level(at_log_level lv);
at_log_level at_log_get_level(void);
/* Parse "debug", "info", "warn", "error" or "off"; AT_EINVAL otherwise. */
at_err at_log_parse_level(const char *s, at_log_level *out);
void at_log(at_log_level lv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define at_log_debug(...) at_log(AT_LOG_DEBUG, __VA_ARGS__)
#define at_log_info(...) at_log(AT_LOG_INFO, __VA_ARGS__)
#define at_log_warn(...) at_log(AT_LOG_WARN, __VA_ARGS__)
#define at_log_error(...) at_log(AT_LOG_ERROR, __VA_ARGS__)

/* ---- hashing ------------------------------------------------------------------------ */

/* SHA-256 (mbed TLS's, common/at_hash.c).  Every init is ended by a final. */
typedef struct at_sha256 {
    mbedtls_sha256_context c;
} at_sha256;

void at_sha256_init(at_sha256 *s);
void at_sha256_update(at_sha256 *s, const void *p, size_t n);
void at_sha256_final(at_sha256 *s, uint8_t out[32]);
/* Lower-case hex of the first 'n_bytes' of SHA-256(p[0..n)); 'hex' holds 2*n_bytes+1. */
void at_sha256_hex(const void *p, size_t n, size_t n_bytes, char *hex);

/* A fast 64-bit hash (words in four lanes, MurmurHash3's finaliser), for hash tables and
** in-memory checks; not for anything stored or sent (it differs between byte orders). */
uint64_t at_hash64(const void *p, size_t n);

/* ---- random ------------------------------------------------------------------------- */

/* xoshiro256**: same seed, same sequence on every machine.  Not thread-safe: give each
** worker its own, seeded from a master with at_rng_split. */
typedef struct at_rng {
    uint64_t s[4];
} at_rng;

void at_rng_seed(at_rng *r, uint64_t seed);
uint64_t at_rng_u64(at_rng *r);
uint64_t at_rng_below(at_rng *r, uint64_t n); /* uniform in [0, n); n > 0 */
double at_rng_double(at_rng *r);              /* uniform in [0, 1) */
void at_rng_split(at_rng *master, at_rng *child);

/* ---- JSON --------------------------------------------------------------------------- */

typedef enum {
    AT_JSON_NULL,
    AT_JSON_BOOL,
    AT_JSON_NUM,
    AT_JSON_STR,
    AT_JSON_ARR,
    AT_JSON_OBJ
} at_json_type;

typedef struct at_json at_json;
struct at_json {
    at_json_type type;
    int line, col;     /* where the value starts in the text, 1-based */
    int n;             /* ARR/OBJ: number of items; STR: byte length */
    int is_int;        /* NUM: the text was an integer that fits int64 */
    int64_t i;         /* NUM: exact value when is_int */
    double num;        /* NUM, BOOL (0/1) */
    const char *str;   /* STR: NUL-terminated (may contain NUL if the text escaped one) */
    at_json **items;   /* ARR: values; OBJ: values */
    const char **keys; /* OBJ: keys, parallel to items */
};

/* Parse 'text' (length n, not necessarily NUL-terminated) into nodes allocated from
** 'arena'.  On AT_EPARSE, 'errmsg' (if not NULL, 'errmsg_size' bytes) receives
** "line:col: what went wrong".  Nesting deeper than 256 levels is refused. */
at_err at_json_parse(at_arena *arena, const char *text, size_t n, at_json **out, char *errmsg,
                     size_t errmsg_size);
/* Object member by key, or NULL. */
const at_json *at_json_get(const at_json *obj, const char *key);

/* ---- threads ------------------------------------------------------------------------ */

/* fn on each of parts[0..n) (n <= AT_MAX_PARTS, each 'size' bytes): part t > 0 in a thread
** of its own, part 0 in the caller's (and a part whose thread does not start); returns when
** all are done.  For work split in shares that need no other synchronisation. */
#define AT_MAX_PARTS 16
void at_run_parts(void *(*fn)(void *), void *parts, size_t size, int n);

/* ---- time --------------------------------------------------------------------------- */

double at_time_mono_s(void); /* monotonic clock, seconds */
double at_time_wall_s(void); /* UNIX time, seconds */
/* ISO-8601 UTC time "2026-11-29T12:00:00.123Z" of UNIX time 't' into out[32]. */
void at_time_iso8601(double t, char out[32]);

/* ---- small helpers ------------------------------------------------------------------ */

#define AT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define AT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Debug-asserted but still tested in release builds, as SQLite's ALWAYS/NEVER. */
#ifdef NDEBUG
#define AT_ALWAYS(x) (x)
#define AT_NEVER(x) (x)
#else
#include <assert.h>
#define AT_ALWAYS(x) ((x) ? 1 : (assert(0 && #x), 0))
#define AT_NEVER(x) ((x) ? (assert(!#x), 1) : 0)
#endif

/* Read a whole file into a NUL-terminated heap buffer (at_free).  AT_EIO with 'errmsg'
** naming the file and errno text on failure. */
at_err at_file_read(const char *path, char **out, size_t *n_out, char *errmsg,
                    size_t errmsg_size);
/* Write 'n' bytes to 'path' atomically (temp file + rename). */
at_err at_file_write(const char *path, const void *p, size_t n, char *errmsg, size_t errmsg_size);

/* Write all 'n' bytes to 'fd' / read exactly 'n' bytes from it, retrying after EINTR and
** short transfers.  0, or -1 on an error or (reading) the end of the file. */
int at_fd_write_all(int fd, const void *p, size_t n);
int at_fd_read_all(int fd, void *p, size_t n);

/* Parse a whole decimal integer / float string; AT_EINVAL if anything is left over. */
at_err at_parse_i64(const char *s, int64_t *out);
at_err at_parse_double(const char *s, double *out);

/* ---- measurement status ------------------------------------------------------------- */

/* What became of one measured candidate.  A failed measurement is a result, not an error:
** measuring returns AT_OK and the record carries one of these.  0..8 are TVM's
** MeasureErrorNO numbers, so logs map one to one; ours are appended after them.  The
** numbers are stored in records and sent on the wire: append, never renumber.
**   X(number, NAME, cause in plain words, hint for the user) */
#define AT_MEASURE_MAP(X)                                                                  \
    X(0, NO_ERROR, "measured successfully", "nothing to do")                               \
    X(1, INSTANTIATION_ERROR,                                                              \
      "the schedule's steps do not replay on the task's DAG (invalid schedule)",           \
      "a bug in the schedule space or a record from another DAG; report it with the state") \
    X(2, COMPILE_HOST, "building the kernel failed on the tuner host (lowering or codegen)", \
      "see the error text; a codegen bug if it repeats for valid schedules")                \
    X(3, COMPILE_DEVICE, "the device could not load the built kernel",                     \
      "check that the target string matches the device (triple, -mcpu, -arch)")            \
    X(4, RUNTIME_DEVICE, "the kernel crashed on the device",                                \
      "the error text names the signal; a codegen or bounds bug if it repeats")            \
    X(5, WRONG_ANSWER, "the kernel's output differs from the reference",                   \
      "a lowering or codegen bug: report it with the state and the target")                \
    X(6, BUILD_TIMEOUT, "building took longer than the build timeout",                     \
      "raise the build timeout or give the tuner host more cores")                         \
    X(7, RUN_TIMEOUT, "running took longer than the run timeout",                          \
      "normal for very slow schedules; raise the run timeout if good ones time out")       \
    X(8, UNKNOWN_ERROR, "an error the measurer could not classify",                        \
      "see the error text and the agent's log")                                            \
    X(9, DEVICE_LOST, "the device stopped answering during the measurement",               \
      "check the agent and its board (power, network); the job is measured again")

typedef enum {
#define X(num, id, cause, hint) AT_MEASURE_##id = num,
    AT_MEASURE_MAP(X)
#undef X
        AT_N_MEASURE
} at_measure;

/* The cost TVM records for every failed measurement (seconds); mean and median too. */
#define AT_MEASURE_FAIL_COST 1e10

/* Name ("RUN_TIMEOUT"), cause and hint of status 'code'; never NULL.  A code this build
** does not know (written by a newer one) gives "UNKNOWN_STATUS" and a generic text. */
const char *at_measure_name(int code);
const char *at_measure_cause(int code);
const char *at_measure_hint(int code);
/* Parse a name as at_measure_name writes it (case-insensitive) or a decimal number;
** AT_EINVAL otherwise. */
at_err at_measure_parse(const char *s, int *out);
/* Sort v[0..n) in place, ascending, and return its median (the mean of the middle two when
** n is even); 0 when n <= 0. */
double at_median_sort(double *v, int n);

/* ---- command lines (at_opts.c) ---------------------------------------------------------
** The flag parser of tuner, tracker and rpc_agent: a table of at_opt per command. */

#define AT_EXIT_USAGE 2 /* a bad command line, in every command */

typedef enum {
    AT_OPT_BOOL, /* --name; dest is int *, set to 1 */
    AT_OPT_STR,  /* --name VALUE or --name=VALUE; dest is const char ** */
    AT_OPT_INT,  /* a decimal integer; dest is int * */
    AT_OPT_I64,  /* a decimal integer; dest is int64_t * */
    AT_OPT_NUM,  /* a number (strtod); dest is double * */
    AT_OPT_LIST  /* a string, repeatable: each occurrence appended; dest is at_opt_list * */
} at_opt_kind;

#define AT_OPT_LIST_MAX 16
typedef struct at_opt_list {
    int n;
    const char *v[AT_OPT_LIST_MAX];
} at_opt_list;

typedef struct at_opt {
    const char *name; /* long name without the dashes */
    char short_name;  /* -x, or 0 */
    at_opt_kind kind; /* numbers must be >= 0; a command checks narrower ranges itself */
    void *dest;
    const char *metavar; /* "FILE" in the help; NULL for BOOL */
    const char *help;    /* NULL: not listed; AT_OPT_OLD("new-name"): an old spelling */
} at_opt;

/* The 'help' of an old spelling: it still works, says which flag replaces it, and is not
** listed.  {"key", 0, AT_OPT_STR, &path, "FILE", AT_OPT_OLD("fleet-key")} */
#define AT_OPT_OLD(now) ("\001" now)

/* Parse argv[1..argc) for the command 'prog' ("tuner best", "tracker").  Flags in any order
** and before, between or after positional arguments; "--" ends the flags; "-" is a
** positional argument.  Positional arguments move to argv[1..] in order, counted in
** *n_pos.  -h/--help sets *help.  Returns 0, or AT_EXIT_USAGE after a message naming the
** flag on stderr ("PROG: --top needs a value (N)"). */
int at_opts_parse(const char *prog, const at_opt *opts, int n_opts, int argc, char **argv,
                  int *n_pos, int *help);
/* The flag lines of a usage text (listed entries, then -h/--help). */
void at_opts_help(FILE *f, const at_opt *opts, int n_opts);
/* 0 when lo <= v <= hi, else AT_EXIT_USAGE after "PROG: FLAG needs a whole number from LO
** to HI, not V" (for ranges narrower than at_opts_parse's >= 0). */
int at_opt_range(const char *prog, const char *flag, int64_t v, int64_t lo, int64_t hi);
/* A command that takes flags only (tracker, rpc_agent): parse, print the usage for --help
** ('usage') or 'version_line' when *version was set, refuse positional arguments, apply
** --log-level.  Returns -1 to go on, or the exit status to return now. */
int at_opts_command(const char *prog, const at_opt *opts, int n_opts, int argc, char **argv,
                    void (*usage)(FILE *), const int *version, const char *version_line,
                    const char *const *log_level);
/* "PROG: MESSAGE" and "(PROG --help for usage)" on stderr; returns AT_EXIT_USAGE. */
int at_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Set the log level from a --log-level value (NULL: leave it); AT_EXIT_USAGE naming the
** levels when it is not one of debug, info, warn, error, off. */
int at_opts_log_level(const char *prog, const char *level);

#endif /* AT_COMMON_H */
