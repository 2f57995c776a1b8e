/* kernels/kernels.h -- the operator library, lowering of schedule states to loop IR, and
** code generation (prefix kn_).  The runtime half that devices link is kernels_rt.h.
**
**   ss_dag *dag;  kn_op_build("matmul:M=1024,N=1024,K=1024", &dag, err, sizeof err);
**   ... schedule a state (schedule_space.h) ...
**   kn_lower(state, &ir, err, sizeof err);                     loop IR
**   kn_build(ir, target, &artifact, err, sizeof err);          object code + signature
*/
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

#include "common/common.h"
#include "common/wire.h"
#include "kernels/kernels_rt.h"
#include "schedule_space/schedule_space.h"

/* ---- operator library (kn_ops.c) ---------------------------------------------------- */

/* One library operator: its name, parameters with defaults, and a one-line summary. */
typedef struct kn_op_info {
    const char *name;    /* "matmul" */
    const char *params;  /* "M=1024,N=1024,K=1024,tb=0" -- every parameter with its default */
    const char *summary; /* one line for --help and docs/operators.md */
} kn_op_info;

/* The table of library operators, terminated by an entry with name NULL. */
const kn_op_info *kn_op_list(void);

/* Build the DAG of an operator spec "NAME:KEY=VALUE,KEY=VALUE..." (parameters not given
** take their defaults; "NAME" alone is all defaults).  On AT_OK the caller owns *out
** (ss_dag_unref).  On AT_EINVAL 'errmsg' names the spec and the problem (unknown
** operator, unknown parameter, bad value, inconsistent shapes). */
at_err kn_op_build(const char *spec, ss_dag **out, char *errmsg, size_t errmsg_size);

/* The DAG text of a spec (what kn_op_build parses); caller frees with at_free. */
at_err kn_op_text(const char *spec, char **out, char *errmsg, size_t errmsg_size);

/* Winograd F(m x m, 3 x 3), m = 2 or 4 (the winograd_* operators): the constant matrices
** Bt [a][a], G [a][3] and At [m][a] (a = m + 2, row-major; AT_EINVAL for another m), and
** the transformed weight of a 3x3 convolution, u[a][a][C][K] = G w G^T from w[3][3][C][K]
** (NHWC's [R, S, C, K]). */
at_err kn_winograd_matrices(int m, const float **bt, const float **g, const float **at);
at_err kn_winograd_weight(int m, int64_t C, int64_t K, const float *w, float *u);

/* ---- loop IR (kn_lower.c) ------------------------------------------------------------ */

/* The lowered program: loops, stores and guards over flat buffers.  Values and indices are
** ss_expr trees whose VAR leaves are loop variables and whose LOAD leaves name a buffer
** (id = buffer index) with one flat int32 index.  Code generators and the cost model's
** feature extraction read this and nothing else. */

/* KN_S_SYNC and KN_S_ALLREDUCE appear in GPU programs only (ir->is_gpu). */
typedef enum {
    KN_S_FOR,
    KN_S_SEQ,
    KN_S_STORE,
    KN_S_IF,
    KN_S_SYNC,     /* GPU: all threads of the block wait here (shared-memory stages) */
    KN_S_ALLREDUCE /* GPU: buf[index] of every thread of loop 'var' (a thread loop of
                   ** 'extent' threads) is combined by 'red'; every thread gets the result */
} kn_stmt_kind;

/* The GPU kinds run each iteration on its own block or thread: the loop variable is the
** block/thread index (guarded when the launch has more threads than the loop). */
typedef enum {
    KN_FOR_SERIAL,
    KN_FOR_PARALLEL,
    KN_FOR_VECTORIZE,
    KN_FOR_UNROLL,
    KN_FOR_BLOCK_X,
    KN_FOR_BLOCK_Y,
    KN_FOR_BLOCK_Z,
    KN_FOR_THREAD_X,
    KN_FOR_THREAD_Y,
    KN_FOR_THREAD_Z,
    KN_FOR_VTHREAD /* only before kn_lower's virtual-thread pass: never in its output */
} kn_for_kind;

/* Where a temporary lives: CPU temporaries and GPU tensors between launches are global;
** on a GPU, a cache-read stage named "*.shared" inside a block is shared by its threads,
** and other stages computed inside a launch are per thread (registers). */
typedef enum { KN_SCOPE_GLOBAL, KN_SCOPE_SHARED, KN_SCOPE_LOCAL } kn_scope;

typedef struct kn_stmt kn_stmt;
struct kn_stmt {
    uint8_t kind;      /* kn_stmt_kind */
    uint8_t for_kind;  /* FOR: kn_for_kind */
    int var;           /* FOR: loop variable (0 .. extent-1) */
    int64_t extent;    /* FOR */
    int unroll_max_step; /* FOR: auto-unroll budget of the stage (0: none) */
    int stage;         /* FOR, STORE: the stage it belongs to */
    kn_stmt *body;     /* FOR, IF (the 'then' part) */
    ss_expr *cond;     /* IF */
    int buf;           /* STORE: buffer index */
    ss_expr *index;    /* STORE: flat element index (int32) */
    ss_expr *value;    /* STORE */
    uint8_t is_init;   /* STORE: a reduction's initial value */
    uint8_t is_update; /* STORE: a reduction's update buf[i] = combine(buf[i], x) */
    int n;             /* SEQ */
    kn_stmt **items;   /* SEQ */
    uint8_t red;       /* ALLREDUCE: ss_reduce (also uses var, extent, buf, index) */
};

typedef struct kn_buf {
    const char *name;
    at_dtype dtype;
    int64_t n_elems;
    int n_dims;
    int64_t shape[SS_MAX_DIMS]; /* the region it holds (row-major) */
    int arg;          /* >= 0: kernel argument index; -1: a temporary */
    int par_var;      /* temporary allocated inside parallel loop 'par_var' (-1: outside) */
    int scope_var;    /* temporary: loop whose body it lives in (-1: the whole kernel) */
    int stage;        /* stage that writes it (-1 for inputs) */
    uint8_t scope;    /* kn_scope */
} kn_buf;

typedef struct kn_var {
    const char *name;
    int64_t extent;
} kn_var;

/* One argument of a generated function. */
typedef struct kn_arg_desc {
    at_dtype dtype;
    int n_dims;
    int64_t shape[SS_MAX_DIMS];
    int is_output;
    int is_const;
} kn_arg_desc;

#define KN_MAX_ARGS 64

typedef struct kn_ir {
    at_arena arena;
    int n_bufs;
    kn_buf *bufs;
    int n_vars;
    kn_var *vars;
    kn_stmt *body;
    ss_dag *dag;      /* reference: the task DAG */
    int n_args;       /* the function's arguments */
    kn_arg_desc args[KN_MAX_ARGS];
    int arg_src[KN_MAX_ARGS]; /* kernel: the task argument a rewritten weight comes from
                              ** (-1: the task argument itself); pre-transform: the task
                              ** input of each original weight */
    double flops;
    struct kn_ir *pre; /* the pre-transform of rewritten weights, or NULL: its arguments
                       ** are the original weights then their new layouts */
    /* GPU programs: the state binds loops to blocks and threads.  Each root stage is one
    ** launch (kernels[i], also the items of 'body' in order); no launch is nested in
    ** another, and virtual threads are already lowered to unrolled loops. */
    int is_gpu;
    int n_kernels;
    kn_stmt **kernels;
} kn_ir;

/* Lower a concrete state to loop IR.  On AT_OK the caller owns *out (kn_ir_free).  On
** AT_ESCHED 'errmsg' says why the state cannot be lowered (e.g. nested parallel loops).
** A state that binds loops to GPU blocks or threads lowers to a GPU program (is_gpu):
** every root stage must be bound, shared stages get barriers around them, a reduction
** loop bound to threads becomes a cross-thread reduction, virtual threads are
** interleaved into the thread's work (their temporaries get one copy each). */
at_err kn_lower(const ss_state *st, kn_ir **out, char *errmsg, size_t errmsg_size);
void kn_ir_free(kn_ir *ir);
/* kn_lower calls in this process so far (all threads): how a caller checks that a program
** is lowered once (the tuning run reports it). */
int64_t kn_lower_count(void);
/* Can the body of a loop over 'var' be emitted with 'var' as a vector of lanes (no inner
** parallel or vectorized loop, no condition on 'var')?  The code generator and the cost
** model's features ask the same question. */
int kn_stmt_vectorizable(const kn_stmt *s, int var);
/* Statements of 's' once unrolled, serial loops unrolled while extent x body <= 'budget';
** -1 when a loop would stay a loop (auto_unroll_max_step's rule). */
int64_t kn_stmt_unrolled_size(const kn_stmt *s, int budget);
/* Does the CPU back end emit loop 's' as copies of its body: an unrolled loop, or a serial
** loop whose whole unrolled body fits its stage's auto_unroll_max_step? */
int kn_stmt_copied_out(const kn_stmt *s);
/* The size of the code the CPU back end gets for 'ir' (and its pre-transform): expression
** nodes and statements once unrolled loops are copied out as kn_llvm.c copies them.  Build
** time grows with it (the search's --max-code-size, docs/tuning.md); saturates at 2^40. */
int64_t kn_ir_code_size(const kn_ir *ir);
/* The program's identity: a 64-bit hash of everything a code generator reads from 'ir' (and
** its pre-transform) -- loops, their kinds, extents and unroll budgets, guards, stores,
** buffers and arguments, not the names.  Two states that lower to the same program hash the
** same; the search measures such a program once (docs/tuning.md). */
uint64_t kn_ir_hash(const kn_ir *ir);
/* Readable text of the IR (for debugging and tests). */
void kn_ir_print(const kn_ir *ir, at_buf *b);

/* ---- targets and code generation (kn_target.c, kn_llvm.c) ----------------------------- */

/* A compilation target.  CPU: "llvm -mtriple=T -mcpu=C -mattr=+a,-b [-num-cores=N]";
** "-mcpu=native" (or no -mtriple and no -mcpu) means this host, including its CPU
** features.  NVIDIA GPU: "cuda -arch=sm_XX [-max-threads-per-block=N]
** [-max-shared-memory-per-block=N] [-max-registers-per-block=N] [-num-sms=N] [-ptx]"
** (sm_75 and newer; limits default to the architecture's, docs/gpu.md); its fields are
** the 'cuda_*' ones, and 'triple' is "nvptx64-nvidia-cuda". */
typedef enum { KN_TARGET_LLVM, KN_TARGET_CUDA } kn_target_kind;

#define KN_PREFETCH_BYTES_DEFAULT 2048

typedef struct kn_target {
    char text[256];     /* the canonical target string */
    char triple[96];    /* "x86_64-pc-linux-gnu", "aarch64-linux-gnu" */
    char cpu[64];       /* "znver4", "cortex-a76", "generic" */
    char features[2048]; /* LLVM feature string "+avx2,+fma,..." */
    int is_x86, is_aarch64;
    int vector_bytes;   /* widest SIMD register: 64 with AVX-512, 32 AVX2, 16 NEON/SSE */
    int n_cores;        /* -num-cores=N, else this host's when native, else 4 */
    int64_t l1_bytes, l2_bytes; /* data caches per core (defaults when unknown) */
    int is_host;        /* objects for it can be loaded and run here */
    /* -prefetch-bytes=N: the innermost rolled loops prefetch the weights (constant inputs)
    ** they stream about N bytes ahead (kn_llvm.c; 0: none).  In the target string only when
    ** not the default, so that records of the default keep their target. */
    int64_t prefetch_bytes;
    /* Not part of the target string: set by a caller that only needs code that compiles
    ** and runs correctly (tests), never for measuring: kn_build then runs only a light IR
    ** cleanup (sroa, early-cse, instcombine, simplifycfg) and LLVM's quick instruction
    ** selection (random states of test_space build 4-9x faster than with -O3 in total). */
    int quick_build;
    /* CUDA targets (kind == KN_TARGET_CUDA) */
    int kind;                   /* kn_target_kind */
    int cuda_arch;              /* 75, 80, 86, 89, 90 ... (sm_XX) */
    int cuda_max_threads;       /* threads per block */
    int64_t cuda_max_shared;    /* shared memory per block, bytes */
    int64_t cuda_max_regs;      /* registers per block */
    int cuda_n_sms;             /* multiprocessors (for the search's hardware description) */
    int cuda_ptx;               /* ship PTX (the driver compiles it) instead of a cubin */
} kn_target;

/* Parse a target string.  AT_EINVAL with 'errmsg' naming the bad part. */
at_err kn_target_parse(const char *text, kn_target *out, char *errmsg, size_t errmsg_size);
/* The host target ("llvm -mcpu=native"). */
at_err kn_target_host(kn_target *out);

/* The hardware description the schedule space uses for a target (CPU or GPU). */
void kn_target_hw(const kn_target *t, ss_hw *hw);

/* A compiled candidate: a relocatable object and what is needed to call it. */

/* One kernel launch of a GPU artifact: kernel 'entry' of the module on grid x block
** threads with 'shared_bytes' of dynamic shared memory.  Its parameters are the task's
** arguments (device pointers, in order) and then the workspace pointer. */
typedef at_wire_launch kn_launch; /* entry[64], grid[3], block[3], shared_bytes, n_regs
                                  ** (registers per thread from the cubin, 0 unknown) */

#define KN_MAX_LAUNCHES AT_WIRE_MAX_LAUNCHES

typedef enum { KN_ART_ELF, KN_ART_PTX, KN_ART_CUBIN } kn_art_kind;

typedef struct kn_artifact {
    uint8_t *obj;       /* ELF relocatable object (at_malloc'd) */
    size_t obj_size;
    char entry[64];     /* symbol of the kernel entry point */
    char triple[96];
    int n_args;         /* the task's arguments: inputs, then outputs */
    kn_arg_desc args[KN_MAX_ARGS];
    int64_t ws_fixed, ws_per_thread; /* workspace: fixed + per_thread * n_threads bytes */
    double compile_s;   /* seconds spent in LLVM */
    /* Layout rewrite: when pre_entry[0] != 0 the kernel takes some weights in a new
    ** layout.  kernel_args[i] describes the kernel's argument i; kernel_src[i] >= 0 says it
    ** is the new layout of task argument kernel_src[i], made by the pre-transform
    ** pre_entry(bufs = [the n_pre original weights, then their n_pre new layouts], NULL,
    ** par), whose weights are task arguments pre_src[0..n_pre). */
    char pre_entry[64];
    int n_pre;
    int pre_src[KN_MAX_ARGS];
    kn_arg_desc kernel_args[KN_MAX_ARGS];
    int kernel_src[KN_MAX_ARGS];
    /* GPU artifacts (kind != KN_ART_ELF): 'obj' is PTX text (NUL-terminated) or a cubin
    ** for 'gpu_arch'; the launches run in order on the same arguments; ws_fixed is the
    ** device workspace (tensors passed from one launch to the next); triple is
    ** "nvptx64-nvidia-cuda". */
    int kind;           /* kn_art_kind */
    char gpu_arch[16];  /* "sm_90" */
    int n_launches;
    kn_launch launches[KN_MAX_LAUNCHES];
} kn_artifact;

/* Compile 'ir' for 'target' into an artifact whose entry symbol is 'entry' (NULL:
** "at_kernel").  On AT_OK the caller owns *out (kn_artifact_free).  AT_ECODEGEN with
** LLVM's (or NVRTC's) message if the compiler rejects the module; AT_EUNSUPPORTED when
** this build has no backend for the target (kn_backend_find); for a GPU target,
** AT_ESCHED when the program breaks the target's launch limits (threads per block,
** shared memory, registers).  Thread-safe: each call uses its own compiler context. */
at_err kn_build(const kn_ir *ir, const kn_target *target, const char *entry,
                kn_artifact **out, char *errmsg, size_t errmsg_size);
void kn_artifact_free(kn_artifact *a);

/* Lower 'st' and build it (kn_lower then kn_build): what the tuner's build workers, the
** model runner and the reference kernels do with a state. */
at_err kn_build_state(const ss_state *st, const kn_target *target, const char *entry,
                      kn_artifact **out, char *errmsg, size_t errmsg_size);

/* The artifact as the wire library encodes it (build workers' results, jobs and reference
** kernels on the fleet).  to_wire points 'w' into 'a' (and 'args', filled here): 'a' must
** outlive it.  from_wire makes a new artifact (the object bytes copied) and checks what the
** wire decoder does not: AT_EPROTO for a malformed one, AT_ENOMEM.  The wire does not carry
** is_const nor compile_s. */
void kn_artifact_to_wire(const kn_artifact *a, at_wire_artifact *w,
                         at_wire_arg args[AT_WIRE_MAX_ARGS]);
at_err kn_artifact_from_wire(const at_wire_artifact *w, kn_artifact **out, char *errmsg,
                             size_t errmsg_size);

/* Generate the LLVM module of 'ir' and run LLVM's verifier on it, without optimising or
** emitting code (fast): AT_ECODEGEN with the verifier's message when it is rejected.  For a
** CUDA target: generate the CUDA C and check the launch limits (kn_cuda_source), in every
** build, with or without the toolkit. */
at_err kn_verify(const kn_ir *ir, const kn_target *target, char *errmsg, size_t errmsg_size);

/* The LLVM IR text of 'ir' (after optimisation when 'optimized'), for debugging. */
at_err kn_build_llvm_text(const kn_ir *ir, const kn_target *target, int optimized, char **out,
                          char *errmsg, size_t errmsg_size);

/* ---- backends (kn_backend.c) --------------------------------------------------------- */

/* A code generator.  The table holds "llvm" when the build has LLVM and "cuda" when it
** found the CUDA toolkit (NVRTC); callers ask instead of using #ifdef. */
typedef struct kn_backend_ops {
    const char *name;   /* "llvm", "cuda" */
    kn_target_kind kind;
    at_err (*build)(const kn_ir *ir, const kn_target *t, const char *entry, kn_artifact **out,
                    char *errmsg, size_t errmsg_size);
    /* fast checks without emitting code (may be NULL) */
    at_err (*verify)(const kn_ir *ir, const kn_target *t, char *errmsg, size_t errmsg_size);
    /* the compiler's version ("LLVM 16", "NVRTC 13.0"); NULL when it cannot be loaded */
    const char *(*version)(void);
    /* "cuda" only (else NULL): compile CUDA C text (kn_cuda_source's, or several of them
    ** one after the other) for sm_'arch' into PTX (ptx != 0, NUL-terminated) or a cubin;
    ** *out is at_malloc'd */
    at_err (*compile_source)(const char *src, int arch, int ptx, uint8_t **out, size_t *n,
                             char *errmsg, size_t errmsg_size);
} kn_backend_ops;

/* The backend called 'name', or NULL when this build has none. */
const kn_backend_ops *kn_backend_find(const char *name);
/* The backend for a target's kind, or NULL. */
const kn_backend_ops *kn_backend_for(const kn_target *t);

/* ---- CUDA C (kn_cuda.c, kn_nvrtc.c) -------------------------------------------------- */

/* The CUDA C text of a GPU program (ir->is_gpu): one __global__ function per launch,
** named '<entry>_k<i>', every one taking the task's arguments and the workspace; and the
** launches (grid, block, shared memory) in launches[KN_MAX_LAUNCHES].  Checks the
** target's limits: AT_ESCHED with a sentence when a launch needs more threads, shared
** memory or local memory than the target allows, or when the IR is not a valid GPU
** program (a barrier where not every thread reaches it, a root stage on one thread).
** Needs no CUDA toolkit.  The text compiles as C too (tests/support/gpu_emu.c runs it on
** the CPU). */
at_err kn_cuda_source(const kn_ir *ir, const kn_target *t, const char *entry, char **src,
                      kn_launch *launches, int *n_launches, int64_t *ws_bytes, char *errmsg,
                      size_t errmsg_size);

/* A GPU schedule that is always valid: every root stage's spatial loops fused and split
** into blocks of 'threads' threads (reductions run within a thread), every other stage
** inlined where it can be.  The reference that GPU agents check results against. */
at_err kn_gpu_naive(ss_dag *dag, int threads, ss_state **out, char *errmsg, size_t errmsg_size);

/* Registers per thread of kernel 'entry' in a cubin (its .nv.info), 0 if not found. */
int kn_cubin_regs(const uint8_t *cubin, size_t n, const char *entry);

/* ---- hand-written schedules (kn_hand.c) ---------------------------------------------- */

/* Apply the hand-written schedule of a matmul (the naive state of a 3-tensor A x B DAG):
** a cache-written block per parallel task, an 8 x (2 vectors) register tile, packed
** panels of B.  AT_EINVAL when 'st' is not such a state. */
at_err kn_hand_matmul(ss_state *st, const kn_target *t, char *errmsg, size_t errmsg_size);
/* The tuner's first-round matmuls and dense layers (kn_hand.c): register tiles summed over
** all of K, walked per parallel block; B (the constant operand read along j) stored in
** their order when 'layout_rewrite'; an elementwise epilogue (bias, activation, residual
** add) inlined into the output, which reads the block, a vector at a time.  Variant 0 (8
** rows x 2 vectors, 4 rows with AVX2's 16 registers; blocks of 32 x 4 tiles) is the fastest
** of 1,000 trials on matmul 1024^3; the others (0 <= variant < KN_HAND_MATMUL_VARIANTS)
** change the tile and block sizes (4: blocks one tile wide, whose next panel of B the
** kernel can prefetch).  AT_EINVAL, the state untouched, when 'st' is not the
** naive state of one sum over k with two spatial axes (its first computed stage) followed
** only by elementwise stages over the same [i, j], or for no such variant. */
#define KN_HAND_MATMUL_VARIANTS 5
at_err kn_hand_matmul_tiled(ss_state *st, int vector_bytes, int layout_rewrite, int variant,
                            char *errmsg, size_t errmsg_size);
/* Inline elementwise stages, parallelize the outer loops and vectorize the inner loop of
** each remaining stage: a reasonable schedule for any DAG. */
at_err kn_hand_elementwise(ss_state *st, const kn_target *t, char *errmsg, size_t errmsg_size);
/* The Winograd transforms (the naive state of a winograd_input or winograd_output DAG): per
** tile and block of channels, both a-term reductions in registers and L1, the channels
** vectorized; the tuner's first population of such a task starts from it.  AT_EINVAL for
** another DAG. */
at_err kn_hand_winograd(ss_state *st, int vector_bytes, char *errmsg, size_t errmsg_size);
/* A direct NHWC convolution (the naive state of a conv2d layout=NHWC DAG with any
** elementwise epilogue): output tiles of up to 8 columns x 1 (variant 0), 2 (1) or 3 (2) vectors
** of channels in registers, every tap accumulated into them, [n, h] parallel, the epilogue
** inlined, the padding too (copied per tile instead at stride 1 over input channels).  The
** tuner's first population of an NHWC conv task starts from every variant that fits.
** AT_EINVAL for another DAG, or a variant whose channel block does not divide the output
** channels. */
#define KN_HAND_CONV_NHWC_VARIANTS 3
at_err kn_hand_conv_nhwc(ss_state *st, int vector_bytes, int variant, char *errmsg,
                         size_t errmsg_size);
/* The same for an NCHW convolution summing over input channels (kn_hand.c): a register
** block of output channels x a row of output pixels, w vectorized, per parallel tile, in
** KN_HAND_CONV_NCHW_VARIANTS block shapes (0 <= variant; 0 is the best 1,000 trials found
** on the ResNet conv2d). */
#define KN_HAND_CONV_NCHW_VARIANTS 3
at_err kn_hand_conv_nchw(ss_state *st, int vector_bytes, int variant, char *errmsg,
                         size_t errmsg_size);
/* A row-wise operator (softmax, layer norm: reductions over the last axis and the
** elementwise stages around them, the output elementwise over [rows..., j]): the rows fused
** and parallel, every other stage computed at the row, each j loop vector-wide, each
** reduction's lanes factored out into a vector accumulator (rfactor).  The tuner's first
** population of such a task starts from it.  AT_EINVAL for another DAG. */
at_err kn_hand_rowwise(ss_state *st, int vector_bytes, char *errmsg, size_t errmsg_size);
/* A batched product (one sum over k with three spatial axes, the last one read
** contiguously by the second operand) with an elementwise epilogue: tiles of up to 8 rows
** of the middle axis x one vector of the last, accumulated over every k in registers, the
** tile rows parallel, the epilogue inlined.  The tuner's first population of such a task
** starts from it.  AT_EINVAL for another DAG. */
at_err kn_hand_bmm(ss_state *st, int vector_bytes, char *errmsg, size_t errmsg_size);

/* ---- running artifacts here (kn_run.c) ----------------------------------------------- */

/* Buffers for an artifact's arguments, filled from 'seed' (inputs) or zeroed (outputs). */
typedef struct kn_bufset {
    int n;
    void *ptr[64];
    size_t n_bytes[64];
    int64_t n_elems[64];
    at_dtype dtype[64];
} kn_bufset;

at_err kn_bufset_alloc(const kn_artifact *a, uint64_t seed, kn_bufset *out);
void kn_bufset_free(kn_bufset *b);

/* Load an artifact with the runtime's loader and run it once on 'bufs' (the task's
** arguments) with 'par': the pre-transform first when the artifact has one (into buffers
** of its own).  AT_ELOAD / the kernel's non-zero return as AT_EIO, with a message. */
at_err kn_run_once(const kn_artifact *a, kn_bufset *bufs, const kn_rt_par *par, char *errmsg,
                   size_t errmsg_size);

#endif /* KN_KERNELS_H */
