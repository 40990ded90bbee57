// tests/compute/vision/prompt_images_test.cpp: the images of a rendered
// prompt (compute/vision/prompt_images.h): data: URLs decoded (standard and
// URL-safe base64), everything else refused naming the part; the content
// digest changes with any pixel or the shape, not with the name; pad
// expansion and the rows of a prompt's tail, an image held in part included;
// the cap on all of a prompt's pixels.
#include "compute/vision/prompt_images.h"

#include <doctest/doctest.h>
#include <stb_image_write.h>

#include <string>
#include <vector>

#include "proto/error.h"

using namespace sluice;
using json = nlohmann::ordered_json;

namespace {

std::vector<uint8_t> png_of(const std::vector<uint8_t>& rgb, int width, int height) {
  std::vector<uint8_t> out;
  stbi_write_png_to_func(
      [](void* context, void* data, int size) {
        auto* bytes = static_cast<const uint8_t*>(data);
        static_cast<std::vector<uint8_t>*>(context)->insert(
            static_cast<std::vector<uint8_t>*>(context)->end(), bytes, bytes + size);
      },
      &out, width, height, 3, rgb.data(), width * 3);
  return out;
}

// Base64 written out here, independently of the decoder under test.
std::string base64(const std::vector<uint8_t>& bytes, bool url_safe = false) {
  const std::string alphabet =
      url_safe ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
               : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (i + 1 < bytes.size()) v |= uint32_t{bytes[i + 1]} << 8;
    if (i + 2 < bytes.size()) v |= bytes[i + 2];
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[v & 63] : '=';
  }
  return out;
}

json part_of(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

std::vector<uint8_t> picture(int width, int height, int seed) {
  std::vector<uint8_t> rgb(size_t(width) * height * 3);
  for (size_t i = 0; i < rgb.size(); ++i)
    rgb[i] = static_cast<uint8_t>((i * 37 + seed * 101) % 251);
  return rgb;
}

std::string refusal(const json& part) {
  try {
    image_of_part(part, "messages[0].content[1]");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

VisionConfig vision() {
  VisionConfig v;
  v.patch = 14;
  v.media_pad_id = 509;
  return v;
}

}  // namespace

TEST_CASE("a data: URL's image is decoded, standard or URL-safe base64, padded or not") {
  const std::vector<uint8_t> rgb = picture(30, 20, 1);
  const std::vector<uint8_t> png = png_of(rgb, 30, 20);
  for (const bool url_safe : {false, true}) {
    std::string data = base64(png, url_safe);
    for (const bool padded : {true, false}) {
      if (!padded) data.erase(data.find_last_not_of('=') + 1);
      const DecodedImage image = image_of_part(part_of("data:image/png;base64," + data), "p");
      CHECK(image.width == 30);
      CHECK(image.height == 20);
      CHECK(image.rgb == rgb);
    }
  }
  // The URL may also be the part's image_url itself.
  const DecodedImage bare = image_of_part(
      {{"type", "image_url"}, {"image_url", "data:image/png;base64," + base64(png)}}, "p");
  CHECK(bare.rgb == rgb);
}

TEST_CASE("anything but an inline image is refused, naming the part's URL") {
  const std::string url = "messages[0].content[1].image_url.url: ";
  CHECK(refusal(part_of("https://example.com/a.png")).starts_with(url + "an http(s) URL"));
  CHECK(refusal(part_of("http://localhost/a.png")).starts_with(url + "an http(s) URL"));
  CHECK(refusal(part_of("/etc/hostname")).starts_with(url + "not a data: URL"));
  CHECK(refusal(part_of("file:///etc/hostname")).starts_with(url + "not a data: URL"));
  CHECK(refusal(part_of("data:text/plain;base64,aGk=")).starts_with(url + "a data: URL must be"));
  CHECK(refusal(part_of("data:image/png,rawbytes")).starts_with(url + "a data: URL must be"));
  CHECK(refusal(part_of("data:image/png;base64,aGk*")) == url + "the base64 data after the comma: byte 3 is not base64");
  CHECK(refusal(part_of("data:image/png;base64,a")) == url + "the base64 data after the comma: a dangling character");
  CHECK(refusal(part_of("data:image/png;base64,aGk+aG-=")) ==
        url + "the base64 data after the comma: byte 6 mixes the URL-safe and standard alphabets");
  CHECK(refusal(part_of("data:image/png;base64,aGk aGk=")) == url + "the base64 data after the comma: byte 3 is not base64");
  CHECK(refusal(part_of("data:image/png;base64,aGVsbG8=")).starts_with(url + "not an image"));
  CHECK(refusal(part_of("data:image/png;base64,")).starts_with(url + "empty"));
  CHECK(refusal({{"type", "image_url"}}) ==
        "messages[0].content[1].image_url: expected {\"url\": \"data:image/...;base64,...\"}");
  CHECK(
      refusal({{"type", "image_url"}, {"image_url", {{"url", 7}}}}).starts_with(url + "expected"));
}

TEST_CASE("an image's digest is SHA-256 of its width, height and pixels") {
  const std::vector<uint8_t> rgb = picture(4, 2, 3);
  PromptImage a = prepare_image(DecodedImage{"a", 4, 2, rgb}, vision());
  // (image_cli_test checks the bytes against Python's hashlib.)
  PromptImage same = prepare_image(DecodedImage{"other name", 4, 2, rgb}, vision());
  CHECK(a.digest == same.digest);  // the name is not content
  std::vector<uint8_t> changed = rgb;
  changed[5] ^= 1;
  CHECK(prepare_image(DecodedImage{"a", 4, 2, changed}, vision()).digest != a.digest);
  // The same bytes read as another shape are another image.
  CHECK(prepare_image(DecodedImage{"a", 2, 4, rgb}, vision()).digest != a.digest);
  CHECK(a.grid.width == 2);  // too small to shrink: the 2-patch minimum each way
  CHECK(a.positions() == 1);
}

TEST_CASE("pads expand to their images' positions, and a prompt's tail takes its images' rows") {
  std::vector<PromptImage> images(2);
  images[0].grid = {2, 4};  // 2 positions
  images[0].digest[0] = 1;
  images[1].grid = {4, 6};  // 6 positions
  images[1].digest[0] = 2;
  const std::vector<int32_t> ids = {1, 509, 2, 3, 509, 4};
  const ExpandedPrompt expanded = expand_media(ids, 509, images);
  const std::vector<int32_t> tokens = {1, 509, 509, 2, 3, 509, 509, 509, 509, 509, 509, 4};
  CHECK(expanded.tokens == tokens);
  REQUIRE(expanded.media.size() == 2);
  CHECK(expanded.media[0] == MediaRun{1, 2, images[0].digest});
  CHECK(expanded.media[1] == MediaRun{5, 6, images[1].digest});
  CHECK(media_from(expanded.media, 2).size() == 1);
  CHECK(media_from(expanded.media, 0).size() == 2);

  const uint32_t hidden = 2;
  std::vector<std::vector<float>> rows(2);
  for (size_t i = 0; i < 2; ++i)
    for (uint32_t r = 0; r < expanded.media[i].length * hidden; ++r)
      rows[i].push_back(static_cast<float>(100 * i + r));
  std::vector<size_t> asked;
  const auto rows_of = [&](size_t i) -> const std::vector<float>& {
    asked.push_back(i);
    return rows[i];
  };
  // From position 7: the last 4 of the second image's 6 positions, and the first image not asked
  // for.
  const std::vector<float> tail = media_rows_from(expanded, 7, hidden, rows_of);
  CHECK(tail == std::vector<float>{104, 105, 106, 107, 108, 109, 110, 111});
  CHECK(asked == std::vector<size_t>{1});
  asked.clear();
  CHECK(media_rows_from(expanded, 11, hidden, rows_of).empty());
  CHECK(asked.empty());
  CHECK(media_rows_from(expanded, 0, hidden, rows_of).size() == (2 + 6) * hidden);

  const std::string wrong = [&] {
    try {
      expand_media(ids, 509, std::span(images).first(1));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(wrong == "the prompt has 2 media pad tokens (id 509) for 1 images: one each");
}

TEST_CASE("all of a prompt's images together are capped, the one over refused before decoding") {
  PromptImageSet set(vision(), 700);
  const chat::ImageResolver resolve = set.resolver();
  const std::string url = "data:image/png;base64," + base64(png_of(picture(20, 20, 1), 20, 20));
  const chat::ImagePlacement placed = resolve(part_of(url), 0, "messages[0].content[0]");
  CHECK(placed.width == 20);
  CHECK(placed.positions == 1);
  CHECK(set.images().size() == 1);
  try {
    resolve(part_of(url), 1, "messages[0].content[1]");
    FAIL("the second image is over the cap");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "messages[0].content[1].image_url.url: 20x20 is 400 pixels, over the 300 left for this "
          "prompt's images");
  }
  CHECK(set.images().size() == 1);
}
