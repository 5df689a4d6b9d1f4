# Spack recipe for kopt (Package API v2: Spack >= 1.0 with the spack-packages builtin repo).
# See ../../../../README.md for how to add this repository and install kopt.
import os

from spack_repo.builtin.build_systems.cmake import CMakePackage, generator
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


class Kopt(CMakePackage, CudaPackage):
    """Fused optimizers (Adam/AdamW, SGD, Lion, Adagrad, LAMB, Adafactor, Muon) written once
    with Kokkos; kopt runs on every execution space its Kokkos enables (Serial, OpenMP,
    CUDA)."""

    # Placeholder: kopt has no public home yet. Point Spack at the real repository with
    #   packages: {kopt: {package_attributes: {git: <url>}}}   in packages.yaml,
    # or build a local checkout with `spack develop` / `spack dev-build` (see README.md).
    homepage = "https://git.example.invalid/kopt"
    git = "https://git.example.invalid/kopt.git"

    version("main", branch="main")

    variant("benchmarks", default=False, description="Build the Google Benchmark perf suite")
    variant("examples", default=False, description="Build the example programs")
    variant("mpi", default=False, description="Build kopt::MpiCommunicator (ZeRO sharding)")
    variant("fortran", default=True, description="Build the Fortran module (kopt::fortran)")

    # Ninja is what kopt's own scripts use; Unix Makefiles works as well.
    generator("ninja", "make", default="ninja")

    depends_on("cxx", type="build")
    # The test suite has a C test of the C interface, and with +fortran a Fortran one.
    depends_on("c", type="build")
    depends_on("fortran", type="build", when="+fortran")
    depends_on("mpi", when="+mpi")
    depends_on("cmake@3.16:", type="build")

    # kopt's backends are exactly the execution spaces of its Kokkos. kopt itself is C++20,
    # but it accepts a Kokkos built as C++17 (3.x/4.x default): no cxxstd constraint here.
    depends_on("kokkos@3.4.01:")

    # +cuda (from CudaPackage) asks for a CUDA Kokkos of the same single arch, compiled
    # through Kokkos' nvcc_wrapper when the compiler is gcc (kopt then builds with it too);
    # ~cuda for a Kokkos without CUDA.
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
    depends_on("kokkos~cuda", when="~cuda")
    conflicts("+cuda", when="cuda_arch=none", msg="kopt+cuda needs a cuda_arch (e.g. cuda_arch=90)")
    requires("^kokkos+wrapper", when="+cuda %gcc", msg="with gcc, kopt+cuda needs kokkos+wrapper")

    # kopt has kernels for Serial, OpenMP and Cuda only.
    requires(
        "^kokkos+serial",
        "^kokkos+openmp",
        "^kokkos+cuda",
        policy="any_of",
        msg="kopt needs a Kokkos with at least one of the Serial, OpenMP, Cuda backends",
    )
    conflicts("^kokkos+rocm", msg="kopt has no HIP backend")
    conflicts("^kokkos+sycl", msg="kopt has no SYCL backend")
    # nvcc compiles C++20 from CUDA 12 on.
    conflicts("^cuda@:11", when="^kokkos+cuda+wrapper", msg="kopt needs C++20: CUDA >= 12")

    # The CTest suite is built only with `spack install --test=root kopt`.
    depends_on("googletest", type="test")
    # Muon's Newton-Schulz iteration runs on KokkosBlas::gemm (its header templates, compiled
    # into kopt for the same Kokkos; a consumer's find_package(kopt) finds it too).
    depends_on("kokkos-kernels@3.4.01:")
    depends_on("benchmark", when="+benchmarks")

    # Stand-alone test (`spack test run kopt`) builds a find_package(kopt) consumer.
    test_requires_compiler = True
    consumer_src_dir = join_path("tests", "install", "consumer")

    def _kopt_cxx(self):
        """With a CUDA Kokkos every consumer, kopt included, compiles with Kokkos' compiler
        (nvcc_wrapper, or clang); otherwise Spack's own C++ compiler is used."""
        if self.spec.satisfies("^kokkos+cuda"):
            return self["kokkos"].kokkos_cxx
        return None

    def cmake_args(self):
        args = [
            self.define("kopt_ENABLE_TESTS", self.run_tests),
            self.define_from_variant("kopt_ENABLE_BENCHMARKS", "benchmarks"),
            self.define_from_variant("kopt_ENABLE_EXAMPLES", "examples"),
            self.define_from_variant("kopt_ENABLE_MPI", "mpi"),
            self.define_from_variant("kopt_ENABLE_FORTRAN", "fortran"),
            # -Werror is for kopt's CI, not for users' compilers.
            self.define("kopt_ENABLE_WERROR", False),
            # Spack passes the target's flags (-march=...) itself.
            self.define("kopt_ENABLE_NATIVE", False),
            self.define("Kokkos_ROOT", self.spec["kokkos"].prefix),
        ]
        args.append(self.define("KokkosKernels_ROOT", self.spec["kokkos-kernels"].prefix))
        cxx = self._kopt_cxx()
        if cxx:
            args.append(self.define("CMAKE_CXX_COMPILER", cxx))
        return args

    def check(self):
        """Run the whole CTest suite (unit tests, install test, examples with +examples)."""
        ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
        with working_dir(self.build_directory):
            # A build that registered no test must not pass as tested.
            ctest("--output-on-failure", "--no-tests=error", "-j", str(make_jobs))

    @run_after("install")
    def cache_consumer(self):
        cache_extra_test_sources(self, [self.consumer_src_dir])

    def test_installed_example(self):
        """run an installed example (+examples): a least-squares fit that must converge"""
        if not self.spec.satisfies("+examples"):
            raise SkipTest("kopt was installed without +examples")
        example = which(join_path(self.prefix.bin, "kopt_example_host_regression"), required=True)
        out = example(output=str.split, error=str.split)
        assert "fitted" in out and "NOT fitted" not in out, out

    def test_find_package_consumer(self):
        """build and run a CMake project that uses find_package(kopt)"""
        src = join_path(self.test_suite.current_test_cache_dir, self.consumer_src_dir)
        cmake = which(self.spec["cmake"].prefix.bin.cmake, required=True)
        # kopt's koptConfig.cmake finds Kokkos and KokkosKernels (own prefixes in Spack).
        prefixes = [self.prefix, self.spec["kokkos"].prefix, self.spec["kokkos-kernels"].prefix]
        # No compiler wrapper here: the real compiler, or Kokkos' nvcc_wrapper.
        if self.spec.satisfies("^kokkos+wrapper"):
            cxx = self["kokkos"].kokkos_cxx
        else:
            cxx = self["cxx"].cxx
        args = [
            "-S",
            src,
            "-B",
            "consumer-build",
            self.define("CMAKE_PREFIX_PATH", prefixes),
            self.define("CMAKE_CXX_COMPILER", cxx),
        ]
        if self.spec.satisfies("generator=ninja"):
            ninja = self.spec["ninja"].prefix.bin.ninja
            args.extend(["-G", "Ninja", self.define("CMAKE_MAKE_PROGRAM", ninja)])
        cmake(*args)
        cmake("--build", "consumer-build")
        consumer = which(join_path("consumer-build", "kopt_consumer"), required=True)
        consumer()
