/* The C interface from C: a least-squares fit, hyperparameter changes, a checkpoint round
 * trip, and bad input that must come back as an error code with a message, changing nothing. */
#include <kopt/kopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              kopt_last_error());                                              \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

enum { N = 64 };

/* Gradient of 0.5 * ||w - t||^2 with t_i = i / N; returns the loss. */
static double backward(const float* w, float* g) {
  double loss = 0;
  for (int i = 0; i < N; ++i) {
    const double d = w[i] - (double)i / N;
    g[i] = (float)d;
    loss += 0.5 * d * d;
  }
  return loss;
}

int main(void) {
  CHECK(kopt_initialize() == KOPT_OK);
  static float w[N], g[N], b[1] = {0}, db[1];
  kopt_groups* groups = NULL;
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  kopt_adam_config config;
  kopt_adam_config_default(&config);
  CHECK(config.lr == 1e-3 && config.beta2 == 0.999 && config.decoupled == 1);
  config.lr = 0.05;
  config.weight_decay = 0;
  size_t group = 99;
  CHECK(kopt_groups_add_group(groups, &config, 0, &group) == KOPT_OK && group == 0);
  CHECK(kopt_groups_add_param(groups, 0, "w", w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 0, "b", b, KOPT_F32, db, KOPT_F32, 1, KOPT_HOST) == KOPT_OK);
  /* A param of no elements needs no memory: NULL is fine there, as in C++. */
  CHECK(kopt_groups_add_param(groups, 0, "none", NULL, KOPT_F32, NULL, KOPT_F32, 0, KOPT_HOST) ==
        KOPT_OK);

  /* Bad input: an error code, a message naming the problem, nothing added. */
  CHECK(kopt_groups_add_param(groups, 0, NULL, w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "name") != NULL);
  CHECK(kopt_groups_add_param(groups, 0, "x", w, (kopt_dtype)7, g, KOPT_F32, N, KOPT_HOST) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_add_param(groups, 5, "x", w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  kopt_adam_config bad = config;
  bad.beta1 = 1.5;
  CHECK(kopt_groups_add_group(groups, &bad, 0, NULL) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "beta1") != NULL);

  kopt_options options;
  kopt_options_default(&options);
  options.max_grad_norm = 10;
  options.loss_scaling = 1;
  options.init_scale = 8;
  kopt_optimizer* opt = NULL;
  CHECK(kopt_optimizer_create(groups, &options, &opt) == KOPT_OK);
  kopt_groups_destroy(groups);
  CHECK(kopt_optimizer_create(NULL, &options, &opt) == KOPT_ERROR_INVALID_ARGUMENT);

  double scale = 0, first = -1, loss = 0;
  kopt_step_stats stats;
  for (int step = 0; step < 100; ++step) {
    CHECK(kopt_loss_scale(opt, &scale) == KOPT_OK);
    loss = backward(w, g);
    for (int i = 0; i < N; ++i) g[i] *= (float)scale;
    db[0] = (float)(scale * (b[0] - 1.0));
    if (first < 0) first = loss;
    CHECK(kopt_step(opt, &stats) == KOPT_OK && !stats.skipped);
  }
  int64_t steps = 0;
  CHECK(kopt_step_count(opt, "w", &steps) == KOPT_OK && steps == 100);
  CHECK(kopt_step_count(opt, "none", &steps) == KOPT_OK && steps == 0); /* no grad yet */
  CHECK(kopt_rebind(opt, "none", NULL, KOPT_F32, NULL, KOPT_F32, 0, KOPT_HOST) == KOPT_OK);
  CHECK(kopt_rebind(opt, "w", NULL, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(loss < 0.01 * first);
  printf("C API: loss %.4g -> %.4g in 100 steps (grad norm %.3g, loss scale %g)\n", first, loss,
         stats.grad_norm, stats.loss_scale);

  /* Hyperparameters: a bad value is refused and the config stays. */
  CHECK(kopt_set_lr(opt, 0, -1.0) == KOPT_ERROR_INVALID_ARGUMENT);
  kopt_adam_config now;
  CHECK(kopt_get_config(opt, 0, &now) == KOPT_OK && now.lr == 0.05);
  CHECK(kopt_set_lr(opt, 0, 0.01) == KOPT_OK);
  CHECK(kopt_get_config(opt, 0, &now) == KOPT_OK && now.lr == 0.01);
  CHECK(kopt_get_config(opt, 3, &now) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_set_grad(opt, "nope", g, KOPT_F32, N, KOPT_HOST) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_set_grad(opt, "w", g, KOPT_F32, N - 1, KOPT_HOST) == KOPT_ERROR_SHAPE_MISMATCH);
  CHECK(kopt_step_count(opt, "w", &steps) == KOPT_OK && steps == 100);

  /* Checkpoints: a round trip, and a missing one. */
  char dir[128];
  snprintf(dir, sizeof dir, "/tmp/kopt-c-api-%d", rand());
  CHECK(kopt_save(opt, dir) == KOPT_OK);
  CHECK(kopt_load(opt, dir, 0) == KOPT_OK);
  CHECK(kopt_load(opt, "/nonexistent/kopt", 0) == KOPT_ERROR_CHECKPOINT);
  CHECK(strstr(kopt_last_error(), "/nonexistent/kopt") != NULL);
  CHECK(kopt_reload_model_params(opt) == KOPT_OK);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);

  kopt_optimizer_destroy(opt);
  CHECK(kopt_finalize() == KOPT_OK);
  /* It ended the Kokkos kopt_initialize started: an optimizer can no longer be made. */
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group(groups, &config, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 0, "w", w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  opt = NULL;
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_ERROR_NOT_INITIALIZED && opt == NULL);
  kopt_groups_destroy(groups);
  CHECK(kopt_finalize() == KOPT_OK); /* nothing left to end */
  if (failures == 0) printf("C API: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
