#pragma once
/// \file
/// kopt's one error hierarchy. Every exception kopt throws for bad user input derives
/// from kopt::Error; its message starts with the function or argument at fault and ends
/// with the source file's name (no directories) and line of the check that fired, e.g.
/// "kopt: AdamConfig.lr = -2 is invalid: must be finite and >= 0 [adam_config.cpp:9]", so a
/// report from a large training run points at the check without naming the build tree.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kopt {

/// Base of every exception kopt throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A value handed to kopt is out of range, null, non-finite or of an unsupported kind.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Two things that must agree in size (param and grad, a loaded block and its param) do not.
class ShapeMismatch : public Error {
 public:
  using Error::Error;
};

/// The work asks for an execution or memory space this build of Kokkos does not have.
class NotCompiled : public Error {
 public:
  using Error::Error;
};

/// A checkpoint file is missing, torn, corrupt or does not match the optimizer.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// A backend (CUDA runtime, MPI) reported a failure.
class BackendError : public Error {
 public:
  using Error::Error;
};

/// Kokkos is not initialized, or already finalized: kopt cannot allocate or launch.
class NotInitialized : public Error {
 public:
  using Error::Error;
};

/// An earlier step() failed after its update had begun (a backend error in a launched
/// kernel, a failed offload copy, a failed all-gather of updated params): params and state
/// may be partly updated. The optimizer refuses step(), save() and reload_model_params()
/// until a full load() of a checkpoint replaces its state.
class InconsistentState : public Error {
 public:
  using Error::Error;
};

namespace Impl {
/// Builds "kopt: <msg> [name.cpp:line]" from `file` = __FILE__: users read the message,
/// and the build machine's directories mean nothing to them (nor should they see them), so
/// only the file's name is kept. A `msg` that already starts with "kopt" (an owner such as
/// "kopt::HybridOptimizer: ..." or "kopt C API: ...") gets no second "kopt: ".
inline std::string error_message(const std::string& msg, const char* file, int line) {
  std::string_view name(file);
  const auto slash = name.find_last_of("/\\");
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  std::ostringstream out;
  if (msg.rfind("kopt:", 0) != 0 && msg.rfind("kopt ", 0) != 0) out << "kopt: ";
  out << msg << " [" << name << ':' << line << ']';
  return out.str();
}
/// `what` without a leading "kopt: ": a caught kopt message embedded in another one (which
/// has its own prefix) then does not read "kopt: ... kopt: ..."...
inline std::string embedded(const std::string& what) {
  std::string s = what.rfind("kopt: ", 0) == 0 ? what.substr(6) : what;
  // ...and without its " [file.cpp:N]": the message it goes into has one tag, its own.
  const auto open = s.rfind(" [");
  if (!s.empty() && s.back() == ']' && open != std::string::npos &&
      s.find(':', open) != std::string::npos)
    s.erase(open);
  return s;
}
/// The message of the exception being handled, as embedded() gives it (call inside a
/// catch block; the result is embedded in another kopt message).
std::string what_of_current();
/// Throws kopt::NotInitialized naming `who` unless Kokkos is initialized (and not finalized).
void require_kokkos(const char* who);
}  // namespace Impl

}  // namespace kopt

/// Throws `ErrorType` with a message built by streaming `msg` when `cond` holds.
/// Use for user input; internal invariants use assert.
#define KOPT_THROW_IF_AS(ErrorType, cond, msg)                                           \
  do {                                                                                   \
    if (cond) {                                                                          \
      std::ostringstream kopt_msg_;                                                      \
      kopt_msg_ << msg;                                                                  \
      throw ErrorType(::kopt::Impl::error_message(kopt_msg_.str(), __FILE__, __LINE__)); \
    }                                                                                    \
  } while (false)

/// Throws kopt::InvalidArgument when `cond` holds.
#define KOPT_THROW_IF(cond, msg) KOPT_THROW_IF_AS(::kopt::InvalidArgument, cond, msg)
