! The Fortran module (fortran/kopt.f90) from Fortran: every function of kopt.h called through
! it (tests/fortran/check_bindings.cmake checks that each is named here), the structs' layouts
! by their defaults and a step checked against AdamW's first step computed here, optional
! arguments passed as C's NULL, and an error's message read back.
program test_kopt_module
  use iso_c_binding
  use kopt
  implicit none
  integer, parameter :: n = 37, rows = 6, cols = 4
  real(c_float), target :: w(n), g(n), g2(n), b(3), db(3), m(rows * cols), dm(rows * cols)
  integer(c_int16_t), target :: h(16), dh(16)
  real(c_float) :: w0(n)
  type(kopt_adam_config) :: adam, got
  type(kopt_options) :: options
  type(kopt_step_stats) :: stats
  type(c_ptr) :: groups, opt, bare, sgd, muon, copy, sharded
  integer(c_size_t) :: at
  integer(c_int64_t) :: count
  real(c_double) :: value, scale, expected
  integer :: i, failures
  character(*), parameter :: dir = "/tmp/kopt-fortran-module-test"

  failures = 0
  call check(kopt_initialize() == KOPT_OK, "initialize")
  call kopt_adam_config_default(adam)  ! torch AdamW's defaults, field by field
  call check(adam%lr == 1d-3 .and. adam%beta1 == 0.9d0 .and. adam%beta2 == 0.999d0 .and. &
             adam%eps == 1d-8 .and. adam%weight_decay == 0.01d0 .and. adam%decoupled == 1 .and. &
             adam%amsgrad == 0 .and. adam%bias_correction == 1 .and. adam%maximize == 0, &
             "adam config defaults")
  call kopt_options_default(options)
  call check(options%max_grad_norm == 0 .and. options%loss_scaling == 0 .and. &
             options%init_scale == 65536d0, "options defaults")

  ! Configs of any algorithm, by name and field.
  call check(kopt_config_create("sgd" // c_null_char, sgd) == KOPT_OK, "sgd config")
  call check(kopt_string(kopt_config_algorithm(sgd)) == "sgd", "algorithm name")
  call check(kopt_config_set(sgd, "momentum" // c_null_char, 0.9d0) == KOPT_OK, "set momentum")
  call check(kopt_config_get(sgd, "momentum" // c_null_char, value) == KOPT_OK .and. &
             value == 0.9d0, "get momentum")
  call check(kopt_config_set(sgd, "nope" // c_null_char, 1d0) == KOPT_ERROR_INVALID_ARGUMENT, &
             "unknown field refused")
  call check(index(kopt_string(kopt_last_error()), "nope") > 0, "message names the field")
  call check(kopt_config_create("muon" // c_null_char, muon) == KOPT_OK, "muon config")

  ! Groups: AdamW on w; SGD with momentum (state in bf16 but one array f32) on b; Muon on a
  ! matrix; AdamW without masters, rounding stochastically (params and bf16 state), on bf16 h.
  do i = 1, n
    w(i) = real(i, c_float) / n - 0.5
    g(i) = 0.25 * sin(real(i, c_float))
    g2(i) = -g(i)
  end do
  w0 = w
  b = 1
  db = 0.5
  m = 0.1
  dm = 0.2
  h = int(z'3F00', c_int16_t)   ! bf16 0.5
  dh = int(z'3F80', c_int16_t)  ! bf16 1.0
  adam%weight_decay = 0.1d0
  call check(kopt_groups_create(groups) == KOPT_OK, "groups")
  call check(kopt_groups_add_group(groups, adam, 0_c_int32_t, at) == KOPT_OK .and. at == 0, &
             "group 0")
  call check(kopt_groups_add_param(groups, 0_c_size_t, "w" // c_null_char, c_loc(w), KOPT_F32, &
                                   c_loc(g), KOPT_F32, int(n, c_int64_t), KOPT_HOST) == KOPT_OK, &
             "w")
  call check(kopt_groups_add_group_config(groups, sgd, 0_c_int32_t, at) == KOPT_OK .and. &
             at == 1, "group 1")
  call check(kopt_groups_set_state_dtype(groups, 1_c_size_t, KOPT_BF16) == KOPT_OK, "bf16 state")
  call check(kopt_groups_set_array_dtype(groups, 1_c_size_t, "momentum_buffer" // c_null_char, &
                                         KOPT_F32) == KOPT_OK, "one array f32")
  call check(kopt_groups_add_param(groups, 1_c_size_t, "b" // c_null_char, c_loc(b), KOPT_F32, &
                                   c_loc(db), KOPT_F32, 3_c_int64_t, KOPT_HOST) == KOPT_OK, "b")
  call check(kopt_groups_add_group_config(groups, muon, 0_c_int32_t) == KOPT_OK, "group 2")
  call check(kopt_groups_add_matrix_param(groups, 2_c_size_t, "m" // c_null_char, c_loc(m), &
                                          KOPT_F32, c_loc(dm), KOPT_F32, int(rows, c_int64_t), &
                                          int(cols, c_int64_t), KOPT_HOST) == KOPT_OK, "m")
  call check(kopt_groups_add_group(groups, adam, 0_c_int32_t) == KOPT_OK, "group 3")
  call check(kopt_groups_set_master(groups, 3_c_size_t, "none" // c_null_char) == KOPT_OK, &
             "no masters")
  call check(kopt_groups_set_rounding(groups, 3_c_size_t, "stochastic" // c_null_char, &
                                      1234_c_int64_t) == KOPT_OK, "stochastic rounding")
  call check(kopt_groups_set_state_dtype(groups, 3_c_size_t, KOPT_BF16) == KOPT_OK, "bf16 state")
  call check(kopt_groups_set_state_rounding(groups, 3_c_size_t, "stochastic" // c_null_char, &
                                            1234_c_int64_t) == KOPT_OK, "stochastic state")
  call check(kopt_groups_add_param(groups, 3_c_size_t, "h" // c_null_char, c_loc(h), KOPT_BF16, &
                                   c_loc(dh), KOPT_BF16, 16_c_int64_t, KOPT_HOST) == KOPT_OK, "h")
  options%max_grad_norm = 1d3  ! above the grads' norm: measured, not clipping
  call check(kopt_optimizer_create(groups, options, opt) == KOPT_OK, "optimizer")
  call check(kopt_optimizer_create(groups, optimizer=bare) == KOPT_OK, "optimizer, no options")
  ! Sharded needs MPI running (this test does not start it; nor has every kopt MPI): refused.
  call check(kopt_optimizer_create_sharded(groups, options, 0_c_int32_t, 1_c_int32_t, &
                                           1_c_int32_t, sharded) /= KOPT_OK, "sharded refused")
  call check(index(kopt_string(kopt_last_error()), "MPI") > 0, "it says why")
  call kopt_groups_destroy(groups)

  ! AdamW's first step: w (1 - lr wd) - lr g / (|g| + eps), the moments bias-corrected.
  call check(kopt_step(opt, stats) == KOPT_OK, "step")
  call check(stats%skipped == 0 .and. stats%grad_norm > 0 .and. stats%clip_factor == 1 .and. &
             stats%loss_scale == 1, "step stats")
  do i = 1, n
    expected = w0(i) * (1 - 1d-3 * 0.1d0) - 1d-3 * g(i) / (abs(g(i)) + 1d-8)
    call check(abs(w(i) - expected) <= 1d-6, "AdamW's first step")
  end do
  call check(any(b /= 1) .and. any(m /= 0.1) .and. all(h /= 0), "every group stepped")
  call check(kopt_step(bare) == KOPT_OK, "step without stats")

  ! Configs between steps.
  call check(kopt_get_config(opt, 0_c_size_t, got) == KOPT_OK .and. got%weight_decay == 0.1d0, &
             "get config")
  got%lr = 2d-3
  call check(kopt_set_config(opt, 0_c_size_t, got) == KOPT_OK, "set config")
  call check(kopt_get_group_config(opt, 1_c_size_t, copy) == KOPT_OK, "get group config")
  call check(kopt_config_get(copy, "momentum" // c_null_char, value) == KOPT_OK .and. &
             value == 0.9d0, "its momentum")
  call check(kopt_config_set(copy, "lr" // c_null_char, 0.01d0) == KOPT_OK, "its lr")
  call check(kopt_set_group_config(opt, 1_c_size_t, copy) == KOPT_OK, "set group config")
  call check(kopt_set_lr(opt, 2_c_size_t, 0.02d0) == KOPT_OK, "set lr")

  ! Grads and params given again, a checkpoint, the counts.
  call check(kopt_set_grad(opt, "w" // c_null_char, c_loc(g2), KOPT_F32, int(n, c_int64_t), &
                           KOPT_HOST) == KOPT_OK, "set grad")
  call check(kopt_rebind(opt, "w" // c_null_char, c_loc(w), KOPT_F32, c_loc(g), KOPT_F32, &
                         int(n, c_int64_t), KOPT_HOST) == KOPT_OK, "rebind")
  call check(kopt_set_grad(opt, "b" // c_null_char, c_null_ptr, KOPT_F32, 3_c_int64_t, &
                           KOPT_HOST) == KOPT_OK, "no grad for b")
  call check(kopt_step(opt) == KOPT_OK, "second step")
  call check(kopt_reload_model_params(opt) == KOPT_OK, "reload")
  call check(kopt_save(opt, dir // c_null_char) == KOPT_OK, "save")
  call check(kopt_load(opt, dir // c_null_char, 0_c_int32_t) == KOPT_OK, "load")
  call check(kopt_loss_scale(opt, scale) == KOPT_OK .and. scale == 1, "loss scale")
  call check(kopt_step_count(opt, "w" // c_null_char, count) == KOPT_OK .and. count == 2, &
             "w stepped twice")
  call check(kopt_step_count(opt, "b" // c_null_char, count) == KOPT_OK .and. count == 1, &
             "b once (no grad the second time)")
  call check(kopt_step_count(opt, "nope" // c_null_char, count) == &
             KOPT_ERROR_INVALID_ARGUMENT, "unknown param refused")
  call check(index(kopt_string(kopt_last_error()), "no parameter named 'nope'") > 0, &
             "message names the param")

  call kopt_config_destroy(copy)
  call kopt_config_destroy(sgd)
  call kopt_config_destroy(muon)
  call check(kopt_finalize() == KOPT_ERROR_INVALID_ARGUMENT, "finalize refused while live")
  call kopt_optimizer_destroy(opt)
  call kopt_optimizer_destroy(bare)
  call execute_command_line("rm -rf " // dir)
  call check(kopt_finalize() == KOPT_OK, "finalize")
  if (failures /= 0) then
    print '(i0,a)', failures, ' checks failed'
    stop 1
  end if
  print '(a)', 'Fortran module: all checks passed'

contains
  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      print '(3a)', 'FAILED: ', what, ' (last error: ' // kopt_string(kopt_last_error()) // ')'
    end if
  end subroutine
end program
