// compute/serve/connection.h: whether the client of a request is still
// there. cpp-httplib hands a handler no socket, so the connection's socket is
// found by both of its ends (address and port of each). It is polled, and
// read only to drop the rest of a body the server refused; never closed here.
#pragma once

#include <functional>

namespace httplib {
struct Request;
}

namespace sluice::serve {

// A check that is true once the peer of `request` has closed or reset its
// connection. Always false when the socket cannot be found.
std::function<bool()> peer_gone_check(const httplib::Request& request);

// Reads and drops what is left of a refused request's body (at most
// `limit` bytes, giving up after a short silence), so that closing the
// connection after the reply sends the peer a FIN, not a reset that could
// lose the reply.
void discard_unread_body(const httplib::Request& request, size_t limit);

}  // namespace sluice::serve
