! kopt's C interface (include/kopt/kopt.h) for Fortran: its constants, structs and every
! function, bound with iso_c_binding, so a Fortran code writes `use kopt` and calls them as
! C would (see kopt.h for what each does). Strings go in NUL-terminated ("w" // c_null_char);
! params and grads as c_loc of arrays with the TARGET attribute; the opaque handles
! (kopt_groups, kopt_optimizer, kopt_config) are type(c_ptr). C's NULL for an optional
! pointer argument (an index, options, stats) is an absent optional argument. The C
! unsigned seeds, those of kopt_groups_set_rounding and _set_state_rounding, are
! integer(c_int64_t) of the same bits.
! tests/CMakeLists.txt checks that every function and constant of kopt.h is here.
module kopt
  use iso_c_binding
  implicit none

  ! kopt_status
  integer(c_int), parameter :: KOPT_OK = 0, KOPT_ERROR_INVALID_ARGUMENT = 1, &
                               KOPT_ERROR_SHAPE_MISMATCH = 2, KOPT_ERROR_NOT_COMPILED = 3, &
                               KOPT_ERROR_CHECKPOINT = 4, KOPT_ERROR_BACKEND = 5, &
                               KOPT_ERROR_OTHER = 6, KOPT_ERROR_NOT_INITIALIZED = 7, &
                               KOPT_ERROR_INCONSISTENT_STATE = 8
  ! kopt_dtype
  integer(c_int), parameter :: KOPT_F32 = 0, KOPT_BF16 = 1, KOPT_F16 = 2, KOPT_Q8 = 5
  ! kopt_memory_space
  integer(c_int), parameter :: KOPT_HOST = 0, KOPT_CUDA = 1, KOPT_CUDA_UVM = 2, &
                               KOPT_CUDA_HOST_PINNED = 3

  type, bind(c) :: kopt_adam_config
    real(c_double) :: lr, beta1, beta2, eps, weight_decay
    integer(c_int32_t) :: decoupled, amsgrad, bias_correction, maximize
  end type

  type, bind(c) :: kopt_options
    real(c_double) :: max_grad_norm
    integer(c_int32_t) :: loss_scaling
    real(c_double) :: init_scale
  end type

  type, bind(c) :: kopt_step_stats
    real(c_double) :: grad_norm, clip_factor
    integer(c_int32_t) :: skipped
    real(c_double) :: loss_scale
  end type

  interface
    type(c_ptr) function kopt_last_error() bind(c)
      import
    end function
    subroutine kopt_adam_config_default(config) bind(c)
      import
      type(kopt_adam_config), intent(out) :: config
    end subroutine
    subroutine kopt_options_default(options) bind(c)
      import
      type(kopt_options), intent(out) :: options
    end subroutine
    integer(c_int) function kopt_initialize() bind(c)
      import
    end function
    integer(c_int) function kopt_finalize() bind(c)
      import
    end function

    integer(c_int) function kopt_config_create(algorithm, config) bind(c)
      import
      character(kind=c_char), dimension(*), intent(in) :: algorithm
      type(c_ptr), intent(out) :: config
    end function
    subroutine kopt_config_destroy(config) bind(c)
      import
      type(c_ptr), value :: config
    end subroutine
    type(c_ptr) function kopt_config_algorithm(config) bind(c)
      import
      type(c_ptr), value :: config
    end function
    integer(c_int) function kopt_config_set(config, field, value) bind(c)
      import
      type(c_ptr), value :: config
      character(kind=c_char), dimension(*), intent(in) :: field
      real(c_double), value :: value
    end function
    integer(c_int) function kopt_config_get(config, field, value) bind(c)
      import
      type(c_ptr), value :: config
      character(kind=c_char), dimension(*), intent(in) :: field
      real(c_double), intent(out) :: value
    end function

    integer(c_int) function kopt_groups_create(groups) bind(c)
      import
      type(c_ptr), intent(out) :: groups
    end function
    subroutine kopt_groups_destroy(groups) bind(c)
      import
      type(c_ptr), value :: groups
    end subroutine
    integer(c_int) function kopt_groups_add_group(groups, config, host_state, index) bind(c)
      import
      type(c_ptr), value :: groups
      type(kopt_adam_config), intent(in) :: config
      integer(c_int32_t), value :: host_state
      integer(c_size_t), intent(out), optional :: index
    end function
    integer(c_int) function kopt_groups_add_group_config(groups, config, host_state, index) &
        bind(c)
      import
      type(c_ptr), value :: groups, config
      integer(c_int32_t), value :: host_state
      integer(c_size_t), intent(out), optional :: index
    end function
    integer(c_int) function kopt_groups_set_master(groups, group, master) bind(c)
      import
      type(c_ptr), value :: groups
      integer(c_size_t), value :: group
      character(kind=c_char), dimension(*), intent(in) :: master
    end function
    integer(c_int) function kopt_groups_set_rounding(groups, group, rounding, seed) bind(c)
      import
      type(c_ptr), value :: groups
      integer(c_size_t), value :: group
      character(kind=c_char), dimension(*), intent(in) :: rounding
      integer(c_int64_t), value :: seed
    end function
    integer(c_int) function kopt_groups_set_state_rounding(groups, group, rounding, seed) &
        bind(c)
      import
      type(c_ptr), value :: groups
      integer(c_size_t), value :: group
      character(kind=c_char), dimension(*), intent(in) :: rounding
      integer(c_int64_t), value :: seed
    end function
    integer(c_int) function kopt_groups_set_state_dtype(groups, group, dtype) bind(c)
      import
      type(c_ptr), value :: groups
      integer(c_size_t), value :: group
      integer(c_int), value :: dtype
    end function
    integer(c_int) function kopt_groups_set_array_dtype(groups, group, array, dtype) bind(c)
      import
      type(c_ptr), value :: groups
      integer(c_size_t), value :: group
      character(kind=c_char), dimension(*), intent(in) :: array
      integer(c_int), value :: dtype
    end function
    integer(c_int) function kopt_groups_add_param(groups, group, name, param, param_dtype, &
                                                  grad, grad_dtype, numel, space) bind(c)
      import
      type(c_ptr), value :: groups, param, grad
      integer(c_size_t), value :: group
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), value :: param_dtype, grad_dtype, space
      integer(c_int64_t), value :: numel
    end function
    integer(c_int) function kopt_groups_add_matrix_param(groups, group, name, param, &
                                                         param_dtype, grad, grad_dtype, rows, &
                                                         cols, space) bind(c)
      import
      type(c_ptr), value :: groups, param, grad
      integer(c_size_t), value :: group
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), value :: param_dtype, grad_dtype, space
      integer(c_int64_t), value :: rows, cols
    end function

    integer(c_int) function kopt_optimizer_create(groups, options, optimizer) bind(c)
      import
      type(c_ptr), value :: groups
      type(kopt_options), intent(in), optional :: options
      type(c_ptr), intent(out) :: optimizer
    end function
    ! mpi_comm: the communicator's Fortran handle (an integer; comm%MPI_VAL with mpi_f08).
    integer(c_int) function kopt_optimizer_create_sharded(groups, options, mpi_comm, &
                                                          zero_stage, average_grads, &
                                                          optimizer) bind(c)
      import
      type(c_ptr), value :: groups
      type(kopt_options), intent(in), optional :: options
      integer(c_int32_t), value :: mpi_comm, zero_stage, average_grads
      type(c_ptr), intent(out) :: optimizer
    end function
    subroutine kopt_optimizer_destroy(optimizer) bind(c)
      import
      type(c_ptr), value :: optimizer
    end subroutine
    integer(c_int) function kopt_step(optimizer, stats) bind(c)
      import
      type(c_ptr), value :: optimizer
      type(kopt_step_stats), intent(out), optional :: stats
    end function
    integer(c_int) function kopt_get_config(optimizer, group, config) bind(c)
      import
      type(c_ptr), value :: optimizer
      integer(c_size_t), value :: group
      type(kopt_adam_config), intent(out) :: config
    end function
    integer(c_int) function kopt_set_config(optimizer, group, config) bind(c)
      import
      type(c_ptr), value :: optimizer
      integer(c_size_t), value :: group
      type(kopt_adam_config), intent(in) :: config
    end function
    integer(c_int) function kopt_get_group_config(optimizer, group, config) bind(c)
      import
      type(c_ptr), value :: optimizer
      integer(c_size_t), value :: group
      type(c_ptr), intent(out) :: config
    end function
    integer(c_int) function kopt_set_group_config(optimizer, group, config) bind(c)
      import
      type(c_ptr), value :: optimizer, config
      integer(c_size_t), value :: group
    end function
    integer(c_int) function kopt_set_lr(optimizer, group, lr) bind(c)
      import
      type(c_ptr), value :: optimizer
      integer(c_size_t), value :: group
      real(c_double), value :: lr
    end function
    integer(c_int) function kopt_set_grad(optimizer, name, grad, grad_dtype, numel, space) &
        bind(c)
      import
      type(c_ptr), value :: optimizer, grad
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), value :: grad_dtype, space
      integer(c_int64_t), value :: numel
    end function
    integer(c_int) function kopt_rebind(optimizer, name, param, param_dtype, grad, grad_dtype, &
                                        numel, space) bind(c)
      import
      type(c_ptr), value :: optimizer, param, grad
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), value :: param_dtype, grad_dtype, space
      integer(c_int64_t), value :: numel
    end function
    integer(c_int) function kopt_reload_model_params(optimizer) bind(c)
      import
      type(c_ptr), value :: optimizer
    end function
    integer(c_int) function kopt_save(optimizer, path) bind(c)
      import
      type(c_ptr), value :: optimizer
      character(kind=c_char), dimension(*), intent(in) :: path
    end function
    integer(c_int) function kopt_load(optimizer, path, partial) bind(c)
      import
      type(c_ptr), value :: optimizer
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int32_t), value :: partial
    end function
    integer(c_int) function kopt_loss_scale(optimizer, scale) bind(c)
      import
      type(c_ptr), value :: optimizer
      real(c_double), intent(out) :: scale
    end function
    integer(c_int) function kopt_step_count(optimizer, name, count) bind(c)
      import
      type(c_ptr), value :: optimizer
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int64_t), intent(out) :: count
    end function
  end interface

contains

  !> A C string (kopt_last_error(), kopt_config_algorithm()) as a Fortran string; NULL: "".
  function kopt_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    interface
      integer(c_size_t) function c_strlen(str) bind(c, name="strlen")
        import
        type(c_ptr), value :: str
      end function
    end interface
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function
end module
