/* cpulm.h: the one public header of libcpulm, a CPU-first LLM inference engine.
 *
 * Everything the CLI, the bench tool and the server use goes through this header.
 * Conventions:
 *   - functions return cpulm_status (0 = OK, negative = error); loaders also fill an
 *     optional cpulm_error with a one-line message;
 *   - the library never prints and never exits; logging goes through cpulm_log_set;
 *   - params are passed by pointer, NULL means defaults;
 *   - returned pointers are marked owned (caller frees) or borrowed (valid until ...).
 * Thread-safety: a cpulm_model is immutable after load and may be shared by threads and
 * contexts; a cpulm_ctx and a cpulm_sampler are used by one thread at a time.
 */
#ifndef CPULM_H
#define CPULM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CPULM_API

/* On every function that returns a cpulm_status: under clang, a call that drops the result
 * is a -Wunused-result warning (an error in CI's clang stage). A call whose failure cannot
 * matter casts it away, (void)cpulm_..., with a comment saying why. (GCC's attribute cannot
 * be silenced by the cast, so it is clang's check only.) */
#if defined(__clang__)
#define CPULM_MUST_CHECK __attribute__((warn_unused_result))
#else
#define CPULM_MUST_CHECK
#endif

/* ---- status ---- */

typedef enum cpulm_status {
    CPULM_OK = 0,
    CPULM_ERR_NOMEM = -1,
    CPULM_ERR_IO = -2,
    CPULM_ERR_FORMAT = -3,      /* malformed or truncated file / request */
    CPULM_ERR_UNSUPPORTED = -4, /* valid, but not something we implement (e.g. a dtype) */
    CPULM_ERR_INVALID_ARG = -5,
    CPULM_ERR_KV_FULL = -6, /* retryable: free a sequence or shrink the batch */
    CPULM_ERR_CANCELLED = -7,
    CPULM_ERR_TOO_SMALL = -8, /* caller's buffer too small; required size in the out-param */
    CPULM_ERR_NOT_FOUND = -9, /* key / tensor / token absent */
    CPULM_ERR_LIMIT = -10,    /* input over a size or complexity limit (a client error: 400) */
} cpulm_status;

typedef struct cpulm_error { /* optional detail; pass NULL if you only want the code */
    cpulm_status code;
    char msg[256];
} cpulm_error;

CPULM_API const char *cpulm_status_str(cpulm_status s);

/* ---- logging ---- */

enum { CPULM_LOG_DEBUG = 0, CPULM_LOG_INFO = 1, CPULM_LOG_WARN = 2, CPULM_LOG_ERROR = 3 };
typedef void (*cpulm_log_fn)(int level, const char *msg, void *user);
/* Installs the process-wide log sink (NULL: discard). Not thread-safe against logging. */
CPULM_API void cpulm_log_set(cpulm_log_fn fn, void *user);

/* ---- version and CPU ---- */

CPULM_API const char *cpulm_version(void); /* "0.1.0" plus commit when known */
/* Name of the kernel level chosen for this CPU (honours CPULM_ISA), e.g. "avx512vnni". */
CPULM_API const char *cpulm_kernel_level(void);
/* What `cpulm info --cpu` shows about kernels: the CPU features detection saw, the chosen
 * level, any CPULM_ISA warning, and for each weight type the level that provides its dot
 * product, its activation quantizer and its repacked 16-row GEMM (and whether weights of
 * the type are repacked at load), plus the levels of attention and the f32 ops.
 * Multi-line text; writes at most cap bytes incl. NUL (truncated when short);
 * *n_out (if non-NULL) = bytes needed incl. NUL. CPULM_ERR_TOO_SMALL when cap < *n_out. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_kernel_describe(char *buf, size_t cap, size_t *n_out);

/* ---- threads and NUMA ----
 * Where a context's threads run and where a model's weights live, as llama.cpp's --numa:
 *   NONE:       one thread per physical core of the affinity mask; the OS places memory;
 *   DISTRIBUTE: threads round-robin over the NUMA nodes' physical cores, and the weights
 *               (file pages and repacked copies) interleaved page by page over the nodes
 *               with memory, so every node's memory bandwidth serves the matmuls;
 *   ISOLATE:    only the cores of the node the process started on, memory preferred there;
 *   NUMACTL:    exactly the CPUs of the affinity mask (as numactl/taskset set it), one
 *               thread per CPU; no memory policy changes.
 * On a single-node machine every mode places threads as NONE does (NUMACTL also uses SMT
 * siblings) and changes no memory policy. Linux only; elsewhere every mode is NONE. */
typedef enum cpulm_numa {
    CPULM_NUMA_DEFAULT = 0, /* in params: the process-wide mode (cpulm_numa_init), else NONE */
    CPULM_NUMA_NONE = 1,
    CPULM_NUMA_DISTRIBUTE = 2,
    CPULM_NUMA_ISOLATE = 3,
    CPULM_NUMA_NUMACTL = 4,
} cpulm_numa;

/* Sets the process-wide mode that models loaded and contexts created afterwards use when
 * their params leave numa at CPULM_NUMA_DEFAULT, and records the node the calling thread
 * runs on (ISOLATE's node). Call once, early, before loading; not thread-safe against
 * loads. The tools call it for --numa. */
CPULM_API void cpulm_numa_init(cpulm_numa mode);
/* "none", "distribute", "isolate", "numactl" -> mode; CPULM_ERR_INVALID_ARG otherwise. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_numa_parse(const char *s, cpulm_numa *out);
/* What mode (DEFAULT: the process-wide one) does on this machine: the default thread count
 * and why (physical cores, affinity mask, cgroup CPU quota), the NUMA nodes, the CPUs the
 * threads are pinned to and the memory policy. Text as cpulm_kernel_describe. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_numa_describe(cpulm_numa mode, char *buf, size_t cap,
                                                            size_t *n_out);

/* ---- model ---- */

typedef int32_t cpulm_token;
typedef struct cpulm_model cpulm_model;     /* immutable after load; share across threads */
typedef struct cpulm_ctx cpulm_ctx;         /* KV cache + scratch; one thread at a time */
typedef struct cpulm_sampler cpulm_sampler; /* per-sequence state (RNG, penalty history) */

typedef struct cpulm_model_params {
    int vocab_only;  /* load metadata and tokenizer only; no tensors are required */
    int use_mlock;   /* pin the mapped file in RAM */
    cpulm_numa numa; /* where the weights' pages go (DISTRIBUTE, ISOLATE); DEFAULT: process mode */
    int no_repack;   /* keep every weight row-major, no 16-row repacking (A/B measurements,
                      * debugging); the CLI sets it from CPULM_NO_REPACK=1 */
} cpulm_model_params;

CPULM_API cpulm_model_params cpulm_model_default_params(void);

/* Returns: owned, free with cpulm_model_free. NULL on error, details in *err if non-NULL. */
CPULM_API cpulm_model *cpulm_model_load(const char *path, const cpulm_model_params *p,
                                        cpulm_error *err);
CPULM_API void cpulm_model_free(cpulm_model *m); /* NULL is a no-op */

typedef struct cpulm_model_info {
    const char *arch;  /* borrowed: valid while the model lives */
    const char *name;  /* general.name or "" */
    const char *ftype; /* most common 2-D weight type, e.g. "Q4_0" */
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot;
    float rope_freq_base, norm_eps;
    int64_t n_params;      /* elements of all tensors */
    uint64_t file_size;    /* bytes */
    uint64_t weight_bytes; /* bytes of tensor data as loaded: the file's + widened_bytes */
    int32_t n_tensors;
    uint32_t gguf_version;
    /* mixture of experts (0 for dense models): a token runs n_expert_used of n_expert FFNs of
     * n_ff_exp, so it reads only part of the weights */
    int32_t n_expert, n_expert_used, n_ff_exp;
    int32_t n_layer_recurrent; /* hybrid models: Gated DeltaNet layers among n_layer (0 else) */
    int64_t n_params_active;   /* parameters one token computes with (used experts only) */
    uint64_t active_bytes;     /* weight bytes one generated token reads: every matrix but the
                                  experts it does not use and an untied token_embd (one row) */
    /* sliding-window models (gemma3, gpt-oss; 0 else): the window, how many layers use it,
     * and their rope base */
    int32_t n_swa, n_layer_swa;
    float rope_freq_base_swa;
    /* bytes the loader added by widening Q5_0 matrices to Q8_0 for the kernel level's GEMMs
     * (exact; weight_bytes and active_bytes include them) */
    uint64_t widened_bytes;
} cpulm_model_info;

CPULM_API void cpulm_model_get_info(const cpulm_model *m, cpulm_model_info *out);

/* Tensor i of the file (0 <= i < n_tensors). Out-params may be NULL. Borrowed strings. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_model_tensor(const cpulm_model *m, int32_t i,
                                                           const char **name,
                                                           const char **type_name, int64_t ne[4],
                                                           uint64_t *n_bytes);

/* Metadata value as text (strings verbatim, numbers formatted, arrays as "[n items]").
 * Writes at most cap bytes incl. NUL; CPULM_ERR_TOO_SMALL sets *n_out to the needed size. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_model_meta(const cpulm_model *m, const char *key,
                                                         char *buf, size_t cap, size_t *n_out);
CPULM_API int32_t cpulm_model_meta_count(const cpulm_model *m);
CPULM_API const char *cpulm_model_meta_key(const cpulm_model *m, int32_t i); /* borrowed */

/* KV cache bytes for one sequence of n_ctx tokens with the given KV type; 0 when the model's
 * KV rows cannot be stored in that type (q8_0 and q4_0 need a head size that is a multiple
 * of 32). */
typedef enum cpulm_kv_type {
    CPULM_KV_F16 = 0,
    CPULM_KV_F32 = 1,
    CPULM_KV_Q8_0 = 2,
    CPULM_KV_Q4_0 = 3,
} cpulm_kv_type;
CPULM_API uint64_t cpulm_model_kv_bytes(const cpulm_model *m, int32_t n_ctx, cpulm_kv_type t);

/* ---- vocabulary and tokenizer ---- */

CPULM_API int32_t cpulm_vocab_n(const cpulm_model *m);
CPULM_API cpulm_token cpulm_token_bos(const cpulm_model *m);           /* -1 if none */
CPULM_API cpulm_token cpulm_token_eos(const cpulm_model *m);           /* -1 if none */
CPULM_API int cpulm_token_is_eog(const cpulm_model *m, cpulm_token t); /* eos, eot, ... */
CPULM_API int cpulm_vocab_add_bos(const cpulm_model *m); /* tokenizer.ggml.add_bos_token */
/* Whether the model is an encoder (bert, nomic-bert): embeddings and rank scores only. */
CPULM_API int cpulm_model_is_encoder(const cpulm_model *m);
CPULM_API const char *cpulm_token_text(const cpulm_model *m, cpulm_token t); /* raw, borrowed */

/* Text -> token ids. add_special: BOS (and EOS if the vocab asks); parse_special: turn
 * control-token strings in the text into their ids. CPULM_ERR_TOO_SMALL: *n_out = needed. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_tokenize(const cpulm_model *m, const char *text,
                                                       size_t len, int add_special,
                                                       int parse_special, cpulm_token *out,
                                                       int32_t cap, int32_t *n_out);
/* cpulm_tokenize that can be stopped: it calls stop(user) every thousand steps of work
 * (about a hundred microseconds) and returns CPULM_ERR_CANCELLED once that returns nonzero.
 * stop may be NULL. For long texts on a server (a request whose client left). */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_tokenize_cancellable(
    const cpulm_model *m, const char *text, size_t len, int add_special, int parse_special,
    cpulm_token *out, int32_t cap, int32_t *n_out, int (*stop)(void *user), void *user);

/* The tokens a reranker (a context with CPULM_POOLING_RANK) scores for a query and a
 * document, as llama-server builds them: the model's tokenizer.chat_template.rerank prompt
 * with {query} and {document} filled in, or else [BOS] query [EOS] [SEP] document [EOS]
 * with each special token only where the vocabulary asks for it (a BERT vocabulary:
 * [CLS] query [SEP] document). CPULM_ERR_TOO_SMALL: *n_out = the count needed. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_rerank_tokens(const cpulm_model *m, const char *query,
                                                            size_t qlen, const char *doc,
                                                            size_t dlen, cpulm_token *out,
                                                            int32_t cap, int32_t *n_out);

/* The bytes a token stands for (byte tokens decoded, SPM '\xe2\x96\x81' -> ' ').
 * Control tokens give "" unless special != 0. Not NUL-terminated; *n_out = byte count. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_token_to_piece(const cpulm_model *m, cpulm_token t,
                                                             int special, char *buf, int32_t cap,
                                                             int32_t *n_out);

/* Streaming detokenizer: emits only complete UTF-8 sequences, holding back a partial one
 * across token boundaries; strips the SPM leading space after BOS as the reference does. */
typedef struct cpulm_detok {
    const cpulm_model *m;
    unsigned char pending[8];
    int32_t n_pending;
    int32_t at_start; /* next piece is the first after BOS */
    int32_t special;  /* render control tokens as text */
} cpulm_detok;

CPULM_API void cpulm_detok_init(cpulm_detok *d, const cpulm_model *m, int special);
/* Appends token t's text; writes complete UTF-8 bytes to out (cap >= 64 always suffices
 * for one token's piece is NOT guaranteed: pass cap >= 256). Returns bytes written, or
 * a negative status. */
CPULM_API int32_t cpulm_detok_push(cpulm_detok *d, cpulm_token t, char *out, int32_t cap);
/* Emits any held-back bytes (invalid sequences become U+FFFD). */
CPULM_API int32_t cpulm_detok_flush(cpulm_detok *d, char *out, int32_t cap);

/* ---- context and decoding ---- */

/* Embeddings: the hidden states after the final norm (the input of the output projection),
 * per token or pooled per sequence. Values are llama.cpp's enum llama_pooling_type, which is
 * also what the GGUF key <arch>.pooling_type holds. */
typedef enum cpulm_pooling {
    CPULM_POOLING_UNSPECIFIED = -1, /* in params: the model's default */
    CPULM_POOLING_NONE = 0,         /* one vector per output token (the rows want_logits marks) */
    CPULM_POOLING_MEAN = 1,         /* mean over the sequence's tokens */
    CPULM_POOLING_CLS = 2,          /* the sequence's first token */
    CPULM_POOLING_LAST = 3, /* the sequence's last token (decoder embedders, Qwen3-Embedding) */
    CPULM_POOLING_RANK = 4, /* a reranker encoder's classification head: the score is element 0 */
} cpulm_pooling;

typedef enum cpulm_embd_mode {
    CPULM_EMBD_OFF = 0,         /* logits only */
    CPULM_EMBD_ONLY = 1,        /* embeddings only: no output projection, no logits buffer */
    CPULM_EMBD_WITH_LOGITS = 2, /* both */
} cpulm_embd_mode;

typedef struct cpulm_ctx_params {
    int32_t n_ctx;           /* tokens per sequence; 0 = min(model's context, 4096) */
    int32_t n_seq_max;       /* sequences that can live at once, each with its own n_ctx */
    int32_t n_batch;         /* most tokens one decode call may carry */
    int32_t n_threads;       /* for decodes of one token per sequence; 0 = physical cores */
    int32_t n_threads_batch; /* for prompt batches; 0 = n_threads */
    cpulm_kv_type kv_type;
    int32_t n_outputs_max;      /* most logit rows one decode may return; 0 = n_seq_max */
    cpulm_numa numa;            /* thread placement (see cpulm_numa); DEFAULT: process mode */
    int no_pin;                 /* never pin threads to CPUs, whatever the NUMA mode; the CLI
                                 * sets it from CPULM_NO_PIN=1 */
    cpulm_embd_mode embeddings; /* CPULM_EMBD_OFF (default): logits only */
    cpulm_pooling pooling; /* with embeddings; UNSPECIFIED: the model's (cpulm_model_pooling) */
    int attn_fast;         /* F16 caches only. CPULM_ATTN_AUTO (default): llama.cpp build
                            * 9928's rule (see below); 1: tiled attention with f32
                            * accumulation for every row (fast on long contexts; logits
                            * differ from llama.cpp's short prompts by up to ~0.01); 0: the
                            * older reference's F16 attention numerics for every row, by
                            * tiles; -1: the same bits by the slower per-(token, head) walk
                            * (an oracle for tests and A/B benchmarks) */
} cpulm_ctx_params;

/* attn_fast = CPULM_ATTN_AUTO (the default) follows llama.cpp's CPU flash attention as of
 * build 9928, per sequence: a sequence with at least CPULM_ATTN_AUTO_ROWS tokens in a decode
 * call (a prompt chunk) takes the tiled numerics (f32 queries, f32 accumulation) for them, a
 * sequence with fewer (generation, short prompts) the reference's F16 numerics; head sizes
 * that are not a multiple of 16 always take the F16 numerics. The result of a token then
 * depends on how its sequence's tokens were cut into calls, as in llama.cpp, but not on the
 * other sequences decoded in the same calls. */
#define CPULM_ATTN_AUTO      2
#define CPULM_ATTN_AUTO_ROWS 64
/* attn_fast = CPULM_ATTN_BF16: CPULM_ATTN_AUTO's rule, with the tiled blocks' products (Q.K
 * and P.V) on bf16 operands accumulated in f32 (vdpbf16ps on CPUs with AVX512-BF16: ~2x the
 * products per cycle). Scores and outputs differ from the f32 tiles by the operands' rounding
 * to 8 bits of mantissa (docs/CORRECTNESS.md "bf16 attention products"). Generation (rows
 * under CPULM_ATTN_AUTO_ROWS) keeps the reference's numerics. On a kernel level without bf16
 * products (AVX2, AVX-512 without BF16, ARM) a context runs it as CPULM_ATTN_AUTO: the
 * portable bf16 code was ~16x slower than the f32 tiles; CPULM_ISA=generic keeps it (the
 * numerics' oracle). */
#define CPULM_ATTN_BF16 3

/* The attn_fast a context created now runs for attn_fast on this CPU's kernel level:
 * CPULM_ATTN_AUTO for CPULM_ATTN_BF16 where the level has no bf16 products, else attn_fast. */
CPULM_API int cpulm_attn_resolve(int attn_fast);

CPULM_API cpulm_ctx_params cpulm_ctx_default_params(void);

/* Allocates the KV cache and all scratch once; decoding allocates nothing.
 * Returns: owned, free with cpulm_ctx_free. The model must outlive the context. */
CPULM_API cpulm_ctx *cpulm_ctx_new(const cpulm_model *m, const cpulm_ctx_params *p,
                                   cpulm_error *err);
CPULM_API void cpulm_ctx_free(cpulm_ctx *ctx); /* NULL is a no-op */

typedef struct cpulm_batch { /* parallel arrays of length n, read during the call only */
    int32_t n;
    const cpulm_token *token;
    const int32_t *pos;        /* NULL: append at each sequence's end */
    const int32_t *seq;        /* NULL: all sequence 0 */
    const int8_t *want_logits; /* NULL: logits for the last token only */
} cpulm_batch;

/* Evaluates a batch. Positions of a sequence must continue its KV contents in order.
 * All-or-nothing: on error the KV cache is unchanged.
 * Returns CPULM_OK; CPULM_ERR_KV_FULL (retryable) when a sequence would pass n_ctx;
 * CPULM_ERR_INVALID_ARG for bad tokens, positions, sequence ids or n > n_batch. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_decode(cpulm_ctx *ctx, const cpulm_batch *b);

/* Logits of the i-th batch token that asked for them, [n_vocab].
 * Borrowed: valid until the next decode on ctx. NULL if i is out of range or the context
 * computes embeddings only. */
CPULM_API const float *cpulm_ctx_logits(const cpulm_ctx *ctx, int32_t i);
CPULM_API int32_t cpulm_ctx_n_outputs(const cpulm_ctx *ctx);

/* ---- embeddings (contexts made with params.embeddings != CPULM_EMBD_OFF) ----
 * Pooling NONE: cpulm_ctx_embeddings_ith(i) is the final-norm hidden state of the i-th batch
 * token that asked for output (want_logits, as for logits).
 * Pooled (MEAN, CLS, LAST): every sequence in a batch gets one vector over its tokens in that
 * batch, whatever want_logits says (it still selects logits in WITH_LOGITS mode). LAST needs
 * only the sequence's last token in the batch (earlier ones may be in the cache); MEAN and CLS
 * need the whole sequence in one decode, so a sequence's first token in the batch must be at
 * position 0, else decode returns CPULM_ERR_INVALID_ARG. Vectors are raw (not normalized):
 * see cpulm_embd_normalize. Many sequences in one batch give the same vectors as one at a
 * time (up to float summation order, which is fixed: the same batch gives the same bits). */

/* The pooling the model's GGUF asks for (<arch>.pooling_type); NONE when absent, as
 * llama.cpp does for decoder models. */
CPULM_API cpulm_pooling cpulm_model_pooling(const cpulm_model *m);
/* "none", "mean", "cls", "last" (and "rank") <-> enum; parse gives CPULM_ERR_INVALID_ARG for
 * other text; name gives "unspecified" for UNSPECIFIED. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_pooling_parse(const char *s, cpulm_pooling *out);
CPULM_API const char *cpulm_pooling_name(cpulm_pooling p);
/* The context's resolved pooling (never UNSPECIFIED); NONE when embeddings are off. */
CPULM_API cpulm_pooling cpulm_ctx_pooling(const cpulm_ctx *ctx);
/* Width of every embedding vector (the model's n_embd). */
CPULM_API int32_t cpulm_ctx_n_embd(const cpulm_ctx *ctx);
/* Pooling NONE: the embedding of the i-th output token of the last decode, [n_embd].
 * Borrowed: valid until the next decode on ctx. NULL when i is out of range, embeddings are
 * off or the context pools. */
CPULM_API const float *cpulm_ctx_embeddings_ith(const cpulm_ctx *ctx, int32_t i);
/* Pooled: sequence seq's embedding from the last decode, [n_embd]. Borrowed as above. NULL
 * when seq had no token in that batch, embeddings are off or pooling is NONE. */
CPULM_API const float *cpulm_ctx_embeddings_seq(const cpulm_ctx *ctx, int32_t seq);
/* Pooled embeddings of n inputs (token arrays inputs[i] of n_tokens[i] >= 1 tokens) into
 * out[i * n_embd ...], raw. Inputs are packed into as few decodes as fit (up to n_seq_max
 * sequences and n_batch tokens each), every input in its own sequence from position 0; all
 * sequences are cleared before and after. An input longer than n_batch is decoded alone in
 * chunks with LAST pooling; with MEAN or CLS it gives CPULM_ERR_TOO_SMALL. Also
 * CPULM_ERR_INVALID_ARG (a pooling-NONE context, an empty input, a bad token) and
 * CPULM_ERR_KV_FULL (an input longer than n_ctx); out is then unspecified. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_embed(cpulm_ctx *ctx,
                                                        const cpulm_token *const *inputs,
                                                        const int32_t *n_tokens, int32_t n,
                                                        float *out);
/* Scales v[0..n) to unit Euclidean length in place (a zero vector stays zero). */
CPULM_API void cpulm_embd_normalize(float *v, int32_t n);

CPULM_API int32_t cpulm_ctx_n_ctx(const cpulm_ctx *ctx);
CPULM_API int32_t cpulm_ctx_n_seq_max(const cpulm_ctx *ctx);
CPULM_API int32_t cpulm_ctx_seq_len(const cpulm_ctx *ctx, int32_t seq); /* next position */
/* Drops positions >= p0 of seq (p0 = 0 clears it); their memory goes back to the OS.
 * Hybrid models (qwen35, qwen35moe, qwen3next): the recurrent state belongs to the whole
 * sequence, so 0 < p0 < length gives CPULM_ERR_UNSUPPORTED and changes nothing. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_seq_rm(cpulm_ctx *ctx, int32_t seq, int32_t p0);
/* Copies the first n positions of src into dst (dst is cleared first). Hybrid models: only
 * n = 0 or n = src's length (the state is copied too); else CPULM_ERR_UNSUPPORTED. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_seq_cp(cpulm_ctx *ctx, int32_t src, int32_t dst,
                                                         int32_t n);
/* Saving and restoring KV state (the server's RAM prompt cache). A state blob holds the
 * keys and values of n consecutive positions of one sequence in every layer, in an opaque
 * layout that only this context's cache type reads back. Hybrid models: the blob holds the
 * full-attention layers' KV only; after seq_state_set the sequence is stale (decode gives
 * CPULM_ERR_INVALID_ARG for it) until cpulm_ctx_seq_rstate_set gives it the recurrent state
 * of its new length, or it is cleared (seq_rm at 0). */
CPULM_API uint64_t cpulm_ctx_seq_state_bytes(const cpulm_ctx *ctx, int32_t n);
/* Copies positions [p0, p0 + n) of seq into dst (cpulm_ctx_seq_state_bytes(ctx, n) bytes). */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_seq_state_get(const cpulm_ctx *ctx, int32_t seq,
                                                                int32_t p0, int32_t n, void *dst);
/* Writes positions [p0, p0 + n) of seq from src and sets its length to p0 + n, dropping
 * anything after; p0 must be <= the sequence's length. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_seq_state_set(cpulm_ctx *ctx, int32_t seq,
                                                                int32_t p0, int32_t n,
                                                                const void *src);
/* Hybrid models' recurrent state (every recurrent layer's conv inputs and delta-rule
 * matrices), which stands for a sequence's whole length: a checkpoint, fixed-size whatever
 * the length. 0 bytes for other models, whose get/set give CPULM_ERR_UNSUPPORTED. get copies
 * seq's state (CPULM_ERR_INVALID_ARG for a stale sequence); set makes src, a blob taken by
 * get when a sequence had the length seq has now (same tokens), seq's state. */
CPULM_API uint64_t cpulm_ctx_seq_rstate_bytes(const cpulm_ctx *ctx);
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_seq_rstate_get(const cpulm_ctx *ctx, int32_t seq,
                                                                 void *dst);
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_ctx_seq_rstate_set(cpulm_ctx *ctx, int32_t seq,
                                                                 const void *src);
CPULM_API void cpulm_ctx_set_threads(cpulm_ctx *ctx, int32_t n_threads, int32_t n_threads_batch);
CPULM_API int32_t cpulm_ctx_threads(const cpulm_ctx *ctx);
/* Bytes the context allocates: KV cache, scratch and recurrent state (cpulm_memory's kv +
 * scratch + state). The KV
 * cache is reserved address space: its pages take RAM as positions are written and are
 * given back when sequences shrink (seq_rm, seq_cp, seq_state_set), so the RAM it uses
 * follows the positions held, not n_seq_max x n_ctx. */
CPULM_API uint64_t cpulm_ctx_memory_bytes(const cpulm_ctx *ctx);
/* The KV cache's pages in RAM, as the kernel reports them; a page several sequences share
 * (seq_cp maps the copied prefix's whole pages, copy-on-write) counts once. Reads no
 * sequence state: safe to call from another thread while the context decodes. */
CPULM_API uint64_t cpulm_ctx_kv_resident_bytes(const cpulm_ctx *ctx);
/* KV bytes sequences map from another sequence's pages instead of holding copies (what
 * seq_cp would have copied); safe from another thread like the above. */
CPULM_API uint64_t cpulm_ctx_kv_shared_bytes(const cpulm_ctx *ctx);
/* Nanoseconds the context's decode calls spent in attention since it was made: the first
 * pool thread's time in the attention step of every layer (the work is shared from one
 * counter, so the others finish within one work item of it). For profiles such as
 * `cpulm roofline`'s attention share; the difference of two reads brackets a call. */
CPULM_API uint64_t cpulm_ctx_attn_ns(const cpulm_ctx *ctx);
/* The same for the matrix products (pool thread 0's time in them; quantizing their inputs,
 * norms, rope and the like are outside): with the attention time, a profile splits a
 * prompt's time into GEMM, attention and the per-token work around them. */
CPULM_API uint64_t cpulm_ctx_matmul_ns(const cpulm_ctx *ctx);

/* The memory a model and a context on it need. One computation (src/memory.c) sizes the
 * context's buffers and gives these numbers, so they are what cpulm_ctx_new allocates
 * (to within the few hundred bytes of the context and pool structs). */
typedef struct cpulm_memory {
    uint64_t weights;      /* tensor data: mapped read-only, or the model's repacked copy */
    uint64_t kv;           /* KV cache of all n_seq_max sequences when full (reserved;
                            * RAM is what the positions held take) */
    uint64_t kv_per_token; /* one token of one sequence */
    uint64_t scratch;      /* activations, attention scores, logits */
    uint64_t state;        /* hybrid models: the recurrent layers' state of all n_seq_max
                            * sequences (a fixed size per sequence, whatever its length);
                            * 0 for other models */
    uint64_t total;        /* weights + kv + scratch + state */
} cpulm_memory;

/* What cpulm_ctx_new(m, p) would allocate, plus the weights; p NULL = defaults, resolved
 * as cpulm_ctx_new resolves them. CPULM_ERR_INVALID_ARG where cpulm_ctx_new would fail on
 * the parameters. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_model_memory(const cpulm_model *m,
                                                           const cpulm_ctx_params *p,
                                                           cpulm_memory *out);

/* ---- sampling ----
 * Fixed pipeline: logit bias -> penalties -> top-k -> typical -> top-p -> min-p ->
 * temperature -> draw. temp <= 0 means greedy (argmax of the biased, penalised logits). */

/* One logit_bias entry: bias is added to token's logit before anything else (-INFINITY:
 * never drawn). */
typedef struct cpulm_logit_bias {
    cpulm_token token;
    float bias;
} cpulm_logit_bias;

typedef struct cpulm_sampler_params {
    float temp;              /* 0.8; <= 0: greedy */
    int32_t top_k;           /* 40; <= 0: off */
    float top_p;             /* 0.95; >= 1: off */
    float min_p;             /* 0.05; <= 0: off */
    float repeat_penalty;    /* 1.0 = off */
    int32_t repeat_last_n;   /* 64 tokens of history the penalties look at; -1 = all */
    float presence_penalty;  /* 0 = off (OpenAI semantics) */
    float frequency_penalty; /* 0 = off */
    uint64_t seed;           /* same seed, same draws */
    float typical_p;         /* 1.0; locally typical sampling; >= 1 or <= 0: off */
    /* logit_bias[0..n_logit_bias): NULL; borrowed: cpulm_sampler_new copies it. Ids outside
     * the vocabulary are ignored; biases of the same token add up */
    const cpulm_logit_bias *logit_bias;
    int32_t n_logit_bias;
} cpulm_sampler_params;

CPULM_API cpulm_sampler_params cpulm_sampler_default_params(void);
CPULM_API cpulm_sampler *cpulm_sampler_new(const cpulm_sampler_params *p, int32_t n_vocab);
CPULM_API void cpulm_sampler_free(cpulm_sampler *s); /* NULL is a no-op */
/* Picks a token from logits [n_vocab] (not modified). Does not record it: call accept. */
CPULM_API cpulm_token cpulm_sampler_sample(cpulm_sampler *s, const float *logits);
/* Same, with only the tokens whose bit is set in allow[(n_vocab + 31) / 32] drawable (bit t
 * is allow[t / 32] >> (t % 32) & 1; a grammar's mask). The mask is applied first, so
 * top-k/top-p/min-p and the probabilities see only allowed tokens. allow NULL: no mask.
 * If nothing allowed has a finite logit, returns the first allowed token (never a masked
 * one) when there is any. */
CPULM_API cpulm_token cpulm_sampler_sample_masked(cpulm_sampler *s, const float *logits,
                                                  const uint32_t *allow);
/* Records a token in the penalty history (prompt tokens too, if penalties should see them). */
CPULM_API void cpulm_sampler_accept(cpulm_sampler *s, cpulm_token t);
CPULM_API void cpulm_sampler_reset(cpulm_sampler *s);
/* Probability of token t in the distribution of the last sample() call (after the
 * pipeline; 0 if it was cut). For logprobs reporting; after a greedy pick each call sums
 * the softmax over the vocabulary (O(n_vocab)). */
CPULM_API float cpulm_sampler_last_prob(const cpulm_sampler *s, cpulm_token t);
/* For speculative decoding (src/spec/): the distribution sample_masked(s, logits, allow)
 * would draw from, into probs[n_vocab] (sums to 1; cut and masked tokens get 0; greedy: 1 on
 * the token it would pick). Draws nothing and leaves the RNG alone. last_prob() then
 * describes this distribution, as after a sample (greedy: the softmax, as always). */
CPULM_API void cpulm_sampler_dist(cpulm_sampler *s, const float *logits, const uint32_t *allow,
                                  float *probs);
/* One uniform number in [0, 1) from the sampler's RNG (the stream its draws use). */
CPULM_API double cpulm_sampler_uniform(cpulm_sampler *s);

/* ---- chat templates ----
 * Chat templates are Jinja (tokenizer.chat_template), rendered as Hugging Face does
 * (trim_blocks, lstrip_blocks) by a bounded built-in interpreter. Rendered text carries
 * special tokens as text: tokenize it with parse_special on.
 * Variables: messages, add_generation_prompt, bos_token, eos_token, enable_thinking, any
 * extra ones given as JSON (tools, date_string, ...), and the functions raise_exception and
 * strftime_now. A template that is NULL or "" means the "plain" built-in (below). If a
 * template cannot be parsed (or uses an unsupported feature), but its text identifies a
 * known family, that family's built-in template is used instead. Thread-safe. */

typedef struct cpulm_chat_msg {
    const char *role;    /* "system", "user", "assistant", "tool", ... */
    const char *content; /* NULL: None (e.g. an assistant turn that only calls tools) */
} cpulm_chat_msg;

typedef struct cpulm_chat_params {
    int add_generation_prompt; /* end with the assistant header so the model replies */
    const char *bos_token;     /* NULL: "" */
    const char *eos_token;     /* NULL: "" */
    int enable_thinking;       /* templates that honour it (Qwen3, DeepSeek variants); default 1 */
    const char *extra_json;    /* NULL or a JSON object: each member becomes a variable */
    int64_t now;               /* unix time for strftime_now; -1 (default): the real clock */
    int now_utc;               /* format strftime_now in UTC rather than local time */
} cpulm_chat_params;

CPULM_API cpulm_chat_params cpulm_chat_default_params(void);

/* Renders n messages with tmpl. *out: owned, NUL-terminated (free with free()); NULL on error.
 * Returns CPULM_OK; CPULM_ERR_FORMAT (template syntax), CPULM_ERR_INVALID_ARG (runtime
 * error, raise_exception: message in err), CPULM_ERR_UNSUPPORTED, CPULM_ERR_TOO_SMALL
 * (output/memory/step limits), CPULM_ERR_NOMEM. */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_chat_render(const char *tmpl,
                                                          const cpulm_chat_msg *msgs, int32_t n,
                                                          int add_generation_prompt,
                                                          const char *bos, const char *eos,
                                                          char **out, cpulm_error *err);
/* Same, with messages as JSON text (an array of OpenAI-style message objects, which may
 * carry tool_calls etc.) and the full parameter set (NULL: defaults). */
CPULM_API CPULM_MUST_CHECK cpulm_status cpulm_chat_render_json(const char *tmpl,
                                                               const char *messages_json,
                                                               const cpulm_chat_params *p,
                                                               char **out, cpulm_error *err);

/* Built-in templates by name: "llama3", "llama2", "mistral", "chatml", "deepseek-r1", "gemma",
 * "plain" ("<Role>: content" lines for models without a template). Borrowed, static;
 * NULL if unknown. */
CPULM_API const char *cpulm_chat_builtin(const char *name);
/* Name of the built-in family a template's text belongs to (by its special markers), or
 * NULL if none is recognised. Static string. */
CPULM_API const char *cpulm_chat_detect(const char *tmpl);

/* Hides DeepSeek-R1 style reasoning from a streamed reply: drops everything from "<think>"
 * to "</think>" (and the whitespace right after it), holding back bytes that may start a
 * tag split across pushes. Caller-owned state; no allocation. */
typedef struct cpulm_chat_think {
    int in_think;  /* inside <think>...</think> */
    int skip_ws;   /* just left a think block: drop leading whitespace */
    char hold[16]; /* a possible partial tag from the previous push */
    int32_t n_hold;
    int skip_rws; /* just entered a think block: drop the reasoning's leading whitespace */
} cpulm_chat_think;

/* starts_inside: the prompt already opened <think> (DeepSeek-R1's generation prompt). */
CPULM_API void cpulm_chat_think_init(cpulm_chat_think *f, int starts_inside);
/* Feeds n bytes; writes the visible bytes to out and returns their count, or
 * CPULM_ERR_TOO_SMALL if cap < n + 16. */
CPULM_API int32_t cpulm_chat_think_push(cpulm_chat_think *f, const char *s, int32_t n, char *out,
                                        int32_t cap);
/* End of the reply: emits held-back bytes that turned out not to be a tag (cap >= 16,
 * else CPULM_ERR_TOO_SMALL). */
CPULM_API int32_t cpulm_chat_think_flush(cpulm_chat_think *f, char *out, int32_t cap);
/* The same, keeping the reasoning instead of dropping it (servers' reasoning_content): the
 * visible bytes go to out (count returned), the reasoning, without the tags and its leading
 * whitespace, to reasoning (*n_reasoning bytes). Both buffers hold cap >= n + 16 bytes, else
 * CPULM_ERR_TOO_SMALL. s == NULL with n == 0 flushes, as cpulm_chat_think_flush. */
CPULM_API int32_t cpulm_chat_think_split(cpulm_chat_think *f, const char *s, int32_t n, char *out,
                                         char *reasoning, int32_t cap, int32_t *n_reasoning);
/* Does a rendered prompt end (but for spaces and newlines) inside an opened <think> block? */
CPULM_API int cpulm_chat_opens_think(const char *prompt, size_t n);

#ifdef __cplusplus
}
#endif
#endif
