/* npullm from C: stream a continuation of a prompt, then print the K/V state and metrics.
 *
 *   npullm_c_example MODEL.gguf [PROMPT] [MAX_NEW_TOKENS] [CACHE_DIR]
 *
 * Greedy (temperature 0), so its text is `npullm run -m MODEL.gguf -p PROMPT -n N --temp 0`'s.
 * The text goes to stdout; the K/V state and metrics to stderr. */
#include <npullm/npullm.h>

#include <stdio.h>
#include <stdlib.h>

static int print_piece(const char* piece, size_t len, void* user_data) {
  (void)user_data;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  return 1; /* 0 would cancel */
}

static int fail(const char* what, npullm_status st) {
  fprintf(stderr, "%s failed (%s): %s\n", what, npullm_status_name(st), npullm_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [MAX_NEW_TOKENS] [CACHE_DIR]\n", argv[0]);
    return 2;
  }
  if (npullm_abi_version() != NPULLM_ABI_VERSION) {
    fprintf(stderr, "libnpullm has ABI %d, this program was built for %d\n", npullm_abi_version(), NPULLM_ABI_VERSION);
    return 1;
  }
  npullm_model_params params = npullm_model_default_params();
  if (argc > 4) params.cache_dir = argv[4];

  npullm_model* model = NULL;
  npullm_status st = npullm_model_open(argv[1], &params, &model);
  if (st != NPULLM_OK) return fail("npullm_model_open", st);

  npullm_session* session = NULL;
  st = npullm_session_create(model, &session);
  if (st != NPULLM_OK) {
    npullm_model_free(model);
    return fail("npullm_session_create", st);
  }

  npullm_sampling sampling = npullm_sampling_default(); /* greedy */
  sampling.max_new_tokens = argc > 3 ? atoi(argv[3]) : 40;
  npullm_result result;
  st = npullm_generate(session, argc > 2 ? argv[2] : "Once upon a time", &sampling, print_piece, NULL, &result);
  if (st == NPULLM_OK) {
    npullm_kv_state kv;
    npullm_session_kv_state(session, &kv);
    printf("\n");
    fprintf(stderr, "[%zu tokens, %s; K/V %lld of %lld rows, last variant %lld; %.1f tokens/s, ttft %.1f ms]\n", result.n_ids,
            npullm_finish_reason_name(result.finish), (long long)kv.rows_used, (long long)kv.capacity,
            (long long)kv.last_variant, result.metrics.decode_tps, result.metrics.ttft_ms);
    npullm_result_free(&result);
  }
  npullm_session_free(session);
  npullm_model_free(model);
  return st == NPULLM_OK ? 0 : fail("npullm_generate", st);
}
