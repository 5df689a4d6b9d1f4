#pragma once
// What every file of the C interface shares: the handles' definitions, and the wrapper that
// turns every exception into a status and a thread-local message.
#include <kopt/kopt.h>

#include <kopt/error.hpp>
#include <kopt/hybrid_optimizer.hpp>
#include <memory>
#include <string>
#include <vector>

struct kopt_groups {
  std::vector<kopt::ParamGroup> groups;
};
struct kopt_optimizer {
  std::unique_ptr<kopt::HybridOptimizer> opt;
};

namespace kopt::c_api {

/// This thread's last error message (kopt_last_error).
inline thread_local std::string last_error;

/// A kopt_dtype kopt updates and stores (KOPT_F32, KOPT_BF16, KOPT_F16) as a DType.
inline kopt::DType dtype_of(kopt_dtype d) {
  KOPT_THROW_IF(
      d != KOPT_F32 && d != KOPT_BF16 && d != KOPT_F16,
      "kopt C API: dtype " << static_cast<int>(d) << " is not KOPT_F32, KOPT_BF16 or KOPT_F16");
  return static_cast<kopt::DType>(d);
}

/// A kopt_dtype a state array may be stored in (dtype_of's, and KOPT_Q8) as a DType.
inline kopt::DType state_dtype_of(kopt_dtype d) {
  KOPT_THROW_IF(d != KOPT_F32 && d != KOPT_BF16 && d != KOPT_F16 && d != KOPT_Q8,
                "kopt C API: state dtype " << static_cast<int>(d)
                                           << " is not KOPT_F32, KOPT_BF16, KOPT_F16 or KOPT_Q8");
  return static_cast<kopt::DType>(d);
}

/// A C boolean: 0 or 1, nothing else (a garbage value from Fortran is an error, not "true").
inline bool flag(std::int32_t value, const char* what) {
  KOPT_THROW_IF(value != 0 && value != 1,
                "kopt C API: " << what << " = " << value << " must be 0 or 1");
  return value == 1;
}

template <class F>
kopt_status guard(F&& f) {
  try {
    f();
    last_error.clear();
    return KOPT_OK;
  } catch (const kopt::ShapeMismatch& e) {
    last_error = e.what();
    return KOPT_ERROR_SHAPE_MISMATCH;
  } catch (const kopt::NotCompiled& e) {
    last_error = e.what();
    return KOPT_ERROR_NOT_COMPILED;
  } catch (const kopt::CheckpointError& e) {
    last_error = e.what();
    return KOPT_ERROR_CHECKPOINT;
  } catch (const kopt::BackendError& e) {
    last_error = e.what();
    return KOPT_ERROR_BACKEND;
  } catch (const kopt::NotInitialized& e) {
    last_error = e.what();
    return KOPT_ERROR_NOT_INITIALIZED;
  } catch (const kopt::InconsistentState& e) {
    last_error = e.what();
    return KOPT_ERROR_INCONSISTENT_STATE;
  } catch (const kopt::InvalidArgument& e) {
    last_error = e.what();
    return KOPT_ERROR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_error = e.what();
    return KOPT_ERROR_OTHER;
  } catch (...) {
    last_error = "kopt: unknown error";
    return KOPT_ERROR_OTHER;
  }
}

template <class T>
T& deref(T* p, const char* what) {
  KOPT_THROW_IF(p == nullptr, "kopt C API: " << what << " is NULL");
  return *p;
}

}  // namespace kopt::c_api
