// The checkpoint's files: atomic writes that clean up after themselves, reads that refuse
// anything but a regular file, the saver's directory lock, and the clean-up of what earlier
// saves left (only files this format wrote, recognised exactly).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <kopt/error.hpp>
#include <kopt/impl/checkpoint_format.hpp>
#include <string_view>
#include <utility>

namespace kopt::Impl {

namespace {
namespace fs = std::filesystem;

std::atomic<std::int64_t> fail_after{-1};

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err) {
  KOPT_THROW_IF_AS(CheckpointError, true, path << ": " << what << ": " << std::strerror(err));
}

// A file descriptor closed on every exit path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `path` for reading, refusing before any read what is not a regular file (O_NONBLOCK:
// opening a FIFO does not wait for a writer).
void open_regular(const std::string& path, Fd& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) io_error("cannot open", path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) io_error("cannot stat", path, errno);
  KOPT_THROW_IF_AS(CheckpointError, !S_ISREG(st.st_mode),
                   path << ": not a regular file (a FIFO, device or directory?); a checkpoint "
                        << "holds regular files only");
}

// Reads n bytes at `offset`; throws on a short file.
void read_at(int fd, const std::string& path, unsigned char* out, std::uint64_t offset,
             std::uint64_t n) {
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out + done, static_cast<std::size_t>(n - done),
                              static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) io_error("read failed", path, errno);
    KOPT_THROW_IF_AS(CheckpointError, r == 0,
                     path << ": truncated (needs bytes " << offset << " to " << offset + n << ")");
    done += static_cast<std::uint64_t>(r);
  }
}

bool all_of(std::string_view s, int (*pred)(int)) {
  for (const char c : s)
    if (!pred(static_cast<unsigned char>(c))) return false;
  return !s.empty();
}

// "data-<16 lowercase hex>-r<decimal>.kopt" -> generation and rank; false otherwise.
bool parse_data_name(std::string_view name, std::uint64_t& generation, std::uint32_t& rank) {
  if (name.size() < 29 || name.substr(0, 5) != "data-" || name.substr(21, 2) != "-r" ||
      name.substr(name.size() - 5) != ".kopt")
    return false;
  const std::string_view hex = name.substr(5, 16), digits = name.substr(23, name.size() - 28);
  for (const char c : hex)
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  if (!all_of(digits, ::isdigit) || digits.size() > 9) return false;
  generation = std::stoull(std::string(hex), nullptr, 16);
  rank = static_cast<std::uint32_t>(std::stoul(std::string(digits)));
  return data_file_name(generation, rank) == name;  // canonical: no leading zeros
}

// The first `n` bytes of a regular file (fewer if it is shorter); empty if unreadable.
std::vector<unsigned char> head_of(const fs::path& file, std::size_t n) {
  Fd f;
  try {
    open_regular(file.string(), f);
  } catch (const CheckpointError&) {
    return {};
  }
  std::vector<unsigned char> out(n);
  const ssize_t r = ::pread(f.fd, out.data(), n, 0);
  out.resize(r > 0 ? static_cast<std::size_t>(r) : 0);
  return out;
}

// Whether `file` (named `name`) is something an earlier save left that generation `keep`
// does not name.
bool is_stale(const fs::path& file, std::string_view name, std::uint64_t keep) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(file, ec))) return false;
  std::uint64_t generation = 0;
  std::uint32_t rank = 0;
  const auto tmp = name.rfind(".tmp.");
  if (tmp == std::string_view::npos) {
    if (!parse_data_name(name, generation, rank) || generation == keep) return false;
    const std::vector<unsigned char> head = head_of(file, kDataHeaderBytes);
    return head == data_file_header(generation, rank);
  }
  const std::string_view base = name.substr(0, tmp), pid = name.substr(tmp + 5);
  if (!all_of(pid, ::isdigit)) return false;
  const bool index = base == kIndexName;
  if (!index && !parse_data_name(base, generation, rank)) return false;
  const char* magic = index ? kIndexMagic : kDataMagic;
  const std::vector<unsigned char> head = head_of(file, 8);
  // A torn write holds a prefix of the magic (or nothing).
  return head.empty() || std::memcmp(head.data(), magic, head.size()) == 0;
}

}  // namespace

void set_checkpoint_write_failure_after(std::int64_t bytes) { fail_after = bytes; }

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error("cannot create " + tmp_, path_, errno);
  buffer_.reserve(kCheckpointIoBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed, or failed and cleaned up
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

// Any failure removes the temporary file: a full disk must not stay full of our leftovers,
// or every retry fails too.
void AtomicFile::fail_(const std::string& what, int err) {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  ::unlink(tmp_.c_str());
  io_error(what, path_, err);
}

void AtomicFile::write(const void* data, std::size_t n) {
  KOPT_THROW_IF_AS(CheckpointError, fd_ < 0, path_ << ": written after commit or a failure");
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const std::size_t take = std::min(n, kCheckpointIoBytes - buffer_.size());
    buffer_.insert(buffer_.end(), bytes, bytes + take);
    bytes += take;
    n -= take;
    size_ += take;
    if (buffer_.size() == kCheckpointIoBytes) flush_();
  }
}

void AtomicFile::flush_() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const std::size_t n = buffer_.size() - done;
    const std::int64_t budget = fail_after.load();
    if (budget >= 0 && static_cast<std::int64_t>(n) > budget) {  // test hook: an I/O error
      if (budget > 0) (void)::write(fd_, buffer_.data() + done, static_cast<std::size_t>(budget));
      fail_after = 0;
      fail_("write failed (injected)", EIO);
    }
    if (budget >= 0) fail_after = budget - static_cast<std::int64_t>(n);
    const ssize_t w = ::write(fd_, buffer_.data() + done, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail_("write failed", errno);
    done += static_cast<std::size_t>(w);
  }
  buffer_.clear();
}

void AtomicFile::commit() {
  KOPT_THROW_IF_AS(CheckpointError, fd_ < 0, path_ << ": committed twice or after a failure");
  flush_();
  if (::fsync(fd_) != 0) fail_("fsync failed", errno);
  if (::close(std::exchange(fd_, -1)) != 0) fail_("close failed", errno);
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail_("rename failed", errno);
  const fs::path target(path_);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd >= 0) ::fsync(d.fd);  // make the rename itself durable
}

void write_file_atomically(const std::string& path, const std::vector<unsigned char>& bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

std::vector<unsigned char> read_file(const std::string& path) {
  Fd f;
  open_regular(path, f);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) io_error("cannot stat", path, errno);
  std::vector<unsigned char> out(static_cast<std::size_t>(st.st_size));
  read_at(f.fd, path, out.data(), 0, out.size());
  return out;
}

std::vector<unsigned char> read_file_range(const std::string& path, std::uint64_t offset,
                                           std::uint64_t n) {
  return ReadOnlyFile(path).read(offset, n);
}

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  Fd f;
  open_regular(path, f);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) io_error("cannot stat", path, errno);
  size_ = static_cast<std::uint64_t>(st.st_size);
  fd_ = std::exchange(f.fd, -1);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<unsigned char> ReadOnlyFile::read(std::uint64_t offset, std::uint64_t n) const {
  std::vector<unsigned char> out(n);
  read_at(fd_, path_, out.data(), offset, n);
  return out;
}

void ReadOnlyFile::read(std::uint64_t offset, std::uint64_t n, unsigned char* out) const {
  read_at(fd_, path_, out, offset, n);
}

DirectoryLock::DirectoryLock(const std::string& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) io_error("cannot open the checkpoint directory", dir, errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    KOPT_THROW_IF_AS(CheckpointError, err == EWOULDBLOCK,
                     dir << ": another save into this directory is running (its lock is held); "
                         << "two runs must not share a checkpoint path");
    io_error("cannot lock the checkpoint directory", dir, err);
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

void remove_stale_files(const std::string& dir, std::uint64_t keep) {
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (is_stale(f.path(), name, keep)) fs::remove(f.path(), ec);
  }
}

}  // namespace kopt::Impl
