/* Groups of any algorithm from C: configs by algorithm and field name, SGD and Lion groups in
 * one optimizer, LAMB with its clamp, Muon on a matrix param, schedules on either, and bad
 * names or values refused, changing nothing. */
#include <kopt/kopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              kopt_last_error());                                                             \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

enum { N = 33 };

int main(void) {
  CHECK(kopt_initialize() == KOPT_OK);
  static float w[N], g[N], v[N], h[N];
  for (int i = 0; i < N; ++i) w[i] = v[i] = (float)i / N, g[i] = h[i] = 0.5f - (float)i / N;

  kopt_config *sgd = NULL, *lion = NULL, *none = NULL;
  CHECK(kopt_config_create("sgd", &sgd) == KOPT_OK);
  CHECK(strcmp(kopt_config_algorithm(sgd), "sgd") == 0);
  double x = 0;
  CHECK(kopt_config_get(sgd, "lr", &x) == KOPT_OK && x == 1e-3); /* torch's default */
  CHECK(kopt_config_get(sgd, "nesterov", &x) == KOPT_OK && x == 0);
  CHECK(kopt_config_set(sgd, "lr", 0.1) == KOPT_OK);
  CHECK(kopt_config_create("lion", &lion) == KOPT_OK);
  CHECK(kopt_config_get(lion, "beta2", &x) == KOPT_OK && x == 0.99);

  /* Bad names and values: refused, naming them; the config keeps its value. */
  CHECK(kopt_config_create("adamax", &none) == KOPT_ERROR_INVALID_ARGUMENT && none == NULL);
  /* The message names the algorithms there are, and where AdamW is. */
  CHECK(strstr(kopt_last_error(), "'adam', 'sgd'") != NULL);
  CHECK(strstr(kopt_last_error(), "'adam' is AdamW by default") != NULL);
  CHECK(strstr(kopt_last_error(), "adamax") != NULL);
  CHECK(kopt_config_set(sgd, "betas", 0.5) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "betas") != NULL);
  CHECK(kopt_config_set(sgd, "nesterov", 2) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_config_get(sgd, "nesterov", &x) == KOPT_OK && x == 0);
  CHECK(kopt_config_set(sgd, "nesterov", 1) == KOPT_OK); /* valid only with momentum > 0 */
  kopt_groups* groups = NULL;
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, sgd, 0, NULL) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "nesterov") != NULL);
  CHECK(kopt_config_set(sgd, "nesterov", 0) == KOPT_OK);

  size_t index = 99;
  CHECK(kopt_groups_add_group_config(groups, sgd, 0, &index) == KOPT_OK && index == 0);
  CHECK(kopt_groups_add_group_config(groups, lion, 1, &index) == KOPT_OK && index == 1);
  CHECK(kopt_groups_add_param(groups, 0, "w", w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 1, "v", v, KOPT_F32, h, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  kopt_optimizer* opt = NULL;
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);

  /* One step: plain SGD moves w by -lr g; Lion moves v by -lr sign(g) (m starts at 0). */
  float w0[N], v0[N];
  memcpy(w0, w, sizeof w);
  memcpy(v0, v, sizeof v);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  for (int i = 0; i < N; ++i) {
    const double sign = g[i] > 0 ? 1.0 : (g[i] < 0 ? -1.0 : 0.0);
    CHECK(fabs(w[i] - (w0[i] - 0.1 * g[i])) <= 1e-6);
    CHECK(fabs(v[i] - (v0[i] - 1e-4 * sign)) <= 1e-7);
  }

  /* Schedules on any algorithm; a config of another algorithm is refused. */
  CHECK(kopt_set_lr(opt, 1, 3e-4) == KOPT_OK);
  kopt_config* got = NULL;
  CHECK(kopt_get_group_config(opt, 1, &got) == KOPT_OK);
  CHECK(strcmp(kopt_config_algorithm(got), "lion") == 0);
  CHECK(kopt_config_get(got, "lr", &x) == KOPT_OK && x == 3e-4);
  CHECK(kopt_set_group_config(opt, 0, got) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "sgd") != NULL && strstr(kopt_last_error(), "lion") != NULL);
  CHECK(kopt_config_set(got, "weight_decay", 0.5) == KOPT_OK);
  CHECK(kopt_set_group_config(opt, 1, got) == KOPT_OK);
  kopt_config_destroy(got);
  CHECK(kopt_get_group_config(opt, 1, &got) == KOPT_OK);
  CHECK(kopt_config_get(got, "weight_decay", &x) == KOPT_OK && x == 0.5);
  kopt_config_destroy(got);
  kopt_adam_config adam;
  CHECK(kopt_get_config(opt, 0, &adam) == KOPT_ERROR_INVALID_ARGUMENT); /* an SGD group */
  CHECK(kopt_set_lr(opt, 0, -1.0) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "SgdConfig.lr") != NULL);
  CHECK(kopt_get_group_config(opt, 0, &got) == KOPT_OK);
  CHECK(kopt_config_get(got, "lr", &x) == KOPT_OK && x == 0.1);
  kopt_config_destroy(got);

  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(groups);

  /* Masters kept as remainders, local or offloaded: bf16 params step exactly as with fp32
   * masters (no element of these is a tie); bad names and groups refused, naming them. */
  static uint16_t ra[N], rb[N], rc[N], rg[N], half[N];
  for (int i = 0; i < N; ++i) {
    float f = 0.25f + (float)i / 7, gr = 0.5f - (float)i / N;
    uint32_t u, v;
    memcpy(&u, &f, 4);
    memcpy(&v, &gr, 4);
    ra[i] = rb[i] = rc[i] = (uint16_t)(u >> 16);
    rg[i] = (uint16_t)(v >> 16);
  }
  kopt_config* adam_config = NULL;
  CHECK(kopt_config_create("adam", &adam_config) == KOPT_OK);
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, adam_config, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, adam_config, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, adam_config, 1, NULL) == KOPT_OK);
  CHECK(kopt_groups_set_master(groups, 0, "fp8") == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "fp8") != NULL);
  CHECK(kopt_groups_set_master(groups, 3, "remainder") == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "group 3") != NULL);
  CHECK(kopt_groups_set_master(groups, 0, NULL) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_set_master(groups, 2, "remainder") == KOPT_OK); /* offloaded */
  CHECK(kopt_groups_set_master(groups, 0, "remainder") == KOPT_OK);
  CHECK(kopt_groups_set_master(groups, 1, "f32") == KOPT_OK);
  CHECK(kopt_groups_set_state_dtype(groups, 0, (kopt_dtype)7) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "dtype 7") != NULL);
  CHECK(kopt_groups_set_state_dtype(groups, 0, KOPT_F16) == KOPT_OK);
  CHECK(kopt_groups_set_array_dtype(groups, 0, "momentum", KOPT_F32) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "exp_avg, exp_avg_sq, max_exp_avg_sq") != NULL);
  CHECK(kopt_groups_set_array_dtype(groups, 0, NULL, KOPT_F32) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_set_array_dtype(groups, 9, "exp_avg", KOPT_F32) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_set_array_dtype(groups, 0, "exp_avg_sq", KOPT_F32) == KOPT_OK);
  CHECK(kopt_groups_set_state_dtype(groups, 2, KOPT_BF16) == KOPT_OK); /* offloaded too */
  CHECK(kopt_groups_set_state_dtype(groups, 2, KOPT_F32) == KOPT_OK);
  CHECK(kopt_groups_set_state_dtype(groups, 0, KOPT_F32) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 0, "a", ra, KOPT_BF16, rg, KOPT_BF16, N, KOPT_HOST) ==
        KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 1, "b", rb, KOPT_BF16, rg, KOPT_BF16, N, KOPT_HOST) ==
        KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 2, "c", rc, KOPT_BF16, rg, KOPT_BF16, N, KOPT_HOST) ==
        KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  for (int s = 0; s < 5; ++s) CHECK(kopt_step(opt, NULL) == KOPT_OK);
  CHECK(memcmp(ra, rb, sizeof ra) == 0);
  CHECK(memcmp(ra, rc, sizeof ra) == 0);
  CHECK(ra[0] != (uint16_t)0x3e80); /* they moved (0.25 was 0x3e80) */
  kopt_optimizer_destroy(opt);
  /* bf16 state arrays beside remainders: the 18-byte step runs and moves the params; so
   * does bf16 exp_avg beside f32 exp_avg_sq. */
  uint16_t before = ra[0];
  CHECK(kopt_groups_set_state_dtype(groups, 0, KOPT_BF16) == KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  CHECK(ra[0] != before);
  kopt_optimizer_destroy(opt);
  before = ra[0];
  CHECK(kopt_groups_set_array_dtype(groups, 0, "exp_avg_sq", KOPT_F32) == KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  CHECK(ra[0] != before);
  kopt_optimizer_destroy(opt);
  /* q8 moments (Adam's only) beside remainders: the 14-byte step runs and moves the params;
   * a q8 param is refused. */
  before = ra[0];
  CHECK(kopt_groups_set_state_dtype(groups, 0, KOPT_Q8) == KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  CHECK(ra[0] != before);
  kopt_optimizer_destroy(opt);
  CHECK(kopt_groups_add_param(groups, 0, "q", half, KOPT_Q8, rg, KOPT_BF16, N, KOPT_HOST) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "KOPT_F32, KOPT_BF16 or KOPT_F16") != NULL);
  CHECK(kopt_groups_set_state_dtype(groups, 0, (kopt_dtype)77) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(),
               "state dtype 77 is not KOPT_F32, KOPT_BF16, KOPT_F16 or KOPT_Q8") != NULL);
  CHECK(kopt_groups_set_state_dtype(groups, 0, KOPT_BF16) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 0, "h", half, KOPT_F16, rg, KOPT_BF16, N, KOPT_HOST) ==
        KOPT_OK);
  opt = NULL;
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_ERROR_INVALID_ARGUMENT && opt == NULL);
  CHECK(strstr(kopt_last_error(), "'h' is f16") != NULL);
  /* No masters: stochastic rounding is of bf16 params ('h' is f16), nearest of any. */
  CHECK(kopt_groups_set_rounding(groups, 0, "stochastic", 7) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "only a group without masters") != NULL);
  CHECK(kopt_groups_set_master(groups, 0, "none") == KOPT_OK);
  CHECK(kopt_groups_set_rounding(groups, 0, "stochastic", 7) == KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_ERROR_INVALID_ARGUMENT && opt == NULL);
  CHECK(strstr(kopt_last_error(), "'h' is f16") != NULL);
  CHECK(kopt_groups_set_rounding(groups, 0, "fast", 0) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "'fast'") != NULL);
  CHECK(kopt_groups_set_rounding(groups, 0, NULL, 0) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_set_rounding(groups, 0, "nearest", 7) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "seed") != NULL);
  CHECK(kopt_groups_set_rounding(groups, 9, "nearest", 0) == KOPT_ERROR_INVALID_ARGUMENT);
  /* Stochastic state rounding: of bf16 and f16 arrays (group 0's are bf16), one seed. */
  CHECK(kopt_groups_set_state_rounding(groups, 0, "stochastic", 5) == KOPT_OK);
  CHECK(kopt_groups_set_state_rounding(groups, 0, "nearest", 5) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "seed") != NULL);
  CHECK(kopt_groups_set_state_rounding(groups, 0, "often", 0) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "'often'") != NULL);
  CHECK(kopt_groups_set_state_rounding(groups, 0, NULL, 0) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_set_state_rounding(groups, 9, "nearest", 0) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_set_state_dtype(groups, 0, KOPT_F32) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "every state array f32") != NULL);
  CHECK(kopt_groups_set_state_rounding(groups, 0, "nearest", 0) == KOPT_OK);
  CHECK(kopt_groups_set_master(groups, 2, "none") == KOPT_OK); /* offloaded too */
  CHECK(kopt_groups_set_rounding(groups, 0, "nearest", 0) == KOPT_OK);
  before = ra[0];
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  CHECK(ra[0] != before); /* updated in place, no master */
  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(groups);
  kopt_config_destroy(adam_config);

  /* LAMB: apex's defaults, DeepSpeed's clamp by name; one step against its equations (at
   * step 1 the bias-corrected moments are g and g^2: u = g / (|g| + eps) + wd w); an
   * offloaded LAMB group refused, naming it. */
  kopt_config* lamb = NULL;
  CHECK(kopt_config_create("lamb", &lamb) == KOPT_OK);
  CHECK(kopt_config_get(lamb, "eps", &x) == KOPT_OK && x == 1e-6);
  CHECK(kopt_config_get(lamb, "clamp_trust", &x) == KOPT_OK && x == 0);
  CHECK(kopt_config_set(lamb, "clamp_trust", 1) == KOPT_OK);
  CHECK(kopt_config_set(lamb, "min_trust", 2.0) == KOPT_OK); /* checked with the group */
  CHECK(kopt_config_set(lamb, "max_trust", 1.0) == KOPT_OK);
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, lamb, 0, NULL) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "LambConfig.max_trust = 1") != NULL);
  CHECK(kopt_config_set(lamb, "min_trust", 0.5) == KOPT_OK);
  CHECK(kopt_config_set(lamb, "max_trust", 3.0) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, lamb, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, lamb, 1, NULL) == KOPT_OK);
  for (int i = 0; i < N; ++i) w[i] = 0.1f * (float)(i % 5) - 0.2f, g[i] = 0.5f - (float)i / N;
  CHECK(kopt_groups_add_param(groups, 0, "w", w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 1, "v", v, KOPT_F32, h, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  opt = NULL;
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_ERROR_INVALID_ARGUMENT && opt == NULL);
  CHECK(strstr(kopt_last_error(), "'lamb'") != NULL && strstr(kopt_last_error(), "'v'") != NULL);
  kopt_groups_destroy(groups);
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, lamb, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 0, "w", w, KOPT_F32, g, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  memcpy(w0, w, sizeof w);
  double u[N], wn = 0, un = 0;
  for (int i = 0; i < N; ++i) {
    u[i] = g[i] / (fabs((double)g[i]) + 1e-6) + 0.01 * w0[i];
    wn += (double)w0[i] * w0[i], un += u[i] * u[i];
  }
  double r = sqrt(wn) / sqrt(un);
  r = r < 0.5 ? 0.5 : (r > 3.0 ? 3.0 : r);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  for (int i = 0; i < N; ++i) CHECK(fabs(w[i] - (w0[i] - 1e-3 * r * u[i])) <= 1e-6);
  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(groups);
  kopt_config_destroy(lamb);

  /* Muon: torch's defaults by name; a param without a 2-D shape refused, naming it; one step
   * of a 1 x N matrix against its equations. Its Newton-Schulz iteration on a row is a scalar
   * one on the norm s (from 1): s <- s (a + b s^2 + c s^4), so O = s_5 g / ||g|| (the
   * direction at step 1 is a multiple of g), and the lr scale of 1 x N is 1. */
  kopt_config* muon = NULL;
  CHECK(kopt_config_create("muon", &muon) == KOPT_OK);
  CHECK(kopt_config_get(muon, "weight_decay", &x) == KOPT_OK && x == 0.1);
  CHECK(kopt_config_get(muon, "ns_steps", &x) == KOPT_OK && x == 5);
  CHECK(kopt_config_set(muon, "ns_steps", 2.5) == KOPT_OK); /* checked with the group */
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, muon, 0, NULL) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "ns_steps") != NULL);
  CHECK(kopt_config_set(muon, "ns_steps", 5) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, muon, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_matrix_param(groups, 0, "m", w, KOPT_F32, g, KOPT_F32, -1, 3, KOPT_HOST) ==
        KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(kopt_groups_add_param(groups, 0, "v", v, KOPT_F32, h, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  opt = NULL;
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_ERROR_INVALID_ARGUMENT && opt == NULL);
  CHECK(strstr(kopt_last_error(), "'v'") != NULL && strstr(kopt_last_error(), "2-D") != NULL);
  kopt_groups_destroy(groups);
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, muon, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_matrix_param(groups, 0, "m", w, KOPT_F32, g, KOPT_F32, 1, N, KOPT_HOST) ==
        KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  memcpy(w0, w, sizeof w);
  double gn = 0, s = 1;
  for (int i = 0; i < N; ++i) gn += (double)g[i] * g[i];
  for (int k = 0; k < 5; ++k) s = s * (3.4445 - 4.775 * s * s + 2.0315 * s * s * s * s);
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  for (int i = 0; i < N; ++i)
    CHECK(fabs(w[i] - (w0[i] * (1 - 1e-3 * 0.1) - 1e-3 * s * g[i] / sqrt(gn))) <= 1e-6);
  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(groups);
  /* Adafactor at step 1, torch's defaults: its statistics are g^2 themselves (1^-0.8 = 1), so
   * the direction of a 1 x N matrix (factored) and of a vector (unfactored) is sign(g), of RMS
   * 1 (not clipped), and the step is lr max(eps2, RMS(w)) sign(g). */
  kopt_config* adafactor = NULL;
  CHECK(kopt_config_create("adafactor", &adafactor) == KOPT_OK);
  CHECK(kopt_config_get(adafactor, "eps1", &x) == KOPT_OK && x == ldexp(1.0, -23));
  CHECK(kopt_config_set(adafactor, "d", 0.5) == KOPT_OK);
  CHECK(kopt_groups_create(&groups) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, adafactor, 0, NULL) == KOPT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kopt_last_error(), "AdafactorConfig.d = 0.5") != NULL);
  CHECK(kopt_config_set(adafactor, "d", 1) == KOPT_OK);
  CHECK(kopt_groups_add_group_config(groups, adafactor, 0, NULL) == KOPT_OK);
  CHECK(kopt_groups_add_matrix_param(groups, 0, "m", w, KOPT_F32, g, KOPT_F32, 1, N, KOPT_HOST) ==
        KOPT_OK);
  CHECK(kopt_groups_add_param(groups, 0, "v", v, KOPT_F32, h, KOPT_F32, N, KOPT_HOST) == KOPT_OK);
  CHECK(kopt_optimizer_create(groups, NULL, &opt) == KOPT_OK);
  memcpy(w0, w, sizeof w);
  memcpy(v0, v, sizeof v);
  double ww = 0, vv = 0;
  for (int i = 0; i < N; ++i) ww += (double)w0[i] * w0[i], vv += (double)v0[i] * v0[i];
  CHECK(kopt_step(opt, NULL) == KOPT_OK);
  for (int i = 0; i < N; ++i) {
    const double sign = g[i] > 0 ? 1.0 : -1.0;
    CHECK(fabs(w[i] - (w0[i] - 1e-2 * fmax(1e-3, sqrt(ww / N)) * sign)) <= 1e-6);
    CHECK(fabs(v[i] - (v0[i] - 1e-2 * fmax(1e-3, sqrt(vv / N)) * sign)) <= 1e-6);
  }
  kopt_optimizer_destroy(opt);
  kopt_groups_destroy(groups);
  kopt_config_destroy(adafactor);
  kopt_config_destroy(muon);
  kopt_config_destroy(sgd);
  kopt_config_destroy(lion);
  CHECK(kopt_finalize() == KOPT_OK);
  if (failures == 0) printf("C API, algorithms: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
