#include <kopt/error.hpp>
#include <kopt/tensor.hpp>
#include <sstream>

namespace kopt {

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
  }
  KOPT_THROW_IF(true, "unknown dtype " << static_cast<int>(dtype));
}

const char* name_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
  }
  return "unknown dtype";
}

const char* name_of(MemorySpace space) {
  switch (space) {
    case MemorySpace::host:
      return "host";
    case MemorySpace::cuda:
      return "cuda";
    case MemorySpace::cuda_uvm:
      return "cuda_uvm";
    case MemorySpace::cuda_host_pinned:
      return "cuda_host_pinned";
  }
  return "unknown memory space";
}

std::string describe(const Tensor& t) {
  std::ostringstream out;
  out << name_of(t.dtype) << '[' << t.numel << "] @ " << name_of(t.space);
  return out.str();
}

}  // namespace kopt
