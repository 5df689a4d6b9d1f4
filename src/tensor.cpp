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
    case DType::q8:
      return 1;
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
    case DType::q8:
      return "q8";
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
  out << name_of(t.dtype) << '[';
  if (t.is_matrix())
    out << t.rows << 'x' << t.cols;
  else
    out << t.numel;
  out << "] @ " << name_of(t.space);
  if (t.is_shard()) out << " (elements " << t.global_offset << ".. of " << t.global_numel << ')';
  return out.str();
}

Tensor Tensor::shard_of(std::int64_t global_numel_, std::int64_t offset) const {
  KOPT_THROW_IF(global_numel_ < 0 || offset < 0 || numel < 0 || offset > global_numel_ - numel,
                "kopt::Tensor::shard_of(global_numel = "
                    << global_numel_ << ", offset = " << offset << "): " << numel
                    << " local elements do not fit at that offset");
  Tensor out = *this;
  out.global_numel = global_numel_;
  out.global_offset = offset;
  out.rows = out.cols = -1;  // the local shape is not the global one: matrix() after this
  return out;
}

Tensor Tensor::slice(std::int64_t offset, std::int64_t count) const {
  KOPT_THROW_IF(offset < 0 || count < 0 || offset > numel - count,
                "kopt::Tensor::slice(" << offset << ", " << count << ") of " << describe(*this));
  Tensor out = *this;
  if (data != nullptr)
    out.data =
        static_cast<unsigned char*>(data) + static_cast<std::size_t>(offset) * size_of(dtype);
  out.numel = count;
  out.global_offset = global_offset + offset;
  out.rows = out.cols = -1;
  return out;
}

Tensor Tensor::matrix(std::int64_t rows_, std::int64_t cols_) const {
  const std::int64_t whole = is_shard() ? global_numel : numel;
  // rows_ * cols_ == whole, without the product (it may overflow).
  const bool fits =
      rows_ >= 0 && cols_ >= 0 &&
      (rows_ == 0 || cols_ == 0 ? whole == 0 : whole % rows_ == 0 && whole / rows_ == cols_);
  KOPT_THROW_IF(!fits, "kopt::Tensor::matrix(" << rows_ << ", " << cols_ << ") of "
                                               << describe(*this) << ": rows * cols must be "
                                               << whole << ", both >= 0");
  Tensor out = *this;
  out.rows = rows_;
  out.cols = cols_;
  return out;
}

}  // namespace kopt
