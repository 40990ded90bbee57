// router/replay.cpp: the LRU and Belady simulators. Belady needs each
// access's next use, computed in one backward pass over the flattened trace.
#include "router/replay.h"

#include <algorithm>
#include <limits>
#include <list>
#include <set>
#include <unordered_map>

#include "proto/error.h"

namespace sluice::router {
namespace {

uint64_t key_of(uint32_t layer, uint32_t expert) { return uint64_t{layer} << 32 | expert; }

void check_slots(const std::vector<ReplayRequest>& requests, uint32_t slots) {
  size_t widest = 0;
  for (const ReplayRequest& r : requests) widest = std::max(widest, r.experts.size());
  if (slots < widest) fail("replay: {} slots cannot hold a request of {} experts", slots, widest);
}

}  // namespace

std::vector<ReplayRequest> replay_requests(const std::vector<TraceToken>& trace) {
  std::vector<ReplayRequest> requests;
  for (const TraceToken& token : trace) {
    for (size_t l = 0; l < token.layers.size(); ++l) {
      ReplayRequest& r = requests.emplace_back();
      r.layer = static_cast<uint32_t>(l);
      for (uint32_t e : token.layers[l]) {
        if (std::find(r.experts.begin(), r.experts.end(), e) == r.experts.end()) r.experts.push_back(e);
      }
    }
  }
  return requests;
}

PolicyResult simulate_lru(const std::vector<ReplayRequest>& requests, uint32_t slots) {
  check_slots(requests, slots);
  PolicyResult result;
  std::list<uint64_t> order;  // front: most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  for (const ReplayRequest& r : requests) {
    for (uint32_t e : r.experts) {
      const uint64_t key = key_of(r.layer, e);
      ++result.accesses;
      if (auto it = where.find(key); it != where.end()) {
        ++result.hits;
        order.splice(order.begin(), order, it->second);
        continue;
      }
      ++result.misses;
      // The request's own keys are the most recent ones, so the least recent
      // key is never one of them while slots ≥ the request's width.
      if (where.size() == slots) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(key);
      where[key] = order.begin();
    }
  }
  return result;
}

PolicyResult simulate_belady(const std::vector<ReplayRequest>& requests, uint32_t slots) {
  check_slots(requests, slots);
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // Access i's key and the index of that key's next access.
  std::vector<uint64_t> keys;
  for (const ReplayRequest& r : requests) {
    for (uint32_t e : r.experts) keys.push_back(key_of(r.layer, e));
  }
  std::vector<uint64_t> next_use(keys.size(), kNever);
  std::unordered_map<uint64_t, uint64_t> later;
  for (size_t i = keys.size(); i-- > 0;) {
    if (auto it = later.find(keys[i]); it != later.end()) next_use[i] = it->second;
    later[keys[i]] = i;
  }

  PolicyResult result;
  // Cached keys by next use: the farthest (largest) is the victim; never-used
  // keys share kNever and the set orders them by key.
  std::set<std::pair<uint64_t, uint64_t>> by_next;
  std::unordered_map<uint64_t, uint64_t> cached;  // key → its next use
  size_t i = 0;
  for (const ReplayRequest& r : requests) {
    const size_t first = i;
    for (size_t j = 0; j < r.experts.size(); ++j, ++i) {
      const uint64_t key = keys[i];
      ++result.accesses;
      if (auto it = cached.find(key); it != cached.end()) {
        ++result.hits;
        by_next.erase({it->second, key});
      } else {
        ++result.misses;
        if (cached.size() == slots) {
          // Skip keys of this request (pinned): at most its width of them.
          auto victim = by_next.end();
          do {
            --victim;
          } while (std::find(keys.begin() + first, keys.begin() + i, victim->second) != keys.begin() + i);
          cached.erase(victim->second);
          by_next.erase(victim);
        }
      }
      cached[key] = next_use[i];
      by_next.insert({next_use[i], key});
    }
  }
  return result;
}

}  // namespace sluice::router
