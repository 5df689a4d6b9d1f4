! kopt from Fortran through its C interface (include/kopt/kopt.h, iso_c_binding): fits
! w to a target by least squares with AdamW and prints the loss falling.
module kopt
  use iso_c_binding
  implicit none
  integer(c_int), parameter :: KOPT_OK = 0, KOPT_F32 = 0, KOPT_HOST = 0

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
    integer(c_int) function kopt_initialize() bind(c)
      import
    end function
    integer(c_int) function kopt_finalize() bind(c)
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
      integer(c_size_t), intent(out) :: index
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
    integer(c_int) function kopt_optimizer_create(groups, options, optimizer) bind(c)
      import
      type(c_ptr), value :: groups
      type(kopt_options), intent(in) :: options
      type(c_ptr), intent(out) :: optimizer
    end function
    subroutine kopt_optimizer_destroy(optimizer) bind(c)
      import
      type(c_ptr), value :: optimizer
    end subroutine
    integer(c_int) function kopt_step(optimizer, stats) bind(c)
      import
      type(c_ptr), value :: optimizer
      type(kopt_step_stats), intent(out) :: stats
    end function
    integer(c_int) function kopt_set_lr(optimizer, group, lr) bind(c)
      import
      type(c_ptr), value :: optimizer
      integer(c_size_t), value :: group
      real(c_double), value :: lr
    end function
  end interface
end module

program least_squares
  use iso_c_binding
  use kopt
  implicit none
  integer, parameter :: n = 200
  real(c_float), target :: w(n), g(n), target_w(n)
  type(kopt_adam_config) :: config
  type(kopt_options) :: options
  type(kopt_step_stats) :: stats
  type(c_ptr) :: groups, opt
  integer(c_size_t) :: group
  integer :: i, step
  real(c_double) :: loss, first

  do i = 1, n
    target_w(i) = real(i, c_float) / n - 0.5
  end do
  w = 0
  call check(kopt_initialize())
  call kopt_adam_config_default(config)
  config%lr = 0.05d0
  config%weight_decay = 0
  call check(kopt_groups_create(groups))
  call check(kopt_groups_add_group(groups, config, 0_c_int32_t, group))
  call check(kopt_groups_add_param(groups, group, "w" // c_null_char, c_loc(w), KOPT_F32, &
                                   c_loc(g), KOPT_F32, int(n, c_int64_t), KOPT_HOST))
  call kopt_options_default(options)
  options%max_grad_norm = 1.0d0
  call check(kopt_optimizer_create(groups, options, opt))
  call kopt_groups_destroy(groups)

  first = -1
  do step = 1, 150
    g = w - target_w
    loss = 0.5d0 * sum(real(g, c_double)**2)
    if (first < 0) first = loss
    if (step == 100) call check(kopt_set_lr(opt, group, 0.01d0))
    call check(kopt_step(opt, stats))
    if (mod(step, 50) == 0) print '(a,i4,a,es10.3,a,es10.3)', 'step', step, '  loss', loss, &
                                  '  grad norm', stats%grad_norm
  end do
  call kopt_optimizer_destroy(opt)
  call check(kopt_finalize())
  if (loss < 1d-3 * first) then
    print '(a,es10.3,a,es10.3)', 'fitted: loss', first, ' ->', loss
  else
    print *, 'NOT fitted'
    stop 1
  end if

contains
  subroutine check(status)
    integer(c_int), intent(in) :: status
    if (status /= KOPT_OK) then
      print *, 'kopt error', status
      stop 2
    end if
  end subroutine
end program
