! kopt from Fortran through its module (`use kopt`: fortran/kopt.f90, the C interface of
! include/kopt/kopt.h with iso_c_binding; link kopt::fortran): fits w to a target by least
! squares with AdamW and prints the loss falling.

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
