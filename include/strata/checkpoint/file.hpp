// strata/checkpoint/file.hpp — files that are either complete or absent: written under a
// temporary name in the target's directory, fsynced, renamed over the target, and the directory
// fsynced, so that a crash at any point leaves the old file or the new one, never a mix.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::checkpoint {

/// Who meets a file error, for its message: the rank (-1 when none applies) and the operation
/// ("Checkpoint::save", "CheckpointManager::latest", ...).
struct FileContext {
  int rank = -1;
  std::string_view operation;
};

/// The prefix of the temporary files an atomic write leaves behind when its process dies;
/// CheckpointManager removes them from its directory.
inline constexpr std::string_view kTemporaryPrefix = ".strata-tmp.";

namespace detail::file {

inline std::string what_to_do_after(int error, const std::filesystem::path& path) {
  switch (error) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return fmt::format(
          "free space on the file system of {} (the previous checkpoint is "
          "untouched)",
          path.parent_path().string());
    case EROFS:
    case EACCES:
    case EPERM:
      return fmt::format("make {} writable, or write checkpoints to another directory",
                         path.parent_path().string());
    case ENOENT:
      return "check the path: the file or its directory does not exist";
    default:
      return "check the file system the message names";
  }
}

}  // namespace detail::file

/// A CheckpointError for the system call `call` failing with `error` on `path`.
inline CheckpointError file_error(FileContext context, std::string_view call,
                                  const std::filesystem::path& path, int error) {
  return CheckpointError(context.rank, context.operation,
                         fmt::format("{} of {} failed: {}", call, path.string(),
                                     std::system_category().message(error)),
                         detail::file::what_to_do_after(error, path));
}

/// An open file descriptor that closes itself. Reads and writes loop over short transfers and
/// EINTR; every failure is a CheckpointError naming the file.
class File {
 public:
  /// Adopts `fd` (closed on destruction); `path` names it in messages.
  File(int fd, std::filesystem::path path, FileContext context) noexcept
      : fd_(fd), path_(std::move(path)), context_(context) {}

  static File open_for_reading(const std::filesystem::path& path, FileContext context) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw file_error(context, "open", path, errno);
    return File(fd, path, context);
  }

  /// Creates `path`, which must not exist, for writing.
  static File create(const std::filesystem::path& path, FileContext context) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw file_error(context, "create", path, errno);
    return File(fd, path, context);
  }

  File(File&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        path_(std::move(other.path_)),
        context_(other.context_) {}
  File& operator=(File&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
      path_ = std::move(other.path_);
      context_ = other.context_;
    }
    return *this;
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { reset(); }

  const std::filesystem::path& path() const noexcept { return path_; }
  const FileContext& context() const noexcept { return context_; }

  std::uint64_t size() const {
    struct stat status {};
    if (::fstat(fd_, &status) != 0) throw file_error(context_, "fstat", path_, errno);
    return static_cast<std::uint64_t>(status.st_size);
  }

  /// Appends `bytes` at the current position.
  void write_all(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      // Linux moves at most about 2 GiB per call.
      const std::size_t chunk = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
      const ssize_t written = ::write(fd_, bytes.data(), chunk);
      if (written < 0) {
        if (errno == EINTR) continue;
        throw file_error(context_, "write", path_, errno);
      }
      bytes = bytes.subspan(static_cast<std::size_t>(written));
    }
  }

  /// Fills `out` from byte `offset`. @throws CheckpointError if the file ends first.
  void read_at(std::span<std::byte> out, std::uint64_t offset) const {
    while (!out.empty()) {
      const std::size_t chunk = std::min<std::size_t>(out.size(), std::size_t{1} << 30);
      const ssize_t got = ::pread(fd_, out.data(), chunk, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw file_error(context_, "read", path_, errno);
      }
      if (got == 0)
        throw CheckpointError(context_.rank, context_.operation,
                              fmt::format("{} ends at byte {}, before the {} bytes it should "
                                          "still hold (the file is truncated)",
                                          path_.string(), offset, out.size()),
                              "restore from another checkpoint; this one is damaged");
      out = out.subspan(static_cast<std::size_t>(got));
      offset += static_cast<std::uint64_t>(got);
    }
  }

  /// Flushes the file's data and size to the device.
  void sync() {
    if (::fsync(fd_) != 0) throw file_error(context_, "fsync", path_, errno);
  }

  /// Closes it, reporting what close reports (NFS may report a failed write only here).
  void close() {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0) throw file_error(context_, "close", path_, errno);
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }

  int fd_ = -1;
  std::filesystem::path path_;
  FileContext context_;
};

/// Makes the names in `directory` (a rename, a new or removed file) durable.
inline void sync_directory(const std::filesystem::path& directory, FileContext context) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw file_error(context, "open", directory, errno);
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0) throw file_error(context, "fsync", directory, error);
}

/// Writes `path` atomically and durably: `write(file)` fills a new temporary file in the same
/// directory, which is then fsynced, renamed over `path`, and the directory fsynced. If anything
/// fails (an exception from `write`, a full disk, a read-only directory), the temporary file is
/// removed and `path` is as it was.
inline void write_atomically(const std::filesystem::path& path, FileContext context,
                             const std::function<void(File&)>& write) {
  const std::filesystem::path directory =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const std::filesystem::path temporary =
      directory / fmt::format("{}{}.{}", kTemporaryPrefix, path.filename().string(), ::getpid());
  ::unlink(temporary.c_str());  // left by a process with our pid that died
  File file = File::create(temporary, context);
  try {
    write(file);
    file.sync();
    file.close();
    if (::rename(temporary.c_str(), path.c_str()) != 0)
      throw file_error(context, "rename", path, errno);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  sync_directory(directory, context);
}

}  // namespace strata::checkpoint
