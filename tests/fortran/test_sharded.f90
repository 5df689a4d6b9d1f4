! kopt's sharded optimizer from Fortran under mpirun: kopt_optimizer_create_sharded takes the
! communicator's integer handle (MPI_COMM_WORLD of `use mpi`). ZeRO-1 (grads the same on
! every rank, as after an all-reduce) gives bitwise the params of one process's optimizer;
! ZeRO-2 with each rank's grads averaged gives those of one process stepping their mean.
program test_sharded
  use, intrinsic :: iso_c_binding
  use mpi
  use kopt
  implicit none
  integer, parameter :: n = 1001
  real(c_float), target :: w1(n), g1(n), w2(n), g2(n), w3(n), g3(n), w4(n), g4(n)
  type(c_ptr) :: groups, zero1, one, zero2, mean
  type(kopt_adam_config) :: config
  integer :: i, s, ierr, rank, world, failures

  failures = 0
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, world, ierr)
  call check(kopt_initialize() == KOPT_OK, "initialize")
  do i = 1, n
    w1(i) = sin(real(i, c_float))
    ! Eighths of small integers: the ranks' sums below and their division by the world size
    ! are exact, so the mean is g1 bitwise.
    g1(i) = real(mod(7 * i, 13) - 6, c_float) / 8
    ! ZeRO-2: rank r's grad is g1 + (r - (world - 1) / 2) / 4, whose mean over ranks is g1.
    g3(i) = g1(i) + (real(rank, c_float) - real(world - 1, c_float) / 2) / 4
  end do
  w2 = w1; g2 = g1; w3 = w1; w4 = w1; g4 = g1
  call kopt_adam_config_default(config)
  config%lr = 1d-2

  zero1 = create(w1, g1, 1, .true.)
  one = create(w2, g2, 1, .false.)
  zero2 = create(w3, g3, 2, .true.)
  mean = create(w4, g4, 2, .false.)
  do s = 1, 4
    call check(kopt_step(zero1) == KOPT_OK, "ZeRO-1 step")
    call check(kopt_step(one) == KOPT_OK, "one process's step")
    call check(kopt_step(zero2) == KOPT_OK, "ZeRO-2 step")
    call check(kopt_step(mean) == KOPT_OK, "the mean's step")
  end do
  call check(all(w1 == w2), "ZeRO-1: bitwise one process's params")
  call check(all(w3 == w4), "ZeRO-2 averaged: bitwise one process stepping the mean")
  call check(any(w1 /= sin([(real(i, c_float), i = 1, n)])), "the params moved")
  call kopt_optimizer_destroy(zero1)
  call kopt_optimizer_destroy(one)
  call kopt_optimizer_destroy(zero2)
  call kopt_optimizer_destroy(mean)
  call check(kopt_finalize() == KOPT_OK, "finalize")
  call MPI_Finalize(ierr)
  if (failures /= 0) then
    print '(a,i0,a,i0,a)', 'rank ', rank, ': ', failures, ' checks failed'
    stop 1
  end if
  if (rank == 0) print '(a,i0,a)', 'Fortran sharded optimizer at ', world, ' ranks: all passed'

contains
  ! An AdamW optimizer of the one param `w`, sharded over MPI_COMM_WORLD at `stage` (grads
  ! averaged) or unsharded.
  type(c_ptr) function create(w, g, stage, sharded) result(opt)
    real(c_float), target, intent(inout) :: w(n), g(n)
    integer, intent(in) :: stage
    logical, intent(in) :: sharded
    call check(kopt_groups_create(groups) == KOPT_OK, "groups")
    call check(kopt_groups_add_group(groups, config, 0_c_int32_t) == KOPT_OK, "group")
    call check(kopt_groups_add_param(groups, 0_c_size_t, "w" // c_null_char, c_loc(w), &
                                     KOPT_F32, c_loc(g), KOPT_F32, int(n, c_int64_t), &
                                     KOPT_HOST) == KOPT_OK, "param")
    if (sharded) then
      call check(kopt_optimizer_create_sharded(groups, mpi_comm=int(MPI_COMM_WORLD, c_int32_t), &
                                               zero_stage=int(stage, c_int32_t), &
                                               average_grads=1_c_int32_t, optimizer=opt) &
                 == KOPT_OK, "sharded optimizer")
    else
      call check(kopt_optimizer_create(groups, optimizer=opt) == KOPT_OK, "optimizer")
    end if
    call kopt_groups_destroy(groups)
  end function

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      print '(a,i0,4a)', 'rank ', rank, ': FAILED: ', what, ' (last error: ', &
        kopt_string(kopt_last_error()) // ')'
    end if
  end subroutine
end program
