// compute/serve/routes.h: the server's route table: every method and path it
// answers, the label /metrics counts each under, and the 405 (with Allow) a
// known path gives for any other method. The server registers its handlers
// only through install_routes, so a route added here is covered by all of it.
#pragma once

#include <httplib.h>

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::serve {

enum class RouteId {
  kPage,
  kHealth,
  kMetrics,
  kStats,
  kModels,
  kModel,
  kChatCompletions,
  kCompletions,
  kMessages,
  kCountTokens,
};

struct Route {
  RouteId id;
  std::string_view method;   // "GET" or "POST"
  std::string_view pattern;  // a regex over the whole path, as cpp-httplib matches it
  std::string_view label;    // the endpoint /metrics counts it under
  std::string_view example;  // a path it matches
};

std::span<const Route> route_table();

// The methods the path answers ("GET, HEAD", "POST"); empty when no route
// matches it.
std::string allowed_methods(std::string_view path);

// The /metrics label of a path: its route's, or "other" (stray paths and
// model ids would make unbounded label sets).
std::string_view endpoint_label(std::string_view path);

// Registers handler(route) for every route, and for every other method of
// a known path a handler answering 405 (OPTIONS: 204) with its Allow header.
void install_routes(httplib::Server& http,
                    const std::function<httplib::Server::Handler(const Route&)>& handler);

}  // namespace sluice::serve
