// compute/serve/page.h: the web page served at / — one self-contained HTML
// document, page.html, embedded at build time (embed_page.py; no external
// assets): a streaming chat and a live view of the engine fed by
// /v1/chat/completions and /sluice/stats, and a curl example for each API.
#pragma once

#include <string_view>

namespace sluice::serve {

std::string_view page_html();

}  // namespace sluice::serve
