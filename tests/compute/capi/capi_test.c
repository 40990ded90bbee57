/* tests/compute/capi/capi_test.c: drives every function of sluice.h, as a
 * C99 program a binding author would write, on one tiny container: embedded
 * or attached (ATTACH, a sluice-io socket). Prints the greedy tokens of
 * PROMPT ("tokens: 1 2 3") for capi_test.py to compare with `sluice run`'s,
 * and exits 1 naming the first check that failed.
 * usage: capi_test MODEL PROMPT TOKENS SCRATCH_DIR [ATTACH] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define MAX_TOKENS 64

static int failures = 0;

#define CHECK(condition)                                                      \
  do {                                                                        \
    if (!(condition)) {                                                       \
      fprintf(stderr, "capi_test.c:%d: CHECK(%s) failed; last error: %s\n", \
              __LINE__, #condition, sluice_last_error(NULL));                 \
      failures++;                                                             \
    }                                                                         \
  } while (0)

/* A failed call with a message that contains `part`. */
#define CHECK_FAILS(call, status, handle, part)                                      \
  do {                                                                               \
    sluice_status got_ = (call);                                                     \
    const char* message_ = sluice_last_error(handle);                                \
    if (got_ != (status) || strstr(message_, (part)) == NULL) {                      \
      fprintf(stderr, "capi_test.c:%d: %s gave %s (%s), expected %s with \"%s\"\n", \
              __LINE__, #call, sluice_status_name(got_), message_,                   \
              sluice_status_name(status), (part));                                   \
      failures++;                                                                    \
    }                                                                                \
  } while (0)

typedef struct {
  int32_t tokens[MAX_TOKENS];
  size_t count;
  size_t stop_after; /* 0: never */
  char text[4096];
  size_t text_length;
  int tails;
  sluice_model* probe; /* called from inside the callback: refused */
  sluice_status probe_status;
} Collected;

static int collect(void* user_data, int32_t token, const char* piece, size_t length) {
  Collected* c = (Collected*)user_data;
  if (length > 0 && c->text_length + length < sizeof c->text) {
    memcpy(c->text + c->text_length, piece, length);
    c->text_length += length;
    c->text[c->text_length] = '\0';
  }
  if (c->probe != NULL) {
    const char* json = NULL;
    c->probe_status = sluice_model_stats(c->probe, &json);
  }
  if (token == SLUICE_TEXT_TAIL) {
    c->tails++;
    return 0;
  }
  if (c->count < MAX_TOKENS) c->tokens[c->count++] = token;
  return c->stop_after != 0 && c->count >= c->stop_after;
}

static size_t argmax(const float* row, size_t count) {
  size_t best = 0;
  size_t i;
  for (i = 1; i < count; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

/* Every function given a NULL handle, and NULL outputs. */
static void misuse_without_a_model(const char* model_path, const char* scratch) {
  sluice_model* model = (sluice_model*)1;
  sluice_open_options options;
  const char* text = NULL;
  size_t count = 0;
  int32_t token = 0;
  char missing[1024];

  CHECK_FAILS(sluice_model_close(NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "NULL");
  CHECK_FAILS(sluice_model_info(NULL, &text), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_model_stats(NULL, &text), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_tokenize(NULL, "a", 1, 0, &token, 1, &count), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_detokenize(NULL, &token, 1, &text, &count), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_chat_template(NULL, "[]", 1, &text), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_chat_tokens(NULL, "[]", 1, &token, 1, &count), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_sampler_new(NULL, NULL, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_sampler_seed(NULL, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sampler");
  CHECK_FAILS(sluice_sampler_close(NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sampler");
  CHECK_FAILS(sluice_sequence_new(NULL, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "model");
  CHECK_FAILS(sluice_sequence_close(NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_reset(NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_position(NULL, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_feed(NULL, &token, 1), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_logits(NULL, NULL, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_step(NULL, NULL, &token, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_generate(NULL, NULL, &token, 1, 1, NULL, NULL), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_save(NULL, "x"), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  CHECK_FAILS(sluice_sequence_load(NULL, "x"), SLUICE_ERROR_INVALID_HANDLE, NULL, "sequence");
  /* A value that was never a handle is refused, not dereferenced. */
  CHECK_FAILS(sluice_model_info((sluice_model*)(void*)&options, &text), SLUICE_ERROR_INVALID_HANDLE, NULL,
              "never opened");

  CHECK_FAILS(sluice_model_open(model_path, NULL, NULL), SLUICE_ERROR_INVALID_ARGUMENT, NULL, "model");
  CHECK_FAILS(sluice_model_open(NULL, NULL, &model), SLUICE_ERROR_INVALID_ARGUMENT, NULL, "path");
  CHECK(model == NULL);
  snprintf(missing, sizeof missing, "%s/no-such.sluice", scratch);
  model = (sluice_model*)1;
  CHECK_FAILS(sluice_model_open(missing, NULL, &model), SLUICE_ERROR_FAILED, NULL, "no-such.sluice");
  CHECK(model == NULL);
  /* A directory that is not a container (no manifest.json). */
  CHECK_FAILS(sluice_model_open(scratch, NULL, &model), SLUICE_ERROR_FAILED, NULL, "manifest");

  sluice_open_options_init(&options);
  options.budget = "12Q";
  CHECK_FAILS(sluice_model_open(model_path, &options, &model), SLUICE_ERROR_FAILED, NULL, "12Q");
  options.budget = "1M"; /* under any container's floor */
  CHECK_FAILS(sluice_model_open(model_path, &options, &model), SLUICE_ERROR_FAILED, NULL, "floor");
  options.budget = "1G";
  options.attach = "some-instance";
  CHECK_FAILS(sluice_model_open(model_path, &options, &model), SLUICE_ERROR_FAILED, NULL, "budget");
  sluice_open_options_init(&options);
  options.chunk = 0;
  CHECK_FAILS(sluice_model_open(model_path, &options, &model), SLUICE_ERROR_INVALID_ARGUMENT, NULL, "chunk");
  CHECK(model == NULL);
}

/* Greedy tokens of `prompt` through sluice_generate; prints them. */
static void generate_greedy(sluice_model* model, sluice_sampler* greedy, const int32_t* prompt,
                            size_t prompt_count, uint32_t tokens, Collected* out) {
  sluice_sequence* sequence = NULL;
  size_t i;
  CHECK(sluice_sequence_new(model, &sequence) == SLUICE_OK);
  memset(out, 0, sizeof *out);
  CHECK(sluice_generate(sequence, greedy, prompt, prompt_count, tokens, collect, out) == SLUICE_OK);
  CHECK(out->tails == 1);
  printf("tokens:");
  for (i = 0; i < out->count; ++i) printf(" %d", (int)out->tokens[i]);
  printf("\n");
  CHECK(sluice_sequence_close(sequence) == SLUICE_OK);
}

/* The step API gives generate's tokens; the logits' argmax is the greedy token. */
static void step_matches_generate(sluice_model* model, sluice_sampler* greedy, const int32_t* prompt,
                                  size_t prompt_count, const Collected* expected) {
  sluice_sequence* sequence = NULL;
  const float* logits = NULL;
  size_t vocab = 0;
  uint32_t position = 0;
  size_t i;
  int end = 0;
  int32_t token = -1;
  static int32_t too_many[1 << 16]; /* zeros: more than any tiny context holds */
  CHECK(sluice_sequence_new(model, &sequence) == SLUICE_OK);
  CHECK_FAILS(sluice_sequence_step(sequence, greedy, &token, &end), SLUICE_ERROR_FAILED, sequence, "feed");
  CHECK_FAILS(sluice_sequence_logits(sequence, &logits, &vocab), SLUICE_ERROR_FAILED, sequence, "feed");
  CHECK_FAILS(sluice_sequence_feed(sequence, NULL, 3), SLUICE_ERROR_INVALID_ARGUMENT, sequence, "tokens");
  CHECK_FAILS(sluice_sequence_feed(sequence, too_many, sizeof too_many / sizeof *too_many), SLUICE_ERROR_FAILED,
              sequence, "do not fit");
  too_many[0] = -5;
  CHECK_FAILS(sluice_sequence_feed(sequence, too_many, 1), SLUICE_ERROR_INVALID_ARGUMENT, sequence, "-5");
  CHECK(sluice_sequence_feed(sequence, prompt, prompt_count) == SLUICE_OK);
  CHECK(sluice_sequence_position(sequence, &position) == SLUICE_OK && position == prompt_count);
  for (i = 0; i < expected->count; ++i) {
    CHECK(sluice_sequence_logits(sequence, &logits, &vocab) == SLUICE_OK && vocab > 0);
    CHECK(sluice_sequence_step(sequence, greedy, &token, &end) == SLUICE_OK);
    CHECK(token == expected->tokens[i]);
    CHECK((size_t)token == argmax(logits, vocab));
  }
  CHECK(sluice_sequence_position(sequence, &position) == SLUICE_OK && position == prompt_count + expected->count);
  CHECK(sluice_sequence_reset(sequence) == SLUICE_OK);
  CHECK(sluice_sequence_position(sequence, &position) == SLUICE_OK && position == 0);
  CHECK(sluice_sequence_close(sequence) == SLUICE_OK);
}

/* A saved sequence loaded into another continues exactly as the original. */
static void sessions_round_trip(sluice_model* model, sluice_sampler* greedy, const int32_t* prompt,
                                size_t prompt_count, const char* scratch) {
  sluice_sequence* first = NULL;
  sluice_sequence* second = NULL;
  Collected a, b;
  char path[1024], garbage[1024];
  uint32_t position = 0;
  FILE* file;
  snprintf(path, sizeof path, "%s/capi.session", scratch);
  snprintf(garbage, sizeof garbage, "%s/garbage.session", scratch);
  CHECK(sluice_sequence_new(model, &first) == SLUICE_OK);
  CHECK(sluice_sequence_new(model, &second) == SLUICE_OK);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  CHECK(sluice_generate(first, greedy, prompt, prompt_count, 3, collect, &a) == SLUICE_OK);
  CHECK(sluice_sequence_save(first, path) == SLUICE_OK);
  CHECK(sluice_sequence_load(second, path) == SLUICE_OK);
  CHECK(sluice_sequence_position(second, &position) == SLUICE_OK && position == prompt_count + 3);
  /* Continuing needs a token after a load; both continue from the same one. */
  CHECK(sluice_generate(first, greedy, &prompt[0], 1, 4, collect, &a) == SLUICE_OK);
  CHECK(sluice_generate(second, greedy, &prompt[0], 1, 4, collect, &b) == SLUICE_OK);
  CHECK(a.count == 7 && b.count == 4);
  CHECK(memcmp(&a.tokens[3], b.tokens, 4 * sizeof(int32_t)) == 0);

  file = fopen(garbage, "wb");
  CHECK(file != NULL);
  if (file != NULL) {
    fputs("not a session", file);
    fclose(file);
  }
  CHECK_FAILS(sluice_sequence_load(second, garbage), SLUICE_ERROR_FAILED, second, "garbage.session");
  CHECK(sluice_sequence_position(second, &position) == SLUICE_OK && position == 0);
  CHECK_FAILS(sluice_sequence_save(second, NULL), SLUICE_ERROR_INVALID_ARGUMENT, second, "path");
  CHECK(sluice_sequence_close(first) == SLUICE_OK);
  CHECK(sluice_sequence_close(second) == SLUICE_OK);
}

static void text_functions(sluice_model* model) {
  const char* text = NULL;
  size_t length = 0, count = 0, needed = 0;
  int32_t ids[MAX_TOKENS];
  int32_t bad = 1 << 30;
  const char* messages = "[{\"role\": \"user\", \"content\": \"hello\"}]";

  CHECK_FAILS(sluice_tokenize(model, "the river ran", 13, 0, ids, 0, &needed), SLUICE_ERROR_BUFFER_TOO_SMALL,
              model, "needed");
  CHECK(needed > 0 && needed < MAX_TOKENS);
  CHECK(sluice_tokenize(model, "the river ran", 13, 0, ids, MAX_TOKENS, &count) == SLUICE_OK);
  CHECK(count == needed);
  CHECK(sluice_detokenize(model, ids, count, &text, &length) == SLUICE_OK);
  CHECK(length == 13 && strcmp(text, "the river ran") == 0);
  CHECK_FAILS(sluice_detokenize(model, &bad, 1, &text, &length), SLUICE_ERROR_INVALID_ARGUMENT, model, "tokens[0]");

  CHECK(sluice_chat_template(model, messages, 1, &text) == SLUICE_OK);
  CHECK(strstr(text, "hello") != NULL);
  CHECK(sluice_chat_tokens(model, messages, 1, ids, MAX_TOKENS, &count) == SLUICE_OK && count > 0);
  CHECK_FAILS(sluice_chat_template(model, "{\"no\": 1}", 1, &text), SLUICE_ERROR_FAILED, model, "messages");
  CHECK_FAILS(sluice_chat_template(model, "[{", 1, &text), SLUICE_ERROR_INVALID_ARGUMENT, model, "JSON");
}

static void samplers(sluice_model* model, sluice_sequence* sequence, const int32_t* prompt,
                     size_t prompt_count) {
  sluice_sampler_config config;
  sluice_sampler* sampler = NULL;
  sluice_sampler* structured = NULL;
  uint64_t seed = 0;
  Collected c;
  size_t i;

  sluice_sampler_config_init(&config);
  config.temperature = -1.0f;
  CHECK_FAILS(sluice_sampler_new(model, &config, &sampler), SLUICE_ERROR_INVALID_ARGUMENT, model, "temperature");
  CHECK(sampler == NULL);
  sluice_sampler_config_init(&config);
  config.json_schema = "{\"type\": \"object\", \"patternProperties\": {}}";
  CHECK_FAILS(sluice_sampler_new(model, &config, &sampler), SLUICE_ERROR_FAILED, model, "patternProperties");

  sluice_sampler_config_init(&config);
  config.temperature = 0.8f;
  config.top_k = 20;
  config.top_p = 0.9f;
  config.min_p = 0.05f;
  config.repeat_penalty = 1.1f;
  config.seed = 7;
  CHECK(sluice_sampler_new(model, &config, &sampler) == SLUICE_OK);
  CHECK(sluice_sampler_seed(sampler, &seed) == SLUICE_OK && seed == 7);
  memset(&c, 0, sizeof c);
  c.stop_after = 2; /* the callback stops the generation */
  c.probe = model;
  CHECK(sluice_generate(sequence, sampler, prompt, prompt_count, 10, collect, &c) == SLUICE_OK);
  CHECK(c.count == 2);
  CHECK(c.probe_status == SLUICE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(sluice_last_error(NULL), "inside a token callback") != NULL);
  CHECK(sluice_sampler_close(sampler) == SLUICE_OK);
  CHECK_FAILS(sluice_sampler_seed(sampler, &seed), SLUICE_ERROR_INVALID_HANDLE, sampler, "closed");

  /* Structured output: the reply opens a JSON object. */
  sluice_sampler_config_init(&config);
  config.json_schema = "{\"type\": \"object\"}";
  CHECK(sluice_sampler_new(model, &config, &structured) == SLUICE_OK);
  CHECK(sluice_sequence_reset(sequence) == SLUICE_OK);
  memset(&c, 0, sizeof c);
  CHECK(sluice_generate(sequence, structured, prompt, prompt_count, 12, collect, &c) == SLUICE_OK);
  for (i = 0; i < c.text_length && c.text[i] == ' '; ++i) {
  }
  CHECK(c.text_length > i && c.text[i] == '{');
}

int main(int argc, char** argv) {
  sluice_open_options options;
  sluice_model* model = NULL;
  sluice_sampler* greedy = NULL;
  sluice_sampler_config config;
  sluice_sequence* leftover = NULL;
  const char* json = NULL;
  int32_t prompt[MAX_TOKENS];
  size_t prompt_count = 0;
  int32_t token = 0;
  Collected greedy_run;

  if (argc < 5 || argc > 6) {
    fprintf(stderr, "usage: capi_test MODEL PROMPT TOKENS SCRATCH_DIR [ATTACH]\n");
    return 2;
  }
  CHECK(sluice_abi_version() == SLUICE_ABI_VERSION);
  CHECK(strlen(sluice_version()) > 0);
  CHECK(strcmp(sluice_status_name(SLUICE_OK), "ok") == 0);
  misuse_without_a_model(argv[1], argv[4]);

  sluice_open_options_init(&options);
  options.threads = 1;
  options.chunk = 4; /* prefill crosses chunk boundaries */
  if (argc == 6) options.attach = argv[5];
  CHECK(sluice_model_open(argv[1], &options, &model) == SLUICE_OK);
  if (model == NULL) return 1;
  CHECK(sluice_model_info(model, &json) == SLUICE_OK);
  CHECK(strstr(json, "\"family\"") != NULL && strstr(json, "\"floor_bytes\"") != NULL);
  CHECK(strstr(json, argc == 6 ? "\"cache\":\"attached\"" : "\"cache\":\"embedded\"") != NULL);

  CHECK(sluice_tokenize(model, argv[2], strlen(argv[2]), 1, prompt, MAX_TOKENS, &prompt_count) == SLUICE_OK);
  sluice_sampler_config_init(&config);
  CHECK(sluice_sampler_new(model, &config, &greedy) == SLUICE_OK);
  CHECK(sluice_model_stats(model, &json) == SLUICE_OK && strstr(json, "\"last_generation\":null") != NULL);
  generate_greedy(model, greedy, prompt, prompt_count, (uint32_t)atoi(argv[3]), &greedy_run);
  CHECK(sluice_model_stats(model, &json) == SLUICE_OK);
  CHECK(strstr(json, "\"generated_tokens\"") != NULL && strstr(json, "\"requested\"") != NULL);
  step_matches_generate(model, greedy, prompt, prompt_count, &greedy_run);
  sessions_round_trip(model, greedy, prompt, prompt_count, argv[4]);
  text_functions(model);

  /* Closing the model closes what it holds; every later call is refused. */
  CHECK(sluice_sequence_new(model, &leftover) == SLUICE_OK);
  samplers(model, leftover, prompt, prompt_count);
  CHECK(sluice_model_close(model) == SLUICE_OK);
  CHECK_FAILS(sluice_sequence_feed(leftover, prompt, 1), SLUICE_ERROR_INVALID_HANDLE, leftover, "closed");
  CHECK_FAILS(sluice_sequence_step(leftover, greedy, &token, NULL), SLUICE_ERROR_INVALID_HANDLE, leftover,
              "closed");
  CHECK_FAILS(sluice_model_info(model, &json), SLUICE_ERROR_INVALID_HANDLE, model, "closed");
  CHECK_FAILS(sluice_model_close(model), SLUICE_ERROR_INVALID_HANDLE, model, "closed");
  if (failures > 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
