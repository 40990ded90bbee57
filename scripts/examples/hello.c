/* scripts/examples/hello.c: the smallest program on libsluice. `hello MODEL
 * PROMPT` opens the container with an in-process cache, generates 16 tokens
 * greedily and prints exactly what `sluice run MODEL PROMPT -n 16 --temp 0`
 * prints on stdout. Build (after scripts/install PREFIX):
 *   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc -std=c99 hello.c $(pkg-config --cflags --libs sluice) -o hello */
#include <sluice.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_piece(void* user_data, int32_t token, const char* piece, size_t length) {
  (void)user_data;
  (void)token;
  fwrite(piece, 1, length, stdout);
  fflush(stdout);
  return 0; /* go on */
}

static int fail(const char* what, const void* handle) {
  fprintf(stderr, "hello: %s: %s\n", what, sluice_last_error(handle));
  return 1;
}

int main(int argc, char** argv) {
  sluice_model* model = NULL;
  sluice_sampler* sampler = NULL;
  sluice_sequence* sequence = NULL;
  sluice_sampler_config greedy;
  int32_t* prompt = NULL;
  size_t count = 0;
  sluice_status asked;
  int status = 0;

  if (argc != 3) {
    fprintf(stderr, "usage: hello MODEL PROMPT\n");
    return 2;
  }
  if (sluice_model_open(argv[1], NULL, &model) != SLUICE_OK) return fail("open", NULL);
  /* Ask for the prompt's size, then tokenize it (with BOS when the model's tokenizer adds one). */
  asked = sluice_tokenize(model, argv[2], strlen(argv[2]), 1, NULL, 0, &count);
  if (asked != SLUICE_OK && asked != SLUICE_ERROR_BUFFER_TOO_SMALL) {
    status = fail("tokenize", model);
  } else if ((prompt = malloc((count > 0 ? count : 1) * sizeof *prompt)) == NULL) {
    status = fail("out of memory", NULL);
  } else if (sluice_tokenize(model, argv[2], strlen(argv[2]), 1, prompt, count, &count) != SLUICE_OK) {
    status = fail("tokenize", model);
  } else {
    sluice_sampler_config_init(&greedy); /* temperature 0: greedy */
    if (sluice_sampler_new(model, &greedy, &sampler) != SLUICE_OK) {
      status = fail("sampler", model);
    } else if (sluice_sequence_new(model, &sequence) != SLUICE_OK) {
      status = fail("sequence", model);
    } else if (sluice_generate(sequence, sampler, prompt, count, 16, print_piece, NULL) != SLUICE_OK) {
      status = fail("generate", sequence);
    } else {
      printf("\n");
    }
  }
  free(prompt);
  sluice_model_close(model); /* closes the sampler and the sequence too */
  return status;
}
