/* kopt's C interface: the HybridOptimizer for C and Fortran codes (iso_c_binding).
 *
 * Every function that can fail returns a kopt_status (the _destroy and _default functions
 * return nothing and take NULL); on anything but KOPT_OK, kopt_last_error() gives
 * the message (thread-local, valid until the next kopt call on that thread) and nothing
 * was changed. No C++ exception crosses this interface. Build the optimizer in two steps:
 * collect groups and params in a kopt_groups, then create the kopt_optimizer from it.
 * Kokkos must be initialized first: kopt_initialize() does it when the code does not use
 * Kokkos itself. */
#ifndef KOPT_KOPT_H
#define KOPT_KOPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  KOPT_OK = 0,
  KOPT_ERROR_INVALID_ARGUMENT = 1,
  KOPT_ERROR_SHAPE_MISMATCH = 2,
  KOPT_ERROR_NOT_COMPILED = 3,
  KOPT_ERROR_CHECKPOINT = 4,
  KOPT_ERROR_BACKEND = 5,
  KOPT_ERROR_OTHER = 6,
  KOPT_ERROR_NOT_INITIALIZED = 7,    /* Kokkos not initialized, or already finalized */
  KOPT_ERROR_INCONSISTENT_STATE = 8, /* a step failed part-way: load a checkpoint */
  KOPT_STATUS_FORCE_INT32_MIN = -0x7fffffff - 1,
  KOPT_STATUS_FORCE_INT32 = 0x7fffffff
} kopt_status;

/* The *_FORCE_INT32(_MIN) values make every enum an int-sized type that holds any int,
 * negative ones included, so a bad value passed in is refused with an error instead of being
 * undefined behaviour in C++. */
typedef enum {
  KOPT_F32 = 0,
  KOPT_BF16 = 1,
  KOPT_F16 = 2,
  /* State arrays only: Adam's moments in blockwise 8-bit codes (kopt::DType::q8). */
  KOPT_Q8 = 5,
  KOPT_DTYPE_FORCE_INT32_MIN = -0x7fffffff - 1,
  KOPT_DTYPE_FORCE_INT32 = 0x7fffffff
} kopt_dtype;

typedef enum {
  KOPT_HOST = 0,
  KOPT_CUDA = 1,
  KOPT_CUDA_UVM = 2,
  KOPT_CUDA_HOST_PINNED = 3,
  KOPT_MEMORY_SPACE_FORCE_INT32_MIN = -0x7fffffff - 1,
  KOPT_MEMORY_SPACE_FORCE_INT32 = 0x7fffffff
} kopt_memory_space;

/* One group's hyperparameters; kopt_adam_config_default() gives torch AdamW's. */
typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  int32_t decoupled, amsgrad, bias_correction, maximize; /* 0 or 1; anything else is refused */
} kopt_adam_config;

typedef struct {
  double max_grad_norm; /* clip the global grad norm to this; <= 0: no clipping; NaN, Inf refused */
  int32_t loss_scaling; /* 1: dynamic loss scaling (torch GradScaler's defaults); 0: off */
  double init_scale;    /* with loss_scaling; <= 0: 65536; NaN, Inf refused */
} kopt_options;

typedef struct {
  double grad_norm; /* NaN when neither clipping nor loss scaling is on */
  double clip_factor;
  int32_t skipped;   /* 1: non-finite grads, nothing was updated */
  double loss_scale; /* for the next backward pass */
} kopt_step_stats;

typedef struct kopt_groups kopt_groups;
typedef struct kopt_optimizer kopt_optimizer;
/* Any algorithm's config: its algorithm by name ("adam", "sgd", "lion", "adagrad", "lamb",
 * "muon", "adafactor") and its fields by their C++ names (kopt::SgdConfig's "momentum", ...;
 * bools as 0 or 1).
 */
typedef struct kopt_config kopt_config;

const char* kopt_last_error(void);
void kopt_adam_config_default(kopt_adam_config* config);
void kopt_options_default(kopt_options* options);

/* Kokkos::initialize / finalize, for codes that do not run Kokkos themselves. kopt_initialize
 * does nothing where Kokkos already runs, and kopt_finalize ends only a Kokkos that
 * kopt_initialize started (not the code's own, nor one already finalized). kopt_finalize
 * refuses (KOPT_ERROR_INVALID_ARGUMENT) while an optimizer created here still exists. */
kopt_status kopt_initialize(void);
kopt_status kopt_finalize(void);

/* A config of `algorithm` ("adam", AdamW by default and Adam with decoupled = 0; "sgd",
 * "lion", "adagrad", "lamb", "muon", "adafactor") with its defaults (torch's); free it with
 * kopt_config_destroy. */
kopt_status kopt_config_create(const char* algorithm, kopt_config** config);
void kopt_config_destroy(kopt_config* config);
/* The algorithm's name (valid while the config lives). */
const char* kopt_config_algorithm(const kopt_config* config);
/* Sets or reads one field; an unknown field, or a bool field given anything but 0 or 1, is
 * refused naming it. The whole config is validated where it is used. */
kopt_status kopt_config_set(kopt_config* config, const char* field, double value);
kopt_status kopt_config_get(const kopt_config* config, const char* field, double* value);

kopt_status kopt_groups_create(kopt_groups** groups);
void kopt_groups_destroy(kopt_groups* groups);
/* Adds a group (host_state = 1: its state lives in host memory, offloaded); its index, from
 * 0, goes to *index when index is not NULL. */
kopt_status kopt_groups_add_group(kopt_groups* groups, const kopt_adam_config* config,
                                  int32_t host_state, size_t* index);
/* The same for a group of any algorithm (validated first). */
kopt_status kopt_groups_add_group_config(kopt_groups* groups, const kopt_config* config,
                                         int32_t host_state, size_t* index);
/* How group `group` keeps the fp32 masters of its 16-bit params (kopt::MasterStorage):
 * "f32" (the default: a 4-byte copy), "remainder" (bf16 params only: the param and a
 * 2-byte remainder hold the master exactly) or "none" (no master: updates are rounded into
 * the params, see kopt_groups_set_rounding); any of them with host_state = 1 (there the
 * remainders live on the host, and each step brings the params to the host with their
 * grads). Setting it resets the rounding to "nearest". */
kopt_status kopt_groups_set_master(kopt_groups* groups, size_t group, const char* master);
/* How a group without masters ("none") rounds its updates into its params
 * (kopt::Rounding): "nearest" (seed must be 0) or "stochastic" (bf16 params; the random
 * bits derive from seed, step, param name and element index alone). */
kopt_status kopt_groups_set_rounding(kopt_groups* groups, size_t group, const char* rounding,
                                     uint64_t seed);
/* How group `group` rounds each step's new state into its bf16, f16 and q8 arrays
 * (kopt::StateStorage::state_rounding): "nearest" (the default; seed must be 0) or
 * "stochastic" (each store right in expectation, the bits from seed, step, param name, array
 * and element index alone). Any master form; set the state dtypes first: a group whose
 * arrays are all KOPT_F32 is refused (it would round nothing). A group has one seed, the
 * last stochastic call's (this one's or kopt_groups_set_rounding's). */
kopt_status kopt_groups_set_state_rounding(kopt_groups* groups, size_t group, const char* rounding,
                                           uint64_t seed);
/* The element type of group `group`'s state arrays (kopt::StateStorage::arrays): KOPT_F32
 * (the default), KOPT_BF16 or KOPT_F16 (stored rounded to nearest even; offloaded groups
 * too), or for Adam KOPT_Q8 (blockwise 8-bit codes). Clears the per-array ones. */
kopt_status kopt_groups_set_state_dtype(kopt_groups* groups, size_t group, kopt_dtype dtype);
/* The element type of one of the group's state arrays, by its algorithm's name for it
 * ("exp_avg", "exp_avg_sq", "max_exp_avg_sq" for Adam; "momentum_buffer", "exp_avg", "sum"):
 * e.g. KOPT_F32 for "exp_avg_sq" after kopt_groups_set_state_dtype(g, i, KOPT_BF16). */
kopt_status kopt_groups_set_array_dtype(kopt_groups* groups, size_t group, const char* array,
                                        kopt_dtype dtype);
/* A named param of `numel` elements and its grad (NULL: none yet), both in `space`; the
 * param may be NULL only when it has no elements. kopt copies the name and keeps the
 * pointers: param and grad buffers (a Fortran c_loc target too) must stay allocated and in
 * place while an optimizer built from these groups uses them (until kopt_set_grad or
 * kopt_rebind gives others, or kopt_optimizer_destroy). */
kopt_status kopt_groups_add_param(kopt_groups* groups, size_t group, const char* name, void* param,
                                  kopt_dtype param_dtype, void* grad, kopt_dtype grad_dtype,
                                  int64_t numel, kopt_memory_space space);

/* The same for a param that is a rows x cols matrix, row-major (kopt::Tensor::matrix): the
 * algorithms that update whole matrices (Muon) need the shape: kopt_optimizer_create
 * refuses a param added without one, naming it; Adafactor factors the second moment of a
 * param with a shape (and keeps a whole variance for one without); elementwise algorithms
 * ignore it. */
kopt_status kopt_groups_add_matrix_param(kopt_groups* groups, size_t group, const char* name,
                                         void* param, kopt_dtype param_dtype, void* grad,
                                         kopt_dtype grad_dtype, int64_t rows, int64_t cols,
                                         kopt_memory_space space);
/* Checks everything, then builds the optimizer; `groups` can be destroyed afterwards, or
 * build further optimizers (each keeps its own state of the same params). */
kopt_status kopt_optimizer_create(const kopt_groups* groups, const kopt_options* options,
                                  kopt_optimizer** optimizer);
/* The same, with the state sharded across the ranks of an MPI communicator (ZeRO-1/2, as
 * kopt::HybridOptions::sharding): collective over the communicator, as are kopt_step,
 * kopt_save and kopt_load of the optimizer it gives; every rank passes the same groups.
 * `mpi_comm` is the communicator's Fortran handle, so that this header needs no mpi.h:
 * MPI_Comm_c2f(comm) in C, the integer handle (or comm%MPI_VAL of mpi_f08) in Fortran; kopt
 * works on a duplicate of it. `zero_stage`: 1 (grads already all-reduced) or 2 (each rank's
 * own grads, reduce-scattered by kopt); `average_grads`: 1: stage 2 averages the ranks'
 * grads, 0: sums them. Destroy the optimizer before MPI_Finalize. KOPT_ERROR_NOT_COMPILED
 * where kopt was built without MPI (kopt_ENABLE_MPI=OFF). */
kopt_status kopt_optimizer_create_sharded(const kopt_groups* groups, const kopt_options* options,
                                          int32_t mpi_comm, int32_t zero_stage,
                                          int32_t average_grads, kopt_optimizer** optimizer);
void kopt_optimizer_destroy(kopt_optimizer* optimizer);

kopt_status kopt_step(kopt_optimizer* optimizer, kopt_step_stats* stats /* may be NULL */);
kopt_status kopt_get_config(kopt_optimizer* optimizer, size_t group, kopt_adam_config* config);
/* Replaces a group's config between steps (validated first). */
kopt_status kopt_set_config(kopt_optimizer* optimizer, size_t group,
                            const kopt_adam_config* config);
/* A copy of a group's config, any algorithm (free it with kopt_config_destroy). */
kopt_status kopt_get_group_config(kopt_optimizer* optimizer, size_t group, kopt_config** config);
/* Replaces a group's config between steps with one of the same algorithm (validated first). */
kopt_status kopt_set_group_config(kopt_optimizer* optimizer, size_t group,
                                  const kopt_config* config);
/* Sets a group's lr, whatever its algorithm. */
kopt_status kopt_set_lr(kopt_optimizer* optimizer, size_t group, double lr);
/* A new grad for `name` (NULL: no gradient, in this step and every later one until a grad is
 * set again). kopt keeps the pointer: the buffer must stay allocated until the next set_grad,
 * rebind or kopt_optimizer_destroy. */
kopt_status kopt_set_grad(kopt_optimizer* optimizer, const char* name, void* grad,
                          kopt_dtype grad_dtype, int64_t numel, kopt_memory_space space);
kopt_status kopt_rebind(kopt_optimizer* optimizer, const char* name, void* param,
                        kopt_dtype param_dtype, void* grad, kopt_dtype grad_dtype, int64_t numel,
                        kopt_memory_space space);
kopt_status kopt_reload_model_params(kopt_optimizer* optimizer);
kopt_status kopt_save(kopt_optimizer* optimizer, const char* path);
kopt_status kopt_load(kopt_optimizer* optimizer, const char* path, int32_t partial);
kopt_status kopt_loss_scale(const kopt_optimizer* optimizer, double* scale);
kopt_status kopt_step_count(const kopt_optimizer* optimizer, const char* name, int64_t* count);

#ifdef __cplusplus
}
#endif

#endif /* KOPT_KOPT_H */
