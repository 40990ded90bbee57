// ioworker/rpc_socket.cpp: Unix socket paths and the listening socket. It
// unlinks only a path it bound itself or one no live process answers on.
#include "ioworker/rpc_socket.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/error.h"

namespace sluice::ioworker {
namespace {

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    fail("--socket {}: a Unix socket path must be 1 to {} bytes long", path, sizeof(address.sun_path) - 1);
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void make_dir(const std::string& dir) {
  struct stat info{};
  if (::stat(dir.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) fail("{}: exists and is not a directory", dir);
    return;
  }
  const std::string parent = parent_dir(dir);
  if (parent != dir && parent != "/" && parent != ".") make_dir(parent);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    fail("{}: cannot create the directory: {}", dir, std::strerror(errno));
  }
}

// Only a private runtime directory proves a daemon there is our own; one
// not made yet proves nothing either way.
void check_runtime_dir_if_present() {
  const std::string dir = runtime_dir();
  struct stat info{};
  if (::lstat(dir.c_str(), &info) == 0) check_private_dir(dir);
}

}  // namespace

std::string runtime_dir() {
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/sluice";
  }
  if (::geteuid() == 0) return "/run/sluice";
  return "/tmp/sluice-" + std::to_string(::geteuid());
}

void check_private_dir(const std::string& dir) {
  struct stat info{};
  if (::lstat(dir.c_str(), &info) != 0) fail("{}: cannot inspect the runtime directory: {}", dir, std::strerror(errno));
  if (S_ISLNK(info.st_mode)) fail("{}: the runtime directory is a symlink; refusing to use it", dir);
  if (!S_ISDIR(info.st_mode)) fail("{}: the runtime directory exists and is not a directory", dir);
  if (info.st_uid != ::geteuid()) {
    fail("{}: the runtime directory belongs to uid {}, not to you (uid {}); refusing to use it", dir, info.st_uid,
         ::geteuid());
  }
  if ((info.st_mode & 077) != 0) {
    fail("{}: the runtime directory has mode {:04o}; it must be private (0700) to be used", dir,
         info.st_mode & 07777);
  }
}

void make_private_runtime_dir(const std::string& dir) {
  make_dir(dir);
  check_private_dir(dir);  // also when it was there already, or another process won the race
}

std::string default_socket_path(const std::string& instance) { return runtime_dir() + "/" + instance + ".sock"; }

std::string resolve_socket(const std::string& path_or_instance) {
  if (path_or_instance.find('/') != std::string::npos) return path_or_instance;
  check_runtime_dir_if_present();
  return default_socket_path(path_or_instance);
}

bool socket_answers(const std::string& path) {
  const sockaddr_un address = socket_address(path);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool answered = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return answered;
}

void check_socket_free(const std::string& path) {
  if (parent_dir(path) == runtime_dir()) check_runtime_dir_if_present();
  struct stat existing{};
  if (::lstat(path.c_str(), &existing) != 0) return;
  if (!S_ISSOCK(existing.st_mode)) fail("{}: exists and is not a socket; refusing to replace it", path);
  if (socket_answers(path)) fail("{}: another sluice-io is already serving on this socket", path);
}

ListeningSocket::ListeningSocket(const std::string& path) : path_(path) {
  const sockaddr_un address = socket_address(path);
  if (parent_dir(path) == runtime_dir()) {
    make_private_runtime_dir(runtime_dir());
  } else {
    make_dir(parent_dir(path));
  }
  check_socket_free(path);
  ::unlink(path.c_str());  // left by a daemon that died, if anything is there
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("{}: socket: {}", path, std::strerror(errno));
  // The umask makes the socket 0600 from the moment it exists; chmod repeats
  // it in case the umask was already wider for another thread.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) {
    ::close(fd_);
    fail("{}: bind: {}", path, std::strerror(bind_errno));
  }
  struct stat bound_info{};
  if (::chmod(path.c_str(), 0600) != 0 || ::stat(path.c_str(), &bound_info) != 0 ||
      ::listen(fd_, SOMAXCONN) != 0) {
    const int error = errno;
    ::close(fd_);
    ::unlink(path.c_str());
    fail("{}: cannot listen: {}", path, std::strerror(error));
  }
  inode_ = bound_info.st_ino;
}

ListeningSocket::~ListeningSocket() {
  if (fd_ >= 0) ::close(fd_);
  struct stat info{};
  if (::lstat(path_.c_str(), &info) == 0 && info.st_ino == inode_) ::unlink(path_.c_str());
}

int ListeningSocket::release_fd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace sluice::ioworker
