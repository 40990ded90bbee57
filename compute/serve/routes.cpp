// compute/serve/routes.cpp: the route table and its registration. A wrong
// method's 405 body takes the shape of the API the path belongs to.
#include "compute/serve/routes.h"

#include <algorithm>
#include <regex>
#include <vector>

#include "compute/serve/api_error.h"

namespace sluice::serve {
namespace {

constexpr Route kRoutes[] = {
    {RouteId::kPage, "GET", "/", "/", "/"},
    {RouteId::kHealth, "GET", "/health", "/health", "/health"},
    {RouteId::kMetrics, "GET", "/metrics", "/metrics", "/metrics"},
    {RouteId::kStats, "GET", "/sluice/stats", "/sluice/stats", "/sluice/stats"},
    {RouteId::kModels, "GET", "/v1/models", "/v1/models", "/v1/models"},
    {RouteId::kModel, "GET", "/v1/models/(.+)", "/v1/models/{id}", "/v1/models/some-model"},
    {RouteId::kChatCompletions, "POST", "/v1/chat/completions", "/v1/chat/completions",
     "/v1/chat/completions"},
    {RouteId::kCompletions, "POST", "/v1/completions", "/v1/completions", "/v1/completions"},
    {RouteId::kMessages, "POST", "/v1/messages", "/v1/messages", "/v1/messages"},
    {RouteId::kCountTokens, "POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens",
     "/v1/messages/count_tokens"},
};

// The methods cpp-httplib can route; GET handlers answer HEAD as well.
enum class Verb { kGet, kPost, kPut, kPatch, kDelete, kOptions };
constexpr Verb kVerbs[] = {Verb::kGet,   Verb::kPost,   Verb::kPut,
                           Verb::kPatch, Verb::kDelete, Verb::kOptions};

std::string_view verb_name(Verb verb) {
  switch (verb) {
    case Verb::kGet:
      return "GET";
    case Verb::kPost:
      return "POST";
    case Verb::kPut:
      return "PUT";
    case Verb::kPatch:
      return "PATCH";
    case Verb::kDelete:
      return "DELETE";
    case Verb::kOptions:
      return "OPTIONS";
  }
  return "";
}

void add(httplib::Server& http, Verb verb, const std::string& pattern,
         httplib::Server::Handler handler) {
  switch (verb) {
    case Verb::kGet:
      http.Get(pattern, std::move(handler));
      break;
    case Verb::kPost:
      http.Post(pattern, std::move(handler));
      break;
    case Verb::kPut:
      http.Put(pattern, std::move(handler));
      break;
    case Verb::kPatch:
      http.Patch(pattern, std::move(handler));
      break;
    case Verb::kDelete:
      http.Delete(pattern, std::move(handler));
      break;
    case Verb::kOptions:
      http.Options(pattern, std::move(handler));
      break;
  }
}

const std::vector<std::regex>& route_regexes() {
  static const std::vector<std::regex> regexes = [] {
    std::vector<std::regex> out;
    for (const Route& route : kRoutes) out.emplace_back(std::string(route.pattern));
    return out;
  }();
  return regexes;
}

// The index in kRoutes of each route matching `path`.
std::vector<size_t> routes_at(std::string_view path) {
  std::vector<size_t> out;
  const std::string text(path);
  for (size_t i = 0; i < std::size(kRoutes); ++i)
    if (std::regex_match(text, route_regexes()[i])) out.push_back(i);
  return out;
}

}  // namespace

std::span<const Route> route_table() {
  return kRoutes;
}

std::string allowed_methods(std::string_view path) {
  std::string out;
  for (const size_t i : routes_at(path)) {
    if (out.find(kRoutes[i].method) != std::string::npos) continue;
    if (!out.empty()) out += ", ";
    out += kRoutes[i].method;
    if (kRoutes[i].method == "GET") out += ", HEAD";
  }
  return out;
}

std::string_view endpoint_label(std::string_view path) {
  const std::vector<size_t> at = routes_at(path);
  return at.empty() ? std::string_view("other") : kRoutes[at.front()].label;
}

void install_routes(httplib::Server& http,
                    const std::function<httplib::Server::Handler(const Route&)>& handler) {
  for (const Route& route : kRoutes)
    add(http, route.method == "GET" ? Verb::kGet : Verb::kPost, std::string(route.pattern),
        handler(route));
  // Each path once, with every method none of its routes has.
  std::vector<std::string_view> done;
  for (const Route& route : kRoutes) {
    if (std::find(done.begin(), done.end(), route.pattern) != done.end()) continue;
    done.push_back(route.pattern);
    for (const Verb verb : kVerbs) {
      bool taken = false;
      for (const Route& other : kRoutes)
        taken |= other.pattern == route.pattern && other.method == verb_name(verb);
      if (taken) continue;
      add(http, verb, std::string(route.pattern),
          [verb](const httplib::Request& req, httplib::Response& res) {
            const std::string allow = allowed_methods(req.path);
            res.set_header("Allow", allow);
            if (verb == Verb::kOptions) {
              res.status = 204;
              return;
            }
            const ApiError error(405, "invalid_request_error",
                                 fmt::format("{} {} is not allowed: the path answers {}",
                                             req.method, req.path, allow));
            res.status = 405;
            res.set_content(error.body(api_of(req.path)).dump(), "application/json");
          });
    }
  }
}

}  // namespace sluice::serve
