// ioworker/rpc_socket.h: where sluice-io's control socket lives and the
// listening socket itself: created mode 0600 in a directory only its owner can
// enter, a stale socket of a dead daemon replaced, a live one never touched,
// and the path removed again when the socket is destroyed.
#pragma once

#include <string>

namespace sluice::ioworker {

// Names an instance when none is given (segment "sluice-default").
inline constexpr const char* kDefaultInstance = "default";

// The directory sockets and the supervisor's state live in:
// $XDG_RUNTIME_DIR/sluice, /run/sluice for root, else /tmp/sluice-<uid>.
std::string runtime_dir();

// Throws Error naming `dir` unless it is a directory (not a symlink) owned by
// this user with no access for anyone else: another user who created it
// first could swap or read what is put in it.
void check_private_dir(const std::string& dir);
// Creates `dir` mode 0700 when missing (its parents too), then
// check_private_dir.
void make_private_runtime_dir(const std::string& dir);

// <runtime_dir()>/<instance>.sock
std::string default_socket_path(const std::string& instance);

// What --attach names: a path (it holds a '/') is used as it is; anything
// else is an instance name, resolved to its default socket after
// check_private_dir on the runtime directory (when it exists).
std::string resolve_socket(const std::string& path_or_instance);

// True when something accepts connections at `path` right now.
bool socket_answers(const std::string& path);

// Throws Error naming `path` when something other than a socket is there or
// a live daemon answers on it. A daemon checks this before it builds its
// segment, and ListeningSocket again when it binds.
void check_socket_free(const std::string& path);

class ListeningSocket {
 public:
  // Creates the parent directory (mode 0700) when missing (the runtime
  // directory must pass check_private_dir), refuses a path
  // where a live daemon answers (naming it), removes a stale socket, binds
  // with mode 0600 and listens. Throws Error naming the path.
  explicit ListeningSocket(const std::string& path);
  // Closes the descriptor and removes the path if it is still this socket.
  ~ListeningSocket();
  ListeningSocket(const ListeningSocket&) = delete;
  ListeningSocket& operator=(const ListeningSocket&) = delete;

  const std::string& path() const { return path_; }
  // Hands the descriptor over (to the event loop, which closes it); the path
  // is still removed by the destructor.
  int release_fd();

 private:
  std::string path_;
  int fd_ = -1;
  unsigned long inode_ = 0;
};

}  // namespace sluice::ioworker
