// compute/serve/page.h: the web page served at / — one self-contained HTML
// document (no external assets, no build step): a streaming chat and a live
// view of the engine fed by /v1/chat/completions and /sluice/stats.
#pragma once

#include <string_view>

namespace sluice::serve {

std::string_view page_html();

}  // namespace sluice::serve
