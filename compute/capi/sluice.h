/* sluice.h: libsluice, the C API of the sluice engine (C99, no C++ types).
 * A program opens a .sluice container (with an in-process expert cache, or
 * attached to a running sluice-io), tokenizes, renders the chat template,
 * feeds and samples sequences, saves them to session files and reads the
 * statistics, over the same code `sluice run` runs.
 *
 * Conventions:
 * - Every function that can fail returns a sluice_status; SLUICE_OK is 0.
 *   No function throws, aborts or exits on bad input: a NULL or closed
 *   handle, a NULL pointer where one is required, a container that is not
 *   one or a budget under the model's floor are all an error status.
 * - sluice_last_error(handle) is the message of the last failed call on that
 *   handle (a sequence's or sampler's calls fail on it, not on its model);
 *   sluice_last_error(NULL) is the calling thread's last failure on any
 *   handle, and the only message of a failed sluice_model_open.
 * - Handles are opaque values, never dereferenced by the library: a closed
 *   handle (or any value that was never a handle) is refused, not used.
 *   Closing a model closes its sequences and samplers.
 * - Strings and arrays the library returns (const char ** outputs) belong to
 *   the handle and stay valid until the next call on it or its close.
 *   Token outputs go to the caller's buffer: with too small a `capacity` the
 *   call returns SLUICE_ERROR_BUFFER_TOO_SMALL and sets *count to the size
 *   needed (pass capacity 0 to ask).
 * - Calls on one model and on its sequences and samplers are serialized by
 *   the model; different models are independent.
 * Speculative decoding is not part of the API yet.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI in the library's soname (libsluice.so.0); it changes when a
 * function or struct of this header changes incompatibly. */
#define SLUICE_ABI_VERSION 0

typedef enum sluice_status {
  SLUICE_OK = 0,
  SLUICE_ERROR_INVALID_HANDLE = 1,    /* NULL, closed, or a handle of another kind */
  SLUICE_ERROR_INVALID_ARGUMENT = 2,  /* a NULL pointer, an out-of-range value */
  SLUICE_ERROR_BUFFER_TOO_SMALL = 3,  /* *count says how many elements are needed */
  SLUICE_ERROR_FAILED = 4,            /* the engine refused: the message names what is wrong */
  SLUICE_ERROR_OUT_OF_MEMORY = 5,
  SLUICE_ERROR_INTERNAL = 6           /* anything else (a bug: please report the message) */
} sluice_status;

typedef struct sluice_model sluice_model;
typedef struct sluice_sequence sluice_sequence;
typedef struct sluice_sampler sluice_sampler;

/* "0.1.0": the sluice release this library comes from. */
const char* sluice_version(void);
/* SLUICE_ABI_VERSION of the library actually loaded. */
int sluice_abi_version(void);
/* "ok", "invalid handle", ...; never NULL. */
const char* sluice_status_name(sluice_status status);
/* The last failure's message (see above); "" when there was none. Never NULL. */
const char* sluice_last_error(const void* handle);

/* --- Opening a container --------------------------------------------- */

typedef struct sluice_open_options {
  /* The in-process cache's memory budget ("2G", "512M": K/M/G/T, 1024-based);
   * NULL or "": the `sluice plan` rule. A budget under the floor is refused. */
  const char* budget;
  /* A running sluice-io to join instead: its socket path or instance name
   * (as `sluice run --attach`); NULL or "": the in-process cache. */
  const char* attach;
  uint32_t context;     /* tokens per sequence; 0: the model's, at most 4096 */
  uint32_t threads;     /* compute threads; 0: SLUICE_THREADS or every core */
  uint32_t chunk;       /* prefill chunk (64) */
  uint32_t readers;     /* reads in flight of the in-process cache (4) */
  int32_t lookahead;    /* next-layer experts to prefetch; -1: SLUICE_LOOKAHEAD or 6 */
  uint32_t sequences;   /* sequences the memory plan counts (1) */
  uint32_t sessions;    /* session copies the memory plan counts (0) */
  double read_timeout;  /* seconds to wait for an expert record (60) */
  int verify;           /* check each expert record's crc32 */
  int no_cache;         /* read every record from disk, no cache */
  int force;            /* take a budget above the usable memory */
} sluice_open_options;

/* Fills `options` with `sluice run`'s defaults. */
void sluice_open_options_init(sluice_open_options* options);

/* Opens the container directory `path`; `options` NULL: the defaults. On
 * failure *model is NULL and sluice_last_error(NULL) says why. */
sluice_status sluice_model_open(const char* path, const sluice_open_options* options,
                                sluice_model** model);
/* Closes the model, its sequences and samplers; the cache segment and an
 * attached daemon session go with it. NULL is refused like any bad handle. */
sluice_status sluice_model_close(sluice_model* model);

/* JSON: path, family, layers, moe_layers, experts, top_k, hidden, context,
 * max_positions, vocab, tokenizer_vocab, bos_id, eos_ids, chat_template,
 * cache ("embedded", "attached" or "none") and plan (`sluice plan --json`). */
sluice_status sluice_model_info(sluice_model* model, const char** json);
/* JSON: experts (requested, hits, reads, bytes_read, wait_seconds,
 * direct_io, since the model opened), lookahead (k, precision_at_1, recall
 * when this process runs the router) and last_generation (what `sluice run
 * --json` reports of a generation: tokens, seconds, tok/s, finish_reason;
 * null before the first sluice_generate). */
sluice_status sluice_model_stats(sluice_model* model, const char** json);

/* --- Text ------------------------------------------------------------ */

/* The ids of `length` bytes of `text` (ordinary text: never a control
 * token). `add_bos`: begin with the tokenizer's BOS when its config adds
 * one, as `sluice run` does for a prompt. */
sluice_status sluice_tokenize(sluice_model* model, const char* text, size_t length, int add_bos,
                              int32_t* tokens, size_t capacity, size_t* count);
/* The text of `count` ids (special tokens included); *length excludes the
 * terminating NUL the string also has. */
sluice_status sluice_detokenize(sluice_model* model, const int32_t* tokens, size_t count,
                                const char** text, size_t* length);
/* The container's chat template (or Kimi K3's XTML) applied to
 * `request_json`: an array of OpenAI chat messages, or a request object with
 * "messages" (and "tools", "tool_choice", "response_format"), as `sluice
 * template` renders it. */
sluice_status sluice_chat_template(sluice_model* model, const char* request_json,
                                   int add_generation_prompt, const char** prompt);
/* The same prompt as ids: control tokens only where the template put them. */
sluice_status sluice_chat_tokens(sluice_model* model, const char* request_json,
                                 int add_generation_prompt, int32_t* tokens, size_t capacity,
                                 size_t* count);

/* --- Sampling -------------------------------------------------------- */

typedef struct sluice_sampler_config {
  float temperature;     /* 0: greedy (argmax, lowest id on ties) */
  int32_t top_k;         /* 0: off */
  float top_p;           /* 1: off */
  float min_p;           /* 0: off */
  float repeat_penalty;  /* 1: off */
  int64_t seed;          /* -1: drawn at random (sluice_sampler_seed tells it) */
  /* NULL: free text. Otherwise a JSON Schema (the subset `sluice chat
   * --json-schema` takes; {"type": "object"} is any object): each
   * generation is one value of it, then an end-of-sequence token. */
  const char* json_schema;
} sluice_sampler_config;

/* Fills `config` with `sluice run`'s defaults: greedy, every filter off, seed -1. */
void sluice_sampler_config_init(sluice_sampler_config* config);
/* A sampler of `model`; its random state and constraint carry on from one
 * call to the next. Refuses out-of-range values and schemas it cannot
 * enforce, naming them. */
sluice_status sluice_sampler_new(sluice_model* model, const sluice_sampler_config* config,
                                 sluice_sampler** sampler);
sluice_status sluice_sampler_seed(sluice_sampler* sampler, uint64_t* seed);
sluice_status sluice_sampler_close(sluice_sampler* sampler);

/* --- Sequences ------------------------------------------------------- */

/* An empty sequence of `model` (its own caches and recurrent state). */
sluice_status sluice_sequence_new(sluice_model* model, sluice_sequence** sequence);
sluice_status sluice_sequence_close(sluice_sequence* sequence);
/* Back to position 0. */
sluice_status sluice_sequence_reset(sluice_sequence* sequence);
/* Tokens in the sequence, the last sampled one included. */
sluice_status sluice_sequence_position(sluice_sequence* sequence, uint32_t* position);
/* Runs `count` tokens through the model in prefill chunks. */
sluice_status sluice_sequence_feed(sluice_sequence* sequence, const int32_t* tokens, size_t count);
/* The next token's logits (a vocabulary-sized row): after everything fed
 * and sampled so far. Needs at least one token fed. */
sluice_status sluice_sequence_logits(sluice_sequence* sequence, const float** logits,
                                     size_t* count);
/* Samples the next token with `sampler`; *end is 1 when it is an
 * end-of-sequence token (the caller decides whether to go on). */
sluice_status sluice_sequence_step(sluice_sequence* sequence, sluice_sampler* sampler,
                                   int32_t* token, int* end);

/* Called with each generated token and the text it completed (possibly
 * empty; special tokens have none), then once with token -1 and the text
 * still held back at the end (usually empty). Return 0 to go on, anything
 * else to stop after this token. From inside it, calls on the same model
 * (but sluice_last_error) are refused with SLUICE_ERROR_INVALID_ARGUMENT. */
typedef int (*sluice_token_callback)(void* user_data, int32_t token, const char* piece,
                                     size_t length);
#define SLUICE_TEXT_TAIL (-1)

/* Feeds `prompt` (count may be 0 to continue after feed or a generation),
 * then generates up to `max_tokens`, ending after an end-of-sequence token,
 * at the end of the context or when `callback` says stop: exactly what
 * `sluice run` does. `callback` may be NULL. */
sluice_status sluice_generate(sluice_sequence* sequence, sluice_sampler* sampler,
                              const int32_t* prompt, size_t count, uint32_t max_tokens,
                              sluice_token_callback callback, void* user_data);

/* Writes the sequence (tokens and every mixer's state) to `path`, as
 * `sluice run --session` does; the file names this container and is
 * written whole or not at all. */
sluice_status sluice_sequence_save(sluice_sequence* sequence, const char* path);
/* Replaces the sequence with the one saved in `path`, which must come from
 * this container; feed at least one token before sampling again. */
sluice_status sluice_sequence_load(sluice_sequence* sequence, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
