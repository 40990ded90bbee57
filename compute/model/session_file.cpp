// compute/model/session_file.cpp: writing and checking session files. A load
// checks the header, the sizes against the file's length and the sequence's
// shape, and both checksums before it touches the sequence.
#include "compute/model/session_file.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <span>
#include <string_view>
#include <vector>

#include "compute/convert/atomic_file.h"
#include "proto/checksum.h"
#include "proto/error.h"

namespace sluice {
namespace {

static_assert(std::endian::native == std::endian::little, "session files are little-endian");

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'Q'};
constexpr uint32_t kHeaderBytes = 48;

struct Header {
  uint32_t version = kSessionFileVersion;
  uint32_t header_bytes = kHeaderBytes;
  uint64_t identity = 0;
  uint32_t position = 0;
  uint32_t media_runs = 0;
  uint64_t state_floats = 0;
  uint32_t payload_crc = 0;
};

template <typename T>
void put(std::string& out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(T));
}

template <typename T>
T get(std::string_view in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

std::string encode_header(const Header& h) {
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  put(out, 8, h.version);
  put(out, 12, h.header_bytes);
  put(out, 16, h.identity);
  put(out, 24, h.position);
  put(out, 28, h.media_runs);
  put(out, 32, h.state_floats);
  put(out, 40, h.payload_crc);
  put(out, 44, crc32_bytes(out.data(), 44));
  return out;
}

constexpr size_t kMediaRunBytes = 8 + sizeof(MediaRun::digest);

std::string encode_media(std::span<const MediaRun> runs) {
  std::string out(runs.size() * kMediaRunBytes, '\0');
  for (size_t i = 0; i < runs.size(); ++i) {
    put(out, i * kMediaRunBytes, runs[i].first);
    put(out, i * kMediaRunBytes + 4, runs[i].length);
    std::memcpy(out.data() + i * kMediaRunBytes + 8, runs[i].digest.data(), runs[i].digest.size());
  }
  return out;
}

std::vector<MediaRun> decode_media(std::string_view in) {
  std::vector<MediaRun> runs(in.size() / kMediaRunBytes);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].first = get<uint32_t>(in, i * kMediaRunBytes);
    runs[i].length = get<uint32_t>(in, i * kMediaRunBytes + 4);
    std::memcpy(runs[i].digest.data(), in.data() + i * kMediaRunBytes + 8, runs[i].digest.size());
  }
  return runs;
}

std::string identity_text(uint64_t identity) {
  return fmt::format("{:016x}", identity);
}

}  // namespace

void save_session(const std::string& path, uint64_t container_identity,
                  const SequenceState& sequence) {
  const SequenceSnapshot snapshot = sequence.snapshot();
  const size_t token_bytes = snapshot.tokens.size() * sizeof(int32_t);
  const size_t state_bytes = snapshot.state.size() * sizeof(float);
  const std::string media = encode_media(snapshot.media);
  Header header;
  header.identity = container_identity;
  header.position = static_cast<uint32_t>(snapshot.tokens.size());
  header.media_runs = static_cast<uint32_t>(snapshot.media.size());
  header.state_floats = snapshot.state.size();
  header.payload_crc = crc32_bytes(snapshot.tokens.data(), token_bytes);
  header.payload_crc = crc32_bytes(media.data(), media.size(), header.payload_crc);
  header.payload_crc = crc32_bytes(snapshot.state.data(), state_bytes, header.payload_crc);
  convert::AtomicFile file(path);
  const std::string head = encode_header(header);
  file.append(head.data(), head.size());
  file.append(snapshot.tokens.data(), token_bytes);
  file.append(media.data(), media.size());
  file.append(snapshot.state.data(), state_bytes);
  file.commit();
}

void load_session(const std::string& path, uint64_t container_identity, SequenceState& sequence) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("{}: cannot open the session file", path);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::string head(kHeaderBytes, '\0');
  if (file_size < kHeaderBytes || !in.read(head.data(), kHeaderBytes) ||
      std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    fail("{}: not a sluice session file (no SLUICESQ header)", path);
  }
  if (get<uint32_t>(head, 44) != crc32_bytes(head.data(), 44))
    fail("{}: the session file's header is damaged", path);
  Header h;
  h.version = get<uint32_t>(head, 8);
  h.header_bytes = get<uint32_t>(head, 12);
  h.identity = get<uint64_t>(head, 16);
  h.position = get<uint32_t>(head, 24);
  h.media_runs = get<uint32_t>(head, 28);
  h.state_floats = get<uint64_t>(head, 32);
  h.payload_crc = get<uint32_t>(head, 40);
  if ((h.version != kSessionFileVersion && h.version != 1) || h.header_bytes != kHeaderBytes) {
    fail("{}: session file version {} (header {} bytes); this sluice reads versions 1 and {}", path,
         h.version, h.header_bytes, kSessionFileVersion);
  }
  if (h.version == 1 && h.media_runs != 0)
    fail("{}: a version 1 session file with a nonzero reserved field", path);
  // A run holds at least one position, so there are never more runs than positions.
  if (h.media_runs > h.position) {
    fail("{}: the session names {} image runs in {} positions", path, h.media_runs, h.position);
  }
  if (h.identity != container_identity) {
    fail("{}: the session belongs to container {}, not to this container {}", path,
         identity_text(h.identity), identity_text(container_identity));
  }
  if (h.position > sequence.context()) {
    fail("{}: the session holds {} tokens, more than the context of {} (raise --ctx)", path,
         h.position, sequence.context());
  }
  // Every size is the sequence's own, checked against the file before anything is allocated.
  const size_t expected_floats = sequence.snapshot_floats(h.position);
  if (h.state_floats != expected_floats) {
    fail("{}: the session's state has {} values where this model's at position {} has {}", path,
         h.state_floats, h.position, expected_floats);
  }
  const size_t token_bytes = size_t{h.position} * sizeof(int32_t);
  const size_t state_bytes = expected_floats * sizeof(float);
  const size_t media_bytes = size_t{h.media_runs} * kMediaRunBytes;
  const uint64_t expected_size = kHeaderBytes + token_bytes + media_bytes + state_bytes;
  if (file_size != expected_size) {
    fail("{}: the session file is {} bytes where its header says {} (cut short or padded)", path,
         file_size, expected_size);
  }
  SequenceSnapshot snapshot;
  snapshot.tokens.resize(h.position);
  snapshot.state.resize(expected_floats);
  std::string media(media_bytes, '\0');
  if (!in.read(reinterpret_cast<char*>(snapshot.tokens.data()),
               static_cast<std::streamsize>(token_bytes)) ||
      !in.read(media.data(), static_cast<std::streamsize>(media_bytes)) ||
      !in.read(reinterpret_cast<char*>(snapshot.state.data()),
               static_cast<std::streamsize>(state_bytes))) {
    fail("{}: cannot read the session file", path);
  }
  uint32_t crc = crc32_bytes(snapshot.tokens.data(), token_bytes);
  crc = crc32_bytes(media.data(), media.size(), crc);
  crc = crc32_bytes(snapshot.state.data(), state_bytes, crc);
  if (crc != h.payload_crc)
    fail("{}: the session file is damaged (its checksum does not match)", path);
  snapshot.media = decode_media(media);
  try {
    sequence.restore(snapshot);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

}  // namespace sluice
